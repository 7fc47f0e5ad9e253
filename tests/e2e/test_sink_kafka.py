"""The kafka sink through the real binary against librdkafka's mock cluster (tests/kafkamock,
a process of its own: it survives the node's kill -9). Every proof reads the records back
from the cluster: value = SinkMessageV1 (schema-valid, the body it carries = the bytes
posted), key, headers = the common metadata set, timestamp = received_at; and the classes
of failure through dispatch's metrics and GET /v1/dlq."""
import base64
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from helpers import REPO, SLOW, free_ports, post_many, principal, run_cli, uuid7_ms
from kafka_mock import KafkaMock

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import Consumer, validate  # noqa: E402

CONSUMER = REPO / "examples" / "consumers" / "kafka_consumer.py"
META = ["ankusa_id", "ankusa_source_id", "ankusa_tenant_id", "ankusa_message_version", "ankusa_idempotency_key",
        "content_type"]


@pytest.fixture
def kmock(tmp_path):
    km = KafkaMock(topics=["hooks:3", "other:1"], stderr_path=tmp_path / "kafkamock.stderr.log")
    yield km
    km.close()


def fast(**over):
    d = {"retry": {"base_ms": 50, "max_ms": 400, "max_attempts": 84, "jitter": False}, "breaker_failures": 0}
    d.update(over)
    return {"dispatch": d}


def ksink(km, **over):
    s = {"type": "kafka", "brokers": km.bootstrap, "topic": "hooks"}
    s.update(over)
    return s


def wait(pred, timeout=20.0, what="condition", every=0.1):
    deadline = time.time() + timeout * SLOW
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def metric(node, name, result):
    return node.metrics().get(name, instance="default", sink="kafka", result=result) or 0


def by_id(records):
    out = {}
    for r in records:
        out.setdefault(r.message()["id"], []).append(r)
    return out


def dlq(node):
    r = node.admin("/v1/dlq?limit=1000")
    assert r.status == 200, r
    return r.json


def post_ok(node, src, body, headers=None):
    r = node.post(f"/webhooks/{src}", body, headers or {"Content-Type": "application/json"})
    assert r.status == 201, r
    return r.json["id"]


def rdk_threads(pid, name="rdk:"):
    """librdkafka names its threads rdk:*: their count says whether a producer is open (one
    rdk:main per producer)."""
    n = 0
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            n += (t / "comm").read_text().startswith(name)
        except OSError:
            pass
    return n


# ------------------------------------------------------------------------- the record

