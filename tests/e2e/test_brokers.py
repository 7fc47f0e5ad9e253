"""Every broker sink at once: ONE node whose source `xb` (tenant acme, dedupe on
X-Delivery-Id) has a sink of each broker type -- redis (a password in its url), nats
(JetStream), rabbitmq (a user and password of its own in its url), sqs (stand-in) and
google_pubsub (stand-in) -- and the claim_check role with a local claim store.

  * the same hook is the same bytes on every transport (docs/sink-message.md: "the same
    bytes on every transport"), valid against docs/sink-message-v1.schema.json, and
    ankusa_consumer.Consumer gets the original body back;
  * a 5 MB body goes to every transport as one claim (the same ref, size, sha256), which the
    node's claim gateway serves byte-identical to a principal of the tenant, in ranges too,
    and refuses without a token, with a wrong one and to another tenant's principal;
  * GET /asyncapi.json describes exactly the configured channels, with their servers'
    protocol and host and no credential anywhere, and SinkMessageV1 as the payload.

The brokers come from the per-sink suites' fixtures: redis_server.RedisServer and
test_sink_redis.Subscriber, nats_server.NatsServer, the session's one rabbitmq-server
(brokers_common.session_rabbitmq: test_sink_rabbitmq.py's session fixture, never a second
broker), sqs_standin.SqsStandin, pubsub_standin.PubsubStandin, kafka_mock.KafkaMock."""
import base64
import hashlib
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from brokers_common import session_rabbitmq
from kafka_mock import KafkaMock
from helpers import LOOPBACK, REPO, SLOW, Server, check_stopped, free_ports, principal, wait_until
from nats_server import NatsServer
from pubsub_standin import PubsubStandin
from redis_server import RedisServer
from sqs_standin import SqsStandin
from test_sink_redis import Subscriber

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import Consumer, validate  # noqa: E402

SCHEMA = json.loads((REPO / "docs" / "sink-message-v1.schema.json").read_text())
TRANSPORTS = ("redis", "nats", "rabbitmq", "sqs", "google_pubsub", "kafka")
KAFKA_TOPIC = "xb.hooks"

# credentials: each must be absent from /asyncapi.json
REDIS_PW = "Redis-xb-S3cret-pw"
RMQ_USER, RMQ_PW = "xbroker", "Rmq-xb-S3cret-pw"
SQS_KEY_ID, SQS_SECRET = "AKIDXBROKER0TEST", "xbSecretAccessKey/For+The+Tests0000000000"
PUBSUB_PROJECT, PUBSUB_TOKEN = "xb-project", "ya29.xbroker-pubsub-token"
SECRETS = (REDIS_PW, RMQ_PW, SQS_SECRET, PUBSUB_TOKEN)

# names: each must be a channel address in /asyncapi.json
REDIS_CHANNEL = "xb.hooks"
NATS_STREAM, NATS_SUBJECT = "XBROKER", "xb.hooks.acme"
RMQ_EXCHANGE, RMQ_QUEUE = "ak.xbroker", "q.xbroker"
SQS_QUEUE = "xb-orders"
PUBSUB_TOPIC = "xb-hooks"

# admin principals (configuring any makes every admin request need a token)
OPS = "xb-ops-token"
READER = "xb-acme-claims-reader"
BETA = "xb-beta-claims-reader"
PRINCIPALS = [principal("ops", OPS, ["config:read", "metrics:read", "dlq:read"], "*"),
              principal("acme-reader", READER, ["claims:read"], ["acme"]),
              principal("beta-reader", BETA, ["claims:read"], ["beta"])]


# --------------------------------------------------------------------------- the rig

@pytest.fixture(scope="session")
def rabbit(request):
    return session_rabbitmq(request)


