"""wal.type none (direct mode) through the real binary: the hook is published to every sink
of its source inside the request and the 201 comes only after each confirmed (an HTTP
receiver that holds its answer, and librdkafka's mock cluster); one sink refusing, or a
sink slower than wal.publish_timeout_ms, is a 503 store_unavailable with Retry-After and
nothing stored; boot and the admin API refuse a source without a durable sink; the node
runs the edge role only, answers /v1/wal 409 wal_disabled and writes no hook. Dedupe under
none keeps no key (each request is a new hook; every sink gets the same idempotency key),
and the quarantine pen is inspect/purge only (a release is 409 wal_disabled)."""
import json
import threading
import time

import pytest

from helpers import (LOOPBACK, PERSISTENT_STORE, SLOW, admin_json, github_sig, http_request, run_cli)
from kafka_mock import KafkaMock
from receiver import Receiver

SECRET = "direct-gh-secret"


@pytest.fixture
def kmock(tmp_path):
    km = KafkaMock(topics=["hooks:3"], stderr_path=tmp_path / "kafkamock.stderr.log")
    yield km
    km.close()


def none_cfg(timeout_ms=8000, **more):
    cfg = dict(LOOPBACK, wal={"type": "none", "publish_timeout_ms": timeout_ms})
    cfg.update(more)
    return cfg


def http_sink(rx):
    return {"type": "http", "url": rx.url, "timeout_ms": 30000}


def kafka_sink(km, **over):
    s = {"type": "kafka", "brokers": km.bootstrap, "topic": "hooks", "produce_timeout_ms": 2000}
    s.update(over)
    return s


def refused(node, reason):
    return node.metrics().get("ankusa_ingest_refused_total", instance="default", reason=reason) or 0


def assert_503(r):
    assert r.status == 503, r
    assert r.json == {"error": "store_unavailable"}, r.json
    assert r.headers.get("retry-after") == "1", r.headers


def no_hook_stored(node):
    assert node.metrics().value("ankusa_store_hooks", instance="default") == 0
    assert node.inspect() == []


# --------------------------------------------------------------------------- the ack

def test_201_only_after_every_sink_confirmed(ankusa, kmock, tmp_path):
    hold = 0.6
    rx = Receiver(lambda d, n: (204, {}, hold))  # the receiver has the hook, its confirm waits
    try:
        node = ankusa(config=none_cfg(), sources={"demo": {"sinks": [http_sink(rx), kafka_sink(kmock)]}})
        body = b'{"order":42}'
        t0 = time.time()
        r = node.post("/webhooks/demo", body, {"Content-Type": "application/json"})
        t1 = time.time()
        assert r.status == 201, r
        assert set(r.json) == {"status", "id"} and r.json["status"] == "accepted"
        hid = r.json["id"]
        got = rx.for_id(hid)
        assert len(got) == 1 and got[0].body == body
        # the receiver saw it before the client got the 201, and the 201 waited for its answer
        assert t0 <= got[0].at < t1
        assert t1 - got[0].at >= hold * 0.9, (t1 - got[0].at)
        assert got[0].headers["x-ankusa-idempotency-key"] == hid
        recs = [x for x in kmock.consume("hooks") if x.message()["id"] == hid]
        assert len(recs) == 1, recs
        assert recs[0].headers["ankusa_idempotency_key"] == hid
        m = node.metrics()
        for sink in ("http", "kafka"):
            assert m.get("ankusa_delivery_latency_seconds_count", instance="default", sink=sink, result="ok") == 1
        # nothing of it in this node: no queue, no hook
        no_hook_stored(node)
        assert node.admin("/v1/wal").status == 409 and node.admin("/v1/wal").json == {"error": "wal_disabled"}
        health = node.admin("/health").json
        assert health["roles"] == ["edge"], health
        assert node.admin("/v1/dlq").status == 409
        r = admin_json(node, "POST", "/v1/replays", {"kind": "dlq"})
        assert r.status == 409 and r.json["error"] == "role_not_enabled", r
        log = node.log_text()
        assert "wal.type=none: a 201 means every sink confirmed" in log
        assert "wal.type=disk" not in log
    finally:
        rx.close()


def test_a_refusing_sink_is_503_and_nothing_acked(ankusa, kmock):
    fail = {"on": True}
    rx = Receiver(lambda d, n: (500 if fail["on"] else 204, {}, 0))
    try:
        node = ankusa(config=none_cfg(timeout_ms=4000),
                      sources={"demo": {"sinks": [http_sink(rx), kafka_sink(kmock)]}})
        r = node.post("/webhooks/demo", b'{"n":1}')
        assert_503(r)
        assert refused(node, "publish_failed") == 1
        assert node.metrics().get("ankusa_delivery_latency_seconds_count", instance="default", sink="http",
                                  result="error") == 1
        # the broker down: the receiver confirms, the publish does not
        fail["on"] = False
        kmock.down(-1)
        t0 = time.time()
        r = node.post("/webhooks/demo", b'{"n":2}')
        assert_503(r)
        assert time.time() - t0 < 4.0 + 2.0 * SLOW
        assert refused(node, "publish_failed") + refused(node, "publish_timeout") == 2
        kmock.up(-1)
        deadline = time.time() + 20 * SLOW
        while True:
            r = node.post("/webhooks/demo", b'{"n":3}')
            if r.status == 201 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert r.status == 201, r
        no_hook_stored(node)
    finally:
        rx.close()


