"""The `sqs` sink through the real binary against a loopback SQS stand-in (sqs_standin.py):
every acknowledged hook becomes one SigV4-signed SendMessage (checked by botocore's signer,
not ours) whose MessageBody is the SinkMessageV1 (valid against the published schema) and
whose attributes are the common metadata set; FIFO ids; the confirm rule (MD5 of the body
sent); the classes of failure; and the consumer example reading the queue."""
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time

import pytest

from helpers import LOOPBACK, REPO, SLOW, free_ports, principal, run_cli
from sqs_standin import SqsStandin

sys.path.insert(0, str(REPO / "examples" / "consumers"))
from ankusa_consumer import validate  # noqa: E402

KEY_ID = "AKIDEXAMPLE0TEST"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
TEMP_KEY_ID = "ASIATEMPORARY0TEST"
TEMP_SECRET = "temporary/secret+for+the+tests"
TOKEN = "FwoGZXIvYXdzEXAMPLEsessiontoken//with+slashes=="
CONSUMER = REPO / "examples" / "consumers" / "sqs_consumer.py"


@pytest.fixture
def sqs():
    s = SqsStandin(["orders", "orders.fifo"], {KEY_ID: SECRET, TEMP_KEY_ID: TEMP_SECRET})
    yield s
    s.close()
    assert s.violations == [], s.violations


def cfg(max_attempts=60, extra=None):
    c = json.loads(json.dumps(LOOPBACK))
    c["dispatch"] = {"retry": {"base_ms": 50, "max_ms": 200, "max_attempts": max_attempts, "jitter": False},
                     "breaker_failures": 0}
    if extra:
        c.update(extra)
    return c


def sink(sqs, queue="orders", **over):
    s = {"type": "sqs", "queue_url": sqs.url(queue), "region": "us-east-1", "access_key_id": KEY_ID,
         "secret_access_key": SECRET}
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
    return node.metrics().value("ankusa_deliveries_total", instance="default", sink="sqs", result=result)


def dead_entries(node, n):
    wait_for(lambda: node.admin("/v1/dlq").json["total"] >= n, what=f"{n} dead-lettered")
    r = node.admin("/v1/dlq")
    assert r.json["total"] == n, r.json
    return r.json["entries"]


def permanent(e, reason):
    """A dead letter the sink's permanent answer made, at its first attempt."""
    assert e["reason"] == f"{{sink, sqs, {reason}}}" and e["attempts"] == 1, e


def exhausted(e, reason, attempts):
    """A dead letter of transient answers, after the last attempt."""
    assert e["reason"] == f"{{sink, sqs, {{max_attempts, {reason}}}}}" and e["attempts"] == attempts, e


def attrs_of(msg):
    return {k: v["StringValue"] for k, v in msg["MessageAttributes"].items()}


def consume(queue_url, n, key_id=KEY_ID, secret=SECRET, idle=8, extra=()):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_ACCESS_KEY_ID": key_id, "AWS_SECRET_ACCESS_KEY": secret, "AWS_EC2_METADATA_DISABLED": "true"})
    p = subprocess.run(["/usr/bin/python3", str(CONSUMER), "--queue-url", queue_url, "--region", "us-east-1",
                        "--max", str(n), "--idle", str(idle), *extra], env=env, capture_output=True, timeout=60 * SLOW)
    assert p.returncode == 0, p.stderr.decode()
    return [json.loads(line) for line in p.stdout.decode().splitlines() if line.strip()]


