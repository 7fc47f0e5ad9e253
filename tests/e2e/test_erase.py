"""Tenant erase (docs/erase.md): DELETE /v1/tenants/{tenant}?confirm={tenant} leaves nothing
of the tenant in the store (read row by row through the store's iterator, `ankusa inspect
rows`) but its tombstone and the audit trail; a kill -9 before any stage resumes at the
next start; an attempt running while the erase starts cannot put a row back; other
tenants are untouched and still delivered; a source re-created for the tenant works."""
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from helpers import LOOPBACK, PERSISTENT_STORE, admin_json, free_ports, github_sig, http_request, run_cli, wait_until
from receiver import Receiver

FAST = {"retry": {"base_ms": 200, "max_ms": 500, "max_attempts": 50, "jitter": False}, "breaker_failures": 0,
        "attempt_timeout_ms": 10000}
# the erase waits for the reclaim pass, which waits for the archive: segments cut fast
CONFIG = dict(LOOPBACK, source_store=PERSISTENT_STORE, dispatch=FAST, storage={"roll_ms": 200, "interval_ms": 100})
GONE = "zyxgone"      # a name no key or value of the store holds by chance
KEEP = "keepco"
SECRET = "gh-erase-secret-1"


def spec(url, ordered=False):
    sink = {"type": "http", "url": url}
    if ordered:
        sink["ordered"] = True
    return {"verify": {"type": "github", "secret": SECRET}, "sinks": [sink], "dedupe": "github"}


def post(node, source, body, delivery=None):
    h = {"Content-Type": "application/json", "X-Hub-Signature-256": github_sig(SECRET, body)}
    h["X-GitHub-Delivery"] = delivery or f"d-{uuid.uuid4().hex}"
    return node.post(f"/webhooks/{source}", body, h)


def escaped(b):
    """The way `inspect rows` prints bytes."""
    return "".join(chr(c) if 0x20 <= c < 0x7f and c != 0x5c else f"\\x{c:02x}" for c in b)


def store_rows(node):
    r = run_cli("inspect", "rows", "--data-dir", str(node.data_dir))
    assert r.returncode == 0, r.stderr
    return [line for line in r.stdout.splitlines() if line]


def assert_no_trace(node, ids, bodies):
    """Every live row but the audit trail's, the archive catalogue's (segments keep an erased
    tenant's archived hooks until retention: docs/erase.md) and the tombstone: no tenant
    name, id or body."""
    rows = store_rows(node)
    assert rows, "the store holds rows (the other tenant's at least)"
    needles = [GONE] + [escaped(uuid.UUID(i).bytes) for i in ids] + [escaped(b) for b in bodies]
    tomb = 0
    for line in rows:
        cf, key = line.split("\t")[:2]
        if cf in ("audit", "archive"):  # the trail, and the catalogue of the archive's segments
            continue
        if cf == "default" and key == f"m:erased:{GONE}":
            tomb += 1
            continue
        for n in needles:
            assert n not in line, f"erased tenant's data left in the store: {line[:300]}"
    assert tomb == 1, "the tombstone is in the store"


def erase(node, tenant=GONE):
    r = admin_json(node, "DELETE", f"/v1/tenants/{tenant}?confirm={tenant}")
    assert r.status == 202, r
    return r.json


def wait_erased(node, tenant=GONE, timeout=30):
    def done():
        r = admin_json(node, "GET", f"/v1/tenants/{tenant}/erase")
        return r.status == 200 and r.json["state"] == "done" and r.json
    wait_until(done, timeout=timeout, what=f"the erase of {tenant} finished")
    return admin_json(node, "GET", f"/v1/tenants/{tenant}/erase").json


def setup_tenants(node, gone_url, keep_url, n=4, ordered=False):
    assert admin_json(node, "POST", f"/v1/tenants/{GONE}/sources",
                      dict(name="gone_src", on_verify_failure="quarantine", **spec(gone_url, ordered))).status == 201
    assert admin_json(node, "POST", f"/v1/tenants/{KEEP}/sources",
                      dict(name="keep_src", **spec(keep_url, ordered))).status == 201
    ids, bodies = [], []
    # both tenants' hooks in the same commits: their dedupe keys share records
    gone = [(f'{{"secret_payload":"erase-me-{uuid.uuid4().hex}"}}'.encode(), f"{GONE}-dk-{i}") for i in range(n)]
    with ThreadPoolExecutor(8) as ex:
        keeps = list(ex.map(lambda i: post(node, "keep_src", f'{{"keep":{i}}}'.encode(), f"keep-dk-{i}"), range(n)))
        gones = list(ex.map(lambda bd: post(node, "gone_src", bd[0], bd[1]), gone))
    for r in keeps + gones:
        assert r.status == 201, r
    for r, (b, _) in zip(gones, gone):
        ids.append(r.json["id"])
        bodies.append(b)
    # a forged one is held in the quarantine pen
    forged = f'{{"forged":"erase-me-{uuid.uuid4().hex}"}}'.encode()
    r = node.post("/webhooks/gone_src", forged, {"Content-Type": "application/json", "X-GitHub-Delivery": "f-1",
                                                 "X-Hub-Signature-256": github_sig("wrong-secret", forged)})
    assert r.status == 202, r
    assert len(admin_json(node, "GET", "/v1/quarantine").json["entries"]) == 1
    if r.json.get("id"):
        ids.append(r.json["id"])
    bodies.append(forged)
    return ids, bodies


