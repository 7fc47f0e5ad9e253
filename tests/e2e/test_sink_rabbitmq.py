"""The rabbitmq sink against a real rabbitmq-server (one per session, rabbitmq_server.py):
what reaches a queue bound to the exchange (SinkMessageV1 bytes valid against the schema,
persistent, message_id, headers), the confirm rule (a returned message is a transient
"unroutable" failure until a queue is bound), the max_inflight bound ("busy", nothing sent),
a broker that goes away and comes back (reconnect after retry_ms, nothing lost), kill -9 of
the node while it publishes (every acked hook consumed at least once, the example consumer
sees each idempotency key once), the egress guard and the config rules."""
import base64
import hashlib
import json
import re
import subprocess
import sys
import threading
import time

import pytest

from helpers import REPO, SLOW, free_ports, post_many, principal, run_cli
from rabbitmq_server import RabbitServer, available

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import validate  # noqa: E402

CONSUMER = REPO / "examples" / "consumers" / "rabbitmq_consumer.py"


@pytest.fixture(scope="session")
def broker():
    why = available()
    if why:
        pytest.fail(f"cannot start rabbitmq-server: {why}", pytrace=False)
    srv = RabbitServer().start()
    yield srv
    srv.stop()  # raises if a process of the broker is left


def fast_dispatch(**over):
    d = {"retry": {"base_ms": 50, "max_ms": 300, "max_attempts": 200, "jitter": False}, "breaker_failures": 0}
    d.update(over)
    return d


def sink(broker, exchange, **kw):
    s = {"type": "rabbitmq", "url": broker.url, "exchange": exchange, "retry_ms": 300,
         "confirm_timeout_ms": 3000, "idle_timeout_ms": 10000}
    s.update(kw)
    return s


def metric(node, result, name="ankusa_deliveries_total"):
    return node.metrics().get(name, instance="default", sink="rabbitmq", result=result) or 0


def wait_for(pred, timeout=30.0, what="condition", step=0.1):
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def settled(node):
    m = node.metrics()
    return all(m.value(k, instance="default") == 0
               for k in ("ankusa_queue_pending", "ankusa_queue_scheduled", "ankusa_queue_inflight"))


def dlq(node):
    r = node.admin("/v1/dlq?limit=1000")
    assert r.status == 200, r
    return r.json["entries"]


def consume(broker, queue, idle=2.0, extra=()):
    """Run the example consumer on queue until it idles; its JSON lines."""
    p = subprocess.run(["/usr/bin/python3", str(CONSUMER), "--url", broker.url, "--queue", queue,
                        "--idle-exit", str(idle), *extra], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stderr == "", p.stderr
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]


def test_acked_hooks_reach_a_bound_queue_as_sink_messages(ankusa, broker):
    broker.bind_queue("ak.basic", "q.basic", "ankusa.#")
    sources = {"plain": {"sinks": [sink(broker, "ak.basic")]},
               "acme_src": {"tenant": "acme", "dedupe": {"header": "x-event-id"},
                            "sinks": [sink(broker, "ak.basic", routing_key="ankusa.custom")]}}
    node = ankusa(config={"dispatch": fast_dispatch()}, sources=sources)
    bodies = [b'{"n":%d}' % i for i in range(20)]
    posted = {}
    for b in bodies:
        r = node.post("/webhooks/plain", b, {"Content-Type": "application/json", "X-GitHub-Event": "push"})
        assert r.status == 201, r
        posted[r.json["id"]] = b
    r = node.post("/webhooks/acme_src", b"\x00\xffbinary", {"X-Event-Id": "evt-1"})
    assert r.status == 201, r
    tenant_id = r.json["id"]
    wait_for(lambda: metric(node, "ok") == 21 and settled(node), what="21 confirmed deliveries")

    msgs = broker.get_all("q.basic")
    assert len(msgs) == 21, [m[1][:80] for m in msgs]
    seen = {}
    for method, props, body in msgs:
        m = validate(body)  # the schema of docs/sink-message-v1.schema.json
        seen[m["id"]] = (method, props, m)
        assert props.delivery_mode == 2, "persistent"
        assert props.content_type == "application/json"
        assert props.message_id == m["id"]
        h = props.headers
        assert h["ankusa_idempotency_key"] == m["idempotency_key"]
        assert h["ankusa_id"] == m["id"] and h["ankusa_message_version"] == "1"
        assert h["ankusa_source_id"] == m["source_id"]
    assert set(seen) == set(posted) | {tenant_id}
    for hid, b in posted.items():
        method, props, m = seen[hid]
        assert method.routing_key == "ankusa.plain", "default routing key ankusa.<source_id>"
        assert method.exchange == "ak.basic"
        assert base64.b64decode(m["body_base64"]) == b and m["size"] == len(b)
        assert m["sha256"] == hashlib.sha256(b).hexdigest()
        assert m["tenant_id"] == "default" == props.headers["ankusa_tenant_id"], "a source without a tenant"
        assert m["idempotency_key"] == hid and m["headers"]["x-github-event"] == "push"
        assert "ankusa_dedupe_key" not in props.headers and "ankusa_replay_id" not in props.headers
    method, props, m = seen[tenant_id]
    assert method.routing_key == "ankusa.custom"
    assert base64.b64decode(m["body_base64"]) == b"\x00\xffbinary"
    assert m["tenant_id"] == "acme" and props.headers["ankusa_tenant_id"] == "acme"
    assert m["idempotency_key"] == "acme:acme_src:evt-1" == props.headers["ankusa_idempotency_key"]
    assert props.headers["ankusa_dedupe_key"] == "evt-1"
    # the exchange was declared durable, of the default type; the sink declared no queue
    ex = broker.ctl("list_exchanges", "name", "type", "durable", "--formatter", "json")
    (mine,) = [e for e in json.loads(ex[ex.index("["):]) if e["name"] == "ak.basic"]
    assert mine["type"] == "topic" and mine["durable"] is True
    qs = broker.ctl("list_queues", "name", "--formatter", "json")
    assert {q["name"] for q in json.loads(qs[qs.index("["):])} <= {"q.basic", "q.unroutable", "q.inflight",
                                                                   "q.down", "q.kill"}


