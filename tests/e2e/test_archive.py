"""The archive (issue 21): the compactor moves committed hooks into immutable segments on
the blob store (LocalFS here; S3 and GCS have their own tests), catalogues them, and
reclaim deletes a hook only once it is both delivered and archived. Every hook stays
readable by id, from the store or from the archive, byte for byte.

Black-box: the node's HTTP APIs, `ankusa inspect segments|hook`, the files under
<data_dir>/default/segments, and kill -9.
"""
import base64
import json
import os
import random
import shutil
import threading
import time

import pytest

from helpers import LOOPBACK, SLOW, http_request, post_many, sha256_hex, wait_until
from receiver import Receiver
from test_cursor_kills import Poster, delivered_ok, kill_and_restart, stored

KILLS = int(os.environ.get("ANKUSA_ARCHIVE_KILLS") or 10)


def all_delivered(rx, acked):
    """Every id of acked (id -> sha256) answered 2xx with that body (one pass over the
    receiver's deliveries)."""
    got = delivered_ok(rx)
    return all(sha in got.get(i, ()) for i, sha in acked.items())


def archive_cfg(**storage):
    c = dict(LOOPBACK)
    s = {"roll_ms": 200, "interval_ms": 50}
    s.update(storage)
    c["storage"] = s
    c["dispatch"] = {"retry": {"base_ms": 20, "max_ms": 200, "max_attempts": 100000, "jitter": False},
                     "breaker_failures": 0}
    return c


def segments(node):
    """The catalogue rows (`ankusa inspect segments`, read-only beside the running node)."""
    from helpers import run_cli
    r = run_cli("inspect", "segments", "--config", str(node.config_path))
    assert r.returncode == 0, r.stderr
    return [json.loads(line) for line in r.stdout.splitlines() if line.strip()]


def check_catalogue(node, rows):
    """No seq in two rows, and every row's objects exist under the LocalFS root."""
    rows = sorted(rows, key=lambda r: r["first_seq"])
    for a, b in zip(rows, rows[1:]):
        assert a["last_seq"] < b["first_seq"], f"seq ranges overlap: {a} and {b}"
    root = node.data_dir / "default" / "segments"
    for r in rows:
        assert r["count"] >= 1 and r["first_seq"] <= r["last_seq"]
        for k in ("segment", "index"):
            p = root / r[k]
            assert p.is_file(), f"catalogued {k} {r[k]} is not on disk"
        assert (root / r["segment"]).stat().st_size == r["bytes"]


def hook_sha(node, hook_id):
    r = node.admin(f"/v1/hooks/{hook_id}")
    if r.status != 200:
        return r.status, r.json.get("error") if r.body else None
    j = r.json
    body = base64.b64decode(j["body"])
    assert sha256_hex(body) == j["sha256"]
    return 200, j["sha256"]


def wait_archived_and_reclaimed(node, timeout, what):
    """Until nothing waits for the archive and the store holds no hook."""
    def done():
        m = node.metrics()
        return m.value("ankusa_queue_archive_pending", instance="default") == 0 and not stored(node)
    wait_until(done, timeout=timeout * SLOW, what=what)


