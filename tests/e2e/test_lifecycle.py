"""Lifecycle events (lifecycle.sinks): a source change made over the admin API is flagged
in its own synced audit batch and published as a CloudEvents 1.0 event, in commit order,
each with the source's revision and an id derived from its audit row. Proven here against
the real binary: one event per change, in revision order, with the redacted entity and no
secret; the event of a create answered 201 arrives after a kill -9 right after the 201; a
kill while the sink holds the answer redelivers the same id, and a replay
(POST /v1/replays kind lifecycle) sends the same id again; a sink down for longer than
audit.retention_days (a test-build clock) still gets every event, the expired rows are
held back (ankusa_audit_retention_blocked_by_cursor) and pruned once published; a sink
whose retries run out loses the event (ankusa_lifecycle_dropped_total) and a replay
brings it."""
import json
import threading
import time

from helpers import LOOPBACK, PERSISTENT_STORE, admin_json, wait_until
from receiver import Receiver

FAST = {"retry": {"base_ms": 50, "max_ms": 200, "max_attempts": 84, "jitter": False}, "breaker_failures": 0}
SECRET = "gh-secret-never-in-an-event"
SINK_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
HEADER_SECRET = "hunter2-header-never-in-an-event"


class Gate:
    """A receiver behavior: 503 while closed, 204 once opened; optionally holds an answer."""

    def __init__(self, open_=True, hold_s=0.0):
        self.open = open_
        self.hold_s = hold_s

    def __call__(self, d, n):
        if self.hold_s and n == 0:
            return 204, {}, self.hold_s
        return (204, {}, 0) if self.open else (503, {}, 0)


def node_config(rx, dispatch=None, **extra):
    cfg = dict(LOOPBACK, source_store=PERSISTENT_STORE, dispatch=dispatch or FAST,
               lifecycle={"sinks": [{"type": "http", "url": rx.url}]})
    cfg.update(extra)
    return cfg


def spec(rx, secret=SECRET):
    return {"verify": {"type": "github", "secret": secret},
            "sinks": [{"type": "http", "url": rx.url, "secret": SINK_SECRET, "headers": {"x-team-token": HEADER_SECRET}}]}


def events(rx):
    """The CloudEvents received (every delivery, redeliveries included), oldest first."""
    out = []
    for d in rx.snapshot():
        if d.status != 204:
            continue
        assert d.headers["content-type"] == "application/cloudevents+json", d.headers
        ce = json.loads(d.body)
        assert d.headers["x-ankusa-id"] == ce["id"], "the sink's id header is the event's id"
        out.append(ce)
    return out


def create(node, name, rx, tenant="acme"):
    r = admin_json(node, "POST", f"/v1/tenants/{tenant}/sources", dict(name=name, **spec(rx)))
    assert r.status == 201, r
    return r


def test_an_event_per_change_in_revision_order_redacted(ankusa):
    lrx = Receiver()
    hrx = Receiver()
    try:
        node = ankusa(config=node_config(lrx))
        create(node, "gh", hrx)
        r = admin_json(node, "PUT", "/v1/tenants/acme/sources/gh", spec(hrx, secret="another-secret-never-seen"))
        assert r.status == 200, r
        r = admin_json(node, "DELETE", "/v1/tenants/acme/sources/gh")
        assert r.status == 204, r
        lrx.wait_for(lambda ds: len([d for d in ds if d.status == 204]) >= 3, what="three lifecycle events")
        evs = events(lrx)
        assert [e["type"] for e in evs] == ["io.ankusa.source.created", "io.ankusa.source.updated",
                                            "io.ankusa.source.deleted"]
        assert [e["data"]["revision"] for e in evs] == [1, 2, 3], "in revision order"
        assert len({e["id"] for e in evs}) == 3
        seqs = [int(e["sequence"]) for e in evs]
        assert seqs == sorted(seqs)
        for e in evs:
            assert e["specversion"] == "1.0" and e["source"].startswith("ankusa://")
            assert e["subject"] == "source:acme/gh" and e["datacontenttype"] == "application/json"
            assert e["time"].endswith("Z") and "T" in e["time"]
            assert e["data"]["tenant"] == "acme" and e["data"]["entity"]["name"] == "gh"
        assert evs[0]["data"]["entity"]["verify"]["type"] == "github"
        assert evs[0]["data"]["action"] == "source.create"
        raw = b"".join(d.body for d in lrx.snapshot())
        for secret in (SECRET, SINK_SECRET, HEADER_SECRET, "another-secret-never-seen"):
            assert secret.encode() not in raw, "an event never carries a secret"
        # the audit rows say which rows are events
        rows = admin_json(node, "GET", "/v1/audit?after_seq=0").json["entries"]
        flagged = [r for r in rows if r.get("event")]
        assert [r["event"] for r in flagged] == [e["type"] for e in evs]
        assert [r["seq"] for r in flagged] == seqs
        # the events' source id is reserved: the API refuses it as a source name
        r = admin_json(node, "POST", "/v1/tenants/acme/sources", dict(name="ankusa:lifecycle", **spec(hrx)))
        assert r.status == 400, r
        m = node.metrics()
        assert m.value("ankusa_lifecycle_delivered_total", type="io.ankusa.source.created", sink="http:0", instance="default") == 1
        assert m.value("ankusa_lifecycle_delivered_total", type="io.ankusa.source.deleted", sink="http:0", instance="default") == 1
        assert m.value("ankusa_lifecycle_dropped_total", reason="retries_exhausted", instance="default") == 0
    finally:
        lrx.close()
        hrx.close()


