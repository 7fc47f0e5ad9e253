"""Backups and restore (issue 24, docs/backup.md): checkpoints of the store uploaded to a
LocalFS and an S3 store (s3rver behind the signature-checking proxy), a signed manifest read
back, the owner guard, retention, the last backup on a clean stop, and restore at boot into
a wiped data dir, or a refusal to start that names the file and the reason."""
import json
import os
import shutil
import threading
import time
from pathlib import Path

import pytest

from helpers import LOOPBACK, SLOW, http_request, post_many, run_cli, sha256_hex, wait_until
from receiver import Receiver
from test_cursor_kills import delivered_ok
from test_blob_s3 import BUCKET, KEY, REGION, SECRET, proxy, s3rver, verdicts  # noqa: F401 - fixtures

SIGNING_KEY = "backup-signing-key-of-the-tests-0123456789"
OTHER_KEY = "another-signing-key-0123456789abcdefghij"


def local(root):
    return {"type": "local", "root": str(root)}


def s3(p, bucket=BUCKET, secret=SECRET):
    return {"type": "s3", "s3": {"bucket": bucket, "region": REGION, "endpoint": f"http://127.0.0.1:{p.port}",
                                 "access_key_id": KEY, "secret_access_key": secret}}


def backup_cfg(primary, secondary=None, interval_ms=300, **more):
    b = {"enabled": True, "interval_ms": interval_ms, "keep": 2, "signing_key": SIGNING_KEY, "store": primary,
         "verify_interval_ms": 0}
    if secondary is not None:
        b["secondary"] = secondary
    b.update(more)
    return b


def taken(node, target="primary"):
    return node.log_text().count(f'msg="backup taken" target={target} ')


def wait_backups(node, n, target="primary", timeout=30):
    """Until n more backups were taken on target than now."""
    base = taken(node, target)
    wait_until(lambda: taken(node, target) >= base + n, timeout=timeout, what=f"{n} backups on {target}")


def latest(root):
    return json.loads((Path(root) / "backup" / "LATEST").read_text())


def manifest(root, bid=None):
    bid = bid or latest(root)["id"]
    return json.loads((Path(root) / "backup" / bid / "manifest.json").read_text())


def post_acked(node, n, tag, path="/webhooks/demo"):
    """n hooks, every one answered 201: {id: (sha256, ack wall ms)}."""
    res = post_many(node.http_port, [f"{tag}-{i}-".encode() * (1 + i % 50) for i in range(n)], path=path)
    out = {}
    for body, r in res:
        assert not isinstance(r, Exception) and r.status == 201, r
        out[r.json["id"]] = (sha256_hex(body), time.time() * 1000)
    return out


def flip_byte(path, at=None):
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if at is None else at
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def stored_sha(node, hid):
    r = node.admin(f"/v1/hooks/{hid}")
    return r.json["sha256"] if r.status == 200 else None


def start_refused(node):
    """Start a node that must refuse: its exit code and its log."""
    node.start(wait=False)
    rc = node.wait_exit(30 * SLOW)
    assert rc is not None, f"the node did not exit\n{node.log_tail()}"
    node.exit_codes.append(rc)
    return rc, node.log_text()


class ReadyPoller:
    """GET /ready every 20 ms: every answer must be 200 (a checkpoint never fails it)."""

    def __init__(self, node):
        self.node, self.bad, self.n = node, [], 0
        self.stop_ev = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_ev.is_set():
            try:
                r = http_request(self.node.http_port, "GET", "/ready", timeout=5)
                self.n += 1
                if r.status != 200:
                    self.bad.append(r.status)
            except OSError as e:
                self.bad.append(repr(e))
            time.sleep(0.02)

    def stop(self):
        self.stop_ev.set()
        self.t.join(10)


# ------------------------------------------------------------------------- config ----

