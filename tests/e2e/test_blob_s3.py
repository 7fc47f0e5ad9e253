"""The S3 blob store (src/blob/s3.c, src/blob/awscreds.c), driven by tests/blobtool against
s3rver 3.7.1 (npm, installed by scripts/deps.sh into .deps/npm) BEHIND tests/e2e/s3proxy.py,
which recomputes every request's SigV4 signature independently and answers 403 when it is
wrong (s3rver itself accepts any signature, DESIGN.md §8). The credential sources that
need a service (STS AssumeRoleWithWebIdentity, IMDSv2) run against loopback stand-ins
that check what they receive."""
import hashlib
import http.client
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.parse
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import s3proxy
from helpers import BIN, CLI_TIMEOUT, REPO, SANITIZER_MARKERS, free_ports

BLOBTOOL = str(Path(BIN).parent / "blobtool")
S3RVER = REPO / ".deps" / "npm" / "node_modules" / ".bin" / "s3rver"
BUCKET = "bkt"
REGION = "eu-west-3"

KEY, SECRET = "AKIDTESTPLAIN", "plain/Secret+Key0123456789abcdefghijklmno"
TKEY, TSECRET, TOKEN = "ASIATESTTOKEN", "token/Secret+Key9876543210zyxwvutsrqpon", "FwoGZXIvYXdzE//token+value=="
WKEY, WSECRET, WTOKEN = "ASIAWEBIDENTITY", "web/Secret+Key/from/sts", "web&session<token>"
IKEY, ISECRET, ITOKEN = "ASIAIMDSROLE", "imds/Secret+Key/from/role", "imds-session-token"
ALL_KEYS = {KEY: (SECRET, None), TKEY: (TSECRET, TOKEN), WKEY: (WSECRET, WTOKEN), IKEY: (ISECRET, ITOKEN)}
SECRETS = (SECRET, TSECRET, TOKEN, WSECRET, WTOKEN, ISECRET, ITOKEN)


# --------------------------------------------------------------------------- servers

@pytest.fixture(scope="module")
def s3rver(tmp_path_factory):
    """s3rver on a free loopback port with the bucket created; stopped by PID."""
    if not os.access(S3RVER, os.X_OK):
        pytest.fail(f"s3rver not found at {S3RVER}: run `make deps` (scripts/deps.sh installs "
                    "s3rver@3.7.1 with npm into .deps/npm)", pytrace=False)
    if not os.access(BLOBTOOL, os.X_OK):
        pytest.fail(f"blobtool not found at {BLOBTOOL}: run `make test-build`", pytrace=False)
    data = tmp_path_factory.mktemp("s3rver")
    port = free_ports(1)[0]
    log = open(data.parent / "s3rver.log", "wb")
    # s3rver makes a truncated page's NextContinuationToken with DES, which Node 20's
    # OpenSSL 3 only has in its legacy provider: without it every list past 1,000 keys is a 500
    env = dict(os.environ, NODE_OPTIONS="--openssl-legacy-provider")
    p = subprocess.Popen([str(S3RVER), "--directory", str(data), "--port", str(port), "--address", "127.0.0.1",
                          "--silent", "--configure-bucket", BUCKET], stdout=log, stderr=subprocess.STDOUT,
                         env=env, start_new_session=True)
    try:
        deadline = time.time() + 20
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", f"/{BUCKET}?list-type=2&max-keys=1")
                if c.getresponse().status == 200:
                    break
            except OSError:
                pass
            if p.poll() is not None or time.time() > deadline:
                raise AssertionError(f"s3rver did not start (exit {p.poll()})")
            time.sleep(0.1)
        yield port
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        log.close()


@pytest.fixture
def proxy(s3rver):
    p = s3proxy.SigV4Proxy(s3rver, ALL_KEYS, region=REGION).start()
    try:
        yield p
    finally:
        p.stop()


