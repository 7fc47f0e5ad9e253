"""A rabbitmq-server for the end-to-end tests (Debian's, started from
/usr/lib/rabbitmq/bin/rabbitmq-server, a shell script that execs the Erlang VM).

One broker per pytest session (it takes seconds to boot and ~125 MB): every port is free
and its own (AMQP, Erlang distribution, and an epmd of its own via ERL_EPMD_PORT, so it
never meets another epmd), the node name is random, and everything it writes (mnesia, logs,
config, HOME with the Erlang cookie) lives in one temporary directory. It is started in a
new session and stopped by killing that process group (the PGID we started), never by
name. epmd is started by us, in the foreground, on the broker's ERL_EPMD_PORT (left to the
VM it would start as a daemon and leave our process group), and stopped the same way.
stop() then checks in /proc that no process with the temporary directory in its arguments
or environment is left.

Helpers for the tests (pika, Debian's python3-pika): declare a queue bound to an exchange,
basic_get every message of a queue, and make the broker unavailable and back
(rabbitmqctl stop_app / start_app on this node).

Run standalone (`/usr/bin/python3 tests/e2e/rabbitmq_server.py`) for a self-check."""
import os
import random
import shutil
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

import pika

RMQ_BIN_DIR = Path(os.environ.get("ANKUSA_TEST_RABBITMQ_DIR", "/usr/lib/rabbitmq/bin"))
EPMD = shutil.which("epmd") or "/usr/bin/epmd"
BOOT_TIMEOUT = 90.0


def available():
    """None when a broker can be started here, else why not."""
    if not (RMQ_BIN_DIR / "rabbitmq-server").exists():
        return f"{RMQ_BIN_DIR}/rabbitmq-server not installed (Debian package rabbitmq-server)"
    if shutil.which("erl") is None:
        return "erl not on PATH"
    if not os.access(EPMD, os.X_OK):
        return "epmd not found"
    return None