def test_default_roles_archive_reclaim_and_read_back(ankusa):
    """With the default roles and LocalFS: every delivered hook leaves the store, is in a
    catalogued segment, and reads back by id byte-identical (the admin API and `ankusa
    inspect hook`); the node-day manifest lists the segments; the metrics count them."""
    rx = Receiver()
    try:
        node = ankusa(config=archive_cfg(roll_bytes=65536),
                      sources={"s": {"tenant": "t1", "sinks": [{"type": "http", "url": rx.url}]}})
        bodies = [f"hook-{i}-".encode() + os.urandom(random.randint(10, 3000)) for i in range(1500)]
        res = post_many(node.http_port, bodies, path="/webhooks/s")
        acked = {}
        for body, r in res:
            assert not isinstance(r, Exception) and r.status == 201, r
            acked[r.json["id"]] = sha256_hex(body)
        wait_until(lambda: all_delivered(rx, acked),
                   timeout=30 * SLOW, what="every hook delivered")
        wait_archived_and_reclaimed(node, 30, "every hook archived and reclaimed")
        rows = segments(node)
        check_catalogue(node, rows)
        assert sum(r["count"] for r in rows) == len(acked)
        assert len(rows) >= 2, "roll_bytes 64 KiB over ~2 MB of hooks must cut several segments"
        m = node.metrics()
        assert m.value("ankusa_compact_records_total", instance="default") == len(acked)
        assert m.value("ankusa_compact_bytes_total", instance="default") == sum(r["bytes"] for r in rows)
        assert m.value("ankusa_blob_request_duration_seconds_count", instance="default", store="local",
                       op="put") >= 2 * len(rows)
        # every hook reads back from the archive, byte for byte
        for hid, sha in acked.items():
            assert hook_sha(node, hid) == (200, sha), hid
        # and through the CLI beside the running node
        from helpers import run_cli
        hid = next(iter(acked))
        r = run_cli("inspect", "hook", hid, "--config", str(node.config_path))
        assert r.returncode == 0, r.stderr
        j = json.loads(r.stdout)
        assert j["from"] == "archive" and j["sha256"] == acked[hid]
        # the manifest of the day lists exactly the catalogued segments
        mans = list((node.data_dir / "default" / "segments").rglob("_manifest.json"))
        assert mans, "no node-day manifest written"
        listed = set()
        for p in mans:
            man = json.loads(p.read_text())
            assert man["version"] == 1 and man["node"].startswith("node-")
            listed |= {(s["first_seq"], s["last_seq"]) for s in man["segments"]}
        assert listed == {(r["first_seq"], r["last_seq"]) for r in rows}
        # an unknown id is 404 hook_not_found, not an error
        r = node.admin("/v1/hooks/01890a5d-ac96-774b-bcce-b302099a8057")
        assert r.status == 404 and r.json["error"] == "hook_not_found"
    finally:
        rx.close()


def test_blob_store_outage_keeps_acking_and_catches_up(ankusa):
    """The archive's directory replaced by a file (every PUT fails): ingest keeps answering
    201, deliveries go on, nothing is reclaimed (the hooks are not archived), the failures
    are counted; once the directory is back the compactor catches up and reclaim follows."""
    rx = Receiver()
    try:
        node = ankusa(config=archive_cfg(),
                      sources={"s": {"tenant": "t1", "sinks": [{"type": "http", "url": rx.url}]}})
        root = node.data_dir / "default" / "segments"
        first = post_many(node.http_port, [b"before-%d" % i for i in range(50)], path="/webhooks/s")
        assert all(r.status == 201 for _, r in first)
        wait_archived_and_reclaimed(node, 20, "the first hooks archived")
        arch = root / "archive"
        shutil.move(str(arch), str(root / "archive.away"))
        arch.write_text("not a directory")
        res = post_many(node.http_port, [b"during-%d" % i for i in range(300)], path="/webhooks/s")
        assert all(not isinstance(r, Exception) and r.status == 201 for _, r in res), \
            "ingest must keep acking while the blob store is down"
        ids = {r.json["id"] for _, r in res}
        wait_until(lambda: ids <= set(delivered_ok(rx)), timeout=20 * SLOW, what="deliveries during the outage")
        wait_until(lambda: node.metrics().value("ankusa_compact_failures_total", instance="default",
                                                stage="segment") >= 2,
                   timeout=20 * SLOW, what="segment failures counted")
        time.sleep(0.5)
        held = set(stored(node))
        assert ids <= held, "hooks not archived were reclaimed during the outage"
        assert node.metrics().value("ankusa_queue_archive_pending", instance="default") >= len(ids)
        arch.unlink()
        shutil.move(str(root / "archive.away"), str(arch))
        wait_archived_and_reclaimed(node, 90, "the compactor caught up after the outage")
        for hid in list(ids)[:50]:
            assert hook_sha(node, hid)[0] == 200
        check_catalogue(node, segments(node))
    finally:
        rx.close()