def test_records_carry_the_message_key_headers_and_timestamp(ankusa, kmock):
    sources = {
        "src": {"tenant": "acme", "sinks": [ksink(kmock)]},
        "gh": {"tenant": "acme", "dedupe": "github", "sinks": [ksink(kmock, topic="other", key="fixed-key")]},
        "plain": {"sinks": [ksink(kmock)]},
    }
    node = ankusa(config=fast(), sources=sources)
    before = int(time.time() * 1000)
    posted = {}
    for i in range(12):
        body = json.dumps({"n": i, "pad": "x" * (i * 37)}).encode() + bytes([0, 255, i])
        posted[post_ok(node, "src" if i % 2 else "plain", body, {"Content-Type": "application/json",
                                                                 "X-Event": f"e{i}"})] = body
    gh_body = b'{"action":"opened"}'
    gh_id = post_ok(node, "gh", gh_body, {"Content-Type": "application/json", "X-GitHub-Delivery": "d-77",
                                          "Authorization": "Bearer secret-token"})
    after = int(time.time() * 1000)

    recs = wait(lambda: (lambda r: r if len(r) >= 12 else None)(kmock.consume("hooks")), what="12 records")
    assert len(recs) == 12, "one record per hook"
    got = by_id(recs)
    assert set(got) == set(posted)
    for hid, (rec,) in got.items():
        msg = validate(rec.value)  # the published schema
        d = Consumer().handle(rec.value)
        assert d.body == posted[hid], "the body the message carries is the bytes posted"
        assert msg["id"] == hid and msg["idempotency_key"] == hid and msg["size"] == len(posted[hid])
        assert list(msg)[:3] == ["v", "id", "source_id"] and rec.value == json.dumps(
            msg, separators=(",", ":"), ensure_ascii=False).encode(), "compact JSON, keys in the documented order"
        assert msg["headers"]["x-event"].startswith("e")
        tenant = msg["tenant_id"]
        src = msg["source_id"]
        assert (src, tenant) in (("src", "acme"), ("plain", tenant))
        assert rec.key == f"{tenant or ''}/{src}".encode(), "default key <tenant_id>/<source_id>"
        assert [n for n, _ in rec.header_list] == META, "the common metadata set, in order"
        assert rec.headers == {"ankusa_id": hid, "ankusa_source_id": src, "ankusa_tenant_id": tenant or "",
                               "ankusa_message_version": "1", "ankusa_idempotency_key": hid,
                               "content_type": "application/json"}
        assert rec.timestamp == msg["received_at"], "record timestamp = received_at"
        assert before - 5 <= rec.timestamp <= after + 5 and abs(uuid7_ms(hid) - rec.timestamp) < 1000
    # keyed by one key: one partition
    assert len({r.partition for r in recs if r.key == b"acme/src"}) == 1

    (g,) = wait(lambda: kmock.consume("other"), what="the github record")
    msg = validate(g.value)
    assert msg["id"] == gh_id and msg["dedupe_key"] == "d-77"
    assert msg["idempotency_key"] == "acme:gh:d-77"
    assert "authorization" not in msg["headers"], "credentials are never forwarded"
    assert g.key == b"fixed-key", "a static key"
    assert g.headers["ankusa_dedupe_key"] == "d-77" and g.headers["ankusa_idempotency_key"] == "acme:gh:d-77"
    assert [n for n, _ in g.header_list] == META + ["ankusa_dedupe_key"]
    assert base64.b64decode(msg["body_base64"]) == gh_body

    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 13, what="13 ok deliveries")
    assert metric(node, "ankusa_dispatch_attempts_total", "error") == 0


