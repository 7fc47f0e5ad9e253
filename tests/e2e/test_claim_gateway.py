"""The claim gateway (src/admin/claims.c, docs/claim-check.md): GET/HEAD /v1/claims/{tenant}/{id}
on a node with the claim_check role, over packs written by tests/blobtool's claimpack (the
same builder the dispatcher's check-in uses, sinks/claimpack.c) into LocalFS claim stores.

Proves: byte-identical reads, HEAD headers, single ranges (a-b, a-, -n), 416, multi-range and
If-Range served whole; bearer principals with claims:read and the claim's tenant (401, 403);
400 for a bad tenant or id, 404 for an unknown claim; bytes that fail the pack's manifest are
refused (502 claim_corrupt) and counted; failover across claim_check.stores; the loopback rule
without principals; the LocalFS retention sweeper; /health."""
import hashlib
import json
import os
import subprocess
import time

import pytest

from helpers import (BIN, READY_TIMEOUT, SANITIZER_MARKERS, Metrics, free_ports, http_request, principal, run_cli,
                     wait_until)

BLOBTOOL = os.path.join(os.path.dirname(BIN), "blobtool")

TOKEN_ACME = "acme-reader-token"
TOKEN_OTHER = "other-reader-token"
TOKEN_NOSCOPE = "acme-audit-token"
TOKEN_OPS = "ops-metrics-token"
PRINCIPALS = [
    principal("acme-reader", TOKEN_ACME, ["claims:read"], ["acme"]),
    principal("other-reader", TOKEN_OTHER, ["claims:read"], ["other"]),
    principal("acme-audit", TOKEN_NOSCOPE, ["audit:read"], ["acme"]),
    principal("ops", TOKEN_OPS, ["metrics:read", "claims:read"], ["*"]),
]


@pytest.fixture(scope="module", autouse=True)
def _blobtool_present():
    if not os.access(BLOBTOOL, os.X_OK):
        pytest.fail(f"blobtool not found at {BLOBTOOL}: run `make test-build`", pytrace=False)


def claimpack(root, tenant, files, ms=None):
    """Writes one pack of files to the LocalFS store at root: (key, [(claim_id, ref, sha256)])."""
    cfg = root.parent / (root.name + ".store.json")
    cfg.write_text(json.dumps({"type": "local", "root": str(root)}))
    args = [BLOBTOOL, str(cfg), "claimpack", tenant] + ([f"--ms={ms}"] if ms is not None else [])
    args += list(map(str, files))
    p = subprocess.run(args, capture_output=True, timeout=30)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 0, err
    assert not any(m in err for m in SANITIZER_MARKERS), err
    lines = p.stdout.decode().split("\n")
    return lines[0], [tuple(line.split(" ")) for line in lines[1:] if line]


