"""The `google_pubsub` sink through the real binary against a loopback Pub/Sub stand-in
(pubsub_standin.py): every acknowledged hook becomes one topics.publish whose data is the
SinkMessageV1 (valid against the published schema) with the common metadata set as
attributes; the ordering key; token, metadata and no auth; the confirm rule (exactly one
message id); the classes of failure; and the consumer example pulling it back."""
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest

from gcs_standin import MetadataStandin
from helpers import LOOPBACK, REPO, SLOW, free_ports, principal, run_cli
from pubsub_standin import PubsubStandin

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import validate  # noqa: E402

PROJECT = "acme-prod"
TOKEN = "ya29.test-token-for-the-stand-in"
CONSUMER = REPO / "examples" / "consumers" / "pubsub_consumer.py"

_made = []


@pytest.fixture
def standin():
    def make(**kw):
        kw.setdefault("subscriptions", {"hooks-sub": "hooks"})
        p = PubsubStandin(PROJECT, ["hooks"], **kw)
        _made.append(p)
        return p
    yield make
    problems = []
    while _made:
        p = _made.pop()
        p.close()
        problems += p.violations
    assert problems == [], problems


@pytest.fixture
def metadata():
    md = MetadataStandin(expires_in=3599).start()
    yield md
    md.stop()
    assert md.violations == [], md.violations


def cfg(max_attempts=60):
    c = json.loads(json.dumps(LOOPBACK))
    c["dispatch"] = {"retry": {"base_ms": 50, "max_ms": 200, "max_attempts": max_attempts, "jitter": False},
                     "breaker_failures": 0}
    return c


def sink(ps, **over):
    s = {"type": "google_pubsub", "project": PROJECT, "topic": "hooks", "endpoint": ps.url, "auth": "none"}
    s.update(over)
    return s


def post_ok(node, src, body, headers=None):
    r = node.post(f"/webhooks/{src}", body, headers or {"Content-Type": "application/json"})
    assert r.status == 201, r
    return r.json["id"]


def wait_for(pred, timeout=20.0, what="condition"):
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def metric(node, result):
    return node.metrics().value("ankusa_deliveries_total", instance="default", sink="google_pubsub", result=result)


def dead_entries(node, n):
    wait_for(lambda: node.admin("/v1/dlq").json["total"] >= n, what=f"{n} dead-lettered")
    r = node.admin("/v1/dlq")
    assert r.json["total"] == n, r.json
    return r.json["entries"]


def permanent(e, reason):
    assert e["reason"] == f"{{sink, google_pubsub, {reason}}}" and e["attempts"] == 1, e


def exhausted(e, reason, attempts):
    assert e["reason"] == f"{{sink, google_pubsub, {{max_attempts, {reason}}}}}" and e["attempts"] == attempts, e


def consume(ps, n, token=None, idle=8, extra=()):
    args = ["/usr/bin/python3", str(CONSUMER), "--project", PROJECT, "--subscription", "hooks-sub",
            "--endpoint", ps.url, "--max", str(n), "--idle", str(idle), *extra]
    if token:
        args += ["--token", token]
    env = {k: v for k, v in os.environ.items() if k != "GOOGLE_OAUTH_ACCESS_TOKEN"}
    p = subprocess.run(args, env=env, capture_output=True, timeout=60 * SLOW)
    assert p.returncode == 0, p.stderr.decode()
    return [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]


