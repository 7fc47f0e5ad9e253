"""Dedupe: a provider's repeat of an event already stored is answered 201 with the first
hook's id and "duplicate": true, and nothing is stored. Every preset, a header and a json
path; repeats inside one batch and across writer threads, batches and a kill -9; TTL
expiry; the node and per-tenant bounds (503 dedupe_quota); the sweeper's stale delete of a
key refreshed after it read it; the key carried to sinks; flagged hooks get none."""
import hashlib
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import LOOPBACK, github_sig, run_cli, wait_until
from receiver import Receiver


def src(dedupe=None, tenant=None, **kw):
    s = {"sinks": [{"type": "log"}]}
    if dedupe is not None:
        s["dedupe"] = dedupe
    if tenant:
        s["tenant"] = tenant
    s.update(kw)
    return s


def post(node, source, body=b"{}", headers=None):
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    return node.post(f"/webhooks/{source}", body, h)


def new_hook(r):
    assert r.status == 201, r
    assert "duplicate" not in r.json, f"expected a new hook, got a duplicate: {r.json}"
    return r.json["id"]


def duplicate_of(r, first):
    assert r.status == 201, r
    assert r.json == {"status": "accepted", "id": first, "duplicate": True}, r.json


def stored(node):
    """Hooks in the store, read back by `ankusa inspect hooks` (works beside a running node)."""
    return node.inspect()


PRESETS = [
    # (dedupe value, how a request carries key k)
    ("github", lambda k: ({"X-GitHub-Delivery": k}, b'{"zen":"x"}')),
    ("standard_webhooks", lambda k: ({"webhook-id": k}, b'{"type":"x"}')),
    ("svix", lambda k: ({"Svix-Id": k}, b'{"type":"x"}')),
    ("shopify", lambda k: ({"X-Shopify-Webhook-Id": k}, b'{"id":1}')),
    ("stripe", lambda k: ({}, json.dumps({"id": k, "object": "event"}).encode())),
    ({"header": "X-Event-ID", "ttl_seconds": 600}, lambda k: ({"x-event-id": k}, b"not json")),
    ({"json": "data.object.id"}, lambda k: ({}, json.dumps({"id": "top", "data": {"object": {"id": k}}}).encode())),
]


def test_each_preset_header_and_json_path(ankusa):
    sources = {f"s{i}": src(d) for i, (d, _) in enumerate(PRESETS)}
    node = ankusa(sources=sources)
    firsts = {}
    for i, (_, carry) in enumerate(PRESETS):
        h, body = carry("evt-A")
        first = new_hook(post(node, f"s{i}", body, h))
        duplicate_of(post(node, f"s{i}", body, h), first)
        h2, body2 = carry("evt-B")
        other = new_hook(post(node, f"s{i}", body2, h2))
        assert other != first
        firsts[f"s{i}"] = first
    hooks = stored(node)
    assert len(hooks) == 2 * len(PRESETS), "a duplicate is never stored"
    by_id = {h["id"]: h for h in hooks}
    for s, first in firsts.items():
        assert by_id[first]["dedupe_key"] == "evt-A" and by_id[first]["source_id"] == s
    m = node.metrics()
    assert m.value("ankusa_ingest_duplicates_total", instance="default") == len(PRESETS)
    assert m.value("ankusa_dedupe_keys", instance="default") == 2 * len(PRESETS)
    assert m.value("ankusa_sources_without_dedupe", instance="default") == 0


def test_key_rules_on_the_wire(ankusa):
    node = ankusa(sources={"js": src({"json": "event.id"}), "other": src({"json": "event.id"}),
                           "hd": src({"header": "x-id"})})
    # an integer id is a key, by its decimal text
    first = new_hook(post(node, "js", b'{"event":{"id":42}}'))
    duplicate_of(post(node, "js", b'{"event": {"id": 42, "retry": 1}}'), first)
    # the same key on another source is another scope
    new_hook(post(node, "other", b'{"event":{"id":42}}'))
    # no key: not JSON, missing path, a float, an array on the path, an empty string
    for body in (b"id=42", b'{"event":{}}', b'{"event":{"id":4.2}}', b'{"event":[{"id":1}]}',
                 b'{"event":{"id":""}}'):
        a, b = new_hook(post(node, "js", body)), new_hook(post(node, "js", body))
        assert a != b, f"{body!r} has no key: every post is a new hook"
    # a key over 200 bytes is kept as sha256:<hex> of it
    long_key = "k" * 201
    first = new_hook(post(node, "hd", b"x", {"x-id": long_key}))
    duplicate_of(post(node, "hd", b"y", {"x-id": long_key}), first)
    exact = "e" * 200
    new_hook(post(node, "hd", b"x", {"x-id": exact}))
    by_id = {h["id"]: h for h in stored(node)}
    assert by_id[first]["dedupe_key"] == "sha256:" + hashlib.sha256(long_key.encode()).hexdigest()
    assert sorted(h["dedupe_key"] for h in by_id.values() if "dedupe_key" in h) == sorted(
        ["42", "42", by_id[first]["dedupe_key"], exact])


