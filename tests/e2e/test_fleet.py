"""Fleet-scoped admission through Redis: several nodes share one tenant quota
(rate_limits.scope: fleet) and one dedupe window (dedupe.scope: fleet) through a
redis-server the test starts on a free loopback port (redis_server.RedisServer). A slow
(SIGSTOP) or dead (SIGKILL) Redis never costs an answer: each hook waits at most
fleet.timeout_ms for Redis, the breaker opens and the node answers node-local
(degraded) until Redis is back. The settle queue (claims confirmed after the commit) is
bounded and dropping from it loses no hook. Config errors name the key; the store's
password is never printed.

Black-box: real binaries, HTTP, /metrics, /v1/fleet, and Redis read back with KEYS/PTTL."""
import json
import threading
import time
import uuid

import pytest

from helpers import LOG, SANITIZER, SLOW, admin_json, http_request, run_cli, stored_hooks, wait_until
from redis_server import RedisServer

# one Redis call's budget in the tests that are not about timeouts: wide, so that a busy
# test host does not turn a healthy Redis into node-local answers
EASY_TIMEOUT_MS = 1000 if SANITIZER else 250
LAT_SLACK = 1.0 if SANITIZER else 0.2  # on top of timeout_ms + the normal max latency


# --------------------------------------------------------------------------- fixtures/helpers

@pytest.fixture
def redis(tmp_path):
    """A started redis-server (no password); stopped by PID after the test."""
    r = RedisServer(tmp_path / "redis")
    r.start()
    yield r
    r.close()


def fleet_config(redis, rate_scope="fleet", dedupe_scope="fleet", acme=None, **fleet):
    """Config overrides for a fleet node: acme = {rate, burst} of tenant acme, fleet: extra
    keys of the fleet section (timeout_ms, breaker_*, ...)."""
    f = {"store": {"url": redis.url()}, "timeout_ms": EASY_TIMEOUT_MS}
    store = fleet.pop("store", None)
    if store:
        f["store"].update(store)
    f.update(fleet)
    cfg = {"rate_limits": {"scope": rate_scope}, "dedupe": {"scope": dedupe_scope}, "fleet": f,
           "sources": {"gh": {"tenant": "acme", "dedupe": "github", "sinks": LOG}}}
    if acme is not None:
        cfg["rate_limits"]["tenants"] = {"acme": dict(acme)}
    return cfg


def gh(node, key, body=b'{"zen":"x"}', timeout=30.0):
    """POST to source gh (dedupe: github) with X-GitHub-Delivery: key."""
    return node.post("/webhooks/gh", body, {"Content-Type": "application/json", "X-GitHub-Delivery": key},
                     timeout=timeout)


def new_hook(r):
    assert r.status == 201, r
    j = r.json
    assert j.get("status") == "accepted" and "duplicate" not in j, f"expected a new hook: {j}"
    return j["id"]


def retry_after(r):
    ra = r.headers.get("retry-after")
    assert ra is not None and ra.isdigit() and int(ra) >= 1, f"Retry-After must be whole seconds >= 1: {r!r} {r.headers}"
    return int(ra)


def assert_pending(r):
    assert r.status == 409 and r.json == {"error": "dedupe_pending"}, r
    retry_after(r)


def duplicate_on(node, key, first, within=2.0):
    """POST key to node until it answers 201 duplicate of `first`; 409 dedupe_pending is
    retried for up to `within` seconds (the first node's claim settling)."""
    deadline = time.monotonic() + within * SLOW
    while True:
        r = gh(node, key, body=b'{"zen":"again"}')
        if r.status == 409:
            assert_pending(r)
            assert time.monotonic() < deadline, f"{node.name} still answers 409 dedupe_pending after {within} s"
            time.sleep(0.05)
            continue
        assert r.status == 201, r
        assert r.json == {"status": "accepted", "id": first, "duplicate": True}, \
            f"{node.name}: expected a duplicate of {first}, got {r.json}"
        return r


def fleet_state(node):
    r = node.admin("/v1/fleet")
    assert r.status == 200, r
    return r.json


def m(node, name, **labels):
    return node.metrics().value(name, instance="default", **labels)