def test_erase_leaves_no_trace_and_spares_other_tenants(ankusa):
    failing = Receiver(behavior=lambda d, n: (503, {}, 0))   # the erased tenant's rows wait for retries
    ok = Receiver()
    try:
        node = ankusa(config=CONFIG, sources={})
        ids, bodies = setup_tenants(node, failing.url, ok.url)
        ok.wait_for(lambda ds: len(ds) >= 4)
        wait_until(lambda: len(failing.snapshot()) >= 4, what="the failing sink was tried")
        assert admin_json(node, "PUT", f"/v1/tenants/{GONE}/rate-limit", {"rate": 50, "burst": 50}).status == 200
        # archived before the erase (4 hooks of each tenant; the pen holds no hook)
        wait_until(lambda: (node.metrics().get("ankusa_compact_records_total", instance="default") or 0) >= 8,
                   what="the hooks archived")
        # the confirmation is required, and a tenant-scoped principal cannot erase (route: node-wide)
        r = admin_json(node, "DELETE", f"/v1/tenants/{GONE}")
        assert r.status == 400 and r.json["error"] == "confirmation_required", r
        assert admin_json(node, "DELETE", f"/v1/tenants/{GONE}?confirm={KEEP}").status == 400
        assert admin_json(node, "GET", f"/v1/tenants/{GONE}/erase").status == 404
        p = erase(node)
        assert p["tenant"] == GONE and p["state"] == "running"
        done = wait_erased(node)
        assert done["stage"] == "done" and done["finished_at"] >= done["started_at"]
        assert done["counts"]["sources"] == 1 and done["counts"]["quarantined"] == 1, done
        assert admin_json(node, "GET", "/v1/quarantine").json["entries"] == []
        # its source is gone; the other tenant still serves and is delivered
        r = post(node, "gone_src", b'{"late":1}')
        assert r.status == 404 and r.json["error"] == "unknown_source", r
        assert post(node, "keep_src", b'{"after":1}').status == 201
        ok.wait_for(lambda ds: any(d.body == b'{"after":1}' for d in ds))
        # the other tenant's dedupe keys are kept (records shared with the erased tenant's
        # were rewritten, not dropped)
        r = post(node, "keep_src", b'{"keep":0}', "keep-dk-0")
        assert r.status == 201 and r.json.get("duplicate") is True, r
        assert done["counts"]["dedupe_keys"] == 4, done
        # an archived hook of it is 410 gone (the segment keeps it until retention); one the
        # compactor never read is simply not found
        def fetched():
            answers = [admin_json(node, "GET", f"/v1/hooks/{i}") for i in ids]
            assert all((r.status, r.json["error"]) in ((410, "gone"), (404, "hook_not_found")) for r in answers), answers
            return any(r.status == 410 for r in answers)
        # the archive cuts a segment every 200 ms: hooks it read before the erase land in one
        wait_until(fetched, timeout=10, what="an archived hook of the erased tenant answers 410")
        audit = admin_json(node, "GET", "/v1/audit?action=tenant.delete").json["entries"]
        assert len(audit) == 1 and audit[0]["subject"] == f"tenant:{GONE}", audit
        # no delivery of it after the erase
        n_failing = len(failing.snapshot())
        # a source re-created for the tenant works again (the tombstone does not block it)
        assert admin_json(node, "POST", f"/v1/tenants/{GONE}/sources",
                          dict(name="gone_src", **spec(ok.url))).status == 201
        r = post(node, "gone_src", b'{"reborn":1}', f"{GONE}-dk-0")  # its old key is forgotten
        assert r.status == 201 and "duplicate" not in r.json, r
        assert node.hook(r.json["id"])["tenant_id"] == GONE
        ok.wait_for(lambda ds: any(d.body == b'{"reborn":1}' for d in ds))
        assert admin_json(node, "DELETE", f"/v1/tenants/{GONE}/sources/gone_src?dead_letter=true").status in (204, 409)
        node.stop()
        assert len(failing.snapshot()) == n_failing
        # erase the re-created tenant again offline-checked: rows of the first erase are gone
        rows = store_rows(node)
        for line in rows:
            if line.startswith(("audit\t", "archive\t")) or f"m:erased:{GONE}" in line or "reborn" in line or "gone_src2" in line:
                continue
            for n in [escaped(uuid.UUID(i).bytes) for i in ids] + [escaped(b) for b in bodies]:
                assert n not in line, line[:300]
    finally:
        failing.close()
        ok.close()


