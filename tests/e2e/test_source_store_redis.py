"""source_store.type redis: the admin API's sources kept in a Redis two nodes share
(docs/shared-stores.md), against a real redis-server the test starts on a free port. A
change on one node serves on the other within a second (pub/sub), a change that was never
broadcast within tick_ms; a delete makes the other node answer 404; names are unique
across the fleet; the dual write's pending audit row is settled at the next boot by
reading Redis (a kill -9 before the write: failed, after it: ok, changed meanwhile by the
other node: interrupted); Redis down: writes 503 with nothing changed, the cache serves;
secrets never reach Redis in the clear and the url's password never reaches a log."""
import json
import time

import pytest

from helpers import LOOPBACK, SOURCE_STORE_KEY, admin_json, run_cli, wait_until
from redis_server import RedisServer

NS = "ankusa:sources:default"
PASSWORD = "redis-pw-Zq81LmX"
SINK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
VERIFY_SECRET = "verify-secret-rs-771Hq"
LOG = [{"type": "log"}]


@pytest.fixture
def redis(tmp_path):
    r = RedisServer(tmp_path / "redis", password=PASSWORD)
    r.start()
    yield r
    r.close()


def store(redis, tick_ms=60000):
    return {**LOOPBACK, "source_store": {"type": "redis", "url": redis.url(password=True), "secret_key": SOURCE_STORE_KEY,
                             "tick_ms": tick_ms}}


def spec(secret=VERIFY_SECRET, **extra):
    s = {"verify": {"type": "token", "location": "header", "header": "X-Token", "secret": secret},
         "sinks": [{"type": "log"}]}
    s.update(extra)
    return s


def hook(node, name, secret=VERIFY_SECRET):
    return node.post(f"/webhooks/{name}", b'{"n":1}', {"Content-Type": "application/json", "X-Token": secret})


def serves(node, name, secret=VERIFY_SECRET):
    return hook(node, name, secret).status == 201


def within(pred, seconds, what):
    t0 = time.monotonic()
    wait_until(pred, timeout=seconds, what=what)
    return time.monotonic() - t0


def audit(node, action):
    r = admin_json(node, "GET", f"/v1/audit?action={action}")
    assert r.status == 200, r
    return r.json["entries"]


def killed_request(node, method, path, body):
    try:
        r = admin_json(node, method, path, body)
    except Exception:  # the seam's _exit(9): the connection closes unanswered
        r = None
    assert r is None, f"the node answered {r!r}: the kill seam did not fire"
    node.proc.wait(10)
    node.exit_codes.append("killed-by-seam")


def test_a_change_on_one_node_serves_on_the_other(redis, ankusa):
    a = ankusa(config=store(redis), name="a")
    b = ankusa(config=store(redis), name="b")
    r = admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="shared", **spec()))
    assert r.status == 201, r
    assert r.json["revision"] == 1 and r.json["managed_by"] == "api"
    assert serves(a, "shared")
    # b learns it from the broadcast: tick_ms is a minute
    assert within(lambda: serves(b, "shared"), 1.5, "b serves the source created on a") < 1.5
    rb = admin_json(b, "GET", "/v1/tenants/acme/sources/shared")
    assert rb.status == 200 and rb.json["revision"] == 1 and rb.json["verify"]["secret"] != VERIFY_SECRET
    # an update on b (the new verifier) serves on a
    r = admin_json(b, "PUT", "/v1/tenants/acme/sources/shared", spec("second-secret-rs-19x"))
    assert r.status == 200 and r.json["revision"] == 2, r
    within(lambda: serves(a, "shared", "second-secret-rs-19x"), 1.5, "a serves b's update")
    assert hook(a, "shared").status == 401
    # names are unique across the fleet and its tenants
    r = admin_json(b, "POST", "/v1/tenants/other/sources", dict(name="shared", **spec()))
    assert r.status == 409 and r.json["error"] == "source_exists", r
    # a delete on a: b answers 404
    r = admin_json(a, "DELETE", "/v1/tenants/acme/sources/shared")
    assert r.status == 204, r
    within(lambda: hook(b, "shared", "second-secret-rs-19x").status == 404, 1.5, "b stops serving it")
    assert admin_json(b, "GET", "/v1/tenants/acme/sources/shared").status == 404
    # no secret in Redis in the clear, no password in a log
    r = admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="sealed", **spec(
        sinks=[{"type": "http", "url": "http://127.0.0.1:9/x", "secret": SINK_SECRET}])))
    assert r.status == 201, r
    raw = b"".join(v for v in redis.cmd("HGETALL", f"{NS}:items"))
    assert b"sealed" in raw
    assert VERIFY_SECRET.encode() not in raw and SINK_SECRET.encode() not in raw
    assert sorted(redis.keys(f"{NS}:*")) == [f"{NS}:items", f"{NS}:version"]
    for n in (a, b):
        assert PASSWORD not in n.log_text()
    # each change is one audit row, settled ok
    rows = audit(a, "source.create")
    assert [x["outcome"] for x in rows] == ["ok", "ok"]
    assert all(x["detail"]["settle"] == "subject" for x in rows)


