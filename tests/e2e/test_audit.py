"""The audit trail through the real binary: one row for every change an operator makes
(rate-limit put and delete, quarantine purge and release, replay job create and patch,
the log level), naming the principal, the client address and the request's X-Request-Id,
and no row for a request that changes nothing; rows survive kill -9; an audit write that
fails (the test build's ANKUSA_TEST_AUDIT_FAIL seam) blocks the change, which is not
visible after its 503; a tenant-scoped reader sees only its tenants' rows; the raw store
files hold none of the test's tokens and secrets. Signatures and token hashes are
computed by the test (helpers.github_sig, helpers.principal)."""
import json

import pytest

from helpers import LOG, PERSISTENT_STORE, github_sig, principal

TOKENS = {"root": "tok-audit-root-Zr71Qm", "acme": "tok-audit-acme-Lp04Xe", "beta": "tok-audit-beta-Wd55Hn"}
OLD_SECRET = "whsec-audit-old-Vq28Tk"   # the hooks are signed with it
NEW_SECRET = "whsec-audit-new-Jm91Rb"   # the sources verify with it until the rotation back
ALL = ["dlq:read", "replays:read", "replays:write", "quarantine:read", "quarantine:write", "rate_limits:read",
       "rate_limits:write", "audit:read", "log_level:write", "config:read"]


def principals():
    return [
        principal("root", TOKENS["root"], ALL, "*"),
        principal("acme-ops", TOKENS["acme"], ALL, ["acme"]),
        principal("beta-ops", TOKENS["beta"], ALL, ["beta"]),
    ]


def sources(secret):
    q = lambda t: {"tenant": t, "verify": {"type": "github", "secret": secret}, "on_verify_failure": "quarantine",  # noqa: E731
                   "sinks": LOG}
    return {"acme_src": {"tenant": "acme", "sinks": LOG}, "beta_src": {"tenant": "beta", "sinks": LOG},
            "acme_q": q("acme"), "beta_q": q("beta")}


def config():
    return {"admin": {"principals": principals()}}


def hold(s, source, body, secret=OLD_SECRET):
    sig = github_sig(secret, body)
    r = s.post(f"/webhooks/{source}", body, headers={"X-Hub-Signature-256": sig, "Content-Type": "application/json"})
    assert r.status == 202, r
    return r


def adm(s, method, path, body=None, who="root"):
    return s.admin(path, method, body=body, token=TOKENS[who])


def rows(s, after=0, who="root", query=""):
    r = adm(s, "GET", f"/v1/audit?after_seq={after}&limit=1000{query}", who=who)
    assert r.status == 200, r
    return r.json["entries"]


def last_seq(s):
    r = adm(s, "GET", "/v1/audit?limit=1")
    assert r.status == 200, r
    e = r.json["entries"]
    return e[0]["seq"] if e else 0


class Trail:
    """Counts the rows each step adds."""

    def __init__(self, s):
        self.s = s
        self.seq = last_seq(s)

    def new(self):
        out = rows(self.s, self.seq)
        if out:
            self.seq = out[-1]["seq"]
        return out

    def one(self, resp, action, tenant, actor="root"):
        out = self.new()
        assert len(out) == 1, f"{action}: expected one row, got {out}"
        row = out[0]
        assert row["action"] == action, row
        assert row["tenant"] == tenant, row
        assert row["actor"] == actor, row
        assert row["client"] == "127.0.0.1", row
        assert row["request_id"] == resp.headers["x-request-id"], (row, resp.headers)
        assert row["outcome"] == "ok", row
        assert row["revision"] >= 1
        return row

    def none(self, what):
        out = self.new()
        assert out == [], f"{what} changed nothing and must write no row: {out}"


def restart(s, secret=None, env=None, kill=False):
    if kill:
        s.kill9()
    else:
        s.stop()
    if secret:
        s.config["sources"] = sources(secret)
        s.write_config()
    if env is not None:
        s.env = env
    s.start()