class Rig:
    """The brokers, what each transport has received (raw message bytes per hook id), and
    the node."""

    def __init__(self, tmp, rabbit):
        self.rabbit = rabbit
        self.closers = []
        self.redis = RedisServer(workdir=tmp / "redis", password=REDIS_PW).start()
        self.closers.append(self.redis.close)
        self.sub = Subscriber(self.redis, channel=REDIS_CHANNEL)
        self.closers.append(self.sub.close)
        self.nats = NatsServer(tmp / "nats").start()
        self.closers.append(self.nats.stop)
        self.nats.create_stream(NATS_STREAM, ["xb.>"])
        self.sqs = SqsStandin([SQS_QUEUE], {SQS_KEY_ID: SQS_SECRET})
        self.closers.append(self.sqs.close)
        self.ps = PubsubStandin(PUBSUB_PROJECT, [PUBSUB_TOPIC], auth="token", token=PUBSUB_TOKEN)
        self.closers.append(self.ps.close)
        self.kafka = KafkaMock(topics=(KAFKA_TOPIC,), stderr_path=tmp / "kafkamock.log")
        self.closers.append(self.kafka.close)
        # a user of our own on the shared broker (removed at the end), so that its password
        # is one no document could contain by chance
        rabbit.ctl("add_user", RMQ_USER, RMQ_PW)
        self.closers.append(lambda: rabbit.ctl("delete_user", RMQ_USER))
        rabbit.ctl("set_permissions", "-p", "/", RMQ_USER, ".*", ".*", ".*")
        rabbit.bind_queue(RMQ_EXCHANGE, RMQ_QUEUE, "#")
        self.closers.append(lambda: rabbit.delete_exchange(RMQ_EXCHANGE))
        self.closers.append(lambda: rabbit.delete_queue(RMQ_QUEUE))
        self.rmq_url = f"amqp://{RMQ_USER}:{RMQ_PW}@127.0.0.1:{rabbit.port}/%2F"
        self._rmq = []  # bodies taken off the queue (basic_get acks them)
        self._lock = threading.Lock()

        self.claim_port = free_ports(1)[0]
        sinks = [
            {"type": "redis", "url": self.redis.url(password=True), "channel": REDIS_CHANNEL},
            {"type": "nats", "servers": [self.nats.url], "subject": NATS_SUBJECT, "publish_timeout_ms": 5000},
            {"type": "rabbitmq", "url": self.rmq_url, "exchange": RMQ_EXCHANGE, "retry_ms": 300,
             "confirm_timeout_ms": 5000},
            {"type": "sqs", "queue_url": self.sqs.url(SQS_QUEUE), "region": "us-east-1",
             "access_key_id": SQS_KEY_ID, "secret_access_key": SQS_SECRET},
            {"type": "google_pubsub", "project": PUBSUB_PROJECT, "topic": PUBSUB_TOPIC, "endpoint": self.ps.url,
             "auth": "token", "token": PUBSUB_TOKEN},
            {"type": "kafka", "brokers": self.kafka.bootstrap, "topic": KAFKA_TOPIC},
        ]
        cfg = json.loads(json.dumps(LOOPBACK))  # the two HTTP brokers are on 127.0.0.1
        cfg.update({
            "node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
            "admin": {"principals": PRINCIPALS},
            "claim_check": {"port": self.claim_port, "ip": "127.0.0.1",
                            "store": {"type": "local", "root": str(tmp / "claims")}},
            "dispatch": {"retry": {"base_ms": 50, "max_ms": 300, "max_attempts": 100000, "jitter": False},
                         "breaker_failures": 0},
        })
        self.node = Server(tmp / "node", name="xbroker", config=cfg, sources={
            "xb": {"tenant": "acme", "dedupe": {"header": "x-delivery-id"}, "sinks": sinks}})
        self.node.start()

    # -- what each transport received: {hook id: [raw message bytes, one per copy]}
    def received(self):
        out = {t: {} for t in TRANSPORTS}

        def add(t, raw):
            out[t].setdefault(json.loads(raw)["id"], []).append(raw)

        for raw in self.sub.messages():
            add("redis", raw)
        for m in self.nats.messages(NATS_STREAM):
            add("nats", m["data"])
        got = self.rabbit.get_all(RMQ_QUEUE)
        with self._lock:
            self._rmq += [body for _, _, body in got]
            rmq = list(self._rmq)
        for body in rmq:
            add("rabbitmq", body)
        for m in self.sqs.snapshot(SQS_QUEUE):
            add("sqs", m["Body"].encode("utf-8"))  # the JSON protocol's MessageBody string
        for m in self.ps.snapshot(PUBSUB_TOPIC):
            add("google_pubsub", m["data"])  # the stand-in keeps data base64-decoded
        for rec in self.kafka.consume(KAFKA_TOPIC):
            add("kafka", rec.value)
        return out

    def wait_all(self, ids, timeout=40.0):
        """Until every transport has received every id; returns received()."""
        box = {}

        def done():
            box["r"] = self.received()
            return all(set(ids) <= set(box["r"][t]) for t in TRANSPORTS)
        try:
            wait_until(done, timeout=timeout, what="every hook on every transport")
        except AssertionError:
            missing = {t: sorted(set(ids) - set(box["r"][t])) for t in TRANSPORTS}
            raise AssertionError(f"not every hook reached every transport; missing: {missing}\n"
                                 f"{self.node.log_tail(40)}") from None
        return box["r"]

    def post(self, body, headers=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        r = self.node.post("/webhooks/xb", body, h, timeout=60.0)
        assert r.status == 201, r
        return r.json["id"]

    def close(self):
        problems = check_stopped(self.node)
        for c in reversed(self.closers):
            try:
                c()
            except Exception as e:  # noqa: BLE001 - report after the rest is closed
                problems.append(f"cleanup: {e!r}")
        problems += [f"sqs stand-in violation: {v}" for v in self.sqs.violations]
        problems += [f"pubsub stand-in violation: {v}" for v in self.ps.violations]
        return problems


@pytest.fixture(scope="module")
def rig(rabbit, tmp_path_factory):
    r = None
    try:
        r = Rig(tmp_path_factory.mktemp("xbroker"), rabbit)
        yield r
    finally:
        problems = r.close() if r is not None else []
    assert problems == [], "\n\n".join(problems)


def one_copy(rec, t, hid):
    """The message bytes transport t received for hook hid: every copy (delivery is at least
    once) must be the same bytes."""
    copies = rec[t][hid]
    assert len(set(copies)) == 1, f"{t} received different bytes for one hook {hid}: {copies}"
    return copies[0]


def claim_get(rig, ref, token=READER, headers=None):
    """GET the ref at the node's claim gateway: (status, headers, body)."""
    _, _, rest = ref.partition("urn:ankusa:claim:v1:")
    tenant, _, cid = rest.partition(":")
    req = urllib.request.Request(f"http://127.0.0.1:{rig.claim_port}/v1/claims/{tenant}/{cid}")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


# --------------------------------------------------------------------------- 1. byte-identical

NOTE = 'he said "hi" \\ </x> a&b=1/2 ~'  # JSON escapes (the edge stores printable ASCII only)


def test_the_same_hook_is_byte_identical_on_every_transport(rig):
    hooks = [  # (body, request headers, what the message must say of them)
        (b'{"action":"opened","n":1}',
         {"X-GitHub-Event": "push", "X-GitHub-Hook-Id": "42", "X-Note": NOTE},
         {"x-github-event": "push", "x-github-hook-id": "42", "x-note": NOTE}),
        (b'{"event":"invoice.paid"}', {"X-Delivery-Id": "evt-xb-1"}, {}),
        (bytes(range(256)) * 3, {"Content-Type": "application/octet-stream"}, {}),
        (b"", {}, {}),
    ]
    ids = [rig.post(body, hdrs) for body, hdrs, _ in hooks]
    assert len(set(ids)) == len(ids)
    rec = rig.wait_all(ids)
    consumer = Consumer()
    for hid, (body, hdrs, want_headers) in zip(ids, hooks):
        raws = {t: one_copy(rec, t, hid) for t in TRANSPORTS}
        ref = raws["redis"]
        for t in TRANSPORTS:
            assert raws[t] == ref, (f"hook {hid}: the {t} message differs from the redis one\n"
                                    f"redis: {ref!r}\n{t}: {raws[t]!r}")
        msg = validate(ref)  # docs/sink-message-v1.schema.json
        assert msg["v"] == 1 and msg["id"] == hid
        assert msg["source_id"] == "xb" and msg["tenant_id"] == "acme"
        assert msg["size"] == len(body) and msg["sha256"] == hashlib.sha256(body).hexdigest()
        assert "claim" not in msg and base64.b64decode(msg["body_base64"]) == body
        for k, v in want_headers.items():
            assert msg["headers"].get(k) == v, (k, msg["headers"])
        if "X-Delivery-Id" in hdrs:
            assert msg["dedupe_key"] == "evt-xb-1"
            assert msg["idempotency_key"] == "acme:xb:evt-xb-1"
        else:
            assert msg["dedupe_key"] is None and msg["idempotency_key"] == hid
        d = consumer.handle(ref)
        assert d.body == body and not d.duplicate
    # the dedupe key holds: a provider's retry of the event is answered, not sent again
    r = rig.node.post("/webhooks/xb", b'{"event":"invoice.paid"}', {"X-Delivery-Id": "evt-xb-1"})
    assert r.status == 201 and r.json.get("duplicate") is True and r.json["id"] == ids[1], r


# --------------------------------------------------------------------------- 2. one claim

def test_a_5mb_body_reaches_every_broker_as_one_claim(rig):
    big = os.urandom(5 * 1024 * 1024)
    t0 = time.monotonic()
    hid = rig.post(big, {"Content-Type": "application/octet-stream"})
    rec = rig.wait_all([hid], timeout=60.0)
    raws = {t: one_copy(rec, t, hid) for t in TRANSPORTS}
    msgs = {t: validate(raw) for t, raw in raws.items()}
    for t, m in msgs.items():
        assert "body_base64" not in m and m.get("claim"), f"{t}: not a claim: {raws[t][:300]!r}"
        assert m["claim"].startswith("urn:ankusa:claim:v1:acme:"), (t, m["claim"])
        assert m["size"] == len(big) and m["sha256"] == hashlib.sha256(big).hexdigest(), t
        assert len(raws[t]) < 4096, f"{t}: a {len(raws[t])}-byte message for a claim"
    refs = {t: m["claim"] for t, m in msgs.items()}
    assert len(set(refs.values())) == 1, f"one hook, several claims: {refs}"
    assert len(set(raws.values())) == 1, "the claim message differs between transports"
    ref = msgs["redis"]["claim"]
    # exactly one pack was written for it (checked in once, not once per sink)
    packs = [p for p in (rig.node.workdir.parent / "claims").rglob("*") if p.is_file() and "tenant=acme" in str(p)]
    assert len(packs) == 1, packs

    # redeemed at the node's claim gateway, byte-identical
    st, hdrs, body = claim_get(rig, ref)
    assert st == 200, (st, body[:200])
    assert body == big
    d = Consumer(claim_base=f"http://127.0.0.1:{rig.claim_port}", token=READER).handle(raws["nats"])
    assert d.body == big
    # a range is exact
    st, hdrs, part = claim_get(rig, ref, headers={"Range": "bytes=100-199"})
    assert st == 206 and part == big[100:200], (st, len(part))
    assert hdrs.get("content-range") == f"bytes 100-199/{len(big)}", hdrs
    st, _, part = claim_get(rig, ref, headers={"Range": f"bytes={len(big) - 10}-"})
    assert st == 206 and part == big[-10:], (st, len(part))
    # refused: no token, a wrong token, another tenant's principal
    st, _, body = claim_get(rig, ref, token=None)
    assert st == 401, (st, body[:200])
    st, _, body = claim_get(rig, ref, token="not-a-token")
    assert st == 401, (st, body[:200])
    st, _, body = claim_get(rig, ref, token=BETA)
    assert st == 403, (st, body[:200])
    assert big[:64] not in body
    assert time.monotonic() - t0 < 60 * SLOW


# --------------------------------------------------------------------------- 3. asyncapi

def test_asyncapi_describes_the_configured_channels(rig):
    assert rig.node.admin("/asyncapi.json").status == 401, "principals configured: a token is needed"
    assert rig.node.admin("/asyncapi.json", token=READER).status == 403, "claims:read is not config:read"
    r = rig.node.admin("/asyncapi.json", token=OPS)
    assert r.status == 200, r
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    text = r.body.decode()
    doc = r.json
    assert doc["asyncapi"] == "3.0.0"

    # no credential anywhere in the document
    for secret in SECRETS + (RMQ_USER + ":", ":" + RMQ_PW, ":" + REDIS_PW + "@"):
        assert secret not in text, f"a credential ({secret[:4]}...) is in /asyncapi.json"
    assert "@" not in json.dumps(doc["servers"]), doc["servers"]

    want = {  # type -> (address, protocol, host)
        "redis": (REDIS_CHANNEL, "redis", f"127.0.0.1:{rig.redis.port}"),
        "nats": (NATS_SUBJECT, "nats", f"127.0.0.1:{rig.nats.port}"),
        "rabbitmq": (RMQ_EXCHANGE, "amqp", f"127.0.0.1:{rig.rabbit.port}"),
        "sqs": (SQS_QUEUE, "sqs", f"127.0.0.1:{rig.sqs.port}"),
        "google_pubsub": (PUBSUB_TOPIC, "googlepubsub", f"127.0.0.1:{rig.ps.port}"),
        "kafka": (KAFKA_TOPIC, "kafka", rig.kafka.brokers[0]),
    }
    channels = doc["channels"]
    assert len(channels) == len(want), sorted(channels)
    seen = {}
    for cid, ch in channels.items():
        kinds = [t for t in want if cid.endswith("-" + t)]
        assert len(kinds) == 1 and cid.startswith("xb-"), cid
        t = kinds[0]
        seen[t] = cid
        address, protocol, host = want[t]
        assert ch["address"] == address, (cid, ch)
        (sref,) = ch["servers"]
        assert sref["$ref"].startswith("#/servers/"), sref
        srv = doc["servers"][sref["$ref"][len("#/servers/"):]]
        assert srv["protocol"] == protocol and srv["host"] == host, (cid, srv)
        assert set(srv) <= {"host", "protocol", "pathname", "description", "protocolVersion"}, srv
        assert ch["messages"]["SinkMessageV1"]["$ref"] == "#/components/messages/SinkMessageV1", ch
    assert set(seen) == set(want)
    assert doc["servers"][channels[seen["google_pubsub"]]["servers"][0]["$ref"][10:]]["pathname"] == \
        f"/v1/projects/{PUBSUB_PROJECT}"
    assert channels[seen["rabbitmq"]]["bindings"]["amqp"]["exchange"]["name"] == RMQ_EXCHANGE

    # one send operation per channel
    ops = doc["operations"]
    assert len(ops) == len(channels), sorted(ops)
    by_channel = {}
    for oid, op in ops.items():
        assert op["action"] == "send", (oid, op)
        by_channel[op["channel"]["$ref"]] = op
        (m,) = op["messages"]
        assert m["$ref"].endswith("/messages/SinkMessageV1"), m
    assert set(by_channel) == {f"#/channels/{cid}" for cid in channels}

    # the message: SinkMessageV1, its payload the published schema
    msg = doc["components"]["messages"]["SinkMessageV1"]
    assert msg["contentType"] == "application/json"
    assert msg["payload"] == SCHEMA, "the payload is not docs/sink-message-v1.schema.json"