class RabbitServer:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="ak-rabbitmq-"))
        self.port, self.dist_port, self.epmd_port, self.tls_port = free_ports(4)
        self.node = f"ak{random.randrange(16 ** 8):08x}@localhost"
        self.proc = None
        self.epmd = None
        self.log = self.dir / "server.out"
        for d in ("mnesia", "log", "home"):
            (self.dir / d).mkdir()
        self.ca = self.dir / "ca.pem"
        self._make_certs()
        (self.dir / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            f"listeners.ssl.1 = 127.0.0.1:{self.tls_port}\n"
            f"ssl_options.cacertfile = {self.ca}\n"
            f"ssl_options.certfile = {self.dir / 'server.pem'}\n"
            f"ssl_options.keyfile = {self.dir / 'server.key'}\n"
            "ssl_options.verify = verify_none\n"
            "ssl_options.fail_if_no_peer_cert = false\n"
            "loopback_users = none\n"
            "log.console = false\n"
            "log.file.level = warning\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.env = dict(os.environ,
                        HOME=str(self.dir / "home"),
                        RABBITMQ_NODENAME=self.node,
                        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
                        RABBITMQ_NODE_PORT=str(self.port),
                        RABBITMQ_DIST_PORT=str(self.dist_port),
                        ERL_EPMD_PORT=str(self.epmd_port),
                        ERL_EPMD_ADDRESS="127.0.0.1",
                        RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
                        RABBITMQ_LOG_BASE=str(self.dir / "log"),
                        RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq"),
                        RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
                        RABBITMQ_PID_FILE=str(self.dir / "rabbit.pid"))

    def _make_certs(self):
        """A CA of our own and a server certificate for the name "localhost" only (no IP
        SAN), so that a client checking names accepts amqps://localhost and refuses
        amqps://127.0.0.1."""
        d = self.dir

        def ossl(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=str(d))

        ossl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
             "-subj", "/CN=ankusa test CA")
        ossl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
             "-subj", "/CN=localhost")
        (d / "san.ext").write_text("subjectAltName=DNS:localhost\n")
        ossl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "2", "-extfile", "san.ext")
        for f in ("server.key", "server.pem", "ca.pem"):
            os.chmod(d / f, 0o644)

    @property
    def tls_url(self):
        return f"amqps://guest:guest@localhost:{self.tls_port}/%2F"

    @property
    def url(self):
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F"

    # -- lifecycle
    def start(self, timeout=BOOT_TIMEOUT):
        # our own epmd, in the foreground and in a group of its own: left to the VM, epmd
        # would start with -daemon, leave our process group and outlive the session
        with open(self.dir / "epmd.out", "ab") as out:
            self.epmd = subprocess.Popen([EPMD, "-port", str(self.epmd_port), "-address", "127.0.0.1"],
                                         env=self.env, cwd=str(self.dir), stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.epmd_port), timeout=1).close()
                break
            except OSError:
                if self.epmd.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"epmd did not start on {self.epmd_port}")
                time.sleep(0.05)
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen([str(RMQ_BIN_DIR / "rabbitmq-server")], env=self.env, cwd=str(self.dir),
                                         stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        try:
            self.wait_ready(timeout)
        except BaseException:
            tail = self.tail()
            self.stop()
            raise RuntimeError(f"rabbitmq-server did not come up\n{tail}") from None
        return self

    def wait_ready(self, timeout=BOOT_TIMEOUT):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rabbitmq-server exited with {self.proc.returncode}\n{self.tail()}")
            try:
                c = self.connect()
                c.close()
                return
            except Exception as e:  # noqa: BLE001 - not up yet
                last = e
            time.sleep(0.2)
        raise RuntimeError(f"rabbitmq-server not ready within {timeout}s ({last!r})\n{self.tail()}")

    def tail(self, n=40):
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            lines = []
        return "\n".join(lines[-n:])

    def leftovers(self):
        """Processes whose arguments or environment mention our temporary directory (a
        daemon that left our process group still carries HOME=<dir>/home)."""
        mine = str(self.dir).encode()
        found = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if mine in cmd or mine in env:
                found.append(f"{pid} {cmd.replace(bytes(1), b' ').decode(errors='replace')[:200]}")
        return found

    @staticmethod
    def _kill_group(proc):
        """SIGTERM the process group proc leads, wait for proc, then SIGKILL whatever of
        the group is left."""
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.1)

    def stop(self):
        """Kill the process groups we started (the broker's, then epmd's), wait for them,
        check that nothing of ours is left, remove the temporary directory."""
        if self.proc is not None:
            self._kill_group(self.proc)
        if self.epmd is not None:
            self._kill_group(self.epmd)
        left = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            left = self.leftovers()
            if not left:
                break
            time.sleep(0.2)
        shutil.rmtree(self.dir, ignore_errors=True)
        if left:
            raise RuntimeError(f"rabbitmq processes left after stop: {left}")

    def ctl(self, *args, timeout=60):
        """rabbitmqctl -n <our node> args..., with our environment (cookie, epmd port)."""
        p = subprocess.run([str(RMQ_BIN_DIR / "rabbitmqctl"), "-n", self.node, *args], env=self.env,
                           cwd=str(self.dir), capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} exited {p.returncode}: {p.stdout}{p.stderr}")
        return p.stdout

    def stop_app(self):
        """The broker goes away for clients (connections closed, port closed); the VM stays."""
        self.ctl("stop_app")

    def start_app(self):
        self.ctl("start_app")
        self.wait_ready()

    # -- clients
    def connect(self):
        params = pika.ConnectionParameters(host="127.0.0.1", port=self.port,
                                           credentials=pika.PlainCredentials("guest", "guest"),
                                           connection_attempts=1, socket_timeout=5, blocked_connection_timeout=10)
        return pika.BlockingConnection(params)

    def bind_queue(self, exchange, queue, routing_key="#", exchange_type="topic", arguments=None, purge=True):
        """Declare the exchange (durable, as the sink does), a durable queue (with these
        queue arguments), purge it (when purge), bind them."""
        c = self.connect()
        try:
            ch = c.channel()
            ch.exchange_declare(exchange=exchange, exchange_type=exchange_type, durable=True)
            ch.queue_declare(queue=queue, durable=True, arguments=arguments)
            if purge:
                ch.queue_purge(queue=queue)
            ch.queue_bind(queue=queue, exchange=exchange, routing_key=routing_key)
        finally:
            c.close()

    def delete_queue(self, queue):
        c = self.connect()
        try:
            c.channel().queue_delete(queue=queue)
        finally:
            c.close()

    def delete_exchange(self, exchange):
        c = self.connect()
        try:
            c.channel().exchange_delete(exchange=exchange)
        finally:
            c.close()

    def exchange_exists(self, exchange):
        c = self.connect()
        try:
            c.channel().exchange_declare(exchange=exchange, passive=True)
            return True
        except pika.exceptions.ChannelClosedByBroker:
            return False
        finally:
            if c.is_open:
                c.close()

    def get_all(self, queue, ack=True):
        """Every message now in the queue: [(method, properties, body)] via basic_get; with
        ack=False they go back to the queue when the connection closes."""
        c = self.connect()
        out = []
        try:
            ch = c.channel()
            while True:
                method, props, body = ch.basic_get(queue=queue, auto_ack=ack)
                if method is None:
                    break
                out.append((method, props, body))
        finally:
            c.close()
        return out

    def publish(self, exchange, routing_key, body, properties=None):
        c = self.connect()
        try:
            c.channel().basic_publish(exchange, routing_key, body, properties)
        finally:
            c.close()

    def count(self, queue):
        c = self.connect()
        try:
            return c.channel().queue_declare(queue=queue, passive=True).method.message_count
        finally:
            c.close()


if __name__ == "__main__":
    why = available()
    if why:
        raise SystemExit(why)
    t0 = time.monotonic()
    srv = RabbitServer().start()
    print(f"up on {srv.port} as {srv.node} in {time.monotonic() - t0:.1f}s")
    try:
        srv.bind_queue("ak.self", "q.self")
        c = srv.connect()
        c.channel().basic_publish("ak.self", "x.y", b"hello")
        c.close()
        assert [b for _, _, b in srv.get_all("q.self")] == [b"hello"]
        srv.stop_app()
        try:
            srv.connect().close()
            raise SystemExit("still reachable after stop_app")
        except pika.exceptions.AMQPConnectionError:
            pass
        srv.start_app()
        assert srv.count("q.self") == 0
        print("ok")
    finally:
        srv.stop()
    print("stopped, nothing left")
