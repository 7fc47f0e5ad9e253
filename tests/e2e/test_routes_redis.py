"""routes.store.type redis: the route set kept in a Redis two nodes share
(docs/shared-stores.md), against a real redis-server the test starts on a free port. A
route created over 4003 on one node serves on the other within a second (pub/sub), a
change never broadcast within tick_ms; a delete makes the other node answer 404; the
global IP rules propagate; a write from a stale cache is 409 route_conflict; the dual
write's pending audit row is settled at the next boot by reading Redis (a kill -9 before
the write: failed, after it: ok, changed meanwhile by the other
node: interrupted); Redis down: writes 503 with nothing changed, the cached
set serves; Redis down at boot: requests 503 (never a false 404) until the first read,
then the seeds are created; the url's password never reaches a log or print-config."""
import json
import time

import pytest

from helpers import free_ports, http_request, run_cli, wait_until
from redis_server import RedisServer

NS = "ankusa:routes:default"
PASSWORD = "redis-pw-Rt55QwZ"


@pytest.fixture
def redis(tmp_path):
    r = RedisServer(tmp_path / "redis", password=PASSWORD)
    r.start()
    yield r
    r.close()


def rconfig(redis, tick_ms=60000, **extra):
    (port,) = free_ports(1)
    routes = {"enabled": True, "admin": {"port": port},
              "store": {"type": "redis", "url": redis.url(password=True), "tick_ms": tick_ms}}
    routes.update(extra)
    return {"routes": routes}


