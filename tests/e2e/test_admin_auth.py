"""Admin principals and scopes through the real binary. Table-driven: every endpoint ×
{no token, wrong token, a principal without the endpoint's scope, a principal of another
tenant (where the endpoint names or filters a tenant; node-wide endpoints need every
tenant), the right principal}; listings filtered to a scoped principal's tenants; the
probes stay open; with no principals the listener refuses a non-loopback address (boot
and check-config, exit 78) and says so at boot. No token ever reaches a log line or
/v1/config. Tokens are hashed by the test (helpers.principal), never by ankusa."""
import re

import pytest

from helpers import LOG, PERSISTENT_STORE, SANITIZER_MARKERS, RawConn, Server, github_sig, principal, run_cli, sha256_hex

TOKENS = {"root": "tok-root-7Q2xZ9w1", "acme": "tok-acme-K3m8Pq4r", "nobody": "tok-nobody-V6n2Lc0s"}
ALL_SCOPES = ["sources:read", "sources:write", "dlq:read", "replays:read", "replays:write", "quarantine:read",
              "quarantine:write", "rate_limits:read", "rate_limits:write", "audit:read", "tenants:write",
              "log_level:write", "config:read", "hooks:read", "claims:read", "metrics:read"]
SECRET = "whsec-authtest-Hq83nVb2"


def principals():
    return [
        principal("root", TOKENS["root"], ALL_SCOPES, "*"),
        principal("acme-ops", TOKENS["acme"], ALL_SCOPES, ["acme"]),
        # a scope no endpoint asks for: it proves every endpoint checks its own
        principal("nobody", TOKENS["nobody"], ["claims:read"], "*"),
    ]


def q_src(tenant):
    return {"tenant": tenant, "verify": {"type": "github", "secret": SECRET}, "on_verify_failure": "quarantine",
            "sinks": LOG}


SOURCES = {"demo": {"sinks": LOG}, "acme_src": {"tenant": "acme", "sinks": LOG},
           "beta_src": {"tenant": "beta", "sinks": LOG}, "acme_q": q_src("acme"), "beta_q": q_src("beta")}


def forge(s, source, body):
    sig = github_sig("not-the-secret", body)
    r = s.post(f"/webhooks/{source}", body, headers={"X-Hub-Signature-256": sig, "Content-Type": "application/json"})
    assert r.status == 202, r


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("auth"), name="auth", sources=SOURCES,
               config={"admin": {"principals": principals()}, "source_store": PERSISTENT_STORE})
    s.start()
    st = {}
    for src in ("acme_src", "beta_src"):
        r = s.post(f"/webhooks/{src}", b'{"n":1}', headers={"Content-Type": "application/json"})
        assert r.status == 201, r
        st[f"hook_{src}"] = r.json["id"]
    forge(s, "acme_q", b'{"held":"acme"}')
    forge(s, "beta_q", b'{"held":"beta"}')
    for src in ("acme_src", "beta_src"):
        # The DLQ is empty: a running job is done at its first tick, and a later PATCH
        # would meet 409 replay_finished. Paused, it stays patchable; a job that finished
        # between its POST and the pause is replaced by a new one.
        for _ in range(50):
            r = s.admin("/v1/replays", "POST", body={"kind": "dlq", "source_id": src}, token=TOKENS["root"])
            assert r.status in (200, 202), r
            job = r.json["id"]
            p = s.admin(f"/v1/replays/{job}", "PATCH", body={"state": "paused"}, token=TOKENS["root"])
            if p.status == 200:
                break
            assert p.status == 409 and p.json == {"error": "replay_finished"}, p
        else:
            pytest.fail("every replay job finished before it could be paused")
        st[f"job_{src}"] = job
    s.state = st
    yield s
    rc = s.stop()
    text = s.log_text()
    assert rc == 0, s.log_tail(40)
    assert not any(m in text for m in SANITIZER_MARKERS), s.log_tail(120)
    for t in TOKENS.values():
        assert t not in text, "a token reached the log"


