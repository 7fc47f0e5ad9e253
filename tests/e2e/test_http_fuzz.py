"""A raw-socket fuzzer for the ingest port's HTTP/1.1 framing.

For ANKUSA_HTTP_FUZZ_SECONDS (default 15) seconds, from a seeded RNG (the seed is printed;
ANKUSA_HTTP_FUZZ_SEED replays a run), it sends generated valid requests, requests with a
known framing error (Content-Length / Transfer-Encoding shapes, chunk sizes, bytes in
header names and values, obs-fold, bare CR, versions) and blind mutations (byte flips,
insertions, truncation at a random point, bare-LF line endings), on fresh and reused
connections, 1-4 requests per write. It asserts:
  - every valid request sent alone on a fresh connection gets 201;
  - no request with a framing error ever gets a 2xx, and nothing pipelined behind one is
    answered (the answers are matched to the requests by position);
  - the node is alive at the end (/health 200), every valid hook answered 201 is stored
    with its bytes, and (ankusa fixture teardown) its log has no sanitizer report.
"""
import os
import random
import time

from helpers import SLOW, is_uuid7, parse_responses, raw_connect, read_responses, read_until_close, sha256_hex

DEMO = b"/webhooks/demo"
DURATION = float(os.environ.get("ANKUSA_HTTP_FUZZ_SECONDS", "15"))
TOKEN = b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VCHAR = bytes(range(0x21, 0x7F))


def case(rnd, name):
    """name with some letters' case flipped (header names are case-insensitive)."""
    return b"".join((bytes([c]).swapcase() if rnd.random() < 0.3 else bytes([c])) for c in name)


class Req:
    """A request as parts: framing is "cl" or "chunked"; body is the decoded body."""

    def __init__(self, rnd):
        self.rnd = rnd
        self.body = b"fuzz-" + rnd.randbytes(6).hex().encode() + b"-" + rnd.randbytes(rnd.randint(0, 1500))
        self.framing = "cl" if rnd.random() < 0.6 else "chunked"
        self.headers = [(b"Host", b"fuzz.example")]
        for i in range(rnd.randint(0, 5)):
            name = b"X-F" + bytes(rnd.choice(TOKEN) for _ in range(rnd.randint(1, 10)))
            value = bytes(rnd.choice(VCHAR + b" \t") for _ in range(rnd.randint(0, 40))).strip(b" \t")
            self.headers.append((name, value))
        if rnd.random() < 0.2:
            self.headers.append((b"Content-Type", b"application/json"))
        if rnd.random() < 0.1:
            self.headers.append((b"Connection", b"keep-alive"))
        self.version = b"HTTP/1.1"

    def chunks(self):
        rnd, out, pos = self.rnd, b"", 0
        while pos < len(self.body):
            n = min(rnd.choice([1, 7, 64, 300, 1000, 4096]), len(self.body) - pos)
            size = b"%x" % n if rnd.random() < 0.5 else b"%X" % n
            ext = b";e=" + bytes(rnd.choice(TOKEN) for _ in range(3)) if rnd.random() < 0.1 else b""
            out += size + ext + b"\r\n" + self.body[pos:pos + n] + b"\r\n"
            pos += n
        trailer = b"X-Trailer: t\r\n" if rnd.random() < 0.1 else b""
        return out + b"0\r\n" + trailer + b"\r\n"

    def framing_headers(self):
        if self.framing == "cl":
            return [(case(self.rnd, b"Content-Length"), b"%d" % len(self.body))]
        return [(case(self.rnd, b"Transfer-Encoding"), b"chunked")]

    def wire_body(self):
        return self.body if self.framing == "cl" else self.chunks()

    def build(self, headers=None, body=None, line=None, sep=b": ", eol=b"\r\n"):
        hs = headers if headers is not None else self.headers + self.framing_headers()
        self.rnd.shuffle(hs)
        head = (line if line is not None else b"POST " + DEMO + b" " + self.version) + eol
        for k, v in hs:
            head += k + sep + v + eol
        return head + eol + (body if body is not None else self.wire_body())


# ---- requests whose framing is wrong: never a 2xx, nothing after them answered

def m_cl_conflict(r):
    n = len(r.body)
    return r.build(r.headers + [(b"Content-Length", b"%d" % n), (b"Content-Length", b"%d" % (n + r.rnd.randint(1, 9)))],
                   body=r.body)


def m_cl_list(r):
    n = len(r.body)
    return r.build(r.headers + [(b"Content-Length", b"%d, %d" % (n, n))], body=r.body)


