"""HTTP/1.1 framing on the ingest port (RFC 9112 section 6), through raw sockets.

Every request whose framing is ambiguous or broken is refused by the HTTP layer: one JSON
answer ({"error": "bad_request", "detail": ...} for 400, not_implemented for 501,
http_version_not_supported for 505), Connection: close, then an orderly close (EOF, so the
client can read the whole answer). A valid request pipelined behind it in the same write
is never answered (a second answer would be a smuggled request) and nothing is stored.
Valid framing keeps working: keep-alive, pipelining answered in order, chunked bodies,
Expect: 100-continue, HTTP/1.0.

One node serves the whole module (a node per case would cost most of the time); each
case compares the node's stored hook count (ankusa_store_hooks) before and after."""
import base64
import os
import time

import pytest

from helpers import (SLOW, RawConn, Server, assert_refusal, check_stopped, chunked, exchange, parse_responses,
                     post_bytes, read_responses, sha256_hex, stored_hooks)

DEMO = "/webhooks/demo"
HEAD = b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\n"
BODY5 = b"abcde"


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("http-framing") / "node0", name="node0")
    s.start()
    yield s
    problems = check_stopped(s)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.fixture
def node(request, shared):
    """The module's node; its log tail goes into a failing test's report. A test that
    finds it dead fails (and so does every later one)."""
    request.node._ankusa_servers = [shared]
    assert shared.running(), f"the shared node is not running\n{shared.log_tail()}"
    return shared


def accepted(r):
    assert r.status == 201, r
    assert r.json.get("status") == "accepted", r
    return r.json["id"]


def stored_body(node, hid):
    return base64.b64decode(node.hook(hid)["body"])


def valid_tail(tag):
    """A valid request to a valid source, pipelined behind the case under test."""
    body = b"smuggled-" + tag.encode() + b"-" + os.urandom(6).hex().encode()
    return post_bytes(DEMO, body)


# --------------------------------------------------------------------------- refusals

def C(id, head_rest, body, status=400, code="bad_request"):
    """A case: HEAD (a POST to a valid source) + head_rest (the further header lines, each
    ending CRLF) + the blank line + body."""
    return pytest.param(HEAD + head_rest + b"\r\n" + body, status, code, id=id)


def RAW(id, data, status=400, code="bad_request"):
    return pytest.param(data, status, code, id=id)


HEADER_BYTES = frozenset({"bad_request", "invalid_header"})  # README: 400 invalid_header is ankusa's own
VERSION = frozenset({"bad_request", "http_version_not_supported"})

