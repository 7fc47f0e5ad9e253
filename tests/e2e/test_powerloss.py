"""Power loss: a 201 means the hook is durably stored, so it survives a power cut of the
host, not only a crash of the process.

The node's data dir lives on powerfs (tests/powerfs/powerfs.c), a FUSE filesystem that
keeps what processes see (live) apart from what a disk would still hold after a power
cut (durable: only what fsync/fdatasync of a file and fsync of a directory made so). A
cut throws away everything not durable: unsynced bytes, renames, new directory entries.

The drill (ANKUSA_DRILL_CUTS cycles, 12 by default, `make drill` runs 100) loads the node
from several threads and, at random moments, cuts the power in one of two orders:
  - kill -9 the node, then cut: no process writes after the cut (a host that lost power);
    half of these cuts are torn: some writes never synced reach the disk anyway, a random
    prefix of each file's unsynced bytes, cut at any byte, and, per directory, either its
    synced entries or all its current ones (RocksDB must then recover a WAL whose tail
    ends in the middle of a record);
  - cut while the node runs, then kill -9 it within 0.4 s: the node meets the cut in the
    middle of its commits (every file it has open answers EIO from then on, so a commit
    whose sync comes after the cut fails and is answered 503).
One cycle in four then cuts again within 0.5 s of the restart: while the store recovers
(WAL replay, a flush of it, old logs deleted) or just after.
After every cut, whatever the order, every hook answered 201 before the kill must be in
the store, byte for byte (`ankusa inspect hooks` hashes the stored body), no id or body
twice, and the node must start again on what is left (with one writer thread or two, in
turn, so commits also overlap) and know the acked events of a source with dedupe: a
provider's retry of one is answered as its duplicate, with its id. In the second order nothing acked after the
cut is excused: an ack needs a sync, and a sync on a pre-cut file fails; had the node
reopened its store on the post-cut files, what it acked then was synced after the cut.
"""
import base64
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

import helpers
from helpers import SANITIZER, http_request, is_uuid7, sha256_hex

CUTS = int(os.environ.get("ANKUSA_DRILL_CUTS", "12"))


def powerfs_bin():
    """tests/powerfs's binary: ANKUSA_POWERFS, else the test build's (it is test
    infrastructure, not the product: the sanitizer run uses it too), else the one beside
    ANKUSA_BIN."""
    cands = [os.environ.get("ANKUSA_POWERFS"), helpers.REPO / "build-test" / "powerfs",
             Path(helpers.BIN).parent / "powerfs"]
    for c in cands:
        if c and os.access(c, os.X_OK):
            return str(c)
    return None