def test_a_body_above_inline_max_goes_by_claim_and_the_consumer_redeems_it(ankusa, kmock, tmp_path):
    (claim_port,) = free_ports(1)
    token = "kafka-claims-reader"
    config = {
        "node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
        "admin": {"principals": [principal("reader", token, ["claims:read"], "*")]},
        "claim_check": {"port": claim_port, "ip": "127.0.0.1",
                        "store": {"type": "local", "root": str(tmp_path / "claims")}},
    }
    config.update(fast())
    node = ankusa(config=config, sources={"big": {"tenant": "acme", "sinks": [ksink(kmock, inline_max_bytes=1000)]}})
    big = os.urandom(300 * 1024)
    small = b"s" * 1000  # at the threshold: inline
    big_id, small_id = post_ok(node, "big", big), post_ok(node, "big", small)
    recs = wait(lambda: (lambda r: r if len(r) >= 2 else None)(by_id(kmock.consume("hooks"))), what="2 records")
    (b,), (sm,) = recs[big_id], recs[small_id]
    mb, ms = validate(b.value), validate(sm.value)
    assert "body_base64" not in mb and mb["claim"].startswith("urn:ankusa:claim:v1:acme:"), mb
    assert mb["size"] == len(big) and len(b.value) < 2000, "the record carries the ref, not the body"
    assert "claim" not in ms and base64.b64decode(ms["body_base64"]) == small
    p = subprocess.run(["/usr/bin/python3", str(CONSUMER), "--brokers", kmock.bootstrap, "--topic", "hooks",
                        "--until-eof", "--claim-base", f"http://127.0.0.1:{claim_port}", "--token", token],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    lines = {x["id"]: x for x in map(json.loads, p.stdout.splitlines())}
    assert lines[big_id]["by_claim"] and lines[big_id]["sha256_ok"] and lines[big_id]["size"] == len(big)
    assert not lines[small_id]["by_claim"]
    assert Consumer(claim_base=f"http://127.0.0.1:{claim_port}", token=token).handle(b.value).body == big


# -------------------------------------------------------------------- confirm and classes

def test_lost_ack_is_retried_by_the_producer_not_by_dispatch(ankusa, kmock):
    """The produce answer is held past the producer's request timeout (half of
    produce_timeout_ms): librdkafka retries the batch itself with the same producer id and
    sequence, and the delivery is confirmed by that retry within produce_timeout_ms: one
    attempt, no dispatch retry, so no second record with a new sequence. A real broker drops
    the retried copy as a duplicate sequence; librdkafka 2.0.2's mock checks sequences only
    for transactional producers (rd_kafka_mock_validate_records), so its log may hold the
    same record twice: identical bytes, which the consumer's idempotency_key dedupe folds."""
    node = ankusa(config=fast(), sources={"s": {"tenant": "t", "sinks": [ksink(kmock, produce_timeout_ms=6000)]}})
    warm = post_ok(node, "s", b'{"warm":1}')
    wait(lambda: warm in by_id(kmock.consume("hooks")), what="the warm-up record")
    kmock.lost_ack("hooks", 4500)  # > socket timeout 3000, < produce timeout 6000
    t0 = time.time()
    hid = post_ok(node, "s", b'{"lost":"ack"}')
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 2, timeout=15, what="confirmed")
    took = time.time() - t0
    assert took >= 2.9, f"confirmed after {took:.2f}s: the answer was not held (no lost ack happened)"
    assert metric(node, "ankusa_dispatch_attempts_total", "ok") == 2
    assert metric(node, "ankusa_dispatch_attempts_total", "error") == 0, "dispatch never resent it"
    assert metric(node, "ankusa_dispatch_attempts_total", "timeout") == 0
    copies = by_id(kmock.consume("hooks"))[hid]
    assert 1 <= len(copies) <= 2, copies
    assert len({c.value for c in copies}) == 1 and len({c.partition for c in copies}) == 1
    c = Consumer()
    seen = [c.handle(x.value).duplicate for x in copies]
    assert seen.count(False) == 1, "the consumer processes it once"
    print(f"lost ack: confirmed after {took:.2f}s by the producer's own retry, {len(copies)} cop(ies) in the mock's log")


def test_unknown_topic_is_transient_until_the_topic_exists(ankusa, kmock):
    kmock.unknown("later")
    node = ankusa(config=fast(), sources={"s": {"sinks": [ksink(kmock, topic="later", produce_timeout_ms=1500)]}})
    hid = post_ok(node, "s", b'{"wait":"for the topic"}')
    wait(lambda: metric(node, "ankusa_dispatch_attempts_total", "error") >= 2, what="two failed attempts")
    assert dlq(node)["total"] == 0, "an unknown topic is never dead-lettered"
    assert metric(node, "ankusa_deliveries_total", "ok") == 0
    kmock.unknown("later", False)
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 1, timeout=30, what="delivered once it exists")
    recs = by_id(kmock.consume("later"))
    assert list(recs) == [hid]
    assert dlq(node)["total"] == 0


def test_unknown_topic_spends_the_retry_budget_with_its_reason(ankusa, kmock):
    kmock.unknown("nowhere")
    node = ankusa(config=fast(retry={"base_ms": 50, "max_ms": 100, "max_attempts": 3, "jitter": False}),
                  sources={"s": {"sinks": [ksink(kmock, topic="nowhere", produce_timeout_ms=1000)]}})
    hid = post_ok(node, "s", b"x")
    wait(lambda: dlq(node)["total"] == 1, what="dead-lettered after the budget")
    (e,) = dlq(node)["entries"]
    assert e["id"] == hid and e["attempts"] == 3, e
    assert e["reason"] == "{sink, kafka, {max_attempts, unknown_topic_or_partition}}", e
    assert metric(node, "ankusa_dispatch_attempts_total", "error") == 3, "transient: every attempt of the budget"