def test_a_slow_sink_past_the_deadline_is_503_in_time(ankusa):
    rx = Receiver(lambda d, n: (204, {}, 3.0))
    try:
        node = ankusa(config=none_cfg(timeout_ms=700), sources={"demo": {"sinks": [http_sink(rx)]}})
        t0 = time.time()
        r = node.post("/webhooks/demo", b'{"slow":true}')
        took = time.time() - t0
        assert_503(r)
        assert 0.65 <= took < 0.7 + 0.5 * SLOW, took
        assert refused(node, "publish_timeout") == 1
        # the late confirm lands on a publish that was answered: counted, nothing else
        time.sleep(3.0)
        m = node.metrics()
        assert m.get("ankusa_delivery_latency_seconds_count", instance="default", sink="http", result="ok") == 1
        assert refused(node, "publish_timeout") == 1
        no_hook_stored(node)
    finally:
        rx.close()


def test_many_at_once_each_waits_for_its_own_confirms(ankusa, rx):
    node = ankusa(config=none_cfg(), sources={"demo": {"sinks": [http_sink(rx)]}})
    results = [None] * 64

    def one(i):
        results[i] = http_request(node.http_port, "POST", "/webhooks/demo", body=b'{"i":%d}' % i,
                                  headers={"Content-Type": "application/json"})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [r.json["id"] for r in results if r.status == 201]
    assert len(ids) == 64, [r for r in results if r.status != 201]
    assert set(ids) <= rx.ids()


def test_a_large_body_is_checked_in_before_the_sinks(ankusa, kmock, rx):
    node = ankusa(config=none_cfg(),
                  sources={"demo": {"sinks": [http_sink(rx), kafka_sink(kmock, inline_max_bytes=100)]}})
    small, big = b'{"s":1}', b'{"big":"' + b"x" * 5000 + b'"}'
    rs = node.post("/webhooks/demo", small)
    rb = node.post("/webhooks/demo", big)
    assert rs.status == rb.status == 201, (rs, rb)
    msgs = {x.message()["id"]: x.message() for x in kmock.consume("hooks")}
    assert "claim" not in msgs[rs.json["id"]]
    ref = msgs[rb.json["id"]]["claim"]
    assert ref.startswith("urn:ankusa:claim:v1:default:"), ref
    # the http sink has no threshold: it got the body itself
    assert rx.for_id(rb.json["id"])[0].body == big
    no_hook_stored(node)


# --------------------------------------------------------------------------- durable sinks

def test_boot_refuses_a_source_without_a_durable_sink(ankusa, tmp_path):
    node = ankusa(config=none_cfg(), sources={"ok": {"sinks": [{"type": "http", "url": "http://127.0.0.1:9/x"}]},
                                             "logonly": {"sinks": [{"type": "log"}]}}, start=False)
    node.start(wait=False)
    assert node.wait_exit(30) == 78, node.log_tail()
    assert "sources.logonly: wal.type none needs a durable sink" in node.log_text()
    assert "sources.ok" not in node.log_text()
    r = run_cli("check-config", "--config", str(node.config_path))
    assert r.returncode == 78 and "sources.logonly: wal.type none needs a durable sink" in r.stderr + r.stdout


def test_admin_api_refuses_a_source_without_a_durable_sink(ankusa, rx):
    node = ankusa(config=none_cfg(source_store=PERSISTENT_STORE), sources={"demo": {"sinks": [http_sink(rx)]}})
    r = admin_json(node, "POST", "/v1/tenants/acme/sources", {"name": "weak", "sinks": [{"type": "log"}]})
    assert r.status == 400, r
    assert r.json["error"] == "invalid_source" and "durable sink" in r.json["message"], r.json
    r = admin_json(node, "POST", "/v1/tenants/acme/sources", {"name": "good", "sinks": [http_sink(rx)]})
    assert r.status == 201, r
    r = admin_json(node, "PUT", "/v1/tenants/acme/sources/good", {"sinks": [{"type": "log"}]})
    assert r.status == 400 and r.json["error"] == "invalid_source", r
    r = node.post("/webhooks/good", b'{"api":1}')
    assert r.status == 201, r
    assert rx.for_id(r.json["id"])


# --------------------------------------------------------------------------- roles and config

