"""No secret in the clear, for every secret option (issue 19, item 7).

The rows come from the binary itself (`ankusa options --secrets`: every option row a
module or plug-in flags secret), so a secret option added later is covered without
editing this test; a row this test cannot build a value for fails it by name. Each row
gets its own canary value; the node runs with all of them set (config-file sources for
the plug-in rows, the same specs again through the sources API), is driven through the
paths that handle secrets (verification failures, a credential that passes, admin calls
with a bad and a good token, invalid API specs, deliveries), and then every log line,
`/metrics`, every error body, `print-config`, `/v1/config`, the audit trail and every
row of the store (read through its iterator: `ankusa inspect rows`) is searched for each
canary, its base64 and its hex form.
"""
import base64
import hashlib
import json
import secrets as pysecrets

import pytest

from helpers import BIN, SOURCE_STORE_KEY, run_cli, wait_until
from nats_server import user_nkey

# A row whose section asks for a feature not built yet is refused at load (exit 78);
# its value is then checked against the refusal's text only. Each feature's issue
# removes its row from here when the row starts to load.
REFUSED = {
}

# Rows that load alone but not beside others: claim_check.store and claim_check.stores
# exclude each other, so the node carries the stores' rows and these are checked alone.
SOLO_ONLY = ("claim_check.store.", "source_store.url")  # the url means redis; the node is persistent

# Siblings a row needs beside it to load (the rest of its mapping).
SECTION_CONTEXT = {
    "source_store.url": {"secret_key": SOURCE_STORE_KEY},
    "intake.sasl.password": {"mechanism": "plain", "username": "leak"},
    "admin.principals[].token_sha256": {"name": "leaker", "tenants": ["*"], "scopes": [
        "sources:read", "sources:write", "dlq:read", "replays:read", "quarantine:read", "rate_limits:read",
        "audit:read", "config:read", "hooks:read", "metrics:read"]},
}
PLUGIN_CONTEXT = {
    "verify:hmac": {"signature_header": "X-Leak-Sig"},
    "verify:token": {"location": "header", "header": "X-Leak-Token"},
}


# The rest of a sink's mapping besides its secret rows, per type (host: where it points; the
# API's sinks are guarded, so they name a host, never a private literal).
def sink_base(ptype, host):
    return {
        "kafka": {"brokers": f"{host}:9092", "topic": "leak", "sasl": {"mechanism": "plain", "username": "leak"}},
        "rabbitmq": {"exchange": "leak"},
        "nats": {"servers": [f"nats://{host}:4222"], "subject": "leak"},
        "redis": {"channel": "leak"},
        "sqs": {"queue_url": "https://sqs.us-east-1.amazonaws.com/123456789012/leak", "access_key_id": "AKIALEAKTEST"},
        "google_pubsub": {"project": "leak", "topic": "leak", "auth": "token"},
    }.get(ptype, {})


# A sink type that takes one of its secret rows at a time (nats: one auth scheme).
ONE_ROW_PER_SINK = {"nats"}


def sink_key(ptype, path, n):
    return f"{ptype}_{n}" if ptype in ONE_ROW_PER_SINK else ptype


class Canary:
    """One secret value and the forms it must never appear in."""

    def __init__(self, label, raw=None):
        self.label = label
        self.raw = raw or f"Lk{pysecrets.token_hex(12)}"

    def forms(self):
        b = self.raw.encode()
        out = {"raw": b, "base64": base64.b64encode(b), "base64url": base64.urlsafe_b64encode(b).rstrip(b"="),
               "hex": b.hex().encode(), "HEX": b.hex().upper().encode()}
        return out


CANARIES = []


def canary(label, raw=None):
    c = Canary(label, raw)
    CANARIES.append(c)
    return c


def whsec(c):
    """A Standard Webhooks secret whose key bytes are the canary's."""
    return "whsec_" + base64.b64encode(c.raw.encode()).decode()


