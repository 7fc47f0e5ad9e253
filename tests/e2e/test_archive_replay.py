"""Archive replay (POST /v1/replays kind archive): hooks delivered, archived and reclaimed
are re-delivered from the archive through the normal dispatch path, with their original
ids and the job's replay id (the HTTP sink's x-ankusa-replay-id), bodies byte for byte;
the hooks put back into the store are reclaimed again once delivered. The window is on
received_at (inclusive), narrowed by source_id, tenant_id and sinks; a job survives a kill
-9 (its cursor commits with the rows it moves); a segment whose object is gone is passed
over (counted skipped), never failing the job.

Black-box: the admin API, the receiver, the node's metrics, `ankusa inspect`, the LocalFS
files under <data_dir>/default/segments, and kill -9.
"""
import time

from helpers import SLOW, admin_json, post_many, wait_until
from receiver import Receiver
from test_archive import archive_cfg, segments, wait_archived_and_reclaimed
from test_cursor_kills import delivered_ok, stored


def bad(r, field):
    assert r.status == 400, r
    assert r.json == {"error": "invalid_filter", "field": field}, r


def sources(rx):
    return {"s": {"tenant": "t1", "sinks": [{"type": "http", "url": rx.url}]},
            "u": {"tenant": "t2", "sinks": [{"type": "http", "url": rx.url}]}}


def post_wave(node, tag, n, src):
    res = post_many(node.http_port, [b"%s-%s-%d-" % (tag, src.encode(), i) + b"x" * (i * 37 % 500)
                                     for i in range(n)], path=f"/webhooks/{src}")
    out = {}
    for body, r in res:
        assert not isinstance(r, Exception) and r.status == 201, r
        out[r.json["id"]] = body
    return out


def received_at(node, hid):
    r = node.admin(f"/v1/hooks/{hid}")
    assert r.status == 200, r
    return r.json["received_at"]


def replayed(rx, rid=None):
    return [d for d in rx.snapshot() if d.headers.get("x-ankusa-replay-id") is not None
            and (rid is None or d.headers["x-ankusa-replay-id"] == rid)]


def settle(node, rx, hooks, what):
    """Until every hook is delivered, archived and reclaimed (the store holds none)."""
    wait_until(lambda: set(hooks) <= set(delivered_ok(rx)), timeout=30 * SLOW, what=f"{what}: delivered")
    wait_archived_and_reclaimed(node, 30, f"{what}: archived and reclaimed")


def start_replay(node, **body):
    body = dict(kind="archive", **body)
    r = admin_json(node, "POST", "/v1/replays", body)
    assert r.status == 202, r
    j = r.json
    assert j["kind"] == "archive" and j["state"] == "running", j
    return j["id"]


def wait_job(node, rid, timeout=30, what="the replay done", pred=None):
    pred = pred or (lambda j: j["state"] == "done")
    out = {}

    def done():
        r = node.admin(f"/v1/replays/{rid}")
        assert r.status == 200, r
        out["j"] = r.json
        return pred(r.json)
    wait_until(done, timeout=timeout * SLOW, what=what)
    return out["j"]


def window_of(node, hooks):
    ats = [received_at(node, h) for h in hooks]
    return min(ats), max(ats)


def store_hooks_gauge(node):
    return node.metrics().value("ankusa_store_hooks", instance="default")