@pytest.mark.parametrize("ordered", [False, True], ids=["unordered", "ordered"])
def test_erase_store_check_after_stop(ankusa, ordered):
    ok = Receiver()
    failing = Receiver(behavior=lambda d, n: (500, {}, 0))
    try:
        node = ankusa(config=CONFIG, sources={})
        ids, bodies = setup_tenants(node, failing.url, ok.url, ordered=ordered)
        wait_until(lambda: len(failing.snapshot()) >= 1, what="the failing sink was tried")
        if ordered:  # its lane rows wait behind the failing head
            assert any(line.split("\t")[1].startswith("o") for line in store_rows(node)
                       if line.startswith("index\t") and GONE in line)
        erase(node)
        wait_erased(node)
        assert post(node, "keep_src", b'{"after":1}').status == 201
        ok.wait_for(lambda ds: any(d.body == b'{"after":1}' for d in ds))
        node.stop()
        assert_no_trace(node, ids, bodies)
    finally:
        ok.close()
        failing.close()


@pytest.mark.parametrize("stage", ["close", "drain", "sources", "rate_limit", "hooks", "quarantine", "dedupe", "claims",
                                   "fleet", "routes", "lifecycle", "compact", "tombstone"])
def test_kill9_before_a_stage_resumes_at_boot(ankusa, stage):
    failing = Receiver(behavior=lambda d, n: (503, {}, 0))
    ok = Receiver()
    try:
        node = ankusa(config=CONFIG, sources={}, env={"ANKUSA_TEST_ERASE_PAUSE_AT": stage})
        ids, bodies = setup_tenants(node, failing.url, ok.url, n=3)
        erase(node)
        wait_until(lambda: admin_json(node, "GET", f"/v1/tenants/{GONE}/erase").json["stage"] == stage,
                   what=f"the erase held before {stage}")
        if stage in ("close", "drain", "sources"):  # closed, its sources still published: 503 tenant_erasing
            r = post(node, "gone_src", b'{"while":1}')
            assert r.status == 503 and r.json["error"] == "tenant_erasing", r
            assert r.headers.get("retry-after"), r
            assert node.metrics().value("ankusa_ingest_refused_total", instance="default",
                                        reason="tenant_erasing") == 1
        assert post(node, "keep_src", b'{"during":1}').status == 201
        node.kill9()
        node.env = {}
        node.start()
        done = wait_erased(node)
        assert done["counts"].get("hooks", 0) in (0, 3)
        assert post(node, "keep_src", b'{"after":1}').status == 201
        ok.wait_for(lambda ds: any(d.body == b'{"after":1}' for d in ds))
        assert len(admin_json(node, "GET", "/v1/audit?action=tenant.delete").json["entries"]) == 1
        node.stop()
        assert_no_trace(node, ids, bodies)
    finally:
        failing.close()
        ok.close()


def test_a_running_attempt_cannot_put_a_row_back(ankusa):
    # the sink holds its answer (a failure, which would write a retry row) while the erase runs
    slow = Receiver(behavior=lambda d, n: (500, {}, 3))
    ok = Receiver()
    try:
        node = ankusa(config=CONFIG, sources={})
        ids, bodies = setup_tenants(node, slow.url, ok.url, n=2)
        wait_until(lambda: len(slow.snapshot()) >= 1, what="an attempt is running")
        erase(node)
        done = wait_erased(node)
        # settled undelivered once the attempt ended: reclaimed already, or deleted by the erase
        assert done["counts"]["hooks"] in (0, 1, 2)
        node.stop()
        assert_no_trace(node, ids, bodies)
    finally:
        slow.close()
        ok.close()


def test_static_sources_refuse_the_erase(ankusa):
    node = ankusa()  # base config: acme_src is acme's, in the config file
    r = admin_json(node, "DELETE", "/v1/tenants/acme?confirm=acme")
    assert r.status == 409 and r.json["error"] == "tenant_has_static_sources" and r.json["sources"] == ["acme_src"], r
    assert admin_json(node, "GET", "/v1/tenants/acme/erase").status == 404