CASES = [
    # Content-Length (RFC 9112 6.3: a list or several different values is unrecoverable)
    C("cl-3-then-5", b"Content-Length: 3\r\nContent-Length: 5\r\n", BODY5),
    C("cl-5-then-3", b"Content-Length: 5\r\nContent-Length: 3\r\n", BODY5),
    C("cl-equal-twice", b"Content-Length: 5\r\nContent-Length: 5\r\n", BODY5),
    C("cl-list-5-5", b"Content-Length: 5, 5\r\n", BODY5),
    C("cl-plus", b"Content-Length: +5\r\n", BODY5),
    C("cl-hex", b"Content-Length: 0x5\r\n", BODY5),
    C("cl-two-numbers", b"Content-Length: 5 5\r\n", BODY5),
    C("cl-empty", b"Content-Length: \r\n", BODY5),
    C("cl-negative", b"Content-Length: -1\r\n", BODY5),
    C("cl-30-digits", b"Content-Length: 123456789012345678901234567890\r\n", BODY5),
    C("cl-folded", b"Content-Length: 5\r\n 0\r\n", BODY5),
    # Content-Length with Transfer-Encoding, both orders (the CL.TE / TE.CL shapes)
    C("cl-then-te", b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n"),
    C("te-then-cl", b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", b"0\r\n\r\n"),
    C("te-then-cl-long", b"Transfer-Encoding: chunked\r\nContent-Length: 40\r\n",
      b"5\r\nabcde\r\n0\r\n\r\n"),
    # Transfer-Encoding: chunked is the only coding; it must be the last one
    C("te-gzip-chunked", b"Transfer-Encoding: gzip, chunked\r\n", chunked(BODY5), 501, "not_implemented"),
    C("te-chunked-gzip", b"Transfer-Encoding: chunked, gzip\r\n", chunked(BODY5)),
    C("te-identity", b"Transfer-Encoding: identity\r\n", chunked(BODY5), 501, "not_implemented"),
    C("te-foo", b"Transfer-Encoding: foo\r\n", chunked(BODY5), 501, "not_implemented"),
    # header syntax
    C("obs-fold-space", b"X-A: a\r\n b\r\nContent-Length: 5\r\n", BODY5),
    C("obs-fold-tab", b"X-A: a\r\n\tb\r\nContent-Length: 5\r\n", BODY5),
    C("space-before-colon", b"Content-Length : 5\r\n", BODY5),
    C("tab-before-colon", b"Content-Length\t: 5\r\n", BODY5),
    C("name-control-byte", b"X-\x01A: b\r\nContent-Length: 5\r\n", BODY5, 400, HEADER_BYTES),
    C("name-nul", b"X-\x00A: b\r\nContent-Length: 5\r\n", BODY5, 400, HEADER_BYTES),
    C("name-not-a-token", b"X(A): b\r\nContent-Length: 5\r\n", BODY5, 400, HEADER_BYTES),
    C("value-nul", b"X-A: a\x00b\r\nContent-Length: 5\r\n", BODY5, 400, HEADER_BYTES),
    C("bare-cr-in-value", b"X-A: a\rb\r\nContent-Length: 5\r\n", BODY5),
    C("bare-cr-line-end", b"X-A: a\rContent-Length: 5\r\n", BODY5),
    # chunked body
    C("chunk-size-zz", b"Transfer-Encoding: chunked\r\n", b"zz\r\nabcde\r\n0\r\n\r\n"),
    C("chunk-size-negative", b"Transfer-Encoding: chunked\r\n", b"-5\r\nabcde\r\n0\r\n\r\n"),
    C("chunk-size-20-hex", b"Transfer-Encoding: chunked\r\n", b"10000000000000000000\r\nabcde\r\n0\r\n\r\n"),
    C("chunk-data-longer", b"Transfer-Encoding: chunked\r\n", b"3\r\nabcdef\r\n0\r\n\r\n"),
    C("chunk-no-crlf-after-data", b"Transfer-Encoding: chunked\r\n", b"5\r\nabcdeXY0\r\n\r\n"),
    # versions
    RAW("http-2.0", b"POST /webhooks/demo HTTP/2.0\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde",
        505, "http_version_not_supported"),
    RAW("http-3.0", b"POST /webhooks/demo HTTP/3.0\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde",
        505, "http_version_not_supported"),
    RAW("http-0.9-get", b"GET /health\r\n", {400, 505}, VERSION),
    RAW("http-0.9-post", b"POST /webhooks/demo\r\n", {400, 505}, VERSION),
    RAW("h2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", {400, 505}, VERSION),
    # request targets
    RAW("abs-one-slash", b"POST http:/webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"),
    RAW("abs-bad-scheme", b"POST ht$tp://x/webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"),
    RAW("abs-double-at", b"POST http://a@@b/webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"),
    RAW("target-control-byte", b"POST /webhooks/de\x01mo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"),
    RAW("target-space", b"POST /webhooks/demo x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nabcde"),
]


@pytest.mark.parametrize("bad,status,code", CASES)
def test_bad_framing_refused_closed_and_nothing_smuggled(node, bad, status, code, request):
    before = stored_hooks(node)
    # the valid request rides in the same write, right behind the bad one
    ex = exchange(node.http_port, bad + valid_tail(request.node.callspec.id), timeout=5.0 * SLOW)
    assert ex.responses, f"no answer at all: {ex!r}"
    assert len(ex.responses) == 1 and not any(r.status == 201 for r in ex.responses), \
        f"the request pipelined behind a refused one was answered (smuggled): {ex!r}"
    assert_refusal(ex, status, code)
    time.sleep(0.1 * SLOW)  # a smuggled request would be committed by now
    assert stored_hooks(node) == before, f"a hook was stored from {bad[:200]!r}"


@pytest.mark.parametrize("bad,status,code", [p for p in CASES if p.id in (
    "cl-3-then-5", "cl-then-te", "te-gzip-chunked", "chunk-data-longer", "http-2.0")])
def test_refusal_after_a_served_request_on_a_keepalive_connection(node, bad, status, code):
    """The same refusals when the bad request is the second on a connection: the first
    is answered 201, the bad one refused and the connection closed."""
    before = stored_hooks(node)
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(post_bytes(DEMO, b"first-on-conn"))
        hid = accepted(c.read_response())
        c.send(bad + valid_tail("second"))
        data, how = c.read_until_close(5.0 * SLOW)
    resps, rest = parse_responses(data)
    assert len(resps) == 1 and rest == b"", f"expected one refusal, got {resps!r} {rest[:200]!r} ({how})"
    assert_refusal(resps[0], status, code, how=how)
    time.sleep(0.1 * SLOW)
    assert stored_hooks(node) == before + 1
    assert stored_body(node, hid) == b"first-on-conn"


# --------------------------------------------------------------------------- valid framing

def test_keepalive_serves_several_requests_on_one_connection(node):
    bodies = [b"ka-%d-" % i + os.urandom(8) for i in range(6)]
    ids = []
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        for b in bodies:
            c.send(post_bytes(DEMO, b))
            r = c.read_response()
            assert r.headers.get("connection", "").lower() != "close", f"keep-alive refused: {r!r}"
            ids.append(accepted(r))
        assert not c.closed_by_peer(0.3), "the server closed a keep-alive connection"
    assert len(set(ids)) == len(ids)
    assert [stored_body(node, i) for i in ids] == bodies


def test_three_pipelined_requests_in_one_write_answered_in_order(node):
    bodies = [b"pipe-%d-" % i + os.urandom(8) for i in range(3)]
    before = stored_hooks(node)
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(b"".join(post_bytes(DEMO, b) for b in bodies))
        resps, rest, how = read_responses(c.sock, 3, timeout=5.0 * SLOW)
    assert len(resps) == 3 and rest == b"", f"expected 3 answers, got {resps!r} rest={rest[:200]!r} ({how})"
    ids = [accepted(r) for r in resps]
    assert [stored_body(node, i) for i in ids] == bodies, "answers not in the order of the requests"
    assert stored_hooks(node) == before + 3


def test_pipelined_mixed_requests_in_order(node):
    """GET /health, a POST, GET /ready and a POST in one write: four answers in order."""
    b1, b2 = b"mix-1-" + os.urandom(6), b"mix-2-" + os.urandom(6)
    data = (b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n" + post_bytes(DEMO, b1) +
            b"GET /ready HTTP/1.1\r\nHost: x\r\n\r\n" + post_bytes(DEMO, b2))
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(data)
        resps, rest, how = read_responses(c.sock, 4, timeout=5.0 * SLOW)
    assert [r.status for r in resps] == [200, 201, 200, 201], (resps, how)
    assert resps[0].json["status"] == "ok" and resps[2].json["status"] == "ready", resps
    assert stored_body(node, resps[1].json["id"]) == b1
    assert stored_body(node, resps[3].json["id"]) == b2


def test_chunked_body_stored_exactly(node):
    body = os.urandom(5000) + b"\r\n0\r\n\r\n" + os.urandom(300)  # framing bytes inside the data
    wire = b""
    pos = 0
    for size in (1, 16, 4095, 0x1FF, 10000):
        part = body[pos:pos + size]
        pos += len(part)
        if part:
            wire += b"%x\r\n" % len(part) + part + b"\r\n"
    wire += b"0\r\n\r\n"
    assert pos == len(body)
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + wire)
        hid = accepted(c.read_response())
        # the connection stays usable after a chunked body
        c.send(post_bytes(DEMO, b"after-chunked"))
        hid2 = accepted(c.read_response())
    h = node.hook(hid)
    assert base64.b64decode(h["body"]) == body
    assert h["sha256"] == sha256_hex(body)
    assert stored_body(node, hid2) == b"after-chunked"


def test_chunked_with_extensions_uppercase_hex_and_trailer(node):
    """RFC 9112 7.1: chunk extensions are ignored, hex digits of either case, a trailer
    section may follow the last chunk."""
    body = b"0123456789ABCDEFGHIJ"
    wire = (b"A;name=value\r\n" + body[:10] + b"\r\n" + b"a;x\r\n" + body[10:] + b"\r\n" +
            b"0\r\nX-Trailer: t\r\n\r\n")
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + wire + post_bytes(DEMO, b"after-trailer"))
        resps, rest, how = read_responses(c.sock, 2, timeout=5.0 * SLOW)
    assert len(resps) == 2, (resps, rest, how)
    assert stored_body(node, accepted(resps[0])) == body
    assert stored_body(node, accepted(resps[1])) == b"after-trailer"