def test_repeats_inside_one_batch_collapse_with_dense_seqs(ankusa):
    node = ankusa(sources={"hd": src({"header": "x-id"})}, env={"ANKUSA_TEST_COMMIT_DELAY_MS": "800"})
    plug = []
    t = threading.Thread(target=lambda: plug.append(post(node, "hd", b"plug")))
    t.start()
    time.sleep(0.25)  # the writer holds the plug's commit; what follows queues behind it
    keys = ["evt-1"] * 8 + ["evt-2", "evt-3"]
    with ThreadPoolExecutor(max_workers=10) as ex:
        rs = list(ex.map(lambda i: post(node, "hd", b"body-%d" % i, {"x-id": keys[i]}), range(10)))
    t.join()
    assert plug[0].status == 201
    assert all(r.status == 201 for r in rs), rs
    firsts = [r.json["id"] for r in rs[:8] if "duplicate" not in r.json]
    assert len(firsts) == 1, f"exactly one occurrence wins: {[r.json for r in rs[:8]]}"
    for r in rs[:8]:
        assert r.json["id"] == firsts[0]
    m = node.metrics()
    assert m.value("ankusa_commit_batch_size_count", instance="default") == 2, \
        "the plug, then everything else in one batch"
    assert m.value("ankusa_ingest_duplicates_total", instance="default") == 7
    hooks = stored(node)
    assert len(hooks) == 4
    assert sorted(h["seq"] for h in hooks) == [1, 2, 3, 4], "seqs stay dense"
    # the next hook continues them
    nxt = new_hook(post(node, "hd", b"next", {"x-id": "evt-9"}))
    assert {h["id"]: h["seq"] for h in stored(node)}[nxt] == 5


