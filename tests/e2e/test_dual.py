"""wal.type dual (issue 25, docs/dual.md): every hook fsynced in the node's store and
confirmed in the intake log (librdkafka's mock cluster, tests/kafkamock: a process of its
own that survives the node's kill -9) before its 201. Proofs: no 201 without the log's
confirm; a broker outage answers 503 intake_unavailable and the reconciler completes the
half-persisted hooks; a repeat of a half-persisted event is 503 intake_pending, then 201
duplicate with the first id; kill -9 under load, ten times: every acked hook in the store
and in the log; the host-loss drill: the data dir deleted, a replacement with the same
intake.node_id restores the last backup and replays the log: every acked hook, none twice."""
import json
import random
import shutil
import threading
import time
import uuid

import pytest

from helpers import SLOW, run_cli, wait_until
from kafka_mock import KafkaMock

NODE_ID = "node-a"
SIGNING_KEY = "backup-signing-key-of-the-tests-0123456789"


@pytest.fixture
def kmock(tmp_path):
    km = KafkaMock(topics=["intake:3", "hooks:1"], stderr_path=tmp_path / "kafkamock.stderr.log")
    yield km
    km.close()


def dual(km, **over):
    i = {"brokers": km.brokers, "topic": "intake", "node_id": NODE_ID, "produce_timeout_ms": 1500,
         "breaker_failures": 3, "breaker_open_ms": 500, "reconcile_interval_ms": 100, "min_insync_replicas": 0}
    i.update(over)
    return {"wal": {"type": "dual"}, "intake": i}


GH = {"tenant": "acme", "dedupe": "github", "sinks": [{"type": "log"}]}


def log_ids(km, node_id=NODE_ID):
    """Hook id -> how many records of this node the intake log holds for it."""
    out = {}
    for r in km.consume("intake"):
        if r.key != node_id.encode():
            continue
        hid = record_id(r.value)
        out[hid] = out.get(hid, 0) + 1
    return out


def record_id(value):
    """The hook id of an encoded envelope record (the store's format, core/envelope.h):
    the 16 bytes at offset 2 (AK_ENV_ID_OFFSET)."""
    return str(uuid.UUID(bytes=bytes(value[2:18])))


def stored(node):
    return [h["id"] for h in node.inspect()]


def metric(node, name, **labels):
    return node.metrics().get(name, instance="default", **labels) or 0


def post(node, src="demo", body=b'{"a":1}', headers=None, timeout=30.0):
    return node.post(f"/webhooks/{src}", body, headers or {"Content-Type": "application/json"}, timeout=timeout)


# ------------------------------------------------------------------ config ----

@pytest.mark.parametrize("intake,line", [
    ({}, "intake.brokers: required with wal.type dual"),
    ({"brokers": ["127.0.0.1:9"]}, "intake.node_id: required with wal.type dual"),
])
def test_dual_config_refused_naming_the_key(tmp_path, intake, line):
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps({"wal": {"type": "dual"}, "intake": intake,
                               "sources": {"a": {"sinks": [{"type": "log"}]}}}))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 78, p
    assert line in p.stderr, p.stderr


def test_a_node_that_cannot_reach_the_log_does_not_start(ankusa, kmock):
    kmock.unknown("intake")
    node = ankusa(config=dual(kmock, recovery_timeout_ms=2000), start=False)
    node.start(wait=False)
    rc = node.wait_exit(30 * SLOW)
    assert rc not in (None, 0), "a dual node without its log must not serve"
    assert "intake" in node.log_text() and "intake" in node.log_text().split("start")[-1]


# --------------------------------------------------------------- the ack ----