def test_the_event_of_a_201_survives_kill9_and_keeps_its_id(ankusa):
    gate = Gate(open_=False)
    lrx = Receiver(behavior=gate)
    hrx = Receiver()
    try:
        node = ankusa(config=node_config(lrx))
        create(node, "gh", hrx)
        node.kill9()  # right after the 201
        tried = [json.loads(d.body)["id"] for d in lrx.snapshot()]
        gate.open = True
        node.start()
        lrx.wait_for(lambda ds: any(d.status == 204 for d in ds), what="the create's event after the restart")
        (ev,) = [e for e in events(lrx) if e["type"] == "io.ankusa.source.created"][:1]
        assert ev["data"]["revision"] == 1 and ev["subject"] == "source:acme/gh"
        assert all(t == ev["id"] for t in tried), "an attempt before the kill carried the same id"
        # the cursor moved: a clean restart sends nothing again
        time.sleep(0.5)
        n = len(events(lrx))
        node.restart()
        time.sleep(1.0)
        assert len(events(lrx)) == n
    finally:
        lrx.close()
        hrx.close()


def test_kill_while_the_sink_holds_the_answer_redelivers_the_same_id_and_a_replay_too(ankusa):
    gate = Gate(open_=True, hold_s=4.0)  # the first delivery of each id waits 4 s for its answer
    lrx = Receiver(behavior=gate)
    hrx = Receiver()
    try:
        node = ankusa(config=node_config(lrx))
        create(node, "gh", hrx)
        lrx.wait_for(lambda ds: len(ds) >= 1, what="the first delivery (held)")
        node.kill9()  # the sink holds the answer: not published
        gate.hold_s = 0
        node.start()
        lrx.wait_for(lambda ds: len(ds) >= 2, what="the redelivery")
        first, second = [json.loads(d.body) for d in lrx.snapshot()[:2]]
        assert first["id"] == second["id"] and first == second, "a redelivery is the same event"
        r = admin_json(node, "POST", "/v1/replays", {"kind": "lifecycle"})
        assert r.status == 202, r
        assert r.json["kind"] == "lifecycle" and r.json["from_seq"] == 1
        lrx.wait_for(lambda ds: len(ds) >= 3, what="the replayed event")
        third = json.loads(lrx.snapshot()[2].body)
        assert third == first, "a replay is the same event"
        assert lrx.snapshot()[2].headers["x-ankusa-id"] == first["id"]
        rid = r.json["id"]
        wait_until(lambda: admin_json(node, "GET", f"/v1/replays/{rid}").json.get("state") == "done",
                   what="the replay done")
        # bad filters are refused, naming the key; the replay left its own audit row
        r = admin_json(node, "POST", "/v1/replays", {"kind": "lifecycle", "from_seq": 5, "to_seq": 2})
        assert r.status == 400 and "to_seq" in r.body.decode(), r
        r = admin_json(node, "POST", "/v1/replays", {"kind": "lifecycle", "since": 1})
        assert r.status == 400 and "since" in r.body.decode(), r
        rows = admin_json(node, "GET", "/v1/audit?after_seq=0").json["entries"]
        assert any(r["action"] == "replay.create" and r["detail"]["kind"] == "lifecycle" for r in rows)
    finally:
        lrx.close()
        hrx.close()