class E:
    """One endpoint: a request that passes with the right principal (ok: allowed statuses),
    and, where a tenant applies, a request naming another tenant (other: (path, body,
    status, body check))."""

    def __init__(self, method, path, scope, ok, body=None, other=None, node_wide=False, pre=None):
        self.method, self.path, self.scope, self.ok, self.body = method, path, scope, ok, body
        self.other, self.node_wide, self.pre = other, node_wide, pre

    def __repr__(self):
        return f"{self.method} {self.path}"


def forbidden_tenant(tenant):
    return lambda r, e: r.json == {"error": "forbidden", "scope": e.scope, "tenant": tenant}


def not_found(code):
    return lambda r, e: r.json == {"error": code}


def put_acme_override(s):
    r = s.admin("/v1/tenants/acme/rate-limit", "PUT", body={"rate": 5, "burst": 10}, token=TOKENS["root"])
    assert r.status == 200, r


def create_acme_api_source(s):
    r = s.admin("/v1/tenants/acme/sources", "POST", body={"name": "api_del", "sinks": LOG}, token=TOKENS["root"])
    assert r.status == 201, r


ENDPOINTS = [
    E("GET", "/metrics", "metrics:read", {200}, node_wide=True),
    E("GET", "/v1/config", "config:read", {200}, node_wide=True),
    E("GET", "/v1/wal", "config:read", {200}, node_wide=True),
    E("GET", "/asyncapi.json", "config:read", {200}, node_wide=True),
    E("GET", "/v1/log-level", "config:read", {200}, node_wide=True),
    E("PUT", "/v1/log-level", "log_level:write", {200}, body={"level": "info"}, node_wide=True),
    E("GET", "/v1/hooks/{hook_acme_src}", "hooks:read", {200},
      other=("/v1/hooks/{hook_beta_src}", None, 404, not_found("hook_not_found"))),
    E("GET", "/v1/quarantine?source_id=acme_q", "quarantine:read", {200},
      other=("/v1/quarantine?source_id=beta_q", None, 403, forbidden_tenant("beta"))),
    E("DELETE", "/v1/quarantine?source_id=acme_q&since=0&until=1", "quarantine:write", {200},
      other=("/v1/quarantine?source_id=beta_q", None, 403, forbidden_tenant("beta"))),
    E("GET", "/v1/dlq?source_id=acme_src", "dlq:read", {200},
      other=("/v1/dlq?source_id=beta_src", None, 403, forbidden_tenant("beta"))),
    E("POST", "/v1/replays", "replays:write", {200, 202}, body={"kind": "dlq", "source_id": "acme_src"},
      other=("/v1/replays", {"kind": "dlq", "source_id": "beta_src"}, 403, forbidden_tenant("beta"))),
    E("GET", "/v1/replays", "replays:read", {200}),
    E("GET", "/v1/replays/{job_acme_src}", "replays:read", {200},
      other=("/v1/replays/{job_beta_src}", None, 404, not_found("replay_not_found"))),
    E("PATCH", "/v1/replays/{job_acme_src}", "replays:write", {200}, body={"rate": 7},
      other=("/v1/replays/{job_beta_src}", {"rate": 7}, 404, not_found("replay_not_found"))),
    E("GET", "/v1/rate-limits", "rate_limits:read", {200}),
    E("GET", "/v1/tenants/acme/rate-limit", "rate_limits:read", {200},
      other=("/v1/tenants/beta/rate-limit", None, 403, forbidden_tenant("beta"))),
    E("PUT", "/v1/tenants/acme/rate-limit", "rate_limits:write", {200}, body={"rate": 5, "burst": 10},
      other=("/v1/tenants/beta/rate-limit", {"rate": 5, "burst": 10}, 403, forbidden_tenant("beta"))),
    E("DELETE", "/v1/tenants/acme/rate-limit", "rate_limits:write", {204}, pre=put_acme_override,
      other=("/v1/tenants/beta/rate-limit", None, 403, forbidden_tenant("beta"))),
    E("GET", "/v1/audit", "audit:read", {200},
      other=("/v1/audit?tenant=beta", None, 403, forbidden_tenant("beta"))),
    E("GET", "/v1/tenants/acme/sources", "sources:read", {200},
      other=("/v1/tenants/beta/sources", None, 403, forbidden_tenant("beta"))),
    E("POST", "/v1/tenants/acme/sources", "sources:write", {201}, body={"name": "api_post", "sinks": LOG},
      other=("/v1/tenants/beta/sources", {"name": "api_beta", "sinks": LOG}, 403, forbidden_tenant("beta"))),
    E("GET", "/v1/tenants/acme/sources/acme_src", "sources:read", {200},
      other=("/v1/tenants/beta/sources/beta_src", None, 403, forbidden_tenant("beta"))),
    E("PUT", "/v1/tenants/acme/sources/api_put", "sources:write", {200, 201}, body={"sinks": LOG},
      other=("/v1/tenants/beta/sources/api_put", {"sinks": LOG}, 403, forbidden_tenant("beta"))),
    E("DELETE", "/v1/tenants/acme/sources/api_del", "sources:write", {200, 204}, pre=create_acme_api_source,
      other=("/v1/tenants/beta/sources/beta_src", None, 403, forbidden_tenant("beta"))),
]