def test_delivers_the_sink_message_signed_with_attributes_and_the_consumer_reads_it(ankusa, sqs):
    sources = {"gh": {"tenant": "acme", "dedupe": {"header": "X-Delivery"},
                      "sinks": [sink(sqs)]},
               "tmp": {"sinks": [sink(sqs, access_key_id=TEMP_KEY_ID, secret_access_key=TEMP_SECRET,
                                      session_token=TOKEN)]}}
    node = ankusa(config=cfg(), sources=sources)
    body = b'{"action":"opened","n":1}'
    h1 = post_ok(node, "gh", body, {"Content-Type": "application/json", "X-Delivery": "d-1",
                                    "X-GitHub-Event": "push"})
    big = bytes(range(256)) * 40  # binary, 10 KiB: inline base64
    h2 = post_ok(node, "tmp", big, {"Content-Type": "application/octet-stream"})
    msgs = wait_for(lambda: len(sqs.snapshot("orders")) >= 2 and sqs.snapshot("orders"), what="two messages")
    wait_for(lambda: metric(node, "ok") == 2, what="two ok deliveries")
    assert len(msgs) == 2 and sqs.auth_failures == 0
    by_id = {}
    for m in msgs:
        raw = m["Body"].encode()
        doc = validate(raw)  # the published schema
        by_id[doc["id"]] = (m, doc)
    m1, d1 = by_id[h1]
    assert base64.b64decode(d1["body_base64"]) == body and d1["size"] == len(body)
    assert d1["source_id"] == "gh" and d1["tenant_id"] == "acme" and d1["dedupe_key"] == "d-1"
    assert d1["headers"]["x-github-event"] == "push"
    assert attrs_of(m1) == {"ankusa_id": h1, "ankusa_source_id": "gh", "ankusa_tenant_id": "acme",
                            "ankusa_message_version": "1", "ankusa_idempotency_key": d1["idempotency_key"],
                            "content_type": "application/json", "ankusa_dedupe_key": "d-1"}
    assert d1["idempotency_key"] == "acme:gh:d-1"
    assert m1["MessageGroupId"] is None and m1["MessageDeduplicationId"] is None, "standard queue: no FIFO ids"
    m2, d2 = by_id[h2]
    assert base64.b64decode(d2["body_base64"]) == big
    assert attrs_of(m2)["ankusa_idempotency_key"] == h2 and "ankusa_dedupe_key" not in attrs_of(m2)
    sends = sqs.actions("SendMessage")
    assert len(sends) == 2
    for r in sends:
        h = r["headers"]
        assert h["x-amz-target"] == "AmazonSQS.SendMessage"
        assert h["content-type"] == "application/x-amz-json-1.0"
        assert r["json"]["QueueUrl"] == sqs.url("orders")
    cred = f"AWS4-HMAC-SHA256 Credential={TEMP_KEY_ID}/"
    tokened = [r for r in sends if r["headers"]["authorization"].startswith(cred)]
    assert len(tokened) == 1 and tokened[0]["headers"]["x-amz-security-token"] == TOKEN
    assert "x-amz-security-token" in tokened[0]["headers"]["authorization"], "the session token is signed"
    # the consumer example reads both back (and deletes them)
    lines = consume(sqs.url("orders"), 2)
    assert sorted(x["id"] for x in lines) == sorted([h1, h2])
    assert all(x["sha256_ok"] and not x["duplicate"] for x in lines)
    assert {x["id"]: x["size"] for x in lines} == {h1: len(body), h2: len(big)}
    assert len(sqs.actions("DeleteMessage")) == 2


def test_fifo_queue_gets_group_and_deduplication_ids(ankusa, sqs):
    sources = {"a": {"tenant": "acme", "sinks": [sink(sqs, "orders.fifo")]},
               "b": {"tenant": "acme", "sinks": [sink(sqs, "orders.fifo", message_group_id="all-b")]}}
    node = ankusa(config=cfg(), sources=sources)
    ha = post_ok(node, "a", b'{"x":1}')
    hb = post_ok(node, "b", b'{"x":2}')
    msgs = wait_for(lambda: len(sqs.snapshot("orders.fifo")) >= 2 and sqs.snapshot("orders.fifo"), what="2 messages")
    got = {json.loads(m["Body"])["id"]: m for m in msgs}
    assert got[ha]["MessageGroupId"] == "acme/a" and got[ha]["MessageDeduplicationId"] == ha
    assert got[hb]["MessageGroupId"] == "all-b" and got[hb]["MessageDeduplicationId"] == hb
    lines = consume(sqs.url("orders.fifo"), 2)
    assert sorted(x["id"] for x in lines) == sorted([ha, hb])


def test_standard_queue_sends_a_group_id_only_when_configured(ankusa, sqs):
    node = ankusa(config=cfg(), sources={"s": {"tenant": "t1", "sinks": [sink(sqs, message_group_id="g1")]}})
    hid = post_ok(node, "s", b"{}")
    (m,) = wait_for(lambda: sqs.snapshot("orders"), what="a message")
    assert json.loads(m["Body"])["id"] == hid
    assert m["MessageGroupId"] == "g1" and m["MessageDeduplicationId"] is None