class ReadChecker:
    """Reads random acked hooks by id while the test runs: a hook is in the store or in the
    archive at every moment, so any 404 is a hook reclaimed before it was archived (or a
    read that cannot find an archived one)."""

    def __init__(self, node, poster):
        self.node, self.poster = node, poster
        self.bad, self.reads = [], 0
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.t.start()
        return self

    def stop(self):
        self.stop_ev.set()
        self.t.join(30)

    def _run(self):
        rnd = random.Random()
        while not self.stop_ev.is_set():
            snap = self.poster.snapshot()
            if not snap:
                time.sleep(0.05)
                continue
            hid = rnd.choice(list(snap))
            try:
                r = http_request(self.node.admin_port, "GET", f"/v1/hooks/{hid}", timeout=5.0)
            except Exception:  # noqa: BLE001 - the node is down (killed)
                time.sleep(0.05)
                continue
            self.reads += 1
            if r.status == 404:
                self.bad.append((hid, r.body[:200]))
            elif r.status == 200 and r.json.get("sha256") != snap[hid][1]:
                self.bad.append((hid, "wrong body"))
            time.sleep(0.01)


def test_kill_during_compaction(ankusa):
    """KILLS kill -9s at random moments while hooks are posted, delivered, archived in small
    segments and reclaimed. Asserts: every acked hook is delivered and, at the end, readable
    by id byte-identical from the archive; no seq is in two catalogue rows; at no moment was
    an acked hook unreadable (a reader polls random ids throughout); the store ends empty."""
    rx = Receiver()
    poster = checker = None
    try:
        node = ankusa(config=archive_cfg(roll_bytes=32768, roll_ms=100, interval_ms=20),
                      sources={"s": {"tenant": "t1", "sinks": [{"type": "http", "url": rx.url}]}})
        poster = Poster(node.http_port, ["s"], threads_per_source=3).start()
        checker = ReadChecker(node, poster).start()
        rnd = random.Random()
        kills = []
        time.sleep(1.0)
        for _ in range(KILLS):
            time.sleep(rnd.uniform(0.3, 0.9))
            kill_and_restart(node, kills)
        time.sleep(1.0)
        poster.stop()
        assert not poster.problems, "\n".join(poster.problems[:10])
        acked = {i: sha for i, (_, sha, _) in poster.snapshot().items()}
        assert len(acked) > 200, f"only {len(acked)} hooks acked: the load did not run"
        wait_until(lambda: all_delivered(rx, acked),
                   timeout=60 * SLOW, what="every acked hook delivered")
        wait_archived_and_reclaimed(node, 60, "every hook archived and reclaimed after the kills")
        checker.stop()
        assert not checker.bad, f"acked hooks unreadable during the run: {checker.bad[:5]}"
        assert checker.reads > 50, f"the reader made only {checker.reads} reads"
        rows = segments(node)
        check_catalogue(node, rows)
        missing = [i for i, sha in acked.items() if hook_sha(node, i) != (200, sha)]
        assert not missing, f"{len(missing)} acked hooks not readable byte-identical, e.g. {missing[:5]}"
        print(f"\narchive kills: {len(acked)} acked, {len(rows)} segments, {checker.reads} reads during the run")
    finally:
        if poster:
            poster.stop()
        if checker:
            checker.stop()
        rx.close()


def test_retention_deletes_old_segments_and_answers_expired(ankusa):
    """archive.retention_days with a test day of 3 s: segments whose newest hook is older
    are deleted (objects, manifest entry, catalogue row) and a fetch answers 404 expired;
    newer ones stay readable. retention_days above storage.catalogue_retention_days is a
    config error."""
    node = ankusa(config=dict(archive_cfg(), archive={"retention_days": 1}),
                  env={"ANKUSA_TEST_ARCHIVE_DAY_MS": "3000"})
    old = post_many(node.http_port, [b"old-%d" % i for i in range(20)])
    old_ids = [r.json["id"] for _, r in old]
    wait_archived_and_reclaimed(node, 20, "the old hooks archived")
    assert hook_sha(node, old_ids[0])[0] == 200
    wait_until(lambda: node.admin(f"/v1/hooks/{old_ids[0]}").status == 404, timeout=20 * SLOW,
               what="the old segment expired")
    r = node.admin(f"/v1/hooks/{old_ids[1]}")
    assert r.status == 404 and r.json["error"] == "expired"
    new = post_many(node.http_port, [b"new-%d" % i for i in range(5)])
    wait_archived_and_reclaimed(node, 20, "the new hooks archived")
    assert hook_sha(node, new[0][1].json["id"])[0] == 200
    root = node.data_dir / "default" / "segments"
    files = [p.name for p in root.rglob("seg-*")]
    rows = segments(node)
    assert all(r["min_received_at"] > 0 for r in rows)
    assert len(files) == 2 * len(rows), f"objects of expired segments left behind: {files} vs {rows}"
    assert node.metrics().value("ankusa_compact_failures_total", instance="default", stage="retention") == 0


