"""The route guard (routes.enabled) through the real binary: deny by default, every
refusal answered on the head alone (no body byte read: ankusa_ingest_bodies_read_total
does not move, and a refusal comes back while the declared body was never sent), the
refusal reasons on ankusa_ingest_refused_total, patterns (literal, :param, trailing *,
%2F and dot segments refused), global and per-route IP rules, X-Forwarded-For believed
only from routes.trusted_proxies, ip_denied_status 404, seed routes (an API edit is kept
over the seed across a restart), and a route added after a cached miss served at once."""
import json
import socket
import time

from helpers import LOG, Metrics, free_ports, wait_until

SEED = [
    {"id": "gh", "path": "/webhooks/demo", "methods": ["POST"]},
    {"id": "acme", "path": "/webhooks/acme/*"},
    {"id": "param", "path": "/p/:one"},
    {"id": "off", "path": "/webhooks/off", "enabled": False},
    {"id": "lan", "path": "/lan/:x", "ip_rules": {"default": "deny", "rules": [{"action": "allow", "cidr": "10.0.0.0/8"}]}},
]


def rconfig(extra=None, seed=None):
    (rport,) = free_ports(1)
    cfg = {"routes": {"enabled": True, "admin": {"port": rport}, "seed": SEED if seed is None else seed,
                      "log_sample": 1}}
    for k, v in (extra or {}).items():
        cfg["routes"][k] = v
    return cfg


def refused(node, reason):
    return Metrics(node.admin("/metrics").body.decode()).get("ankusa_ingest_refused_total", instance="default",
                                                              reason=reason) or 0


def bodies_read(node):
    return node.metrics().value("ankusa_ingest_bodies_read_total", instance="default")