def test_a_row_for_every_change_and_none_for_no_ops(ankusa):
    s = ankusa(config=config(), sources=sources(NEW_SECRET))
    t = Trail(s)

    # rate-limit overrides
    r = adm(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 5, "burst": 10})
    assert r.status == 200, r
    row = t.one(r, "rate_limit.put", "acme")
    assert row["subject"] == "rate_limit:acme" and row["before_hash"] is None and len(row["after_hash"]) == 64
    first_after = row["after_hash"]
    r = adm(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 5, "burst": 10})
    assert r.status == 200, r
    t.none("the same override again")
    r = adm(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 6, "burst": 10}, who="acme")
    row = t.one(r, "rate_limit.put", "acme", actor="acme-ops")
    assert row["before_hash"] == first_after and row["after_hash"] != first_after and row["revision"] == 2
    r = adm(s, "DELETE", "/v1/tenants/acme/rate-limit")
    assert r.status == 204, r
    row = t.one(r, "rate_limit.delete", "acme")
    assert row["after_hash"] is None and row["revision"] == 3
    r = adm(s, "DELETE", "/v1/tenants/acme/rate-limit")
    assert r.status == 404, r
    t.none("deleting nothing")

    # quarantine purge
    ids = [hold(s, "acme_q", b'{"n":%d}' % i).json for i in range(3)]
    assert all(x["status"] == "quarantined" for x in ids)
    held = adm(s, "GET", "/v1/quarantine?source_id=acme_q").json["entries"]
    assert len(held) == 3
    r = adm(s, "DELETE", f"/v1/quarantine?id={held[0]['id']}")
    assert r.status == 200 and r.json["deleted"] == 1, r
    row = t.one(r, "quarantine.purge", "acme")
    assert row["detail"] == {"deleted": 1, "bytes": held[0]["size"]} and row["after_hash"] is None
    r = adm(s, "DELETE", "/v1/quarantine?since=1&until=2")
    assert r.status == 200 and r.json["deleted"] == 0, r
    t.none("a purge that matches nothing")

    # quarantine release: fails re-verification under NEW_SECRET, so nothing moves, no row
    r = adm(s, "POST", "/v1/replays", {"kind": "quarantine", "source_id": "acme_q"})
    assert r.status == 202 and r.json["moved"] == 0 and r.json["scanned"] == 2, r
    t.none("a release in which nothing passes")
    # the sources go back to the secret the hooks were signed with: both pass
    restart(s, secret=OLD_SECRET)
    t.none("a restart")
    r = adm(s, "POST", "/v1/replays", {"kind": "quarantine", "source_id": "acme_q"}, who="acme")
    assert r.status == 202 and r.json["moved"] == 2, r
    row = t.one(r, "quarantine.release", "acme", actor="acme-ops")
    assert row["detail"] == {"scanned": 2, "moved": 2, "skipped": 0}, row
    assert row["before_hash"] and row["after_hash"] is None, "every candidate left the pen"

    # replay jobs
    r = adm(s, "POST", "/v1/replays", {"kind": "dlq", "source_id": "beta_src", "rate": 50})
    assert r.status == 202, r
    job = r.json["id"]
    row = t.one(r, "replay.create", "beta")
    assert row["subject"] == f"replay:{job}" and row["before_hash"] is None and row["revision"] == 1
    r = adm(s, "POST", "/v1/replays", {"kind": "dlq", "source_id": "beta_src", "rate": 50})
    assert r.status == 200 and r.json["id"] == job, r
    t.none("the same job again")
    r = adm(s, "PATCH", f"/v1/replays/{job}", {"rate": 60}, who="beta")
    assert r.status == 200 and r.json["rate"] == 60, r
    row = t.one(r, "replay.patch", "beta", actor="beta-ops")
    assert row["revision"] == 2
    r = adm(s, "PATCH", f"/v1/replays/{job}", {"rate": 60, "state": "running"})
    assert r.status == 200, r
    t.none("a patch to the values it has")
    r = adm(s, "PATCH", f"/v1/replays/{job}", {"state": "paused"})
    t.one(r, "replay.patch", "beta")

    # log level: in force at once
    assert adm(s, "GET", "/v1/log-level").json == {"level": "info"}
    s.admin("/v1/wal")  # an unauthorized request logs at debug: not yet
    assert 'msg="unauthorized request"' not in s.log_text()
    r = adm(s, "PUT", "/v1/log-level", {"level": "debug"})
    assert r.status == 200 and r.json == {"level": "debug", "previous": "info"}, r
    row = t.one(r, "log_level.put", None)
    assert row["tenants"] == [] and row["subject"] == "log_level"
    s.admin("/v1/wal")
    assert 'level=debug component=admin msg="unauthorized request"' in s.log_text()
    r = adm(s, "PUT", "/v1/log-level", {"level": "debug"})
    assert r.status == 200, r
    t.none("the same level again")
    for bad in ({"level": "verbose"}, {"level": "info", "x": 1}, [], b"nope"):
        r = adm(s, "PUT", "/v1/log-level", bad)
        assert r.status == 400 and r.json["error"] == "invalid_log_level", r
    t.none("refused requests")
    r = adm(s, "PUT", "/v1/log-level", {"level": "info"})
    t.one(r, "log_level.put", None)

    # the rows survive kill -9, in order, with dense seqs
    everything = rows(s)
    restart(s, kill=True)
    assert rows(s) == everything
    assert [x["seq"] for x in everything] == list(range(1, len(everything) + 1))
    assert [x["action"] for x in everything] == [
        "rate_limit.put", "rate_limit.put", "rate_limit.delete", "quarantine.purge", "quarantine.release",
        "replay.create", "replay.patch", "replay.patch", "log_level.put", "log_level.put"]