def test_the_tick_catches_a_missed_broadcast(redis, ankusa):
    a = ankusa(config=store(redis, tick_ms=400), name="a")
    assert admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="ticked", **spec())).status == 201
    # b comes up after the change (no broadcast to hear): its boot reads it
    b = ankusa(config=store(redis, tick_ms=400), name="b")
    assert serves(b, "ticked")
    # a change by hand with no PUBLISH: only the tick can see it
    assert redis.cmd("HDEL", f"{NS}:items", "ticked") == 1
    redis.cmd("INCR", f"{NS}:version")
    for n in (a, b):
        within(lambda: hook(n, "ticked").status == 404, 3.0, f"{n.name} sees the row gone by its tick")


def test_kill_between_pending_row_and_redis_write_settles_failed(redis, ankusa):
    a = ankusa(config=store(redis), name="a", env={"ANKUSA_TEST_SOURCE_STORE_KILL_AT": "after_pending"})
    killed_request(a, "POST", "/v1/tenants/acme/sources", dict(name="never", **spec()))
    assert redis.cmd("HGETALL", f"{NS}:items") == []
    a.env = {}
    a.start()
    (row,) = wait_until(lambda: audit(a, "source.create") or None, timeout=5, what="the row")
    wait_until(lambda: audit(a, "source.create")[0]["outcome"] != "pending", timeout=5, what="settled")
    row = audit(a, "source.create")[0]
    assert row["outcome"] == "failed", row
    assert row["before_hash"] is None and row["after_hash"] is None
    assert admin_json(a, "GET", "/v1/tenants/acme/sources/never").status == 404
    assert "a change to a shared source left pending by a stop is settled" in a.log_text()


def test_kill_after_the_redis_write_settles_ok(redis, ankusa):
    a = ankusa(config=store(redis), name="a", env={"ANKUSA_TEST_SOURCE_STORE_KILL_AT": "after_write"})
    killed_request(a, "POST", "/v1/tenants/acme/sources", dict(name="landed", **spec()))
    a.env = {}
    a.start()
    assert serves(a, "landed")
    wait_until(lambda: audit(a, "source.create")[0]["outcome"] != "pending", timeout=5, what="settled")
    row = audit(a, "source.create")[0]
    assert row["outcome"] == "ok", row
    assert row["after_hash"] and row["before_hash"] is None
    assert admin_json(a, "GET", "/v1/tenants/acme/sources/landed").json["revision"] == 1


