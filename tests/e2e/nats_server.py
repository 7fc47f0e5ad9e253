"""A nats-server with JetStream for the end-to-end tests (Debian's /usr/sbin/nats-server),
on a free loopback port with a temporary store dir; started and stopped by PID (never by
name), and startable again on the same port and store dir (a broker that goes down and
comes back, and proof that JetStream kept what it acked).

A tiny NATS protocol client (stdlib sockets: INFO/CONNECT/PUB/HPUB/SUB/MSG/HMSG/PING/PONG)
drives the JetStream API the tests need: create a stream (the sink never creates one) and
read stored messages back ($JS.API.STREAM.MSG.GET.<stream> with {"seq": n}: the stored
message with its headers, base64).

Run standalone (`python3 tests/e2e/nats_server.py`) for a self-check."""
import base64
import json
import os
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

try:
    from helpers import reserve_port
except ImportError:  # standalone run from another directory
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from helpers import reserve_port

NATS_BIN = os.environ.get("ANKUSA_TEST_NATS_BIN", "/usr/sbin/nats-server")


def _b32(data):
    return base64.b32encode(data).decode().rstrip("=")


def _crc16(data):
    crc = 0
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def make_certs(d, dns_name):
    """A test CA and a server certificate for dns_name (openssl CLI): paths (ca, cert, key)."""
    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run = lambda *a: subprocess.run(["openssl", *a], check=True, capture_output=True, cwd=d)  # noqa: E731
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=ankusa-test-ca")
    run("req", *ec, "-keyout", "srv.key", "-out", "srv.csr", "-subj", f"/CN={dns_name}")
    (d / "ext.cnf").write_text(f"subjectAltName=DNS:{dns_name}\n")
    run("x509", "-req", "-in", "srv.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out", "srv.pem",
        "-days", "2", "-extfile", "ext.cnf")
    return d / "ca.pem", d / "srv.pem", d / "srv.key"