def m_cl_bad(r):
    n = len(r.body)
    v = r.rnd.choice([b"+%d" % n, b"0x%x" % n, b"%d %d" % (n, n), b"", b"-1", b"-%d" % n, b"1" * 30,
                      b"%d.0" % n, b"%da" % n, b"\x0b%d" % n])
    return r.build(r.headers + [(b"Content-Length", v)], body=r.body)


def m_cl_te(r):
    hs = r.headers + [(b"Content-Length", b"%d" % r.rnd.randint(0, 40)), (b"Transfer-Encoding", b"chunked")]
    return r.build(hs, body=r.chunks())


def m_te_bad(r):
    v = r.rnd.choice([b"gzip, chunked", b"chunked, gzip", b"identity", b"foo", b"deflate", b"xchunked",
                      b"chunked x"])
    return r.build(r.headers + [(b"Transfer-Encoding", v)], body=r.chunks())


def m_te_twice_gzip(r):
    return r.build(r.headers + [(b"Transfer-Encoding", b"chunked"), (b"Transfer-Encoding", b"gzip")], body=r.chunks())


def m_chunk_size(r):
    bad = r.rnd.choice([b"zz", b"-5", b"1" + b"0" * 19, b"ffffffffffffffffff", b"0x5", b"", b"+5", b"g"])
    body = bad + b"\r\nabcde\r\n0\r\n\r\n"
    return r.build(r.headers + [(b"Transfer-Encoding", b"chunked")], body=body)


def m_chunk_overrun(r):
    extra = r.rnd.randint(1, 8)
    n = r.rnd.randint(1, 20)
    data = r.rnd.randbytes(n + extra)
    return r.build(r.headers + [(b"Transfer-Encoding", b"chunked")], body=b"%x\r\n" % n + data + b"\r\n0\r\n\r\n")


def m_name_byte(r):
    b = bytes([r.rnd.choice(list(range(0, 0x21)) + [0x7F, 0x28, 0x29, 0x2C, 0x2F, 0x3B, 0x3C, 0x3D, 0x40,
                                                         0x5B, 0x5D, 0x7B, 0x7D, 0x22, 0x3F, 0x5C] +
                                    list(range(0x80, 0x100)))])
    name = b"X-A" + b + b"B"
    return r.build(r.headers + [(name, b"v")] + r.framing_headers())


def m_value_byte(r):
    b = bytes([r.rnd.choice([x for x in range(0, 0x20) if x not in (0x09, 0x0A, 0x0D)] + [0x7F])])
    return r.build(r.headers + [(b"X-V", b"a" + b + b"b")] + r.framing_headers())


def m_obs_fold(r):
    hs = r.headers + [(b"X-Fold", b"a\r\n" + r.rnd.choice([b" ", b"\t"]) + b"b")] + r.framing_headers()
    return r.build(hs)


def m_space_colon(r):
    return r.build(sep=r.rnd.choice([b" : ", b"\t: ", b" :"]))


def m_bare_cr(r):
    hs = r.headers + [(b"X-Cr", b"a\rb")] + r.framing_headers()
    return r.build(hs)


def m_version(r):
    line = b"POST " + DEMO + b" " + r.rnd.choice([b"HTTP/2.0", b"HTTP/3.0", b"HTTP/0.9", b"http/1.1", b"HTTP/1.1.1",
                                                  b"HTTP/11", b"HTTQ/1.1"])
    return r.build(line=line)


def m_no_version(r):
    return b"POST " + DEMO + b"\r\n" + r.wire_body()


def m_target(r):
    t = r.rnd.choice([b"http:/webhooks/demo", b"ht$tp://x/webhooks/demo", b"http://a@@b/webhooks/demo",
                      b"/webhooks/de\x01mo", b"/webhooks/demo\x7f", b"/webhooks/demo x"])
    return r.build(line=b"POST " + t + b" HTTP/1.1")


INVALID = [m_cl_conflict, m_cl_list, m_cl_bad, m_cl_te, m_te_bad, m_te_twice_gzip, m_chunk_size, m_chunk_overrun,
           m_name_byte, m_value_byte, m_obs_fold, m_space_colon, m_bare_cr, m_version, m_no_version, m_target]


# ---- blind mutations: anything may come back, except a dead or corrupted node

def u_flip(rnd, data):
    data = bytearray(data)
    for _ in range(rnd.randint(1, 4)):
        data[rnd.randrange(len(data))] = rnd.randrange(256)
    return bytes(data)


