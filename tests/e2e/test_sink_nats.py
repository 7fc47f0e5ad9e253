"""The nats sink against a real nats-server with JetStream (tests/e2e/nats_server.py): every
acked hook is stored in the stream as its SinkMessageV1 bytes with the Nats-Msg-Id and the
metadata headers, and is consumed by examples/consumers/nats_consumer.py; no stream for the
subject is "no_stream" and retried until one exists; a broker that goes down and comes back
loses nothing (and kept what it acked); a replay is stored again under <id>:replay:<rid>
while redeliveries of one id collapse in JetStream's duplicate window, across kill -9s of
the node; config errors name the key; a guarded sink connects only to checked addresses.

Black-box: the real binary, the real broker, the stream read back with the JetStream API."""
import base64
import json
import random
import subprocess
import sys
import threading
import time

import pytest

from helpers import REPO, SLOW, admin_json, post_many, run_cli, wait_until
from nats_server import NatsServer, make_certs, user_nkey

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import validate  # noqa: E402

CONSUMER = REPO / "examples" / "consumers" / "nats_consumer.py"
META = ("ankusa_id", "ankusa_source_id", "ankusa_tenant_id", "ankusa_message_version",
        "ankusa_idempotency_key", "content_type")


@pytest.fixture
def nats(tmp_path):
    s = NatsServer(tmp_path / "nats").start()
    yield s
    s.stop()


def dispatch(max_attempts=100000, **over):
    d = {"retry": {"base_ms": 50, "max_ms": 300, "max_attempts": max_attempts, "jitter": False},
         "breaker_failures": 0}
    d.update(over)
    return d


def nats_sink(nats, subject="hooks.demo", **over):
    s = {"type": "nats", "servers": [nats.url], "subject": subject, "publish_timeout_ms": 2000}
    s.update(over)
    return s


def start_node(ankusa, nats, sink=None, tenant="acme", config=None, **kw):
    c = {"dispatch": dispatch()}
    c.update(config or {})
    sources = {"src": {"sinks": [sink or nats_sink(nats)]}}
    if tenant:
        sources["src"]["tenant"] = tenant
    return ankusa(config=c, sources=sources, **kw)


def post_hooks(node, bodies, headers=None):
    out = {}
    for body, r in post_many(node.http_port, bodies, path="/webhooks/src", headers=headers):
        assert not isinstance(r, Exception) and r.status == 201, r
        out[r.json["id"]] = body
    return out


def msg_id(m):
    return m["headers"]["Nats-Msg-Id"][0]


def wait_stored(nats, stream, ids, timeout=30, what="hooks in the stream"):
    """Until every id (a Nats-Msg-Id) is in the stream; returns the stream's messages."""
    out = {}

    def done():
        out["m"] = nats.messages(stream)
        return set(ids) <= {msg_id(m) for m in out["m"]}
    wait_until(done, timeout=timeout * SLOW, what=what)
    return out["m"]


