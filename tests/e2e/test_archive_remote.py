"""The archive on remote blob stores (issue 21): the compactor writing segments to S3
(s3rver behind tests/e2e/s3proxy.py, which checks every request's SigV4 signature) and to
GCS (tests/e2e/gcs_standin.py, which holds every request to Google's documented shape),
reading them back by id, and riding out a 30 s S3 outage under load.
"""
import base64
import json
import random
import time
from urllib.parse import unquote

import pytest

import gcs_standin
from helpers import LOOPBACK, SLOW, post_many, run_cli, sha256_hex, wait_until
from receiver import Receiver
from test_archive import all_delivered, check_catalogue, segments, wait_archived_and_reclaimed  # noqa: F401
from test_blob_s3 import BUCKET, KEY, REGION, SECRET, proxy, s3rver, verdicts  # noqa: F401 - fixtures
from test_cursor_kills import Poster


def s3_storage(p, **more):
    s = {"type": "s3", "roll_ms": 200, "interval_ms": 50,
         "s3": {"bucket": BUCKET, "region": REGION, "endpoint": f"http://127.0.0.1:{p.port}",
                "access_key_id": KEY, "secret_access_key": SECRET}}
    s.update(more)
    return s


def read_back(node, acked):
    bad = []
    for hid, sha in acked.items():
        r = node.admin(f"/v1/hooks/{hid}")
        if r.status != 200 or sha256_hex(base64.b64decode(r.json["body"])) != sha:
            bad.append((hid, r.status))
    return bad


def post_acked(node, n, tag, path="/webhooks/demo"):
    res = post_many(node.http_port, [f"{tag}-{i}-".encode() * (1 + i % 40) for i in range(n)], path=path)
    acked = {}
    for body, r in res:
        assert not isinstance(r, Exception) and r.status == 201, r
        acked[r.json["id"]] = sha256_hex(body)
    return acked


