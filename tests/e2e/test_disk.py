"""Full disk: the data dir lives on a small tmpfs that the test fills. Requests must get
503 (never a 201 for a hook that is not stored), /ready must say 503, and once space is
freed ingest must recover inside the same process."""
import errno
import os
import subprocess
import time

import pytest

from helpers import http_request, sha256_hex

pytestmark = pytest.mark.slow

TMPFS_MB = 64


@pytest.fixture
def tmpfs_dir(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("full-disk test needs root to mount a tmpfs (run as root)")
    mnt = tmp_path / "smallfs"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {p.stderr.strip()}")
    yield mnt
    p = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
    if p.returncode != 0:  # a process still holds it: detach now, the kernel frees it later
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(path):
    """Write `path` until the filesystem is full; returns bytes written."""
    n = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 9):
            chunk = b"\xa5" * size
            while True:
                try:
                    w = os.write(fd, chunk)
                except OSError as e:
                    if e.errno == errno.ENOSPC:
                        break
                    raise
                n += w
                if w < size:
                    break
        os.fsync(fd)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return n


def post_or_explain(s, body, acked):
    """POST; if the connection breaks, fail saying whether the node died (and how), and
    whether the hooks acked so far survived."""
    try:
        return s.post("/webhooks/demo", body, timeout=60)
    except OSError as e:
        rc = s.wait_exit(3)
        if rc is not None:
            try:
                stored = {h["id"]: h["sha256"] for h in s.inspect()}
                lost = [i for i in acked if stored.get(i) != acked[i]]
                verdict = (f"{len(lost)} of {len(acked)} acked hooks missing" if lost
                           else f"all {len(acked)} acked hooks are in the store")
            except AssertionError as ie:
                verdict = f"inspect failed: {ie}"
            pytest.fail(f"the node died on a full disk (exit code {rc}) instead of answering 503; "
                        f"client saw {e!r}; {verdict}\n{s.log_tail(30)}", pytrace=False)
        pytest.fail(f"connection broke without an answer while the node kept running: {e!r}", pytrace=False)


def test_full_disk_503_then_recovers_without_restart(tmpfs_dir, ankusa):
    # node.min_free_bytes is the guard that keeps RocksDB from ever meeting ENOSPC (Debian's
    # build aborts on a failed WAL append); 8 MiB of a 64 MiB volume leaves room to fill.
    s = ankusa(data_dir=tmpfs_dir / "data", config={"node": {"min_free_bytes": 8 << 20}})
    pid = s.pid
    acked = {}
    for i in range(20):
        body = b"before-full-%d" % i
        r = s.post("/webhooks/demo", body)
        assert r.status == 201, r
        acked[r.json["id"]] = sha256_hex(body)
    filler = tmpfs_dir / "filler"
    filled = fill(filler)
    st = os.statvfs(tmpfs_dir)
    print(f"filler {filled >> 20} MiB, free after fill {st.f_bavail * st.f_frsize} bytes")

    # keep sending until the store refuses; early writes may still land (preallocated WAL)
    got_503 = None
    sent_bytes = 0
    i = 0
    deadline = time.monotonic() + 120
    while got_503 is None and time.monotonic() < deadline and sent_bytes < 4 * TMPFS_MB << 20:
        i += 1
        body = (b"full-%d-" % i) + os.urandom(16384 + (i * 7919) % 49152)
        sent_bytes += len(body)
        r = post_or_explain(s, body, acked)
        if r.status == 201:
            acked[r.json["id"]] = sha256_hex(body)
        else:
            assert r.status == 503, r
            assert r.json == {"error": "store_unavailable"}, r
            assert r.headers.get("retry-after"), r.headers
            got_503 = r
    assert got_503 is not None, (f"no 503 after {i} requests / {sent_bytes >> 20} MiB on a full "
                                 f"{TMPFS_MB} MiB filesystem\n{s.log_tail()}")
    print(f"first 503 after {i} requests ({len(acked)} acked)")

    # while full: /ready says 503 on both ports, ingest keeps refusing
    for port in (s.http_port, s.admin_port):
        r = http_request(port, "GET", "/ready")
        assert r.status == 503, f"/ready on {port} while the disk is full: {r!r}"
        assert r.headers.get("retry-after"), r.headers
    for k in range(5):
        body = b"still-full-%d-" % k + os.urandom(20000)
        r = post_or_explain(s, body, acked)
        if r.status == 201:  # a reopen may succeed on freed WAL space; the ack must then be true
            acked[r.json["id"]] = sha256_hex(body)
        else:
            assert r.status == 503, r

    m = s.metrics()
    fails = {dict(l)["class"]: v for l, v in m.series("ankusa_store_write_failures_total").items()}
    print(f"write failures by class: {fails}")
    assert fails.get("no_space", 0) > 0, f"no_space not counted; failures by class: {fails}"

    os.unlink(filler)
    t_free = time.monotonic()
    recovered = None
    while time.monotonic() - t_free < 30:
        body = b"after-free-" + os.urandom(1000)
        r = post_or_explain(s, body, acked)
        if r.status == 201:
            acked[r.json["id"]] = sha256_hex(body)
            recovered = time.monotonic() - t_free
            break
        assert r.status == 503, r
        time.sleep(0.25)
    assert recovered is not None, f"ingest did not recover within 30 s of freeing space\n{s.log_tail()}"
    assert s.running() and s.pid == pid, "the node was restarted"
    print(f"recovered {recovered:.1f}s after freeing space")
    r = s.get("/ready")
    assert r.status in (200, 503), r  # may still be in its short post-failure window
    deadline = time.monotonic() + 15
    while s.get("/ready").status != 200 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert s.get("/ready").status == 200, "/ready did not return to 200 after recovery"
    for k in range(10):
        body = b"recovered-%d" % k
        r = s.post("/webhooks/demo", body)
        assert r.status == 201, r
        acked[r.json["id"]] = sha256_hex(body)

    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    missing = [i for i in acked if stored.get(i) != acked[i]]
    assert not missing, f"{len(missing)} hooks got 201 but are not stored intact: {missing[:3]}"
    assert s.stop() == 0
    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    missing = [i for i in acked if stored.get(i) != acked[i]]
    assert not missing, f"after a clean stop, {len(missing)} acked hooks are missing: {missing[:3]}"
