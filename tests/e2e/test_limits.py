"""Limits through the real binary: tenant quotas (rate_limits, charged after verification,
honest Retry-After, admin overrides that survive a restart), pre-read admission (per
client address behind a trusted proxy, per node, per source bytes, the tenant's
max_body_bytes: refused before the body is read), and the tenant share of the writer
queue (one tenant's burst gets 429 tenant_overload, never another tenant's 503).
Signatures are computed by the test (helpers.github_sig), never by ankusa."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from helpers import LOG, RawConn, admin_json, chunked, github_sig

REASONS = {"payload_too_large", "unknown_source", "not_found", "invalid_header", "body_read_failed", "overload",
           "store_unavailable", "commit_deadline", "draining", "verification_failed", "quarantine_rate_limited",
           "quarantine_full", "quarantine_overload", "rate_limited", "ip_rate_limited", "node_rate_limited",
           "source_rate_limited", "tenant_overload", "dedupe_quota", "dedupe_pending",
           # the HTTP layer's own refusals (framing, limits, timeouts, the connection cap)
           "bad_request", "not_implemented", "request_header_fields_too_large", "uri_too_long", "request_timeout",
           "http_version_not_supported", "connection_limit",
           # wal.type none: a sink refused, the publish deadline passed (served on every node)
           "publish_failed", "publish_timeout",
           # wal.type dual: the intake log did not confirm; a repeat of a half-persisted event
           "intake_unavailable", "intake_pending",
           # the route guard (served on every node: its refusals are fixed at start)
           "route_not_found", "method_not_allowed", "route_disabled", "ip_denied",
           # a tenant being erased
           "tenant_erasing"}


def refused(s, reason):
    return s.metrics().value("ankusa_ingest_refused_total", instance="default", reason=reason)


def bodies_read(s):
    return s.metrics().value("ankusa_ingest_bodies_read_total", instance="default")


def assert_429(r, code):
    assert r.status == 429, r
    assert r.json == {"error": code}, r
    ra = r.headers.get("retry-after")
    assert ra is not None and ra.isdigit() and int(ra) >= 1, f"Retry-After must be whole seconds >= 1: {ra!r}"
    return int(ra)


def stored(s):
    return len(s.inspect())


# ------------------------------------------------------------------ tenant quota

def test_burst_over_tenant_limit_gets_429_and_the_retry_after_it_succeeds(ankusa):
    s = ankusa(config={"rate_limits": {"tenants": {"acme": {"rate": 1, "burst": 3}}}})
    answers = [s.post("/webhooks/acme_src", b"hook %d" % i) for i in range(5)]
    assert [r.status for r in answers[:3]] == [201, 201, 201], answers
    waits = [assert_429(r, "rate_limited") for r in answers[3:]]
    # another tenant has no limit and is not held back
    for i in range(5):
        assert s.post("/webhooks/demo", b"other %d" % i).status == 201
    time.sleep(max(waits))
    r = s.post("/webhooks/acme_src", b"the retry")
    assert r.status == 201, f"the retry after Retry-After {max(waits)} s was refused: {r!r}"
    assert refused(s, "rate_limited") == 2
    assert stored(s) == 3 + 5 + 1, "a refused hook was stored"


def test_body_bytes_budget_of_a_tenant(ankusa):
    s = ankusa(config={"rate_limits": {"tenants": {"acme": {"bytes": {"rate": 100, "burst": 1000}}}}})
    assert s.post("/webhooks/acme_src", b"a" * 900).status == 201
    r = s.post("/webhooks/acme_src", b"b" * 300)
    wait = assert_429(r, "rate_limited")
    assert wait in (2, 3), f"200 bytes short at 100 B/s: about 2 s, got {wait}"
    assert s.post("/webhooks/acme_src", b"c" * 50).status == 201, "a body that fits the rest passes"
    assert stored(s) == 2


def test_forged_requests_spend_no_tenant_budget(ankusa):
    secret = "s3cret"
    sources = {
        "gh": {"tenant": "acme", "verify": {"type": "github", "secret": secret}, "sinks": LOG},
        "gh_flag": {"tenant": "acme", "verify": {"type": "github", "secret": secret},
                    "on_verify_failure": "accept_flag", "sinks": LOG},
    }
    s = ankusa(sources=sources, config={"rate_limits": {"tenants": {"acme": {"rate": 0.01, "burst": 2}}}})
    forged = b'{"forged":true}'
    for i in range(20):
        r = s.post("/webhooks/gh", forged, headers={"X-Hub-Signature-256": github_sig("wrong", forged)})
        assert r.status == 401, r
    for i in range(5):  # stored with a failed-verification flag, but never charged to the tenant
        r = s.post("/webhooks/gh_flag", forged, headers={"X-Hub-Signature-256": github_sig("wrong", forged)})
        assert r.status == 201, r
    good = b'{"real":true}'
    for i in range(2):
        r = s.post("/webhooks/gh", good, headers={"X-Hub-Signature-256": github_sig(secret, good)})
        assert r.status == 201, f"verified hook {i} refused after a forged flood: {r!r}"
    r = s.post("/webhooks/gh", good, headers={"X-Hub-Signature-256": github_sig(secret, good)})
    assert_429(r, "rate_limited")  # the budget was exactly the burst: the forgeries took none of it
    assert refused(s, "rate_limited") == 1
    assert refused(s, "verification_failed") == 20


def test_override_applies_at_once_and_survives_restart(ankusa):
    s = ankusa(config={"rate_limits": {"tenants": {"acme": {"rate": 1000, "burst": 1000}}}})
    r = s.admin("/v1/tenants/acme/rate-limit")
    assert r.status == 200 and r.json == {"tenant": "acme", "rate": 1000, "burst": 1000, "source": "config"}, r
    r = s.admin("/v1/tenants/nobody/rate-limit")
    assert r.json == {"tenant": "nobody", "rate": None, "burst": None, "source": "none"}, r

    r = admin_json(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 0.01, "burst": 2})
    assert r.status == 200, r
    assert r.json == {"tenant": "acme", "rate": 0.01, "burst": 2, "source": "override"}, r
    assert [s.post("/webhooks/acme_src", b"x").status for _ in range(2)] == [201, 201]
    assert_429(s.post("/webhooks/acme_src", b"x"), "rate_limited")
    listed = s.admin("/v1/rate-limits").json
    assert listed == {"default": None,
                      "tenants": [{"tenant": "acme", "rate": 0.01, "burst": 2, "source": "override"}]}, listed

    s.kill9()  # the override was synced before the PUT was answered
    s.start()
    r = s.admin("/v1/tenants/acme/rate-limit")
    assert r.json["source"] == "override" and r.json["burst"] == 2, r
    assert [s.post("/webhooks/acme_src", b"x").status for _ in range(2)] == [201, 201]
    assert_429(s.post("/webhooks/acme_src", b"x"), "rate_limited")

    r = admin_json(s, "DELETE", "/v1/tenants/acme/rate-limit")
    assert r.status == 204 and r.body == b"", r
    assert s.post("/webhooks/acme_src", b"x").status == 201, "the file's limit is back at once"
    assert s.admin("/v1/tenants/acme/rate-limit").json["source"] == "config"
    r = admin_json(s, "DELETE", "/v1/tenants/acme/rate-limit")
    assert r.status == 404 and r.json == {"error": "rate_limit_not_found"}, r
    s.restart()
    assert s.admin("/v1/tenants/acme/rate-limit").json["source"] == "config", "the delete survived too"


def test_override_validation(ankusa):
    s = ankusa()
    cases = [
        ({"rate": 1}, "burst"),
        ({"burst": 1}, "rate"),
        ({"rate": 0, "burst": 1}, "rate"),
        ({"rate": "5", "burst": 1}, "rate"),
        ({"rate": 1, "burst": 1.5}, "burst"),
        ({"rate": 1, "burst": 1, "bytes": {"rate": 1}}, "bytes.burst"),
        ({"rate": 1, "burst": 1, "nope": 1}, "nope"),
        ({}, "rate"),
    ]
    for body, field in cases:
        r = admin_json(s, "PUT", "/v1/tenants/acme/rate-limit", body)
        assert r.status == 400, (body, r)
        assert r.json["error"] == "invalid_rate_limit" and r.json["field"] == field, (body, r.json)
    r = admin_json(s, "PUT", "/v1/tenants/acme/rate-limit", b"not json")
    assert r.status == 400 and r.json["error"] == "invalid_rate_limit", r
    r = admin_json(s, "PUT", "/v1/tenants/a%20b/rate-limit", {"rate": 1, "burst": 1})
    assert r.status == 400 and r.json == {"error": "invalid_tenant"}, r
    # an override with the additions reads back as it was put
    want = {"rate": 5, "burst": 10, "bytes": {"rate": 1048576, "burst": 2097152}, "max_body_bytes": 4096}
    r = admin_json(s, "PUT", "/v1/tenants/acme/rate-limit", want)
    assert r.status == 200 and r.json == dict(want, tenant="acme", source="override"), r
    assert s.admin("/v1/rate-limits").json["tenants"] == [dict(want, tenant="acme", source="override")]
    assert s.admin("/v1/tenants/nobody/rate-limit").json["source"] == "none"


def test_rate_limit_api_needs_the_edge_role(ankusa):
    s = ankusa(config={"node": {"roles": ["dispatch"]}})
    r = s.admin("/v1/rate-limits")
    assert r.status == 409 and r.json == {"error": "role_not_enabled", "role": "edge"}, r


# ------------------------------------------------------------ pre-read admission

def flood_request(port, xff, length=1000, path="/webhooks/demo"):
    """Headers only, with Expect: 100-continue: a refusal arrives before any body byte is
    sent; an admitted request gets 100 Continue, then the body, then its answer."""
    with RawConn(port, timeout=10) as c:
        c.send(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nX-Forwarded-For: %s\r\n"
               b"Expect: 100-continue\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
               % (path.encode(), xff.encode(), length))
        r = c.read_response()
        if r.status != 100:
            return r
        c.send(b"x" * length)
        return c.read_response()


def test_address_flood_refused_before_its_body_is_read_while_another_is_served(ankusa):
    s = ankusa(config={"admission": {"per_ip": {"rate": 0.01, "burst": 3}, "trusted_proxies": ["127.0.0.1/32"]}})
    flood, other = "203.0.113.7", "198.51.100.9"
    base = bodies_read(s)
    answers = {"flood": [], "other": []}
    for i in range(30):
        answers["flood"].append(flood_request(s.http_port, flood))
        if i % 10 == 0:
            answers["other"].append(flood_request(s.http_port, other))
    statuses = [r.status for r in answers["flood"]]
    assert statuses[:3] == [201, 201, 201] and statuses.count(201) == 3, statuses
    for r in answers["flood"][3:]:
        assert_429(r, "ip_rate_limited")
    assert [r.status for r in answers["other"]] == [201, 201, 201], answers["other"]
    # a client cannot escape by writing addresses left of what the proxy appended
    assert_429(flood_request(s.http_port, "192.0.2.1, " + flood), "ip_rate_limited")
    m = s.metrics()
    assert m.value("ankusa_ingest_bodies_read_total", instance="default") - base == 6, \
        "a refused request's body was read"
    assert m.value("ankusa_ingest_refused_total", instance="default", reason="ip_rate_limited") == 28
    # no series per address or source from the flood
    assert flood not in m.text and other not in m.text
    assert {dict(labels)["reason"] for labels in m.series("ankusa_ingest_refused_total")} == REASONS
    assert stored(s) == 6


def test_forwarded_for_is_ignored_unless_the_peer_is_a_trusted_proxy(ankusa):
    s = ankusa(config={"admission": {"per_ip": {"rate": 0.01, "burst": 2}, "trusted_proxies": ["10.0.0.0/8"]}})
    # the peer (127.0.0.1) is not trusted: every request counts against 127.0.0.1
    statuses = [flood_request(s.http_port, "203.0.113.%d" % i).status for i in range(4)]
    assert statuses == [201, 201, 429, 429], statuses


def test_node_limit_and_tenant_body_cap_before_the_body(ankusa):
    s = ankusa(config={"admission": {"node": {"rate": 0.01, "burst": 3}},
                       "rate_limits": {"tenants": {"acme": {"max_body_bytes": 100}}}})
    # the tenant's cap: 413 like http.max_body_bytes, before a body byte is sent
    r = flood_request(s.http_port, "x", length=101, path="/webhooks/acme_src")
    assert r.status == 413 and r.json == {"error": "payload_too_large", "limit": 100}, r
    # chunked, without a length: read and dropped, 413 at the end, connection reusable
    with RawConn(s.http_port, timeout=10) as c:
        c.send(b"POST /webhooks/acme_src HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(chunked(b"y" * 150, 50))
        r = c.read_response()
        assert r.status == 413 and r.json == {"error": "payload_too_large", "limit": 100}, r
        c.send(b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert c.read_response().status == 201
    assert s.post("/webhooks/acme_src", b"z" * 100).status == 201
    # the node's burst of 3 is spent (the two 413s never reached it)
    r = s.post("/webhooks/demo", b"one more")
    assert_429(r, "node_rate_limited")
    assert refused(s, "node_rate_limited") == 1
    assert refused(s, "payload_too_large") == 2
    assert stored(s) == 2


def test_source_bytes_by_content_length_and_as_a_chunked_body_arrives(ankusa):
    sources = {"metered": {"sinks": LOG, "admission_bytes": {"rate": 10, "burst": 1000}},
               "demo": {"sinks": LOG}}
    s = ankusa(sources=sources)
    assert s.post("/webhooks/metered", b"a" * 600).status == 201
    base = bodies_read(s)
    r = flood_request(s.http_port, "x", length=600, path="/webhooks/metered")
    wait = assert_429(r, "source_rate_limited")
    assert 19 <= wait <= 21, f"200 bytes short at 10 B/s: 20 s, got {wait}"
    assert bodies_read(s) == base, "refused on its Content-Length, before the body"
    with RawConn(s.http_port, timeout=10) as c:
        c.send(b"POST /webhooks/metered HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        c.send(chunked(b"b" * 600, 100))
        assert_429(c.read_response(), "source_rate_limited")
        c.send(b"POST /webhooks/demo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        assert c.read_response().status == 201, "the connection stays usable"
    assert s.post("/webhooks/demo", b"d" * 5000).status == 201, "another source has no byte limit"
    assert refused(s, "source_rate_limited") == 2
    assert stored(s) == 3


# ------------------------------------------------------ tenant share of the queue

def test_one_tenant_saturating_its_queue_share_never_makes_another_see_503(ankusa):
    s = ankusa(config={"batcher": {"max_queue": 16, "tenant_max_queue": 4}},
               env={"ANKUSA_TEST_COMMIT_DELAY_MS": "300"})
    a_answers, b_answers = [], []
    lock = threading.Lock()
    done = threading.Event()

    def tenant_a():
        while not done.is_set():
            try:
                r = s.post("/webhooks/demo", b"tenant A burst", timeout=30)
            except OSError as e:  # noqa: PERF203 - a broken answer is a failure too
                r = e
            with lock:
                a_answers.append(r)

    def tenant_b(i):
        return s.post("/webhooks/acme_src", b"tenant B %d" % i, timeout=30)

    flooders = [threading.Thread(target=tenant_a) for _ in range(16)]
    for t in flooders:
        t.start()
    time.sleep(0.5)  # A holds its share before B starts
    with ThreadPoolExecutor(max_workers=4) as ex:
        b_answers = list(ex.map(tenant_b, range(12)))
    done.set()
    for t in flooders:
        t.join(30)

    assert [r.status for r in b_answers] == [201] * 12, b_answers
    a_status = [getattr(r, "status", r) for r in a_answers]
    assert 201 in a_status, "tenant A got nothing in"
    over = [r for r in a_answers if getattr(r, "status", None) == 429]
    assert over, f"tenant A never met its share: {a_status}"
    for r in over:
        assert r.json == {"error": "tenant_overload"} and r.headers.get("retry-after") == "1", r
    assert set(a_status) <= {201, 429}, f"tenant A saw something else: {set(a_status)}"
    m = s.metrics()
    assert m.value("ankusa_ingest_responses_total", instance="default", status="503") == 0
    assert m.value("ankusa_ingest_refused_total", instance="default", reason="overload") == 0
    assert m.value("ankusa_ingest_refused_total", instance="default", reason="tenant_overload") == len(over)
    assert m.value("ankusa_batcher_queue_records", instance="default") == 0, "the shares were released"


def test_a_lone_tenant_uses_the_queue_past_its_share_and_a_newcomer_still_gets_in(ankusa):
    """The share is work-conserving: alone, tenant A holds past its share of 4, up to the
    node's 16 less one share kept free (12); a tenant that arrives meanwhile gets in at
    once (the reserve), A is held to its share again (429 tenant_overload), and nobody
    meets a 503."""
    s = ankusa(config={"batcher": {"max_queue": 16, "tenant_max_queue": 4}},
               env={"ANKUSA_TEST_COMMIT_DELAY_MS": "1500"})

    def post_a(i):
        return s.post("/webhooks/demo", b"tenant A %d" % i, timeout=30)

    def post_b(i):
        return s.post("/webhooks/acme_src", b"tenant B %d" % i, timeout=30)

    # alone: 12 at once are all taken (a strict share of 4 would refuse 8 of them)
    with ThreadPoolExecutor(max_workers=12) as ex:
        alone = list(ex.map(post_a, range(12)))
    assert [r.status for r in alone] == [201] * 12, [(r.status, r.json) for r in alone]

    # A fills what it may (16 try: 12 fit), then B arrives while they are held
    with ThreadPoolExecutor(max_workers=24) as ex:
        fa = [ex.submit(post_a, 100 + i) for i in range(16)]
        time.sleep(0.4)
        fb = [ex.submit(post_b, i) for i in range(4)]
        a2 = [f.result() for f in fa]
        b2 = [f.result() for f in fb]
    assert [r.status for r in b2] == [201] * 4, [(r.status, r.json) for r in b2]
    a_status = sorted(r.status for r in a2)
    assert set(a_status) <= {201, 429}, a_status
    over = [r for r in a2 if r.status == 429]
    assert over, f"A was never held back: {a_status}"
    for r in over:
        assert r.json == {"error": "tenant_overload"}, r.json
    m = s.metrics()
    assert m.value("ankusa_ingest_responses_total", instance="default", status="503") == 0
    assert m.value("ankusa_ingest_refused_total", instance="default", reason="overload") == 0