def test_the_example_consumer_reads_and_deduplicates(ankusa, broker):
    broker.bind_queue("ak.consumer", "q.consumer", "#")
    node = ankusa(config={"dispatch": fast_dispatch()},
                  sources={"c": {"sinks": [sink(broker, "ak.consumer")]}})
    ids = []
    for i in range(5):
        r = node.post("/webhooks/c", b"hook %d" % i)
        assert r.status == 201, r
        ids.append(r.json["id"])
    wait_for(lambda: metric(node, "ok") == 5 and settled(node), what="5 deliveries")
    # a redelivery of one hook (as after a lost ack or a replay): the same bytes again
    msgs = broker.get_all("q.consumer", ack=False)  # unacked: back in the queue on close
    assert len(msgs) == 5
    first = next(m for m in msgs if json.loads(m[2])["id"] == ids[0])
    broker.publish("ak.consumer", "again", first[2], first[1])
    lines = consume(broker, "q.consumer")
    assert len(lines) == 6, lines
    assert sorted(ln["id"] for ln in lines if not ln["duplicate"]) == sorted(ids), lines
    assert [ln["id"] for ln in lines if ln["duplicate"]] == [ids[0]], lines
    assert all(ln["sha256_ok"] and ln["size"] == len(b"hook 0") for ln in lines)
    assert broker.count("q.consumer") == 0, "the consumer acks what it handled"


def test_a_large_body_goes_as_a_claim_the_consumer_redeems(ankusa, broker, tmp_path):
    broker.bind_queue("ak.claim", "q.claim", "#")
    token = "rabbit-claims-reader"
    claim_port = free_ports(1)[0]
    cfg = {"node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
           "admin": {"principals": [principal("reader", token, ["claims:read", "metrics:read"], "*")]},
           "claim_check": {"port": claim_port, "ip": "127.0.0.1",
                           "store": {"type": "local", "root": str(tmp_path / "claims")}},
           "dispatch": fast_dispatch()}
    node = ankusa(config=cfg, sources={"big": {"tenant": "acme",
                                               "sinks": [sink(broker, "ak.claim", inline_max_bytes=100)]}})
    big, small = bytes(range(256)) * 20, b"tiny"
    ids = {}
    for b in (big, small):
        r = node.post("/webhooks/big", b)
        assert r.status == 201, r
        ids[r.json["id"]] = b
    wait_for(lambda: broker.count("q.claim") == 2, what="2 messages")
    msgs = {json.loads(b)["id"]: (props, b) for _, props, b in broker.get_all("q.claim", ack=False)}
    for hid, body in ids.items():
        m = validate(msgs[hid][1])
        if body is big:
            assert "body_base64" not in m and m["claim"].startswith("urn:ankusa:claim:v1:acme:"), m
        else:
            assert "claim" not in m and base64.b64decode(m["body_base64"]) == small
        assert m["size"] == len(body) and m["sha256"] == hashlib.sha256(body).hexdigest()
    lines = consume(broker, "q.claim", extra=("--claim-base", f"http://127.0.0.1:{claim_port}", "--token", token))
    by_id = {ln["id"]: ln for ln in lines}
    assert set(by_id) == set(ids) and len(lines) == 2, lines
    for hid, body in ids.items():
        ln = by_id[hid]
        assert ln["sha256_ok"] and ln["size"] == len(body) and ln["by_claim"] == (body is big), ln