def unescape(text):
    """A key or value of `ankusa inspect rows`: printable ASCII as is, other bytes \\xNN."""
    out = bytearray()
    i = 0
    while i < len(text):
        if text[i] == "\\" and text[i + 1:i + 2] == "x":
            out.append(int(text[i + 2:i + 4], 16))
            i += 4
        else:
            out.append(ord(text[i]))
            i += 1
    return bytes(out)


def secret_rows():
    p = run_cli("options", "--secrets")
    assert p.returncode == 0, p.stderr
    rows = []
    for line in p.stdout.splitlines():
        where, path, typ = line.split("\t")
        rows.append((where, path, typ))
    assert rows, "ankusa options --secrets listed no row"
    return rows


def value_for(where, path, typ, label):
    """The value set for one row, and the canaries it holds."""
    key = path.rsplit(".", 1)[-1]
    if typ == "secrets":
        a, b = canary(label + "#0"), canary(label + "#1")
        if where in ("verify:standard_webhooks",):
            return [whsec(a), whsec(b)]
        if where == "sink:http":
            return [whsec(a), b.raw]
        return [a.raw, b.raw]
    if key in ("secret_key", "previous_secret_keys"):  # an AES-256 key: base64 of 32 bytes
        n = 1 if typ == "string" else 2
        keys = [canary(f"{label}#{i}", base64.b64encode(pysecrets.token_bytes(32)).decode()).raw for i in range(n)]
        return keys[0] if typ == "string" else keys
    if typ == "strlist":
        return [canary(label + "#0").raw, canary(label + "#1").raw]
    if typ == "string_map":
        return {"X-Leak-Header": canary(label).raw}
    if typ == "string":
        if key == "token_sha256":
            tok = canary(label + " (the token)")
            digest = hashlib.sha256(tok.raw.encode()).hexdigest()
            canary(label + " (its hash)", digest)
            return digest
        host = "example.com" if label.endswith("(API)") else "127.0.0.1"
        if key == "url" and where == "sink:rabbitmq":
            return f"amqp://leakuser:{canary(label).raw}@{host}:5672/"
        if key == "url":
            return f"redis://leakuser:{canary(label).raw}@{host}:1/0"
        if key == "signing_key":  # backup.signing_key: at least 32 characters
            return canary(label, f"Lk{pysecrets.token_hex(20)}").raw
        if key == "nkey_seed":  # a real seed (the sink derives its public key), still a canary
            return canary(label, user_nkey()[0]).raw
        return canary(label).raw
    pytest.fail(f"{where} {path}: no value for a secret row of type {typ}; teach test_secret_leaks.value_for")


def place(tree, path, value, context):
    """Set a dotted path ("<id>." = a mapping's id, "[]." = a list's one item) in tree."""
    parts = path.split(".")
    node = tree
    for i, part in enumerate(parts[:-1]):
        if part == "<id>":
            part = "leak"
        if part.endswith("[]"):
            lst = node.setdefault(part[:-2], [{}])
            node = lst[0]
            node.update(context)
            continue
        node = node.setdefault(part, {})
        # a gcs token is only taken with auth: token
        if part == "gcs" and parts[-1] == "token":
            node["auth"] = "token"
    for k, v in context.items():  # the siblings of a row inside a mapping
        node.setdefault(k, v)
    node[parts[-1]] = value