def test_retention_bound_is_checked(ankusa):
    node = ankusa(config={"archive": {"retention_days": 10}, "storage": {"catalogue_retention_days": 5}},
                  start=False)
    from helpers import run_cli
    r = run_cli("check-config", "--config", str(node.config_path))
    assert r.returncode == 78
    assert "archive.retention_days must be at most storage.catalogue_retention_days (5), got 10" in r.stderr


@pytest.mark.slow
def test_200k_hooks_leave_the_store_and_stay_readable(ankusa):
    """The issue's proof at scale: 200,000 hooks in two halves (`make drill`; 50,000 in
    `make test`, ANKUSA_ARCHIVE_PROOF_HOOKS), default roles, LocalFS. After
    each half is delivered, the store's hook count returns to zero (everything archived and
    reclaimed) and the store's disk use does not grow with the second half as the archive
    does; every hook is readable, byte-identical (all of them through `ankusa inspect hooks
    --archive`, 2,000 random ones through GET /v1/hooks/{id})."""
    n_half = int(os.environ.get("ANKUSA_ARCHIVE_PROOF_HOOKS") or 50_000) // 2
    node = ankusa(config=archive_cfg(roll_ms=1000, interval_ms=200))
    acked, sizes = {}, []
    for half in range(2):
        bodies = [f"proof-{half}-{i}-".encode() + os.urandom(64 + i % 400) for i in range(n_half)]
        for body, r in post_many(node.http_port, bodies, workers=48):
            assert not isinstance(r, Exception) and r.status == 201, r
            acked[r.json["id"]] = sha256_hex(body)

        def drained():
            m = node.metrics()
            return (m.value("ankusa_store_hooks", instance="default") == 0
                    and m.value("ankusa_queue_archive_pending", instance="default") == 0)
        wait_until(drained, timeout=180 * SLOW, what=f"half {half}: archived and reclaimed")
        time.sleep(2)
        files = list(node.store_dir.iterdir())
        wal = sum(p.stat().st_size for p in files if p.suffix == ".log")
        data = sum(p.stat().st_size for p in files if p.suffix != ".log" and p.is_file())
        arch = sum(p.stat().st_size for p in (node.data_dir / "default" / "segments").rglob("*.seg"))
        sizes.append((data, wal, arch))
    (data1, wal1, arch1), (data2, wal2, arch2) = sizes
    print(f"\n200k proof: store tables {data1 / 1e6:.1f} -> {data2 / 1e6:.1f} MB, WAL {wal1 / 1e6:.1f} -> "
          f"{wal2 / 1e6:.1f} MB, archive {arch1 / 1e6:.1f} -> {arch2 / 1e6:.1f} MB")
    assert arch2 > 1.8 * arch1, "the archive must hold both halves"
    # the store keeps what is in flight, not the history: its tables hold no hooks once
    # they are archived and reclaimed (a few MB of markers and tombstones until RocksDB
    # compacts them), and its WAL is bounded by max_total_wal_size (128 MiB, docs/storage.md)
    # whatever the history: disk use stops growing while the archive grows
    assert data2 < 16e6 and data2 < 0.2 * arch2, f"store tables hold {data2} bytes after both halves"
    assert wal2 <= 160 * 2**20, f"the WAL is {wal2} bytes, past its 128 MiB cap"
    listed = {h["id"]: h["sha256"] for h in node.inspect()}
    missing = [i for i, sha in acked.items() if listed.get(i) != sha]
    assert not missing, f"{len(missing)} hooks not readable byte-identical, e.g. {missing[:5]}"
    for hid in random.sample(sorted(acked), 2000):
        assert hook_sha(node, hid) == (200, acked[hid]), hid
