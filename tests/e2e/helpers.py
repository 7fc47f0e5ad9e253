"""Helpers for the ankusa end-to-end suite (imported by conftest.py and the tests).

Black-box only: the tests start the real binary (ANKUSA_BIN, default build-test/ankusa)
on free loopback ports with a temporary data dir, talk HTTP to it, stop it by PID, and
read the store back with `ankusa inspect hooks`.
"""
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = os.environ.get("ANKUSA_BIN") or str(REPO / "build-test" / "ankusa")
SANITIZER = os.environ.get("ANKUSA_SANITIZER") == "1"
READY_TIMEOUT = 60.0 if SANITIZER else 20.0
CLI_TIMEOUT = 60.0 if SANITIZER else 20.0
SLOW = 3.0 if SANITIZER else 1.0  # scales the waits for what a node does in the background

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                     "SUMMARY: UndefinedBehaviorSanitizer")

# Config fragments many tests share (never mutate them: they are module-level).
LOG = [{"type": "log"}]  # a source's sinks: the log sink only
LOOPBACK = {"egress": {"allow_http": True, "allow_cidrs": ["127.0.0.0/8"]}}  # http sinks on 127/8
# source_store.type persistent needs a key to seal the stored secrets (docs/deployment.md,
# "Secrets at rest"); the tests' own, never a real one
SOURCE_STORE_KEY = "dGVzdC1rZXktMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDA="
PERSISTENT_STORE = {"type": "persistent", "secret_key": SOURCE_STORE_KEY}


# --------------------------------------------------------------------------- basics

def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


_PORT_RNG = __import__("random").SystemRandom()


def reserve_port():
    """(socket, port): a free port, held by the bound socket until the caller closes it
    (so that a Server started meanwhile cannot pick the same port). It is taken below the
    kernel's ephemeral range: a port from that range can become the local port of any
    outgoing connection (a test's client, the node's sinks) between this check and the
    node's own bind, and the node's wildcard listener then fails with EADDRINUSE."""
    low = _ephemeral_low()
    if low > 12000:
        # under pytest-xdist each worker draws from its own slice of the range, so two
        # workers never race for one port between its check and a node's bind
        span_lo, span_hi = 10000, low
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
        if workers > 1 and worker[2:].isdigit():
            width = (low - 10000) // workers
            span_lo = 10000 + int(worker[2:]) * width
            span_hi = span_lo + width
        for _ in range(200):
            port = _PORT_RNG.randrange(span_lo, span_hi)
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind(("0.0.0.0", port))
                return s, port
            except OSError:
                s.close()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def free_ports(n=2):
    """Distinct free loopback ports (all sockets held open until every port is picked)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s, port = reserve_port()
            socks.append(s)
            ports.append(port)
    finally:
        for s in socks:
            s.close()
    return ports


def wait_until(pred, timeout=20.0, what="condition"):
    """Call pred until it returns something truthy, and return that; fail after timeout
    seconds (scaled by SLOW)."""
    deadline = time.time() + timeout * SLOW
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def github_sig(secret, body):
    """The X-Hub-Signature-256 value GitHub sends for body under secret (a str)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def principal(name, token, scopes, tenants):
    """An admin.principals entry: the token is configured by its SHA-256, hashed here."""
    return {"name": name, "token_sha256": sha256_hex(token.encode()), "scopes": scopes, "tenants": tenants}


def clean_env(extra=None):
    """The caller's environment without any ANKUSA_*/PORT variable, plus `extra`
    (a value of None removes the variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANKUSA_") and k != "PORT"}
    if SANITIZER:
        env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
        env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_cli(*args, env=None, cwd=None, timeout=CLI_TIMEOUT):
    """Run the binary with a clean environment; returns CompletedProcess (text)."""
    return subprocess.run([BIN, *map(str, args)], env=clean_env(env), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def inspect_hooks(data_dir, check=True, archive=True, config=None):
    """`ankusa inspect hooks --data-dir DIR [--archive]` parsed into a list of dicts: the
    hooks the node holds, in its store and (archive, the default) in its LocalFS archive,
    each once (the compactor moves hooks out of the store once they are delivered and
    archived)."""
    extra = (["--archive"] + (["--config", str(config)] if config else [])) if archive else []
    p = subprocess.run([BIN, "inspect", "hooks", "--data-dir", str(data_dir), *extra],
                       env=clean_env(), capture_output=True, timeout=CLI_TIMEOUT * 3)
    if check:
        assert p.returncode == 0, (f"inspect hooks exited {p.returncode}\nstderr:\n"
                                   f"{p.stderr.decode(errors='replace')[-3000:]}")
    out = []
    for line in p.stdout.decode().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def is_uuid7(text):
    try:
        u = uuid.UUID(text)
    except (ValueError, TypeError):
        return False
    return u.version == 7 and u.variant == uuid.RFC_4122 and str(u) == text.lower()


def uuid7_ms(text):
    return int(uuid.UUID(text).hex[:12], 16)


# --------------------------------------------------------------------------- HTTP

class Resp:
    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers  # dict, lower-case names (last wins)
        self.body = body

    @property
    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            raise AssertionError(f"response body is not JSON: {self.body[:300]!r}")

    def __repr__(self):
        return f"<Resp {self.status} {self.body[:200]!r}>"


def http_request(port, method, path, body=None, headers=None, timeout=30.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        hdrs = {"Connection": "close"}
        hdrs.update(headers or {})
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        data = r.read()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data)
    finally:
        conn.close()


def admin_json(node, method, path, body=None):
    """An admin request without a token: body is sent as is when bytes, as JSON otherwise,
    with Content-Type: application/json whenever there is a body."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    return http_request(node.admin_port, method, path, body=data, headers=hdrs)