def user_nkey():
    """(seed "SU...", public key "U...") of a fresh user NKey, encoded independently of the
    sink (ed25519 from python3-cryptography, base32 + CRC-16/XMODEM as NATS encodes them)."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives import serialization
    raw = os.urandom(32)
    pub = Ed25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    user = 20 << 3
    seed_body = bytes([(18 << 3) | (user >> 5), (user & 31) << 3]) + raw
    pub_body = bytes([user]) + pub
    enc = lambda b: _b32(b + _crc16(b).to_bytes(2, "little"))  # noqa: E731
    return enc(seed_body), enc(pub_body)


class NatsError(Exception):
    """A -ERR from the server, or a JetStream API error reply."""


def parse_headers(block):
    """NATS/1.0 header block (bytes, through the blank line) -> (status, {name: [values]})."""
    lines = block.decode("utf-8", "replace").split("\r\n")
    first = lines[0].split(" ", 2)
    status = int(first[1]) if len(first) > 1 and first[1].isdigit() else None
    hdrs = {}
    for ln in lines[1:]:
        if not ln:
            continue
        name, _, value = ln.partition(":")
        hdrs.setdefault(name.strip(), []).append(value.strip())
    return status, hdrs


class Msg:
    def __init__(self, subject, reply, headers, data, status=None):
        self.subject, self.reply, self.headers, self.data, self.status = subject, reply, headers, data, status

    def __repr__(self):
        return f"Msg({self.subject!r}, status={self.status}, headers={self.headers}, {len(self.data)} bytes)"


class Client:
    """One connection: request(subject, payload, headers=None) -> Msg (the reply)."""

    def __init__(self, port, host="127.0.0.1", timeout=10.0, name="ankusa-test", auth=None, cafile=None,
                 server_name="localhost"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.sid = 0
        self.inbox = f"_TINBOX.{os.urandom(6).hex()}"
        line = self._line()
        if not line.startswith(b"INFO "):
            raise NatsError(f"no INFO: {line!r}")
        self.info = json.loads(line[5:])
        if self.info.get("tls_required"):
            ctx = ssl.create_default_context(cafile=cafile)
            self.sock = ctx.wrap_socket(self.sock, server_hostname=server_name)
        conn = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                "protocol": 1, "name": name, "lang": "python-test", "version": "0"}
        conn.update(auth or {})
        self.sock.sendall(b"CONNECT " + json.dumps(conn).encode() + b"\r\nPING\r\n")
        self._expect_pong()
        self.sub_sid = self._sub(self.inbox + ".*")
        self.n = 0

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # ---- framing
    def _fill(self):
        d = self.sock.recv(1 << 20)
        if not d:
            raise ConnectionError("nats-server closed the connection")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _sub(self, subject):
        self.sid += 1
        self.sock.sendall(f"SUB {subject} {self.sid}\r\n".encode())
        return self.sid

    def _expect_pong(self):
        while True:
            m = self._next()
            if m == "PONG":
                return

    def _next(self):
        """The next protocol item: "PONG", or a Msg (PINGs answered, +OK ignored)."""
        while True:
            ln = self._line()
            if ln == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif ln == b"PONG":
                return "PONG"
            elif ln.startswith(b"+OK") or ln.startswith(b"INFO "):
                continue
            elif ln.startswith(b"-ERR"):
                raise NatsError(ln.decode(errors="replace"))
            elif ln.startswith(b"MSG "):
                parts = ln.decode().split(" ")
                subj, reply = parts[1], (parts[3] if len(parts) == 5 else None)
                data = self._exact(int(parts[-1]))
                return Msg(subj, reply, {}, data)
            elif ln.startswith(b"HMSG "):
                parts = ln.decode().split(" ")
                subj, reply = parts[1], (parts[3] if len(parts) == 6 else None)
                hlen, total = int(parts[-2]), int(parts[-1])
                raw = self._exact(total)
                status, hdrs = parse_headers(raw[:hlen])
                return Msg(subj, reply, hdrs, raw[hlen:], status)
            else:
                raise NatsError(f"unexpected line {ln!r}")

    # ---- API
    def publish(self, subject, payload=b"", reply=None, headers=None):
        r = f" {reply}" if reply else ""
        if headers:
            hb = b"NATS/1.0\r\n" + b"".join(f"{k}: {v}\r\n".encode() for k, v in headers.items()) + b"\r\n"
            self.sock.sendall(f"HPUB {subject}{r} {len(hb)} {len(hb) + len(payload)}\r\n".encode() + hb
                              + payload + b"\r\n")
        else:
            self.sock.sendall(f"PUB {subject}{r} {len(payload)}\r\n".encode() + payload + b"\r\n")

    def request(self, subject, payload=b"", headers=None, timeout=5.0):
        self.n += 1
        reply = f"{self.inbox}.{self.n}"
        self.publish(subject, payload, reply, headers)
        self.sock.settimeout(timeout)
        while True:
            m = self._next()
            if isinstance(m, Msg) and m.subject == reply:
                return m

    def js(self, api, body=None, timeout=5.0):
        """A JetStream API call ($JS.API.<api>) -> its JSON reply (raises NatsError on an
        error reply or no responders)."""
        payload = b"" if body is None else json.dumps(body).encode()
        m = self.request("$JS.API." + api, payload, timeout=timeout)
        if m.status == 503:
            raise NatsError("no responders (JetStream not enabled?)")
        out = json.loads(m.data)
        if "error" in out:
            raise NatsError(out["error"])
        return out


class Spy:
    """A plain subscriber on a subject: sees every publish the server routes (duplicates
    that JetStream collapses included). .ids(): the Nats-Msg-Id of each, in order."""

    def __init__(self, port, subject, auth=None):
        self.c = Client(port, auth=auth)
        self.c.sock.sendall(f"SUB {subject} 99\r\nPING\r\n".encode())
        self.msgs = []
        self.lock = threading.Lock()
        self.pongs = 0
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        wait_for = time.time() + 5
        while not self.pongs and time.time() < wait_for:
            time.sleep(0.01)

    def _run(self):
        self.c.sock.settimeout(None)
        try:
            while True:
                m = self.c._next()
                if m == "PONG":
                    self.pongs += 1
                elif m.subject.startswith(self.c.inbox):
                    continue
                else:
                    with self.lock:
                        self.msgs.append(m)
        except (OSError, ConnectionError, ValueError):
            return

    def ids(self):
        with self.lock:
            return [m.headers.get("Nats-Msg-Id", [None])[0] for m in self.msgs]

    def close(self):
        self.c.close()


class NatsServer:
    """nats-server -js on 127.0.0.1:<free port> with its own store dir (and an HTTP
    monitoring port: connections() reads /connz)."""

    def __init__(self, workdir=None, port=None, config_text=None, args=(), client_auth=None, cafile=None,
                 server_name="localhost"):
        """config_text: a nats-server config file's text (authorization...); args: more
        flags; client_auth: CONNECT fields of the tests' own client ({"user":..,"pass":..})."""
        self.config_text = config_text
        self.args = list(args)
        self.client_auth = client_auth
        self.cafile = cafile
        self.server_name = server_name  # the name the tests' own client checks a TLS certificate against
        self.dir = Path(workdir or tempfile.mkdtemp(prefix="ankusa-nats-"))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.store = self.dir / "js"
        self.port = port
        self.mport = None
        self.proc = None
        self.log = self.dir / "nats-server.log"

    @property
    def url(self):
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout=15.0):
        held = []
        if self.port is None:
            sock, self.port = reserve_port()
            held.append(sock)
        if self.mport is None:
            sock, self.mport = reserve_port()
            held.append(sock)
        args = [NATS_BIN, "-js", "-sd", str(self.store), "-p", str(self.port), "-a", "127.0.0.1",
                "-m", str(self.mport), "--no_advertise", *self.args]
        if self.config_text is not None:
            cfg = self.dir / "nats.conf"
            cfg.write_text(self.config_text)
            args += ["-c", str(cfg)]
        for sock in held:
            sock.close()
        with open(self.log, "ab") as lf:
            self.proc = subprocess.Popen(args, stdout=lf, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"nats-server exited: {self.log.read_text()[-2000:]}")
            try:
                with Client(self.port, timeout=2.0, auth=self.client_auth, cafile=self.cafile,
                        server_name=self.server_name) as c:
                    c.js("INFO")
                return self
            except (OSError, NatsError, ConnectionError, ValueError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not come up: {self.log.read_text()[-2000:]}")

    def stop(self, kill=False):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a paused server cannot handle SIGTERM
            os.kill(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.proc = None

    def pause(self):
        """SIGSTOP: the server keeps its sockets but answers nothing (a stalled broker)."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def connections(self, name=None):
        """Client connections open now (/connz), those named `name` when given."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.mport}/connz?limit=1024", timeout=5) as r:
            conns = json.loads(r.read()).get("connections") or []
        return [c for c in conns if name is None or c.get("name") == name]

    def spy(self, subject):
        return Spy(self.port, subject, self.client_auth)

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self):
        return Client(self.port, auth=self.client_auth, cafile=self.cafile,
                        server_name=self.server_name)

    # ---- JetStream conveniences (a connection each)
    def create_stream(self, name, subjects, duplicate_window_s=120, **extra):
        cfg = {"name": name, "subjects": list(subjects), "storage": "file", "retention": "limits",
               "duplicate_window": int(duplicate_window_s * 1e9), "num_replicas": 1}
        cfg.update(extra)
        with self.client() as c:
            return c.js(f"STREAM.CREATE.{name}", cfg)

    def stream_info(self, name):
        with self.client() as c:
            return c.js(f"STREAM.INFO.{name}")

    def messages_or_none(self, name):
        """messages(name), or None when there is no such stream."""
        try:
            return self.messages(name)
        except NatsError as e:
            if "10059" in str(e) or "stream not found" in str(e):
                return None
            raise

    def messages(self, name):
        """Every message stored in the stream, in order: dicts {seq, subject, data (bytes),
        headers ({name: [values]})}."""
        out = []
        with self.client() as c:
            info = c.js(f"STREAM.INFO.{name}")
            first, last = info["state"]["first_seq"], info["state"]["last_seq"]
            if not info["state"]["messages"]:
                return out
            for seq in range(first, last + 1):
                try:
                    r = c.js(f"STREAM.MSG.GET.{name}", {"seq": seq})
                except NatsError as e:  # a deleted sequence
                    if "10037" in str(e) or "no message found" in str(e):
                        continue
                    raise
                m = r["message"]
                hdrs = {}
                if m.get("hdrs"):
                    _, hdrs = parse_headers(base64.b64decode(m["hdrs"]))
                out.append({"seq": m["seq"], "subject": m["subject"],
                            "data": base64.b64decode(m.get("data", "")), "headers": hdrs})
        return out


if __name__ == "__main__":
    s = NatsServer().start()
    try:
        print(s.create_stream("SELF", ["self.>"])["config"]["name"])
        with s.client() as c:
            r = c.request("self.a", b"hello", {"Nats-Msg-Id": "x1"})
            print(json.loads(r.data))
            r = c.request("self.a", b"hello", {"Nats-Msg-Id": "x1"})
            print(json.loads(r.data))
            print(c.request("nothing.here", b"x", {"a": "b"}))
        print(s.messages("SELF"))
        s.stop()
        s.start()
        print(s.messages("SELF"))
    finally:
        s.stop()