@pytest.mark.parametrize("section,env,line", [
    ("backup: {enabled: true}\n", {},
     "  backup.signing_key: required when backup.enabled is true (the manifests are signed; 32 random bytes or "
     "more, e.g. `openssl rand -base64 32`)"),
    ("", {"ANKUSA_BACKUP_ENABLED": "TRUE"},
     "  backup.signing_key: required when backup.enabled is true (the manifests are signed; 32 random bytes or "
     "more, e.g. `openssl rand -base64 32`)"),
    ("backup: {enabled: true, signing_key: short}\n", {},
     "  backup.signing_key: must have at least 32 characters"),
    ("backup: {enabled: true, signing_key: " + SIGNING_KEY + ", secondary: {type: s3, s3: {region: x}}}\n", {},
     "  backup.secondary.s3.bucket: required when backup.secondary.type is s3"),
], ids=["no-key", "env-no-key", "short-key", "secondary-no-bucket"])
def test_backup_config_refused_naming_the_key(tmp_path, section, env, line):
    cfg = tmp_path / "c.yml"
    cfg.write_text("node: {data_dir: " + str(tmp_path / "d") + "}\nsources:\n  demo:\n    sinks: [{type: log}]\n"
                   + section)
    p = run_cli("check-config", "--config", cfg, env=env)
    assert p.returncode == 78, p.stderr
    assert p.stderr.splitlines() == ["ankusa: invalid configuration", line], p.stderr