class RawConn:
    """A raw TCP connection that can read HTTP/1.1 responses one at a time (keep-alive).
    bind: a local (address, port) to connect from (e.g. ("127.0.0.2", 0))."""

    def __init__(self, port, timeout=10.0, host="127.0.0.1", bind=None):
        self.sock = raw_connect(port, host=host, bind=bind, timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise ConnectionError(f"connection closed by server; got so far {self.buf[:300]!r}")
        self.buf += d

    def read_response(self):
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        headers = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            headers[k.strip().lower()] = v.strip()
        if status in (100, 101, 204, 304) or 100 <= status < 200:
            return Resp(status, headers, b"")
        n = int(headers.get("content-length", "0"))
        while len(self.buf) < n:
            self._fill()
        body, self.buf = self.buf[:n], self.buf[n:]
        return Resp(status, headers, body)

    def closed_by_peer(self, timeout=2.0):
        """True when the server closes the connection (EOF/reset) within timeout."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def read_until_close(self, timeout=5.0):
        """(bytes not yet consumed + everything until the server closes, how) with how
        "eof" | "reset" | "timeout" (see read_until_close())."""
        data, how = read_until_close(self.sock, timeout)
        data, self.buf = self.buf + data, b""
        return data, how

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


def raw_request(port, data, timeout=10.0):
    with RawConn(port, timeout) as c:
        c.send(data)
        return c.read_response()


# --------------------------------------------------------------------------- raw HTTP/1.1 bytes
# For the framing, limits, drain and fuzz tests: put exact bytes on the wire, read until the
# server closes, parse whatever answers came back, and tell a clean close from a reset.

def raw_connect(port, host="127.0.0.1", bind=None, timeout=10.0):
    """A connected TCP socket (IPv6 when host contains ':'), optionally bound first to
    bind = (local address, local port)."""
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        if bind is not None:
            s.bind(bind)
        s.connect((host, port))
    except BaseException:
        s.close()
        raise
    return s


def read_until_close(sock, timeout=5.0):
    """Read until the peer closes or `timeout` seconds (in all) have passed. Returns
    (data, how): how is "eof" (recv returned b'': an orderly close, FIN), "reset" (the
    connection was reset: ECONNRESET/EPIPE, what a client sees when a server closes with
    unread bytes and no lingering close) or "timeout" (still open)."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return data, "timeout"
        sock.settimeout(left)
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return data, "timeout"
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
            return data, "reset"
        if not d:
            return data, "eof"
        data += d


def read_responses(sock, n, timeout=5.0, buf=b""):
    """Read until n complete responses are parsed (or the peer closes / timeout).
    Returns (responses, rest, how) with how None when n responses arrived."""
    deadline = time.monotonic() + timeout
    data = buf
    while True:
        resps, rest = parse_responses(data)
        if len(resps) >= n:
            return resps, rest, None
        left = deadline - time.monotonic()
        if left <= 0:
            return resps, rest, "timeout"
        sock.settimeout(left)
        try:
            d = sock.recv(65536)
        except socket.timeout:
            return resps, rest, "timeout"
        except (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):
            return resps, rest, "reset"
        if not d:
            return resps, rest, "eof"
        data += d


class RawResp(Resp):
    """One parsed response: status, headers (lower-case names, last wins), body, plus
    version ("HTTP/1.1"), reason and header_list [(name, value)] as sent."""

    def __init__(self, version, status, reason, header_list, body):
        super().__init__(status, {k.lower(): v for k, v in header_list}, body)
        self.version, self.reason, self.header_list = version, reason, header_list

    def __repr__(self):
        return f"<RawResp {self.version} {self.status} {self.headers!r} {self.body[:200]!r}>"


_STATUS_RE = re.compile(rb"^(HTTP/\d\.\d) (\d{3})(?: (.*))?$")


def parse_responses(data, head=False):
    """Parse as many complete HTTP/1.x responses as `data` holds, in order. Returns
    (responses, rest): rest is what follows the last complete response (an incomplete
    one, or bytes that are not a response at all). head=True: the requests were HEAD
    (no body on any response). 1xx, 204 and 304 have no body; otherwise the body is
    framed by Content-Length or chunked; a response with neither runs to the end."""
    out = []
    while data:
        end = data.find(b"\r\n\r\n")
        if end < 0:
            break
        lines = data[:end].split(b"\r\n")
        m = _STATUS_RE.match(lines[0])
        if not m:
            break
        hl = []
        for ln in lines[1:]:
            k, sep, v = ln.partition(b":")
            if not sep:
                return out, data
            hl.append((k.decode("latin-1").strip(), v.decode("latin-1").strip()))
        r = RawResp(m.group(1).decode(), int(m.group(2)), (m.group(3) or b"").decode("latin-1"), hl, b"")
        pos = end + 4
        if head or 100 <= r.status < 200 or r.status in (204, 304):
            pass
        elif "chunked" in r.headers.get("transfer-encoding", "").lower():
            body = b""
            while True:
                le = data.find(b"\r\n", pos)
                if le < 0:
                    return out, data
                size = int(data[pos:le].split(b";")[0].strip() or b"0", 16)
                pos = le + 2
                if size == 0:
                    te = data.find(b"\r\n\r\n", pos - 2)
                    if te < 0:
                        return out, data
                    pos = te + 4
                    break
                if len(data) < pos + size + 2:
                    return out, data
                body += data[pos:pos + size]
                pos += size + 2
            r.body = body
        elif "content-length" in r.headers:
            n = int(r.headers["content-length"])
            if len(data) < pos + n:
                break
            r.body = data[pos:pos + n]
            pos += n
        else:
            r.body = data[pos:]
            pos = len(data)
        out.append(r)
        data = data[pos:]
    return out, data


class Exchange:
    """What came back for the bytes sent on one fresh connection (see exchange())."""

    def __init__(self, sent, data, how, elapsed):
        self.sent, self.data, self.how, self.elapsed = sent, data, how, elapsed
        self.responses, self.rest = parse_responses(data)

    def only(self):
        """The one and only response (asserts exactly one came back, nothing after it)."""
        assert len(self.responses) == 1 and self.rest == b"", (
            f"expected exactly one answer, got {len(self.responses)}: {self.responses!r} "
            f"(unparsed after them: {self.rest[:300]!r}; close: {self.how})\nsent: {self.sent[:400]!r}")
        return self.responses[0]

    def __repr__(self):
        return f"<Exchange {self.how} after {self.elapsed:.2f}s: {self.responses!r} rest={self.rest[:200]!r}>"


def exchange(port, data, timeout=5.0, host="127.0.0.1", bind=None, pause=None):
    """Open a fresh connection, send `data` (bytes, or a list of bytes sent as separate
    writes `pause` seconds apart), read until the server closes or `timeout`. Never
    half-closes: a server that waits for more bytes shows up as how == "timeout"."""
    parts = data if isinstance(data, list) else [data]
    sock = raw_connect(port, host=host, bind=bind, timeout=timeout)
    t0 = time.monotonic()
    try:
        early, how = b"", None
        for i, p in enumerate(parts):
            if i and pause:
                time.sleep(pause)
            try:
                sock.sendall(p)
            except (ConnectionResetError, BrokenPipeError):
                # the server reset the connection before all was written (a clean close
                # with lingering would have kept reading); what it answered is still read
                early, how = b"", "reset"
                break
        rest, how2 = read_until_close(sock, timeout)
        return Exchange(b"".join(parts), early + rest, how or how2, time.monotonic() - t0)
    finally:
        sock.close()


def assert_refusal(r_or_ex, status, code, how=None):
    """A refusal made by the HTTP layer: exactly one answer with this status, JSON
    {"error": code, ...} (a 400 also carries a "detail" string), Content-Type
    application/json, Connection: close, then an orderly close (EOF, not a reset).
    Accepts an Exchange (checks the close and that nothing else came back) or a Resp;
    status and code may be sets of acceptable values. Returns the JSON body."""
    if isinstance(r_or_ex, Exchange):
        r = r_or_ex.only()
        assert r_or_ex.how == "eof", (f"{status} answer not followed by an orderly close "
                                      f"(got {r_or_ex.how!r}): {r_or_ex!r}")
    else:
        r = r_or_ex
    statuses = status if isinstance(status, (set, frozenset, tuple, list)) else {status}
    assert r.status in statuses, f"expected {status} {code}, got {r!r}"
    ct = r.headers.get("content-type", "")
    assert ct.split(";")[0].strip().lower() == "application/json", f"Content-Type {ct!r}: {r!r}"
    j = r.json
    codes = code if isinstance(code, (set, frozenset, tuple, list)) else {code}
    assert isinstance(j, dict) and j.get("error") in codes, f"expected error {code!r}: {j!r}"
    if r.status == 400 and j.get("error") == "bad_request":
        assert isinstance(j.get("detail"), str) and j["detail"], f"400 bad_request without a detail: {j!r}"
    conn = r.headers.get("connection", "").lower()
    assert "close" in [t.strip() for t in conn.split(",")], f"refusal without Connection: close: {r!r}"
    if how is not None:
        assert how == "eof", f"refusal not followed by an orderly close: {how}"
    return j


def check_stopped(server):
    """SIGTERM a node (if running) and list what is wrong: an exit code other than 0, a
    sanitizer report in its log (what the ankusa fixture checks at teardown, for nodes a
    module shares)."""
    problems = []
    was_running = server.running()
    rc = server.stop()
    if was_running and rc != 0:
        problems.append(f"{server.name}: exit code {rc!r} after SIGTERM (expected 0)\n{server.log_tail(40)}")
    if any(m in server.log_text() for m in SANITIZER_MARKERS):
        problems.append(f"{server.name}: sanitizer report in stderr\n{server.log_tail(120)}")
    return problems


def stored_hooks(node):
    """How many hooks the node holds (ankusa_store_hooks through the admin /metrics)."""
    return node.metrics().value("ankusa_store_hooks", instance="default")


def post_bytes(path, body, extra=b"", version=b"HTTP/1.1", host=b"x"):
    """A complete POST with Content-Length (bytes); extra: header lines, each ending CRLF."""
    return (b"POST " + path.encode() + b" " + version + b"\r\nHost: " + host + b"\r\n" + extra +
            b"Content-Length: %d\r\n\r\n" % len(body) + body)


def chunked(body, size=4096):
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


# --------------------------------------------------------------------------- metrics

_METRIC_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+\d+)?$')
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Metrics:
    def __init__(self, text):
        self.text = text
        self.samples = {}
        for line in text.splitlines():
            if not line.strip() or line.startswith("#"):
                continue
            m = _METRIC_RE.match(line)
            assert m, f"unparseable metrics line: {line!r}"
            labels = tuple(sorted(_LABEL_RE.findall(m.group(2) or "")))
            self.samples[(m.group(1), labels)] = float(m.group(3))

    def get(self, name, **labels):
        """Value of the one series with exactly these labels, or None."""
        return self.samples.get((name, tuple(sorted(labels.items()))))

    def value(self, name, **labels):
        v = self.get(name, **labels)
        assert v is not None, f"metric {name}{labels} missing; have: " + ", ".join(
            f"{n}{dict(l)}" for (n, l) in self.samples if n == name)
        return v

    def series(self, name):
        return {l: v for (n, l), v in self.samples.items() if n == name}

    def names(self):
        return {n for (n, _) in self.samples}