def test_a_wrong_secret_is_refused_and_transient_the_right_one_passes(ankusa, sqs):
    sources = {"bad": {"sinks": [sink(sqs, secret_access_key="not-the-secret")]},
               "good": {"sinks": [sink(sqs)]}}
    node = ankusa(config=cfg(max_attempts=3), sources=sources)
    hbad = post_ok(node, "bad", b'{"n":1}')
    hgood = post_ok(node, "good", b'{"n":2}')
    (e,) = dead_entries(node, 1)
    assert e["id"] == hbad
    exhausted(e, "sqs SignatureDoesNotMatch", 3)
    bad_sends = [r for r in sqs.actions("SendMessage") if r["status"] == 403]
    assert len(bad_sends) == 3, "transient: retried up to max_attempts"
    assert sqs.auth_failures == 3
    (m,) = sqs.snapshot("orders")
    assert json.loads(m["Body"])["id"] == hgood
    assert "not-the-secret" not in node.log_text()


def test_md5_mismatch_is_transient_and_retried(ankusa, sqs):
    sqs.faults = [{"md5": "wrong"}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(sqs)]}})
    hid = post_ok(node, "s", b'{"m":1}')
    wait_for(lambda: metric(node, "ok") == 1, what="ok after the retry")
    assert len(sqs.actions("SendMessage")) == 2
    msgs = sqs.snapshot("orders")
    assert [json.loads(m["Body"])["id"] for m in msgs] == [hid, hid], "the unconfirmed copy stays: at least once"
    lines = consume(sqs.url("orders"), 2)
    assert [x["duplicate"] for x in lines] == [False, True], "the consumer drops the second by idempotency_key"


def test_md5_mismatch_reason(ankusa, sqs):
    sqs.always = {"md5": "wrong"}
    node = ankusa(config=cfg(max_attempts=2), sources={"s": {"sinks": [sink(sqs)]}})
    post_ok(node, "s", b'{"m":2}')
    (e,) = dead_entries(node, 1)
    exhausted(e, "md5_mismatch", 2)
    assert len(sqs.actions("SendMessage")) == 2


@pytest.mark.parametrize("code", ["InvalidParameterValue", "InvalidMessageContents"])
def test_invalid_message_errors_are_permanent(ankusa, sqs, code):
    sqs.always = {"status": 400, "code": code}
    node = ankusa(config=cfg(max_attempts=5), sources={"s": {"sinks": [sink(sqs)]}})
    hid = post_ok(node, "s", b'{"p":1}')
    (e,) = dead_entries(node, 1)
    assert e["id"] == hid
    permanent(e, f"sqs {code}")
    assert len(sqs.actions("SendMessage")) == 1, "permanent: never retried"
    assert metric(node, "dlq") == 1


def test_other_sqs_errors_and_foreign_error_pages_are_transient(ankusa, sqs):
    sqs.faults = [{"status": 400, "code": "QueueDoesNotExist"}, {"status": 502, "raw": "<html>bad gateway</html>"},
                  {"status": 500, "code": "InternalError"}, {"status": 200, "raw": "not json"}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(sqs)]}})
    hid = post_ok(node, "s", b'{"t":1}')
    wait_for(lambda: metric(node, "ok") == 1, what="ok after four transient failures")
    assert [r["status"] for r in sqs.actions("SendMessage")] == [400, 502, 500, 200, 200]
    msgs = sqs.snapshot("orders")
    assert [json.loads(m["Body"])["id"] for m in msgs] == [hid]
    assert node.admin("/v1/dlq").json["total"] == 0


def test_other_error_reasons(ankusa, sqs):
    sqs.always = {"status": 503, "raw": "<html>down</html>"}
    node = ankusa(config=cfg(max_attempts=2), sources={"s": {"sinks": [sink(sqs)]}})
    post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    exhausted(e, "http 503", 2)
    assert len(sqs.actions("SendMessage")) == 2


def test_oversize_is_permanent_before_any_request(ankusa, sqs):
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(sqs, max_message_bytes=2000)]}})
    hid = post_ok(node, "s", b"x" * 1500)  # ~2 KiB of base64 plus the envelope
    small = post_ok(node, "s", b"y" * 100)
    (e,) = dead_entries(node, 1)
    assert e["id"] == hid
    permanent(e, e["reason"][12:-1])
    assert re.fullmatch(r"\{sink, sqs, message too large \(\d+ > 2000 bytes\)\}", e["reason"]), e
    wait_for(lambda: metric(node, "ok") == 1, what="the small one delivered")
    sends = sqs.actions("SendMessage")
    assert len(sends) == 1 and json.loads(sends[0]["json"]["MessageBody"])["id"] == small