def test_each_201_is_in_the_store_and_confirmed_in_the_log(ankusa, kmock):
    node = ankusa(config=dual(kmock))
    assert "wal.type=dual: a 201 means the hook is fsynced in this host's store and confirmed in the intake log" \
        in node.log_text()
    ids = []
    for i in range(40):
        r = post(node, body=json.dumps({"n": i}).encode())
        assert r.status == 201, r
        ids.append(r.json["id"])
    got = log_ids(kmock)
    assert set(ids) <= set(got), "every acked hook is in the intake log"
    recs = [r for r in kmock.consume("intake") if r.key == NODE_ID.encode()]
    assert len({r.partition for r in recs}) == 1, "one node's records go to one partition"
    assert set(ids) <= set(stored(node))
    m = node.metrics()
    assert (m.get("ankusa_intake_publish_duration_seconds_count", instance="default") or 0) >= 1
    assert (m.get("ankusa_intake_pending_hooks", instance="default") or 0) == 0


def test_brokers_down_nothing_acked_then_the_reconciler_completes_the_stored_half(ankusa, kmock):
    node = ankusa(config=dual(kmock, breaker_open_ms=3000))
    assert post(node).status == 201
    kmock.down(-1)
    answers = []
    for i in range(8):
        r = post(node, body=json.dumps({"down": i}).encode())
        answers.append(r)
    assert all(r.status == 503 for r in answers), [r.status for r in answers]
    assert all(r.json["error"] == "intake_unavailable" for r in answers)
    assert all(r.headers.get("retry-after") for r in answers)
    m = node.metrics()
    assert m.get("ankusa_intake_breaker_state", instance="default") == 1, "the breaker opened"
    pending = m.get("ankusa_intake_pending_hooks", instance="default")
    assert pending and pending >= 1, "the hooks whose store half went through are held"
    refused = m.get("ankusa_ingest_refused_total", instance="default", reason="intake_unavailable")
    assert refused == 8
    ready = node.get("/ready")
    assert ready.status == 503 and ready.json["reasons"] == {"intake": "breaker_open"}, ready
    kmock.up(-1)
    wait_until(lambda: metric(node, "ankusa_intake_pending_hooks") == 0, timeout=30,
               what="the reconciler to confirm the held hooks")
    assert metric(node, "ankusa_intake_reconciled_total") == pending
    in_log = log_ids(kmock)
    assert set(stored(node)) <= set(in_log), "every stored hook ends up in the log"
    wait_until(lambda: post(node).status == 201, timeout=10, what="201 again after the breaker closed")
    assert node.get("/ready").status == 200
    assert metric(node, "ankusa_intake_breaker_state") == 0


def test_held_hooks_survive_kill9_and_the_next_start_publishes_them(ankusa, kmock):
    node = ankusa(config=dual(kmock, breaker_failures=0))
    kmock.down(-1)
    for i in range(5):
        r = post(node, body=json.dumps({"held": i}).encode())
        assert r.status == 503 and r.json["error"] == "intake_unavailable", r
    assert metric(node, "ankusa_intake_pending_hooks") == 5
    held = set(stored(node))
    assert len(held) == 5
    node.kill9()
    kmock.up(-1)
    assert not (held & set(log_ids(kmock))), "the log never confirmed them"
    node.start()
    assert held <= set(log_ids(kmock)), "the next start published the stored hooks the log lacked"
    assert "republished=5" in node.log_text()
    assert set(stored(node)) == held, "nothing lost, nothing twice"


def test_held_hooks_survive_a_clean_stop_and_the_next_start_publishes_them(ankusa, kmock):
    """The stop's own marks (intake_stop): the watermark it writes stays below the held
    hooks, so the next start publishes them (a watermark at the writer's committed seq
    would lose them from the log for good)."""
    node = ankusa(config=dual(kmock, breaker_failures=0, produce_timeout_ms=500))
    first = post(node)
    assert first.status == 201, first
    kmock.down(-1)
    for i in range(2):
        r = post(node, body=json.dumps({"held": i}).encode())
        assert r.status == 503 and r.json["error"] == "intake_unavailable", r
    held = set(stored(node)) - {first.json["id"]}
    assert len(held) == 2
    node.stop()
    kmock.up(-1)
    node.start()
    assert held <= set(log_ids(kmock)), "the next start published the held hooks"
    last = node.log_text().split("recovery done")[-1].splitlines()[0]
    assert "republished=2" in last, last