def head_only(port, path, method="POST", extra=b""):
    """Send a head that declares a 64 KiB body and never send the body: the answer must
    come back anyway (the guard answered on the head)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n".encode() + extra + b"\r\n")
        data = b""
        t0 = time.monotonic()
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1])
        clen = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                clen = int(v)
        while len(rest) < clen:
            rest += s.recv(4096)
        return status, json.loads(rest[:clen]), time.monotonic() - t0
    finally:
        s.close()


def test_deny_by_default_before_any_body_byte(ankusa):
    s = ankusa(config=rconfig())
    read0 = bodies_read(s)
    nf0 = refused(s, "route_not_found")
    for path in ["/webhooks/nope", "/", "/webhooks/demo/extra", "/p", "/p/a/b", "/webhooks/acme",
                 "/webhooks/acme/a%2Fb", "/webhooks/acme/../demo", "/webhooks/acme/./x", "/webhooks/acme//x"]:
        status, body, _ = head_only(s.http_port, path)
        assert (status, body) == (404, {"error": "not_found"}), path
    assert refused(s, "route_not_found") == nf0 + 10
    status, body, _ = head_only(s.http_port, "/webhooks/off")
    assert (status, body) == (404, {"error": "not_found"})
    assert refused(s, "route_disabled") == 1
    status, body, _ = head_only(s.http_port, "/webhooks/demo", method="PUT")
    assert (status, body) == (405, {"error": "method_not_allowed"})
    assert refused(s, "method_not_allowed") == 1
    status, body, _ = head_only(s.http_port, "/lan/x")
    assert (status, body) == (403, {"error": "forbidden"})
    assert refused(s, "ip_denied") == 1
    assert bodies_read(s) == read0, "a refused request's body was read"
    # what a route allows goes on to the rest of ingest: stored, or the edge's own 404
    assert s.post("/webhooks/demo", b'{"a":1}').status == 201
    assert s.post("/webhooks/demo?a=1", b'{"a":1}').status == 201  # the query plays no part
    # past the guard, the edge's own answers (path routing: no tenant segment; no catch URL at /p)
    assert s.post("/webhooks/acme/acme_src", b'{"a":1}').json == {"error": "unknown_source"}
    r = s.post("/p/x", b"{}")
    assert r.status == 404 and r.json == {"error": "not_found"}
    assert bodies_read(s) == read0 + 2
    # the probes are not routes
    assert s.get("/health").status == 200
    # a refusal is logged (log_sample 1) without its query string
    s.post("/webhooks/nope?token=sekrit-query-Qz9", b"")
    wait_until(lambda: "reason=route_not_found" in s.log_text(), what="the refusal's log line")
    assert "sekrit-query-Qz9" not in s.log_text()


def test_ip_rules_and_trusted_proxies(ankusa):
    rules = {"default": "allow", "rules": [{"action": "deny", "cidr": "203.0.113.0/24"},
                                           {"action": "deny", "cidr": "2001:db8::/32"}]}
    trusting = ankusa(config=rconfig({"ip_rules": rules, "trusted_proxies": ["127.0.0.0/8"]}), name="trusting")
    xff = lambda a: {"X-Forwarded-For": a}  # noqa: E731
    r = trusting.post("/webhooks/demo", b"{}", headers=xff("203.0.113.7"))
    assert (r.status, r.json) == (403, {"error": "forbidden"})
    r = trusting.post("/webhooks/demo", b"{}", headers=xff("2001:db8::9, 127.0.0.5"))  # right-most untrusted
    assert r.status == 403
    assert trusting.post("/webhooks/demo", b"{}", headers=xff("203.0.113.7, 198.51.100.1")).status == 201
    assert trusting.post("/webhooks/demo", b"{}", headers=xff("2001:db9::1")).status == 201
    # the route's own rules after the global ones
    assert trusting.post("/lan/x", b"{}", headers=xff("10.1.2.3")).status == 404  # allowed; no catch URL there
    assert trusting.post("/lan/x", b"{}", headers=xff("198.51.100.1")).status == 403
    # not a trusted proxy: its X-Forwarded-For is ignored, the peer (127.0.0.1) is the client
    plain = ankusa(config=rconfig({"ip_rules": rules, "ip_denied_status": 404}), name="plain")
    assert plain.post("/webhooks/demo", b"{}", headers=xff("203.0.113.7")).status == 201
    assert plain.post("/lan/x", b"{}", headers=xff("10.1.2.3")).status == 404
    # ip_denied_status 404: an IP denial looks like no route at all
    plain.config["routes"]["ip_rules"] = {"default": "deny", "rules": []}
    plain.write_config()
    plain.restart()
    r = plain.post("/webhooks/demo", b"{}")
    assert (r.status, r.json) == (404, {"error": "not_found"})
    assert refused(plain, "ip_denied") == 1


def test_seeds_and_api_edits_across_restarts(ankusa):
    s = ankusa(config=rconfig())
    rport = s.config["routes"]["admin"]["port"]
    from helpers import http_request
    r = http_request(rport, "PATCH", "/admin/routes/param", body=json.dumps({"path": "/q/:one"}).encode(),
                     headers={"Content-Type": "application/json"})
    assert r.status == 200, r
    assert s.post("/p/x", b"{}").status == 404 and refused(s, "route_not_found") >= 1
    # a route added after a miss is served at once (every change drops the cached decisions)
    nf = refused(s, "route_not_found")
    assert s.post("/webhooks/late", b"{}").status == 404
    assert refused(s, "route_not_found") == nf + 1
    r = http_request(rport, "POST", "/admin/routes", body=json.dumps({"id": "late", "path": "/webhooks/late"}).encode(),
                     headers={"Content-Type": "application/json"})
    assert r.status == 201, r
    r = s.post("/webhooks/late", b"{}")
    assert r.json == {"error": "unknown_source"}, r  # past the guard: the edge's own answer
    s.config["routes"]["seed"] = SEED + [{"id": "new", "path": "/webhooks/new"}]
    s.write_config()
    s.restart()
    # the API edit is kept over the seed of the same id; a new seed is created; API routes stay
    rows = {x["id"]: x for x in json.loads(http_request(rport, "GET", "/admin/routes").body)["routes"]}
    assert rows["param"]["path"] == "/q/:one"
    assert "new" in rows and "late" in rows
    assert s.post("/webhooks/late", b"{}").json == {"error": "unknown_source"}