def test_unroutable_is_transient_until_a_queue_is_bound(ankusa, broker):
    broker.delete_queue("q.unroutable")
    node = ankusa(config={"dispatch": fast_dispatch()},
                  sources={"u": {"sinks": [sink(broker, "ak.unroutable")]}})
    r = node.post("/webhooks/u", b"nobody listens")
    assert r.status == 201, r
    hid = r.json["id"]
    wait_for(lambda: metric(node, "error", "ankusa_dispatch_attempts_total") >= 3, what="3 failed attempts")
    assert metric(node, "ok") == 0 and dlq(node) == [], "a returned message is neither ok nor permanent"
    broker.bind_queue("ak.unroutable", "q.unroutable", "ankusa.u")
    wait_for(lambda: metric(node, "ok") == 1 and settled(node), what="delivered once a queue is bound")
    msgs = broker.get_all("q.unroutable")
    assert [json.loads(b)["id"] for _, _, b in msgs] == [hid], "the returned publishes were not kept"
    node.stop()

    # the reason: a node that gives up after 2 attempts dead-letters it with the sink's word
    broker.delete_queue("q.unroutable")
    node2 = ankusa(config={"dispatch": fast_dispatch(retry={"base_ms": 50, "max_ms": 50, "max_attempts": 2,
                                                            "jitter": False})},
                   sources={"u": {"sinks": [sink(broker, "ak.unroutable")]}})
    r = node2.post("/webhooks/u", b"still nobody")
    assert r.status == 201, r
    (e,) = wait_for(lambda: dlq(node2), what="a dead row")
    assert e["id"] == r.json["id"] and e["reason"] == "{sink, rabbitmq, {max_attempts, unroutable}}", e


