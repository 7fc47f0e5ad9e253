"""A damaged store: never "start empty". Missing CURRENT and corruption before the WAL
tail refuse to start; a torn WAL tail (the last, unacknowledged write) is dropped."""
import os
import shutil
import subprocess

import pytest

from helpers import BIN, READY_TIMEOUT, clean_env, sha256_hex


def snapshot(d):
    """{relative path: sha256} of every file under d, except RocksDB's info logs (LOG*),
    which any open attempt may rotate."""
    out = {}
    for root, _, files in os.walk(d):
        for f in files:
            if f == "LOG" or f.startswith("LOG.old"):
                continue
            p = os.path.join(root, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, d)] = sha256_hex(fh.read())
    return out


def wal_files(store):
    logs = sorted((p for p in store.iterdir() if p.suffix == ".log" and p.stem.isdigit()),
                  key=lambda p: int(p.stem))
    return logs


def fill_sequentially(s, n, prefix=b"h"):
    """n hooks one after another (one commit each); returns [(id, sha)] in order."""
    out = []
    for i in range(n):
        body = prefix + b"-%d-" % i + os.urandom(40)
        r = s.post("/webhooks/demo", body)
        assert r.status == 201, r
        out.append((r.json["id"], sha256_hex(body)))
    return out


def expect_refusal(s, timeout=READY_TIMEOUT):
    s.start(wait=False)
    rc = s.wait_exit(timeout)
    if rc is None:
        pytest.fail(f"the node started on a damaged store instead of refusing\n{s.log_tail()}")
    assert rc != 0, f"refused with exit code 0\n{s.log_tail()}"
    return rc


def test_missing_current_refuses_and_leaves_files(ankusa, tmp_path):
    s = ankusa()
    acked = fill_sequentially(s, 50)
    assert s.stop() == 0
    store = s.store_dir
    current = store / "CURRENT"
    assert current.exists(), sorted(os.listdir(store))
    saved = tmp_path / "CURRENT.saved"
    shutil.move(current, saved)
    before = snapshot(store)
    assert any(n.endswith((".log", ".sst")) or n.startswith("MANIFEST-") for n in before), before

    expect_refusal(s)
    assert "CURRENT" in s.log_text().split("----- start #2", 1)[1], s.log_tail()
    after = snapshot(store)
    assert after == before, (f"store files changed by the refused start: added "
                             f"{sorted(set(after) - set(before))}, removed {sorted(set(before) - set(after))}, "
                             f"changed {sorted(k for k in before if k in after and before[k] != after[k])}")

    # putting CURRENT back gives back every hook: the refusal protected real data
    shutil.move(saved, current)
    s.start()
    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    assert all(stored.get(i) == sha for i, sha in acked), "hooks lost after restoring CURRENT"


def test_torn_wal_tail_is_dropped(ankusa):
    s = ankusa()
    acked = fill_sequentially(s, 100)
    s.kill9()
    logs = wal_files(s.store_dir)
    assert logs, f"no WAL file in {sorted(os.listdir(s.store_dir))}"
    newest = logs[-1]
    size = newest.stat().st_size
    assert size > 100, f"newest WAL {newest.name} is only {size} bytes"
    os.truncate(newest, size - 5)

    s.start()
    stored = {h["id"]: h["sha256"] for h in s.inspect()}
    must = acked[:-1]
    lost = [i for i, sha in must if stored.get(i) != sha]
    assert not lost, f"{len(lost)} hooks before the torn tail were lost, e.g. {lost[:3]}"
    assert len(stored) in (len(acked) - 1, len(acked)), f"stored {len(stored)} of {len(acked)}"
    print(f"torn tail: {len(stored)} of {len(acked)} hooks after truncating {newest.name} by 5 bytes")
    # and the node keeps working on top of the recovered store
    r = s.post("/webhooks/demo", b"after-torn-tail")
    assert r.status == 201, r
    seqs = [h["seq"] for h in s.inspect()]
    assert len(seqs) == len(set(seqs))


def test_wal_corruption_before_tail_refuses(ankusa):
    s = ankusa()
    fill_sequentially(s, 200)
    s.kill9()
    newest = wal_files(s.store_dir)[-1]
    data = bytearray(newest.read_bytes())
    assert len(data) > 4096, f"newest WAL only {len(data)} bytes"
    mid = len(data) // 2
    for k in range(mid, mid + 16):
        data[k] ^= 0x5A
    newest.write_bytes(bytes(data))
    before = snapshot(s.store_dir)

    expect_refusal(s)
    log = s.log_text().split("----- start #2", 1)[1]
    assert "store" in log.lower() and ("corrupt" in log.lower() or "checksum" in log.lower()), log
    assert snapshot(s.store_dir) == before, "the refused start modified the store"
    # the read-only inspector must not pretend the store is fine either
    p = subprocess.run([BIN, "inspect", "hooks", "--data-dir", str(s.data_dir)], capture_output=True,
                       text=True, env=clean_env(), timeout=60)
    assert p.returncode != 0, f"inspect exited 0 on a corrupted WAL and listed {len(p.stdout.splitlines())} hooks"
    assert "corrupt" in p.stderr.lower() or "checksum" in p.stderr.lower(), p.stderr
    assert snapshot(s.store_dir) == before, "inspect modified the store"