class PowerFS:
    """One powerfs mount, owned by this test: started in the foreground, stopped by
    unmounting it and then by its PID."""

    def __init__(self, root):
        self.root = Path(root)
        self.mnt = self.root / "mnt"
        self.mnt.mkdir(parents=True, exist_ok=True)
        # a Unix socket path must fit in 108 bytes; pytest's tmp paths may not
        self.ctl_dir = tempfile.mkdtemp(prefix="powerfs-", dir="/tmp")
        self.ctl = os.path.join(self.ctl_dir, "ctl")
        self.log_path = self.root / "powerfs.log"
        self.proc = None
        self.cuts = 0

    def start(self):
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([powerfs_bin(), str(self.mnt), "--ctl", self.ctl],
                                     stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"powerfs exited with {self.proc.returncode}\n{self.log_tail()}")
            if os.path.ismount(self.mnt) and os.path.exists(self.ctl):
                self.command("stats")
                return self
            time.sleep(0.02)
        raise AssertionError(f"powerfs did not mount {self.mnt} within 10 s\n{self.log_tail()}")

    def command(self, cmd):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(self.ctl)
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while not out.endswith(b"\n"):
                d = s.recv(256)
                if not d:
                    break
                out += d
        text = out.decode().strip()
        assert text.startswith("ok"), f"powerfs {cmd}: {text!r}"
        return text

    def cut(self, torn_seed=None):
        """Cut the power; returns once live state is the durable one and old handles are
        dead. torn_seed: a torn cut (some unsynced changes reach the disk), reproducible
        from the seed."""
        self.cuts += 1
        return self.command("cut" if torn_seed is None else f"cut torn {torn_seed}")

    def stop(self):
        """Unmount (retrying while busy), then wait for the process; SIGTERM, SIGKILL by PID
        only if it does not go. Returns problems found (a busy mount, an unclean exit)."""
        problems = []
        if self.proc is None:
            return problems
        if self.proc.poll() is None:
            # fusermount3 (Debian package fuse3) is the way; umount does it too, as root
            um = ["fusermount3", "-u"] if shutil.which("fusermount3") else ["umount"]
            deadline = time.monotonic() + 10
            while True:
                p = subprocess.run([*um, str(self.mnt)], capture_output=True, text=True)
                if p.returncode == 0 or not os.path.ismount(self.mnt):
                    break
                if time.monotonic() > deadline:
                    problems.append(f"{' '.join(um)} {self.mnt}: {p.stderr.strip()} (lazy unmount)")
                    subprocess.run([*um, "-z" if um[0] == "fusermount3" else "-l", str(self.mnt)],
                                   capture_output=True)
                    break
                time.sleep(0.2)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    rc = self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    rc = self.proc.wait(10)
            if rc != 0:
                problems.append(f"powerfs exited with {rc}\n{self.log_tail()}")
        shutil.rmtree(self.ctl_dir, ignore_errors=True)
        return problems

    def log_tail(self, n=40):
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return "(no powerfs log)"
        return f"--- {self.log_path} ---\n" + "\n".join(lines[-n:])