def drive(targets, seconds, threads_per_target=3, make=None):
    """Post from threads_per_target threads per (node, path, headers_fn) target as fast as
    they can for `seconds`. make(i) -> (body, headers) per request (unique per call).
    Returns (answers [(target index, Resp | Exception, latency s)], elapsed s)."""
    out, lock = [], threading.Lock()
    counter = [0]
    start = time.monotonic()
    deadline = start + seconds

    def worker(ti):
        node, path = targets[ti]
        while time.monotonic() < deadline:
            with lock:
                counter[0] += 1
                i = counter[0]
            body, hdrs = make(i) if make else (b'{"n":%d}' % i, {})
            h = {"Content-Type": "application/json"}
            h.update(hdrs)
            t0 = time.monotonic()
            try:
                r = http_request(node.http_port, "POST", path, body=body, headers=h, timeout=30)
            except Exception as e:  # noqa: BLE001 - classified by the caller
                r = e
            lat = time.monotonic() - t0
            with lock:
                out.append((ti, r, lat))

    ts = [threading.Thread(target=worker, args=(ti,)) for ti in range(len(targets))
          for _ in range(threads_per_target)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return out, time.monotonic() - start


def statuses(answers):
    return sorted({getattr(r, "status", type(r).__name__) for _, r, _ in answers}, key=str)


def count(answers, status):
    return sum(1 for _, r, _ in answers if getattr(r, "status", None) == status)


class Watcher:
    """Polls a node's GET /v1/fleet every 50 ms in a thread and keeps what it saw."""

    def __init__(self, node):
        self.node, self.seen, self.stop_ev = node, [], threading.Event()
        self.t = threading.Thread(target=self._run)

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                r = self.node.admin("/v1/fleet", timeout=5)
                if r.status == 200:
                    self.seen.append(r.json)
            except OSError:
                pass
            self.stop_ev.wait(0.05)

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop_ev.set()
        self.t.join(10)


def unique_gh(prefix):
    return lambda i: (b'{"n":%d}' % i, {"X-GitHub-Delivery": f"{prefix}-{i}-{uuid.uuid4().hex[:8]}"})


# --------------------------------------------------------------------------- 1. one tenant limit

RATE, BURST, WINDOW, SLACK = 20, 10, 3.0, 3


def _limit_drive(nodes):
    targets = [(n, "/webhooks/acme_src") for n in nodes]
    answers, elapsed = drive(targets, WINDOW, threads_per_target=3)
    bad = [r for _, r, _ in answers if getattr(r, "status", None) not in (201, 429)]
    assert not bad, f"answers other than 201/429: {bad[:5]} (statuses {statuses(answers)})"
    for _, r, _ in answers:
        if r.status == 429:
            assert r.json == {"error": "rate_limited"}, r
            retry_after(r)
    return answers, elapsed


def test_one_tenant_limit_across_two_nodes(redis, ankusa):
    cfg = fleet_config(redis, dedupe_scope="node", acme={"rate": RATE, "burst": BURST})
    a, b = ankusa(config=cfg, name="a"), ankusa(config=cfg, name="b")
    answers, elapsed = _limit_drive([a, b])
    ok = count(answers, 201)
    per_node = [sum(1 for ti, r, _ in answers if ti == k and r.status == 201) for k in (0, 1)]
    fallback = [m(n, "ankusa_fleet_fallback_total", kind="rate_limit") for n in (a, b)]
    bound = RATE * elapsed + BURST + SLACK
    info = (f"{len(answers)} requests in {elapsed:.2f} s: {ok} accepted ({per_node} per node), "
            f"{count(answers, 429)} refused; bound {bound:.1f}; fallback_total{{rate_limit}} per node {fallback}")
    assert ok <= bound, "the fleet accepted more than one tenant quota: " + info
    assert ok >= 0.6 * RATE * WINDOW, "the fleet refused far more than the quota explains: " + info
    assert count(answers, 429) > 0, "nothing was refused: " + info
    assert all(p > 0 for p in per_node), "one node took nothing: " + info
    # the buckets live in Redis under the namespace
    keys = redis.keys("*")
    assert keys, "no key in Redis after a fleet-limited drive"
    assert all(k.startswith("ankusa:fleet") for k in keys), f"keys outside the default namespace: {keys[:10]}"
    for n in (a, b):
        st = fleet_state(n)
        assert st["rate_limits_scope"] == "fleet" and st["breaker"] == "closed" and st["degraded"] == [], st


def test_node_scope_contrast_each_node_has_its_own_limit(ankusa):
    """The same drive with scope node (no fleet store): the fleet takes about twice the
    quota, more than the bound test 1 holds the fleet to (so that test can fail)."""
    cfg = {"rate_limits": {"scope": "node", "tenants": {"acme": {"rate": RATE, "burst": BURST}}}}
    a, b = ankusa(config=cfg, name="a"), ankusa(config=cfg, name="b")
    answers, elapsed = _limit_drive([a, b])
    ok = count(answers, 201)
    bound = RATE * elapsed + BURST + SLACK
    assert ok > bound, (f"with scope node two nodes took only {ok} in {elapsed:.2f} s (bound of one quota "
                        f"{bound:.1f}): the drive is too weak to tell the scopes apart; {statuses(answers)}")
    assert count(answers, 429) > 0, "the per-node limit never refused"


# --------------------------------------------------------------------------- 2. one dedupe window

def test_one_dedupe_window_across_two_nodes(redis, ankusa):
    cfg = fleet_config(redis, rate_scope="node")
    a, b = ankusa(config=cfg, name="a"), ankusa(config=cfg, name="b")

    # A stores it, B answers with A's id and stores nothing
    id1 = new_hook(gh(a, "evt-seq-1"))
    duplicate_on(b, "evt-seq-1", id1)
    assert a.hook(id1)["id"] == id1
    assert b.admin(f"/v1/hooks/{id1}").status == 404, "B holds A's hook"
    assert wait_until(lambda: stored_hooks(a) == 1, 5, "A to count its hook")
    assert stored_hooks(b) == 0, "B stored a duplicate"
    # and the other way round; A's own repeat is a duplicate too
    id2 = new_hook(gh(b, "evt-seq-2"))
    duplicate_on(a, "evt-seq-2", id2)
    duplicate_on(a, "evt-seq-1", id1)

    # the same event posted to both at the same moment, 50 times
    n_events = 50
    results = {}

    def pair(k):
        barrier = threading.Barrier(2)
        got = {}

        def one(name, node):
            barrier.wait(5)
            try:
                got[name] = gh(node, k, body=b'{"from":"%s"}' % name.encode())
            except Exception as e:  # noqa: BLE001
                got[name] = e
        ts = [threading.Thread(target=one, args=(nm, nd)) for nm, nd in (("a", a), ("b", b))]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        return got

    for i in range(n_events):
        results[f"evt-race-{i}"] = pair(f"evt-race-{i}")

    nodes = {"a": a, "b": b}
    winners, pending = {}, []
    for k, got in results.items():
        for name in ("a", "b"):
            assert not isinstance(got.get(name), Exception), f"{k} on {name}: {got.get(name)!r}"
        fresh = [nm for nm in ("a", "b") if got[nm].status == 201 and "duplicate" not in got[nm].json]
        assert len(fresh) == 1, f"{k}: expected exactly one node to store it, got {got}"
        win = fresh[0]
        other = "b" if win == "a" else "a"
        wid = got[win].json["id"]
        ro = got[other]
        if ro.status == 409:
            assert_pending(ro)
            pending.append((k, other, wid))
        else:
            assert ro.status == 201 and ro.json == {"status": "accepted", "id": wid, "duplicate": True}, \
                f"{k}: {win} stored {wid}, {other} answered {ro!r}"
        winners[k] = (win, wid)
    for k, (win, wid) in winners.items():
        assert nodes[win].admin(f"/v1/hooks/{wid}").status == 200, f"{k}: {wid} not stored on {win}"
    # a node that answered 409 answers the duplicate once the claim settled
    for k, other, wid in pending[:10]:
        duplicate_on(nodes[other], k, wid)
    wins = [w for w, _ in winners.values()]
    total = 2 + n_events

    deadline = time.monotonic() + 5 * SLOW
    while stored_hooks(a) + stored_hooks(b) != total and time.monotonic() < deadline:
        time.sleep(0.05)
    sa, sb = stored_hooks(a), stored_hooks(b)
    assert sa + sb == total, (f"stored {sa} on A + {sb} on B, expected {total}; "
                              f"A won {wins.count('a')}, B won {wins.count('b')}, {len(pending)} answered 409")
    # every dedupe claim in Redis expires (pending_ttl_ms, then the dedupe TTL)
    keys = redis.keys("*")
    assert keys and all(k.startswith("ankusa:fleet") for k in keys), keys[:10]
    no_ttl = [k for k in keys if redis.cmd("PTTL", k) < 0]
    assert not no_ttl, f"dedupe keys without an expiry: {no_ttl[:10]}"


# --------------------------------------------------------------------------- 3./4. Redis slow or dead

# windows of 500 ms: the breaker counts per window, and a window that began with the
# baseline's fast calls would need that many failures more before its rate reaches 0.5
BREAKER = {"timeout_ms": 50, "breaker_min_calls": 10, "breaker_failure_rate": 0.5, "breaker_open_ms": 1000,
           "breaker_window_ms": 500}
GENEROUS = {"rate": 100000, "burst": 100000}


def _outage_drive(node, seconds, prefix, budget):
    """Drive node's gh source from 4 threads; every answer 201 within budget s."""
    answers, elapsed = drive([(node, "/webhooks/gh")], seconds, threads_per_target=4, make=unique_gh(prefix))
    bad = [(r, round(lat, 3)) for _, r, lat in answers if getattr(r, "status", None) != 201]
    assert not bad, f"{len(bad)} of {len(answers)} answers were not 201: {bad[:5]}"
    slow = sorted((lat for _, _, lat in answers), reverse=True)
    assert slow[0] <= budget, (f"{sum(1 for x in slow if x > budget)} of {len(answers)} answers slower than "
                               f"{budget * 1000:.0f} ms; slowest {[round(x * 1000) for x in slow[:5]]} ms")
    assert len(answers) >= 10, f"only {len(answers)} requests in {elapsed:.1f} s"
    return answers


def _baseline(node, prefix):
    answers, _ = drive([(node, "/webhooks/gh")], 1.0, threads_per_target=4, make=unique_gh(prefix))
    assert all(getattr(r, "status", None) == 201 for _, r, _ in answers), statuses(answers)
    return max(lat for _, _, lat in answers)


def _assert_opened(node, watcher, before):
    seen = watcher.seen
    assert seen, "no /v1/fleet answer during the outage"
    opened = [s for s in seen if s["breaker"] == "open"]
    assert opened, f"the breaker never showed open: {sorted({s['breaker'] for s in seen}, key=str)}"
    both = [s for s in opened if {"dedupe", "rate_limit"} <= set(s["degraded"])]
    assert both, f"breaker open but degraded was {[s['degraded'] for s in opened][:5]}"
    mt = node.metrics()
    for kind in ("dedupe", "rate_limit"):
        fb = mt.value("ankusa_fleet_fallback_total", instance="default", kind=kind)
        assert fb > before[kind], f"fallback_total{{{kind}}} did not grow: {before[kind]} -> {fb}"
        assert mt.value("ankusa_fleet_limiter_degraded", instance="default", kind=kind) == 1, \
            f"degraded{{{kind}}} not 1 while Redis is out"
    assert mt.value("ankusa_fleet_breaker_transitions_total", instance="default", state="open") >= 1


def _wait_recovered(node, prefix, ok_before):
    """Keep posting (slowly) until the breaker closes, nothing is degraded and ok calls grow."""
    stop, errs = threading.Event(), []

    def feeder():
        i = 0
        while not stop.is_set():
            i += 1
            try:
                r = gh(node, f"{prefix}-{i}-{uuid.uuid4().hex[:8]}", timeout=10)
                if r.status != 201:
                    errs.append(r)
            except OSError as e:
                errs.append(e)
            stop.wait(0.02)
    t = threading.Thread(target=feeder)
    t.start()
    try:
        def healed():
            st = fleet_state(node)
            if st["breaker"] != "closed" or st["degraded"] != [] or st["connection"] != "up":
                return None
            mt = node.metrics()
            if any(mt.value("ankusa_fleet_limiter_degraded", instance="default", kind=k) != 0
                   for k in ("dedupe", "rate_limit")):
                return None
            ok = mt.value("ankusa_fleet_calls_total", instance="default", result="ok")
            return st if ok > ok_before else None
        try:
            wait_until(healed, 8, "the breaker to close after Redis came back")
        except AssertionError:
            raise AssertionError(f"not healed: /v1/fleet {fleet_state(node)}; calls "
                                 f"{node.metrics().series('ankusa_fleet_calls_total')}")
    finally:
        stop.set()
        t.join(30)
    assert not errs, f"answers other than 201 while recovering: {errs[:5]}"


def _fallback_now(node):
    mt = node.metrics()
    return {k: mt.value("ankusa_fleet_fallback_total", instance="default", kind=k) for k in ("dedupe", "rate_limit")}


def test_redis_paused_under_load_answers_stay_fast_and_the_breaker_opens_and_closes(redis, ankusa):
    node = ankusa(config=fleet_config(redis, acme=GENEROUS, **BREAKER))
    normal = _baseline(node, "base")
    budget = 0.050 + normal + LAT_SLACK
    before = _fallback_now(node)
    assert fleet_state(node)["breaker"] == "closed"
    redis.pause()
    try:
        with Watcher(node) as w:
            _outage_drive(node, 3.0, "paused", budget)
        _assert_opened(node, w, before)
        mt = node.metrics()
        assert (mt.value("ankusa_fleet_calls_total", instance="default", result="timeout") +
                mt.value("ankusa_fleet_calls_total", instance="default", result="unavailable")) > 0, \
            mt.series("ankusa_fleet_calls_total")
        ok_before = mt.value("ankusa_fleet_calls_total", instance="default", result="ok")
    finally:
        redis.resume()
    _wait_recovered(node, "resumed", ok_before)
    # fleet dedupe works again on this node: its own repeat is a duplicate
    k = f"after-{uuid.uuid4().hex}"
    first = new_hook(gh(node, k))
    duplicate_on(node, k, first)


def test_redis_killed_under_load_then_restarted_on_the_same_port(redis, ankusa):
    cfg = fleet_config(redis, acme=GENEROUS, **BREAKER)
    a, b = ankusa(config=cfg, name="a"), ankusa(config=cfg, name="b")
    normal = _baseline(a, "base")
    budget = 0.050 + normal + LAT_SLACK
    before = _fallback_now(a)
    redis.kill9()
    with Watcher(a) as w:
        _outage_drive(a, 3.0, "dead", budget)
    _assert_opened(a, w, before)
    ok_before = a.metrics().value("ankusa_fleet_calls_total", instance="default", result="ok")
    st = fleet_state(a)
    assert st["connection"] in ("down", "connecting"), f"Redis is dead but connection is {st}"
    redis.restart()
    _wait_recovered(a, "restarted", ok_before)
    wait_until(lambda: fleet_state(b)["connection"] == "up" and fleet_state(b)["breaker"] == "closed",
               8, f"node b to reconnect: {fleet_state(b)}")
    # the A-then-B check of test 2 passes again
    k = f"after-restart-{uuid.uuid4().hex}"
    first = new_hook(gh(a, k))
    duplicate_on(b, k, first)
    assert b.admin(f"/v1/hooks/{first}").status == 404, "B stored A's event"


# --------------------------------------------------------------------------- 5. settle queue overflow

def test_settle_queue_overflow_drops_settles_but_no_hook(redis, ankusa):
    node = ankusa(config=fleet_config(redis, rate_scope="node"),
                  env={"ANKUSA_TEST_FLEET_SETTLE_MAX": "4", "ANKUSA_TEST_FLEET_SETTLE_INTERVAL_MS": "2000"})
    st = fleet_state(node)
    assert st["settle_queue_max"] == 4, st
    ids = []
    for i in range(30):
        ids.append(new_hook(gh(node, f"settle-{i}")))
    assert len(set(ids)) == 30, "ids repeat"
    dropped = wait_until(lambda: m(node, "ankusa_fleet_settle_dropped_total") or None, 5,
                         "settle_dropped_total > 0")
    assert dropped > 0
    assert m(node, "ankusa_fleet_settle_queue") <= 4
    st = fleet_state(node)
    assert 0 <= st["settle_queue"] <= 4, st
    missing = [i for i in ids if node.admin(f"/v1/hooks/{i}").status != 200]
    assert not missing, f"{len(missing)} of 30 accepted hooks are not stored: {missing[:5]} (dropped {dropped})"
    wait_until(lambda: stored_hooks(node) == 30, 5, f"30 stored hooks (have {stored_hooks(node)})")


# --------------------------------------------------------------------------- 5b. settles: release, refund

def claim_keys(redis):
    return sorted(k.decode() if isinstance(k, bytes) else k for k in redis.keys("ankusa:fleet:*:d:*"))


def test_a_refused_hook_releases_its_fleet_claim(redis, ankusa):
    """dedupe fleet, quota node-local (burst 1, nearly no refill): the second event is
    claimed in Redis, then refused 429 by this node's own quota; its claim is released, so
    the provider's retry on another node is admitted at once (not 409 for pending_ttl_ms)."""
    a = ankusa(config=fleet_config(redis, rate_scope="node", acme={"rate": 0.01, "burst": 1}), name="a")
    b = ankusa(config=fleet_config(redis, rate_scope="node"), name="b")
    first = new_hook(gh(a, "rel-1"))
    wait_until(lambda: len(claim_keys(redis)) == 1, 5 * SLOW, "the first claim is committed")
    r = gh(a, "rel-2")
    assert r.status == 429 and r.json == {"error": "rate_limited"}, r
    # released: only the first event's key is left, and it is committed under its id
    wait_until(lambda: len(claim_keys(redis)) == 1, 5 * SLOW, f"one claim left, have {claim_keys(redis)}")
    (k,) = claim_keys(redis)
    v = redis.cmd("GET", k)
    v = v.decode() if isinstance(v, bytes) else v
    assert v == f"c:{first}", v
    new_hook(gh(b, "rel-2"))  # admitted on b: no pending claim of a's is left in the way
    assert m(a, "ankusa_fleet_settles_total", result="ok") >= 2


def test_a_hook_that_fails_its_commit_gives_its_fleet_charge_back(redis, ankusa):
    """rate and dedupe fleet, burst 3, nearly no refill. One commit is held 600 ms (the test
    seam), two requests queued behind it pass their 100 ms record deadline and get 503:
    both were charged and claimed in Redis, and both are given back. So two more hooks
    pass after them (without the refund the bucket would be empty), and the two events'
    claims are gone (a retry is admitted, not 409)."""
    node = ankusa(config=fleet_config(redis, acme={"rate": 0.01, "burst": 3}),
                  env={"ANKUSA_TEST_COMMIT_DELAY_MS": "600", "ANKUSA_TEST_RECORD_DEADLINE_MS": "100"})
    out = {}

    def one(key, delay):
        time.sleep(delay)
        out[key] = gh(node, key)

    ts = [threading.Thread(target=one, args=("ref-plug", 0))] + \
         [threading.Thread(target=one, args=(f"ref-{i}", 0.2)) for i in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    new_hook(out["ref-plug"])
    for k in ("ref-1", "ref-2"):
        r = out[k]
        assert r.status == 503 and r.json == {"error": "store_unavailable"}, (k, r)
    wait_until(lambda: len(claim_keys(redis)) == 1, 5 * SLOW, f"the failed hooks' claims released: {claim_keys(redis)}")
    # the two charges came back: the tenant has two hooks left of its burst of 3
    got = [gh(node, k) for k in ("ref-1", "ref-2")]
    for r in got:
        new_hook(r)
    r = gh(node, "ref-3")
    assert r.status == 429 and r.json == {"error": "rate_limited"}, r


def test_a_claim_of_a_node_killed_mid_commit_expires(redis, ankusa):
    """Node a claims an event and is killed -9 while its commit is held (the test seam):
    the hook was never acked, and its claim is pending in Redis. Node b answers the
    provider's retry 409 dedupe_pending until fleet.pending_ttl_ms ends, then stores it:
    a crashed node's claim frees itself, and the event is stored exactly once."""
    ttl_ms = 1500
    a = ankusa(config=fleet_config(redis, rate_scope="node", pending_ttl_ms=ttl_ms),
               env={"ANKUSA_TEST_COMMIT_DELAY_MS": "5000"}, name="a")
    b = ankusa(config=fleet_config(redis, rate_scope="node", pending_ttl_ms=ttl_ms), name="b")
    out = []
    t = threading.Thread(target=lambda: out.append(_try(lambda: gh(a, "crash-1", timeout=10))))
    t.start()
    wait_until(lambda: len(claim_keys(redis)) == 1, 5 * SLOW, "a's claim is in Redis")
    t_claim = time.monotonic()
    a.kill9()
    t.join(15)
    assert out and not (hasattr(out[0], "status") and out[0].status == 201), f"a acked a hook it had not stored: {out}"
    r = gh(b, "crash-1")
    assert_pending(r)
    while True:
        r = gh(b, "crash-1")
        if r.status != 409:
            break
        assert time.monotonic() - t_claim < (ttl_ms / 1000 + 3) * SLOW, "the dead node's claim never expired"
        time.sleep(0.1)
    new_hook(r)
    assert time.monotonic() - t_claim >= ttl_ms / 1000 - 0.2, "admitted before the claim's TTL ran out"
    assert stored_hooks(b) == 1


def test_sigterm_while_redis_is_stopped_answers_everything_and_exits(redis, ankusa):
    """Redis stopped (SIGSTOP) with hooks in flight, then SIGTERM: every request gets an
    answer (201 node-local, or 503 draining once the writer stopped), every 201 is
    stored, and the node exits 0 within a few seconds (its last settles get 500 ms)."""
    node = ankusa(config=fleet_config(redis, timeout_ms=200, acme={"rate": 100000, "burst": 100000}))
    new_hook(gh(node, "term-0"))
    redis.pause()
    try:
        out = []
        ts = [threading.Thread(target=lambda i=i: out.append(_try(lambda: gh(node, f"term-{i}", timeout=20))))
              for i in range(1, 21)]
        for t in ts:
            t.start()
        time.sleep(0.05)
        t0 = time.monotonic()
        rc = node.stop(timeout=30)
        took = time.monotonic() - t0
        for t in ts:
            t.join(20)
    finally:
        redis.resume()
    assert rc == 0, f"exit {rc!r}"
    assert took < 5 * SLOW, f"SIGTERM took {took:.1f} s with Redis stopped"
    ok = [r for r in out if getattr(r, "status", None) == 201]
    bad = [r for r in out if getattr(r, "status", None) not in (201, 503)]
    assert not bad, f"requests without a 201 or 503: {bad[:3]}"
    for r in [x for x in out if getattr(x, "status", None) == 503]:
        assert r.json["error"] in ("draining", "store_unavailable"), r
    node.start()
    missing = [r.json["id"] for r in ok if node.admin(f"/v1/hooks/{r.json['id']}").status != 200]
    assert not missing, f"acked but not stored: {missing}"


def _try(fn):
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - the connection dies with the node
        return e


def test_a_fleet_bytes_lane_is_shared(redis, ankusa):
    """rate_limits.scope fleet with a bytes lane only: 2,000 bytes of burst, nearly no
    refill, shared by two nodes: 1,500 bytes on a, then 1,500 on b is refused (500 left),
    400 on b passes."""
    lim = {"bytes": {"rate": 1, "burst": 2000}}
    cfg = fleet_config(redis, dedupe_scope="node")
    cfg["rate_limits"]["tenants"] = {"acme": lim}
    a, b = ankusa(config=cfg, name="a"), ankusa(config=cfg, name="b")
    r = a.post("/webhooks/acme_src", b"x" * 1500, {"Content-Type": "application/octet-stream"})
    new_hook(r)
    r = b.post("/webhooks/acme_src", b"y" * 1500, {"Content-Type": "application/octet-stream"})
    assert r.status == 429 and r.json == {"error": "rate_limited"}, r
    retry_after(r)
    new_hook(b.post("/webhooks/acme_src", b"z" * 400, {"Content-Type": "application/octet-stream"}))
    assert m(b, "ankusa_fleet_calls_total", result="ok") >= 2


# --------------------------------------------------------------------------- 6. config errors, redaction

MINIMAL = "sources:\n  demo:\n    sinks:\n      - type: log\n"


def assert_invalid(p, key, *fragments):
    """Exit 78, the fixed first line, an indented detail line that names key (and fragments)."""
    assert p.returncode == 78, f"exit {p.returncode}, expected 78\nstdout: {p.stdout}\nstderr: {p.stderr}"
    lines = p.stderr.splitlines()
    assert lines and lines[0] == "ankusa: invalid configuration", p.stderr
    hit = [ln for ln in lines[1:] if ln.startswith("  ") and key in ln]
    assert hit, f"no detail line names {key!r}:\n{p.stderr}"
    for f in fragments:
        assert any(f in ln for ln in hit), f"expected {f!r} in:\n{p.stderr}"


@pytest.mark.parametrize("yaml_text,key,fragments", [
    pytest.param("rate_limits:\n  scope: fleet\n  default: {rate: 20, burst: 10}\n", "fleet.store.url", (),
                 id="rate-fleet-without-store"),
    pytest.param("dedupe:\n  scope: fleet\n", "fleet.store.url", (), id="dedupe-fleet-without-store"),
    pytest.param("dedupe:\n  scope: fleet\nfleet:\n  store:\n    url: rediss://127.0.0.1:6380/0\n",
                 "fleet.store.url", ("TLS",), id="rediss"),
    pytest.param("rate_limits:\n  scope: cluster\n", "rate_limits.scope", (), id="rate-scope-cluster"),
    pytest.param("dedupe:\n  scope: cluster\n", "dedupe.scope", (), id="dedupe-scope-cluster"),
])
def test_fleet_config_errors_name_the_key(tmp_path, yaml_text, key, fragments):
    cfg = tmp_path / "ankusa.yml"
    cfg.write_text(MINIMAL + yaml_text)
    for cmd in ("check-config", "serve"):
        assert_invalid(run_cli(cmd, "--config", cfg), key, *fragments)


def test_fleet_config_env_overrides_and_the_password_never_printed(tmp_path):
    cfg = tmp_path / "ankusa.yml"
    cfg.write_text(MINIMAL + "rate_limits:\n  scope: fleet\ndedupe:\n  scope: node\nfleet:\n  store:\n"
                   "    url: redis://:UrlPw-9f3e@127.0.0.1:6399/0\n    password: FieldPw-7a1c\n  timeout_ms: 50\n")
    p = run_cli("print-config", "--config", cfg)
    assert p.returncode == 0, p.stderr
    for secret in ("UrlPw-9f3e", "FieldPw-7a1c"):
        assert secret not in p.stdout and secret not in p.stderr, f"print-config shows {secret}"
    c = json.loads(p.stdout)
    assert c["rate_limits"]["scope"] == "fleet" and c["dedupe"]["scope"] == "node"
    assert c["fleet"]["timeout_ms"] == 50
    assert c["fleet"]["store"]["namespace"] == "ankusa:fleet", c["fleet"]

    env = {"ANKUSA_FLEET_TIMEOUT_MS": "77", "ANKUSA_RATE_LIMITS_SCOPE": "node", "ANKUSA_DEDUPE_SCOPE": "fleet",
           "ANKUSA_FLEET_STORE_URL": "redis://:EnvPw-55d2@127.0.0.1:7000/1"}
    p = run_cli("print-config", "--config", cfg, env=env)
    assert p.returncode == 0, p.stderr
    assert "EnvPw-55d2" not in p.stdout and "EnvPw-55d2" not in p.stderr, "print-config shows the env URL's password"
    assert "UrlPw-9f3e" not in p.stdout
    c = json.loads(p.stdout)
    assert (c["rate_limits"]["scope"], c["dedupe"]["scope"], c["fleet"]["timeout_ms"]) == ("node", "fleet", 77), c

    # the URL may come from the environment alone; a bad one from there is named
    bare = tmp_path / "bare.yml"
    bare.write_text(MINIMAL)
    assert_invalid(run_cli("check-config", "--config", bare, env={"ANKUSA_DEDUPE_SCOPE": "fleet"}), "fleet.store.url")
    p = run_cli("check-config", "--config", bare,
                env={"ANKUSA_DEDUPE_SCOPE": "fleet", "ANKUSA_FLEET_STORE_URL": "redis://127.0.0.1:7000/0"})
    assert p.returncode == 0, p.stderr
    assert_invalid(run_cli("check-config", "--config", bare,
                           env={"ANKUSA_DEDUPE_SCOPE": "fleet", "ANKUSA_FLEET_STORE_URL": "rediss://127.0.0.1:7000/0"}),
                   "fleet.store.url", "TLS")
    assert_invalid(run_cli("check-config", "--config", bare, env={"ANKUSA_RATE_LIMITS_SCOPE": "cluster"}),
                   "rate_limits.scope")

    # defaults: both scopes node
    p = run_cli("print-config", "--config", bare)
    assert p.returncode == 0, p.stderr
    c = json.loads(p.stdout)
    assert c["rate_limits"]["scope"] == "node" and c["dedupe"]["scope"] == "node", (c["rate_limits"], c["dedupe"])


# --------------------------------------------------------------------------- 7. GET /v1/fleet

def test_fleet_status_on_a_node_without_fleet_scopes(ankusa):
    node = ankusa()
    st = fleet_state(node)
    assert st["rate_limits_scope"] == "node" and st["dedupe_scope"] == "node", st
    assert st["store"] is None and st["connection"] is None and st["breaker"] is None, st
    assert st["degraded"] == [], st
    # hooks pass as ever
    assert node.post("/webhooks/demo", b"x").status == 201


def test_fleet_status_on_a_fleet_node_never_shows_the_password(ankusa, tmp_path):
    pw = "RedisPw-31b7"
    with RedisServer(tmp_path / "redis-auth", password=pw) as r:
        node = ankusa(config=fleet_config(r, store={"url": r.url(password=True), "namespace": "e2e:ns7"}))
        st = wait_until(lambda: (lambda s: s if s["connection"] == "up" else None)(fleet_state(node)), 10,
                        "the fleet connection to come up")
        assert st["rate_limits_scope"] == "fleet" and st["dedupe_scope"] == "fleet", st
        assert st["store"] == f"redis://127.0.0.1:{r.port}/0", st
        assert st["breaker"] == "closed" and st["degraded"] == [], st
        assert st["settle_queue_max"] == 50000 and st["settle_queue"] >= 0, st
        assert pw not in node.admin("/v1/fleet").body.decode()
        first = new_hook(gh(node, "ns-evt"))
        duplicate_on(node, "ns-evt", first)
        text = node.metrics().text
        assert pw not in text and pw not in node.log_text(), "the password leaked into metrics or the log"
        for name in ("ankusa_fleet_limiter_degraded", "ankusa_fleet_fallback_total"):
            for kind in ("rate_limit", "dedupe"):
                assert m(node, name, kind=kind) == 0, (name, kind)
        assert m(node, "ankusa_fleet_calls_total", result="ok") > 0
        for res in ("error", "timeout", "unavailable"):
            m(node, "ankusa_fleet_calls_total", result=res)  # every series is there from the start
        for state in ("open", "probing", "closed"):
            m(node, "ankusa_fleet_breaker_transitions_total", state=state)
        keys = r.keys("*")
        assert keys and all(k.startswith("e2e:ns7") for k in keys), f"keys outside the namespace: {keys[:10]}"
        node.stop()


# --------------------------------------------------------------------------- 8. forgetting buckets

def test_new_limit_forgets_the_tenants_fleet_buckets(redis, ankusa):
    # rate 0.1/s: one token back takes 10 s, so a 201 within 2 s is the forgetting
    cfg = fleet_config(redis, dedupe_scope="node", acme={"rate": 0.1, "burst": 3})
    a, b = ankusa(config=cfg, name="a"), ankusa(config=cfg, name="b")
    spent = [n.post("/webhooks/acme_src", b"spend %d" % i).status for i, n in enumerate((a, b, a))]
    assert spent == [201, 201, 201], spent
    for n in (a, b):
        r = n.post("/webhooks/acme_src", b"over")
        assert r.status == 429 and r.json == {"error": "rate_limited"}, f"{n.name}: {r!r}"
        retry_after(r)
    r = admin_json(a, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 0.1, "burst": 4})
    assert r.status == 200, r
    t0 = time.monotonic()
    tries = []

    def again():
        r = a.post("/webhooks/acme_src", b"after the new limit")
        tries.append(r.status)
        return r.status == 201
    deadline = t0 + 2.0 * SLOW
    while time.monotonic() < deadline and not again():
        time.sleep(0.1)
    assert tries and tries[-1] == 201, f"node A still refuses {time.monotonic() - t0:.1f} s after the PUT: {tries}"
    assert set(tries) <= {201, 429}, tries