def test_roles_dispatch_and_storage_are_dropped(ankusa, tmp_path):
    node = ankusa(config=none_cfg(node={"roles": ["edge", "dispatch", "storage"]}),
                  sources={"demo": {"sinks": [{"type": "http", "url": "http://127.0.0.1:9/x"}]}}, start=False)
    r = run_cli("check-config", "--config", str(node.config_path))
    assert r.returncode == 0, r.stderr
    assert "roles=[:edge] sources=demo wal=none" in r.stdout, r.stdout
    node.config["node"]["roles"] = ["dispatch", "storage"]
    node.write_config()
    r = run_cli("check-config", "--config", str(node.config_path))
    assert r.returncode == 78 and "wal: :none requires the :edge role" in r.stderr + r.stdout
    node.config["node"]["roles"] = ["claim_check"]  # a claim_check-only node is allowed
    node.write_config()
    r = run_cli("check-config", "--config", str(node.config_path))
    assert r.returncode == 0 and "roles=[:claim_check]" in r.stdout, r.stdout + r.stderr


# --------------------------------------------------------------------------- dedupe and quarantine

def test_dedupe_keeps_no_key_and_every_sink_gets_the_idempotency_key(ankusa, rx):
    node = ankusa(config=none_cfg(),
                  sources={"demo": {"dedupe": {"header": "X-Event-ID"}, "sinks": [http_sink(rx)]}})
    h = {"X-Event-ID": "evt-1", "Content-Type": "application/json"}
    a = node.post("/webhooks/demo", b'{"try":1}', h)
    b = node.post("/webhooks/demo", b'{"try":2}', h)
    assert a.status == b.status == 201, (a, b)
    assert "duplicate" not in a.json and "duplicate" not in b.json
    assert a.json["id"] != b.json["id"]
    keys = {d.headers["x-ankusa-idempotency-key"] for d in rx.snapshot()}
    assert keys == {"default:demo:evt-1"}
    assert {d.headers["x-ankusa-dedupe-key"] for d in rx.snapshot()} == {"evt-1"}
    assert node.metrics().value("ankusa_dedupe_keys", instance="default") == 0
    no_hook_stored(node)


def test_quarantine_is_held_but_never_released(ankusa, rx):
    node = ankusa(config=none_cfg(), sources={
        "q_src": {"verify": {"type": "github", "secret": SECRET}, "on_verify_failure": "quarantine",
                  "sinks": [http_sink(rx)]},
        "flag_src": {"verify": {"type": "github", "secret": SECRET}, "on_verify_failure": "accept_flag",
                     "sinks": [http_sink(rx)]}})
    body = b'{"forged":true}'
    r = node.post("/webhooks/q_src", body, {"X-Hub-Signature-256": github_sig("wrong", body)})
    assert r.status == 202 and r.json["status"] == "quarantined", r
    entries = node.admin("/v1/quarantine").json["entries"]
    assert len(entries) == 1 and entries[0]["source_id"] == "q_src"
    r = admin_json(node, "POST", "/v1/replays", {"kind": "quarantine", "source_id": "q_src"})
    assert r.status == 409 and r.json["error"] == "wal_disabled", r
    assert len(node.admin("/v1/quarantine").json["entries"]) == 1
    assert rx.snapshot() == []
    # a good signature is published; accept_flag publishes the flagged hook
    ok = node.post("/webhooks/q_src", body, {"X-Hub-Signature-256": github_sig(SECRET, body)})
    assert ok.status == 201, ok
    flagged = node.post("/webhooks/flag_src", body, {"X-Hub-Signature-256": github_sig("wrong", body)})
    assert flagged.status == 201, flagged
    assert rx.for_id(ok.json["id"]) and rx.for_id(flagged.json["id"])
    no_hook_stored(node)
    assert admin_json(node, "DELETE", "/v1/quarantine?source_id=q_src").status in (200, 202, 204)


# --------------------------------------------------------------------------- the drain

def test_sigterm_answers_what_waits_on_a_sink_and_serves_through_the_drain_delay(ankusa):
    rx = Receiver(lambda d, n: (204, {}, 1.0))
    try:
        node = ankusa(config=none_cfg(listener={"drain_delay_ms": 1500}),
                      sources={"demo": {"sinks": [http_sink(rx)]}})
        out = {}

        def post(key):
            out[key] = http_request(node.http_port, "POST", "/webhooks/demo", body=b'{"k":"%s"}' % key.encode(),
                                    headers={"Content-Type": "application/json"})

        first = threading.Thread(target=post, args=("inflight",))
        first.start()
        time.sleep(0.3)
        node.proc.send_signal(15)  # SIGTERM by PID
        time.sleep(0.2)
        during = threading.Thread(target=post, args=("during_delay",))
        during.start()
        first.join(10)
        during.join(10)
        assert out["inflight"].status == 201, out["inflight"]
        assert out["during_delay"].status == 201, out["during_delay"]
        assert node.wait_exit(30) == 0, node.log_tail()
        assert {out[k].json["id"] for k in out} <= rx.ids()
    finally:
        rx.close()