# --------------------------------------------------------------------------- server

def base_config(data_dir, http_port, admin_port):
    return {
        "node": {"data_dir": str(data_dir)},
        "log": {"level": "info"},
        "http": {"port": http_port, "max_body_bytes": 8000000, "routing": "path", "prefix": "/webhooks"},
        "admin": {"enabled": True, "ip": "127.0.0.1", "port": admin_port},
        "listener": {"drain_delay_ms": 0},  # SIGTERM in teardown: no load balancer to wait for
        "batcher": {"max_batch": 256, "max_delay_ms": 0, "max_queue": 10000, "max_queue_bytes": 268435456},
        "sources": {
            "demo": {"sinks": [{"type": "log"}]},
            "acme_src": {"tenant": "acme", "sinks": [{"type": "log"}]},
        },
    }


def deep_update(dst, src):
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            deep_update(dst[k], v)
        else:
            dst[k] = v
    return dst


class Server:
    """One ankusa node. The config is written as JSON (a YAML subset)."""

    def __init__(self, workdir, name="ankusa", config=None, env=None, args=None, data_dir=None,
                 config_text=None, sources=None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.http_port, self.admin_port = free_ports(2)
        self.data_dir = Path(data_dir) if data_dir else self.workdir / "data"
        self.config = base_config(self.data_dir, self.http_port, self.admin_port)
        if config:
            deep_update(self.config, config)
        if sources is not None:  # replaces the default sources instead of merging
            self.config["sources"] = sources
        self.config_path = self.workdir / "node-config.yml"  # not ./ankusa.yml: no lookup fallback
        self.config_text = config_text
        if config_text is not None:
            self.config_path.write_text(config_text)
        else:
            self.write_config()
        self.env = env or {}
        self.args = args
        self.log_path = self.workdir / f"{name}.stderr.log"
        self.proc = None
        self.starts = 0
        self.exit_codes = []

    def write_config(self):
        """Write self.config to the config file (after changing it, before a (re)start)."""
        self.config_path.write_text(json.dumps(self.config, indent=2))

    # -- lifecycle
    def start(self, wait=True, timeout=READY_TIMEOUT):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        args = self.args if self.args is not None else ["serve", "--config", str(self.config_path)]
        logf = open(self.log_path, "ab")
        logf.write(f"----- start #{self.starts + 1} {time.strftime('%H:%M:%S')}\n".encode())
        logf.flush()
        self.proc = subprocess.Popen([BIN, *args], stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     env=clean_env(self.env), cwd=str(self.workdir))
        logf.close()
        self.starts += 1
        if wait:
            self.wait_ready(timeout)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ankusa exited with {self.proc.returncode} before ready\n"
                                     f"{self.log_tail()}")
            try:
                r = http_request(self.http_port, "GET", "/ready", timeout=2)
                if r.status == 200:
                    return
                last = r
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise AssertionError(f"ankusa not ready within {timeout}s (last: {last!r})\n{self.log_tail()}")

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, timeout=None):
        """SIGTERM by PID, wait, then SIGKILL. Returns the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            rc = self.wait_exit(timeout or (60 if SANITIZER else 30))
            if rc is None:
                self.proc.kill()
                self.proc.wait(10)
                self.exit_codes.append("sigkill-after-sigterm-timeout")
                return "timeout"
        rc = self.proc.returncode
        self.exit_codes.append(rc)
        return rc

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # SIGKILL by PID
            self.proc.wait(10)
            self.exit_codes.append("sigkill")

    def restart(self):
        self.stop()
        return self.start()

    # -- logs
    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=60):
        lines = self.log_text().splitlines()
        return f"--- {self.log_path} (last {n} lines) ---\n" + "\n".join(lines[-n:])

    # -- HTTP
    def post(self, path, body=b"", headers=None, timeout=30.0):
        h = {"Content-Type": "application/octet-stream"}
        h.update(headers or {})
        return http_request(self.http_port, "POST", path, body=body, headers=h, timeout=timeout)

    def get(self, path, timeout=10.0):
        return http_request(self.http_port, "GET", path, timeout=timeout)

    def admin(self, path, method="GET", timeout=10.0, body=None, token=None, headers=None):
        """An admin request; body: bytes, or anything else sent as JSON; token: a bearer token."""
        hdrs = dict(headers or {})
        if token is not None:
            hdrs["Authorization"] = f"Bearer {token}"
        if body is not None and not isinstance(body, bytes):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        return http_request(self.admin_port, method, path, body=body, headers=hdrs, timeout=timeout)

    def metrics(self):
        r = self.admin("/metrics")
        assert r.status == 200, r
        return Metrics(r.body.decode())

    def hook(self, hook_id):
        r = self.admin(f"/v1/hooks/{hook_id}")
        assert r.status == 200, f"GET /v1/hooks/{hook_id}: {r!r}"
        return r.json

    def inspect(self, check=True, archive=True):
        return inspect_hooks(self.data_dir, check=check, archive=archive,
                             config=self.config_path if self.config_text is None else None)

    @property
    def store_dir(self):
        return self.data_dir / "default" / "store"


def post_many(port, bodies, path="/webhooks/demo", workers=32, timeout=30.0, headers=None):
    """POST each body (one connection per request); returns [(body, Resp | Exception)]."""
    def one(b):
        try:
            return b, http_request(port, "POST", path, body=b,
                                   headers=dict({"Content-Type": "application/octet-stream"}, **(headers or {})),
                                   timeout=timeout)
        except Exception as e:  # noqa: BLE001 - the caller classifies
            return b, e
    with ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(one, bodies))


def b64(data):
    return base64.b64encode(data).decode()