def test_a_row_changed_meanwhile_settles_interrupted(redis, ankusa):
    a = ankusa(config=store(redis), name="a")
    b = ankusa(config=store(redis), name="b")
    assert admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="raced", **spec())).status == 201
    within(lambda: serves(b, "raced"), 1.5, "b serves it")
    a.stop()
    a.env = {"ANKUSA_TEST_SOURCE_STORE_KILL_AT": "after_pending"}
    a.start()
    killed_request(a, "PUT", "/v1/tenants/acme/sources/raced", spec("a-wanted-this-secret"))
    # meanwhile b changes it another way
    r = admin_json(b, "PUT", "/v1/tenants/acme/sources/raced", spec("b-did-this-secret"))
    assert r.status == 200 and r.json["revision"] == 2, r
    a.env = {}
    a.start()
    wait_until(lambda: audit(a, "source.update")[0]["outcome"] != "pending", timeout=5, what="settled")
    row = audit(a, "source.update")[0]
    assert row["outcome"] == "interrupted", row
    assert row["detail"]["current"] == "revision 2"
    assert row["detail"]["intended_after_hash"] not in (None, row["after_hash"])
    assert serves(a, "raced", "b-did-this-secret")
    assert "changed meanwhile" in a.log_text()


def test_redis_down_writes_503_and_the_cache_serves(redis, ankusa):
    a = ankusa(config=store(redis), name="a")
    assert admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="cached", **spec())).status == 201
    before = len(audit(a, "source.create"))
    redis.stop()
    r = admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="new_one", **spec()))
    assert r.status == 503 and r.json["error"] == "store_unavailable", r
    r = admin_json(a, "PUT", "/v1/tenants/acme/sources/cached", spec("other-secret-down"))
    assert r.status == 503, r
    assert serves(a, "cached")
    assert admin_json(a, "GET", "/v1/tenants/acme/sources/cached").json["revision"] == 1
    assert len(audit(a, "source.create")) == before and audit(a, "source.update") == []
    # back (empty: this test's Redis keeps nothing on disk): the first write goes through
    redis.restart()
    r = admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="new_one", **spec()))
    assert r.status == 201, r
    assert serves(a, "new_one")
    assert PASSWORD not in a.log_text()


def test_redis_down_at_boot_then_up(tmp_path, ankusa):
    r = RedisServer(tmp_path / "redis", password=PASSWORD)
    try:
        a = ankusa(config=store(r, tick_ms=300), name="a", sources={"from_file": {"sinks": LOG}})
        # the config file's sources serve; the shared ones are unknown, not absent
        assert a.post("/webhooks/from_file", b"{}").status == 201
        g = admin_json(a, "GET", "/v1/tenants/acme/sources/anything")
        assert g.status == 503 and g.json["error"] == "store_unavailable", g
        assert "the shared source store is unavailable at start" in a.log_text()
        h = a.post("/webhooks/anything", b"{}")
        assert h.status == 503 and h.json["error"] == "store_unavailable", h
        ready = a.get("/ready")
        assert ready.status == 200 and "not read yet" in ready.json["source_store"], ready
        r.start()
        within(lambda: admin_json(a, "GET", "/v1/tenants/acme/sources/anything").status == 404, 5.0, "loaded")
        assert a.post("/webhooks/anything", b"{}").status == 404
        assert "source_store" not in a.get("/ready").json
        # a Redis row named like a config file's source is refused on this node, logged
        b = ankusa(config=store(r), name="b", sources={})
        assert admin_json(b, "POST", "/v1/tenants/acme/sources", dict(name="from_file", **spec())).status == 201
        wait_until(lambda: "has the name of a source of the config file" in a.log_text(), timeout=5,
                   what="the clash logged")
        assert a.post("/webhooks/from_file", b"{}").status == 201  # still the config file's
        for n in (a, b):
            assert PASSWORD not in n.log_text()
    finally:
        r.close()