def test_no_credentials_is_transient(ankusa, sqs):
    closed = free_ports(1)[0]
    s = sink(sqs)
    del s["access_key_id"], s["secret_access_key"]
    env = {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_SESSION_TOKEN": None,
           "AWS_WEB_IDENTITY_TOKEN_FILE": None, "AWS_EC2_METADATA_SERVICE_ENDPOINT": f"http://127.0.0.1:{closed}"}
    node = ankusa(config=cfg(max_attempts=2), sources={"s": {"sinks": [s]}}, env=env)
    post_ok(node, "s", b"{}")
    # each attempt asks the chain, which ends at IMDS (refused at once here, with its retries)
    wait_for(lambda: node.admin("/v1/dlq").json["total"] >= 1, timeout=40, what="dead-lettered")
    (e,) = node.admin("/v1/dlq").json["entries"]
    exhausted(e, "no credentials", 2)
    assert sqs.requests == []


def test_credentials_from_the_environment(ankusa, sqs):
    s = sink(sqs)
    del s["access_key_id"], s["secret_access_key"]
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    node = ankusa(config=cfg(), sources={"s": {"sinks": [s]}}, env=env)
    hid = post_ok(node, "s", b"{}")
    (m,) = wait_for(lambda: sqs.snapshot("orders"), what="a message")
    assert json.loads(m["Body"])["id"] == hid and sqs.auth_failures == 0


def test_guarded_sink_refuses_a_private_address_permanently(ankusa, sqs):
    c = cfg(extra={"egress": {"allow_http": True, "guard_static_sources": True}})
    node = ankusa(config=c, sources={"s": {"sinks": [sink(sqs)]}})
    post_ok(node, "s", b"{}")
    (e,) = dead_entries(node, 1)
    permanent(e, "egress: 127.0.0.1 is not a public address")
    assert sqs.requests == []


def test_config_errors_name_the_key(ankusa):
    bad = [({"queue_url": "ftp://x/0/q", "region": "us-east-1"}, "sinks[0].queue_url: not an http(s):// URL"),
           ({"queue_url": "http://127.0.0.1:1/0/q"}, "sinks[0].region: required"),
           ({"queue_url": "https://sqs.eu-west-1.amazonaws.com/0/q", "access_key_id": "x"},
            "access_key_id and secret_access_key go together")]
    for opts, want in bad:
        node = ankusa(start=False, sources={"s": {"sinks": [dict(type="sqs", **opts)]}})
        p = run_cli("check-config", "--config", node.config_path)
        assert p.returncode != 0 and want in p.stdout + p.stderr, (opts, p.stdout, p.stderr)
    # the region is read from an AWS queue URL; secrets never echo
    node = ankusa(start=False, sources={"s": {"sinks": [{
        "type": "sqs", "queue_url": "https://sqs.eu-west-1.amazonaws.com/0/q", "access_key_id": "AKID",
        "secret_access_key": "very-secret-value", "session_token": "tok-secret-value"}]}})
    p = run_cli("check-config", "--config", node.config_path)
    assert p.returncode == 0, p.stdout + p.stderr
    p = run_cli("print-config", "--config", node.config_path)
    assert "very-secret-value" not in p.stdout and "tok-secret-value" not in p.stdout


def test_a_guarded_sink_signs_with_the_nodes_credentials_only_toward_aws(ankusa):
    guarded = {"egress": {"guard_static_sources": True}}
    spec = {"type": "sqs", "queue_url": "https://queue.example.net/0/q", "region": "us-east-1"}
    node = ankusa(start=False, config=guarded, sources={"s": {"sinks": [spec]}})
    p = run_cli("check-config", "--config", node.config_path)
    want = "sinks[0].access_key_id: a guarded sink signs with the node's own"
    assert p.returncode != 0 and want in p.stdout + p.stderr
    ok = dict(spec, queue_url="https://sqs.us-east-1.amazonaws.com/123456789012/q")
    node = ankusa(start=False, config=guarded, sources={"s": {"sinks": [ok]}})
    p = run_cli("check-config", "--config", node.config_path)
    assert p.returncode == 0, p.stdout + p.stderr


def test_stop_during_a_send_answers_it_and_the_restart_delivers(ankusa, sqs):
    sqs.faults = [{"delay": 3.0}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(sqs)]}})
    hid = post_ok(node, "s", b'{"slow":1}')
    wait_for(lambda: sqs.actions("SendMessage"), what="the send under way")
    t = time.time()
    assert node.stop() == 0
    assert time.time() - t < 10
    node.start()
    # delivered once confirmed, before the stop (drained) or after the restart (redelivered)
    wait_for(lambda: settled(node), what="nothing left to deliver after the restart")
    assert hid in [json.loads(m["Body"])["id"] for m in sqs.snapshot("orders")]