def test_newest_first_and_filters(ankusa):
    s = ankusa(config=config(), sources=sources(NEW_SECRET))
    for t in ("acme", "beta", "acme"):
        assert adm(s, "PUT", f"/v1/tenants/{t}/rate-limit", {"rate": 1, "burst": 1}).status == 200
        assert adm(s, "DELETE", f"/v1/tenants/{t}/rate-limit").status == 204
    r = adm(s, "GET", "/v1/audit?limit=2")
    assert [x["seq"] for x in r.json["entries"]] == [6, 5] and r.json["next_before_seq"] == 5, r.json
    r = adm(s, "GET", "/v1/audit?before_seq=5")
    assert [x["seq"] for x in r.json["entries"]] == [4, 3, 2, 1] and r.json["next_before_seq"] is None
    r = adm(s, "GET", "/v1/audit?action=rate_limit.delete&tenant=acme")
    assert [x["seq"] for x in r.json["entries"]] == [6, 2], r.json
    r = adm(s, "GET", "/v1/audit?after_seq=4&limit=1")
    assert [x["seq"] for x in r.json["entries"]] == [5] and r.json["next_after_seq"] == 5
    assert adm(s, "GET", "/v1/audit?since=99999999999999").json["entries"] == []
    for q, field in (("after_seq=x", "after_seq"), ("since=-1", "since"), ("after_seq=1&before_seq=2", "before_seq"),
                     ("tenant=a%20b", "tenant"), ("limit=z", "limit")):
        r = adm(s, "GET", f"/v1/audit?{q}")
        assert r.status == 400 and r.json == {"error": "invalid_filter", "field": field}, (q, r)


def test_a_tenant_scoped_reader_sees_only_its_tenants(ankusa):
    s = ankusa(config=config(), sources=sources(NEW_SECRET))
    assert adm(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 1, "burst": 1}).status == 200
    assert adm(s, "PUT", "/v1/tenants/beta/rate-limit", {"rate": 1, "burst": 1}, who="beta").status == 200
    assert adm(s, "PUT", "/v1/log-level", {"level": "warning"}).status == 200
    hold(s, "acme_q", b'{"a":1}')
    hold(s, "beta_q", b'{"b":1}')
    assert adm(s, "DELETE", "/v1/quarantine").json["deleted"] == 2  # one row naming both tenants
    assert adm(s, "DELETE", "/v1/tenants/acme/rate-limit", who="acme").status == 204
    everything = rows(s)
    assert len(everything) == 5
    mine = rows(s, who="acme")
    assert [x["action"] for x in mine] == ["rate_limit.put", "rate_limit.delete"], mine
    assert all(x["tenants"] == ["acme"] for x in mine)
    theirs = rows(s, who="beta")
    assert [x["action"] for x in theirs] == ["rate_limit.put"], theirs
    purge = [x for x in everything if x["action"] == "quarantine.purge"][0]
    assert purge["tenants"] == ["acme", "beta"] and purge["tenant"] is None
    newest = adm(s, "GET", "/v1/audit", who="acme").json["entries"]
    assert [x["seq"] for x in newest] == [x["seq"] for x in reversed(mine)]
    r = adm(s, "GET", "/v1/audit?tenant=beta", who="acme")
    assert r.status == 403 and r.json == {"error": "forbidden", "scope": "audit:read", "tenant": "beta"}, r
    assert rows(s, who="acme", query="&tenant=acme") == mine