def test_publishes_the_sink_message_with_attributes_and_the_consumer_pulls_it(ankusa, standin):
    ps = standin(auth="token", token=TOKEN)
    sources = {"gh": {"tenant": "acme", "dedupe": {"header": "X-Delivery"},
                      "sinks": [sink(ps, auth="token", token=TOKEN)]}}
    node = ankusa(config=cfg(), sources=sources)
    body = b'{"action":"opened"}'
    h1 = post_ok(node, "gh", body, {"Content-Type": "application/json", "X-Delivery": "e-1", "X-Event": "push"})
    binary = bytes(range(256)) * 8
    h2 = post_ok(node, "gh", binary, {"Content-Type": "application/octet-stream", "X-Delivery": "e-2"})
    msgs = wait_for(lambda: len(ps.snapshot("hooks")) >= 2 and ps.snapshot("hooks"), what="two messages")
    wait_for(lambda: metric(node, "ok") == 2, what="two ok deliveries")
    assert ps.auth_failures == 0
    by_id = {}
    for m in msgs:
        doc = validate(m["data"])
        by_id[doc["id"]] = (m, doc)
    m1, d1 = by_id[h1]
    assert base64.b64decode(d1["body_base64"]) == body
    assert d1["tenant_id"] == "acme" and d1["source_id"] == "gh" and d1["headers"]["x-event"] == "push"
    assert m1["attributes"] == {"ankusa_id": h1, "ankusa_source_id": "gh", "ankusa_tenant_id": "acme",
                                "ankusa_message_version": "1", "ankusa_idempotency_key": "acme:gh:e-1",
                                "content_type": "application/json", "ankusa_dedupe_key": "e-1"}
    assert m1["orderingKey"] is None, "no ordering key unless configured"
    m2, d2 = by_id[h2]
    assert base64.b64decode(d2["body_base64"]) == binary and m2["attributes"]["ankusa_dedupe_key"] == "e-2"
    for r in ps.publishes():
        assert r["path"] == f"/v1/projects/{PROJECT}/topics/hooks:publish"
        assert r["headers"]["authorization"] == f"Bearer {TOKEN}"
        assert r["headers"]["content-type"] == "application/json"
    lines = consume(ps, 2, token=TOKEN)
    assert sorted(x["id"] for x in lines) == sorted([h1, h2])
    assert all(x["sha256_ok"] and not x["duplicate"] for x in lines)
    assert {x["id"]: x["size"] for x in lines} == {h1: len(body), h2: len(binary)}
    assert len([r for r in ps.requests if r["kind"] == "acknowledge"]) >= 1
    assert TOKEN not in node.log_text()


def test_ordering_key_and_no_auth(ankusa, standin):
    ps = standin(auth="none")
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(ps, ordering_key="tenant-a")]}})
    hid = post_ok(node, "s", b"{}")
    (m,) = wait_for(lambda: ps.snapshot("hooks"), what="a message")
    assert json.loads(m["data"])["id"] == hid and m["orderingKey"] == "tenant-a"
    (r,) = ps.publishes()
    assert "authorization" not in r["headers"]
    assert r["json"]["messages"][0]["orderingKey"] == "tenant-a"


def test_metadata_token_is_fetched_once_and_used(ankusa, standin, metadata):
    ps = standin(auth="metadata", metadata=metadata)
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(ps, auth="metadata")]}},
                  env={"GCE_METADATA_HOST": metadata.host})
    ids = [post_ok(node, "s", json.dumps({"n": i}).encode()) for i in range(3)]
    wait_for(lambda: len(ps.snapshot("hooks")) == 3, what="three messages")
    assert sorted(json.loads(m["data"])["id"] for m in ps.snapshot("hooks")) == sorted(ids)
    assert ps.auth_failures == 0
    assert [r["headers"]["authorization"] for r in ps.publishes()] == ["Bearer md-token-1"] * 3
    assert len(metadata.requests) == 1, "the token is cached"


def test_a_wrong_token_is_transient(ankusa, standin):
    ps = standin(auth="token", token=TOKEN)
    node = ankusa(config=cfg(max_attempts=3), sources={"s": {"sinks": [sink(ps, auth="token", token="wrong")]}})
    post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    exhausted(e, "pubsub UNAUTHENTICATED", 3)
    assert ps.auth_failures == 3 and ps.snapshot("hooks") == []


def test_no_metadata_server_is_transient(ankusa, standin):
    ps = standin(auth="metadata", metadata=None)
    closed = free_ports(1)[0]
    node = ankusa(config=cfg(max_attempts=2), sources={"s": {"sinks": [sink(ps, auth="metadata")]}},
                  env={"GCE_METADATA_HOST": f"127.0.0.1:{closed}"})
    post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    exhausted(e, "token unavailable", 2)
    assert ps.requests == []