def test_archive_replay_redelivers_a_window_and_reclaims_again(ankusa):
    """Two waves (both sources) delivered, archived, reclaimed; a replay of the first
    wave's window re-delivers exactly its hooks once each, with their ids, the job's replay
    id and the very bodies; the job ends done with moved and delivered equal to that count;
    the hooks put back are reclaimed again and ankusa_store_hooks returns to 0. A window
    holding nothing ends done with moved 0. The request's validation and the job's JSON."""
    rx = Receiver()
    try:
        node = ankusa(config=archive_cfg(), sources=sources(rx))
        a = {**post_wave(node, b"a", 15, "s"), **post_wave(node, b"a", 10, "u")}
        time.sleep(0.3)
        b = {**post_wave(node, b"b", 15, "s"), **post_wave(node, b"b", 10, "u")}
        settle(node, rx, {**a, **b}, "both waves")
        assert store_hooks_gauge(node) == 0
        lo, hi = window_of(node, a)
        assert hi < min(received_at(node, h) for h in b), "the waves overlap in time"
        n0 = len(rx.snapshot())
        rid = start_replay(node, **{"from": lo, "to": hi})
        j = wait_job(node, rid, pred=lambda j: j["state"] == "done" and j["delivered"] == len(a),
                     what="the replay done and its deliveries counted")
        assert j["moved"] == len(a) and j["dead"] == 0, j
        assert j["filter"] == {"from": lo, "to": hi}, j
        wait_until(lambda: not stored(node), timeout=20 * SLOW, what="the replayed hooks reclaimed again")
        wait_until(lambda: store_hooks_gauge(node) == 0, timeout=10 * SLOW, what="ankusa_store_hooks back to 0")
        time.sleep(0.3)
        again = rx.snapshot()[n0:]
        assert all(d.headers.get("x-ankusa-replay-id") == rid for d in again), \
            [d.headers for d in again if d.headers.get("x-ankusa-replay-id") != rid][:3]
        ids = [d.id for d in again]
        assert sorted(ids) == sorted(a), "exactly the window's hooks, once each"
        for d in again:
            assert d.body == a[d.id], d.id
            assert 200 <= d.status < 300
        m = node.metrics()
        assert m.value("ankusa_replay_moved_total", instance="default", kind="archive") == len(a)
        # the job is listed, with its kind and filter
        r = node.admin("/v1/replays")
        assert r.status == 200 and [x["kind"] for x in r.json["replays"] if x["id"] == rid] == ["archive"]
        # a window with nothing in it
        rid2 = start_replay(node, **{"from": 1, "to": 1000})
        j = wait_job(node, rid2)
        assert j["moved"] == 0 and j["skipped"] == 0, j
        # PATCH as for a dlq job: paused, resumed, cancelled (then finished)
        rid3 = start_replay(node, **{"from": lo, "to": hi, "rate": 1})
        r = admin_json(node, "PATCH", f"/v1/replays/{rid3}", {"state": "paused"})
        assert r.status == 200 and r.json["state"] == "paused" and r.json["kind"] == "archive", r
        r = admin_json(node, "PATCH", f"/v1/replays/{rid3}", {"state": "running", "rate": 2})
        assert r.status == 200 and r.json["state"] == "running" and r.json["rate"] == 2, r
        r = admin_json(node, "PATCH", f"/v1/replays/{rid3}", {"state": "cancelled"})
        assert r.status == 200 and r.json["state"] == "cancelled" and r.json["finished_at"], r
        r = admin_json(node, "PATCH", f"/v1/replays/{rid3}", {"state": "running"})
        assert r.status == 409 and r.json["error"] == "replay_finished", r
        # validation (the original's invalid_filter{field})
        post = lambda body: admin_json(node, "POST", "/v1/replays", body)  # noqa: E731
        bad(post({"kind": "archive", "to": 5}), "from")
        bad(post({"kind": "archive", "from": 5}), "to")
        bad(post({"kind": "archive", "from": 6, "to": 5}), "to")
        bad(post({"kind": "archive", "from": "yesterday", "to": 5}), "from")
        bad(post({"kind": "archive", "from": 1, "to": 5, "sinks": [0, 0]}), "sinks")
        bad(post({"kind": "archive", "from": 1, "to": 5, "sinks": []}), "sinks")
        bad(post({"kind": "archive", "from": 1, "to": 5, "sinks": [-1]}), "sinks")
        bad(post({"kind": "archive", "from": 1, "to": 5, "sinks": "0"}), "sinks")
        bad(post({"kind": "archive", "from": 1, "to": 5, "source_id": "s", "sinks": [1]}), "sinks")
        bad(post({"kind": "archive", "from": 1, "to": 5, "tenant_id": ""}), "tenant_id")
        bad(post({"kind": "archive", "from": 1, "to": 5, "since": 1}), "since")
        bad(post({"kind": "archive", "from": 1, "to": 5, "rate": 0}), "rate")
        bad(post({"kind": "dlq", "tenant_id": "t1"}), "tenant_id")
        # audited like a dlq job's creation
        r = node.admin("/v1/audit?action=replay.create")
        assert r.status == 200, r
        assert f"replay:{rid}" in {e.get("subject") for e in r.json["entries"]}, r.json
    finally:
        rx.close()


def test_archive_replay_filters_by_source_and_tenant(ankusa):
    """source_id replays only that source's hooks of the window, tenant_id only that
    tenant's; sinks [0] is the source's first sink."""
    rx = Receiver()
    try:
        node = ankusa(config=archive_cfg(), sources=sources(rx))
        s = post_wave(node, b"a", 12, "s")
        u = post_wave(node, b"a", 8, "u")
        settle(node, rx, {**s, **u}, "the hooks")
        lo, hi = window_of(node, {**s, **u})
        rid = start_replay(node, **{"from": lo, "to": hi, "source_id": "u", "sinks": [0]})
        j = wait_job(node, rid, pred=lambda j: j["state"] == "done" and j["delivered"] == len(u))
        assert j["moved"] == len(u), j
        assert j["filter"] == {"from": lo, "to": hi, "source_id": "u", "sinks": [0]}, j
        assert sorted(d.id for d in replayed(rx, rid)) == sorted(u)
        wait_until(lambda: not stored(node), timeout=20 * SLOW, what="reclaimed again")
        rid = start_replay(node, **{"from": lo, "to": hi, "tenant_id": "t1"})
        j = wait_job(node, rid, pred=lambda j: j["state"] == "done" and j["delivered"] == len(s))
        assert j["moved"] == len(s), j
        assert sorted(d.id for d in replayed(rx, rid)) == sorted(s)
        for d in replayed(rx):
            assert d.body == {**s, **u}[d.id]
        wait_until(lambda: not stored(node), timeout=20 * SLOW, what="reclaimed again")
        wait_until(lambda: store_hooks_gauge(node) == 0, timeout=10 * SLOW, what="ankusa_store_hooks back to 0")
    finally:
        rx.close()