def test_kill9_while_two_groups_wait_on_the_log_the_next_start_publishes_both(ankusa, kmock):
    """A group whose log half is still out holds the watermark back: the next group's
    batch carries a watermark at or below the first group's seq, so after a kill -9
    before either confirm, the next start publishes both (none stays stored and never in
    the log)."""
    node = ankusa(config=dual(kmock, breaker_failures=0, produce_timeout_ms=20000))
    kmock.down(-1)

    def bg(i):
        try:
            post(node, body=json.dumps({"wait": i}).encode(), timeout=3)
        except OSError:
            pass
    threads = []
    for i in range(2):
        t = threading.Thread(target=bg, args=(i,), daemon=True)
        t.start()
        threads.append(t)
        wait_until(lambda: metric(node, "ankusa_store_hooks") == i + 1, timeout=10 * SLOW,
                   what=f"hook {i} stored, its log half out")
    node.kill9()
    for t in threads:
        t.join(5)
    kmock.up(-1)
    node.start()
    have = set(stored(node))
    assert len(have) == 2, have
    missing = have - set(log_ids(kmock))
    assert not missing, f"{len(missing)} stored hooks never published"


def test_a_repeat_of_a_half_persisted_event_is_intake_pending_then_its_duplicate(ankusa, kmock):
    node = ankusa(config=dual(kmock, breaker_failures=0), sources={"gh": GH, "demo": {"sinks": [{"type": "log"}]}})
    kmock.down(-1)
    hdr = {"Content-Type": "application/json", "X-GitHub-Delivery": "evt-1"}
    r1 = post(node, "gh", b'{"e":1}', hdr)
    assert r1.status == 503 and r1.json["error"] == "intake_unavailable", r1
    r2 = post(node, "gh", b'{"e":1}', hdr)
    assert r2.status == 503 and r2.json["error"] == "intake_pending", r2
    assert r2.headers.get("retry-after")
    kmock.up(-1)
    wait_until(lambda: metric(node, "ankusa_intake_pending_hooks") == 0, timeout=30, what="reconciled")
    r3 = post(node, "gh", b'{"e":1}', hdr)
    assert r3.status == 201 and r3.json.get("duplicate") is True, r3
    hooks = [h for h in node.inspect() if h.get("source") == "gh" or h.get("source_id") == "gh"]
    assert [h["id"] for h in hooks] == [r3.json["id"]], "one hook, the first one"
    assert r3.json["id"] in log_ids(kmock)


# ------------------------------------------------------------- kill -9 ----

class Load:
    """Posts continuously from a few threads; remembers every acked id."""

    def __init__(self, node, threads=4):
        self.node = node
        self.acked = []
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(threads)]

    def run(self, t):
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                r = post(self.node, body=json.dumps({"t": t, "n": n}).encode(), timeout=5)
            except OSError:
                continue
            if r.status == 201:
                with self.lock:
                    self.acked.append(r.json["id"])

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        for t in self.threads:
            t.join(10)


def test_kill9_during_dual_commits_ten_times_every_ack_in_store_and_log(ankusa, kmock):
    node = ankusa(config=dual(kmock))
    acked = []
    rnd = random.Random(25)
    for round_ in range(10):
        with Load(node) as load:
            time.sleep(0.3 + rnd.random() * 0.5)
            node.kill9()
        acked += load.acked
        node.start()
    assert len(acked) > 100, f"the load acked too little to prove anything: {len(acked)}"
    have = stored(node)
    assert len(have) == len(set(have)), "no hook twice"
    missing = set(acked) - set(have)
    assert not missing, f"{len(missing)} acked hooks not in the store"
    in_log = log_ids(kmock)
    missing = set(acked) - set(in_log)
    assert not missing, f"{len(missing)} acked hooks not in the log"
    node.stop()
    assert set(have) <= set(log_ids(kmock)), "after a clean stop, every stored hook is in the log"