def test_a_sink_down_longer_than_the_retention_gets_every_event(ankusa, tmp_path):
    gate = Gate(open_=False)
    lrx = Receiver(behavior=gate)
    hrx = Receiver()
    clock = tmp_path / "audit-clock"
    try:
        node = ankusa(config=node_config(lrx, audit={"retention_days": 1}),
                      env={"ANKUSA_TEST_AUDIT_CLOCK_FILE": str(clock), "ANKUSA_TEST_AUDIT_PRUNE_MS": "200"})
        for name in ("a1", "a2", "a3"):
            create(node, name, hrx)
        # three days pass for the audit prune while the sink is down
        clock.write_text(str(int(time.time() * 1000) + 3 * 86400 * 1000))
        wait_until(lambda: node.metrics().value("ankusa_audit_retention_blocked_by_cursor", instance="default") >= 3,
                   what="expired rows held back by the cursor")
        rows = admin_json(node, "GET", "/v1/audit?after_seq=0").json["entries"]
        assert [r["subject"] for r in rows if r.get("event")] == ["source:acme/a1", "source:acme/a2", "source:acme/a3"]
        # a restart (its first prune runs at once, with the clock still days ahead) keeps them too
        node.kill9()
        node.start()
        time.sleep(0.5)
        rows = admin_json(node, "GET", "/v1/audit?after_seq=0").json["entries"]
        assert [r["subject"] for r in rows if r.get("event")] == ["source:acme/a1", "source:acme/a2", "source:acme/a3"]
        gate.open = True
        lrx.wait_for(lambda ds: len([d for d in ds if d.status == 204]) >= 3, what="every event")
        assert [e["subject"] for e in events(lrx)] == ["source:acme/a1", "source:acme/a2", "source:acme/a3"]
        # published: the prune passes them now
        wait_until(lambda: admin_json(node, "GET", "/v1/audit?after_seq=0").json["entries"] == [],
                   what="the published rows pruned")
        assert node.metrics().value("ankusa_audit_retention_blocked_by_cursor", instance="default") == 0
    finally:
        lrx.close()
        hrx.close()


def test_retries_run_out_drops_the_event_and_a_replay_brings_it(ankusa):
    gate = Gate(open_=False)
    lrx = Receiver(behavior=gate)
    hrx = Receiver()
    try:
        short = {"retry": {"base_ms": 20, "max_ms": 50, "max_attempts": 3, "jitter": False}, "breaker_failures": 0}
        node = ankusa(config=node_config(lrx, dispatch=short))
        create(node, "gh", hrx)
        wait_until(lambda: node.metrics().value("ankusa_lifecycle_dropped_total", reason="retries_exhausted", instance="default") == 1,
                   what="the event dropped after 3 attempts")
        assert len(lrx.snapshot()) == 3
        gate.open = True
        create(node, "gh2", hrx)  # the cursor moved on: the next change is published
        lrx.wait_for(lambda ds: any(d.status == 204 for d in ds), what="the next event")
        assert [e["subject"] for e in events(lrx)] == ["source:acme/gh2"]
        r = admin_json(node, "POST", "/v1/replays", {"kind": "lifecycle", "to_seq": 1})
        assert r.status == 202, r
        lrx.wait_for(lambda ds: len([d for d in ds if d.status == 204]) >= 2, what="the replayed event")
        assert [e["subject"] for e in events(lrx)] == ["source:acme/gh2", "source:acme/gh"]
    finally:
        lrx.close()
        hrx.close()


def test_replay_needs_lifecycle_on(ankusa):
    node = ankusa()
    r = admin_json(node, "POST", "/v1/replays", {"kind": "lifecycle"})
    assert r.status == 409 and r.json["error"] == "lifecycle_disabled", r


def test_asyncapi_lists_the_broker_lifecycle_sinks(ankusa):
    node = ankusa(config={"lifecycle": {"sinks": [{"type": "redis", "url": "redis://127.0.0.1:1", "channel": "lc-events"},
                                                  {"type": "log"}]}})
    doc = node.admin("/asyncapi.json").json
    ch = doc["channels"]["lifecycle-0-redis"]
    assert ch["address"] == "lc-events" and "CloudEvents" in ch["description"]
    assert not any(k.startswith("lifecycle-1") for k in doc["channels"]), "a log sink is not a channel"
