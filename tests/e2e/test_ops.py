"""Operating the node: GET /v1/config (the effective config, no secret in it), GET /v1/wal
(the durability path and its counters), and the service manager's notify protocol
(READY=1 once the store is open and the listeners are bound, STOPPING=1 on SIGTERM)."""
import json
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from helpers import BIN, CLI_TIMEOUT, LOOPBACK, READY_TIMEOUT, REPO, http_request, run_cli

SECRETS = {
    "HMAC": "hmac-Zq7p0Xv93kLm",
    "WHSEC": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
    "PASS": "urlpass-9Tg4Wc",
    "HDR": "Bearer hdr-Yy81nQ",
    "TOKEN": "tok-Pp3Jd0sQ",
}


def secret_sources(via_env):
    """Sources holding every kind of secret the config knows: a verifier secret, a sink
    signing secret, a password in a sink URL, sink headers, a token verifier."""
    v = {k: (f"${{AK_E2E_{k}}}" if via_env else s) for k, s in SECRETS.items()}
    return {
        "signed": {"verify": {"type": "hmac", "secret": v["HMAC"], "signature_header": "X-Sig"},
                   "sinks": [{"type": "http", "url": f"http://user:{v['PASS']}@127.0.0.1:9/hook",
                              "secret": v["WHSEC"], "headers": {"authorization": v["HDR"]}}]},
        "tokened": {"tenant": "acme", "verify": {"type": "token", "location": "header", "header": "X-Token",
                                                 "secret": [v["TOKEN"]]},
                    "sinks": [{"type": "log"}]},
    }


def assert_no_secret(where, body):
    for name, s in SECRETS.items():
        assert s.encode() not in body, f"{where} holds the {name} secret"
        # the parts of a secret are secrets too (the whsec key without its prefix)
        if s.startswith("whsec_"):
            assert s[6:].encode() not in body, f"{where} holds the {name} key"