def test_archive_to_s3_signed_and_read_back(ankusa, proxy):
    """Segments, indexes and manifests go to S3 through the signature-checking proxy (no
    request refused), the store empties, and every hook reads back by id from S3, through
    the API and through `ankusa inspect hook` on the running node."""
    node = ankusa(config={"storage": s3_storage(proxy)})
    acked = post_acked(node, 400, "s3")
    wait_archived_and_reclaimed(node, 30, "hooks archived to S3 and reclaimed")
    bad = [v for v in verdicts(proxy) if v != "ok"]
    assert not bad, f"requests the signature check refused: {bad[:5]}"
    puts = [unquote(path) for m, path, _ in proxy.requests if m == "PUT"]
    assert any(f"/{BUCKET}/archive/v1/dt=" in p and p.endswith(".seg") for p in puts), puts[:5]
    assert any(p.endswith("_manifest.json") for p in puts)
    rows = segments(node)
    assert sum(r["count"] for r in rows) == len(acked)
    assert all(r["segment"].startswith("archive/v1/dt=") for r in rows)
    assert not read_back(node, acked)
    hid = next(iter(acked))
    r = run_cli("inspect", "hook", hid, "--config", str(node.config_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["from"] == "archive"
    m = node.metrics()
    assert m.value("ankusa_blob_errors_total", instance="default", store="s3", op="put") == 0
    assert m.value("ankusa_blob_request_duration_seconds_count", instance="default", store="s3", op="get") >= 1


def test_archive_with_a_wrong_s3_secret_fails_and_holds_the_hooks(ankusa, proxy):
    """A secret S3 refuses: every request is 403 (the boot reconcile's listing first, so the
    compactor archives nothing), counted; nothing is reclaimed; ingest acks."""
    st = s3_storage(proxy)
    st["s3"]["secret_access_key"] = "not-the-secret"
    node = ankusa(config={"storage": st})
    acked = post_acked(node, 30, "wrong")
    wait_until(lambda: node.metrics().value("ankusa_blob_errors_total", instance="default", store="s3",
                                            op="list") >= 2, timeout=20 * SLOW, what="refused requests counted")
    assert node.metrics().value("ankusa_compact_failures_total", instance="default", stage="segment") >= 1
    assert any("signature" in v.lower() or "mismatch" in v.lower() or v.startswith("unknown") or v != "ok"
               for v in verdicts(proxy))
    # the gauge is sampled after each try (a try waits out the adapter's retries)
    wait_until(lambda: node.metrics().value("ankusa_queue_archive_pending", instance="default") >= len(acked),
               timeout=20 * SLOW, what="every hook counted as waiting for the archive")
    assert "HTTP 403" in node.log_text() and "not-the-secret" not in node.log_text()
    assert not read_back(node, acked), "hooks not archived must stay readable from the store"


@pytest.mark.slow
def test_s3_outage_of_30s_under_load(ankusa, proxy):
    """Every S3 request answered 503 for 30 s while clients post: ingest keeps acking
    throughout, deliveries go on, the compactor's failures are counted and it backs off; once
    S3 is back it catches up, the store empties and every acked hook reads back from S3."""
    rx = Receiver()
    poster = None
    try:
        node = ankusa(config={**LOOPBACK, "storage": s3_storage(proxy), "dispatch": {"breaker_failures": 0}},
                      sources={"s": {"tenant": "t1", "sinks": [{"type": "http", "url": rx.url}]}})
        poster = Poster(node.http_port, ["s"], threads_per_source=2, pause=0.005).start()
        time.sleep(3)
        with proxy.lock:
            proxy.fail_always = 503
        t0 = time.time()
        time.sleep(30)
        with proxy.lock:
            proxy.fail_always = None
        t1 = time.time()
        time.sleep(3)
        poster.stop()
        assert not poster.problems, "\n".join(poster.problems[:10])
        snap = poster.snapshot()
        during = [i for i, (_, _, t) in snap.items() if t0 + 1 < t < t1 - 1]
        assert len(during) > 100, f"only {len(during)} hooks acked during the outage: ingest waited for S3"
        assert node.metrics().value("ankusa_compact_failures_total", instance="default", stage="segment") >= 3
        acked = {i: sha for i, (_, sha, _) in snap.items()}
        wait_until(lambda: all_delivered(rx, acked),
                   timeout=60 * SLOW, what="every acked hook delivered")
        # the backoff is capped at 60 s: the compactor is back within a minute and catches up
        wait_archived_and_reclaimed(node, 120, "the compactor caught up after the outage")
        # a sample by id (each read is an index GET and a ranged GET through the proxy)
        sample = dict(random.sample(sorted(acked.items()), min(300, len(acked))))
        assert not read_back(node, sample)
        rows = segments(node)
        rows.sort(key=lambda r: r["first_seq"])
        for a, b in zip(rows, rows[1:]):
            assert a["last_seq"] < b["first_seq"], f"seq ranges overlap: {a} and {b}"
        print(f"\ns3 outage: {len(acked)} acked ({len(during)} during the 30 s outage), {len(rows)} segments")
    finally:
        if poster:
            poster.stop()
        rx.close()


def test_archive_to_gcs_and_read_back(ankusa):
    """Segments go to GCS through its JSON API (the stand-in refuses any request Google
    would: shape, encoding, auth), and read back by id."""
    g = gcs_standin.GcsStandin(bucket="ak-arch", auth="token", token="gcs-test-token").start()
    try:
        node = ankusa(config={"storage": {"type": "gcs", "roll_ms": 200, "interval_ms": 50,
                                          "gcs": {"bucket": "ak-arch", "endpoint": g.url, "auth": "token",
                                                  "token": "gcs-test-token"}}})
        acked = post_acked(node, 200, "gcs")
        wait_archived_and_reclaimed(node, 30, "hooks archived to GCS and reclaimed")
        assert not g.violations, g.violations[:5]
        names = sorted(g.objects)
        assert any(n.startswith("archive/v1/dt=") and n.endswith(".seg") for n in names), names[:5]
        assert any(n.endswith("_manifest.json") for n in names)
        assert not read_back(node, acked)
        assert not g.violations, g.violations[:5]
        assert "gcs-test-token" not in node.log_text()
    finally:
        g.stop()