def ra(node, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    hdrs = {"Content-Type": "application/json"} if data is not None else {}
    return http_request(node.config["routes"]["admin"]["port"], method, path, body=data, headers=hdrs)


def hook(node, path="/webhooks/demo"):
    return node.post(path, b'{"n":1}').status


def within(pred, seconds, what):
    t0 = time.monotonic()
    wait_until(pred, timeout=seconds, what=what)
    return time.monotonic() - t0


def audit(node, action):
    r = node.admin(f"/v1/audit?action={action}")
    assert r.status == 200, r
    return r.json["entries"]


def killed_request(node, method, path, body):
    try:
        r = ra(node, method, path, body)
    except Exception:  # the seam's _exit(9): the connection closes unanswered
        r = None
    assert r is None, f"the node answered {r!r}: the kill seam did not fire"
    node.proc.wait(10)
    node.exit_codes.append("killed-by-seam")


def test_a_change_on_one_node_serves_on_the_other(redis, ankusa):
    a = ankusa(config=rconfig(redis), name="a")
    b = ankusa(config=rconfig(redis), name="b")
    assert hook(a) == 404 and hook(b) == 404
    r = ra(a, "POST", "/admin/routes", {"id": "demo", "path": "/webhooks/demo", "methods": ["POST"]})
    assert r.status == 201, r
    assert hook(a) == 201
    # b learns it from the broadcast: tick_ms is a minute
    assert within(lambda: hook(b) == 201, 1.5, "b serves the route created on a") < 1.5
    assert ra(b, "GET", "/admin/routes/demo").json["path"] == "/webhooks/demo"
    # an update on b serves on a
    r = ra(b, "PATCH", "/admin/routes/demo", {"methods": ["PUT"]})
    assert r.status == 200, r
    within(lambda: hook(a) == 405, 1.5, "a serves b's update")
    # the global IP rules propagate
    r = ra(a, "PUT", "/admin/ip-rules", {"default": "deny", "rules": [{"action": "allow", "cidr": "10.0.0.0/8"}]})
    assert r.status == 200, r
    within(lambda: ra(b, "GET", "/admin/ip-rules").json["default"] == "deny", 1.5, "b has a's IP rules")
    assert hook(b) == 403
    r = ra(b, "PUT", "/admin/ip-rules", {"default": "allow", "rules": []})
    assert r.status == 200, r
    within(lambda: hook(a) == 405, 1.5, "a has b's IP rules")
    # a delete on a: b answers 404
    assert ra(a, "DELETE", "/admin/routes/demo").status == 204
    within(lambda: hook(b) == 404, 1.5, "b stops serving it")
    assert ra(b, "GET", "/admin/routes/demo").status == 404
    assert sorted(redis.keys(f"{NS}:*")) == [f"{NS}:items", f"{NS}:version"]
    assert redis.cmd("HKEYS", f"{NS}:items") == [b"ip_rules"]
    for n in (a, b):
        assert PASSWORD not in n.log_text()
    rows = audit(a, "route.create")
    assert [x["outcome"] for x in rows] == ["ok"] and rows[0]["detail"]["settle"] == "subject"


def test_the_tick_catches_a_missed_broadcast(redis, ankusa):
    a = ankusa(config=rconfig(redis, tick_ms=400), name="a")
    assert ra(a, "POST", "/admin/routes", {"id": "demo", "path": "/webhooks/demo"}).status == 201
    b = ankusa(config=rconfig(redis, tick_ms=400), name="b")
    assert hook(b) == 201  # its boot read it
    # a change by hand with no PUBLISH: only the tick can see it
    assert redis.cmd("HDEL", f"{NS}:items", "route:demo") == 1
    redis.cmd("INCR", f"{NS}:version")
    for n in (a, b):
        within(lambda: hook(n) == 404, 3.0, f"{n.name} sees the route gone by its tick")


def test_a_write_from_a_stale_cache_is_a_conflict(redis, ankusa):
    a = ankusa(config=rconfig(redis), name="a")
    assert ra(a, "POST", "/admin/routes", {"id": "demo", "path": "/webhooks/demo"}).status == 201
    # another writer changed it, unannounced: a's cache is behind
    redis.cmd("HSET", f"{NS}:items", "route:demo", json.dumps(
        {"id": "demo", "path": "/webhooks/demo", "methods": ["GET"], "enabled": True, "ip_rules": None,
         "metadata": {}, "tenant": None}))
    r = ra(a, "PATCH", "/admin/routes/demo", {"enabled": False})
    assert r.status == 409 and r.json["error"] == "route_conflict", r
    assert json.loads(redis.cmd("HGET", f"{NS}:items", "route:demo"))["enabled"] is True  # nothing changed
    # the refused write reloads a: the next one, from the new state, goes through
    within(lambda: ra(a, "GET", "/admin/routes/demo").json["methods"] == ["GET"], 3.0, "a reloaded")
    assert ra(a, "PATCH", "/admin/routes/demo", {"enabled": False}).status == 200
    assert [x["outcome"] for x in audit(a, "route.update")][:2] == ["ok", "failed"] or \
        sorted(x["outcome"] for x in audit(a, "route.update")) == ["failed", "ok"]


def test_kill_between_pending_row_and_redis_write_settles_failed(redis, ankusa):
    a = ankusa(config=rconfig(redis), name="a", env={"ANKUSA_TEST_ROUTE_STORE_KILL_AT": "after_pending"})
    killed_request(a, "POST", "/admin/routes", {"id": "never", "path": "/webhooks/demo"})
    assert redis.cmd("HGETALL", f"{NS}:items") == []
    a.env = {}
    a.start()
    wait_until(lambda: audit(a, "route.create") and audit(a, "route.create")[0]["outcome"] != "pending", timeout=5,
               what="settled")
    row = audit(a, "route.create")[0]
    assert row["outcome"] == "failed", row
    assert row["after_hash"] is None
    assert ra(a, "GET", "/admin/routes/never").status == 404
    assert "a change to a shared route left pending by a stop is settled" in a.log_text()


def test_kill_after_the_redis_write_settles_ok(redis, ankusa):
    a = ankusa(config=rconfig(redis), name="a", env={"ANKUSA_TEST_ROUTE_STORE_KILL_AT": "after_write"})
    killed_request(a, "POST", "/admin/routes", {"id": "landed", "path": "/webhooks/demo"})
    a.env = {}
    a.start()
    assert hook(a) == 201
    wait_until(lambda: audit(a, "route.create")[0]["outcome"] != "pending", timeout=5, what="settled")
    row = audit(a, "route.create")[0]
    assert row["outcome"] == "ok", row
    assert row["after_hash"] and row["before_hash"] is None


def test_a_route_changed_meanwhile_settles_interrupted(redis, ankusa):
    a = ankusa(config=rconfig(redis), name="a")
    b = ankusa(config=rconfig(redis), name="b")
    assert ra(a, "POST", "/admin/routes", {"id": "demo", "path": "/webhooks/demo"}).status == 201
    within(lambda: hook(b) == 201, 1.5, "b serves it")
    a.stop()
    a.env = {"ANKUSA_TEST_ROUTE_STORE_KILL_AT": "after_pending"}
    a.start()
    killed_request(a, "PATCH", "/admin/routes/demo", {"methods": ["PUT"]})
    # meanwhile b changes it another way
    assert ra(b, "PATCH", "/admin/routes/demo", {"methods": ["GET"]}).status == 200
    a.env = {}
    a.start()
    wait_until(lambda: audit(a, "route.update")[0]["outcome"] != "pending", timeout=5, what="settled")
    row = audit(a, "route.update")[0]
    assert row["outcome"] == "interrupted", row
    assert row["detail"]["current"] == "changed"
    assert row["detail"]["intended_after_hash"] not in (None, row["after_hash"])
    assert hook(a) == 405  # b's change serves
    assert "changed meanwhile" in a.log_text()


def test_redis_down_writes_503_and_the_cache_serves(redis, ankusa):
    a = ankusa(config=rconfig(redis), name="a")
    assert ra(a, "POST", "/admin/routes", {"id": "demo", "path": "/webhooks/demo"}).status == 201
    redis.stop()
    r = ra(a, "POST", "/admin/routes", {"id": "other", "path": "/webhooks/other"})
    assert r.status == 503 and r.json["error"] == "store_unavailable", r
    assert ra(a, "DELETE", "/admin/routes/demo").status == 503
    assert hook(a) == 201
    assert ra(a, "GET", "/admin/routes/other").status == 404
    # the first write found the connection closed under it (written or not: pending until
    # the next load); the second was never sent
    assert audit(a, "route.create")[0]["outcome"] in ("pending", "failed")
    assert audit(a, "route.delete")[0]["outcome"] == "failed"
    # back (empty: this test's Redis keeps nothing on disk): the load settles the row
    redis.restart()
    within(lambda: audit(a, "route.create")[0]["outcome"] == "failed", 5.0, "the pending row settled")
    within(lambda: hook(a) == 404, 5.0, "the empty store served")
    assert ra(a, "POST", "/admin/routes", {"id": "other", "path": "/webhooks/demo"}).status == 201
    assert hook(a) == 201
    assert PASSWORD not in a.log_text()


def test_redis_down_at_boot_then_up_and_the_seeds(tmp_path, ankusa):
    r = RedisServer(tmp_path / "redis", password=PASSWORD)
    try:
        a = ankusa(config=rconfig(r, tick_ms=300, seed=[{"id": "seeded", "path": "/webhooks/demo"}]), name="a")
        assert hook(a) == 503  # not a false 404
        assert ra(a, "POST", "/admin/routes", {"id": "x", "path": "/x"}).status == 503
        assert "the shared route store is unavailable at start" in a.log_text()
        r.start()
        within(lambda: hook(a) == 201, 5.0, "loaded, the seed created")
        assert json.loads(r.cmd("HGET", f"{NS}:items", "route:seeded"))["path"] == "/webhooks/demo"
        # a seed present in Redis is never overwritten
        assert ra(a, "PATCH", "/admin/routes/seeded", {"methods": ["GET"]}).status == 200
        b = ankusa(config=rconfig(r, seed=[{"id": "seeded", "path": "/webhooks/demo"}]), name="b")
        assert hook(b) == 405
        for n in (a, b):
            assert PASSWORD not in n.log_text()
    finally:
        r.close()


def test_print_config_hides_the_url(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"routes": {"enabled": True, "store": {"url": f"redis://:{PASSWORD}@cache:6379/1"}},
                               "sources": {"x": {"sinks": [{"type": "log"}]}}}))
    p = run_cli("print-config", "--config", str(cfg))
    assert p.returncode == 0, p.stderr
    assert PASSWORD not in p.stdout
    assert json.loads(p.stdout)["routes"]["store"]["type"] == "redis"
    p = run_cli("check-config", "--config", str(cfg))
    assert p.returncode == 0 and PASSWORD not in p.stdout + p.stderr, p