def settled(node):
    m = node.metrics()
    return all(m.value(f"ankusa_queue_{k}", instance="default") == 0 for k in ("pending", "scheduled", "inflight"))


def test_a_dlq_replay_on_fifo_gets_its_own_deduplication_id(ankusa, sqs):
    sqs.always = {"status": 400, "code": "InvalidParameterValue"}
    node = ankusa(config=cfg(), sources={"s": {"tenant": "acme", "sinks": [sink(sqs, "orders.fifo")]}})
    hid = post_ok(node, "s", b'{"r":1}')
    dead_entries(node, 1)
    sqs.always = None
    r = node.admin("/v1/replays", "POST", body={"kind": "dlq", "source_id": "s"})
    assert r.status in (200, 202), r
    rid = r.json["id"]
    (m,) = wait_for(lambda: sqs.snapshot("orders.fifo"), what="the replayed message")
    assert m["MessageDeduplicationId"] == f"{hid}:replay:{rid}" and m["MessageGroupId"] == "acme/s"
    assert attrs_of(m)["ankusa_replay_id"] == rid and json.loads(m["Body"])["replay_id"] == rid


CLAIM_TOKEN = "claims-reader-token"


def claim_config(tmp_path):
    port = free_ports(1)[0]
    c = cfg()
    c.update({"node": {"roles": ["edge", "dispatch", "storage", "claim_check"]},
              "admin": {"principals": [principal("reader", CLAIM_TOKEN, ["claims:read"], "*")]},
              "claim_check": {"port": port, "ip": "127.0.0.1",
                              "store": {"type": "local", "root": str(tmp_path / "c")}}})
    return c, f"http://127.0.0.1:{port}"


def test_a_large_body_goes_by_claim_and_the_consumer_redeems_it(ankusa, sqs, tmp_path):
    c, claim_base = claim_config(tmp_path)
    node = ankusa(config=c, sources={"s": {"tenant": "acme", "sinks": [sink(sqs, inline_max_bytes=1000)]}})
    big = os.urandom(5000)
    hbig = post_ok(node, "s", big, {"Content-Type": "application/octet-stream"})
    hsmall = post_ok(node, "s", b'{"small":true}')
    msgs = wait_for(lambda: len(sqs.snapshot("orders")) >= 2 and sqs.snapshot("orders"), what="two messages")
    docs = {d["id"]: d for d in (validate(m["Body"].encode()) for m in msgs)}
    assert docs[hbig]["claim"].startswith("urn:ankusa:claim:v1:acme:") and "body_base64" not in docs[hbig]
    assert docs[hbig]["size"] == 5000 and docs[hbig]["sha256"] == hashlib.sha256(big).hexdigest()
    assert "body_base64" in docs[hsmall] and "claim" not in docs[hsmall]
    lines = consume(sqs.url("orders"), 2, extra=("--claim-base", claim_base, "--token", CLAIM_TOKEN))
    got = {x["id"]: x for x in lines}
    assert got[hbig]["by_claim"] and got[hbig]["sha256_ok"] and got[hbig]["size"] == 5000
    assert not got[hsmall]["by_claim"]


def test_a_slow_answer_times_out_and_is_retried(ankusa, sqs):
    sqs.faults = [{"delay": 1.5}]
    node = ankusa(config=cfg(), sources={"s": {"sinks": [sink(sqs, timeout_ms=500)]}})
    hid = post_ok(node, "s", b"{}")
    wait_for(lambda: metric(node, "ok") == 1, what="ok after the timeout")
    assert len(sqs.actions("SendMessage")) == 2
    assert hid in [json.loads(m["Body"])["id"] for m in sqs.snapshot("orders")]


def test_a_guarded_sink_reaches_an_allowed_address(ankusa, sqs):
    c = cfg(extra={"egress": {"allow_http": True, "allow_cidrs": ["127.0.0.0/8"], "guard_static_sources": True}})
    node = ankusa(config=c, sources={"s": {"sinks": [sink(sqs)]}})
    hid = post_ok(node, "s", b"{}")
    (m,) = wait_for(lambda: sqs.snapshot("orders"), what="a message")
    assert json.loads(m["Body"])["id"] == hid