def test_a_nack_is_transient(ankusa, broker):
    # a queue that rejects every publish (x-max-length 0, reject-publish): the broker nacks
    broker.bind_queue("ak.nack", "q.nack", "#", arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    node = ankusa(config={"dispatch": fast_dispatch(retry={"base_ms": 50, "max_ms": 50, "max_attempts": 3,
                                                           "jitter": False})},
                  sources={"n": {"sinks": [sink(broker, "ak.nack")]}})
    r = node.post("/webhooks/n", b"rejected")
    assert r.status == 201
    (e,) = wait_for(lambda: dlq(node), what="a dead row")
    assert e["id"] == r.json["id"] and e["attempts"] == 3, e
    assert e["reason"] == "{sink, rabbitmq, {max_attempts, nacked}}", e
    assert metric(node, "ok") == 0
    broker.delete_queue("q.nack")


def test_a_closed_channel_is_reopened_and_the_exchange_declared_again(ankusa, broker):
    broker.bind_queue("ak.chan", "q.chan", "#")
    node = ankusa(config={"dispatch": fast_dispatch()}, sources={"c": {"sinks": [sink(broker, "ak.chan")]}})
    r = node.post("/webhooks/c", b"one")
    assert r.status == 201
    wait_for(lambda: metric(node, "ok") == 1, what="the first delivery")
    assert len(broker.get_all("q.chan")) == 1
    # the exchange goes away under the open channel: the next publish closes it (404)
    broker.delete_exchange("ak.chan")
    assert not broker.exchange_exists("ak.chan")
    r = node.post("/webhooks/c", b"two")
    assert r.status == 201
    wait_for(lambda: broker.exchange_exists("ak.chan"), what="the sink declared the exchange again")
    assert "channel closed by broker" in node.log_text() and "404" in node.log_text()
    # the binding went with the exchange: unroutable until the queue is bound again
    wait_for(lambda: metric(node, "error", "ankusa_dispatch_attempts_total") >= 2, what="failed attempts")
    broker.bind_queue("ak.chan", "q.chan", "#", purge=False)
    wait_for(lambda: metric(node, "ok") == 2 and settled(node), what="the second delivery")
    assert [json.loads(b)["id"] for _, _, b in broker.get_all("q.chan")] == [r.json["id"]]


def connections(broker):
    out = broker.ctl("list_connections", "name", "user", "--formatter", "json")
    return [c for c in json.loads(out[out.index("["):]) if c["user"] == "guest"]


def test_one_shared_connection_that_closes_when_idle(ankusa, broker):
    broker.bind_queue("ak.idle", "q.idle", "#")
    # idle long enough that rabbitmqctl (an Erlang VM start, seconds on a loaded host) lists
    # the connection before it closes (CI at 15:56 Dec 2: it had closed by then)
    s = sink(broker, "ak.idle", confirm_timeout_ms=500, idle_timeout_ms=12000)
    node = ankusa(config={"dispatch": fast_dispatch()},
                  sources={"a": {"sinks": [s]}, "b": {"sinks": [dict(s)]}})
    assert connections(broker) == [], "no connection before the first delivery"
    for src in ("a", "b", "a", "b"):
        assert node.post(f"/webhooks/{src}", b"x").status == 201
    wait_for(lambda: metric(node, "ok") == 4, what="4 delivered")
    assert len(connections(broker)) == 1, "two sources, one destination: one connection"
    wait_for(lambda: connections(broker) == [], timeout=30, what="the idle connection closed", step=0.5)
    assert node.post("/webhooks/b", b"y").status == 201
    wait_for(lambda: metric(node, "ok") == 5, what="reopened on demand")
    assert len(broker.get_all("q.idle")) == 5


def test_max_inflight_bounds_unconfirmed_publishes(ankusa, broker):
    broker.bind_queue("ak.inflight", "q.inflight", "#")
    # one attempt only: an attempt refused as busy is dead-lettered, so the queue must hold
    # exactly the hooks whose attempt went through (busy sends nothing)
    node = ankusa(config={"dispatch": fast_dispatch(retry={"base_ms": 50, "max_ms": 50, "max_attempts": 1,
                                                           "jitter": False})},
                  sources={"b": {"sinks": [sink(broker, "ak.inflight", max_inflight=1)]}})
    res = post_many(node.http_port, [b"b%d" % i for i in range(60)], path="/webhooks/b", workers=30)
    ids = {r.json["id"] for _, r in res if not isinstance(r, Exception) and r.status == 201}
    assert len(ids) == 60
    wait_for(lambda: metric(node, "ok") + len(dlq(node)) == 60 and settled(node), what="every attempt answered")
    dead = dlq(node)
    ok = metric(node, "ok")
    assert ok + len(dead) == 60
    assert dead, "60 concurrent attempts through max_inflight 1: some must be refused"
    assert {e["reason"] for e in dead} == {"{sink, rabbitmq, {max_attempts, busy}}"}, dead[:3]
    assert ok >= 1
    print(f"max_inflight 1, 60 concurrent single attempts: {ok} confirmed, {len(dead)} busy")
    got = [json.loads(b)["id"] for _, _, b in broker.get_all("q.inflight")]
    assert len(got) == ok and set(got) == ids - {e["id"] for e in dead}, "busy attempts sent nothing"

    # with retries, every one goes through the same bound
    node.stop()
    node2 = ankusa(config={"dispatch": fast_dispatch()},
                   sources={"b": {"sinks": [sink(broker, "ak.inflight", max_inflight=1)]}})
    res = post_many(node2.http_port, [b"c%d" % i for i in range(40)], path="/webhooks/b", workers=20)
    ids2 = {r.json["id"] for _, r in res if not isinstance(r, Exception) and r.status == 201}
    wait_for(lambda: metric(node2, "ok") == 40 and settled(node2), what="40 delivered")
    assert metric(node2, "error", "ankusa_dispatch_attempts_total") > 0, "some attempts were busy"
    got = [json.loads(b)["id"] for _, _, b in broker.get_all("q.inflight")]
    assert sorted(got) == sorted(ids2)


def test_broker_down_then_back_loses_nothing(ankusa, broker):
    broker.bind_queue("ak.down", "q.down", "#")
    node = ankusa(config={"dispatch": fast_dispatch()},
                  sources={"d": {"sinks": [sink(broker, "ak.down", retry_ms=1000)]}})
    ids = set()
    for i in range(5):
        r = node.post("/webhooks/d", b"before %d" % i)
        assert r.status == 201
        ids.add(r.json["id"])
    wait_for(lambda: metric(node, "ok") == 5, what="5 delivered")
    broker.stop_app()
    t_down = time.time()
    try:
        for i in range(10):
            r = node.post("/webhooks/d", b"during %d" % i)
            assert r.status == 201, "ingest does not depend on a sink"
            ids.add(r.json["id"])
        wait_for(lambda: metric(node, "error", "ankusa_dispatch_attempts_total") >= 10, what="failed attempts")
        time.sleep(3)
        assert metric(node, "ok") == 5
    finally:
        broker.start_app()
    down_s = time.time() - t_down
    wait_for(lambda: metric(node, "ok") == 15 and settled(node), timeout=60, what="all 15 delivered")
    got = [json.loads(b)["id"] for _, _, b in broker.get_all("q.down")]
    assert set(got) == ids and len(got) >= 15
    # backoff: reconnects while the broker was away are retry_ms (1 s) apart, not a spin
    attempts = len(re.findall(r"connect failed|login failed|connection lost", node.log_text()))
    assert 1 <= attempts <= down_s / 1.0 + 3, (attempts, down_s)
    assert dlq(node) == []


def _kill_rounds(ankusa, broker, tmp_path, rounds):
    broker.bind_queue("ak.kill", "q.kill", "#")
    data = tmp_path / "kill-data"
    cfg = {"dispatch": fast_dispatch()}
    sources = {"k": {"sinks": [sink(broker, "ak.kill")]}}
    acked = set()
    node = None
    for rnd in range(rounds):
        node = ankusa(config=cfg, sources=sources, data_dir=data, name=f"kill{rnd}")
        stop = threading.Event()

        def load(n=node, r=rnd):
            i = 0
            while not stop.is_set():
                res = post_many(n.http_port, [b"r%d-%d" % (r, i + k) for k in range(8)], path="/webhooks/k",
                                workers=8, timeout=5)
                for _, resp in res:
                    if not isinstance(resp, Exception) and resp.status == 201:
                        acked.add(resp.json["id"])
                i += 8

        t = threading.Thread(target=load)
        t.start()
        wait_for(lambda n=node: metric(n, "ok") >= 10, what="publishing under way")
        time.sleep(0.2)
        node.kill9()
        stop.set()
        t.join()
    node = ankusa(config=cfg, sources=sources, data_dir=data, name="final")
    wait_for(lambda: settled(node), timeout=60, what="the backlog drained after the last restart")
    return acked


# kill -9 and outages prove durability in the normal run; the sanitizer run covers the
# same code paths in the other tests (a SIGKILL exercises no teardown)
@pytest.mark.slow
def test_kill9_while_publishing_loses_no_acked_hook(ankusa, broker, tmp_path):
    acked = _kill_rounds(ankusa, broker, tmp_path, rounds=5)
    assert len(acked) >= 50
    lines = consume(broker, "q.kill")
    consumed = {ln["id"] for ln in lines}
    missing = acked - consumed
    assert not missing, f"{len(missing)} acked hooks never published: {sorted(missing)[:5]}"
    first = [ln["idempotency_key"] for ln in lines if not ln["duplicate"]]
    assert len(first) == len(set(first)) == len(consumed), "the consumer sees each key once"
    dups = len(lines) - len(first)
    print(f"kill -9 x5: {len(acked)} acked, {len(lines)} consumed, {dups} duplicates flagged")


def test_amqps_verifies_the_broker_certificate_and_name(ankusa, broker):
    broker.bind_queue("ak.tls", "q.tls", "#")
    retry = fast_dispatch(retry={"base_ms": 50, "max_ms": 50, "max_attempts": 2, "jitter": False})
    by_ip = broker.tls_url.replace("localhost", "127.0.0.1")  # the certificate names localhost only
    node = ankusa(config={"dispatch": retry}, env={"SSL_CERT_FILE": broker.ca},
                  sources={"t": {"sinks": [sink(broker, "ak.tls", url=broker.tls_url)]},
                           "ip": {"sinks": [sink(broker, "ak.tls", url=by_ip)]}})
    r = node.post("/webhooks/t", b"over tls")
    assert r.status == 201
    wait_for(lambda: metric(node, "ok") == 1, what="delivered over TLS")
    assert [json.loads(b)["id"] for _, _, b in broker.get_all("q.tls")] == [r.json["id"]]
    r = node.post("/webhooks/ip", b"wrong name")
    assert r.status == 201
    (e,) = wait_for(lambda: dlq(node), what="a dead row")
    assert e["id"] == r.json["id"] and e["reason"] == "{sink, rabbitmq, {max_attempts, not_connected}}", e
    assert "certificate" in node.log_text() or "verif" in node.log_text()
    # without our CA in the trust store, the broker is not trusted at all
    node.stop()
    node2 = ankusa(config={"dispatch": retry}, sources={"t": {"sinks": [sink(broker, "ak.tls", url=broker.tls_url)]}})
    r = node2.post("/webhooks/t", b"untrusted")
    assert r.status == 201
    (e,) = wait_for(lambda: dlq(node2), what="a dead row")
    assert e["reason"] == "{sink, rabbitmq, {max_attempts, not_connected}}", e
    assert broker.count("q.tls") == 0


def test_egress_guard_refuses_private_brokers(ankusa, broker, tmp_path):
    # a literal private address is refused by check-config
    cfg = tmp_path / "guarded.yml"
    cfg.write_text(json.dumps({"egress": {"guard_static_sources": True},
                               "sources": {"g": {"sinks": [sink(broker, "ak.guard")]}}}))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 78, p
    assert "sources.g.sinks[0].url: egress: 127.0.0.1 is not a public address" in p.stderr, p.stderr
    assert "guest" not in p.stderr
    # a name is judged at connect, on the address it resolves to: permanent, dead at once
    url = broker.url.replace("127.0.0.1", "localhost")
    node = ankusa(config={"egress": {"guard_static_sources": True}, "dispatch": fast_dispatch()},
                  sources={"g": {"sinks": [sink(broker, "ak.guard", url=url)]}})
    r = node.post("/webhooks/g", b"x")
    assert r.status == 201
    (e,) = wait_for(lambda: dlq(node), what="a dead row")
    assert re.fullmatch(r"\{sink, rabbitmq, egress: (127\.0\.0\.1|::1) is not a public address\}", e["reason"]), e
    assert metric(node, "error", "ankusa_dispatch_attempts_total") == 1
    # allowed by the operator's list, the same sink delivers
    broker.bind_queue("ak.guard", "q.guard", "#")
    node.stop()
    node2 = ankusa(config={"egress": {"guard_static_sources": True, "allow_cidrs": ["127.0.0.0/8", "::1/128"]},
                           "dispatch": fast_dispatch()},
                   sources={"g": {"sinks": [sink(broker, "ak.guard", url=url)]}})
    r = node2.post("/webhooks/g", b"y")
    assert r.status == 201
    wait_for(lambda: metric(node2, "ok") == 1, what="delivered")
    assert [json.loads(b)["id"] for _, _, b in broker.get_all("q.guard")] == [r.json["id"]]
    broker.delete_queue("q.guard")


def test_config_rules_name_the_key_and_hide_the_url(tmp_path):
    def check(s):
        cfg = tmp_path / "c.yml"
        cfg.write_text(json.dumps({"sources": {"s": {"sinks": [s]}}}))
        return run_cli("check-config", "--config", cfg)

    p = check({"type": "rabbitmq"})
    assert p.returncode == 78 and 'sources.s.sinks[0]: missing required key "exchange"' in p.stderr, p.stderr
    p = check({"type": "rabbitmq", "exchange": "e", "exchange_type": "x-delayed"})
    assert p.returncode == 78 and "sources.s.sinks[0].exchange_type" in p.stderr, p.stderr
    p = check({"type": "rabbitmq", "exchange": "e", "idle_timeout_ms": 3000})
    assert p.returncode == 78 and "sources.s.sinks[0].idle_timeout_ms" in p.stderr, p.stderr
    p = check({"type": "rabbitmq", "exchange": "e", "url": "http://u:hunter2@h/"})
    assert p.returncode == 78 and "sources.s.sinks[0].url" in p.stderr and "hunter2" not in p.stderr, p.stderr
    p = check({"type": "rabbitmq", "exchange": "e", "url": "amqps://u:hunter2@broker.example:5671/v",
               "idle_timeout_ms": 0, "max_inflight": 16, "inline_max_bytes": None})
    assert p.returncode == 0, p.stderr
    cfg = tmp_path / "c.yml"
    p = run_cli("print-config", "--config", cfg)
    assert p.returncode == 0, p.stderr
    assert "hunter2" not in p.stdout and "broker.example" not in p.stdout

