"""The quarantine pen through the real binary: a forged hook on a source with
`on_verify_failure: quarantine` is answered 202 once it is held; it is listed, survives
kill -9 with its byte count, is released by re-verification under its original id (or
skipped when it still fails), purged by DELETE; the per-source bucket and the byte cap
refuse with 429 / 503. Signatures are computed by the test (helpers.github_sig), never by
ankusa."""
from helpers import LOG, admin_json, github_sig, is_uuid7


def q_source(secret):
    return {"q_src": {"verify": {"type": "github", "secret": secret}, "on_verify_failure": "quarantine",
                      "sinks": LOG}}


def send(s, body, secret):
    return s.post("/webhooks/q_src", body, headers={"X-Hub-Signature-256": github_sig(secret, body),
                                                    "X-GitHub-Event": "push",
                                                    "Content-Type": "application/json"})


def listed(s, query=""):
    r = s.admin("/v1/quarantine" + query)
    assert r.status == 200, r
    return r.json["entries"]


def release(s, **filt):
    r = admin_json(s, "POST", "/v1/replays", dict(kind="quarantine", **filt))
    assert r.status == 202, r
    return r.json


def restart_with(s, sources=None, quarantine=None):
    s.stop()
    if sources is not None:
        s.config["sources"] = sources
    if quarantine is not None:
        s.config["quarantine"] = quarantine
    s.write_config()
    s.start()


def pen_bytes(s):
    return s.metrics().value("ankusa_quarantine_bytes", instance="default")


def test_held_listed_survives_kill9_skipped_then_purged(ankusa):
    s = ankusa(sources=q_source("s3cret"))
    body = b'{"action":"forged","n":1}'
    r = send(s, body, "not-the-secret")
    assert r.status == 202, r
    assert r.json == {"status": "quarantined", "reason": ":no_match"}

    entries = listed(s)
    assert len(entries) == 1
    e = entries[0]
    assert is_uuid7(e["id"])
    assert e["source_id"] == "q_src" and e["tenant_id"] == "default"
    assert e["reason"] == ":no_match" and e["size"] == len(body)
    assert isinstance(e["received_at"], int) and e["received_at"] > 0
    assert set(e) == {"id", "source_id", "tenant_id", "received_at", "reason", "size"}, "no bodies in the list"
    m = s.metrics()
    assert m.value("ankusa_quarantine_bytes", instance="default") == len(body)
    assert m.value("ankusa_quarantine_total", instance="default", result="held") == 1
    assert m.value("ankusa_quarantine_pending", instance="default") == 0
    r = s.admin(f"/v1/hooks/{e['id']}")
    assert r.status == 404, "a held hook is not a hook"

    s.kill9()
    s.start()
    assert listed(s) == entries, "held across kill -9"
    assert pen_bytes(s) == len(body), "and its bytes too"

    rel = release(s)
    assert rel["kind"] == "quarantine" and rel["state"] == "done" and is_uuid7(rel["id"])
    assert (rel["scanned"], rel["moved"], rel["skipped"]) == (1, 0, 1), rel
    for k in ("created_at", "updated_at", "finished_at"):
        assert isinstance(rel[k], int)
    assert listed(s) == entries, "a failed re-verification leaves it held"

    r = admin_json(s, "DELETE", "/v1/quarantine?source_id=q_src")
    assert r.status == 200, r
    assert r.json == {"deleted": 1, "bytes": len(body)}
    assert listed(s) == []
    m = s.metrics()
    assert m.value("ankusa_quarantine_bytes", instance="default") == 0
    assert m.value("ankusa_quarantine_total", instance="default", result="purged") == 1
    s.kill9()
    s.start()
    assert listed(s) == [] and pen_bytes(s) == 0, "the purge is durable"


def test_release_after_rotation_keeps_the_original_id(ankusa):
    s = ankusa(sources=q_source("secret-A"))
    body = b'{"action":"opened","number":7}'
    r = send(s, body, "secret-B")  # the provider already signs with the new secret
    assert r.status == 202 and r.json["reason"] == ":no_match", r
    [held] = listed(s)

    restart_with(s, sources=q_source(["secret-B"]))
    rel = release(s, source_id="q_src")
    assert (rel["scanned"], rel["moved"], rel["skipped"]) == (1, 1, 0), rel
    assert rel["filter"] == {"source_id": "q_src"}
    assert listed(s) == []
    assert pen_bytes(s) == 0
    assert s.metrics().value("ankusa_quarantine_total", instance="default", result="released") == 1

    h = s.hook(held["id"])
    assert h["id"] == held["id"], "committed under its original id"
    assert h["received_at"] == held["received_at"]
    assert h["source_id"] == "q_src" and h["size"] == len(body)
    assert h["verification"] == "ok"
    assert h["seq"] >= 1

    # released once: a second release finds nothing; the hook and the empty pen survive kill -9
    rel = release(s)
    assert (rel["scanned"], rel["moved"]) == (0, 0)
    s.kill9()
    s.start()
    assert s.hook(held["id"])["id"] == held["id"]
    assert listed(s) == [] and pen_bytes(s) == 0


