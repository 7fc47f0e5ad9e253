"""Ingest port statuses, ids, the stored envelope (admin /v1/hooks/{id}), tenant binding,
metrics, and back-pressure through the test seams."""
import base64
import os
import threading
import time
import uuid

import pytest

from helpers import (RawConn, chunked, http_request, is_uuid7, post_many, raw_request, sha256_hex,
                     uuid7_ms)

ALL_BYTES = bytes(range(256))


def accepted_id(r):
    assert r.status == 201, r
    j = r.json
    assert j["status"] == "accepted", j
    assert set(j) == {"status", "id"}, j
    assert is_uuid7(j["id"]), f"not a UUIDv7: {j['id']!r}"
    return j["id"]


def assert_error(r, status, code):
    assert r.status == status, r
    assert r.headers.get("content-type", "").startswith("application/json"), r.headers
    assert r.json.get("error") == code, r
    return r.json


# --------------------------------------------------------------------------- basics

def test_health_and_ready_on_both_ports(ankusa):
    s = ankusa()
    for port in (s.http_port, s.admin_port):
        r = http_request(port, "GET", "/health")
        assert r.status == 200, r
        assert r.json["status"] == "ok" and r.json["instance"] == "default", r.json
        r = http_request(port, "GET", "/ready")
        assert r.status == 200, r
        assert r.json["status"] == "ready", r.json


def test_accept_returns_uuidv7_and_hook_is_stored(ankusa):
    s = ankusa()
    before = time.time() * 1000
    r = s.post("/webhooks/demo", b'{"hello":"world"}', {"Content-Type": "application/json"})
    hid = accepted_id(r)
    after = time.time() * 1000
    assert before - 2000 <= uuid7_ms(hid) <= after + 2000, "UUIDv7 timestamp is not the receive time"
    h = s.hook(hid)
    assert h["id"] == hid
    assert h["source_id"] == "demo" and h["tenant_id"] == "default"
    assert base64.b64decode(h["body"]) == b'{"hello":"world"}'
    assert before - 2000 <= h["received_at"] <= after + 2000