@pytest.fixture
def redis(tmp_path):
    from redis_server import RedisServer
    r = RedisServer(tmp_path / "redis")
    r.start()
    yield r
    r.close()


def test_fleet_buckets_of_the_tenant_are_deleted(ankusa, redis):
    ok = Receiver()
    try:
        # a slow refill: a bucket key lives (TTL) until it is full again, well past the test
        cfg = dict(CONFIG, rate_limits={"scope": "fleet", "default": {"rate": 0.05, "burst": 100}},
                   fleet={"store": {"url": redis.url()}})
        node = ankusa(config=cfg, sources={})
        ids, bodies = setup_tenants(node, ok.url, ok.url, n=2)
        wait_until(lambda: any(GONE in k for k in redis.keys()), what="the tenant's buckets in Redis")
        assert any(KEEP in k for k in redis.keys())
        erase(node)
        wait_erased(node)
        wait_until(lambda: not any(GONE in k for k in redis.keys()), what="the tenant's buckets deleted")
        assert any(KEEP in k for k in redis.keys()), "the other tenant's buckets stay"
        node.stop()
        assert_no_trace(node, ids, bodies)
    finally:
        ok.close()


def test_claim_objects_of_the_tenant_are_deleted(ankusa, tmp_path):
    ok = Receiver()
    try:
        root = tmp_path / "claims"
        cfg = dict(CONFIG, node={"roles": ["edge", "dispatch", "storage", "claim_check"]},
                   claim_check={"port": __import__("helpers").free_ports(1)[0], "ip": "127.0.0.1",
                                "store": {"type": "local", "root": str(root)}})
        node = ankusa(config=cfg, sources={})
        echo = tmp_path / "echo.txt"
        for t, name in ((GONE, "gone_src"), (KEEP, "keep_src")):
            s = spec(ok.url)
            # the test builds' echo sink checks in every body above 8 bytes
            s["sinks"] = [{"type": "test_echo", "path": str(echo), "inline_max_bytes": 8}]
            assert admin_json(node, "POST", f"/v1/tenants/{t}/sources", dict(name=name, **s)).status == 201
            assert post(node, name, b'{"claimed":"' + t.encode() + b'"}').status == 201
        wait_until(lambda: echo.exists() and len(echo.read_text().splitlines()) >= 2, what="both delivered by claim")

        def claim_files(t):
            return [p for p in root.rglob("*") if p.is_file() and f"tenant={t}" in str(p)]
        assert claim_files(GONE) and claim_files(KEEP)
        erase(node)
        done = wait_erased(node)
        assert done["counts"]["claims"] >= 1, done
        assert not claim_files(GONE), "no claim object of the tenant is left"
        left = [str(p) for p in root.rglob("*") if f"tenant={GONE}" in str(p)]
        assert not left, f"not even a folder named after it: {left}"
        assert claim_files(KEEP), "the other tenant's claims stay"
    finally:
        ok.close()