def test_record_over_max_record_bytes_is_dead_lettered_before_produce(ankusa, kmock):
    node = ankusa(config=fast(), sources={"s": {"sinks": [ksink(kmock, max_record_bytes=2000)]}})
    big = post_ok(node, "s", b"B" * 1800)  # base64 2400 > 2000 with the key
    small = post_ok(node, "s", b"small")
    wait(lambda: dlq(node)["total"] == 1, what="the big one dead-lettered")
    (e,) = dlq(node)["entries"]
    assert e["id"] == big
    assert e["reason"].startswith("{sink, kafka, record_too_large: "), e
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 1, what="the small one delivered")
    assert list(by_id(kmock.consume("hooks"))) == [small], "the big one never reached the broker"
    assert metric(node, "ankusa_dispatch_attempts_total", "error") == 1, "permanent: one attempt"


def test_broker_message_too_large_is_permanent(ankusa, kmock):
    node = ankusa(config=fast(), sources={"s": {"sinks": [ksink(kmock)]}})
    warm = post_ok(node, "s", b"warm")
    wait(lambda: warm in by_id(kmock.consume("hooks")), what="warm-up")
    kmock.push_errors(1, 10)  # MESSAGE_TOO_LARGE on the next produce request
    hid = post_ok(node, "s", b"refused by the broker")
    wait(lambda: dlq(node)["total"] == 1, what="dead-lettered")
    (e,) = dlq(node)["entries"]
    assert e["id"] == hid and e["reason"] == "{sink, kafka, message_too_large}", e
    assert hid not in by_id(kmock.consume("hooks"))


def test_fatal_producer_error_replaces_the_producer(ankusa, kmock):
    """OUT_OF_ORDER_SEQUENCE_NUMBER is fatal to librdkafka's idempotent producer: every later
    produce on it would fail. The sink answers what it held (transient), replaces it, and the
    retry goes out on a new producer."""
    node = ankusa(config=fast(), sources={"s": {"sinks": [ksink(kmock, produce_timeout_ms=1500)]}})
    warm = post_ok(node, "s", b"warm")
    wait(lambda: warm in by_id(kmock.consume("hooks")), what="warm-up")
    kmock.push_errors(1, 45)
    hid = post_ok(node, "s", b"after the fatal error")
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 2, what="delivered on a new producer")
    assert metric(node, "ankusa_dispatch_attempts_total", "error") == 1
    assert "producer fatal error; it is replaced" in node.log_text()
    later = post_ok(node, "s", b"and the next one")
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 3, what="the new producer keeps working")
    assert {hid, later} <= set(by_id(kmock.consume("hooks")))
    assert dlq(node)["total"] == 0


# kill -9 and outages prove durability in the normal run; the sanitizer run covers the
# same code paths in the other tests (a SIGKILL exercises no teardown)
@pytest.mark.slow
def test_all_brokers_down_then_back_loses_nothing(ankusa, kmock):
    node = ankusa(config=fast(), sources={"s": {"sinks": [ksink(kmock, produce_timeout_ms=1500)]}})
    warm = post_ok(node, "s", b"warm")
    wait(lambda: warm in by_id(kmock.consume("hooks")), what="warm-up")
    kmock.down(-1)
    ids = [post_ok(node, "s", b'{"down":%d}' % i) for i in range(10)]
    wait(lambda: metric(node, "ankusa_dispatch_attempts_total", "error") >= 10, what="attempts failing")
    assert metric(node, "ankusa_deliveries_total", "ok") == 1
    kmock.up(-1)
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 11, timeout=40, what="all delivered")
    got = by_id(kmock.consume("hooks"))
    assert set(ids) <= set(got), "nothing lost"
    assert dlq(node)["total"] == 0
    c = Consumer()
    firsts = [c.handle(r.value) for rs in got.values() for r in rs]
    assert sorted(d.message["id"] for d in firsts if not d.duplicate) == sorted(ids + [warm])


