"""The route admin API (routes.admin, 4003) through the real binary: CRUD on
/admin/routes (201, 409 duplicate_route, 400 invalid_route, PUT upsert, PATCH, 204),
listing with enabled/limit/cursor, GET|PUT /admin/ip-rules, the dry run
/admin/routes/test, /health; the admin principals and scopes (routes:read,
routes:write; 401, 403), tenant scoping (a tenant principal sees and changes only its
tenants' routes; a route of no tenant, the IP rules and the dry run need "*"); an audit
row for every change with actor and request id, none for a change that changes nothing;
max_routes (409 too_many_routes); a route acked 201 survives kill -9 with its audit row;
a change whose audit row cannot be written is not made (503); and the OpenAPI document
docs/openapi/routes.v1.yaml against the served table (src/admin/router.c) and the binary."""
import json
import re
from pathlib import Path

import yaml

from helpers import LOG, LOOPBACK, free_ports, http_request, principal, run_cli
from receiver import Receiver

TOKENS = {"root": "tok-routes-root-Hq81Lx", "acme": "tok-routes-acme-Tz27Pw", "reader": "tok-routes-read-Kc53Vn"}
ROOT = Path(__file__).resolve().parents[2]


def principals():
    return [principal("root", TOKENS["root"], ["routes:read", "routes:write", "audit:read"], "*"),
            principal("acme-ops", TOKENS["acme"], ["routes:read", "routes:write", "audit:read"], ["acme"]),
            principal("reader", TOKENS["reader"], ["routes:read"], "*")]


def rconfig(**extra):
    (rport,) = free_ports(1)
    routes = {"enabled": True, "admin": {"port": rport}}
    routes.update(extra)
    return {"routes": routes, "admin": {"principals": principals()}}


def ra(s, method, path, body=None, who="root", raw=None):
    hdrs = {}
    if who:
        hdrs["Authorization"] = f"Bearer {TOKENS[who]}"
    data = raw
    if body is not None:
        data = json.dumps(body).encode()
    if data is not None:
        hdrs["Content-Type"] = "application/json"
    return http_request(s.config["routes"]["admin"]["port"], method, path, body=data, headers=hdrs)


def audit(s, who="root"):
    r = s.admin("/v1/audit?after_seq=0&limit=1000", token=TOKENS[who])
    assert r.status == 200, r
    return r.json["entries"]