def test_invalid_argument_is_permanent(ankusa, standin):
    ps = standin()
    ps.always = {"status": 400, "code": "INVALID_ARGUMENT"}
    node = ankusa(config=cfg(max_attempts=5), sources={"s": {"sinks": [sink(ps)]}})
    hid = post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    assert e["id"] == hid
    permanent(e, "pubsub INVALID_ARGUMENT")
    assert len(ps.publishes()) == 1


def test_transient_statuses_and_bad_replies_are_retried(ankusa, standin):
    ps = standin()
    ps.faults = [{"status": 503, "code": "UNAVAILABLE"}, {"status": 404, "code": "NOT_FOUND"},
                 {"status": 403, "code": "PERMISSION_DENIED"}, {"status": 429, "code": "RESOURCE_EXHAUSTED"},
                 {"status": 502, "raw": "<html>proxy</html>"}, {"ids": 0}, {"ids": 2}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(ps)]}})
    hid = post_ok(node, "s", b'{"k":1}')
    wait_for(lambda: metric(node, "ok") == 1, what="ok after seven transient failures")
    assert [r["status"] for r in ps.publishes()] == [503, 404, 403, 429, 502, 200, 200, 200]
    assert [json.loads(m["data"])["id"] for m in ps.snapshot("hooks")] == [hid]
    assert node.admin("/v1/dlq").json["total"] == 0


@pytest.mark.parametrize("fault,reason", [({"status": 503, "code": "UNAVAILABLE"}, "pubsub UNAVAILABLE"),
                                          ({"ids": 2}, "bad reply"),
                                          ({"status": 502, "raw": "<html/>"}, "http 502")])
def test_transient_reasons(ankusa, standin, fault, reason):
    ps = standin()
    ps.always = fault
    node = ankusa(config=cfg(max_attempts=2), sources={"s": {"sinks": [sink(ps)]}})
    post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    exhausted(e, reason, 2)


def test_oversize_is_permanent_before_any_request(ankusa, standin):
    ps = standin()
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(ps, max_message_bytes=3000)]}})
    hid = post_ok(node, "s", b"x" * 2500)
    small = post_ok(node, "s", b"y" * 10)
    (e,) = dead_entries(node, 1)
    assert e["id"] == hid and e["attempts"] == 1
    assert re.fullmatch(r"\{sink, google_pubsub, message too large \(\d+ > 3000 bytes\)\}", e["reason"]), e
    wait_for(lambda: metric(node, "ok") == 1, what="the small one")
    (r,) = ps.publishes()
    assert json.loads(base64.b64decode(r["json"]["messages"][0]["data"]))["id"] == small


def test_guarded_sink_refuses_a_private_address_permanently(ankusa, standin):
    ps = standin()
    c = cfg()
    c["egress"] = {"allow_http": True, "guard_static_sources": True}
    node = ankusa(config=c, sources={"s": {"sinks": [sink(ps)]}})
    post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    permanent(e, "egress: 127.0.0.1 is not a public address")
    assert ps.requests == []


def test_config_errors_name_the_key(ankusa):
    base = {"type": "google_pubsub", "project": PROJECT, "topic": "hooks"}
    bad = [(dict(base, auth="token"), "sinks[0].token: required when auth is token"),
           (dict(base, topic="projects/x/topics/y"), "sinks[0].topic: not a topic id"),
           (dict(base, project="Bad Project"), "sinks[0].project: not a project id"),
           (dict(base, endpoint="ftp://x"), "sinks[0].endpoint: not an http(s):// origin")]
    for spec, want in bad:
        node = ankusa(start=False, sources={"s": {"sinks": [spec]}})
        p = run_cli("check-config", "--config", node.config_path)
        assert p.returncode != 0 and want in p.stdout + p.stderr, (spec, p.stdout, p.stderr)
    # a guarded sink may send the node's own metadata token only to Google
    node = ankusa(start=False, config={"egress": {"guard_static_sources": True}},
                  sources={"s": {"sinks": [dict(base, endpoint="https://pubsub.example.net")]}})
    p = run_cli("check-config", "--config", node.config_path)
    assert p.returncode != 0 and "sinks[0].auth: metadata sends the node's own token" in p.stdout + p.stderr
    node = ankusa(start=False, sources={"s": {"sinks": [dict(base, auth="token", token="sekrit-token-value")]}})
    p = run_cli("check-config", "--config", node.config_path)
    assert p.returncode == 0, p.stdout + p.stderr
    p = run_cli("print-config", "--config", node.config_path)
    assert "sekrit-token-value" not in p.stdout


