"""The dead-letter admin API through the real binary: GET /v1/dlq on an empty dead-letter
set, the validation of its query and of POST /v1/replays kind dlq and PATCH
/v1/replays/{id}, the role checks, and the shape of an entry (the original's fields,
`size` and `content_type` included) for a row a refusing sink dead-lettered. Moving rows
back and the replay job lifecycle are covered by tests/unit/test_replay.c and
tests/e2e/test_delivery.py."""
import time

from helpers import LOG, LOOPBACK, SLOW, admin_json
from receiver import Receiver


def bad(r, field):
    assert r.status == 400, r
    assert r.json == {"error": "invalid_filter", "field": field}, r


def test_dlq_listing_and_its_filters(ankusa):
    s = ankusa(sources={"a": {"sinks": LOG}})
    r = s.admin("/v1/dlq")
    assert r.status == 200, r
    assert r.json == {"total": 0, "entries": []}
    r = s.admin("/v1/dlq?source_id=a&since=0&limit=5000")
    assert r.status == 200 and r.json["total"] == 0, r
    bad(s.admin("/v1/dlq?since=yesterday"), "since")
    bad(s.admin("/v1/dlq?since=-1"), "since")
    bad(s.admin("/v1/dlq?limit=1x"), "limit")
    bad(s.admin("/v1/dlq?source_id="), "source_id")


def test_dlq_replay_request_is_validated(ankusa):
    s = ankusa(sources={"a": {"sinks": LOG}})
    post = lambda body: admin_json(s, "POST", "/v1/replays", body)  # noqa: E731
    bad(post({"kind": "dlq", "colour": "red"}), "colour")
    bad(post({"kind": "dlq", "from": 1, "to": 2}), "from")  # an archive key
    bad(post({"kind": "dlq", "since": "x"}), "since")
    bad(post({"kind": "dlq", "since": 10, "until": 5}), "until")
    bad(post({"kind": "dlq", "id": "not-a-uuid"}), "id")
    bad(post({"kind": "dlq", "source_id": ""}), "source_id")
    for rate in (0, 100001, "fast", 1.5):
        bad(post({"kind": "dlq", "rate": rate}), "rate")
    for lag in (99, 600001, None):
        bad(post({"kind": "dlq", "max_lag_ms": lag}), "max_lag_ms")
    bad(post({"kind": "compost"}), "kind")
    bad(post({"source_id": "a"}), "kind")
    bad(post(b""), "kind")
    bad(post(b"[1,2]"), "body")
    patch = lambda body: admin_json(s, "PATCH", "/v1/replays/0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b", body)  # noqa: E731
    bad(patch({"state": "done"}), "state")
    bad(patch({"state": 1}), "state")
    bad(patch({"rate": 0}), "rate")
    bad(patch({"max_lag_ms": 700000}), "max_lag_ms")
    bad(patch({"kind": "dlq"}), "kind")
    bad(patch(b"{nope"), "body")
    bad(patch(b""), "body")


def test_dlq_routes_need_the_dispatch_role(ankusa):
    s = ankusa(config={"node": {"roles": ["edge", "storage"]}}, sources={"a": {"sinks": LOG}})
    want = {"error": "role_not_enabled", "role": "dispatch"}
    for r in (s.admin("/v1/dlq"),
              s.admin("/v1/replays"),
              s.admin("/v1/replays/0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b"),
              admin_json(s, "POST", "/v1/replays", {"kind": "dlq"}),
              admin_json(s, "PATCH", "/v1/replays/0190a1b2-c3d4-7e5f-8a6b-7c8d9e0f1a2b", {"state": "paused"})):
        assert r.status == 409, r
        assert r.json == want, r
    # a bad request is still a bad request
    bad(s.admin("/v1/dlq?limit=x"), "limit")


def test_dlq_entry_has_the_originals_fields_with_size_and_content_type(ankusa):
    rx = Receiver(behavior=lambda d, n: (410, {}, 0))  # permanent: dead-lettered at once
    try:
        s = ankusa(config=dict(LOOPBACK), sources={"s": {"tenant": "acme", "sinks": [{"type": "http", "url": rx.url}]}})
        body = b'{"event":"gone","n":12345}'
        r = s.post("/webhooks/s", body, {"Content-Type": "application/json; charset=utf-8"})
        assert r.status == 201, r
        hid = r.json["id"]
        r = s.post("/webhooks/s", b"plain", {})
        assert r.status == 201, r
        deadline = time.time() + 20 * SLOW
        while s.admin("/v1/dlq").json["total"] < 2 and time.time() < deadline:
            time.sleep(0.1)
        r = s.admin("/v1/dlq")
        assert r.status == 200 and r.json["total"] == 2, r
        by_id = {e["id"]: e for e in r.json["entries"]}
        e = by_id[hid]
        # every field of the original's entry, with its type (ours add sink_index, sink, attempts)
        original = {"id": str, "source_id": str, "tenant_id": str, "seq": int, "received_at": int,
                    "dead_lettered_at": int, "size": int, "content_type": str, "reason": str}
        for k, t in original.items():
            assert type(e[k]) is t, (k, e)
        assert e["size"] == len(body), e
        assert e["content_type"] == "application/json; charset=utf-8", e
        (other,) = [x for x in r.json["entries"] if x["id"] != hid]
        assert other["size"] == len(b"plain")
        assert "body" not in e and "body_base64" not in e, "no bodies"
    finally:
        rx.close()