class StandIn:
    """A loopback HTTP server whose handler(method, path, headers, body) answers
    (status, body bytes); every request is kept in .seen."""

    def __init__(self, handler):
        self.seen = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _do(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                outer.seen.append((self.command, self.path, hdrs, body))
                status, out = handler(self.command, self.path, hdrs, body)
                self.send_response(status)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_PUT = do_POST = _do

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def standins():
    made = []

    def make(handler):
        s = StandIn(handler)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


# --------------------------------------------------------------------------- blobtool

def closed_port_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def clean_env(**extra):
    """The environment without any AWS_* of the caller's, and without a reachable IMDS
    (a fall-through to 169.254.169.254 would only slow a test down)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_SERVICE_ENDPOINT"] = closed_port_url()
    env.update(extra)
    return env


def store(tmp_path, endpoint, key=KEY, secret=SECRET, token=None, **more):
    s3 = {"bucket": BUCKET, "region": REGION, "endpoint": endpoint}
    if key:
        s3["access_key_id"] = key
    if secret:
        s3["secret_access_key"] = secret
    if token:
        s3["session_token"] = token
    s3.update(more)
    path = tmp_path / f"store-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps({"type": "s3", "s3": s3}))
    return str(path)


def blobtool(cfg, *args, env=None, data=None, timeout=None):
    """Runs blobtool; a sanitizer report or a secret in its stderr fails the test."""
    r = subprocess.run([BLOBTOOL, cfg, *[str(a) for a in args]], input=data, capture_output=True,
                       env=env if env is not None else clean_env(), timeout=timeout or CLI_TIMEOUT * 3)
    err = r.stderr.decode(errors="replace")
    assert not any(m in err for m in SANITIZER_MARKERS), f"sanitizer report from blobtool:\n{err}"
    for s in SECRETS:
        assert s not in err, "a secret reached blobtool's stderr"
    return r


def put(cfg, key, data, **kw):
    r = blobtool(cfg, "put", key, "-", data=data, **kw)
    assert r.returncode == 0, r.stderr
    return r


def get(cfg, key, **kw):
    r = blobtool(cfg, "get", key, **kw)
    assert r.returncode == 0, r.stderr
    return r.stdout


def listing(cfg, prefix, max_keys=None, **kw):
    args = ["list", prefix] + ([max_keys] if max_keys else [])
    r = blobtool(cfg, *args, **kw)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[-1].startswith("pages ")
    return lines[:-1], int(lines[-1].split()[1])


def verdicts(p):
    return [v for _, _, v in p.requests]


def sign(method, target, host, body=b"", key=KEY, secret=SECRET, extra=None, sign_sha=True, sha=None):
    """Headers for a request signed in Python (for the proxy's own checks)."""
    amz = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    h = {"host": host, "x-amz-date": amz, "x-amz-content-sha256": sha or hashlib.sha256(body).hexdigest()}
    h.update(extra or {})
    signed = sorted(k for k in h if sign_sha or k != "x-amz-content-sha256")
    sig = s3proxy.signature(secret, method, target, h, signed, h["x-amz-content-sha256"], amz, REGION)
    h["authorization"] = (f"AWS4-HMAC-SHA256 Credential={key}/{amz[:8]}/{REGION}/s3/aws4_request, "
                          f"SignedHeaders={';'.join(signed)}, Signature={sig}")
    return h


def send(p, method, target, headers, body=b""):
    c = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    c.request(method, target, body=body, headers=headers)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


# --------------------------------------------------------------------------- the proxy

def test_proxy_is_an_independent_checker_not_a_rubber_stamp(proxy):
    # AWS's documented example (S3 API reference, "Example: GET Object"): our signer gives
    # the published signature, so the proxy checks SigV4 itself, not its own mistakes
    h = {"host": "examplebucket.s3.amazonaws.com", "range": "bytes=0-9",
         "x-amz-content-sha256": s3proxy.EMPTY_SHA256, "x-amz-date": "20130524T000000Z"}
    assert s3proxy.signature("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "GET", "/test.txt", h, sorted(h),
                             s3proxy.EMPTY_SHA256, "20130524T000000Z", "us-east-1") == \
        "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"

    host = f"127.0.0.1:{proxy.port}"
    target = f"/{BUCKET}/proxy-{uuid.uuid4().hex}"
    body = b"signed bytes"
    # signed right: forwarded (s3rver stores it)
    assert send(proxy, "PUT", target, sign("PUT", target, host, body), body)[0] == 200
    # each of these is refused before s3rver sees it
    bad = {
        "no authorization": ({"host": host}, body),
        "wrong secret": (sign("PUT", target, host, body, secret=SECRET + "x"), body),
        "unknown key id": (sign("PUT", target, host, body, key="AKIDNOBODY"), body),
        "body changed after signing": (sign("PUT", target, host, body), body + b"!"),
        "content hash unsigned": (sign("PUT", target, host, body, sign_sha=False), body),
        "unsigned payload": (sign("PUT", target, host, body, sha="UNSIGNED-PAYLOAD"), body),
        "token key without its token": (sign("PUT", target, host, body, key=TKEY, secret=TSECRET), body),
    }
    for what, (hdrs, b) in bad.items():
        status, doc = send(proxy, "PUT", target, hdrs, b)
        assert status == 403 and b"SignatureDoesNotMatch" in doc, what
    # a header changed after signing, and a path signed for another key
    hdrs = sign("PUT", target, host, body, extra={"content-type": "text/plain"})
    hdrs["content-type"] = "application/json"
    assert send(proxy, "PUT", target, hdrs, body)[0] == 403
    assert send(proxy, "PUT", target + "x", sign("PUT", target, host, body), body)[0] == 403
    assert verdicts(proxy)[0] == "ok" and all(v != "ok" for v in verdicts(proxy)[1:])


# --------------------------------------------------------------------------- operations

def test_put_get_range_head_delete_and_not_found(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    key = f"ops-{uuid.uuid4().hex}/segment.bin"
    data = os.urandom(300_000)
    put(cfg, key, data)
    assert get(cfg, key) == data
    r = blobtool(cfg, "head", key)
    assert r.returncode == 0 and r.stdout.decode().strip() == str(len(data))
    assert blobtool(cfg, "range", key, 1000, 5000).stdout == data[1000:6000]
    assert blobtool(cfg, "range", key, 0, 1).stdout == data[:1]
    # a range over the end: the bytes there are; past the end: none, and no error
    r = blobtool(cfg, "range", key, len(data) - 10, 100)
    assert r.returncode == 0 and r.stdout == data[-10:]
    r = blobtool(cfg, "range", key, len(data) + 5, 100)
    assert r.returncode == 0 and r.stdout == b""
    # replaced by a second put
    put(cfg, key, b"second")
    assert get(cfg, key) == b"second"
    # an empty object
    put(cfg, key + ".empty", b"")
    assert blobtool(cfg, "head", key + ".empty").stdout.decode().strip() == "0"
    r = blobtool(cfg, "get", key + ".empty")
    assert r.returncode == 0 and r.stdout == b""
    # delete, then everything about it is not found; deleting again is fine
    assert blobtool(cfg, "del", key).returncode == 0
    for op in (("head", key), ("get", key), ("range", key, 0, 10)):
        r = blobtool(cfg, *op)
        assert r.returncode == 2 and b"not found" in r.stderr, op
    assert blobtool(cfg, "del", key).returncode == 0
    assert blobtool(cfg, "del", f"never-{uuid.uuid4().hex}").returncode == 0
    # every request was signed right (the proxy checked each one)
    assert verdicts(proxy) and set(verdicts(proxy)) == {"ok"}
    methods = {m for m, _, _ in proxy.requests}
    assert {"PUT", "GET", "HEAD", "DELETE"} <= methods
    ranges = [p for m, p, _ in proxy.requests if m == "GET"]
    assert ranges


def test_keys_needing_encoding(tmp_path, proxy, s3rver):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    base = f"enc-{uuid.uuid4().hex}/"
    names = ["a+b", "x=y", "~tilde", "dt=2026-01-01/part-0", "q?x", "h#1", "p%41", "c:d;e", "a&b",
             "lt<gt>", "quote'\"", "paren(1),star*", "at@dollar$excl!"]
    for i, n in enumerate(names):
        put(cfg, base + n, f"object {i}".encode())
    for i, n in enumerate(names):
        assert get(cfg, base + n) == f"object {i}".encode(), n
        # stored under exactly that name (encoded once, not twice): s3rver answers it
        # unauthenticated at the key's single encoding
        c = http.client.HTTPConnection("127.0.0.1", s3rver, timeout=10)
        c.request("GET", f"/{BUCKET}/" + urllib.parse.quote(base + n, safe="/-_.~"))
        r = c.getresponse()
        assert r.status == 200 and r.read() == f"object {i}".encode(), n
        c.close()
    keys, pages = listing(cfg, base)
    assert keys == sorted(base + n for n in names) and pages == 1
    # a prefix that itself needs encoding
    keys, _ = listing(cfg, base + "dt=2026-01-01/")
    assert keys == [base + "dt=2026-01-01/part-0"]
    assert set(verdicts(proxy)) == {"ok"}


def test_list_pages_over_1000_keys(tmp_path, proxy, s3rver):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    base = f"page-{uuid.uuid4().hex}/"
    want = [f"{base}k{i:05d}" for i in range(1234)] + [f"{base}k+{i}" for i in range(3)] + [f"{base}k=&x"]
    # most objects go straight into s3rver (fast); a few through the store
    c = http.client.HTTPConnection("127.0.0.1", s3rver, timeout=30)
    for k in want[:-5]:
        c.request("PUT", f"/{BUCKET}/" + urllib.parse.quote(k, safe="/-_.~"), body=b"x")
        r = c.getresponse()
        r.read()
        assert r.status == 200
    c.close()
    for k in want[-5:]:
        put(cfg, k, b"y")
    put(cfg, f"pagf-{uuid.uuid4().hex}", b"outside the prefix")
    want.sort()
    keys, pages = listing(cfg, base)
    assert keys == want and len(set(keys)) == len(want)
    assert pages == 2  # s3rver pages at 1,000
    keys, pages = listing(cfg, base, 300)
    assert keys == want and pages == 5
    lists = [urllib.parse.unquote(p) for m, p, _ in proxy.requests if m == "GET" and "list-type=2" in p]
    assert any("start-after=" + want[999] in p for p in lists)
    assert set(verdicts(proxy)) == {"ok"}


# --------------------------------------------------------------------------- files

CHUNK = 4 << 20  # ak_blob_stream's ranges (AK_BLOB_STREAM_CHUNK)


def data_file(tmp_path, n):
    data = os.urandom(n)
    path = tmp_path / f"file-{uuid.uuid4().hex[:8]}.bin"
    path.write_bytes(data)
    return path, data


def test_put_file_streams_a_large_file_and_stream_reads_it_back(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    path, data = data_file(tmp_path, 9 * 1024 * 1024 + 4321)
    sha = hashlib.sha256(data).hexdigest()
    key = f"backup-{uuid.uuid4().hex}/ckpt-1/000042.sst"
    r = blobtool(cfg, "put-file", key, path)
    assert r.returncode == 0, r.stderr
    # one PUT, whose signed payload hash (the file's, computed by the caller) the proxy
    # checked against the bytes that arrived
    assert verdicts(proxy) == ["ok"] and proxy.requests[0][0] == "PUT"
    n = len(proxy.requests)
    r = blobtool(cfg, "stream", key)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == f"{len(data)} {sha}\n"
    # the size, then three ranged GETs of at most 4 MiB
    assert [m for m, _, _ in proxy.requests[n:]] == ["HEAD"] + ["GET"] * 3
    assert get(cfg, key) == data
    assert set(verdicts(proxy)) == {"ok"}
    # a retried PUT sends the file again from its first byte
    proxy.fail_next = [503]
    r = blobtool(cfg, "put-file", key + ".2", path)
    assert r.returncode == 0, r.stderr
    assert verdicts(proxy)[-2:] == ["forced 503", "ok"]
    assert blobtool(cfg, "stream", key + ".2").stdout.decode() == f"{len(data)} {sha}\n"
    # an empty file (no range asked at all), and a file of exactly two chunks
    for size in (0, 2 * CHUNK):
        p, d = data_file(tmp_path, size)
        assert blobtool(cfg, "put-file", f"{key}.{size}", p).returncode == 0
        r = blobtool(cfg, "stream", f"{key}.{size}")
        assert r.returncode == 0 and r.stdout.decode() == f"{size} {hashlib.sha256(d).hexdigest()}\n", r.stderr
    # not there: not found
    r = blobtool(cfg, "stream", f"never-{uuid.uuid4().hex}")
    assert r.returncode == 2 and b"not found" in r.stderr


def test_put_file_with_a_wrong_sha256_is_refused_and_stores_nothing(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    path, data = data_file(tmp_path, 5 * 1024 * 1024 + 1)
    key = f"backup-{uuid.uuid4().hex}/wrong.sst"
    wrong = hashlib.sha256(data[:-1]).hexdigest()
    r = blobtool(cfg, "put-file", key, path, f"--sha256={wrong}")
    err = r.stderr.decode()
    assert r.returncode == 1 and "s3 put: HTTP 403 (SignatureDoesNotMatch)" in err, err
    assert verdicts(proxy) == ["x-amz-content-sha256 is not the body's hash"]  # one attempt
    r = blobtool(cfg, "head", key)
    assert r.returncode == 2, r.stderr
    # not a hash at all: refused before any request
    n = len(proxy.requests)
    for bad in ("nothex", wrong.upper(), wrong[:-1]):
        r = blobtool(cfg, "put-file", key, path, f"--sha256={bad}")
        assert r.returncode == 1 and "64 lowercase hex" in r.stderr.decode()
    # a file shorter than the size asked for: refused, no request, no object
    r = blobtool(cfg, "put-file", key, path, f"--size={len(data) + 1}")
    assert r.returncode == 1 and "fewer than" in r.stderr.decode(), r.stderr
    assert len(proxy.requests) == n
    assert blobtool(cfg, "head", key).returncode == 2


# --------------------------------------------------------------------------- signing

def test_wrong_secret_fails_with_403(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}", secret=SECRET[:-1] + "X")
    r = blobtool(cfg, "put", f"wrong-{uuid.uuid4().hex}", "-", data=b"no")
    assert r.returncode == 1
    err = r.stderr.decode()
    assert "s3 put: HTTP 403 (SignatureDoesNotMatch)" in err, err
    assert verdicts(proxy) == ["signature mismatch"]  # not retried: a 403 answers the same
    # the same store with the right secret works: the refusal was about the secret only
    good = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    put(good, f"right-{uuid.uuid4().hex}", b"yes")
    assert verdicts(proxy)[-1] == "ok"


def test_session_token_is_sent_and_signed(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}", key=TKEY, secret=TSECRET, token=TOKEN)
    key = f"tok-{uuid.uuid4().hex}"
    put(cfg, key, b"with a token")
    assert get(cfg, key) == b"with a token"
    keys, _ = listing(cfg, "tok-")
    assert key in keys
    assert set(verdicts(proxy)) == {"ok"}  # the proxy demands x-amz-security-token, signed
    # without the token, or with another one: refused
    for bad in (None, TOKEN + "x"):
        cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}", key=TKEY, secret=TSECRET, token=bad)
        r = blobtool(cfg, "head", key)
        assert r.returncode == 1 and "HTTP 403" in r.stderr.decode()
    assert verdicts(proxy)[-2:] == ["wrong or missing session token"] * 2


# --------------------------------------------------------------------------- retries

def test_retries_after_a_503_and_re_signs(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    key = f"retry-{uuid.uuid4().hex}"
    proxy.fail_next = [503]
    t0 = time.monotonic()
    put(cfg, key, b"after one 503")
    assert time.monotonic() - t0 >= 0.2  # the first pause
    assert verdicts(proxy) == ["forced 503", "ok"]
    # two failures (502, then a 500): the second pause is 1 s, and the third attempt passes
    proxy.fail_next = [502, 500]
    t0 = time.monotonic()
    assert get(cfg, key) == b"after one 503"
    assert time.monotonic() - t0 >= 1.2
    assert verdicts(proxy)[2:] == ["forced 502", "forced 500", "ok", "ok"]  # head (3 tries), range


def test_500_forever_fails_clearly(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    proxy.fail_always = 500
    r = blobtool(cfg, "head", "anything")
    assert r.returncode == 1
    assert "s3 head: HTTP 500 after 3 attempts" in r.stderr.decode(), r.stderr
    r = blobtool(cfg, "put", "anything", "-", data=b"x")
    assert "s3 put: HTTP 500 (InternalError) after 3 attempts" in r.stderr.decode(), r.stderr
    assert verdicts(proxy) == ["forced 500"] * 6
    # retries: 0 in the store's block: one attempt
    cfg0 = store(tmp_path, f"http://127.0.0.1:{proxy.port}", retries=0)
    r = blobtool(cfg0, "del", "anything")
    assert r.returncode == 1 and "s3 delete: HTTP 500 (InternalError)" in r.stderr.decode()
    assert len(proxy.requests) == 7


def test_transport_errors_are_retried_then_named(tmp_path):
    cfg = store(tmp_path, closed_port_url())
    r = blobtool(cfg, "range", "k", 0, 10)
    err = r.stderr.decode()
    assert r.returncode == 1 and "s3 get: connect:" in err and "(after 3 attempts)" in err, err


# --------------------------------------------------------------------------- credentials

def test_credentials_from_env(tmp_path, proxy):
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}", key=None, secret=None)
    key = f"env-{uuid.uuid4().hex}"
    env = clean_env(AWS_ACCESS_KEY_ID=TKEY, AWS_SECRET_ACCESS_KEY=TSECRET, AWS_SESSION_TOKEN=TOKEN)
    put(cfg, key, b"env creds", env=env)
    assert get(cfg, key, env=env) == b"env creds"
    assert set(verdicts(proxy)) == {"ok"}
    # the env is what signed: a wrong secret there fails
    env["AWS_SECRET_ACCESS_KEY"] = TSECRET + "x"
    assert blobtool(cfg, "head", key, env=env).returncode == 1
    # config beats env
    good = store(tmp_path, f"http://127.0.0.1:{proxy.port}")
    assert blobtool(good, "head", key, env=env).returncode == 0
    # no source at all: a clear error, no request sent
    n = len(proxy.requests)
    r = blobtool(cfg, "head", key)
    assert r.returncode == 1 and "imds" in r.stderr.decode() and len(proxy.requests) == n


def expiration(minutes=60):
    return (datetime.now(timezone.utc) + timedelta(minutes=minutes)).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_credentials_from_web_identity(tmp_path, proxy, standins):
    role, jwt = "arn:aws:iam::123456789012:role/ankusa-archive", "eyJhbGciOi.web-identity+token/=="
    lifetime = {"minutes": 60}

    def sts(method, path, hdrs, body):
        form = urllib.parse.parse_qs(body.decode(), keep_blank_values=True, strict_parsing=True)
        form = {k: v[0] for k, v in form.items()}
        if (method != "POST" or form.get("Action") != "AssumeRoleWithWebIdentity" or form.get("RoleArn") != role
                or form.get("WebIdentityToken") != jwt or form.get("RoleSessionName") != "archive-test"
                or form.get("Version") != "2011-06-15"):
            return 400, (b"<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code>"
                         b"<Message>no</Message></Error></ErrorResponse>")
        esc = lambda s: s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")  # noqa: E731
        return 200, (
            "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
            "<AssumeRoleWithWebIdentityResult><Credentials>"
            f"<AccessKeyId>{WKEY}</AccessKeyId><SecretAccessKey>{esc(WSECRET)}</SecretAccessKey>"
            f"<SessionToken>{esc(WTOKEN)}</SessionToken><Expiration>{expiration(**lifetime)}</Expiration>"
            "</Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>").encode()

    s = standins(sts)
    token_file = tmp_path / "token"
    token_file.write_text(jwt + "\n")
    env = clean_env(AWS_WEB_IDENTITY_TOKEN_FILE=str(token_file), AWS_ROLE_ARN=role,
                    AWS_ROLE_SESSION_NAME="archive-test", AWS_ENDPOINT_URL_STS=s.url)
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}", key=None, secret=None)
    key = f"web-{uuid.uuid4().hex}"
    put(cfg, key, b"web identity", env=env)
    assert get(cfg, key, env=env) == b"web identity"
    assert set(verdicts(proxy)) == {"ok"}  # signed with the STS answer's key, secret and token
    # one STS call per blobtool run (get = head + range: the second uses the cache)
    assert len(s.seen) == 2
    assert s.seen[0][2].get("content-type") == "application/x-www-form-urlencoded"
    # credentials within 5 minutes of their expiry are not reused: each op asks again
    lifetime["minutes"] = 4
    assert get(cfg, key, env=env) == b"web identity"
    assert len(s.seen) == 4
    lifetime["minutes"] = 60
    # another token: STS refuses it, and the error says so without the token
    token_file.write_text("someone-else\n")
    r = blobtool(cfg, "head", key, env=env)
    err = r.stderr.decode()
    assert r.returncode == 1 and "AssumeRoleWithWebIdentity: HTTP 400 (InvalidIdentityToken)" in err, err
    assert jwt not in err and "someone-else" not in err
    # env credentials come before the web identity: STS is not asked then
    n = len(s.seen)
    env2 = dict(env, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
    assert blobtool(cfg, "head", key, env=env2).returncode == 0 and len(s.seen) == n


def test_credentials_from_imdsv2(tmp_path, proxy, standins):
    token = "AQAEAImdsSessionToken-" + uuid.uuid4().hex

    def imds(method, path, hdrs, body):
        if path == "/latest/api/token":
            if method != "PUT" or not hdrs.get("x-aws-ec2-metadata-token-ttl-seconds", "").isdigit():
                return 400, b""
            return 200, token.encode()
        if method != "GET" or hdrs.get("x-aws-ec2-metadata-token") != token:
            return 401, b""  # IMDSv2 only: a GET without the session token is refused
        if path == "/latest/meta-data/iam/security-credentials/":
            return 200, b"archive-role\n"
        if path == "/latest/meta-data/iam/security-credentials/archive-role":
            return 200, json.dumps({"Code": "Success", "LastUpdated": expiration(-1), "Type": "AWS-HMAC",
                                    "AccessKeyId": IKEY, "SecretAccessKey": ISECRET, "Token": ITOKEN,
                                    "Expiration": expiration()}).encode()
        return 404, b""

    s = standins(imds)
    env = clean_env(AWS_EC2_METADATA_SERVICE_ENDPOINT=s.url)
    cfg = store(tmp_path, f"http://127.0.0.1:{proxy.port}", key=None, secret=None)
    key = f"imds-{uuid.uuid4().hex}"
    put(cfg, key, b"instance role", env=env)
    assert get(cfg, key, env=env) == b"instance role"
    assert set(verdicts(proxy)) == {"ok"}
    # the documented sequence, once per run (the second op of `get` uses the cache)
    seq = [(m, p) for m, p, _, _ in s.seen]
    one = [("PUT", "/latest/api/token"), ("GET", "/latest/meta-data/iam/security-credentials/"),
           ("GET", "/latest/meta-data/iam/security-credentials/archive-role")]
    assert seq == one * 2
    assert all(h.get("x-aws-ec2-metadata-token") == token for m, _, h, _ in s.seen if m == "GET")
    # a stand-in that hands out a token the GETs then do not carry: the chain fails clearly
    s2 = standins(lambda m, p, h, b: (200, b"x") if p == "/latest/api/token" else (401, b""))
    r = blobtool(cfg, "head", key, env=clean_env(AWS_EC2_METADATA_SERVICE_ENDPOINT=s2.url))
    err = r.stderr.decode()
    assert r.returncode == 1 and "imds role: HTTP 401" in err, err