def test_stop_during_a_publish_answers_it_and_the_restart_delivers(ankusa, standin):
    ps = standin()
    ps.faults = [{"delay": 3.0}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(ps)]}})
    hid = post_ok(node, "s", b'{"slow":1}')
    wait_for(lambda: ps.publishes(), what="the publish under way")
    assert node.stop() == 0
    node.start()
    # delivered once confirmed, before the stop (drained) or after the restart (redelivered)
    wait_for(lambda: settled(node), what="nothing left to deliver after the restart")
    assert hid in [json.loads(m["data"])["id"] for m in ps.snapshot("hooks")]


def settled(node):
    m = node.metrics()
    return all(m.value(f"ankusa_queue_{k}", instance="default") == 0 for k in ("pending", "scheduled", "inflight"))


def test_a_dlq_replay_carries_its_replay_id(ankusa, standin):
    ps = standin()
    ps.always = {"status": 400, "code": "INVALID_ARGUMENT"}
    node = ankusa(config=cfg(), sources={"s": {"tenant": "acme", "sinks": [sink(ps)]}})
    hid = post_ok(node, "s", b'{"r":1}')
    dead_entries(node, 1)
    ps.always = None
    r = node.admin("/v1/replays", "POST", body={"kind": "dlq", "source_id": "s"})
    assert r.status in (200, 202), r
    rid = r.json["id"]
    (m,) = wait_for(lambda: ps.snapshot("hooks"), what="the replayed message")
    doc = json.loads(m["data"])
    assert doc["id"] == hid and doc["replay_id"] == rid and m["attributes"]["ankusa_replay_id"] == rid


CLAIM_TOKEN = "claims-reader-token"


def test_a_large_body_goes_by_claim_and_the_consumer_redeems_it(ankusa, standin, tmp_path):
    ps = standin()
    port = free_ports(1)[0]
    c = cfg()
    c.update({"node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
              "admin": {"principals": [principal("reader", CLAIM_TOKEN, ["claims:read"], "*")]},
              "claim_check": {"port": port, "ip": "127.0.0.1",
                              "store": {"type": "local", "root": str(tmp_path / "c")}}})
    node = ankusa(config=c, sources={"s": {"tenant": "acme", "sinks": [sink(ps, inline_max_bytes=1000)]}})
    big = os.urandom(4000)
    hbig = post_ok(node, "s", big, {"Content-Type": "application/octet-stream"})
    (m,) = wait_for(lambda: ps.snapshot("hooks"), what="the message")
    doc = validate(m["data"])
    assert doc["id"] == hbig and doc["claim"].startswith("urn:ankusa:claim:v1:acme:") and "body_base64" not in doc
    assert doc["sha256"] == hashlib.sha256(big).hexdigest()
    (line,) = consume(ps, 1, extra=("--claim-base", f"http://127.0.0.1:{port}", "--claim-token", CLAIM_TOKEN))
    assert line["id"] == hbig and line["by_claim"] and line["sha256_ok"] and line["size"] == 4000


def test_a_slow_answer_times_out_and_is_retried(ankusa, standin):
    ps = standin()
    ps.faults = [{"delay": 1.5}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(ps, timeout_ms=500)]}})
    hid = post_ok(node, "s", b"{}")
    wait_for(lambda: metric(node, "ok") == 1, what="ok after the timeout")
    assert len(ps.publishes()) == 2
    assert hid in [json.loads(m["data"])["id"] for m in ps.snapshot("hooks")]