def consume(nats, stream):
    r = subprocess.run([sys.executable, str(CONSUMER), "--server", nats.url, "--stream", stream],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def failed_attempts(node):
    return node.metrics().value("ankusa_dispatch_attempts_total", instance="default", sink="nats", result="error")


def dead_letters(node):
    r = node.admin("/v1/dlq")
    assert r.status == 200, r
    return r.json["entries"]


# ----------------------------------------------------------------------------- delivery

def test_acked_hooks_are_stored_with_message_and_headers_and_consumed(ankusa, nats):
    nats.create_stream("HOOKS", ["hooks.>"])
    node = start_node(ankusa, nats)
    bodies = [b'{"n":%d}' % i + bytes(random.randrange(256) for _ in range(i * 13)) for i in range(40)]
    acked = post_hooks(node, bodies, headers={"Content-Type": "application/json", "X-Event": "push"})
    msgs = wait_stored(nats, "HOOKS", acked)
    assert len(msgs) == len(acked), "one message per hook"
    for m in msgs:
        hid = msg_id(m)
        assert m["subject"] == "hooks.demo"
        validate(m["data"])  # the published schema
        j = json.loads(m["data"])
        assert j["id"] == hid and j["source_id"] == "src" and j["tenant_id"] == "acme"
        assert base64.b64decode(j["body_base64"]) == acked[hid]
        assert j["headers"].get("x-event") == "push"
        h = {k: v[0] for k, v in m["headers"].items()}
        assert h["ankusa_id"] == hid and h["ankusa_source_id"] == "src" and h["ankusa_tenant_id"] == "acme"
        assert h["ankusa_message_version"] == "1" and h["content_type"] == "application/json"
        assert h["ankusa_idempotency_key"] == j["idempotency_key"] == hid
        assert "ankusa_replay_id" not in h and "ankusa_dedupe_key" not in h
    lines = consume(nats, "HOOKS")
    assert sorted(ln["id"] for ln in lines) == sorted(acked)
    assert all(ln["sha256_ok"] and not ln["duplicate"] for ln in lines)
    assert {ln["id"]: ln["size"] for ln in lines} == {k: len(v) for k, v in acked.items()}


def test_default_tenant_and_dedupe_key_headers(ankusa, nats):
    """A source without a tenant files its hooks under "default"; a source with a dedupe key
    sends ankusa_dedupe_key and the composite idempotency key."""
    nats.create_stream("HOOKS", ["hooks.>"])
    sink = nats_sink(nats)
    node = ankusa(config={"dispatch": dispatch()},
                  sources={"src": {"sinks": [sink], "dedupe": {"header": "x-delivery"}}})
    r = node.post("/webhooks/src", b"{}", {"X-Delivery": "d-1"})
    assert r.status == 201, r
    (m,) = wait_stored(nats, "HOOKS", [r.json["id"]])
    h = {k: v[0] for k, v in m["headers"].items()}
    assert h["ankusa_tenant_id"] == json.loads(m["data"])["tenant_id"] == "default"
    assert h["ankusa_dedupe_key"] == "d-1"
    assert h["ankusa_idempotency_key"] == "default:src:d-1" == json.loads(m["data"])["idempotency_key"]


def test_no_stream_is_transient_and_delivered_once_a_stream_exists(ankusa, nats):
    node = start_node(ankusa, nats)
    acked = post_hooks(node, [b"early-%d" % i for i in range(5)])
    # retried (failed attempts count up), nothing dead-lettered
    wait_until(lambda: failed_attempts(node) >= 15, timeout=10 * SLOW, what="failed attempts, retried")
    assert dead_letters(node) == []
    assert nats.messages_or_none("HOOKS") is None
    nats.create_stream("HOOKS", ["hooks.>"])
    msgs = wait_stored(nats, "HOOKS", acked)
    assert sorted(msg_id(m) for m in msgs) == sorted(acked)


def test_no_stream_dead_letters_after_the_retries_with_its_reason(ankusa, nats):
    node = start_node(ankusa, nats, config={"dispatch": dispatch(max_attempts=3)})
    (hid,) = post_hooks(node, [b"lonely"])
    wait_until(lambda: dead_letters(node), timeout=15 * SLOW, what="dead-lettered")
    (e,) = dead_letters(node)
    assert e["id"] == hid and e["reason"] == "{sink, nats, {max_attempts, no_stream}}", e
    assert e["attempts"] == 3, "transient: retried until max_attempts"


def test_broker_down_then_back_loses_nothing(ankusa, nats):
    nats.create_stream("HOOKS", ["hooks.>"])
    node = start_node(ankusa, nats)
    first = post_hooks(node, [b"before-%d" % i for i in range(20)])
    wait_stored(nats, "HOOKS", first)
    nats.stop()
    during = post_hooks(node, [b"during-%d" % i for i in range(20)])  # durable: acked with the broker down
    time.sleep(1.0)  # attempts fail meanwhile (not_connected), and are retried
    assert dead_letters(node) == []
    nats.start()  # same port, same store dir
    msgs = wait_stored(nats, "HOOKS", list(first) + list(during))
    ids = [msg_id(m) for m in msgs]
    assert len(ids) == len(set(ids)) == 40, "stored once each; the first 20 survived the restart"
    assert {json.loads(m["data"])["id"] for m in msgs} == set(first) | set(during)


# ----------------------------------------------------------------------------- replay and dedupe

def test_replay_is_stored_again_under_its_replay_id(ankusa, nats):
    """A dead-lettered hook replayed: stored under <id>:replay:<rid> with ankusa_replay_id,
    beside the copy a plain delivery of the same id left (JetStream keeps both: different
    Nats-Msg-Ids), while a second plain publish of the id is collapsed."""
    nats.create_stream("HOOKS", ["hooks.>"], max_msg_size=1500)
    node = start_node(ankusa, nats, config={"dispatch": dispatch(max_attempts=2)})
    small = post_hooks(node, [b"small"])
    big = post_hooks(node, [b"B" * 3000])  # over the stream's max_msg_size: a JetStream error reply
    (bid,) = big
    wait_until(lambda: dead_letters(node), timeout=15 * SLOW, what="the big hook dead-lettered")
    (e,) = dead_letters(node)
    assert e["id"] == bid and e["reason"] == "{sink, nats, {max_attempts, jetstream_error 400/10054}}", e
    wait_stored(nats, "HOOKS", small)
    # the operator fixes the stream, then replays the dead letters
    with nats.client() as c:
        cfg = c.js("STREAM.INFO.HOOKS")["config"]
        cfg["max_msg_size"] = -1
        c.js("STREAM.UPDATE.HOOKS", cfg)
    r = admin_json(node, "POST", "/v1/replays", {"kind": "dlq", "source_id": "src"})
    assert r.status == 202, r
    rid = r.json["id"]
    msgs = wait_stored(nats, "HOOKS", [f"{bid}:replay:{rid}"])
    (m,) = [m for m in msgs if msg_id(m) == f"{bid}:replay:{rid}"]
    assert m["headers"]["ankusa_replay_id"] == [rid]
    j = json.loads(m["data"])
    assert j["replay_id"] == rid and j["id"] == bid and base64.b64decode(j["body_base64"]) == b"B" * 3000
    # the same id published again (as a lost ack's redelivery would): collapsed
    (sid,) = small
    with nats.client() as c:
        r = c.request("hooks.demo", b"again", {"Nats-Msg-Id": sid})
        assert json.loads(r.data).get("duplicate") is True
    assert [msg_id(m) for m in nats.messages("HOOKS")].count(sid) == 1


# kill -9 and outages prove durability in the normal run; the sanitizer run covers the
# same code paths in the other tests (a SIGKILL exercises no teardown)
@pytest.mark.slow
def test_kill9_while_publishing_every_acked_hook_stored_once(ankusa, nats, tmp_path):
    """5 rounds of kill -9 while hooks are posted and published (restart on the same data
    dir): every 201 is in the stream, no Nats-Msg-Id twice (the duplicate window collapses
    the redeliveries of hooks whose ack the kill lost), and the consumer sees each once."""
    nats.create_stream("HOOKS", ["hooks.>"])
    spy = nats.spy("hooks.>")
    node = start_node(ankusa, nats)
    acked = {}
    for rnd in range(5):
        stop = threading.Event()

        def poster(rnd=rnd):
            i = 0
            while not stop.is_set():
                try:
                    r = node.post("/webhooks/src", b"r%d-%d" % (rnd, i), timeout=5)
                except OSError:
                    return
                if r.status == 201:
                    acked[r.json["id"]] = b"r%d-%d" % (rnd, i)
                i += 1
        ts = [threading.Thread(target=poster) for _ in range(4)]
        for t in ts:
            t.start()
        time.sleep(random.uniform(0.3, 0.8))
        node.kill9()
        stop.set()
        for t in ts:
            t.join(10)
        node.start()
    assert len(acked) > 50, len(acked)
    msgs = wait_stored(nats, "HOOKS", acked, timeout=60)
    ids = [msg_id(m) for m in msgs]
    assert len(ids) == len(set(ids)), "a Nats-Msg-Id stored twice"
    assert set(acked) <= set(ids)
    time.sleep(0.3)
    published = spy.ids()
    spy.close()
    assert set(published) == set(ids)
    assert len(published) > len(ids), "the kills left redeliveries for JetStream to collapse"
    print(f"kill -9 x5: {len(acked)} acked, {len(ids)} stored, {len(published)} published "
          f"({len(published) - len(ids)} redeliveries collapsed by JetStream)")
    lines = consume(nats, "HOOKS")
    firsts = [ln["id"] for ln in lines if not ln["duplicate"]]
    assert len(firsts) == len(set(firsts)) and set(acked) <= set(firsts)
    for m in msgs:
        j = json.loads(m["data"])
        if j["id"] in acked:
            assert base64.b64decode(j["body_base64"]) == acked[j["id"]]


def test_stalled_broker_redeliveries_of_one_id_are_collapsed(ankusa, nats):
    """The broker stalls (SIGSTOP) with publishes on the wire: the acks do not come back in
    publish_timeout_ms, the dispatcher retries, and the same Nats-Msg-Id is published again
    (a plain subscriber sees every copy); once the broker runs again the stream holds ONE
    message per id."""
    nats.create_stream("HOOKS", ["hooks.>"])
    spy = nats.spy("hooks.>")
    try:
        node = start_node(ankusa, nats, sink=nats_sink(nats, publish_timeout_ms=300))
        warm = post_hooks(node, [b"warm"])
        wait_stored(nats, "HOOKS", warm)
        nats.pause()
        try:
            acked = post_hooks(node, [b"stalled-%d" % i for i in range(5)])
            wait_until(lambda: failed_attempts(node) >= 10, timeout=15 * SLOW,
                       what="attempts timed out and retried")
        finally:
            nats.resume()
        msgs = wait_stored(nats, "HOOKS", acked)
        ids = [msg_id(m) for m in msgs]
        assert sorted(ids) == sorted(list(warm) + list(acked)), "one message per Nats-Msg-Id"
        wait_until(lambda: sum(spy.ids().count(h) for h in acked) > 2 * len(acked), timeout=10 * SLOW,
                   what="the spy saw the redeliveries")
        seen = spy.ids()
        assert all(seen.count(h) >= 2 for h in acked), seen
    finally:
        spy.close()


def test_connection_is_shared_by_destination_opened_lazily_and_closed_when_idle(ankusa, nats):
    nats.create_stream("HOOKS", ["hooks.>"])
    shared = nats_sink(nats, connection="shared", publish_timeout_ms=1000, idle_timeout_ms=2500)
    other = nats_sink(nats, connection="other", idle_timeout_ms=0)
    node = ankusa(config={"dispatch": dispatch()},
                  sources={"a": {"sinks": [shared, other]}, "b": {"sinks": [dict(shared, subject="hooks.b")]}})
    assert nats.connections("shared") == [] and nats.connections("other") == [], "opened at the first delivery"
    ids = []
    for src in ("a", "b"):
        r = node.post(f"/webhooks/{src}", b"x")
        assert r.status == 201, r
        ids.append(r.json["id"])
    msgs = wait_stored(nats, "HOOKS", ids)
    assert len([m for m in msgs if msg_id(m) == ids[0]]) == 1  # sinks of one source: one stream, one copy
    assert len(nats.connections("shared")) == 1, "three sinks... two of them share one connection"
    assert len(nats.connections("other")) == 1
    wait_until(lambda: nats.connections("shared") == [], timeout=10 * SLOW, what="the idle connection closed")
    assert len(nats.connections("other")) == 1, "idle_timeout_ms 0: never closed"
    r = node.post("/webhooks/b", b"y")
    assert r.status == 201, r
    wait_stored(nats, "HOOKS", [r.json["id"]])
    assert len(nats.connections("shared")) == 1, "reopened on demand"


# ----------------------------------------------------------------------------- config and egress

@pytest.mark.parametrize("scheme", ["userpass", "nkey", "token"])
def test_auth_schemes(ankusa, tmp_path, scheme):
    """Each scheme against a server that requires it; a wrong credential never delivers and
    never shows in the node's log or in a dead letter's reason."""
    seed, pub = user_nkey()
    admin = {"user": "admin", "pass": "adminpw"}
    if scheme == "token":
        srv = NatsServer(tmp_path / "ns", args=["--auth", "s3cr3t-token"], client_auth={"auth_token": "s3cr3t-token"})
        good, bad = {"token": "s3cr3t-token"}, {"token": "WRONG-token"}
    else:
        srv = NatsServer(tmp_path / "ns", client_auth=admin, config_text=(
            "authorization { users = [ {user: admin, password: adminpw}, {user: sinker, password: sinkpw}, "
            f"{{nkey: {pub}}} ] }}\n"))
        if scheme == "userpass":
            good, bad = {"username": "sinker", "password": "sinkpw"}, {"username": "sinker", "password": "WRONGpw"}
        else:
            other, _ = user_nkey()
            good, bad = {"nkey_seed": seed}, {"nkey_seed": other}
    srv.start()
    try:
        srv.create_stream("HOOKS", ["hooks.>"])
        node = start_node(ankusa, srv, sink=nats_sink(srv, auth=good), config={"dispatch": dispatch(max_attempts=3)})
        ok = post_hooks(node, [b"authed"])
        wait_stored(srv, "HOOKS", ok)
        node.stop()
        node2 = start_node(ankusa, srv, sink=nats_sink(srv, auth=bad), name="badcred",
                           config={"dispatch": dispatch(max_attempts=3)})
        (hid,) = post_hooks(node2, [b"refused"])
        wait_until(lambda: dead_letters(node2), timeout=15 * SLOW, what="dead-lettered")
        (e,) = dead_letters(node2)
        assert e["id"] == hid and e["reason"], e
        assert hid not in {msg_id(m) for m in srv.messages("HOOKS")}
        text = node2.log_text() + json.dumps(e) + node2.admin("/v1/config").body.decode()
        for secret in bad.values():
            if secret != "sinker":
                assert secret not in text
    finally:
        srv.stop()


@pytest.mark.parametrize("cert_name,delivered", [("localhost", True), ("other.example", False)])
def test_tls_verifies_the_configured_name_while_connecting_to_the_literal(ankusa, tmp_path, cert_name, delivered):
    """tls: true against a server whose certificate is for cert_name (a CA of the test's,
    given by SSL_CERT_FILE): servers names "localhost", which the sink resolves and connects
    to as 127.0.0.1; the certificate is checked against "localhost", so the right one
    delivers and a certificate for another name never does."""
    ca, cert, key = make_certs(tmp_path / "certs", cert_name)
    srv = NatsServer(tmp_path / "ns", args=["--tls", "--tlscert", str(cert), "--tlskey", str(key)], cafile=str(ca),
                     server_name=cert_name).start()
    try:
        srv.create_stream("HOOKS", ["hooks.>"])
        sink = nats_sink(srv, servers=[f"localhost:{srv.port}"], tls=True)
        node = start_node(ankusa, srv, sink=sink, env={"SSL_CERT_FILE": str(ca)},
                          config={"dispatch": dispatch(max_attempts=3)})
        ok = post_hooks(node, [b"over-tls"])
        if delivered:
            wait_stored(srv, "HOOKS", ok)
        else:
            wait_until(lambda: dead_letters(node), timeout=15 * SLOW, what="dead-lettered")
            (e,) = dead_letters(node)
            assert e["reason"] == "{sink, nats, {max_attempts, not_connected}}" and e["attempts"] == 3, e
            assert srv.messages("HOOKS") == []
    finally:
        srv.stop()


def test_over_max_payload_is_permanent(ankusa, tmp_path):
    srv = NatsServer(tmp_path / "ns", config_text="max_payload: 4096\n").start()
    try:
        srv.create_stream("HOOKS", ["hooks.>"])
        node = start_node(ankusa, srv)
        ok = post_hooks(node, [b"fits"])
        (big,) = post_hooks(node, [b"x" * 6000])
        wait_stored(srv, "HOOKS", ok)
        wait_until(lambda: dead_letters(node), timeout=10 * SLOW, what="dead-lettered")
        (e,) = dead_letters(node)
        assert e["id"] == big and "message_too_large" in e["reason"] and e["attempts"] == 1, e
    finally:
        srv.stop()


def check_config(tmp_path, sink, **extra):
    cfg = {"node": {"data_dir": str(tmp_path / "d")},
           "sources": {"s": {"verify": {"type": "none"}, "sinks": [sink]}}}
    cfg.update(extra)
    p = tmp_path / "c.yml"
    p.write_text(json.dumps(cfg))
    return run_cli("check-config", "--config", str(p))


@pytest.mark.parametrize("extra,message", [
    ({"auth": {"username": "u", "password": "SECRETPW", "token": "SECRETTOK"}},
     "sources.s.sinks[0].auth: username/password and token are mutually exclusive; declare one scheme"),
    ({"auth": {"username": "u"}}, "sources.s.sinks[0].auth: username and password go together"),
    ({"auth": {"jwt": "SECRETJWT"}}, "sources.s.sinks[0].auth.jwt requires nkey_seed"),
    ({"auth": {"nkey_seed": "SECRETSEED"}}, "sources.s.sinks[0].auth.nkey_seed: not a user NKey seed"),
    ({"idle_timeout_ms": 3000}, "sources.s.sinks[0].idle_timeout_ms: must be 0 (never) or at least"),
    ({"servers": "nats://user:SECRETPW@h:4222"}, "sources.s.sinks[0].servers[0]: credentials go in auth"),
    ({"servers": "http://h:4222"}, "sources.s.sinks[0].servers[0]: only nats:// and tls://"),
    ({"subject": "a.*"}, "sources.s.sinks[0].subject: a subject published to cannot hold a wildcard"),
    ({"subject": None}, "sources.s.sinks[0]"),
])
def test_config_errors_name_the_key_and_hide_secrets(tmp_path, extra, message):
    sink = {"type": "nats", "servers": ["127.0.0.1:4222"], "subject": "a.b"}
    sink.update(extra)
    if sink["subject"] is None:
        del sink["subject"]
    r = check_config(tmp_path, sink)
    assert r.returncode == 78, r
    assert message in r.stderr, r.stderr
    assert "SECRET" not in r.stderr + r.stdout


def test_guarded_literal_the_guard_refuses_is_a_config_error(tmp_path):
    sink = {"type": "nats", "servers": ["nats://1.1.1.1:4222", "10.1.2.3"], "subject": "a.b"}
    r = check_config(tmp_path, sink, egress={"guard_static_sources": True})
    assert r.returncode == 78, r
    assert "sources.s.sinks[0].servers: egress: 10.1.2.3 is not a public address" in r.stderr, r.stderr
    r = check_config(tmp_path, sink, egress={"guard_static_sources": True, "allow_cidrs": ["10.0.0.0/8"]})
    assert r.returncode == 0, r.stderr
    assert check_config(tmp_path, sink).returncode == 0, "trusted: not checked"


def test_valid_config_with_every_key(tmp_path):
    sink = {"type": "nats", "servers": "nats://a:4222, tls://b:4223,c", "subject": "x.y",
            "inline_max_bytes": None, "publish_timeout_ms": 1000, "tls": True, "connection": "main",
            "idle_timeout_ms": 0, "auth": {"token": "t"}}
    r = check_config(tmp_path, sink)
    assert r.returncode == 0, r.stderr


def test_guarded_sink_refuses_loopback_permanently_and_allows_it_when_listed(ankusa, nats):
    nats.create_stream("HOOKS", ["hooks.>"])
    # a host name: the sink resolves it and checks the address it would connect to
    sink = nats_sink(nats, servers=[f"localhost:{nats.port}"])
    node = start_node(ankusa, nats, sink=sink, config={"egress": {"guard_static_sources": True}})
    (hid,) = post_hooks(node, [b"to-loopback"])
    wait_until(lambda: dead_letters(node), timeout=10 * SLOW, what="refused at once")
    (e,) = dead_letters(node)
    assert e["id"] == hid and "is not a public address" in e["reason"], e
    assert nats.messages("HOOKS") == []
    node.stop()
    node2 = start_node(ankusa, nats, sink=sink, name="allowed",
                       config={"egress": {"guard_static_sources": True, "allow_cidrs": ["127.0.0.0/8", "::1/128"]}})
    ok = post_hooks(node2, [b"allowed"])
    wait_stored(nats, "HOOKS", ok)