# --------------------------------------------------------- the host loss ----

def test_host_loss_a_replacement_restores_the_backup_and_replays_the_log(ankusa, kmock, tmp_path):
    backups = tmp_path / "backups"
    cfg = dual(kmock)
    cfg["backup"] = {"enabled": True, "interval_ms": 1000, "keep": 2, "signing_key": SIGNING_KEY,
                     "store": {"type": "local", "root": str(backups)}, "verify_interval_ms": 0}
    sources = {"demo": {"sinks": [{"type": "log"}]}, "gh": GH}
    node = ankusa(config=cfg, sources=sources)
    acked = {}
    for i in range(30):
        r = post(node, body=json.dumps({"before": i}).encode())
        assert r.status == 201
        acked[r.json["id"]] = "demo"
    wait_until(lambda: (backups / "backup" / "LATEST").exists(), timeout=20, what="a backup")
    time.sleep(1.2)  # one more backup, then hooks only the log has
    with Load(node) as load:
        time.sleep(0.8)
    for i in range(10):
        r = post(node, "gh", b'{"k":1}', {"Content-Type": "application/json", "X-GitHub-Delivery": f"late-{i}"})
        assert r.status == 201
        acked[r.json["id"]] = "gh"
    for hid in load.acked:
        acked[hid] = "demo"
    node.kill9()
    shutil.rmtree(node.data_dir)

    repl = ankusa(config=cfg, sources=sources, name="replacement")
    text = repl.log_text()
    assert "restored" in text or "restore" in text, repl.log_tail()
    assert "recovery stored the hooks the intake log held" in text, repl.log_tail()
    have = stored(repl)
    assert len(have) == len(set(have)), "no hook twice"
    missing = set(acked) - set(have)
    assert not missing, f"{len(missing)} of {len(acked)} acked hooks lost with the host"
    # the restored dedupe window: a repeat of a late event is its duplicate, not a second hook
    r = post(repl, "gh", b'{"k":1}', {"Content-Type": "application/json", "X-GitHub-Delivery": "late-3"})
    assert r.status == 201 and r.json.get("duplicate") is True, r
    # new hooks on the replacement take seqs above the recovered ones: none is overwritten
    fresh = []
    for i in range(5):
        r = post(repl, body=json.dumps({"after": i}).encode())
        assert r.status == 201, r
        fresh.append(r.json["id"])
    have = stored(repl)
    assert len(have) == len(set(have)), "no hook twice"
    missing = (set(acked) | set(fresh)) - set(have)
    assert not missing, f"{len(missing)} hooks lost after the replacement started taking hooks"


def test_host_loss_without_a_backup_the_replacement_replays_the_partition_keeping_each_id(ankusa, kmock):
    """No backup: the replacement's store is new (its own id key), and recovery replays the
    whole partition. Each hook keeps the id its 201 gave (never sealed again under the new
    store's key), and is found by it."""
    sources = {"demo": {"sinks": [{"type": "log"}]}, "gh": GH}
    node = ankusa(config=dual(kmock), sources=sources)
    acked = []
    for i in range(6):
        r = post(node, body=json.dumps({"n": i}).encode())
        assert r.status == 201, r
        acked.append(r.json["id"])
    r = post(node, "gh", b'{"k":1}', {"Content-Type": "application/json", "X-GitHub-Delivery": "nb-1"})
    assert r.status == 201, r
    acked.append(r.json["id"])
    node.kill9()
    shutil.rmtree(node.data_dir)

    repl = ankusa(config=dual(kmock), sources=sources, name="replacement")
    assert "recovery stored the hooks the intake log held" in repl.log_text(), repl.log_tail()
    have = stored(repl)
    assert sorted(have) == sorted(acked), "every acked hook, under its own id, once"
    for hid in acked:
        assert repl.hook(hid)["id"] == hid
    r = post(repl, "gh", b'{"k":1}', {"Content-Type": "application/json", "X-GitHub-Delivery": "nb-1"})
    assert r.status == 201 and r.json.get("duplicate") is True and r.json["id"] == acked[-1], r