def test_a_failed_audit_write_blocks_the_change(ankusa, tmp_path):
    flag = tmp_path / "audit-fails"
    s = ankusa(config=config(), sources=sources(NEW_SECRET), env={"ANKUSA_TEST_AUDIT_FAIL": str(flag)})
    # state to change, made while the trail works: held hooks that a release would move
    hold(s, "acme_q", b'{"held":1}')
    hold(s, "acme_q", b'{"held":2}')
    restart(s, secret=OLD_SECRET)
    # The DLQ is empty: a running job is done at its first tick, and the PATCH below would
    # meet 409 replay_finished before the audit write it is about. Paused, the job stays
    # patchable; one that finished between its POST and the pause is replaced.
    jobs = []
    for _ in range(50):
        r = adm(s, "POST", "/v1/replays", {"kind": "dlq", "source_id": "acme_src", "rate": 10})
        assert r.status == 202, r
        jobs.append(r.json["id"])
        p = adm(s, "PATCH", f"/v1/replays/{jobs[-1]}", {"state": "paused"})
        if p.status == 200:
            break
        assert p.status == 409 and p.json == {"error": "replay_finished"}, p
    else:
        pytest.fail("every replay job finished before it could be paused")
    job = jobs[-1]
    assert adm(s, "PUT", "/v1/tenants/beta/rate-limit", {"rate": 2, "burst": 2}).status == 200
    before = rows(s)
    flag.write_text("1")

    def refused(r):
        assert r.status == 503 and r.json == {"error": "store_unavailable"}, r
        assert r.headers.get("retry-after") == "1"

    refused(adm(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 5, "burst": 10}))
    assert adm(s, "GET", "/v1/tenants/acme/rate-limit").json["source"] == "none", "no override was set"
    refused(adm(s, "DELETE", "/v1/tenants/beta/rate-limit"))
    assert adm(s, "GET", "/v1/tenants/beta/rate-limit").json["source"] == "override", "the override stays"
    refused(adm(s, "DELETE", "/v1/quarantine"))
    assert len(adm(s, "GET", "/v1/quarantine").json["entries"]) == 2, "nothing purged"
    refused(adm(s, "POST", "/v1/replays", {"kind": "quarantine"}))
    assert len(adm(s, "GET", "/v1/quarantine").json["entries"]) == 2, "nothing released"
    assert s.inspect() == [], "no hook committed"
    refused(adm(s, "POST", "/v1/replays", {"kind": "dlq", "source_id": "beta_src"}))
    assert sorted(j["id"] for j in adm(s, "GET", "/v1/replays").json["replays"]) == sorted(jobs), "no job created"
    refused(adm(s, "PATCH", f"/v1/replays/{job}", {"rate": 99}))
    assert adm(s, "GET", f"/v1/replays/{job}").json["rate"] == 10, "the job is unchanged"
    refused(adm(s, "PUT", "/v1/log-level", {"level": "error"}))
    assert adm(s, "GET", "/v1/log-level").json == {"level": "info"}
    assert rows(s) == before, "no row for a change that was not made"
    # no-ops are still answered: they write nothing
    assert adm(s, "PUT", "/v1/log-level", {"level": "info"}).status == 200
    assert adm(s, "DELETE", "/v1/quarantine?since=1&until=2").status == 200
    # and everything passes again once the trail can be written
    flag.unlink()
    assert adm(s, "PUT", "/v1/log-level", {"level": "error"}).status == 200
    assert adm(s, "DELETE", "/v1/quarantine").json["deleted"] == 2
    assert [x["action"] for x in rows(s, before[-1]["seq"])] == ["log_level.put", "quarantine.purge"]


