"""The `redis` sink: PUBLISH of SinkMessageV1 to a Redis pub/sub channel, checked against a
redis-server started by the test (redis_server.RedisServer) and subscribers of its
channel: what a subscriber receives, no_subscribers as a transient failure, a Redis that
is down or paused and comes back, rediss:// refused at config check, the egress guard,
the shared and idle-closed connection, and the url's password kept out of every output."""
import base64
import hashlib
import json
import subprocess
import sys
import threading
import time

import pytest

from helpers import REPO, SLOW, free_ports, principal, run_cli, wait_until
from redis_server import RedisServer

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import Consumer, validate  # noqa: E402

import redis  # noqa: E402  (python3-redis)

CONSUMER = REPO / "examples" / "consumers" / "redis_consumer.py"


def dispatch(max_attempts=200, base_ms=50, max_ms=300):
    return {"dispatch": {"retry": {"base_ms": base_ms, "max_ms": max_ms, "max_attempts": max_attempts,
                                   "jitter": False},
                         "breaker_failures": 0}}


def sink(url, channel="hooks", **kw):
    s = {"type": "redis", "url": url, "channel": channel}
    s.update(kw)
    return s


def post_ok(node, src, body, headers=None):
    r = node.post(f"/webhooks/{src}", body, headers or {"Content-Type": "application/json"})
    assert r.status == 201, r
    return r.json["id"]


def delivered(node, result="ok"):
    m = node.metrics()
    return m.get("ankusa_deliveries_total", instance="default", sink="redis", result=result) or 0


def attempts(node, result):
    m = node.metrics()
    return m.get("ankusa_dispatch_attempts_total", instance="default", sink="redis", result=result) or 0


def dlq_entries(node):
    r = node.admin("/v1/dlq")
    assert r.status == 200, r
    return r.json["entries"]


class Subscriber:
    """A subscriber of one channel (python3-redis), collecting raw messages on a thread."""

    def __init__(self, srv, channel="hooks"):
        self.srv = srv
        self.channel = channel
        self.client = redis.Redis(host="127.0.0.1", port=srv.port, password=srv.password)
        self.ps = self.client.pubsub(ignore_subscribe_messages=True)
        self.ps.subscribe(channel)
        self.raw = []
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.th = threading.Thread(target=self._run, daemon=True)
        self.th.start()
        wait_until(lambda: self.srv.cmd("PUBSUB", "NUMSUB", channel)[1] >= 1, what="the subscription")

    def _run(self):
        while not self.stop.is_set():
            try:
                m = self.ps.get_message(timeout=0.1)
            except (redis.ConnectionError, OSError, ValueError):
                return
            if m and m["type"] == "message":
                with self.lock:
                    self.raw.append(m["data"])

    def messages(self):
        with self.lock:
            return list(self.raw)

    def wait_for(self, n, timeout=20.0):
        return wait_until(lambda: (lambda ms: ms if len(ms) >= n else None)(self.messages()), timeout,
                          what=f"{n} messages on {self.channel}")

    def close(self):
        self.stop.set()
        self.th.join(5)
        try:
            self.ps.close()
            self.client.close()
        except Exception:  # noqa: BLE001 - a server already gone
            pass


@pytest.fixture
def rsrv(tmp_path):
    s = RedisServer(workdir=tmp_path / "redis").start()
    yield s
    s.close()


def ids_of(raws):
    return [json.loads(r)["id"] for r in raws]


# --------------------------------------------------------------------------- delivery

def test_publishes_sink_message_v1(ankusa, rsrv):
    sub = Subscriber(rsrv)
    try:
        node = ankusa(config=dispatch(), sources={"gh": {"tenant": "acme", "sinks": [sink(rsrv.url())]}})
        bodies = [b'{"n":%d}' % i for i in range(3)] + [bytes(range(256))]
        hids = [post_ok(node, "gh", b, {"Content-Type": "application/json", "X-GitHub-Event": "push"})
                for b in bodies]
        raws = sub.wait_for(4)
        wait_until(lambda: delivered(node) == 4, what="4 ok deliveries")
        assert sorted(ids_of(raws)) == sorted(hids)
        by_id = {json.loads(r)["id"]: r for r in raws}
        c = Consumer()
        for hid, body in zip(hids, bodies):
            raw = by_id[hid]
            msg = validate(raw)  # against docs/sink-message-v1.schema.json
            assert msg["v"] == 1 and msg["source_id"] == "gh" and msg["tenant_id"] == "acme"
            assert msg["size"] == len(body) and msg["sha256"] == hashlib.sha256(body).hexdigest()
            assert base64.b64decode(msg["body_base64"]) == body
            assert msg["idempotency_key"] == hid
            assert msg["headers"].get("x-github-event") == "push"
            d = c.handle(raw)
            assert d.body == body and not d.duplicate
        assert delivered(node, "dlq") == 0
    finally:
        sub.close()