def test_print_config_names_the_redis_store_and_hides_the_url(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"source_store": {"url": f"redis://:{PASSWORD}@cache:6379/1",
                                                "secret_key": SOURCE_STORE_KEY},
                               "sources": {"x": {"sinks": LOG}}}))
    p = run_cli("print-config", "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert PASSWORD not in p.stdout and SOURCE_STORE_KEY not in p.stdout
    c = json.loads(p.stdout)
    assert c["source_store"]["type"] == "redis"  # a url without a type means redis
    assert c["source_store"]["module"] == "Ankusa.SourceStore.Redis"
    p = run_cli("check-config", "--config", str(cfg))
    assert p.returncode == 0 and PASSWORD not in p.stdout + p.stderr, p


def test_a_write_from_a_stale_cache_is_a_conflict(redis, ankusa):
    a = ankusa(config=store(redis), name="a")
    assert admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="stale", **spec())).status == 201
    # another writer moved the row on, unannounced (no INCR, no PUBLISH): a's cache is behind
    row = json.loads(redis.cmd("HGET", f"{NS}:items", "stale"))
    row["revision"] = 7
    redis.cmd("HSET", f"{NS}:items", "stale", json.dumps(row))
    n_updates = len(audit(a, "source.update"))
    r = admin_json(a, "PUT", "/v1/tenants/acme/sources/stale", spec("lost-update-secret"))
    assert r.status == 409 and r.json["error"] == "source_conflict", r
    assert json.loads(redis.cmd("HGET", f"{NS}:items", "stale"))["revision"] == 7  # nothing changed
    assert len(audit(a, "source.update")) == n_updates  # refused before the pending row
    r = admin_json(a, "DELETE", "/v1/tenants/acme/sources/stale")
    assert r.status == 409 and r.json["error"] == "source_conflict", r
    assert serves(a, "stale")


def test_a_node_cut_off_the_channel_catches_up_when_it_resubscribes(redis, ankusa):
    a = ankusa(config=store(redis), name="a")
    b = ankusa(config=store(redis), name="b")
    # the change channel's connections dropped; a's write is broadcast to nobody
    assert redis.cmd("CLIENT", "KILL", "TYPE", "pubsub") >= 2
    assert admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="unheard", **spec())).status == 201
    # tick_ms is a minute: b reads the version when it is back on the channel
    within(lambda: serves(b, "unheard"), 4.0, "b catches up after resubscribing")


def test_lifecycle_events_of_the_redis_store_wait_for_the_verdict(redis, ankusa):
    from receiver import Receiver
    lrx = Receiver()
    try:
        cfg = {**store(redis), "lifecycle": {"sinks": [{"type": "http", "url": lrx.url}]}}
        a = ankusa(config=cfg, name="a")
        assert admin_json(a, "POST", "/v1/tenants/acme/sources", dict(name="ev", **spec())).status == 201
        assert admin_json(a, "PUT", "/v1/tenants/acme/sources/ev", spec("ev-second-secret")).status == 200
        # a kill before the write: failed, no event; a kill after it: ok, its event after the restart
        a.stop()
        a.env = {"ANKUSA_TEST_SOURCE_STORE_KILL_AT": "after_pending"}
        a.start()
        killed_request(a, "DELETE", "/v1/tenants/acme/sources/ev", None)
        a.env = {"ANKUSA_TEST_SOURCE_STORE_KILL_AT": "after_write"}
        a.start()
        killed_request(a, "DELETE", "/v1/tenants/acme/sources/ev", None)
        a.env = {}
        a.start()
        got = lambda: [json.loads(d.body)["type"] for d in lrx.snapshot() if d.status == 204]
        wait_until(lambda: len(got()) >= 3, timeout=10, what="three events")
        time.sleep(0.3)
        assert got() == ["io.ankusa.source.created", "io.ankusa.source.updated", "io.ankusa.source.deleted"]
        assert [r["outcome"] for r in audit(a, "source.delete")] == ["ok", "failed"]  # newest first
        raw = b"".join(d.body for d in lrx.snapshot())
        assert VERIFY_SECRET.encode() not in raw and b"ev-second-secret" not in raw
    finally:
        lrx.close()