def raw_store_holds(node, needle):
    """Any file of the store directory (SSTs, blob files, the write-ahead log) holding needle."""
    store = node.data_dir / "default" / "store"
    return [p.name for p in store.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_erased_bodies_leave_the_store_files(ankusa):
    ok = Receiver()
    try:
        node = ankusa(config=CONFIG, sources={})
        ids, bodies = setup_tenants(node, ok.url, ok.url, n=1)
        marker = uuid.uuid4().hex.encode()
        big = b'{"big":"' + marker + b"-" + bytes(uuid.uuid4().hex, "ascii") * 160 + b'"}'  # a blob-file value
        r = post(node, "gone_src", big)
        assert r.status == 201, r
        ok.wait_for(lambda ds: any(d.body == big for d in ds))
        assert raw_store_holds(node, marker), "the body is in the store's files before the erase"
        erase(node)
        wait_erased(node)
        assert not raw_store_holds(node, marker), "the erase's compaction took it off the disk"
        node.stop()
        assert not raw_store_holds(node, marker)
        assert_no_trace(node, ids + [r.json["id"]], bodies + [big])
    finally:
        ok.close()


def test_sources_in_the_fleets_redis_store_are_deleted_for_every_node(ankusa, redis):
    """source_store.type redis: the erase deletes the tenant's sources in the fleet's store
    (a dual-write source.delete row each), so a second node sharing it stops serving them;
    the other tenant's stay."""
    from helpers import SOURCE_STORE_KEY
    ok = Receiver()
    try:
        cfg = dict(LOOPBACK, dispatch=FAST,
                   source_store={"type": "redis", "url": redis.url(), "secret_key": SOURCE_STORE_KEY, "tick_ms": 500})
        node = ankusa(config=cfg, sources={}, name="a")
        other = ankusa(config=cfg, sources={}, name="b")
        assert admin_json(node, "POST", f"/v1/tenants/{GONE}/sources", dict(name="gone_src", **spec(ok.url))).status == 201
        assert admin_json(node, "POST", f"/v1/tenants/{KEEP}/sources", dict(name="keep_src", **spec(ok.url))).status == 201
        wait_until(lambda: post(other, "gone_src", b'{"b":1}').status == 201, what="node b serves the source")
        erase(node)
        done = wait_erased(node)
        assert done["state"] == "done" and done["counts"]["sources"] == 1, done
        r = [k.decode() if isinstance(k, bytes) else k for k in redis.cmd("HKEYS", "ankusa:sources:default:items")]
        assert "gone_src" not in r and "keep_src" in r, r
        wait_until(lambda: post(other, "gone_src", b'{"b":2}').status == 404, what="node b stops serving it")
        assert post(other, "keep_src", b'{"b":3}').status == 201
        rows = admin_json(node, "GET", "/v1/audit?after_seq=0&limit=100").json["entries"]
        deletes = [r for r in rows if r["action"] == "source.delete"]
        assert len(deletes) == 1 and deletes[0]["outcome"] == "ok" and deletes[0]["actor"] == "internal", deletes
    finally:
        ok.close()


def test_erase_takes_its_routes_and_lifecycle_entities(ankusa):
    """With the route guard and lifecycle events on: the tenant's routes go (the other's
    stay and serve), the events that carried its sources and routes keep their place in
    the outbox but lose their entities, and io.ankusa.tenant.deleted is published."""
    lrx, hrx = Receiver(), Receiver()
    try:
        (rport,) = free_ports(1)
        cfg = dict(CONFIG, routes={"enabled": True, "admin": {"port": rport}},
                   lifecycle={"sinks": [{"type": "http", "url": lrx.url}]})
        node = ankusa(config=cfg, sources={})

        def routes(method, path, body=None):
            data = json.dumps(body).encode() if body is not None else None
            return http_request(rport, method, path, body=data, headers={"Content-Type": "application/json"})

        for tenant, name in ((GONE, "gone_src"), (KEEP, "keep_src")):
            assert admin_json(node, "POST", f"/v1/tenants/{tenant}/sources",
                              dict(name=name, **spec(hrx.url))).status == 201
            r = routes("POST", "/admin/routes", {"id": f"r-{name}", "path": f"/webhooks/{name}", "tenant": tenant})
            assert r.status == 201, r
        assert post(node, "gone_src", b'{"routed":1}').status == 201
        lrx.wait_for(lambda ds: len(ds) >= 4, what="the four creation events")
        erase(node)
        done = wait_erased(node)
        assert done["counts"]["routes"] == 1, done
        assert done["counts"]["lifecycle_entities"] >= 2, done  # its source's and its route's
        assert routes("GET", "/admin/routes/r-gone_src").status == 404
        assert routes("GET", "/admin/routes/r-keep_src").status == 200
        assert node.post("/webhooks/gone_src", b"{}").status == 404       # no route any more
        assert post(node, "keep_src", b'{"kept":1}').status == 201

        def types():
            return [json.loads(d.body)["type"] for d in lrx.snapshot() if d.status == 204]
        wait_until(lambda: "io.ankusa.tenant.deleted" in types(), what="the tenant.deleted event")
        evs = [json.loads(d.body) for d in lrx.snapshot() if d.status == 204]
        gone_ev = [e for e in evs if e["type"] == "io.ankusa.tenant.deleted"]
        assert len(gone_ev) == 1 and gone_ev[0]["subject"] == f"tenant:{GONE}", gone_ev
        assert gone_ev[0]["data"]["tenant"] == GONE and gone_ev[0]["data"]["entity"] is None
        assert any(e["type"] == "io.ankusa.route.deleted" and e["subject"].endswith("r-gone_src") for e in evs), \
            [e["type"] for e in evs]
        node.stop()
        # the outbox's rows: none carries the erased tenant any more; the other's keep theirs
        entity_rows = [line for line in store_rows(node) if line.split("\t")[0] == "audit"
                       and line.split("\t")[1].startswith("e")]
        assert entity_rows, "the outbox keeps its rows"
        assert not [line for line in entity_rows if GONE in line or "gone_src" in line], entity_rows
        assert any("keep_src" in line for line in entity_rows), entity_rows
    finally:
        lrx.close()
        hrx.close()