def test_no_subscribers_dead_letters(ankusa, rsrv):
    node = ankusa(config=dispatch(max_attempts=2, base_ms=20, max_ms=50),
                  sources={"s": {"sinks": [sink(rsrv.url(), channel="nobody")]}})
    hid = post_ok(node, "s", b"lonely")
    (e,) = wait_until(lambda: dlq_entries(node), what="a dead-lettered hook")
    assert e["id"] == hid
    assert "no_subscribers" in e["reason"], e
    assert attempts(node, "error") == 2 and delivered(node) == 0


def test_no_subscribers_is_retried_until_one_appears(ankusa, rsrv):
    node = ankusa(config=dispatch(), sources={"s": {"sinks": [sink(rsrv.url())]}})
    hid = post_ok(node, "s", b"early")
    wait_until(lambda: attempts(node, "error") >= 2, what="failed attempts without a subscriber")
    assert delivered(node) == 0
    sub = Subscriber(rsrv)
    try:
        raws = sub.wait_for(1)
        wait_until(lambda: delivered(node) == 1, what="the delivery once subscribed")
        assert ids_of(raws)[:1] == [hid]
        assert delivered(node, "dlq") == 0
    finally:
        sub.close()


def test_redis_killed_then_back_loses_nothing(ankusa, rsrv):
    sub = Subscriber(rsrv)
    node = ankusa(config=dispatch(), sources={"s": {"sinks": [sink(rsrv.url())]}})
    try:
        first = post_ok(node, "s", b"before")
        sub.wait_for(1)
        sub.close()
        rsrv.kill9()
        hids = [post_ok(node, "s", b"while down %d" % i) for i in range(5)]
        wait_until(lambda: attempts(node, "error") >= 5, what="failed attempts while redis is down")
        t0 = time.time()
        errs0 = attempts(node, "error")
        time.sleep(1.0)
        # the dispatcher's backoff, and the sink's reconnect backoff: no spinning
        assert attempts(node, "error") - errs0 < 60, "attempts spin while redis is down"
        rsrv.restart()
        sub = Subscriber(rsrv)
        raws = sub.wait_for(5, timeout=30)
        wait_until(lambda: delivered(node) == 6, timeout=30, what="every hook delivered after the restart")
        assert set(hids) <= set(ids_of(raws)), "a hook accepted while redis was down got lost"
        assert first not in ids_of(raws)
        assert delivered(node, "dlq") == 0
        assert "connection lost" in node.log_text() or "cannot connect" in node.log_text()
        assert time.time() - t0 < 60
    finally:
        sub.close()


def test_paused_redis_times_out_then_delivers(ankusa, rsrv):
    sub = Subscriber(rsrv)
    node = ankusa(config=dispatch(),
                  sources={"s": {"sinks": [sink(rsrv.url(), publish_timeout_ms=300, idle_timeout_ms=2000)]}})
    try:
        post_ok(node, "s", b"warm-up")
        sub.wait_for(1)
        rsrv.pause()
        hid = post_ok(node, "s", b"during the pause")
        wait_until(lambda: attempts(node, "error") >= 2, what="timed-out attempts while redis is paused")
        assert delivered(node) == 1
        rsrv.resume()
        raws = sub.wait_for(2, timeout=30)
        wait_until(lambda: delivered(node) == 2, timeout=30, what="the delivery after the pause")
        assert hid in ids_of(raws)
    finally:
        sub.close()


# --------------------------------------------------------------------------- connections

def node_clients(rsrv):
    """Connections to the server other than subscribers and this CLIENT LIST's own."""
    lines = rsrv.cmd("CLIENT", "LIST").decode().splitlines()
    return [ln for ln in lines if " cmd=client" not in ln and " sub=0" in ln and " psub=0" in ln]


def test_one_connection_shared_then_idle_closed_and_reopened(ankusa, rsrv):
    sub = Subscriber(rsrv)
    s = sink(rsrv.url(), publish_timeout_ms=200, idle_timeout_ms=1200)
    node = ankusa(config=dispatch(), sources={"a": {"sinks": [s]}, "b": {"sinks": [dict(s)]}})
    try:
        assert node_clients(rsrv) == [], "the connection opens at the first delivery, not at start"
        for i in range(4):
            post_ok(node, "a" if i % 2 else "b", b"x%d" % i)
        sub.wait_for(4)
        assert len(node_clients(rsrv)) == 1, "two sources with one url share one connection"
        wait_until(lambda: node_clients(rsrv) == [], timeout=10, what="the idle connection to close")
        hid = post_ok(node, "a", b"after idle")
        raws = sub.wait_for(5)
        assert hid in ids_of(raws)
        assert len(node_clients(rsrv)) == 1, "reopened on demand"
    finally:
        sub.close()