def test_bucket_refusal(ankusa):
    s = ankusa(sources=q_source("s3cret"), config={"quarantine": {"burst": 2, "rate": 0.001}})
    for i in range(2):
        r = send(s, b'{"n":%d}' % i, "forged")
        assert r.status == 202, r
    r = send(s, b'{"n":3}', "forged")
    assert r.status == 429, r
    assert r.json == {"error": "quarantine_rate_limited"}
    assert int(r.headers["retry-after"]) >= 1
    assert len(listed(s)) == 2
    m = s.metrics()
    assert m.value("ankusa_quarantine_total", instance="default", result="rate_limited") == 1
    # a correctly signed hook is not charged to the pen
    r = send(s, b'{"n":4}', "s3cret")
    assert r.status == 201, r


def test_byte_cap(ankusa):
    s = ankusa(sources=q_source("s3cret"), config={"quarantine": {"max_bytes": 1000}})
    r = send(s, b"x" * 600, "forged")
    assert r.status == 202, r
    r = send(s, b"y" * 600, "forged")
    assert r.status == 503, r
    assert r.json == {"error": "quarantine_full"}
    assert r.headers["retry-after"] == "60"
    assert pen_bytes(s) == 600, "a refusal holds nothing"
    # the pen never evicts: the first hook is still there; a purge makes room again
    [e] = listed(s)
    assert e["size"] == 600
    r = admin_json(s, "DELETE", f"/v1/quarantine?id={e['id']}")
    assert r.status == 200 and r.json == {"deleted": 1, "bytes": 600}, r
    r = send(s, b"y" * 600, "forged")
    assert r.status == 202, r


def test_admin_filters_are_validated(ankusa):
    s = ankusa(sources=q_source("s3cret"))

    def bad(r, field):
        assert r.status == 400, r
        assert r.json == {"error": "invalid_filter", "field": field}, r

    bad(s.admin("/v1/quarantine?limit=ten"), "limit")
    bad(admin_json(s, "DELETE", "/v1/quarantine?since=yesterday"), "since")
    bad(admin_json(s, "DELETE", "/v1/quarantine?since=10&until=5"), "until")
    bad(admin_json(s, "DELETE", "/v1/quarantine?id=nope"), "id")
    bad(admin_json(s, "DELETE", "/v1/quarantine?limit=1x"), "limit")
    bad(admin_json(s, "POST", "/v1/replays", b"{not json"), "body")
    bad(admin_json(s, "POST", "/v1/replays", b""), "kind")
    bad(admin_json(s, "POST", "/v1/replays", {"kind": "compost"}), "kind")
    bad(admin_json(s, "POST", "/v1/replays", {"kind": "quarantine", "from": 1}), "from")
    bad(admin_json(s, "POST", "/v1/replays", {"kind": "quarantine", "colour": "red"}), "colour")
    bad(admin_json(s, "POST", "/v1/replays", {"kind": "quarantine", "since": "x"}), "since")
    r = admin_json(s, "POST", "/v1/replays", b"{" + b" " * 70000 + b"}")
    assert r.status == 413, r

    # limit is clamped, newest first
    for i in range(3):
        assert send(s, b'{"n":%d}' % i, "forged").status == 202
    all3 = listed(s, "?limit=0")
    assert len(all3) == 1
    all3 = listed(s, "?limit=5000")
    assert len(all3) == 3
    assert [e["received_at"] for e in all3] == sorted((e["received_at"] for e in all3), reverse=True)
    assert listed(s, "?source_id=other") == []
    r = admin_json(s, "DELETE", "/v1/quarantine?limit=2")
    assert r.status == 200 and r.json["deleted"] == 2, r
    [left] = listed(s)
    assert left["id"] == all3[0]["id"], "DELETE goes oldest first"