def test_sequential_ids_increase(ankusa):
    s = ankusa()
    ids = [accepted_id(s.post("/webhooks/demo", b"n%d" % i)) for i in range(60)]
    assert len(set(ids)) == len(ids)
    assert [uuid.UUID(i).bytes for i in ids] == sorted(uuid.UUID(i).bytes for i in ids), \
        "ids of sequential requests are not increasing"
    seqs = [s.hook(i)["seq"] for i in ids[:10]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 10


def test_concurrent_ids_unique_and_inspect_matches(ankusa):
    s = ankusa()
    bodies = [os.urandom(16) + b"-%d" % i for i in range(500)]
    results = post_many(s.http_port, bodies, workers=32)
    got = {}
    for body, r in results:
        assert not isinstance(r, Exception), f"request failed: {r!r}"
        got[accepted_id(r)] = sha256_hex(body)
    assert len(got) == 500, "duplicate ids handed out"
    hooks = s.inspect()
    stored = {h["id"]: h for h in hooks}
    assert len(stored) == len(hooks), "inspect lists an id twice"
    assert set(stored) == set(got), (f"inspect differs from 201s: missing {len(set(got) - set(stored))}, "
                                     f"extra {len(set(stored) - set(got))}")
    for hid, sha in got.items():
        h = stored[hid]
        assert h["sha256"] == sha, f"{hid}: stored body differs"
        assert set(h) >= {"id", "seq", "tenant_id", "source_id", "received_at", "size", "sha256"}, h
        assert h["source_id"] == "demo" and h["tenant_id"] == "default"
    seqs = [h["seq"] for h in hooks]
    assert len(set(seqs)) == len(seqs)
    assert sorted(seqs) == list(range(min(seqs), min(seqs) + len(seqs))), "seqs are not dense"


# --------------------------------------------------------------------------- envelope round-trip

def test_roundtrip_binary_body_and_ordered_headers(ankusa):
    s = ankusa()
    body = ALL_BYTES * 3 + ALL_BYTES[::-1]
    req = (b"POST /webhooks/demo HTTP/1.1\r\n"
           b"Host: 127.0.0.1\r\n"
           b"X-Zeta: last-letter\r\n"
           b"Content-Type: application/x-binary; charset=none\r\n"
           b"X-Dup: one\r\n"
           b"x-lower-case: Mixed Value\twith tab\r\n"
           b"X-Dup: two\r\n"
           b"X-Alpha: first-letter\r\n"
           b"Content-Length: " + str(len(body)).encode() + b"\r\n"
           b"Connection: close\r\n\r\n" + body)
    r = raw_request(s.http_port, req)
    hid = accepted_id(r)
    h = s.hook(hid)
    assert base64.b64decode(h["body"], validate=True) == body, "body not byte-identical"
    assert h["body_encoding"] == "base64"
    assert h["size"] == len(body)
    assert h["sha256"] == sha256_hex(body)
    assert h["method"] == "POST"
    assert h["path"] == "/webhooks/demo"
    assert h["content_type"] == "application/x-binary; charset=none"
    assert h["tenant_id"] == "default" and h["source_id"] == "demo"
    assert "verification" in h
    assert h["headers"] == [
        ["Host", "127.0.0.1"],
        ["X-Zeta", "last-letter"],
        ["Content-Type", "application/x-binary; charset=none"],
        ["X-Dup", "one"],
        ["x-lower-case", "Mixed Value\twith tab"],
        ["X-Dup", "two"],
        ["X-Alpha", "first-letter"],
        ["Content-Length", str(len(body))],
        ["Connection", "close"],
    ], "headers not kept as received (order, case, duplicates)"


def test_roundtrip_empty_body(ankusa):
    s = ankusa()
    hid = accepted_id(s.post("/webhooks/demo", b"", {"Content-Type": "text/plain"}))
    h = s.hook(hid)
    assert h["size"] == 0
    assert h["body"] == ""
    assert h["sha256"] == sha256_hex(b"")
    assert h["content_type"] == "text/plain"


def test_roundtrip_large_binary_body(ankusa):
    s = ankusa()
    body = os.urandom(300_000) + ALL_BYTES
    hid = accepted_id(s.post("/webhooks/demo", body))
    h = s.hook(hid)
    assert base64.b64decode(h["body"]) == body
    assert h["sha256"] == sha256_hex(body)


def test_unknown_hook_id_404(ankusa):
    s = ankusa()
    accepted_id(s.post("/webhooks/demo", b"x"))
    r = s.admin(f"/v1/hooks/{uuid.uuid4()}")
    assert_error(r, 404, "hook_not_found")
    r = s.admin("/v1/hooks/not-a-uuid")
    assert r.status == 404, r


# --------------------------------------------------------------------------- routing statuses

def test_unknown_source_and_not_found(ankusa):
    s = ankusa()
    for path in ("/webhooks/nope", "/webhooks/demo/extra", "/webhooks", "/webhooks/",
                 "/webhooks/de.mo", "/webhooks/acme/demo"):
        assert_error(s.post(path, b"x"), 404, "unknown_source")
    for path in ("/other/demo", "/", "/webhooksdemo", "/hooks/demo"):
        assert_error(s.post(path, b"x"), 404, "not_found")
    for method in ("GET", "PUT", "DELETE", "PATCH"):
        r = http_request(s.http_port, method, "/webhooks/demo", body=b"x" if method != "GET" else None)
        assert_error(r, 404, "not_found")
    assert s.inspect() == [], "a refused request was stored"


def test_413_before_body_is_read(ankusa):
    s = ankusa(config={"http": {"max_body_bytes": 1000}})
    for declared in (1001, 10**12):
        with RawConn(s.http_port, timeout=5) as c:
            # headers only: the 413 must arrive without any body byte being sent
            c.send(b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n"
                   b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % declared)
            r = c.read_response()
            assert r.status == 413, f"expected 413 first (no 100 Continue), got {r!r}"
            assert r.json == {"error": "payload_too_large", "limit": 1000}
    # the limit itself is allowed
    accepted_id(s.post("/webhooks/demo", b"a" * 1000))
    assert_error(s.post("/webhooks/demo", b"a" * 1001), 413, "payload_too_large")
    assert len(s.inspect()) == 1


def test_chunked_over_limit_413_and_connection_reusable(ankusa):
    s = ankusa(config={"http": {"max_body_bytes": 10000}})
    with RawConn(s.http_port, timeout=10) as c:
        c.send(b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(chunked(os.urandom(30000), 3000))
        r = c.read_response()
        assert r.status == 413, r
        assert r.json == {"error": "payload_too_large", "limit": 10000}
        # same connection, next request
        body = b"after-413"
        c.send(b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        r2 = c.read_response()
        hid = accepted_id(r2)
    assert base64.b64decode(s.hook(hid)["body"]) == body
    assert [h["id"] for h in s.inspect()] == [hid]


def test_chunked_under_limit_is_stored_whole(ankusa):
    s = ankusa(config={"http": {"max_body_bytes": 10000}})
    body = os.urandom(9999)
    r = raw_request(s.http_port, b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                                 b"Connection: close\r\n\r\n" + chunked(body, 777))
    hid = accepted_id(r)
    assert base64.b64decode(s.hook(hid)["body"]) == body


BAD_HEADERS = [
    pytest.param(b"X-Bad: a\x01b", "X-Bad", id="value-0x01"),
    pytest.param(b"X-Bad: a\xffb", "X-Bad", id="value-0xff"),
    pytest.param(b"X-Bad: a\x7fb", "X-Bad", id="value-0x7f"),
    pytest.param(b"X-Bad: a\x00b", "X-Bad", id="value-0x00"),
    pytest.param(b"X-Bad: caf\xc3\xa9", "X-Bad", id="value-utf8"),
    pytest.param(b"X-B\x01d: ab", "X-B\x01d", id="name-0x01"),
    pytest.param(b"X-B\xffd: ab", "X-B\xffd", id="name-0xff"),
    # visible, but not a token (RFC 9110 field-name): no HTTP sink could send it on
    pytest.param(b"X(Bad): ab", "X(Bad)", id="name-separator-paren"),
    pytest.param(b"X@Bad: ab", "X@Bad", id="name-separator-at"),
]


@pytest.mark.parametrize("line,name", BAD_HEADERS)
def test_invalid_header_bytes_400(ankusa, line, name):
    s = ankusa()
    req = (b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\n" + line +
           b"\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
    try:
        r = raw_request(s.http_port, req)
    except ConnectionError as e:
        pytest.fail(f"connection closed without an answer: {e}")
    if r.status == 400 and r.json.get("error") != "invalid_header":
        pytest.fail(f"400 but not ankusa's invalid_header: {r!r}")
    if r.status == 201:
        stored = [h for h in s.hook(r.json["id"])["headers"] if h[0].startswith("X-")]
        pytest.fail(f"header line {line!r} was accepted (201) instead of 400 invalid_header; "
                    f"stored as {stored!r}")
    assert_error(r, 400, "invalid_header")
    assert r.json["header"] == name, r.json
    assert s.inspect() == [], f"hook with invalid header {line!r} was stored"


def test_header_value_space_and_tab_allowed(ankusa):
    s = ankusa()
    r = raw_request(s.http_port, b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nX-Ok: a b\tc ~!\r\n"
                                 b"Content-Length: 2\r\nConnection: close\r\n\r\nhi")
    hid = accepted_id(r)
    assert ["X-Ok", "a b\tc ~!"] in s.hook(hid)["headers"]


# --------------------------------------------------------------------------- tenant_path

def test_tenant_path_binding(ankusa):
    s = ankusa(config={"http": {"routing": "tenant_path"}},
               sources={"acme_src": {"tenant": "acme", "sinks": [{"type": "log"}]},
                        "shared": {"trust_url_tenant": True, "sinks": [{"type": "log"}]}})

    hid = accepted_id(s.post("/webhooks/acme/acme_src", b"acme-own"))
    h = s.hook(hid)
    assert (h["tenant_id"], h["source_id"]) == ("acme", "acme_src")
    assert h["path"] == "/webhooks/acme/acme_src"

    for path in ("/webhooks/other/acme_src", "/webhooks/default/acme_src", "/webhooks/acme_src",
                 "/webhooks/acme/nope", "/webhooks/a/b/c", "/webhooks/bad.tenant/shared",
                 "/webhooks/" + "t" * 65 + "/shared", "/webhooks/t%20x/shared"):
        assert_error(s.post(path, b"x"), 404, "unknown_source")

    hid = accepted_id(s.post("/webhooks/zeta-1_Z/shared", b"shared-zeta"))
    h = s.hook(hid)
    assert (h["tenant_id"], h["source_id"]) == ("zeta-1_Z", "shared")
    long_tenant = "T" * 64
    hid = accepted_id(s.post(f"/webhooks/{long_tenant}/shared", b"shared-64"))
    assert s.hook(hid)["tenant_id"] == long_tenant
    assert len(s.inspect()) == 3


# --------------------------------------------------------------------------- metrics

def test_metrics_counters_move(ankusa):
    s = ankusa(config={"http": {"max_body_bytes": 100}})
    m0 = s.metrics()
    for name in ("ankusa_ingest_responses_total", "ankusa_ingest_refused_total",
                 "ankusa_ingest_duration_seconds_bucket", "ankusa_commit_batch_size_bucket",
                 "ankusa_commit_duration_seconds_bucket", "ankusa_store_hooks",
                 "ankusa_store_write_failures_total"):
        assert name in m0.names(), f"metric {name} missing"
    assert all(dict(l).keys() >= {"instance", "class"} for l in m0.series("ankusa_store_write_failures_total"))

    def c201(m):
        return m.value("ankusa_ingest_responses_total", instance="default", status="201")

    def refused(m, reason):
        return m.get("ankusa_ingest_refused_total", instance="default", reason=reason) or 0.0

    n = 7
    for i in range(n):
        accepted_id(s.post("/webhooks/demo", b"m%d" % i))
    for _ in range(2):
        assert_error(s.post("/webhooks/nope", b"x"), 404, "unknown_source")
    assert_error(s.post("/elsewhere", b"x"), 404, "not_found")
    assert_error(s.post("/webhooks/demo", b"x" * 101), 413, "payload_too_large")
    m1 = s.metrics()
    assert c201(m1) - c201(m0) == n
    assert refused(m1, "unknown_source") - refused(m0, "unknown_source") == 2
    assert refused(m1, "not_found") - refused(m0, "not_found") == 1
    assert refused(m1, "payload_too_large") - refused(m0, "payload_too_large") == 1
    st = dict(instance="default", status="404")
    assert m1.value("ankusa_ingest_responses_total", **st) - m0.value("ankusa_ingest_responses_total", **st) == 3
    assert m1.value("ankusa_store_hooks", instance="default") - m0.value("ankusa_store_hooks", instance="default") == n
    assert (m1.value("ankusa_commit_batch_size_count", instance="default")
            > m0.value("ankusa_commit_batch_size_count", instance="default"))
    assert (m1.value("ankusa_commit_batch_size_sum", instance="default")
            - m0.value("ankusa_commit_batch_size_sum", instance="default")) == n
    assert (m1.value("ankusa_ingest_duration_seconds_count", instance="default", source_id="_all")
            - m0.value("ankusa_ingest_duration_seconds_count", instance="default", source_id="_all")) >= n
    inf = m1.value("ankusa_commit_duration_seconds_bucket", instance="default", le="+Inf")
    assert inf == m1.value("ankusa_commit_duration_seconds_count", instance="default") and inf >= 1


# --------------------------------------------------------------------------- back-pressure

def fire_concurrently(port, bodies, timeout=30.0):
    """Start every request at (nearly) the same moment; returns [(body, Resp|Exception)]."""
    barrier = threading.Barrier(len(bodies))
    out = [None] * len(bodies)
    starts = [0.0] * len(bodies)

    def run(i):
        barrier.wait()
        starts[i] = time.monotonic()
        try:
            out[i] = (bodies[i], http_request(port, "POST", "/webhooks/demo", body=bodies[i], timeout=timeout))
        except Exception as e:  # noqa: BLE001
            out[i] = (bodies[i], e)
    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(bodies))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout + 10)
    return out, max(starts) - min(starts)


def test_overload_503_retry_after(ankusa):
    # the tenant's own share is the whole queue here: this is the node's bound (503)
    s = ankusa(config={"batcher": {"max_queue": 4, "tenant_max_queue": 4}},
               env={"ANKUSA_TEST_COMMIT_DELAY_MS": "500"})
    bodies = [b"ov-%d-" % i + os.urandom(8) for i in range(16)]
    results, spread = fire_concurrently(s.http_port, bodies)
    ok, over = {}, []
    for body, r in results:
        assert not isinstance(r, Exception), f"request failed: {r!r}"
        if r.status == 201:
            ok[accepted_id(r)] = sha256_hex(body)
        else:
            assert_error(r, 503, "overload")
            assert r.headers.get("retry-after") == "1", r.headers
            over.append(sha256_hex(body))
    assert ok and over, f"expected both 201s and overload 503s, got {len(ok)} / {len(over)}"
    if spread < 0.4:  # every request arrived inside the first 500 ms commit: at most 4 held
        assert len(ok) <= 4, f"{len(ok)} accepted with batcher.max_queue 4 inside one commit window"
    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    assert stored == ok, "store differs from the set of 201s (an overload 503 was stored or a 201 lost)"
    m = s.metrics()
    assert m.value("ankusa_ingest_refused_total", instance="default", reason="overload") == len(over)


def test_record_deadline_503_and_never_stored(ankusa):
    s = ankusa(env={"ANKUSA_TEST_COMMIT_DELAY_MS": "3000", "ANKUSA_TEST_RECORD_DEADLINE_MS": "500"})
    results = []
    lock = threading.Lock()

    def send(body):
        try:
            r = http_request(s.http_port, "POST", "/webhooks/demo", body=body, timeout=30)
        except Exception as e:  # noqa: BLE001
            r = e
        with lock:
            results.append((body, r))

    threads = []
    t0 = time.monotonic()
    # the first request starts a 3 s commit; the rest queue behind it and pass their
    # deadline; one late request is taken into the second commit just before its deadline
    for i, at in enumerate([0.0] + [0.2 + 0.1 * k for k in range(12)] + [2.8]):
        while time.monotonic() - t0 < at:
            time.sleep(0.01)
        t = threading.Thread(target=send, args=(b"dl-%d-" % i + os.urandom(8),))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(40)
    ok, refused = {}, set()
    for body, r in results:
        assert not isinstance(r, Exception), f"request failed: {r!r}"
        if r.status == 201:
            ok[accepted_id(r)] = sha256_hex(body)
        else:
            assert_error(r, 503, "store_unavailable")
            assert r.headers.get("retry-after"), "503 without Retry-After"
            refused.add(sha256_hex(body))
    assert len(ok) >= 1 and len(refused) >= 5, f"201s={len(ok)} 503s={len(refused)}"
    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    missing = set(ok) - set(stored)
    assert not missing, f"201 given for hooks not stored: {missing}"
    leaked = set(stored.values()) & refused
    assert not leaked, f"{len(leaked)} hooks answered 503 (deadline, never taken) are in the store"
    assert set(stored) == set(ok), "store holds hooks that got no 201"