# --------------------------------------------------------------------------- config and secrets

def write_cfg(tmp_path, sinks, extra=None):
    cfg = {"node": {"data_dir": str(tmp_path / "d")}, "sources": {"s": {"sinks": sinks}}}
    if extra:
        cfg.update(extra)
    p = tmp_path / "c.yml"
    p.write_text(json.dumps(cfg))
    return p


def test_rediss_refused_at_check_config(tmp_path):
    p = write_cfg(tmp_path, [{"type": "log"}, sink("rediss://:tls-pass-123@redis.example.com:6380/0")])
    r = run_cli("check-config", "--config", p)
    assert r.returncode == 78, r
    out = r.stdout + r.stderr
    assert ("sources.s.sinks[1].url: rediss:// (TLS) is not supported by this build (its hiredis has no TLS)"
            in out), out
    assert "tls-pass-123" not in out


def check_error(tmp_path, sinks):
    r = run_cli("check-config", "--config", write_cfg(tmp_path, sinks))
    assert r.returncode == 78, r
    return r.stdout + r.stderr


def test_config_rules_name_the_key(tmp_path):
    out = check_error(tmp_path, [{"type": "log"}, sink("redis://127.0.0.1:1/0", idle_timeout_ms=3000,
                                                        publish_timeout_ms=2500)])
    assert "sources.s.sinks[1].idle_timeout_ms: must be 0 or at least publish_timeout_ms + 1000" in out, out
    out = check_error(tmp_path, [sink("http://nope/", channel="c")])
    assert "sources.s.sinks[0].url: must be a redis:// URL" in out, out
    out = check_error(tmp_path, [sink("redis://:pw-in-a-bad-url@127.0.0.1:99999/0")])
    assert "sources.s.sinks[0].url: bad port" in out and "pw-in-a-bad-url" not in out, out
    out = check_error(tmp_path, [{"type": "redis", "url": "redis://127.0.0.1:1"}])
    assert 'sources.s.sinks[0]: missing required key "channel"' in out, out
    ok = write_cfg(tmp_path, [sink("redis://127.0.0.1:1/3", idle_timeout_ms=0, inline_max_bytes=None)])
    r = run_cli("check-config", "--config", ok)
    assert r.returncode == 0, r


def test_password_never_leaks(ankusa, tmp_path):
    pw = "Sup3r-Secret-pw"
    wrong = "Wr0ng-Secret-pw"
    srv = RedisServer(workdir=tmp_path / "redis", password=pw).start()
    sub = Subscriber(srv)
    try:
        node = ankusa(config=dispatch(max_attempts=3, base_ms=20, max_ms=50),
                      sources={"good": {"sinks": [sink(srv.url(password=True))]},
                               "bad": {"sinks": [sink(srv.url(password=wrong), channel="other")]}})
        hid = post_ok(node, "good", b"authenticated")
        raws = sub.wait_for(1)
        assert ids_of(raws) == [hid], "AUTH with the url's password"
        bad = post_ok(node, "bad", b"refused")
        (e,) = wait_until(lambda: dlq_entries(node), what="the wrong password's hook dead-lettered")
        assert e["id"] == bad
        assert pw not in e["reason"] and wrong not in e["reason"], e
        pc = run_cli("print-config", "--config", node.config_path)
        assert pc.returncode == 0, pc
        assert pw not in pc.stdout + pc.stderr and wrong not in pc.stdout + pc.stderr
        assert "REDACTED" in pc.stdout
        text = node.log_text() + node.metrics().text + json.dumps(node.admin("/v1/dlq").json)
        assert pw not in text and wrong not in text
    finally:
        sub.close()
        srv.close()


# --------------------------------------------------------------------------- egress