def test_producer_closes_when_idle_and_reopens(ankusa, kmock):
    node = ankusa(config=fast(), sources={"s": {"sinks": [ksink(kmock, produce_timeout_ms=500,
                                                                   idle_timeout_ms=1500)]}})
    assert rdk_threads(node.pid) == 0, "no producer before the first delivery"
    a = post_ok(node, "s", b"a")
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 1, what="first")
    assert rdk_threads(node.pid) > 0
    wait(lambda: rdk_threads(node.pid) == 0, timeout=10, what="the idle producer closed")
    b = post_ok(node, "s", b"b")
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 2, what="second, on a new producer")
    assert set(by_id(kmock.consume("hooks"))) == {a, b}


def test_sinks_with_one_destination_share_one_producer(ankusa, kmock):
    sources = {"a": {"sinks": [ksink(kmock)]}, "b": {"tenant": "t", "sinks": [ksink(kmock, topic="other")]},
               "c": {"sinks": [ksink(kmock, client="another-client")]}}
    node = ankusa(config=fast(), sources=sources)
    ids = [post_ok(node, "a", b"a"), post_ok(node, "b", b"b")]
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 2, what="a and b delivered")
    assert rdk_threads(node.pid, "rdk:main") == 1, "sources a and b share one producer"
    ids.append(post_ok(node, "c", b"c"))
    wait(lambda: metric(node, "ankusa_deliveries_total", "ok") == 3, what="c delivered")
    assert rdk_threads(node.pid, "rdk:main") == 2, "another client id is another destination"
    got = set(by_id(kmock.consume("hooks"))) | set(by_id(kmock.consume("other")))
    assert got == set(ids)


def test_guarded_sink_refused_by_egress_is_permanent(ankusa, kmock):
    port = kmock.brokers[0].rsplit(":", 1)[1]
    node = ankusa(config=dict(fast(), egress={"guard_static_sources": True}),
                  sources={"s": {"sinks": [ksink(kmock, brokers=f"localhost:{port}")]}})
    hid = post_ok(node, "s", b"nope")
    wait(lambda: dlq(node)["total"] == 1, what="dead-lettered by the guard")
    (e,) = dlq(node)["entries"]
    assert e["id"] == hid
    assert e["reason"].startswith("{sink, kafka, egress: ") and "not a public address" in e["reason"], e
    assert hid not in by_id(kmock.consume("hooks"))


def test_guarded_sink_with_loopback_allowed_delivers(ankusa, kmock):
    node = ankusa(config=dict(fast(), egress={"guard_static_sources": True, "allow_cidrs": ["127.0.0.0/8"]}),
                  sources={"s": {"sinks": [ksink(kmock)]}})
    hid = post_ok(node, "s", b"allowed")
    wait(lambda: hid in by_id(kmock.consume("hooks")), what="delivered")


# ------------------------------------------------------------------------- config

@pytest.mark.parametrize("sink,line", [
    ({"idle_timeout_ms": 3000}, "sources.s.sinks[0].idle_timeout_ms: must be 0 or at least produce_timeout_ms + 1000"),
    ({"brokers": []}, "sources.s.sinks[0].brokers"),
    ({"topic": None}, 'sources.s.sinks[0]: missing required key "topic"'),
    ({"sasl": {"mechanism": "plain", "username": "u"}}, 'sources.s.sinks[0].sasl: missing required key "password"'),
    ({"sasl": {"mechanism": "gssapi", "username": "u", "password": "pw"}}, "sources.s.sinks[0].sasl.mechanism"),
    ({"max_record_bytes": 0}, "sources.s.sinks[0].max_record_bytes"),
], ids=["idle-below-produce", "no-brokers", "no-topic", "sasl-partial", "sasl-mechanism", "max-record"])
def test_config_errors_name_the_key(ankusa, sink, line):
    s = {"type": "kafka", "brokers": "k1:9092,k2:9092", "topic": "t"}
    s.update(sink)
    s = {k: v for k, v in s.items() if v is not None}
    node = ankusa(sources={"s": {"sinks": [s]}}, start=False)
    p = run_cli("check-config", "--config", str(node.config_path))
    assert p.returncode == 78, p.stderr
    assert line in p.stderr, p.stderr