def test_crud_scopes_tenants_and_audit(ankusa):
    s = ankusa(config=rconfig())
    assert ra(s, "GET", "/admin/routes", who=None).status == 401
    h = ra(s, "GET", "/health", who=None)
    assert (h.status, h.json) == (200, {"status": "ok", "routes": 0})

    r = ra(s, "POST", "/admin/routes", {"id": "r1", "path": "/webhooks/demo", "methods": ["POST"],
                                        "metadata": {"team": "core"}})
    assert r.status == 201, r
    assert r.json == {"id": "r1", "path": "/webhooks/demo", "methods": ["POST"], "enabled": True, "ip_rules": None,
                      "metadata": {"team": "core"}, "tenant": None}
    rid = r.headers["x-request-id"]
    assert s.post("/webhooks/demo", b"{}").status == 201
    assert ra(s, "POST", "/admin/routes", {"id": "r1", "path": "/other"}).json == {"error": "duplicate_route"}
    bad = ra(s, "POST", "/admin/routes", {"id": "r9", "path": "/a/%2F"})
    assert (bad.status, bad.json) == (400, {"error": "invalid_route", "message": "path: must not contain %2F"})
    bad = ra(s, "POST", "/admin/routes", raw=b"not json")
    assert (bad.status, bad.json["error"]) == (400, "invalid_route")
    assert ra(s, "POST", "/admin/routes", {"id": "r9", "path": "/r9"}, who="reader").status == 403

    # PUT upserts; PATCH changes some keys; DELETE is 204
    assert ra(s, "PUT", "/admin/routes/r2", {"path": "/r2"}).status == 201
    assert ra(s, "PUT", "/admin/routes/r2", {"path": "/r2", "methods": ["POST"]}).status == 200
    p = ra(s, "PATCH", "/admin/routes/r2", {"enabled": False})
    assert (p.status, p.json["enabled"], p.json["methods"]) == (200, False, ["POST"])
    assert ra(s, "GET", "/admin/routes/r2").json["enabled"] is False
    assert ra(s, "DELETE", "/admin/routes/r2").status == 204
    assert ra(s, "GET", "/admin/routes/r2").json == {"error": "route_not_found"}
    assert ra(s, "DELETE", "/admin/routes/r2").status == 404
    n_rows = len(audit(s))
    assert ra(s, "PUT", "/admin/routes/r1", ra(s, "GET", "/admin/routes/r1").json).status == 200
    assert len(audit(s)) == n_rows, "a PUT that changes nothing writes no row"

    # tenants: /webhooks/<tenant>/... belongs to that tenant; a route of no tenant needs "*"
    assert ra(s, "POST", "/admin/routes", {"id": "a1", "path": "/webhooks/acme/github"}, who="acme").status == 201
    assert ra(s, "POST", "/admin/routes", {"id": "a2", "path": "/in/acme", "tenant": "acme"}, who="acme").status == 201
    assert ra(s, "POST", "/admin/routes", {"id": "b1", "path": "/webhooks/beta/x"}, who="acme").status == 403
    assert ra(s, "POST", "/admin/routes", {"id": "n1", "path": "/x"}, who="acme").status == 403
    assert [x["id"] for x in ra(s, "GET", "/admin/routes", who="acme").json["routes"]] == ["a1", "a2"]
    assert ra(s, "GET", "/admin/routes/r1", who="acme").status == 404
    assert ra(s, "DELETE", "/admin/routes/r1", who="acme").status == 404
    assert ra(s, "PATCH", "/admin/routes/a1", {"path": "/webhooks/beta/github"}, who="acme").status == 403
    assert ra(s, "GET", "/admin/routes/a1", who="acme").json["path"] == "/webhooks/acme/github"
    assert ra(s, "GET", "/admin/ip-rules", who="acme").status == 403
    assert ra(s, "POST", "/admin/routes/test", {"path": "/x", "ip": "127.0.0.1"}, who="acme").status == 403
    assert ra(s, "GET", "/health", who=None).json["routes"] == 3

    rows = [x for x in audit(s) if x["subject"].startswith("route:")]
    first = rows[0]
    assert (first["action"], first["subject"], first["actor"], first["request_id"], first["tenant"]) == \
        ("route.create", "route:r1", "root", rid, None)
    assert [(x["action"], x["subject"]) for x in rows] == [
        ("route.create", "route:r1"), ("route.create", "route:r2"), ("route.update", "route:r2"),
        ("route.update", "route:r2"), ("route.delete", "route:r2"), ("route.create", "route:a1"),
        ("route.create", "route:a2")]
    assert rows[-1]["tenant"] == "acme" and rows[-1]["actor"] == "acme-ops"
    assert {x["subject"] for x in audit(s, who="acme")} <= {"route:a1", "route:a2"}