@pytest.mark.parametrize("via_env", [False, True], ids=["literal", "interpolated"])
def test_config_is_the_redacted_effective_config(ankusa, via_env):
    env = {f"AK_E2E_{k}": s for k, s in SECRETS.items()} if via_env else {}
    node = ankusa(config=LOOPBACK, sources=secret_sources(via_env), env=env)
    r = node.admin("/v1/config")
    assert r.status == 200, r
    assert r.headers["content-type"].startswith("application/json")
    assert_no_secret("GET /v1/config", r.body)
    cfg = r.json
    sig = cfg["sources"]["signed"]
    assert sig["verify"]["secret"] == "[REDACTED]"
    assert sig["sinks"][0]["secret"] == "[REDACTED]"
    assert "[REDACTED]" in sig["sinks"][0]["url"], sig["sinks"][0]["url"]
    assert sig["sinks"][0]["headers"] == {"authorization": "[REDACTED]"}  # names stay, as in Ankusa
    # the original's shape beside ours: {module, opts} adapters under source_store
    assert cfg["instance"] == "default" and cfg["wal"] == "disk"
    assert cfg["roles"] == cfg["node"]["roles"] and cfg["port"] == cfg["http"]["port"]
    orig = cfg["source_store"]["opts"]["sources"]["signed"]
    assert orig["verifier"]["module"] == "Ankusa.Verifier.Hmac", orig
    assert orig["verifier"]["opts"]["secret"] == "[REDACTED]"
    assert orig["sinks"][0]["module"] == "Ankusa.Sink.Http"
    assert orig["sinks"][0]["opts"]["headers"] == {"authorization": "[REDACTED]"}
    assert orig["sinks"][0]["opts"]["url"] == sig["sinks"][0]["url"]
    assert cfg["source_store"]["opts"]["sources"]["tokened"]["tenant_id"] == "acme"
    assert cfg["sources"]["tokened"]["tenant"] == "acme"
    # the effective config: defaults filled in, overrides applied
    assert cfg["admin"]["port"] == node.admin_port
    assert cfg["batcher"]["max_batch"] == 256
    # the same document print-config prints
    p = run_cli("print-config", "--config", node.config_path, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == cfg
    # and no other admin answer leaks them either
    for path in ("/v1/wal", "/metrics", "/health", "/ready"):
        assert_no_secret(f"GET {path}", node.admin(path).body)


def test_wal_reports_the_store_and_its_counters(ankusa):
    node = ankusa()
    w = node.admin("/v1/wal").json
    assert w["instance"] == "default"
    wal = w["wal"]
    assert wal["type"] == "disk"
    assert wal["store_path"] == str(node.store_dir)
    assert wal["open"] is True and wal["ready"] is True and wal["reason"] == "ok"
    assert wal["hooks"] == 0
    first = wal["next_seq"]
    assert isinstance(wal["disk_bytes"], int) and wal["disk_bytes"] > 0
    # the original's shape: `deliveries` an integer; our breakdown by state beside it
    assert type(wal["deliveries"]) is int and wal["deliveries"] == 0, wal
    assert set(wal["delivery_states"]) == {"pending", "scheduled", "inflight", "dead"}
    for i in range(5):
        assert node.post("/webhooks/demo", b'{"n":%d}' % i).status == 201
    wal = node.admin("/v1/wal").json["wal"]
    assert wal["next_seq"] == first + 5
    assert type(wal["deliveries"]) is int and wal["deliveries"] == sum(wal["delivery_states"].values()), wal
    assert wal["hooks"] == 5  # log sinks deliver at once, but the archive obligation keeps hooks
    node.restart()
    wal = node.admin("/v1/wal").json["wal"]
    assert wal["next_seq"] == first + 5, "the next seq survives a restart"
    assert wal["hooks"] == 5
    assert wal["last_open_ms"] >= 0


def test_wal_without_dispatch_has_no_delivery_counts(ankusa):
    node = ankusa(config={"node": {"roles": ["edge", "storage"]}})
    wal = node.admin("/v1/wal").json["wal"]
    assert wal["deliveries"] is None and wal["delivery_states"] is None
    assert wal["ready"] is True


# --------------------------------------------------------------------------- sd_notify

class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's NOTIFY_SOCKET."""

    def __init__(self):
        # a short directory: sun_path holds 107 bytes, pytest's tmp_path can be longer
        self.dir = tempfile.mkdtemp(prefix="akn-", dir="/tmp")
        self.path = f"{self.dir}/notify"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096).decode()
        except socket.timeout:
            return None
        return dict(line.split("=", 1) for line in data.splitlines() if "=" in line)

    def close(self):
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def notify():
    n = NotifySocket()
    yield n
    n.close()


def test_ready_after_listeners_bind_then_stopping_on_sigterm(ankusa, notify):
    node = ankusa(env={"NOTIFY_SOCKET": notify.path}, start=False)
    node.start(wait=False)
    msg = notify.recv(READY_TIMEOUT)
    assert msg is not None, f"no notification within {READY_TIMEOUT}s\n{node.log_tail()}"
    assert msg.get("READY") == "1", msg
    # READY means the store is open and both listeners take connections: right now,
    # without waiting
    assert http_request(node.http_port, "GET", "/ready", timeout=5).status == 200
    assert http_request(node.admin_port, "GET", "/health", timeout=5).status == 200
    assert node.post("/webhooks/demo", b"{}").status == 201
    assert notify.recv(0.3) is None, "one READY, nothing else while running"

    node.proc.send_signal(15)  # SIGTERM by PID
    msg = notify.recv(10)
    assert msg is not None and msg.get("STOPPING") == "1", msg
    assert node.wait_exit(30) == 0, node.log_tail()
    assert notify.recv(0.3) is None