def test_archive_replay_survives_kill9(ankusa):
    """A slow job (rate 4/s) killed -9 mid-way resumes from its cursor after the restart:
    every hook of the window is delivered again at least once with the job's replay id,
    none outside it, few twice (not a restart from the window's start), and the job ends
    done."""
    rx = Receiver()
    try:
        node = ankusa(config=archive_cfg(), sources=sources(rx))
        a = post_wave(node, b"a", 24, "s")
        time.sleep(0.3)
        b = post_wave(node, b"b", 10, "s")
        settle(node, rx, {**a, **b}, "the hooks")
        lo, hi = window_of(node, a)
        rid = start_replay(node, **{"from": lo, "to": hi, "rate": 4})
        j = wait_job(node, rid, pred=lambda j: j["moved"] >= 12, what="the job under way")
        assert j["state"] == "running", j
        node.kill9()
        node.start()
        j = wait_job(node, rid, timeout=60, pred=lambda j: j["state"] == "done")
        assert j["kind"] == "archive", j
        wait_until(lambda: set(a) <= {d.id for d in replayed(rx, rid)}, timeout=20 * SLOW,
                   what="every hook of the window delivered again")
        got = {d.id for d in replayed(rx, rid)}
        assert got == set(a), f"outside the window: {sorted(got - set(a))[:5]}"
        # resumed from its cursor, not from the start: a restart from scratch would deliver
        # the 12+ moved before the kill twice
        n = len(replayed(rx, rid))
        assert n <= len(a) + 6, f"{n} replayed deliveries for {len(a)} hooks"
        for d in replayed(rx, rid):
            assert d.body == a[d.id]
        wait_until(lambda: not stored(node), timeout=20 * SLOW, what="reclaimed again after the kill")
        wait_until(lambda: store_hooks_gauge(node) == 0, timeout=10 * SLOW, what="ankusa_store_hooks back to 0")
    finally:
        rx.close()


def test_archive_replay_passes_over_a_missing_segment(ankusa):
    """Three waves in three segments; the middle one's .seg deleted: a replay over all
    three re-delivers the first and last waves, counts the gone segment skipped, logs it,
    and ends done."""
    rx = Receiver()
    try:
        node = ankusa(config=archive_cfg(), sources=sources(rx))
        waves = []
        for tag in (b"a", b"b", b"c"):
            w = post_wave(node, tag, 8, "s")
            settle(node, rx, w, f"wave {tag.decode()}")
            waves.append(w)
        rows = sorted(segments(node), key=lambda r: r["first_seq"])
        root = node.data_dir / "default" / "segments"
        # the rows of the middle wave: its hooks' seqs
        seq_of = {}
        for w in waves:
            for h in w:
                r = node.admin(f"/v1/hooks/{h}")
                seq_of[h] = r.json.get("seq")
        mid = {seq_of[h] for h in waves[1]}
        assert None not in mid, "GET /v1/hooks/{id} gives no seq"
        gone_rows = [r for r in rows if r["first_seq"] <= max(mid) and r["last_seq"] >= min(mid)]
        assert gone_rows and all(r["first_seq"] > max(seq_of[h] for h in waves[0]) and
                                 r["last_seq"] < min(seq_of[h] for h in waves[2]) for r in gone_rows), \
            "the waves share segments"
        for r in gone_rows:
            (root / r["segment"]).unlink()
        lo, _ = window_of(node, waves[0])
        _, hi = window_of(node, waves[2])
        rid = start_replay(node, **{"from": lo, "to": hi})
        want = {**waves[0], **waves[2]}
        j = wait_job(node, rid, pred=lambda j: j["state"] == "done" and j["delivered"] == len(want))
        assert j["moved"] == len(want) and j["skipped"] >= len(gone_rows), j
        assert sorted(d.id for d in replayed(rx, rid)) == sorted(want)
        assert "archive replay passes over a segment" in node.log_text()
        wait_until(lambda: not stored(node), timeout=20 * SLOW, what="reclaimed again")
    finally:
        rx.close()


def test_archive_replay_needs_the_storage_role(ankusa):
    node = ankusa(config={"node": {"roles": ["edge", "dispatch"]}}, sources={"a": {"sinks": [{"type": "log"}]}})
    r = admin_json(node, "POST", "/v1/replays", {"kind": "archive", "from": 1, "to": 2})
    assert r.status == 409 and r.json == {"error": "role_not_enabled", "role": "storage"}, r
    bad(admin_json(node, "POST", "/v1/replays", {"kind": "archive", "to": 2}), "from")

