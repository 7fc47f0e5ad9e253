"""The claim check-in (src/dispatch/checkin.c, docs/claim-check.md, docs/sink-message.md):
a body above a sink's inline_max_bytes is checked in once per hook, before the sink runs,
packed per tenant, and its ref is kept with the hook for every sink and every retry.

Driven through the test_echo sink (test builds), whose line names the ref and the sha256
it was handed; the ref is redeemed at the node's own claim gateway (role claim_check)."""
import hashlib
import os
import time
import urllib.request


from helpers import Metrics, Server, principal, post_many, wait_until, SLOW

TOKEN = "claims-reader-token"
PRINCIPALS = [principal("reader", TOKEN, ["claims:read", "metrics:read"], "*")]


def echo_lines(path):
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        parts = line.split()
        rec = {"prefix": parts[0], "id": parts[1], "source": parts[2], "attempt": int(parts[3])}
        for p in parts[4:]:
            k, _, v = p.partition("=")
            rec[k] = v
        out.append(rec)
    return out


def node_with(tmp_path, sinks, stores=None, extra=None):
    claim_port = __import__("helpers").free_ports(1)[0]
    cc = {"port": claim_port, "ip": "127.0.0.1"}
    if stores is not None:
        cc["stores"] = stores
    else:
        cc["store"] = {"type": "local", "root": str(tmp_path / "claims")}
    cfg = {
        "node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
        "admin": {"principals": PRINCIPALS},
        "claim_check": cc,
        "dispatch": {"retry": {"base_ms": 50, "max_ms": 200, "jitter": False}, "breaker_failures": 0},
        "sources": {"big": {"tenant": "acme", "sinks": sinks}},
    }
    if extra:
        cfg.update(extra)
    s = Server(tmp_path / "node", config=cfg)
    s.claim_port = claim_port
    return s


def redeem(node, ref, token=TOKEN):
    _, _, rest = ref.partition("urn:ankusa:claim:v1:")
    tenant, _, cid = rest.partition(":")
    req = urllib.request.Request(f"http://127.0.0.1:{node.claim_port}/v1/claims/{tenant}/{cid}")
    req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read()


def counted(node, name, **want):
    """The sum of a metric's series whose labels include `want`."""
    r = node.admin("/metrics", token=TOKEN)
    assert r.status == 200, r
    return sum(v for labels, v in Metrics(r.body.decode()).series(name).items()
               if all((k, w) in labels for k, w in want.items()))


def pack_files(root):
    return sorted(p for p in root.rglob("*") if p.is_file() and "tenant=" in str(p))


def test_a_large_body_goes_by_one_claim_to_every_sink(tmp_path):
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    node = node_with(tmp_path, [
        {"type": "test_echo", "path": str(a), "inline_max_bytes": 1000},
        {"type": "test_echo", "path": str(b), "prefix": "b", "inline_max_bytes": 1000},
    ])
    node.start()
    try:
        big = os.urandom(5 * 1024 * 1024)
        small = b"x" * 1000  # at the threshold: inline
        r1 = node.post("/webhooks/big", big)
        r2 = node.post("/webhooks/big", small)
        assert r1.status == 201 and r2.status == 201, (r1, r2)
        wait_until(lambda: len(echo_lines(a)) >= 2 and len(echo_lines(b)) >= 2, 20 * SLOW, "both sinks")
        la = {x["id"]: x for x in echo_lines(a)}
        lb = {x["id"]: x for x in echo_lines(b)}
        big_id, small_id = r1.json["id"], r2.json["id"]
        assert "claim" not in la[small_id] and "claim" not in lb[small_id]
        ref = la[big_id]["claim"]
        assert ref.startswith("urn:ankusa:claim:v1:acme:"), ref
        assert lb[big_id]["claim"] == ref, "the two sinks of one hook got different refs"
        assert la[big_id]["sha256"] == hashlib.sha256(big).hexdigest()
        assert redeem(node, ref) == big
        packs = pack_files(tmp_path / "claims")
        assert len(packs) == 1, packs
        assert "claims/tenant=acme/dt=" in str(packs[0])
    finally:
        node.stop()


