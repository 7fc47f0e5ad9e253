"""A redis-server for the end-to-end tests (Debian's /usr/bin/redis-server), on a free
loopback port, no persistence; started and stopped by PID (never by name), paused
(SIGSTOP) and resumed (SIGCONT) to play a slow store, killed (SIGKILL) and restarted on the
same port to play a dead one. A tiny RESP client (no redis python module is needed):
RedisServer.cmd("GET", "k") sends one command and returns the parsed reply.

Run standalone (`python3 tests/e2e/redis_server.py`) for a self-check."""
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

try:
    from helpers import free_ports
except ImportError:  # standalone run from another directory
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from helpers import free_ports

REDIS_BIN = os.environ.get("ANKUSA_TEST_REDIS_BIN", "/usr/bin/redis-server")


class RedisError(Exception):
    """An error reply (-ERR ...) from the server."""


# --------------------------------------------------------------------------- RESP

def encode_command(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        if isinstance(a, bytes):
            b = a
        elif isinstance(a, str):
            b = a.encode()
        else:
            b = str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


class _Reader:
    def __init__(self, sock):
        self.sock = sock
        self.buf = b""

    def _fill(self):
        d = self.sock.recv(65536)
        if not d:
            raise ConnectionError("redis closed the connection")
        self.buf += d

    def line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        """One reply: str for +simple, int for :n, bytes|None for $bulk, list|None for
        *array; an -error reply is returned as a RedisError instance (not raised, so that
        an array holding one is still read whole)."""
        ln = self.line()
        kind, rest = ln[:1], ln[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RedisError(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ConnectionError(f"unexpected RESP reply line {ln[:100]!r}")


class RespClient:
    """One connection; call(*args) -> parsed reply (raises RedisError on an error reply)."""

    def __init__(self, port, host="127.0.0.1", password=None, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.reader = _Reader(self.sock)
        if password is not None:
            self.call("AUTH", password)

    def call(self, *args):
        self.sock.sendall(encode_command(*args))
        r = self.reader.reply()
        if isinstance(r, RedisError):
            raise r
        return r

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()


# --------------------------------------------------------------------------- server

class RedisServer:
    """redis-server on 127.0.0.1:port (a free port unless given), optional requirepass."""

    def __init__(self, workdir=None, port=None, password=None, name="redis"):
        self._tmp = None
        if workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ankusa-redis-")
            workdir = self._tmp.name
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_ports(1)[0]
        self.password = password
        self.name = name
        self.log_path = self.workdir / f"{name}.log"
        self.proc = None
        self.paused = False

    # -- addresses
    def url(self, db=0, password=None):
        """redis://127.0.0.1:PORT/db, with :password@ when password is given (or True for
        this server's own)."""
        pw = self.password if password is True else password
        auth = f":{pw}@" if pw else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    # -- lifecycle
    def start(self, timeout=15.0):
        assert self.proc is None or self.proc.poll() is not None, "redis-server already running"
        args = [REDIS_BIN, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--dir", str(self.workdir),
                "--protected-mode", "no"]
        if self.password is not None:
            args += ["--requirepass", self.password]
        logf = open(self.log_path, "ab")
        logf.write(f"----- start {time.strftime('%H:%M:%S')} port {self.port}\n".encode())
        logf.flush()
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf,
                                     cwd=str(self.workdir))
        logf.close()
        self.paused = False
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=15.0):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"redis-server exited with {self.proc.returncode} before answering PING\n"
                                     f"{self.log_tail()}")
            try:
                if self.cmd("PING", timeout=1.0) == "PONG":
                    return
            except (OSError, ConnectionError, RedisError) as e:
                last = e
            time.sleep(0.02)
        raise AssertionError(f"redis-server on port {self.port} not answering PING within {timeout}s "
                             f"(last: {last!r})\n{self.log_tail()}")

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=10.0):
        """SIGTERM by PID (after SIGCONT if paused), wait, SIGKILL if it lingers. Returns
        the exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            if self.paused:
                self.resume()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.returncode

    def kill9(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()  # SIGKILL by PID
            self.proc.wait(10)
        self.paused = False

    def pause(self):
        """SIGSTOP: connections stay open, nothing is answered."""
        assert self.running(), "redis-server not running"
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        if self.running():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def restart(self, timeout=15.0):
        """Stop (if running) and start again on the same port (an empty data set: no
        persistence)."""
        self.stop()
        deadline = time.monotonic() + timeout
        while True:  # the port is free again at once (SO_REUSEADDR), but do not race on it
            try:
                return self.start(timeout=max(1.0, deadline - time.monotonic()))
            except AssertionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def close(self):
        self.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    # -- commands
    def cmd(self, *args, timeout=5.0):
        """Run one command on a fresh connection; returns the parsed reply (str, int,
        bytes, None, list); raises RedisError on an error reply."""
        with RespClient(self.port, password=self.password, timeout=timeout) as c:
            return c.call(*args)

    def keys(self, pattern="*"):
        return sorted(k.decode(errors="replace") for k in self.cmd("KEYS", pattern))

    # -- logs
    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, n=30):
        lines = self.log_text().splitlines()
        return f"--- {self.log_path} (last {n} lines) ---\n" + "\n".join(lines[-n:])

    def __enter__(self):
        return self.start()

    def __exit__(self, *a):
        self.close()


# --------------------------------------------------------------------------- self-check

def _self_check():
    with RedisServer(password="pw-self-check") as r:
        assert r.cmd("PING") == "PONG"
        assert r.cmd("SET", "ns:a", "1", "PX", 60000) == "OK"
        assert r.cmd("GET", "ns:a") == b"1"
        assert 0 < r.cmd("PTTL", "ns:a") <= 60000
        assert r.cmd("GET", "missing") is None
        assert r.keys("ns:*") == ["ns:a"]
        assert r.cmd("HSET", "ns:h", "f", "v") == 1 and r.cmd("HGETALL", "ns:h") == [b"f", b"v"]
        try:
            r.cmd("NOPE")
            raise AssertionError("an unknown command did not raise")
        except RedisError as e:
            assert "unknown command" in str(e).lower(), e
        # without the password: refused
        with RespClient(r.port) as c:
            try:
                c.call("GET", "ns:a")
                raise AssertionError("no NOAUTH")
            except RedisError as e:
                assert "NOAUTH" in str(e), e
        # paused: a PING gets no answer; resumed: it does
        r.pause()
        try:
            r.cmd("PING", timeout=0.3)
            raise AssertionError("a paused redis answered")
        except socket.timeout:
            pass
        r.resume()
        assert r.cmd("PING") == "PONG"
        pid, port = r.pid, r.port
        r.kill9()
        try:
            r.cmd("PING", timeout=0.5)
            raise AssertionError("a killed redis answered")
        except OSError:
            pass
        r.restart()
        assert r.port == port and r.pid != pid and r.cmd("PING") == "PONG"
        assert r.cmd("GET", "ns:a") is None, "no persistence"
        assert r.stop() == 0
    print("redis_server self-check ok")


if __name__ == "__main__":
    _self_check()