def test_the_store_holds_no_token_and_no_secret(ankusa):
    s = ankusa(config=config(), sources=sources(OLD_SECRET))
    hold(s, "acme_q", b'{"x":1}', secret="wrong")
    assert adm(s, "PUT", "/v1/tenants/acme/rate-limit", {"rate": 5, "burst": 10}).status == 200
    assert adm(s, "POST", "/v1/replays", {"kind": "quarantine"}).status == 202
    assert adm(s, "DELETE", "/v1/quarantine").status == 200
    assert adm(s, "POST", "/v1/replays", {"kind": "dlq", "source_id": "acme_src"}).status == 202
    assert adm(s, "PUT", "/v1/log-level", {"level": "debug"}).status == 200
    for who in TOKENS:  # requests with every token, good and bad
        s.admin("/v1/audit", token=TOKENS[who])
        s.admin("/v1/audit", token=TOKENS[who] + "-wrong")
    assert [x["action"] for x in rows(s)] == ["rate_limit.put", "quarantine.purge", "replay.create", "log_level.put"]
    s.stop()
    needles = [v.encode() for v in TOKENS.values()] + [OLD_SECRET.encode(), NEW_SECRET.encode()]
    needles += [p["token_sha256"].encode() for p in principals()]
    files = [f for f in s.store_dir.rglob("*") if f.is_file()]
    assert files
    for f in files:
        data = f.read_bytes()
        for n in needles:
            assert n not in data, f"{n!r} found in {f.name}"
    for n in needles:
        assert n.decode() not in s.log_text(), f"{n!r} in the log"
    s.start()


def test_source_changes_are_audited_in_their_batch(ankusa, tmp_path):
    """A source created, updated and deleted over the API leaves one row each (the
    principal, the subject, hashes that change with the spec, never the spec); with the
    trail failing, the change is not made."""
    flag = tmp_path / "audit-fails"
    scopes = ["sources:read", "sources:write", "audit:read"]
    cfg = {"admin": {"principals": [principal("root", TOKENS["root"], scopes, "*")]},
           "source_store": PERSISTENT_STORE}
    s = ankusa(config=cfg, env={"ANKUSA_TEST_AUDIT_FAIL": str(flag)})
    spec = {"verify": {"type": "github", "secret": "src-secret-Xy81Kq"}, "sinks": LOG}
    r = adm(s, "POST", "/v1/tenants/acme/sources", dict(spec, name="gh"))
    assert r.status == 201, r
    assert adm(s, "PUT", "/v1/tenants/acme/sources/gh",
               {"verify": {"type": "github", "secret": "src-secret-2-Pw55Ja"}, "sinks": LOG}).status == 200
    got = [x for x in rows(s) if x["action"].startswith("source.")]
    assert [x["action"] for x in got] == ["source.create", "source.update"], got
    assert all(x["actor"] == "root" and x["tenant"] == "acme" for x in got), got
    assert "src-secret" not in json.dumps(got), "a row never holds the spec or its secret"
    flag.write_text("1")
    r = adm(s, "DELETE", "/v1/tenants/acme/sources/gh")
    assert r.status == 503, r
    assert adm(s, "GET", "/v1/tenants/acme/sources/gh").status == 200, "the source was not deleted"
    r = adm(s, "POST", "/v1/tenants/acme/sources", dict(spec, name="gh2"))
    assert r.status == 503, r
    assert adm(s, "GET", "/v1/tenants/acme/sources/gh2").status == 404, "the source was not created"
    flag.unlink()
    assert adm(s, "DELETE", "/v1/tenants/acme/sources/gh").status in (200, 204)
    assert [x["action"] for x in rows(s) if x["action"].startswith("source.")][-1] == "source.delete"