def test_list_pages_ip_rules_and_dry_run(ankusa):
    s = ankusa(config=rconfig())
    for i in range(5):
        assert ra(s, "POST", "/admin/routes", {"id": f"r{i}", "path": f"/r{i}", "enabled": i != 3}).status == 201
    page = ra(s, "GET", "/admin/routes?limit=2").json
    assert ([x["id"] for x in page["routes"]], page["next_cursor"]) == (["r0", "r1"], "r1")
    page = ra(s, "GET", f"/admin/routes?limit=2&cursor={page['next_cursor']}").json
    assert [x["id"] for x in page["routes"]] == ["r2", "r3"]
    page = ra(s, "GET", f"/admin/routes?limit=2&cursor={page['next_cursor']}").json
    assert (page["routes"][0]["id"], page["next_cursor"]) == ("r4", None)
    assert [x["id"] for x in ra(s, "GET", "/admin/routes?enabled=false").json["routes"]] == ["r3"]
    assert ra(s, "GET", "/admin/routes?enabled=maybe").json == {"error": "invalid_filter", "field": "enabled"}

    assert ra(s, "GET", "/admin/ip-rules").json == {"default": "allow", "rules": []}
    bad = ra(s, "PUT", "/admin/ip-rules", {"default": "deny"})
    assert (bad.status, bad.json) == (400, {"error": "invalid_ip_rules", "message": "rules: required"})
    bad = ra(s, "PUT", "/admin/ip-rules", {"default": "allow", "rules": [{"action": "deny", "cidr": "::ffff:0:0/96"}]})
    assert bad.status == 400 and "::ffff:0:0/96" in bad.json["message"]
    rules = {"default": "allow", "rules": [{"action": "deny", "cidr": "192.0.2.0/24"}]}
    assert ra(s, "PUT", "/admin/ip-rules", rules).json == rules
    assert ra(s, "GET", "/admin/ip-rules").json == rules

    t = lambda **b: ra(s, "POST", "/admin/routes/test", b).json  # noqa: E731
    assert t(path="/r1", ip="198.51.100.1") == {"decision": "allow", "reason": "route_matched", "route_id": "r1",
                                                "ip_rule": {"scope": "global", "index": -1, "cidr": None},
                                                "status": None}
    assert t(path="/r1", ip="192.0.2.7") == {"decision": "deny", "reason": "ip_denied", "route_id": None,
                                             "ip_rule": {"scope": "global", "index": 0, "cidr": "192.0.2.0/24"},
                                             "status": 403}
    assert t(path="/nope", ip="198.51.100.1")["reason"] == "route_not_found"
    assert t(path="/r3", ip="198.51.100.1")["reason"] == "route_disabled"
    assert t(path="/r1?x=1", ip="198.51.100.1", method="GET")["decision"] == "allow"
    assert ra(s, "POST", "/admin/routes/test", {"path": "/r1"}).status == 400
    # the same answers on the ingest listener
    assert s.post("/r3", b"").status == 404


def test_max_routes(ankusa):
    s = ankusa(config=rconfig(max_routes=2))
    assert ra(s, "POST", "/admin/routes", {"id": "a", "path": "/a"}).status == 201
    assert ra(s, "PUT", "/admin/routes/b", {"path": "/b"}).status == 201
    r = ra(s, "POST", "/admin/routes", {"id": "c", "path": "/c"})
    assert (r.status, r.json["error"]) == (409, "too_many_routes")
    assert ra(s, "PUT", "/admin/routes/c", {"path": "/c"}).status == 409
    assert ra(s, "PUT", "/admin/routes/b", {"path": "/b2"}).status == 200  # a replacement is not one more


def test_a_201_survives_kill9_with_its_audit_row(ankusa):
    s = ankusa(config=rconfig())
    r = ra(s, "POST", "/admin/routes", {"id": "durable", "path": "/webhooks/demo"})
    assert r.status == 201
    s.kill9()
    s.start()
    assert ra(s, "GET", "/admin/routes/durable").json["path"] == "/webhooks/demo"
    assert s.post("/webhooks/demo", b"{}").status == 201
    assert [x["subject"] for x in audit(s)] == ["route:durable"]
    r = ra(s, "PUT", "/admin/ip-rules", {"default": "deny", "rules": [{"action": "allow", "cidr": "127.0.0.1"}]})
    assert r.status == 200
    s.kill9()
    s.start()
    assert ra(s, "GET", "/admin/ip-rules").json["default"] == "deny"