def call(node, e, token, path=None, body=None):
    p = (path or e.path).format(**node.state)
    return node.admin(p, e.method, body=body if path else e.body, token=token)


@pytest.mark.parametrize("e", ENDPOINTS, ids=repr)
def test_no_token(node, e):
    r = call(node, e, None)
    assert r.status == 401, r
    assert r.json == {"error": "unauthorized"}
    assert r.headers.get("www-authenticate", "").startswith("Bearer"), r.headers
    assert re.fullmatch(r"[0-9a-f-]{36}", r.headers.get("x-request-id", "")), r.headers


@pytest.mark.parametrize("e", ENDPOINTS, ids=repr)
def test_wrong_token(node, e):
    for bad in ("tok-root-7Q2xZ9w", TOKENS["root"] + "x", sha256_hex(TOKENS["root"].encode())):
        r = call(node, e, bad)
        assert r.status == 401, r
        assert r.json == {"error": "unauthorized"}
    r = node.admin(e.path.format(**node.state), e.method, headers={"Authorization": f"Basic {TOKENS['root']}"})
    assert r.status == 401, r


@pytest.mark.parametrize("e", ENDPOINTS, ids=repr)
def test_missing_scope(node, e):
    r = call(node, e, TOKENS["nobody"])
    assert r.status == 403, r
    assert r.json == {"error": "forbidden", "scope": e.scope}


@pytest.mark.parametrize("e", [e for e in ENDPOINTS if e.other or e.node_wide], ids=repr)
def test_other_tenant(node, e):
    if e.node_wide:
        r = call(node, e, TOKENS["acme"])
        assert r.status == 403, r
        assert r.json == {"error": "forbidden", "scope": e.scope, "tenant": "*"}
        return
    path, body, status, check = e.other
    r = call(node, e, TOKENS["acme"], path=path, body=body)
    assert r.status == status, r
    assert check(r, e), r.json


@pytest.mark.parametrize("e", ENDPOINTS, ids=repr)
def test_right_principal(node, e):
    if e.pre:
        e.pre(node)
    token = TOKENS["root"] if e.node_wide else TOKENS["acme"]
    r = call(node, e, token)
    assert r.status in e.ok, r
    assert re.fullmatch(r"[0-9a-f-]{36}", r.headers.get("x-request-id", ""))


def test_probes_are_open_and_unknown_paths_need_a_token(node):
    for p in ("/health", "/ready"):
        r = node.admin(p)
        assert r.status == 200, r
        assert node.admin(p, token="garbage").status == 200, "a bad token on a probe is ignored"
    r = node.admin("/v1/nope")
    assert r.status == 401, r
    r = node.admin("/v1/nope", token=TOKENS["nobody"])
    assert r.status == 404 and r.json == {"error": "not_found"}, r
    r = node.admin("/v1/audit", "POST", token=TOKENS["root"])
    assert r.status == 404, r
    r = node.admin("/v1/tenants/bad%20tenant/rate-limit", token=TOKENS["root"])
    assert r.status == 400 and r.json == {"error": "invalid_tenant"}, r