def test_repeat_parked_on_another_writer_threads_commit(ankusa):
    node = ankusa(config={"batcher": {"partitions": 2}}, sources={"hd": src({"header": "x-id"})},
                  env={"ANKUSA_TEST_COMMIT_DELAY_MS": "800"})
    out = {}

    def one(name, delay):
        time.sleep(delay)
        out[name] = post(node, "hd", name.encode(), {"x-id": "evt-1"})

    ts = [threading.Thread(target=one, args=("a", 0)), threading.Thread(target=one, args=("b", 0.3))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    first = new_hook(out["a"])
    duplicate_of(out["b"], first)
    assert out["b"].headers.get("retry-after") is None
    assert len(stored(node)) == 1


def test_repeat_across_batches_and_kill9(ankusa):
    node = ankusa(sources={"gh": src("github"), "plain": src()})
    first = new_hook(post(node, "gh", b"{}", {"X-GitHub-Delivery": "d-1"}))
    duplicate_of(post(node, "gh", b"{}", {"X-GitHub-Delivery": "d-1"}), first)
    node.kill9()
    node.start()
    duplicate_of(post(node, "gh", b"{}", {"X-GitHub-Delivery": "d-1"}), first)
    new_hook(post(node, "gh", b"{}", {"X-GitHub-Delivery": "d-2"}))
    m = node.metrics()
    assert m.value("ankusa_dedupe_keys", instance="default") == 2, "live keys counted at open"
    assert m.value("ankusa_sources_without_dedupe", instance="default") == 1
    assert len(stored(node)) == 2


def test_after_ttl_expiry_the_same_key_is_a_new_hook(ankusa):
    node = ankusa(sources={"hd": src({"header": "x-id", "ttl_seconds": 1})})
    first = new_hook(post(node, "hd", b"1", {"x-id": "evt-1"}))
    duplicate_of(post(node, "hd", b"2", {"x-id": "evt-1"}), first)
    time.sleep(1.2)
    second = new_hook(post(node, "hd", b"3", {"x-id": "evt-1"}))
    assert second != first
    duplicate_of(post(node, "hd", b"4", {"x-id": "evt-1"}), second)
    assert len(stored(node)) == 2


def test_node_and_tenant_bounds_answer_503_dedupe_quota(ankusa):
    cfg = {"dedupe": {"max_entries": 3, "max_entries_per_tenant": 2}}
    sources = {"a": src({"header": "x-id"}, tenant="t1"), "b": src({"header": "x-id"}, tenant="t2"),
               "plain": src(tenant="t1")}
    node = ankusa(config=cfg, sources=sources)

    def quota(r):
        assert r.status == 503, r
        assert r.json == {"error": "dedupe_quota"}
        assert r.headers.get("retry-after") == "60"

    k1 = new_hook(post(node, "a", b"", {"x-id": "k1"}))
    new_hook(post(node, "a", b"", {"x-id": "k2"}))
    quota(post(node, "a", b"", {"x-id": "k3"}))           # t1 holds 2 keys
    duplicate_of(post(node, "a", b"", {"x-id": "k1"}), k1)  # a repeat takes no new key
    new_hook(post(node, "b", b"", {"x-id": "k1"}))         # t2 has room; the node now holds 3
    quota(post(node, "b", b"", {"x-id": "k2"}))           # the node is full
    new_hook(post(node, "plain", b"no key"))              # a hook without a key is not bounded
    new_hook(post(node, "a", b"no key: not a header"))
    m = node.metrics()
    assert m.value("ankusa_ingest_refused_total", instance="default", reason="dedupe_quota") == 2
    hooks = stored(node)
    assert len(hooks) == 5 and all(h.get("dedupe_key") not in ("k3",) for h in hooks)
    assert not any(h["source_id"] == "b" and h.get("dedupe_key") == "k2" for h in hooks)
    # the counts survive a restart
    node.restart()
    quota(post(node, "b", b"", {"x-id": "k2"}))
    quota(post(node, "a", b"", {"x-id": "k4"}))
    assert len(stored(node)) == 5


def test_sweeper_removes_expired_keys(ankusa):
    node = ankusa(config={"dedupe": {"sweep_interval_ms": 50}},
                  sources={"hd": src({"header": "x-id", "ttl_seconds": 1})})
    for i in range(3):
        new_hook(post(node, "hd", b"", {"x-id": f"k{i}"}))
    assert node.metrics().value("ankusa_dedupe_keys", instance="default") == 3
    wait_until(lambda: node.metrics().value("ankusa_dedupe_keys", instance="default") == 0, 10,
               "the sweeper to remove the expired keys")
    assert node.metrics().value("ankusa_dedupe_swept_total", instance="default") == 3
    node.restart()
    assert node.metrics().value("ankusa_dedupe_keys", instance="default") == 0, "the deletes reached the store"


def test_a_key_refreshed_after_the_sweeper_read_it_survives(ankusa, tmp_path):
    """The sweeper reads an expired key; before it deletes it, a new hook with the same key
    refreshes it. The stale delete must not take the refreshed key: after it, and after a
    kill -9 and restart, the key still answers duplicate with the refreshed hook's id.
    Deterministic: the index's clock is moved by a file (ANKUSA_TEST_DEDUPE_CLOCK_FILE), and
    the sweeper is held between its read and its delete (ANKUSA_TEST_SWEEP_GATE)."""
    clock = tmp_path / "clock"
    clock.write_text("0")
    gate = tmp_path / "gate"
    gate.mkdir()
    env = {"ANKUSA_TEST_DEDUPE_CLOCK_FILE": clock, "ANKUSA_TEST_SWEEP_GATE": gate}
    node = ankusa(config={"dedupe": {"sweep_interval_ms": 20}},
                  sources={"hd": src({"header": "x-id", "ttl_seconds": 3600})}, env=env)
    first = new_hook(post(node, "hd", b"1", {"x-id": "evt-1"}))
    duplicate_of(post(node, "hd", b"2", {"x-id": "evt-1"}), first)
    clock.write_text(str(3601 * 1000))  # the key has expired
    wait_until(lambda: (gate / "read.1").exists(), 10, "the sweeper to read the expired key")
    assert (gate / "read.1").read_text().strip() == "1"
    refreshed = new_hook(post(node, "hd", b"3", {"x-id": "evt-1"}))  # between its read and its delete
    assert refreshed != first
    duplicate_of(post(node, "hd", b"4", {"x-id": "evt-1"}), refreshed)
    (gate / "go.1").touch()
    wait_until(lambda: (gate / "done.1").exists(), 10, "the sweeper's delete")
    duplicate_of(post(node, "hd", b"5", {"x-id": "evt-1"}), refreshed)
    m = node.metrics()
    assert m.value("ankusa_dedupe_swept_total", instance="default") == 1
    assert m.value("ankusa_dedupe_keys", instance="default") == 1
    node.kill9()
    gate2 = tmp_path / "gate2"
    gate2.mkdir()
    node.env["ANKUSA_TEST_SWEEP_GATE"] = gate2
    node.start()
    duplicate_of(post(node, "hd", b"6", {"x-id": "evt-1"}), refreshed)
    assert node.metrics().value("ankusa_dedupe_keys", instance="default") == 1
    assert not (gate2 / "read.1").exists(), "nothing else expired"
    assert len(stored(node)) == 2


def test_flagged_hooks_get_no_key(ankusa):
    secret = "gh-secret"
    node = ankusa(sources={"gh": src("github", on_verify_failure="accept_flag",
                                     verify={"type": "github", "secret": secret})})
    body = b'{"action":"opened"}'
    forged = {"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": "sha256=" + "0" * 64}
    a = new_hook(post(node, "gh", body, forged))
    b = new_hook(post(node, "gh", body, forged))
    assert a != b, "a flagged hook neither takes nor matches a key"
    signed = {"X-GitHub-Delivery": "d-1", "X-Hub-Signature-256": github_sig(secret, body)}
    real = new_hook(post(node, "gh", body, signed))
    assert real not in (a, b), "the forged hooks did not take the real event's key"
    duplicate_of(post(node, "gh", body, signed), real)
    # a forged request is never matched against keys either: it learns no stored id
    c = new_hook(post(node, "gh", body, forged))
    hooks = {h["id"]: h for h in stored(node)}
    assert len(hooks) == 4
    assert hooks[real]["dedupe_key"] == "d-1"
    assert all("dedupe_key" not in hooks[x] for x in (a, b, c))


def test_delivered_hook_carries_dedupe_and_idempotency_keys(ankusa):
    rx = Receiver()
    try:
        sink = [{"type": "http", "url": rx.url}]
        node = ankusa(config=dict(LOOPBACK), sources={
            "shop": {"tenant": "acme", "sinks": sink, "dedupe": "shopify"},
        })
        keyed = new_hook(post(node, "shop", b'{"id":1}', {"X-Shopify-Webhook-Id": "wh-77"}))
        plain = new_hook(post(node, "shop", b'{"id":2}'))
        ds = rx.wait_for(lambda ds: len(ds) >= 2)
        by_id = {d.id: d for d in ds}
        h = by_id[keyed].headers
        assert h["x-ankusa-dedupe-key"] == "wh-77"
        assert h["x-ankusa-idempotency-key"] == "acme:shop:wh-77"
        h = by_id[plain].headers
        assert "x-ankusa-dedupe-key" not in h
        assert h["x-ankusa-idempotency-key"] == plain
    finally:
        rx.close()


def test_boot_warning_per_source_without_dedupe(ankusa):
    node = ankusa(sources={"one": src(), "two": src(), "three": src("svix")})
    assert node.metrics().value("ankusa_sources_without_dedupe", instance="default") == 2
    log = node.log_text()
    warned = [ln for ln in log.splitlines() if "level=warning" in ln and "no dedupe" in ln]
    assert len(warned) == 2 and any("source=one" in ln for ln in warned) and any("source=two" in ln for ln in warned)


@pytest.mark.parametrize("dedupe,message", [
    ("gitlab", 'sources.a.dedupe: unknown value "gitlab"; expected one of github, standard_webhooks, svix, '
               "shopify, stripe"),
    ({"header": "x-id", "json": "id"}, "sources.a.dedupe: set exactly one of preset, header or json"),
    ({"json": "a..b"}, 'sources.a.dedupe.json: "a..b" has an empty segment'),
    ({"preset": "stripe", "ttl_seconds": 0}, "sources.a.dedupe.ttl_seconds must be between 1 and 315360000, got 0"),
])
def test_invalid_dedupe_config_exits_78(tmp_path, dedupe, message):
    cfg = tmp_path / "ankusa.yml"
    cfg.write_text(json.dumps({"node": {"data_dir": str(tmp_path / "d")},
                               "sources": {"a": {"sinks": [{"type": "log"}], "dedupe": dedupe}}}))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 78, p
    assert message in p.stderr, p.stderr