def u_insert(rnd, data):
    i = rnd.randrange(len(data) + 1)
    return data[:i] + rnd.choice([b"\r\n", b"\r", b"\n", b"\x00", b" ", b":", b"\r\n\r\n", rnd.randbytes(5)]) + data[i:]


def u_delete(rnd, data):
    i = rnd.randrange(len(data))
    return data[:i] + data[i + rnd.randint(1, 10):]


def u_truncate(rnd, data):
    return data[:rnd.randrange(len(data))]


def u_lf(rnd, data):
    return data.replace(b"\r\n", b"\n")


UNKNOWN = [u_flip, u_insert, u_delete, u_truncate, u_lf]


class Fuzzer:
    def __init__(self, node, rnd):
        self.node, self.rnd = node, rnd
        self.valid_ids = {}     # id -> sha256 of a valid request's body answered 201
        self.stats = {}
        self.pool = []          # reused connections that saw only valid requests: [sock, buf]

    def bump(self, k):
        self.stats[k] = self.stats.get(k, 0) + 1

    def item(self):
        """(kind, bytes, body sha256 or None): kind valid | invalid:<mutation> | unknown:<mutation>."""
        rnd = self.rnd
        r = Req(rnd)
        x = rnd.random()
        if x < 0.45:
            return "valid", r.build(), sha256_hex(r.body)
        if x < 0.8:
            m = rnd.choice(INVALID)
            return "invalid:" + m.__name__, m(r), None
        m = rnd.choice(UNKNOWN)
        return "unknown:" + m.__name__, m(rnd, r.build()), None

    def send(self, sock, data):
        """Send in 1-3 writes at random split points; False when the server is gone."""
        rnd = self.rnd
        cuts = sorted(rnd.randrange(len(data) + 1) for _ in range(rnd.randint(0, 2)))
        pos = 0
        try:
            for c in cuts + [len(data)]:
                if c > pos:
                    sock.sendall(data[pos:c])
                    pos = c
                    if rnd.random() < 0.2:
                        time.sleep(0.002)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def check(self, items, resps, ctx):
        """Match answers to requests by position up to the first request that is not valid."""
        for i, (kind, data, sha) in enumerate(items):
            r = resps[i] if i < len(resps) else None
            if kind == "valid":
                if r is not None:
                    assert r.status == 201, f"{ctx}: valid request #{i} got {r!r}\nsent: {data[:500]!r}"
                    hid = r.json.get("id")
                    assert is_uuid7(hid or ""), r
                    assert hid not in self.valid_ids, f"{ctx}: id {hid} handed out twice"
                    self.valid_ids[hid] = sha
                continue
            if kind.startswith("invalid:"):
                if r is not None:
                    assert not 200 <= r.status < 300, (
                        f"{ctx}: request #{i} with a framing error ({kind}) got {r!r}\nsent: {data[:600]!r}")
                    assert r.status >= 400, f"{ctx}: {kind} answered {r!r}"
                assert len(resps) <= i + 1, (
                    f"{ctx}: {len(resps) - i - 1} answers after the refused request #{i} ({kind}): "
                    f"{resps[i + 1:]!r}\nsent: {data[:600]!r}")
            return  # an unknown mutation: the positions after it mean nothing

    def fresh(self, items, ctx):
        """Send items in one go on a new connection. The valid requests before the first
        other one are answered 201, in order. A framing error is then refused (>= 400) and
        the connection closed with nothing after; after a blind mutation anything goes."""
        sock = raw_connect(self.node.http_port, timeout=10.0 * SLOW)
        try:
            data = b"".join(d for _, d, _ in items)
            if not self.send(sock, data):
                self.bump("send-reset")
            prefix = 0
            while prefix < len(items) and items[prefix][0] == "valid":
                prefix += 1
            if prefix == len(items) or items[prefix][0].startswith("unknown:"):
                resps, rest, how = read_responses(sock, prefix, timeout=10.0 * SLOW)
                assert len(resps) >= prefix, (
                    f"{ctx}: {prefix} valid requests first on a fresh connection, {len(resps)} answers "
                    f"({how}): {resps!r} rest={rest[:300]!r}\nsent: {data[:800]!r}")
                if prefix < len(items):  # a little of what the mutation brings, then close
                    more, _ = read_until_close(sock, 0.05)
                    resps = resps + parse_responses(rest + more)[0]
            else:
                got, how = read_until_close(sock, 5.0 * SLOW)
                resps, rest = parse_responses(got)
                kind = items[prefix][0]
                assert len(resps) > prefix, (
                    f"{ctx}: no answer to the request with a framing error ({kind}) after {prefix} valid "
                    f"({how}): {resps!r} rest={rest[:300]!r}\nsent: {data[:800]!r}")
                assert how != "timeout", f"{ctx}: connection left open after refusing {kind}: {resps!r}"
            self.check(items, resps, ctx)
            return resps
        finally:
            sock.close()

    def reused(self, ctx):
        """A request on a pooled keep-alive connection that has seen only valid requests (a
        new one when the pool is short). Mostly a valid one: its answer, when it comes, is
        201. Sometimes a generated one: a framing error is refused (never a 2xx) and the
        connection closed; the connection then leaves the pool."""
        rnd = self.rnd
        if len(self.pool) < 4 or rnd.random() < 0.1:
            self.pool.append(raw_connect(self.node.http_port, timeout=10.0 * SLOW))
        sock = rnd.choice(self.pool)
        kind, data, sha = self.item() if rnd.random() < 0.25 else self.item_valid()
        if not self.send(sock, data):
            self.drop(sock)
            return
        if kind == "valid":
            resps, rest, how = read_responses(sock, 1, timeout=10.0 * SLOW)
            if not resps:
                assert how in ("eof", "reset"), f"{ctx}: no answer on a reused connection ({how})"
                self.bump("reused-closed")
                self.drop(sock)
                return
            assert rest == b"", f"{ctx}: bytes after the answer: {rest[:200]!r}"
            self.check([(kind, data, sha)], resps, ctx)
            if resps[0].headers.get("connection", "").lower() == "close":
                self.drop(sock)
            return
        if kind.startswith("invalid:"):
            got, how = read_until_close(sock, 5.0 * SLOW)
            resps, rest = parse_responses(got)
            assert how != "timeout", f"{ctx}: reused connection left open after {kind}: {resps!r}"
            if resps:
                self.check([(kind, data, sha)], resps, ctx)
            else:
                self.bump("reused-closed")
        else:
            read_until_close(sock, 0.05)
        self.drop(sock)

    def item_valid(self):
        r = Req(self.rnd)
        return "valid", r.build(), sha256_hex(r.body)

    def drop(self, sock):
        self.pool.remove(sock)
        sock.close()