@pytest.fixture
def powerfs(tmp_path):
    """Factory: powerfs() -> a mounted PowerFS under tmp_path. Unmounted at teardown (after
    the ankusa fixture stopped its nodes, when the test asks for this fixture first)."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse on this host: powerfs cannot mount")
    if not powerfs_bin():
        pytest.skip("powerfs not built (needs libfuse3-dev: scripts/deps.sh, then make test-build)")
    mounts = []

    def factory():
        fs = PowerFS(tmp_path / f"powerfs{len(mounts)}")
        mounts.append(fs)
        return fs.start()

    yield factory
    problems = []
    for fs in mounts:
        problems += fs.stop()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


# --------------------------------------------------------------------------- powerfs itself

def write_file(path, data, sync):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def sync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_powerfs_keeps_what_was_synced_and_drops_the_rest(powerfs):
    fs = powerfs()
    m = fs.mnt
    (m / "d").mkdir()
    write_file(m / "d" / "kept", b"synced", sync=True)
    write_file(m / "d" / "old", b"old", sync=True)
    sync_dir(m / "d")
    sync_dir(m)

    # a synced write survives; unsynced writes are dropped; an old handle is dead
    with open(m / "d" / "kept", "ab") as f:
        f.write(b"+unsynced")
    write_file(m / "d" / "old", b"overwritten", sync=False)
    fd = os.open(m / "d" / "kept", os.O_WRONLY)
    fs.cut()
    assert (m / "d" / "kept").read_bytes() == b"synced"
    assert (m / "d" / "old").read_bytes() == b"old"
    with pytest.raises(OSError) as ei:
        os.write(fd, b"late")
    assert ei.value.errno == 5, ei.value
    os.close(fd)
    assert (m / "d" / "kept").read_bytes() == b"synced"

    # a rename, an unlink, a mkdir without fsync of their directories: undone
    os.rename(m / "d" / "kept", m / "d" / "renamed")
    os.unlink(m / "d" / "old")
    (m / "newdir").mkdir()
    fs.cut()
    assert sorted(os.listdir(m)) == ["d"]
    assert sorted(os.listdir(m / "d")) == ["kept", "old"], "a rename or unlink survived without fsyncdir"
    assert (m / "d" / "kept").read_bytes() == b"synced"

    # a new file fsynced, its directory not: the entry is gone though its bytes were synced
    write_file(m / "d" / "fresh", b"bytes", sync=True)
    fs.cut()
    assert sorted(os.listdir(m / "d")) == ["kept", "old"]

    # a rename over an existing file, then fsyncdir: the replacement is durable
    write_file(m / "d" / "tmp", b"new", sync=True)
    os.rename(m / "d" / "tmp", m / "d" / "old")
    sync_dir(m / "d")
    fs.cut()
    assert sorted(os.listdir(m / "d")) == ["kept", "old"]
    assert (m / "d" / "old").read_bytes() == b"new"

    # ftruncate and fallocate reach it; fdatasync keeps the size; statfs reports room
    with open(m / "d" / "old", "r+b") as f:
        f.truncate(1)
        os.posix_fallocate(f.fileno(), 0, 8192)
        os.fdatasync(f.fileno())
        f.truncate(2)  # unsynced
    fs.cut()
    assert (m / "d" / "old").read_bytes() == b"n" + bytes(8191)
    st = os.statvfs(m)
    assert st.f_bavail * st.f_frsize > 1 << 40


def test_powerfs_torn_cut_keeps_a_prefix_of_what_was_not_synced(powerfs):
    fs = powerfs()
    m = fs.mnt
    write_file(m / "f", b"synced", sync=True)
    sync_dir(m)
    tails = set()
    for seed in range(1, 41):
        with open(m / "f", "ab") as f:
            f.write(b"0123456789")
        write_file(m / "new", b"x", sync=False)
        fs.cut(torn_seed=seed)
        data = (m / "f").read_bytes()
        assert data.startswith(b"synced"), (seed, data)
        tail = data[len(b"synced"):]
        assert b"0123456789".startswith(tail), (seed, data)
        tails.add(len(tail))
        if (m / "new").exists():
            assert (m / "new").read_bytes() in (b"", b"x")
            os.unlink(m / "new")
        write_file(m / "f", b"synced", sync=True)
        sync_dir(m)
    assert 0 in tails and len(tails) > 3, f"40 torn cuts kept tails of lengths {sorted(tails)} only"


# --------------------------------------------------------------------------- the drill

DEDUPE_SOURCE = {"dd": {"sinks": [{"type": "log"}], "dedupe": {"header": "X-Event-ID", "ttl_seconds": 3600}}}


class Load:
    """Client threads POSTing distinct bodies until stopped; never retried, so a body is
    stored at most once. Some bodies are large enough to go to RocksDB blob files. One
    request in four goes to a source with dedupe, under a fresh event key, so that a
    provider's retry of an acked event can be played after a cut (check_dedupe)."""

    def __init__(self, port, threads=8, timeout=10.0):
        self.port, self.timeout = port, timeout
        self.lock = threading.Lock()
        self.acked = {}       # id -> sha256 of the body, for every 201
        self.bodies = {}      # id -> body, for a sample, read back byte for byte at the end
        self.sent = set()     # sha256 of every body put on the wire
        self.keyed = {}       # event key -> (id, body) of every 201 from the dedupe source
        self.statuses = {}
        self.errors = 0
        self.problems = []
        self.stop_ev = threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(k,), daemon=True) for k in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(self.timeout + 10)

    def snapshot(self):
        with self.lock:
            return dict(self.acked), set(self.sent)

    def _run(self, k):
        rnd = random.Random(os.urandom(8))
        n = 0
        while not self.stop_ev.is_set():
            n += 1
            key = f"ev{k}-{n}-{rnd.getrandbits(48):x}" if n % 4 == 0 else None
            if key:
                size = rnd.randint(8, 200)  # kept for the retries: small
            else:
                size = rnd.randint(6000, 40000) if rnd.random() < 0.1 else rnd.randint(8, 3000)
            body = f"pl{k}-{n}-".encode() + rnd.randbytes(size)
            sha = sha256_hex(body)
            headers = {"Content-Type": "application/octet-stream"}
            if key:
                headers["X-Event-ID"] = key
            with self.lock:
                self.sent.add(sha)
            try:
                r = http_request(self.port, "POST", "/webhooks/dd" if key else "/webhooks/demo", body=body,
                                 timeout=self.timeout, headers=headers)
            except Exception:  # noqa: BLE001 - node killed or restarting
                with self.lock:
                    self.errors += 1
                time.sleep(0.02)
                continue
            with self.lock:
                self.statuses[r.status] = self.statuses.get(r.status, 0) + 1
                if r.status == 201:
                    hid = r.json.get("id")
                    if not is_uuid7(hid or ""):
                        self.problems.append(f"201 with a bad id: {r.body!r}")
                    elif hid in self.acked:
                        self.problems.append(f"id {hid} handed out twice")
                    elif r.json.get("duplicate"):
                        self.problems.append(f"a fresh event key {key} answered as a duplicate: {r.json}")
                    else:
                        self.acked[hid] = sha
                        if key:
                            self.keyed[key] = (hid, body)
                        if rnd.random() < 0.05:
                            self.bodies[hid] = body
                elif r.status != 503:
                    self.problems.append(f"unexpected answer {r!r}")