def test_a_retry_reuses_the_stored_ref(tmp_path):
    a, later = tmp_path / "a.log", tmp_path / "later" / "b.log"
    node = node_with(tmp_path, [
        {"type": "test_echo", "path": str(a), "inline_max_bytes": 10},
        {"type": "test_echo", "path": str(later), "inline_max_bytes": 10},  # fails until its dir exists
    ])
    node.start()
    try:
        r = node.post("/webhooks/big", b"y" * 5000)
        assert r.status == 201
        wait_until(lambda: len(echo_lines(a)) == 1, 10 * SLOW, "first sink")
        time.sleep(0.5 * SLOW)  # a few failed attempts of the second sink
        later.parent.mkdir()
        wait_until(lambda: len(echo_lines(later)) == 1, 10 * SLOW, "second sink after retries")
        first, second = echo_lines(a)[0], echo_lines(later)[0]
        assert second["attempt"] > 1, second
        assert second["claim"] == first["claim"]
        assert len(pack_files(tmp_path / "claims")) == 1
        # and across a restart: the ref is in the store
        node.stop()
        node.start()
        assert len(pack_files(tmp_path / "claims")) == 1
    finally:
        node.stop()


def test_claims_of_one_moment_share_a_pack_per_tenant(tmp_path):
    a = tmp_path / "a.log"
    node = node_with(tmp_path, [{"type": "test_echo", "path": str(a), "inline_max_bytes": 100}])
    node.config["sources"]["other"] = {"tenant": "beta",
                                       "sinks": [{"type": "test_echo", "path": str(a), "inline_max_bytes": 100}]}
    node.write_config()
    node.start()
    try:
        bodies = [os.urandom(2000 + i) for i in range(40)]
        res = post_many(node.http_port, bodies, path="/webhooks/big", workers=40)
        res += post_many(node.http_port, bodies[:10], path="/webhooks/other", workers=10)
        assert all(getattr(x, "status", None) == 201 for _, x in res), res
        wait_until(lambda: len(echo_lines(a)) >= 50, 20 * SLOW, "50 deliveries")
        packs = pack_files(tmp_path / "claims")
        assert {p.parts[-3] for p in packs} == {"tenant=acme", "tenant=beta"}
        assert len(packs) < 50, f"{len(packs)} packs for 50 claims: nothing was packed together"
        by_id = {x["id"]: x for x in echo_lines(a)}
        for body, resp in res:
            line = by_id[resp.json["id"]]
            assert redeem(node, line["claim"]) == body
    finally:
        node.stop()


def test_failover_to_the_next_store_and_failure_is_retried(tmp_path):
    a = tmp_path / "a.log"
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "claims").write_text("a file where the claims directory should be: every put fails")
    good = tmp_path / "good"
    node = node_with(tmp_path, [{"type": "test_echo", "path": str(a), "inline_max_bytes": 10}],
                     stores=[{"type": "local", "root": str(blocked)}, {"type": "local", "root": str(good)}])
    node.start()
    try:
        r = node.post("/webhooks/big", b"z" * 3000)
        assert r.status == 201
        wait_until(lambda: len(echo_lines(a)) == 1, 10 * SLOW, "delivered through the second store")
        assert len(pack_files(good)) == 1
        assert redeem(node, echo_lines(a)[0]["claim"]) == b"z" * 3000
    finally:
        node.stop()


def test_a_failed_check_in_fails_the_attempt_and_is_counted(tmp_path):
    a = tmp_path / "a.log"
    root = tmp_path / "claims-later"
    root.mkdir()
    (root / "claims").write_text("not a directory yet: every put fails")
    node = node_with(tmp_path, [{"type": "test_echo", "path": str(a), "inline_max_bytes": 10}],
                     stores=[{"type": "local", "root": str(root)}])
    node.start()
    try:
        r = node.post("/webhooks/big", b"w" * 3000)
        assert r.status == 201
        wait_until(lambda: counted(node, "ankusa_claim_check_failures_total", op="check_in") >= 2,
                   10 * SLOW, "check-in failures counted")
        assert echo_lines(a) == [], "a body went out without its claim"
        (root / "claims").unlink()
        wait_until(lambda: len(echo_lines(a)) == 1, 15 * SLOW, "delivered once the store works")
        assert echo_lines(a)[0]["attempt"] > 1
    finally:
        node.stop()