def test_signing_key_never_printed(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text("node: {data_dir: " + str(tmp_path / "d") + "}\nsources:\n  demo:\n    sinks: [{type: log}]\n"
                   f"backup: {{enabled: true, signing_key: {SIGNING_KEY}, store: {{type: local, root: {tmp_path}/b}}}}\n")
    p = run_cli("print-config", "--config", cfg)
    assert p.returncode == 0, p.stderr
    assert SIGNING_KEY not in p.stdout and SIGNING_KEY not in p.stderr
    assert json.loads(p.stdout)["backup"]["enabled"] is True


# -------------------------------------------------------------------- the drill ----

def test_drill_kill9_wipe_restore_then_clean_stop(ankusa, proxy):
    """Backups every second to LocalFS and S3 under load; SIGKILL after a backup; the data
    dir wiped; the node restores: every hook acked before that backup's created_at is there,
    byte-identical; the pending deliveries resume; hooks archived after the backup are
    catalogued again (the archive lives on S3); /ready never failed during a checkpoint.
    Then a clean SIGTERM takes a last backup: wiped again, every acked hook is there."""
    up = threading.Event()
    rx = Receiver(behavior=lambda d, n: (204, {}, 0) if up.is_set() else (503, {}, 0))
    node = ankusa(config=dict(LOOPBACK, **{
        "storage": {"type": "s3", "roll_ms": 200, "interval_ms": 50,
                    "s3": s3(proxy)["s3"]},
        "dispatch": {"retry": {"base_ms": 20, "max_ms": 100, "max_attempts": 1000000, "jitter": False},
                     "breaker_failures": 0},
    }), sources={"demo": {"sinks": [{"type": "http", "url": rx.url}]}}, start=False)
    primary = node.workdir / "backups"
    node.config["backup"] = backup_cfg(local(primary), s3(proxy), interval_ms=1500)
    node.write_config()
    node.start()
    poller = ReadyPoller(node)
    acked = {}
    stop_ev = threading.Event()

    def poster():
        k = 0
        while not stop_ev.is_set():
            acked.update(post_acked(node, 40, f"load{k}"))
            k += 1

    t = threading.Thread(target=poster, daemon=True)
    t.start()
    wait_backups(node, 2)
    stop_ev.set()
    t.join(30)
    # right after a backup: late hooks, archived to S3 before the kill
    wait_backups(node, 1)
    late = post_acked(node, 30, "late")
    # every hook is archived once: the counter reaches them all, the late ones included
    wait_until(lambda: node.metrics().value("ankusa_compact_records_total", instance="default")
               >= len(acked) + len(late), timeout=20, what="the late hooks archived")
    poller.stop()
    node.kill9()
    assert poller.n > 20 and not poller.bad, f"/ready failed during backups: {poller.bad[:5]}"
    bad_sig = [v for v in verdicts(proxy) if v != "ok"]
    assert not bad_sig, f"S3 requests the signature check refused: {bad_sig[:5]}"
    lt = latest(primary)
    cut = lt["created_at_ms"]
    before = {h: sha for h, (sha, ms) in acked.items() if ms < cut}
    late_after = [h for h, (sha, ms) in late.items() if ms > cut]
    assert len(before) > 100, (len(before), len(acked))
    assert late_after, "a backup ran between the late hooks and the kill: the reconcile proof did not bite"
    m = manifest(primary)
    assert m["store_id"] == lt["store_id"] and m["id"] == lt["id"]
    # retention: at most `keep` complete backups; every shared file a kept manifest lists
    ids = [p.name for p in (primary / "backup").iterdir() if (p / "manifest.json").exists()]
    assert 1 <= len(ids) <= 2, ids
    listed = {f["key"] for i in ids for f in manifest(primary, i)["files"] if f["kind"] == "shared"}
    have = {f"sst/{p.name}" for p in (primary / "backup" / "sst").iterdir()} if (primary / "backup" / "sst").exists() else set()
    assert have == listed, (have ^ listed)

    shutil.rmtree(node.data_dir)
    node.start()
    log = node.log_text()
    assert f'msg="store restored from a backup: hooks acked after it are not in it"' in log
    assert f"backup_id={lt['id']}" in log and "from=primary" in log
    bad = [h for h, sha in before.items() if stored_sha(node, h) != sha]
    assert not bad, f"{len(bad)} of {len(before)} hooks acked before the backup are missing or differ: {bad[:3]}"
    # the archive reconcile: the late hooks are not in the restored store, but readable
    for h in late_after:
        assert stored_sha(node, h) == late[h][0], h
    # delivery state resumes: every restored hook is delivered once the receiver is back
    up.set()
    def all_delivered():
        got = delivered_ok(rx)
        return all(sha in got.get(h, ()) for h, sha in before.items())
    wait_until(all_delivered, timeout=60, what="restored hooks delivered")

    # a clean stop takes a last backup: nothing acked is lost with the host
    more = post_acked(node, 60, "final")
    assert node.stop() == 0
    assert 'msg="clean stop: taking the last backup"' in node.log_text()
    shutil.rmtree(node.data_dir)
    node.start()
    assert node.metrics().value("ankusa_backup_age_seconds", instance="default") < 60
    assert node.stop() == 0
    # delivered hooks left the store for the archive: one pass over both
    hooks = {h["id"]: h["sha256"] for h in node.inspect()}
    bad = [h for h, (sha, _) in more.items() if hooks.get(h) != sha]
    assert not bad, f"hooks acked before SIGTERM lost: {bad[:3]}"
    assert not [h for h, sha in before.items() if hooks.get(h) != sha]
    rx.close()


# --------------------------------------------------------------- bad backups ----

@pytest.fixture
def backed_up(ankusa, tmp_path):
    """A node with 80 hooks, backed up on SIGTERM to two LocalFS stores; pristine copies of
    both kept to damage per case."""
    p, s = tmp_path / "p", tmp_path / "s"
    node = ankusa(config={"backup": backup_cfg(local(p), local(s), interval_ms=60000)})
    acked = post_acked(node, 80, "bk")
    assert node.stop() == 0
    keep = tmp_path / "pristine"
    shutil.copytree(p, keep / "p")
    shutil.copytree(s, keep / "s")

    def reset():
        for d, src in ((p, keep / "p"), (s, keep / "s")):
            shutil.rmtree(d, ignore_errors=True)
            shutil.copytree(src, d)
        shutil.rmtree(node.data_dir, ignore_errors=True)
    return node, acked, p, s, reset


def biggest(root):
    m = manifest(root)
    f = max(m["files"], key=lambda f: f["size"])
    return f, Path(root) / "backup" / f["key"]


def test_restore_outcomes(backed_up):
    node, acked, p, s, reset = backed_up
    one = next(iter(acked))

    # a flipped byte on the primary: restored from the secondary
    reset()
    f, path = biggest(p)
    flip_byte(path)
    node.start()
    log = node.log_text()
    assert 'msg="restored from the secondary store"' in log and "checksum_mismatch" in log, node.log_tail()
    assert "from=secondary" in log
    assert all(stored_sha(node, h) == sha for h, (sha, _) in acked.items())
    node.kill9()

    # the same byte on both: refused, naming the file and the reason; nothing starts empty
    reset()
    for root in (p, s):
        flip_byte(biggest(root)[1])
    rc, log = start_refused(node)
    assert rc != 0
    assert "store_restore_failed" in log and f"backup/{f['key']}" in log and "checksum_mismatch" in log, log[-2000:]
    assert not (node.store_dir / "CURRENT").exists()

    # a file missing on the primary: the secondary
    reset()
    biggest(p)[1].unlink()
    node.start()
    assert "is missing" in node.log_text() and "from=secondary" in node.log_text()
    node.kill9()

    # a wrong signing key: refused ("signature does not match") for both stores
    reset()
    node.config["backup"]["signing_key"] = OTHER_KEY
    node.write_config()
    rc, log = start_refused(node)
    assert rc != 0 and log.count("signature does not match") >= 2, log[-2000:]
    node.config["backup"]["signing_key"] = SIGNING_KEY
    node.write_config()

    # a truncated manifest (on both): refused
    reset()
    for root in (p, s):
        mp = root / "backup" / latest(root)["id"] / "manifest.json"
        mp.write_bytes(mp.read_bytes()[:-40])
    rc, log = start_refused(node)
    assert rc != 0 and "not a signed manifest" in log, log[-2000:]

    # store files without CURRENT (and no restore marker): refused, never deleted
    reset()
    node.store_dir.mkdir(parents=True)
    (node.store_dir / "000007.sst").write_bytes(b"x" * 100)
    rc, log = start_refused(node)
    assert rc != 0 and "unrecognized_store_files" in log and "000007.sst" in log, log[-2000:]
    assert (node.store_dir / "000007.sst").read_bytes() == b"x" * 100

    # an interrupted restore (the marker, a partial file): redone
    reset()
    node.store_dir.mkdir(parents=True)
    (node.store_dir / "RESTORE-IN-PROGRESS").write_bytes(b"")
    (node.store_dir / "000009.sst.ak-restore").write_bytes(b"partial")
    node.start()
    assert "an interrupted restore left files" in node.log_text()
    assert stored_sha(node, one) == acked[one][0]
    assert not (node.store_dir / "RESTORE-IN-PROGRESS").exists()
    node.kill9()

    # `ankusa restore --to DIR` for a drill, and `backup verify` / `backup list` by hand
    reset()
    r = run_cli("backup", "verify", "--config", node.config_path)
    assert r.returncode == 0 and r.stdout.count("verified: signature ok") == 2, r.stdout + r.stderr
    r = run_cli("backup", "list", "--config", node.config_path)
    assert r.returncode == 0 and latest(p)["id"] + " complete LATEST" in r.stdout, r.stdout
    drill = node.workdir / "drill"
    r = run_cli("restore", "--to", drill / "default" / "store", "--config", node.config_path)
    assert r.returncode == 0, r.stderr
    r = run_cli("inspect", "hooks", "--data-dir", drill)
    assert r.returncode == 0, r.stderr
    got = {json.loads(line)["id"]: json.loads(line)["sha256"] for line in r.stdout.splitlines()}
    assert got == {h: sha for h, (sha, _) in acked.items()}
    r = run_cli("restore", "--to", drill / "default" / "store", "--config", node.config_path)
    assert r.returncode == 1 and "is not empty" in r.stderr
    flip_byte(biggest(s)[1])
    r = run_cli("backup", "verify", "--config", node.config_path)
    assert r.returncode == 1 and "secondary: FAILED" in r.stdout and "checksum_mismatch" in r.stdout, r.stdout

    # a readable, empty location: a new node, started empty and said so
    reset()
    shutil.rmtree(p)
    shutil.rmtree(s)
    node.start()
    assert "a new node, starting with an empty store" in node.log_text()
    assert node.admin(f"/v1/hooks/{one}").status == 404
    node.kill9()


def test_unreadable_primary_uses_the_secondary_and_alone_refuses(ankusa, proxy, tmp_path):
    """S3 answering 403 to everything: with a good secondary the node restores from it;
    alone (or a bucket that does not exist) it refuses to start, never empty."""
    s = tmp_path / "s"
    node = ankusa(config={"backup": backup_cfg(s3(proxy), local(s), interval_ms=60000)})
    acked = post_acked(node, 30, "u")
    assert node.stop() == 0
    shutil.rmtree(node.data_dir)
    proxy.fail_always = 403
    try:
        node.start()
        log = node.log_text()
        assert "from=secondary" in log and "listing" in log, node.log_tail()
        assert all(stored_sha(node, h) == sha for h, (sha, _) in acked.items())
        node.kill9()
        shutil.rmtree(node.data_dir)
        del node.config["backup"]["secondary"]
        node.write_config()
        rc, log = start_refused(node)
        assert rc != 0 and "store_restore_failed" in log and "403" in log, log[-2000:]
    finally:
        proxy.fail_always = None
    node.config["backup"]["store"] = s3(proxy, bucket="no-such-bucket")
    node.write_config()
    rc, log = start_refused(node)
    assert rc != 0 and "store_restore_failed" in log, log[-2000:]
    assert not (node.store_dir / "CURRENT").exists()


def test_verify_failure_is_counted_logged_and_repaired(ankusa, tmp_path):
    """A damaged shared file is found by the read-back (counted, logged, naming it), deleted,
    and uploaded again by the next backup; the age gauge counts from the newest backup on
    the store, not from the restart."""
    p = tmp_path / "p"
    node = ankusa(config={"backup": backup_cfg(local(p), interval_ms=600000)})
    # more than the 16 MiB of WAL a checkpoint copies: the memtables are flushed to SSTs
    big = [os.urandom(512 * 1024) for _ in range(40)]
    for body, r in post_many(node.http_port, big, workers=4):
        assert not isinstance(r, Exception) and r.status == 201, r
    assert node.stop() == 0
    shared = [f for f in manifest(p)["files"] if f["kind"] == "shared"]
    assert shared, manifest(p)["files"]
    f = max(shared, key=lambda f: f["size"])
    flip_byte(p / "backup" / f["key"])
    time.sleep(1.5)
    node.config["backup"].update({"interval_ms": 2000, "verify_interval_ms": 200})
    node.write_config()
    node.start()
    assert node.metrics().value("ankusa_backup_age_seconds", instance="default") >= 1.0
    wait_until(lambda: node.metrics().value("ankusa_backup_verify_failed_total", instance="default",
                                            target="primary") >= 1, timeout=20, what="verify failure counted")
    log = node.log_text()
    assert "backup verify failed" in log and f"backup/{f['key']}" in log and "checksum_mismatch" in log
    assert "the damaged object was deleted" in log
    # the next backup puts it back, whole
    wait_until(lambda: (p / "backup" / f["key"]).exists() and
               sha256_hex((p / "backup" / f["key"]).read_bytes()) == f["sha256"], timeout=30,
               what="the damaged file uploaded again")
    assert "backup verified" in node.log_text() or wait_until(lambda: "backup verified" in node.log_text(),
                                                              timeout=20, what="a clean read-back")


def test_owner_guard_foreign_and_shared_prefix(ankusa, tmp_path):
    """Two stores on one prefix: the second is refused (foreign_backup) and counted, and
    LATEST stays the first's. A replacement restored from the first while it still runs
    shares its prefix: the first of the two to find LATEST written by the other is refused
    (prefix_shared) from then on, and the other keeps writing (which one depends on how
    their runs interleave: the usual one is the old host, refused by the replacement's
    first backup; a run of the old host under way at that moment can land after it)."""
    shared = tmp_path / "shared"
    a = ankusa(config={"backup": backup_cfg(local(shared), interval_ms=300)}, name="a")
    post_acked(a, 10, "a")
    wait_backups(a, 1)
    owner, a_writer = latest(shared)["store_id"], latest(shared)["writer"]
    # b: a store of its own first, then pointed at a's prefix
    b = ankusa(name="b")
    post_acked(b, 5, "b")
    assert b.stop() == 0
    b.config["backup"] = backup_cfg(local(shared), interval_ms=300)
    b.write_config()
    b.start()
    wait_until(lambda: b.metrics().value("ankusa_backup_runs_total", instance="default",
                                         result="foreign_backup") >= 1, timeout=20, what="foreign_backup counted")
    assert b.metrics().value("ankusa_backup_failures_total", instance="default", target="primary") >= 1
    assert "belongs to another store" in b.log_text()
    assert latest(shared)["store_id"] == owner
    assert b.stop() == 0
    # c: a's replacement, restored from a's backup while a still runs
    c = ankusa(config={"backup": backup_cfg(local(shared), interval_ms=300)}, name="c", start=False)
    c.start()
    assert "store restored from a backup" in c.log_text()
    wait_backups(c, 1)

    def refused():
        return [n for n in (a, c) if n.metrics().value("ankusa_backup_runs_total", instance="default",
                                                       result="prefix_shared") >= 1]
    loser = wait_until(refused, timeout=20, what="prefix_shared counted on a or c")
    assert len(loser) == 1, "one of the two keeps backing up"
    loser = loser[0]
    winner = c if loser is a else a
    assert "written by another process of this store" in loser.log_text()
    wait_backups(winner, 2)  # the other goes on, and its backups are LATEST
    assert latest(shared)["store_id"] == owner
    w = latest(shared)["writer"]
    assert (w != a_writer) == (winner is c), (w, a_writer, winner.name)
    a.kill9()
    c.kill9()


def test_backup_now_offline_and_refused_beside_a_running_node(ankusa, tmp_path):
    p = tmp_path / "p"
    node = ankusa(config={"backup": backup_cfg(local(p), interval_ms=600000)})
    post_acked(node, 10, "n")
    r = run_cli("backup", "now", "--config", node.config_path)
    assert r.returncode == 1 and "stop it first" in r.stderr, r.stderr
    node.kill9()
    r = run_cli("backup", "now", "--config", node.config_path)
    assert r.returncode == 0 and "primary: backup" in r.stdout and "taken" in r.stdout, r.stdout + r.stderr
    assert latest(p)["id"] in r.stdout
    assert os.path.exists(p / "backup" / latest(p)["id"] / "manifest.json")


def test_purge_keeps_the_newest_and_skips_when_a_kept_manifest_is_unreadable(ankusa, tmp_path):
    """keep: 2. Backups by hand (`ankusa backup now`, node stopped): the older ones go with
    the shared files only they list; a kept manifest that cannot be read stops the purge
    (nothing deleted, said so) until it is no longer among the kept."""
    p = tmp_path / "p"
    node = ankusa(config={"backup": backup_cfg(local(p), interval_ms=600000)})
    post_acked(node, 20, "r")
    assert node.stop() == 0

    def now():
        r = run_cli("backup", "now", "--config", node.config_path)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    def complete():
        return sorted(d.name for d in (p / "backup").iterdir() if (d / "manifest.json").exists())

    first = latest(p)["id"]
    now()
    second = latest(p)["id"]
    now()
    third = latest(p)["id"]
    assert complete() == [second, third], "the oldest backup was not purged"
    # the newest but one is kept by the next run: unreadable, it stops that run's purge
    mp = p / "backup" / third / "manifest.json"
    mp.write_bytes(mp.read_bytes()[:-10])
    out = now()
    fourth = latest(p)["id"]
    assert "old backups not purged" in out and third in out, out
    assert complete() == [second, third, fourth]
    now()
    fifth = latest(p)["id"]
    assert complete() == [fourth, fifth]
    assert not (p / "backup" / first).exists() or not any((p / "backup" / first).iterdir())
    listed = {f["key"] for i in (fourth, fifth) for f in manifest(p, i)["files"] if f["kind"] == "shared"}
    sst = p / "backup" / "sst"
    have = {f"sst/{x.name}" for x in sst.iterdir()} if sst.exists() else set()
    assert have == listed


def test_backup_to_gcs_and_restore_from_it(ankusa, tmp_path):
    """The storage section's GCS store as the primary (backup.store unset): the backup's
    objects go under <key_prefix>backup/ through the JSON API (the stand-in refuses any
    request Google would), and a wiped node restores from them."""
    import gcs_standin
    g = gcs_standin.GcsStandin(bucket="ak-bk", auth="token", token="gcs-test-token").start()
    try:
        b = backup_cfg(None, interval_ms=600000)
        del b["store"]
        node = ankusa(config={"storage": {"type": "gcs", "key_prefix": "eu/n1/",
                                          "gcs": {"bucket": "ak-bk", "endpoint": g.url, "auth": "token",
                                                  "token": "gcs-test-token"}},
                              "backup": b})
        acked = post_acked(node, 40, "g")
        assert node.stop() == 0
        names = sorted(g.objects)
        assert "eu/n1/backup/LATEST" in names, names[:10]
        assert any(n.endswith("/manifest.json") and n.startswith("eu/n1/backup/") for n in names)
        shutil.rmtree(node.data_dir)
        node.start()
        assert "from=primary" in node.log_text()
        assert all(stored_sha(node, h) == sha for h, (sha, _) in acked.items())
        assert not g.violations, g.violations[:5]
        assert "gcs-test-token" not in node.log_text()
    finally:
        g.stop()