def test_no_change_without_its_audit_row(ankusa, tmp_path):
    flag = tmp_path / "audit-fails"
    s = ankusa(config=rconfig(), env={"ANKUSA_TEST_AUDIT_FAIL": str(flag)})
    assert ra(s, "POST", "/admin/routes", {"id": "a", "path": "/a"}).status == 201
    flag.write_text("1")
    r = ra(s, "POST", "/admin/routes", {"id": "b", "path": "/b"})
    assert (r.status, r.json, r.headers.get("retry-after")) == (503, {"error": "store_unavailable"}, "1")
    assert ra(s, "DELETE", "/admin/routes/a").status == 503
    assert ra(s, "PUT", "/admin/ip-rules", {"default": "deny", "rules": []}).status == 503
    flag.unlink()
    assert ra(s, "GET", "/admin/routes/b").status == 404
    assert ra(s, "GET", "/admin/routes/a").status == 200
    assert s.post("/a", b"").json == {"error": "not_found"} and ra(s, "GET", "/admin/ip-rules").json["default"] == "allow"
    s.kill9()
    s.start()
    assert [x["id"] for x in ra(s, "GET", "/admin/routes").json["routes"]] == ["a"]


def test_route_admin_without_principals_binds_loopback_only(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps({"node": {"data_dir": str(tmp_path / "d")}, "sources": {"a": {"sinks": LOG}},
                               "routes": {"enabled": True, "admin": {"ip": "0.0.0.0"}}}))
    r = run_cli("check-config", "--config", str(cfg))
    assert r.returncode == 78, r
    assert "routes.admin.ip: 0.0.0.0 is not a loopback address" in r.stderr


def test_route_changes_are_lifecycle_events(ankusa):
    rx = Receiver()
    try:
        cfg = rconfig()
        cfg.update(LOOPBACK)
        cfg["lifecycle"] = {"sinks": [{"type": "http", "url": rx.url}]}
        cfg["dispatch"] = {"retry": {"base_ms": 50, "max_ms": 200, "max_attempts": 84, "jitter": False},
                           "breaker_failures": 0}
        s = ankusa(config=cfg)
        assert ra(s, "POST", "/admin/routes", {"id": "ev", "path": "/webhooks/acme/x"}).status == 201
        assert ra(s, "PATCH", "/admin/routes/ev", {"enabled": False}).status == 200
        assert ra(s, "DELETE", "/admin/routes/ev").status == 204
        assert ra(s, "PUT", "/admin/ip-rules", {"default": "allow", "rules": []}).status == 200  # no event type
        rx.wait_for(lambda ds: len([d for d in ds if d.status == 204]) >= 3, what="three lifecycle events")
        evs = [json.loads(d.body) for d in rx.snapshot() if d.status == 204]
        assert [(e["type"], e["subject"]) for e in evs] == [
            ("io.ankusa.route.created", "route:ev"), ("io.ankusa.route.updated", "route:ev"),
            ("io.ankusa.route.deleted", "route:ev")]
        assert evs[0]["data"]["entity"]["path"] == "/webhooks/acme/x" and evs[0]["data"]["tenant"] == "acme"
        assert evs[1]["data"]["entity"]["enabled"] is False
        assert evs[2]["data"]["entity"]["id"] == "ev"  # the last state
    finally:
        rx.close()


# ---------------------------------------------------------------- the contract ----

def served_rows():
    """(method, path) of every row of the route admin table in src/admin/router.c."""
    src = (ROOT / "src/admin/router.c").read_text()
    block = src[src.index("static const ak_admin_route_t routes_api[]"):]
    block = block[:block.index("};")]
    return {(m, p) for m, p in re.findall(r'\{"([A-Z]+)", "([^"]+)"', block)}


def documented_rows():
    doc = yaml.safe_load((ROOT / "docs/openapi/routes.v1.yaml").read_text())
    assert doc["openapi"].startswith("3.")
    rows = set()
    for path, ops in doc["paths"].items():
        for m in ops:
            if m in ("get", "put", "post", "patch", "delete"):
                rows.add((m.upper(), path))
    return rows


def test_openapi_document_matches_the_served_endpoints(ankusa):
    assert served_rows() == documented_rows()
    s = ankusa(config=rconfig())
    # every documented endpoint is served by the binary: never the listener's 404 not_found
    for method, path in sorted(documented_rows()):
        url = path.replace("{id}", "some-id")
        body = {} if method in ("POST", "PUT", "PATCH") else None
        r = ra(s, method, url, body)
        assert r.json != {"error": "not_found"}, (method, path, r)
    assert ra(s, "GET", "/admin/nope").json == {"error": "not_found"}