def check_after_cut(hooks, acked, sent, what):
    """Every acked hook stored with its body's hash; no id, seq or body twice; nothing
    stored that nobody sent."""
    ids = [h["id"] for h in hooks]
    assert len(ids) == len(set(ids)), f"{what}: an id appears twice in the store"
    seqs = [h["seq"] for h in hooks]
    assert len(seqs) == len(set(seqs)), f"{what}: a seq appears twice in the store"
    shas = [h["sha256"] for h in hooks]
    assert len(shas) == len(set(shas)), f"{what}: a body was stored twice"
    stored = dict(zip(ids, shas))
    missing = [i for i in acked if i not in stored]
    assert not missing, f"{what}: {len(missing)} of {len(acked)} acked hooks are gone, e.g. {missing[:3]}"
    differ = [i for i, sha in acked.items() if stored[i] != sha]
    assert not differ, f"{what}: {len(differ)} acked hooks have another body, e.g. {differ[:3]}"
    foreign = [h["id"] for h in hooks if h["sha256"] not in sent]
    assert not foreign, f"{what}: the store holds bodies nobody sent: {foreign[:3]}"
    return stored


def check_dedupe(s, load, rnd, what, n=20):
    """A provider's retry of an acked event, after the cut, is that event: answered with
    the first hook's id as a duplicate, not stored again."""
    with load.lock:
        items = rnd.sample(sorted(load.keyed.items()), min(n, len(load.keyed)))
    for key, (hid, body) in items:
        for _ in range(10):
            r = s.post("/webhooks/dd", body, headers={"X-Event-ID": key})
            if r.status != 503:
                break
            time.sleep(0.1)
        assert r.status == 201 and r.json.get("duplicate") is True and r.json.get("id") == hid, (
            f"{what}: the retry of acked event {key} (hook {hid}) got {r!r}")


