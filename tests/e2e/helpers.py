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


# --------------------------------------------------------------------------- basics

def sha256_hex(data):
    return hashlib.sha256(data).hexdigest()


def reserve_port():
    """(socket, port): a free loopback port, held by the bound socket until the caller
    closes it (so that a Server started meanwhile cannot pick the same port)."""
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


def inspect_hooks(data_dir, check=True):
    """`ankusa inspect hooks --data-dir DIR` parsed into a list of dicts."""
    p = subprocess.run([BIN, "inspect", "hooks", "--data-dir", str(data_dir)], env=clean_env(),
                       capture_output=True, timeout=CLI_TIMEOUT * 3)
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
    """A raw TCP connection that can read HTTP/1.1 responses one at a time (keep-alive)."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
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

    def inspect(self, check=True):
        return inspect_hooks(self.data_dir, check=check)

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