def test_guarded_literal_broker_refused_at_check_and_secrets_never_printed(ankusa):
    node = ankusa(config={"egress": {"guard_static_sources": True}},
                  sources={"s": {"sinks": [{"type": "kafka", "brokers": ["10.1.2.3:9092"], "topic": "t"}]}},
                  start=False)
    p = run_cli("check-config", "--config", str(node.config_path))
    assert p.returncode == 78 and "sources.s.sinks[0].brokers[0]: egress: " in p.stderr, p.stderr
    node2 = ankusa(name="n2", sources={"s": {"sinks": [{
        "type": "kafka", "brokers": "k1:9092", "topic": "t", "idle_timeout_ms": 0, "ssl": True,
        "sasl": {"mechanism": "scram_sha_512", "username": "svc", "password": "pw-very-secret-123"}}]}}, start=False)
    p = run_cli("check-config", "--config", str(node2.config_path))
    assert p.returncode == 0, p.stderr
    p = run_cli("print-config", "--config", str(node2.config_path))
    assert p.returncode == 0, p.stderr
    assert "pw-very-secret-123" not in p.stdout + p.stderr
    assert "scram_sha_512" in p.stdout and "k1:9092" in p.stdout


# ------------------------------------------------------------------------- kill -9

def consumer_lines(km, topic):
    p = subprocess.run(["/usr/bin/python3", str(CONSUMER), "--brokers", km.bootstrap, "--topic", topic,
                        "--until-eof"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()], p.stderr


# kill -9 and outages prove durability in the normal run; the sanitizer run covers the
# same code paths in the other tests (a SIGKILL exercises no teardown)
@pytest.mark.slow
def test_kill9_while_publishing_every_acked_hook_is_consumed(ankusa, kmock):
    node = ankusa(config=fast(), sources={"s": {"tenant": "t", "sinks": [ksink(kmock)]}})
    acked = set()
    rounds = 5
    for rnd in range(rounds):
        if rnd:
            node.start()
        results, stop = [], threading.Event()

        def publish():
            i = 0
            while not stop.is_set():
                chunk = [b'{"round":%d,"i":%d}' % (rnd, i + k) for k in range(40)]
                i += len(chunk)
                got = post_many(node.http_port, chunk, path="/webhooks/s", workers=8, timeout=10)
                results.extend(got)
                if any(isinstance(r, Exception) for _, r in got):
                    return  # the node is gone

        t = threading.Thread(target=publish)
        t.start()
        time.sleep(0.3 + 0.1 * rnd)
        node.kill9()
        stop.set()
        t.join(60)
        ok = [r.json["id"] for _, r in results if not isinstance(r, Exception) and r.status == 201]
        assert ok, f"round {rnd}: nothing acked before the kill"
        assert any(isinstance(r, Exception) for _, r in results), f"round {rnd}: the kill came after publishing"
        acked.update(ok)
    node.start()
    wait(lambda: acked <= set(by_id(kmock.consume("hooks"))), timeout=60, what="every acked hook consumed",
         every=0.5)
    lines, err = consumer_lines(kmock, "hooks")
    firsts = [x["id"] for x in lines if not x["duplicate"]]
    assert len(firsts) == len(set(firsts)), "each idempotency key is processed once"
    assert acked <= set(firsts), f"acked but never consumed: {sorted(acked - set(firsts))[:5]}"
    assert all(x["sha256_ok"] and x["idempotency_key"] == x["id"] for x in lines)
    dups = len(lines) - len(firsts)
    print(f"kill -9 x{rounds}: acked {len(acked)}, records {len(lines)}, redelivered copies {dups}")