def test_no_ready_when_the_node_cannot_start(ankusa, notify):
    node = ankusa(env={"NOTIFY_SOCKET": notify.path}, start=False)
    blocker = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    blocker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    blocker.bind(("127.0.0.1", node.http_port))
    blocker.listen(1)
    try:
        node.start(wait=False)
        rc = node.wait_exit(CLI_TIMEOUT)
        assert rc not in (0, None), f"started on a port in use (rc={rc})\n{node.log_tail()}"
        assert notify.recv(0.5) is None, "READY sent by a node that did not start"
    finally:
        blocker.close()


def test_a_missing_notify_socket_does_not_stop_the_node(ankusa):
    node = ankusa(env={"NOTIFY_SOCKET": "/nonexistent-dir/notify"})
    assert node.post("/webhooks/demo", b"{}").status == 201
    assert "NOTIFY_SOCKET" in node.log_text()


def test_the_store_computes_rocksdb_checksums_with_the_cpu_instruction(ankusa):
    """The binary defines rocksdb::crc32c::Extend (store/crc32c.c), so librocksdb's calls
    bind to it; the store's open line names the implementation. A binary that lost the
    definition (the object not linked, the symbol not exported) would log nothing, and
    one on a CPU without SSE4.2 names the library's own."""
    dynsyms = subprocess.run(["nm", "-D", "--defined-only", BIN], capture_output=True, text=True,
                             timeout=CLI_TIMEOUT)
    assert dynsyms.returncode == 0, dynsyms.stderr
    assert "_ZN7rocksdb6crc32c6ExtendEjPKcm" in dynsyms.stdout, "the CRC32C definition is not exported"
    with open("/proc/cpuinfo") as f:
        want = "sse4.2" if " sse4_2" in f.read() else "rocksdb"
    node = ankusa(config={"log": {"level": "debug"}})
    assert node.post("/webhooks/demo", b"{}").status == 201
    assert f"crc32c={want}" in node.log_text(), node.log_tail()


def test_gauges_follow_admin_gauge_interval(ankusa):
    """The memory gauges are set by the gauge thread, not by a scrape: with the default
    15 s interval they hold still across scrapes while the node allocates; at 100 ms
    they move."""
    def rss_moves(node):
        first = node.metrics().value("ankusa_process_resident_memory_bytes", instance="default")
        for _ in range(10):
            assert node.post("/webhooks/demo", b"x" * 1_000_000).status == 201
        deadline = time.time() + 2
        while time.time() < deadline:
            if node.metrics().value("ankusa_process_resident_memory_bytes", instance="default") != first:
                return True
            time.sleep(0.1)
        return False

    slow = ankusa(config={"admin": {"gauge_interval_ms": 600000}})
    assert not rss_moves(slow), "sampled on scrape, not every admin.gauge_interval_ms"
    fast = ankusa(config={"admin": {"gauge_interval_ms": 100}})
    assert rss_moves(fast), "the gauge thread did not sample at admin.gauge_interval_ms 100"


# --------------------------------------------------------------------------- systemd unit

UNIT = REPO / "deploy" / "systemd" / "ankusa.service"


def test_systemd_unit_is_notify_hardened_and_verifies(tmp_path):
    text = UNIT.read_text()
    keys = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            keys.setdefault(k.strip(), []).append(v.strip())
    assert keys["Type"] == ["notify"]
    for k, v in {"ProtectSystem": "strict", "NoNewPrivileges": "yes", "PrivateTmp": "yes",
                 "ProtectHome": "yes", "RestartPreventExitStatus": "78"}.items():
        assert keys.get(k) == [v], f"{k}={keys.get(k)}"
    assert "/var/lib/ankusa" in keys["ReadWritePaths"]
    if not shutil.which("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed: the unit's syntax is not checked")
    # verify needs the ExecStart binary to exist: point it at the one under test
    unit = tmp_path / "ankusa.service"
    unit.write_text(text.replace("/usr/bin/ankusa", BIN))
    p = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # verify exits 0 on unknown keys and bad values; it only says so
    assert p.returncode == 0 and not (p.stdout + p.stderr).strip(), p.stdout + p.stderr