def bodies_in(tmp_path, sizes, tag="b"):
    out = []
    for i, n in enumerate(sizes):
        data = hashlib.sha256(f"{tag}{i}".encode()).digest() * (n // 32 + 1)
        f = tmp_path / f"{tag}{i}.bin"
        f.write_bytes(data[:n])
        out.append((f, data[:n]))
    return out


def gateway(ankusa, tmp_path, stores, principals=PRINCIPALS, extra=None, roles=("claim_check",)):
    port = free_ports(1)[0]
    cfg = {"node": {"roles": list(roles)},
           "admin": {"principals": principals},
           "claim_check": {"port": port, "stores": [{"type": "local", "root": str(s)} for s in stores]}}
    for k, v in (extra or {}).items():
        cfg.setdefault(k, {}).update(v)
    return _start(ankusa, cfg, port)


def _start(ankusa, cfg, port):
    """A node whose readiness is its gateway's /health (a claim_check node need not serve
    the ingest listener's /ready)."""
    node = ankusa(config=cfg, start=False)
    node.start(wait=False)
    node.claims_port = port
    wait_until(lambda: node.running() and _up(port), timeout=READY_TIMEOUT,
               what=f"the claim gateway listening\n{node.log_tail()}")
    return node


def _up(port):
    try:
        return http_request(port, "GET", "/health", timeout=2).status == 200
    except OSError:
        return False


def get(node, path, token=TOKEN_ACME, headers=None, method="GET"):
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = f"Bearer {token}"
    return http_request(node.claims_port, method, path, headers=h)


def metric(node, name, **labels):
    """A claim_check-only node has no admin listener: its gateway serves /metrics."""
    if set(node.config["node"]["roles"]) <= {"claim_check"}:
        r = get(node, "/metrics", token=TOKEN_OPS)
    else:
        r = node.admin("/metrics", token=TOKEN_OPS)
    assert r.status == 200, r
    return Metrics(r.body.decode()).get(name, instance="default", **labels) or 0


@pytest.fixture
def packs(tmp_path):
    root = tmp_path / "claims-a"
    files = bodies_in(tmp_path, [1, 1000, 0, 70000, 5])
    key, claims = claimpack(root, "acme", [f for f, _ in files])
    return root, key, claims, [d for _, d in files]


def test_get_head_and_ranges(ankusa, tmp_path, packs):
    root, key, claims, datas = packs
    node = gateway(ankusa, tmp_path, [root])
    for (cid, ref, sha), data in zip(claims, datas):
        assert ref == f"urn:ankusa:claim:v1:acme:{cid}"
        r = get(node, f"/v1/claims/acme/{cid}")
        assert r.status == 200, r
        assert r.body == data
        assert hashlib.sha256(r.body).hexdigest() == sha
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["cache-control"] == "private, max-age=31536000, immutable"
        assert r.headers["accept-ranges"] == "bytes"
        assert int(r.headers["content-length"]) == len(data)
        h = get(node, f"/v1/claims/acme/{cid}", method="HEAD")
        assert h.status == 200 and h.body == b""
        assert int(h.headers["content-length"]) == len(data)
        assert h.headers["cache-control"] == "private, max-age=31536000, immutable"
    cid, data = claims[3][0], datas[3]
    path = f"/v1/claims/acme/{cid}"
    for rng, lo, hi in (("bytes=10-99", 10, 99), ("bytes=69990-", 69990, 69999), ("bytes=-25", 69975, 69999),
                        ("bytes=5-999999", 5, 69999), ("bytes=-999999", 0, 69999)):
        r = get(node, path, headers={"Range": rng})
        assert r.status == 206, (rng, r)
        assert r.body == data[lo:hi + 1], rng
        assert r.headers["content-range"] == f"bytes {lo}-{hi}/{len(data)}"
    for rng in ("bytes=70000-", "bytes=80000-80001", "bytes=-0"):
        r = get(node, path, headers={"Range": rng})
        assert r.status == 416, (rng, r)
        assert r.headers["content-range"] == f"bytes */{len(data)}"
    for hdrs in ({"Range": "bytes=0-1,5-6"}, {"Range": "bytes=x-y"}, {"Range": "items=0-1"}, {"Range": "bytes=9-3"},
                 {"Range": "bytes=0-1", "If-Range": '"etag"'}):
        r = get(node, path, headers=hdrs)
        assert r.status == 200 and r.body == data, hdrs
    # an empty claim: any range is unsatisfiable, the whole is 200 with no bytes
    empty = claims[2][0]
    assert get(node, f"/v1/claims/acme/{empty}").body == b""
    assert get(node, f"/v1/claims/acme/{empty}", headers={"Range": "bytes=0-"}).status == 416
    assert metric(node, "ankusa_claim_check_operations_total", result="partial") == 5
    assert metric(node, "ankusa_claim_check_operations_total", result="range_not_satisfiable") == 4
    assert metric(node, "ankusa_claim_check_redeems_total", result="ok") >= 10


def test_auth_and_validation(ankusa, tmp_path, packs):
    root, key, claims, datas = packs
    node = gateway(ankusa, tmp_path, [root])
    cid = claims[1][0]
    path = f"/v1/claims/acme/{cid}"
    assert get(node, path, token=None).status == 401
    assert get(node, path, token="wrong").status == 401
    r = get(node, path, token=None, headers={"Authorization": "Basic eDp5"})
    assert r.status == 401 and r.json["error"] == "unauthorized"
    r = get(node, path, token=TOKEN_OTHER)
    assert r.status == 403 and r.json["error"] == "forbidden_tenant"
    r = get(node, path, token=TOKEN_NOSCOPE)
    assert r.status == 403 and r.json["error"] == "forbidden"
    assert get(node, path, token=TOKEN_ACME).body == datas[1]
    assert get(node, path, token=TOKEN_OPS).body == datas[1]  # tenants "*"
    # the tenant is part of the key: another tenant's path to the same id finds nothing
    assert get(node, f"/v1/claims/other/{cid}", token=TOKEN_OTHER).status == 404
    for bad, code in ((f"/v1/claims/ac.me/{cid}", "invalid_tenant"), (f"/v1/claims/{'a' * 65}/{cid}", "invalid_tenant"),
                      ("/v1/claims/acme/" + cid.lower(), "invalid_id"), ("/v1/claims/acme/" + cid[:-1], "invalid_id"),
                      ("/v1/claims/acme/8" + cid[1:], "invalid_id"),
                      ("/v1/claims/acme/" + cid[:-1] + "U", "invalid_id")):
        r = get(node, bad)
        assert r.status == 400 and r.json["error"] == code, (bad, r)
    # unknown: a fresh id, a position past the pack's index, a pack of another day
    other = "7" + cid[1:]
    r = get(node, f"/v1/claims/acme/{other}")
    assert r.status == 404 and r.json["error"] == "not_found"
    past = cid[:-2] + "ZZ"  # position 0x3ff..: beyond the 5-claim index
    assert get(node, f"/v1/claims/acme/{past}").status == 404
    assert get(node, f"/v1/claims/acme/{past}", method="HEAD").status == 404
    assert get(node, "/v1/claims/acme").status == 404
    assert get(node, "/v1/claims/acme/x/y").status == 404
    assert get(node, path, method="DELETE").status == 405
    r = http_request(node.claims_port, "GET", "/health")
    assert r.status == 200 and r.json == {"status": "ok"}
    assert metric(node, "ankusa_claim_check_operations_total", result="unauthorized") == 3
    assert metric(node, "ankusa_claim_check_operations_total", result="forbidden_tenant") == 1
    assert metric(node, "ankusa_claim_check_operations_total", result="invalid_id") == 4
    assert metric(node, "ankusa_claim_check_redeems_total", result="not_found") >= 3


def test_corrupt_bytes_are_refused_and_counted(ankusa, tmp_path, packs):
    root, key, claims, datas = packs
    node = gateway(ankusa, tmp_path, [root])
    pack = root / key
    raw = bytearray(pack.read_bytes())
    at = raw.find(datas[1])
    assert at > 0
    raw[at + 500] ^= 0x01  # one bit of claim 1
    pack.write_bytes(bytes(raw))
    cid = claims[1][0]
    r = get(node, f"/v1/claims/acme/{cid}")
    assert r.status == 502 and r.json == {"error": "claim_corrupt"}, r
    # the same claim's range is refused too (the whole claim is verified before any byte)
    assert get(node, f"/v1/claims/acme/{cid}", headers={"Range": "bytes=0-9"}).status == 502
    # the others of the pack still read
    assert get(node, f"/v1/claims/acme/{claims[3][0]}").body == datas[3]
    assert metric(node, "ankusa_claim_check_failures_total", op="redeem") == 2
    assert metric(node, "ankusa_claim_check_redeems_total", result="corrupt") == 2
    assert "claim refused: its bytes fail the pack's manifest" in node.log_text()


def test_failover_across_stores(ankusa, tmp_path):
    first, second = tmp_path / "claims-1", tmp_path / "claims-2"
    files = bodies_in(tmp_path, [300, 40], tag="f")
    _, in_second = claimpack(second, "acme", [f for f, _ in files])
    files1 = bodies_in(tmp_path, [77], tag="g")
    _, in_first = claimpack(first, "acme", [f for f, _ in files1])
    node = gateway(ankusa, tmp_path, [first, second])
    for (cid, _, _), (_, data) in zip(in_second, files):
        assert get(node, f"/v1/claims/acme/{cid}").body == data
    assert get(node, f"/v1/claims/acme/{in_first[0][0]}").body == files1[0][1]
    assert get(node, f"/v1/claims/acme/7{in_first[0][0][1:]}").status == 404


def test_store_unavailable_is_503(ankusa, tmp_path, packs):
    root, key, claims, datas = packs
    node = gateway(ankusa, tmp_path, [root])
    pack = root / key
    data = pack.read_bytes()
    pack.unlink()
    pack.symlink_to(pack.name)  # a symlink loop where the pack was: the read fails (ELOOP), not "missing"
    r = get(node, f"/v1/claims/acme/{claims[0][0]}")
    assert r.status == 503 and r.json == {"error": "store_unavailable"}, r
    assert r.headers["retry-after"] == "1"
    pack.unlink()
    pack.write_bytes(data)
    assert get(node, f"/v1/claims/acme/{claims[0][0]}").body == datas[0]


def test_no_principals_loopback_only(ankusa, tmp_path, packs):
    root, key, claims, datas = packs
    node = gateway(ankusa, tmp_path, [root], principals=[])
    assert get(node, f"/v1/claims/acme/{claims[1][0]}", token=None).body == datas[1]
    # a non-loopback address without principals is refused at boot, naming the fix
    cfg = tmp_path / "bad.yml"
    cfg.write_text(json.dumps({"node": {"roles": ["claim_check"], "data_dir": str(tmp_path / "bd")},
                               "claim_check": {"ip": "0.0.0.0"}}))
    p = run_cli("check-config", "--config", str(cfg))
    assert p.returncode == 78, p
    assert ("claim_check.ip: 0.0.0.0 is not a loopback address; without admin.principals the claim gateway has no "
            "one to authenticate and listens on loopback only: add admin.principals with the claims:read scope, or "
            "bind 127.0.0.1") in p.stderr


def test_claim_check_only_node_opens_no_store(ankusa, tmp_path, packs):
    root, key, claims, datas = packs
    node = gateway(ankusa, tmp_path, [root])
    assert get(node, f"/v1/claims/acme/{claims[0][0]}").body == datas[0]
    assert not node.store_dir.exists(), "a claim_check-only node opened a RocksDB store"
    # nor any listener of the store roles; its /metrics is on the gateway, behind metrics:read
    for port in (node.http_port, node.admin_port):
        with pytest.raises(OSError):
            http_request(port, "GET", "/health", timeout=2)
    assert get(node, "/metrics", token=TOKEN_ACME).status == 403
    assert get(node, "/metrics", token=None).status == 401
    assert metric(node, "ankusa_claim_check_redeems_total", result="ok") >= 1


def test_sweeper_removes_old_days_only(ankusa, tmp_path):
    root = tmp_path / "claims-s"
    now = int(time.time() * 1000)
    day = 86400000
    old_files = bodies_in(tmp_path, [10], tag="o")
    old_key, old_claims = claimpack(root, "acme", [f for f, _ in old_files], ms=now - 10 * day)
    edge_key, _ = claimpack(root, "acme", [f for f, _ in old_files], ms=now - 3 * day)  # the cutoff day's neighbour
    new_key, new_claims = claimpack(root, "acme", [f for f, _ in old_files], ms=now)
    junk = [root / "claims" / "tenant=acme" / "dt=2001-02-30", root / "claims" / "tenant=acme" / "dt=yesterday",
            root / "claims" / "tenant=a.b" / "dt=2001-01-01", root / "claims" / "misc" / "dt=2001-01-01"]
    for j in junk:
        j.mkdir(parents=True)
    (root / "claims" / "tenant=acme" / "dt=2001-01-02").write_text("a file, not a day directory")
    node = gateway(ankusa, tmp_path, [root], extra={"claim_check": {"retention_days": 2, "sweep_interval_ms": 200}})
    old_dir = (root / old_key).parent
    wait_until(lambda: not old_dir.exists(), timeout=10, what="the 10-day-old claim day removed")
    # 3 days old with 2 days of retention: older than the cutoff day (today - 2), removed too
    wait_until(lambda: not (root / edge_key).parent.exists(), timeout=10, what="the 3-day-old claim day removed")
    assert (root / new_key).exists()
    for j in junk:
        assert j.exists(), j
    assert (root / "claims" / "tenant=acme" / "dt=2001-01-02").is_file()
    assert get(node, f"/v1/claims/acme/{old_claims[0][0]}").status == 404
    assert get(node, f"/v1/claims/acme/{new_claims[0][0]}").body == old_files[0][1]
    # yesterday (1 day old, retention 2): kept
    ykey, _ = claimpack(root, "acme", [f for f, _ in old_files], ms=now - day)
    time.sleep(0.6)
    assert (root / ykey).exists()
    assert "expired claim days removed" in node.log_text()


def test_retention_with_a_bucket_store_is_refused(tmp_path):
    cfg = tmp_path / "c.yml"
    cfg.write_text(json.dumps({"claim_check": {"retention_days": 3,
                                               "store": {"type": "s3", "s3": {"bucket": "b", "region": "eu-west-1"}}}}))
    p = run_cli("check-config", "--config", str(cfg))
    assert p.returncode == 78
    assert "claim_check.retention_days: only with LocalFS claim stores, but claim_check.store.type is s3" in p.stderr


class _Refusing:
    """A loopback stand-in for an S3 endpoint that answers every request with one status."""

    def __init__(self, status):
        import http.server
        import threading
        self.seen = 0
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _do(self):
                outer.seen += 1
                body = b"<Error><Code>AccessDenied</Code></Error>" if status == 403 else b"<Error/>"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_HEAD = do_PUT = _do

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def _s3(url):
    return {"type": "s3", "s3": {"bucket": "claims", "region": "eu-west-3", "endpoint": url,
                                 "access_key_id": "AKIDCLAIMTEST", "secret_access_key": "claim/test/secret",
                                 "retries": 0, "timeout_ms": 2000}}


@pytest.mark.parametrize("status,code,retry", [(403, "store_forbidden", "60"), (500, "store_unavailable", "1")])
def test_bucket_refusal_and_failover(ankusa, tmp_path, packs, status, code, retry):
    """A bucket that refuses this node's credential (403) is 503 store_forbidden with
    Retry-After: 60, one that fails 503 store_unavailable with Retry-After: 1; the same
    bucket first in claim_check.stores with a LocalFS store after it that has the pack:
    served from the second."""
    root, key, claims, datas = packs
    bucket = _Refusing(status)
    try:
        port = free_ports(1)[0]
        node = _start(ankusa, {"node": {"roles": ["claim_check"]}, "admin": {"principals": PRINCIPALS},
                               "claim_check": {"port": port, "store": _s3(bucket.url)}}, port)
        cid = claims[1][0]
        r = get(node, f"/v1/claims/acme/{cid}")
        assert r.status == 503 and r.json == {"error": code}, r
        assert r.headers["retry-after"] == retry
        assert bucket.seen >= 1
        assert "claim/test/secret" not in node.log_text()
        assert metric(node, "ankusa_claim_check_failures_total", op="redeem") == 1
        assert metric(node, "ankusa_claim_check_redeems_total", result=code) == 1
        port2 = free_ports(1)[0]
        both = _start(ankusa, {"node": {"roles": ["claim_check"]}, "admin": {"principals": PRINCIPALS},
                               "claim_check": {"port": port2, "stores": [_s3(bucket.url),
                                                                         {"type": "local", "root": str(root)}]}},
                      port2)
        assert get(both, f"/v1/claims/acme/{cid}").body == datas[1]
    finally:
        bucket.close()