def test_request_sent_one_byte_at_a_time(node):
    body = b"byte-by-byte-" + os.urandom(4).hex().encode()
    req = post_bytes(DEMO, body, extra=b"X-Extra: some value\r\n")
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        for i in range(len(req)):
            c.send(req[i:i + 1])
            time.sleep(0.002)
        hid = accepted(c.read_response())
    assert stored_body(node, hid) == body


def test_expect_100_continue(node):
    body = b"expect-" + os.urandom(8)
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        c.sock.settimeout(5.0 * SLOW)
        got = b""
        while b"\r\n\r\n" not in got:
            d = c.sock.recv(4096)
            assert d, f"closed before 100 Continue: {got!r}"
            got += d
        assert got.startswith(b"HTTP/1.1 100 Continue\r\n"), f"expected 100 Continue first: {got!r}"
        interim, extra = got.split(b"\r\n\r\n", 1)
        assert extra == b"", f"bytes after the 100 Continue before the body was sent: {extra!r}"
        c.send(body)
        hid = accepted(c.read_response())
    assert stored_body(node, hid) == body


def test_expect_100_continue_over_max_body_gets_413_and_no_100(node):
    limit = node.config["http"]["max_body_bytes"]
    before = stored_hooks(node)
    with RawConn(node.http_port, timeout=5.0 * SLOW) as c:
        c.send(HEAD + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % (limit + 1))
        data, how = c.read_until_close(5.0 * SLOW)  # the body is never sent
    resps, rest = parse_responses(data)
    assert resps, f"no answer ({how}): {data[:300]!r}"
    assert resps[0].status != 100, "100 Continue sent for a body that is refused"
    assert len(resps) == 1 and rest == b"", (resps, rest)
    r = resps[0]
    assert r.status == 413, r
    assert r.headers.get("content-type", "").startswith("application/json"), r
    assert r.json["error"] == "payload_too_large", r
    assert how == "eof", f"after the 413 the connection was not closed cleanly: {how}"
    assert stored_hooks(node) == before


def test_http_1_0_request_answered_and_closed(node):
    body = b"http10-" + os.urandom(6)
    ex = exchange(node.http_port, post_bytes(DEMO, body, version=b"HTTP/1.0"), timeout=5.0 * SLOW)
    r = ex.only()
    hid = accepted(r)
    assert ex.how == "eof", f"HTTP/1.0 connection not closed after the answer: {ex!r}"
    assert stored_body(node, hid) == body


def test_a_clean_close_is_not_a_reset(node):
    """The refusal of a request with an unread body still reaches the client whole: the
    server lingers (reads what the client sent) instead of resetting the connection."""
    before = stored_hooks(node)
    big = os.urandom(200000)
    ex = exchange(node.http_port,
                  HEAD + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\n" + big, timeout=5.0 * SLOW)
    assert_refusal(ex, 400, "bad_request")
    assert stored_hooks(node) == before


def test_node_still_serves_after_the_refusals(node):
    r = node.post(DEMO, b"still-alive")
    assert stored_body(node, accepted(r)) == b"still-alive"
    assert node.get("/health").status == 200