def test_a_refused_request_leaves_its_body_unread(node):
    """Refused on the headers: no 100 Continue, so the body is never sent."""
    head = (b"POST /v1/replays HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000\r\nExpect: 100-continue\r\n%s\r\n")
    with RawConn(node.admin_port) as c:
        c.send(head % b"")
        r = c.read_response()
        assert r.status == 401, r
    with RawConn(node.admin_port) as c:
        c.send(head % f"Authorization: Bearer {TOKENS['nobody']}\r\n".encode())
        r = c.read_response()
        assert r.status == 403, r
    r = node.admin("/v1/replays", "POST", body=b"x" * 100000, token=TOKENS["root"],
                   headers={"Content-Type": "application/json"})
    assert r.status == 413, r


def test_scoped_listings_show_only_its_tenants(node):
    acme, root = TOKENS["acme"], TOKENS["root"]
    r = node.admin("/v1/quarantine", token=acme)
    assert r.status == 200, r
    tenants = {e["tenant_id"] for e in r.json["entries"]}
    assert tenants <= {"acme"}, r.json
    r = node.admin("/v1/quarantine", token=root)
    assert {"beta"} <= {e["tenant_id"] for e in r.json["entries"]}, r.json
    r = node.admin("/v1/replays", token=acme)
    srcs = {j["filter"].get("source_id") for j in r.json["replays"]}
    assert srcs == {"acme_src"}, r.json
    r = node.admin("/v1/replays", token=root)
    assert {"acme_src", "beta_src"} <= {j["filter"].get("source_id") for j in r.json["replays"]}
    # a dlq job without a source touches every tenant: only for every-tenant principals
    r = node.admin("/v1/replays", "POST", body={"kind": "dlq"}, token=acme)
    assert r.status == 403 and r.json == {"error": "forbidden", "scope": "replays:write", "tenant": "*"}, r
    put = node.admin("/v1/tenants/beta/rate-limit", "PUT", body={"rate": 3, "burst": 3}, token=root)
    assert put.status == 200, put
    r = node.admin("/v1/rate-limits", token=acme)
    assert all(t["tenant"] == "acme" for t in r.json["tenants"]), r.json
    r = node.admin("/v1/rate-limits", token=root)
    assert "beta" in {t["tenant"] for t in r.json["tenants"]}
    # a purge by the scoped principal without a filter touches only its tenants' entries
    r = node.admin("/v1/quarantine", "DELETE", token=acme)
    assert r.status == 200, r
    r = node.admin("/v1/quarantine", token=root)
    assert "beta" in {e["tenant_id"] for e in r.json["entries"]}, "beta's held hook survived acme's purge"


def test_config_never_shows_the_token_hashes(node):
    r = node.admin("/v1/config", token=TOKENS["root"])
    assert r.status == 200, r
    text = r.body.decode()
    for p in principals():
        assert p["token_sha256"] not in text
    assert [p["name"] for p in r.json["admin"]["principals"]] == ["root", "acme-ops", "nobody"]


def test_no_principals_means_loopback_only(ankusa, tmp_path):
    s = ankusa(start=False, config={"admin": {"ip": "0.0.0.0"}})
    p = run_cli("check-config", "--config", s.config_path)
    assert p.returncode == 78, p
    assert "admin.ip: 0.0.0.0 is not a loopback address" in p.stderr and "admin.principals" in p.stderr, p.stderr
    p = run_cli("serve", "--config", s.config_path)
    assert p.returncode == 78, p
    assert "admin.ip" in p.stderr
    assert not (s.data_dir / "default" / "store").exists(), "nothing was opened"
    p = run_cli("check-config", "--config", s.config_path, env={"ANKUSA_ADMIN_IP": "127.0.0.1"})
    assert p.returncode == 0, p
    # on loopback it boots, open as before, and says so
    s2 = ankusa()
    assert "admin.principals is empty: the admin API answers without authentication, on loopback only" in \
        s2.log_text()
    assert s2.admin("/v1/config").status == 200


def test_principals_allow_any_address(ankusa):
    s = ankusa(config={"admin": {"ip": "0.0.0.0", "principals": principals()}})
    assert s.admin("/v1/wal").status == 401
    assert s.admin("/v1/wal", token=TOKENS["root"]).status == 200
    assert "admin API requires a bearer token" in s.log_text()