def test_http_fuzz(ankusa):
    seed = int(os.environ.get("ANKUSA_HTTP_FUZZ_SEED") or random.randrange(2 ** 32))
    print(f"ANKUSA_HTTP_FUZZ_SEED={seed} ANKUSA_HTTP_FUZZ_SECONDS={DURATION}")
    rnd = random.Random(seed)
    s = ankusa(config={"listener": {"header_timeout_ms": 2000, "body_timeout_ms": 2000}})
    f = Fuzzer(s, rnd)
    t_end = time.monotonic() + DURATION
    n = 0
    try:
        while time.monotonic() < t_end:
            n += 1
            ctx = f"seed {seed} step {n}"
            x = rnd.random()
            if x < 0.3:  # a valid request alone on a fresh connection: 201
                item = f.item_valid()
                resps = f.fresh([item], ctx)
                assert len(resps) == 1 and resps[0].status == 201, f"{ctx}: {resps!r}"
                f.bump("valid-fresh")
            elif x < 0.55:  # one generated request alone
                item = f.item()
                f.fresh([item], ctx)
                f.bump(item[0].split(":")[0] + "-alone")
            elif x < 0.8:  # 1-4 pipelined in one write
                items = [f.item() for _ in range(rnd.randint(1, 4))]
                f.fresh(items, ctx)
                f.bump(f"pipelined-{len(items)}")
            else:
                f.reused(ctx)
                f.bump("reused")
    finally:
        for sock in f.pool:
            sock.close()
    print(f"fuzz: {n} steps, {f.stats}, {len(f.valid_ids)} valid hooks answered 201")
    assert s.running(), f"the node died (seed {seed})\n{s.log_tail()}"
    assert s.get("/health").status == 200
    assert f.stats.get("valid-fresh", 0) >= 10, f"too few steps in {DURATION}s: {f.stats}"
    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    missing = [i for i in f.valid_ids if i not in stored]
    assert not missing, f"seed {seed}: {len(missing)} valid hooks answered 201 are not stored: {missing[:5]}"
    differ = [i for i, sha in f.valid_ids.items() if stored[i] != sha]
    assert not differ, f"seed {seed}: {len(differ)} valid hooks stored with other bytes: {differ[:5]}"