def test_power_cuts_lose_no_acked_hook(powerfs, ankusa):
    fs = powerfs()
    s = ankusa(data_dir=fs.mnt / "data", config={"sources": DEDUPE_SOURCE})
    rnd = random.Random()
    load = Load(s.http_port).start()
    orders = []
    self_exits = []  # exit codes of a node that died on its own between a cut and the kill
    t0 = time.monotonic()
    try:
        for cycle in range(CUTS):
            time.sleep(rnd.uniform(0.3, 1.2) * (2 if SANITIZER else 1))
            # one cycle in three cuts under the running node (see the module's docstring);
            # half the others tear: some unsynced writes reach the disk, cut at any byte
            running_cut = cycle % 3 == 2
            torn = None if running_cut or rnd.random() < 0.5 else rnd.getrandbits(62)
            orders.append("cut+kill" if running_cut else "kill+cut" if torn is None else f"kill+torn cut {torn}")
            if running_cut:
                fs.cut()
                # long enough for the node to meet the cut: its commits fail (EIO) and are
                # answered 503; it may also exit by itself (noted, not judged: a dead node
                # loses no acked hook, and the restart below must work all the same)
                time.sleep(rnd.uniform(0.0, 0.4))
                if s.proc.poll() is not None:
                    self_exits.append(s.proc.returncode)
                s.kill9()
            else:
                s.kill9()
                fs.cut(torn_seed=torn)
            acked, sent = load.snapshot()
            what = f"cut {cycle + 1} ({orders[-1]}, {len(acked)} acked so far)"
            hooks = s.inspect()
            check_after_cut(hooks, acked, sent, what)
            # one writer thread or two, changing at every restart: with two, commits overlap
            # and each writer keeps its own seq marker (test_durability.py)
            s.config["batcher"]["partitions"] = 2 if cycle % 2 == 0 else 1
            s.write_config()
            if cycle % 4 == 3:
                # and once in four, the power goes again while the node recovers (RocksDB
                # replays the WAL, flushes it to a table, drops old logs) or just after
                s.start(wait=False)
                time.sleep(rnd.uniform(0.0, 0.5) * (2 if SANITIZER else 1))
                fs.cut()
                s.kill9()
                orders[-1] += ", cut in restart"
                acked, sent = load.snapshot()
                check_after_cut(s.inspect(), acked, sent, f"cut {cycle + 1} in the restart ({len(acked)} acked)")
            try:
                s.start()
            except AssertionError as e:
                raise AssertionError(f"{what}: the node does not start on what the cut left\n{e}")
            check_dedupe(s, load, rnd, what)
        time.sleep(0.5)
    finally:
        load.stop()
    assert not load.problems, load.problems[:5]
    acked, sent = load.snapshot()
    # the bodies themselves, through the admin API, for a sample
    sample = list(load.bodies.items())
    for hid, body in rnd.sample(sample, min(200, len(sample))):
        h = s.hook(hid)
        assert h.get("body_encoding") == "base64", h
        assert base64.b64decode(h["body"]) == body, f"hook {hid}: body differs from what was acked"
    assert s.stop() == 0, s.log_tail()
    check_after_cut(s.inspect(), acked, sent, "after the clean stop")
    assert s.starts == CUTS + 1 + sum(o.endswith("cut in restart") for o in orders)
    min_acked = 30 * CUTS if SANITIZER else 100 * CUTS
    assert len(acked) >= min_acked, f"only {len(acked)} hooks acked; the drill did not load the node"
    assert len(load.keyed) >= 20, f"only {len(load.keyed)} events acked on the dedupe source"
    n_torn = sum(o.startswith("kill+torn") for o in orders)
    n_restart = sum(o.endswith("cut in restart") for o in orders)
    print(f"powerloss: {CUTS} cycles ({sum(o.startswith('kill+cut') for o in orders)} kill+cut, "
          f"{n_torn} kill+torn cut, {sum(o.startswith('cut+kill') for o in orders)} cut+kill; "
          f"{n_restart} more cuts in the restart after) "
          f"in {time.monotonic() - t0:.1f}s, acked={len(acked)} (with an event key {len(load.keyed)}) "
          f"statuses={load.statuses} "
          f"client errors={load.errors}; node exited by itself after {len(self_exits)} "
          f"running cuts {self_exits}; {fs.command('stats')}")


def test_the_drill_sees_acks_that_were_not_synced(powerfs, ankusa):
    """The drill's own control: a test build told to commit without fsync
    (ANKUSA_TEST_COMMIT_MODE=nosync, what bench/ingest_ceiling.sh measures) acks hooks a
    power cut takes away, and the drill's check must say so. Without this, a powerfs that
    kept everything would let the drill pass."""
    fs = powerfs()
    s = ankusa(data_dir=fs.mnt / "data", env={"ANKUSA_TEST_COMMIT_MODE": "nosync"})
    load = Load(s.http_port, threads=4).start()
    try:
        time.sleep(1.0)
        s.kill9()
        fs.cut()
    finally:
        load.stop()
    acked, sent = load.snapshot()
    assert len(acked) >= 50, f"only {len(acked)} hooks acked; nothing to lose"
    with pytest.raises(AssertionError, match="acked hooks are gone"):
        check_after_cut(s.inspect(), acked, sent, "nosync")