# ------------------------------------------------- the fleet dedupe claim ----

def test_a_fleet_claim_stays_pending_until_the_log_confirms(ankusa, kmock, tmp_path):
    """Two dual nodes share one fleet dedupe window (Redis). A half-persisted event's claim
    is held pending: its retry on the other node is refused (409 dedupe_pending), never
    stored, and after the reconciler confirmed it the retry is 201 duplicate with the
    first id."""
    from redis_server import RedisServer
    redis = RedisServer(tmp_path / "redis")
    redis.start()
    try:
        def cfg(node_id):
            c = dual(kmock, node_id=node_id, breaker_failures=0)
            c.update({"dedupe": {"scope": "fleet"}, "fleet": {"store": {"url": redis.url()}, "timeout_ms": 500}})
            return c
        srcs = {"gh": GH, "demo": {"sinks": [{"type": "log"}]}}
        a = ankusa(config=cfg("node-a"), sources=srcs, name="a")
        b = ankusa(config=cfg("node-b"), sources=srcs, name="b")
        hdr = {"Content-Type": "application/json", "X-GitHub-Delivery": "evt-fleet"}
        kmock.down(-1)
        r1 = post(a, "gh", b'{"e":1}', hdr)
        assert r1.status == 503 and r1.json["error"] == "intake_unavailable", r1
        r2 = post(b, "gh", b'{"e":1}', hdr)
        assert r2.status == 409 and r2.json["error"] == "dedupe_pending", r2
        r3 = post(a, "gh", b'{"e":1}', hdr)
        assert r3.status == 503 and r3.json["error"] == "intake_pending", r3
        kmock.up(-1)
        wait_until(lambda: metric(a, "ankusa_intake_pending_hooks") == 0, timeout=30, what="reconciled")
        first = [h["id"] for h in a.inspect() if h.get("source") == "gh" or h.get("source_id") == "gh"]
        assert len(first) == 1

        def dup_on_b():
            r = post(b, "gh", b'{"e":1}', hdr)
            return r if r.status == 201 else None
        r4 = wait_until(dup_on_b, timeout=10, what="the retry on b answered duplicate")
        assert r4.json.get("duplicate") is True and r4.json["id"] == first[0], r4
        assert not [h for h in b.inspect() if h.get("source") == "gh" or h.get("source_id") == "gh"], \
            "never a second hook"
    finally:
        redis.close()


def test_a_hook_whose_store_half_failed_is_stored_by_the_reconciler(ankusa, kmock):
    """The store's write fails (test build: ANKUSA_TEST_FAIL_COMMITS) while the log
    confirms: 503 store_unavailable, and once the store reopened the reconciler stores the
    hook under its own seq and id, and it is delivered."""
    node = ankusa(config=dual(kmock), env={"ANKUSA_TEST_FAIL_COMMITS": "1"})
    r = post(node, body=b'{"half":"store"}')
    assert r.status == 503 and r.json["error"] == "store_unavailable", r
    ids = list(log_ids(kmock))
    assert len(ids) == 1, f"the log confirmed the hook: {ids}"
    hid = ids[0]
    wait_until(lambda: hid in stored(node), timeout=30, what="the reconciler to store the hook the log has")
    assert metric(node, "ankusa_intake_reconciled_total") >= 1
    assert "hooks the intake log confirmed were stored by the reconciler" in node.log_text()
    wait_until(lambda: f"id={hid}" in node.log_text(), timeout=20, what="its delivery")
    assert post(node).status == 201
    node.restart()
    assert stored(node).count(hid) == 1, "stored once, not again by the next start's recovery"