def test_no_secret_leaks(ankusa, rx, tmp_path):
    CANARIES.clear()
    rows = secret_rows()
    section_rows = [r for r in rows if r[0].startswith("section:")]
    plugin_rows = [r for r in rows if not r[0].startswith("section:")]

    # the sections: each row alone must load (or be a refusal listed above, whose text
    # must not hold the value); then all that load go into the node's config
    node_sections = {}
    principal_token = None
    refused = []  # the canaries of refused rows: never in the node's config
    for where, path, typ in section_rows:
        label = f"{where} {path}"
        solo = {}
        before = len(CANARIES)
        val = value_for(where, path, typ, label)
        place(solo, path, val, SECTION_CONTEXT.get(path, {}))
        cfg = tmp_path / f"solo-{len(CANARIES)}.json"
        cfg.write_text(json.dumps({**solo, "sources": {"x": {"sinks": [{"type": "log"}]}}}))
        p = run_cli("check-config", "--config", str(cfg))
        for c in CANARIES[before:]:
            for form, b in c.forms().items():
                assert b.decode() not in p.stdout + p.stderr, f"{c.label}: its {form} form in check-config's output"
        if label in REFUSED:
            assert p.returncode == 78, f"{label} now loads: take it out of REFUSED ({p.stdout})"
            refused.extend(CANARIES[before:])
            continue
        assert p.returncode == 0, f"{label}: the row alone does not load; give it context here:\n{p.stderr}"
        if path.startswith(SOLO_ONLY):
            refused.extend(CANARIES[before:])
            continue
        place(node_sections, path, val, SECTION_CONTEXT.get(path, {}))
        if path.endswith("token_sha256"):
            principal_token = CANARIES[before].raw

    # the plug-ins: one config-file source per verifier row, one per sink row
    sources = {}
    for where, path, typ in plugin_rows:
        kind, ptype = where.split(":", 1)
        label = f"{where} {path} (config file)"
        if kind == "verify":
            spec = {"type": ptype, **PLUGIN_CONTEXT.get(where, {})}
            place(spec, path, value_for(where, path, typ, label), {})
            sources.setdefault(f"v_{ptype}", {"sinks": [{"type": "log"}]})["verify"] = spec
        elif kind == "sink":
            base = sink_base(ptype, "127.0.0.1") or {"url": rx.url}
            sid = f"s_{sink_key(ptype, path, len(sources))}"
            sink = sources.setdefault(sid, {"sinks": [{"type": ptype, **base}]})["sinks"][0]
            place(sink, path, value_for(where, path, typ, label), {})
            if path == "auth.jwt":  # a jwt goes with its seed, a password with its user
                sink["auth"]["nkey_seed"] = user_nkey()[0]
            if path == "auth.password":
                sink["auth"]["username"] = "leaker"
        else:
            pytest.fail(f"{where}: a plug-in kind this test does not place; teach it")

    config = {"log": {"level": "debug"}, **node_sections}
    config.setdefault("source_store", {})["type"] = "persistent"
    node = ankusa(config=config, sources=sources)
    # the search finds what it looks for: each canary placed so far is in the config file
    text = node.config_path.read_bytes()
    for c in CANARIES:
        if c not in refused and not c.label.endswith("(the token)"):  # the token is sent, not configured
            assert any(b in text for b in c.forms().values()), f"{c.label} was not placed"
    tok = principal_token
    assert tok, "no admin principal row: the admin calls below need one"

    bodies = []  # every response body the node sent

    def keep(r):
        bodies.append((f"{r.status}", r.body))
        return r

    # verification failures and a credential that passes
    for sid, src in sources.items():
        if sid.startswith("v_"):
            keep(node.post(f"/webhooks/{sid}", b'{"n":1}', headers={"X-Leak-Sig": "00", "X-Leak-Token": "nope",
                                                                     "Stripe-Signature": "t=1,v1=00"}))
    tsrc = sources.get("v_token")
    if tsrc:
        good = tsrc["verify"]["secret"][0]
        r = keep(node.post("/webhooks/v_token", b'{"n":2}', headers={"X-Leak-Token": good}))
        assert r.status == 201, r
    # deliveries through the sink rows' sources
    for sid in sources:
        if sid.startswith("s_"):
            r = keep(node.post(f"/webhooks/{sid}", b'{"n":3}'))
            assert r.status == 201, r
    if any(s.startswith("s_") for s in sources):
        rx.wait_for(lambda ds: len(ds) >= 1, what="a delivery through the sink rows' source")

    # admin: a bad token, then the good one on every read that could echo a secret
    keep(node.admin("/v1/config", token=tok + "x"))
    keep(node.admin("/v1/config", token=tok[::-1]))
    for path in ("/v1/config", "/metrics", "/v1/audit?limit=1000", "/v1/wal", "/health", "/ready"):
        r = keep(node.admin(path, token=tok))
        assert r.status == 200, (path, r)

    # the same specs through the sources API (the node keeps API sources)
    api = node.admin("/v1/tenants/leak/sources", token=tok)
    assert api.status == 200, api
    specs = {}
    for where, path, typ in plugin_rows:
        kind, ptype = where.split(":", 1)
        label = f"{where} {path} (API)"
        if kind == "verify":
            spec = specs.setdefault(where, {"name": f"a_{ptype}", "sinks": [{"type": "log"}],
                                            "verify": {"type": ptype, **PLUGIN_CONTEXT.get(where, {})}})
            place(spec["verify"], path, value_for(where, path, typ, label), {})
        else:
            base = sink_base(ptype, "example.com") or {"url": "https://example.com/leak"}
            key = f"{where} {path}" if ptype in ONE_ROW_PER_SINK else where
            spec = specs.setdefault(key, {"name": f"a_{kind}_{sink_key(ptype, path, len(specs))}",
                                          "sinks": [{"type": ptype, **base}]})
            place(spec["sinks"][0], path, value_for(where, path, typ, label), {})
            if path == "auth.jwt":
                spec["sinks"][0]["auth"]["nkey_seed"] = user_nkey()[0]
            if path == "auth.password":
                spec["sinks"][0]["auth"]["username"] = "leaker"
    assert specs, "no plug-in row to send through the API"
    for where, spec in specs.items():
        r = keep(node.admin("/v1/tenants/leak/sources", method="POST", body=spec, token=tok))
        assert r.status == 201, (where, r)
        # an invalid spec carrying the same secrets: refused, the secrets not echoed
        bad = dict(spec, name=spec["name"] + "_bad", surprise=1)
        r = keep(node.admin("/v1/tenants/leak/sources", method="POST", body=bad, token=tok))
        assert r.status == 400, (where, r)
        keep(node.admin(f"/v1/tenants/leak/sources/{spec['name']}", token=tok))
    r = keep(node.admin("/v1/audit?limit=1000", token=tok))
    assert r.status == 200, r

    printed = run_cli("print-config", "--config", str(node.config_path))
    assert printed.returncode == 0, printed.stderr
    checked = run_cli("check-config", "--config", str(node.config_path))
    assert checked.returncode == 0, checked.stderr

    assert node.stop() == 0
    rows_out = run_cli("inspect", "rows", "--data-dir", str(node.data_dir))
    assert rows_out.returncode == 0, rows_out.stderr
    store_values = []
    for line in rows_out.stdout.splitlines():
        cf, k, v = line.split("\t")
        store_values.append((f"store {cf} row {k[:40]}", unescape(k) + b"\0" + unescape(v)))
    assert store_values, "the store listed no row"

    haystacks = [(f"response {s}", b) for s, b in bodies]
    haystacks += [("the node's log", node.log_text().encode()), ("print-config", printed.stdout.encode()),
                  ("print-config stderr", printed.stderr.encode()), ("check-config", checked.stdout.encode())]
    haystacks += store_values
    leaks = []
    for c in CANARIES:
        for form, b in c.forms().items():
            for where, h in haystacks:
                if b in h:
                    leaks.append(f"{c.label}: its {form} form in {where}")
    assert not leaks, "secrets in the clear:\n" + "\n".join(sorted(set(leaks))[:40])
    # the test saw what it meant to: every row placed, deliveries made, store rows read
    assert len(CANARIES) >= len(rows)
    assert BIN