def test_guarded_sink_refuses_a_private_address(ankusa, rsrv, tmp_path):
    guard = {"egress": {"guard_static_sources": True}}
    # an address literal is refused at config check
    p = write_cfg(tmp_path, [sink(rsrv.url())], extra=guard)
    r = run_cli("check-config", "--config", p)
    assert r.returncode == 78, r
    assert "sources.s.sinks[0].url: egress: 127.0.0.1 is not a public address" in r.stdout + r.stderr, r
    # a name is judged where it is connected: permanent, first attempt, nothing published
    sub = Subscriber(rsrv)
    try:
        cfg = dict(guard)
        cfg.update(dispatch(max_attempts=5))
        node = ankusa(config=cfg, sources={"s": {"sinks": [sink(f"redis://localhost:{rsrv.port}/0")]}})
        hid = post_ok(node, "s", b"to a private address")
        (e,) = wait_until(lambda: dlq_entries(node), what="the refused hook dead-lettered")
        assert e["id"] == hid and "is not a public address" in e["reason"], e
        assert attempts(node, "error") == 1, "a refusal is permanent"
        assert sub.messages() == []
    finally:
        sub.close()


def test_guarded_sink_allowed_by_cidr(ankusa, rsrv):
    sub = Subscriber(rsrv)
    try:
        cfg = {"egress": {"guard_static_sources": True, "allow_cidrs": ["127.0.0.0/8", "::1/128"]}}
        cfg.update(dispatch())
        node = ankusa(config=cfg, sources={"s": {"sinks": [sink(f"redis://localhost:{rsrv.port}/0")]}})
        hid = post_ok(node, "s", b"allowed")
        raws = sub.wait_for(1)
        assert ids_of(raws) == [hid]
    finally:
        sub.close()


# --------------------------------------------------------------------------- the consumer example

def test_consumer_example(ankusa, rsrv):
    node = ankusa(config=dispatch(), sources={"s": {"tenant": "t1", "sinks": [sink(rsrv.url(), channel="ex")]}})
    proc = subprocess.Popen(["/usr/bin/python3", str(CONSUMER), "--url", rsrv.url(), "--channel", "ex",
                             "--count", "3", "--timeout", str(30 * SLOW)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: rsrv.cmd("PUBSUB", "NUMSUB", "ex")[1] >= 1, what="the consumer's subscription")
        bodies = [b"one", b'{"two":2}', b"three" * 100]
        hids = [post_ok(node, "s", b) for b in bodies]
        out, err = proc.communicate(timeout=40 * SLOW)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    lines = [json.loads(ln) for ln in out.splitlines()]
    assert sorted(ln["id"] for ln in lines) == sorted(hids)
    by_id = {ln["id"]: ln for ln in lines}
    for hid, body in zip(hids, bodies):
        ln = by_id[hid]
        assert ln["size"] == len(body) and ln["sha256_ok"] is True and ln["duplicate"] is False
        assert ln["idempotency_key"] == hid


def test_a_large_body_goes_by_claim_and_the_consumer_redeems_it(ankusa, rsrv, tmp_path):
    token = "redis-claims-reader"
    claim_port = free_ports(1)[0]
    cfg = {"node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
           "admin": {"principals": [principal("reader", token, ["claims:read"], "*")]},
           "claim_check": {"port": claim_port, "ip": "127.0.0.1",
                           "store": {"type": "local", "root": str(tmp_path / "claims")}}}
    cfg.update(dispatch())
    node = ankusa(config=cfg, sources={"big": {"tenant": "acme", "sinks": [
        sink(rsrv.url(), channel="big", inline_max_bytes=1000)]}})
    sub = Subscriber(rsrv, channel="big")
    proc = subprocess.Popen(["/usr/bin/python3", str(CONSUMER), "--url", rsrv.url(), "--channel", "big",
                             "--claim-base", f"http://127.0.0.1:{claim_port}", "--token", token,
                             "--count", "2", "--timeout", str(30 * SLOW)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: rsrv.cmd("PUBSUB", "NUMSUB", "big")[1] >= 2, what="the consumer's subscription")
        big = bytes(range(256)) * 800  # 200 KiB: by claim
        small = b"y" * 1000            # at the threshold: inline
        big_id, small_id = post_ok(node, "big", big), post_ok(node, "big", small)
        out, err = proc.communicate(timeout=40 * SLOW)
        raws = {json.loads(r)["id"]: r for r in sub.wait_for(2)}
    finally:
        sub.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    m = validate(raws[big_id])
    assert m["claim"].startswith("urn:ankusa:claim:v1:acme:") and "body_base64" not in m
    assert m["size"] == len(big) and m["sha256"] == hashlib.sha256(big).hexdigest()
    assert "claim" not in validate(raws[small_id])
    lines = {ln["id"]: ln for ln in map(json.loads, out.splitlines())}
    assert lines[big_id]["by_claim"] is True and lines[big_id]["size"] == len(big)
    assert lines[big_id]["sha256_ok"] is True
    assert lines[small_id]["by_claim"] is False and lines[small_id]["size"] == len(small)
