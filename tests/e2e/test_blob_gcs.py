"""The GCS blob store (src/blob/gcs.c) driven by tests/blobtool against loopback stand-ins
of the JSON API and the metadata server (gcs_standin.py). Every stand-in checks the shape
of each request as Google documents it; a violation fails the test at teardown."""
import json
import os
import subprocess
import time

import pytest

from gcs_standin import GcsStandin, MetadataStandin
from helpers import BIN, CLI_TIMEOUT, SANITIZER, SANITIZER_MARKERS

BLOBTOOL = os.path.join(os.path.dirname(BIN), "blobtool")
# helpers' markers plus the two the brief names, so a sanitizer report never passes quietly
MARKERS = tuple(SANITIZER_MARKERS) + ("AddressSanitizer", "runtime error:")


@pytest.fixture(scope="module", autouse=True)
def _blobtool_present():
    if not os.access(BLOBTOOL, os.X_OK):
        pytest.fail(f"blobtool not found at {BLOBTOOL}: run `make test-build`", pytrace=False)


@pytest.fixture
def standins():
    """Factory for stand-ins; each is stopped, and its violations fail the test, however
    the test ends."""
    started = []

    def make(cls, **kw):
        s = cls(**kw).start()
        started.append(s)
        return s

    yield make
    problems = []
    for s in started:
        s.stop()
        problems += s.violations
    assert not problems, "requests Google would refuse:\n" + "\n".join(problems)


@pytest.fixture
def blobtool(tmp_path):
    """run(store_cfg, op, *args, stdin=b"", env={}) -> CompletedProcess (bytes)."""
    counter = [0]

    def run(cfg, *args, stdin=b"", env=None):
        counter[0] += 1
        p = tmp_path / f"store{counter[0]}.json"
        p.write_text(json.dumps({"type": "gcs", "gcs": cfg}))
        e = dict(os.environ)
        e.pop("GCE_METADATA_HOST", None)
        e.update(env or {})
        r = subprocess.run([BLOBTOOL, str(p), *[str(a) for a in args]], input=stdin, capture_output=True,
                           timeout=CLI_TIMEOUT, env=e)
        err = r.stderr.decode(errors="replace")
        for m in MARKERS:
            assert m not in err, f"sanitizer report from blobtool {' '.join(map(str, args))}:\n{err}"
        return r

    return run


def cfg_for(gcs, **kw):
    c = {"bucket": gcs.bucket, "endpoint": gcs.url, "auth": "token", "token": gcs.token}
    c.update(kw)
    return c


def ok(r):
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return r.stdout


def list_keys(out):
    lines = out.decode().splitlines()
    assert lines and lines[-1].startswith("pages "), lines[-3:]
    return lines[:-1], int(lines[-1].split()[1])


# --------------------------------------------------------------------------- operations

def test_put_get_range_head_delete_not_found(standins, blobtool):
    gcs = standins(GcsStandin)
    cfg = cfg_for(gcs)
    data = os.urandom(100_000)
    ok(blobtool(cfg, "put", "seg/one", "-", stdin=data))
    assert gcs.objects["seg/one"] == data  # what Google would hold: the exact bytes, the key as named
    assert ok(blobtool(cfg, "get", "seg/one")) == data
    assert ok(blobtool(cfg, "head", "seg/one")).strip() == b"100000"
    assert ok(blobtool(cfg, "range", "seg/one", 10, 100)) == data[10:110]
    assert gcs.seen("GET", "alt=media")[-1][2]["range"] == "bytes=10-109"
    # a range running past the end: the bytes there are; starting at the end: none, no error
    assert ok(blobtool(cfg, "range", "seg/one", 99_990, 100)) == data[99_990:]
    assert ok(blobtool(cfg, "range", "seg/one", 100_000, 10)) == b""
    assert ok(blobtool(cfg, "range", "seg/one", 500_000, 10)) == b""
    # a put replaces
    ok(blobtool(cfg, "put", "seg/one", "-", stdin=b"second"))
    assert ok(blobtool(cfg, "get", "seg/one")) == b"second"
    ok(blobtool(cfg, "del", "seg/one"))
    assert "seg/one" not in gcs.objects
    for op in (["get", "seg/one"], ["head", "seg/one"], ["range", "seg/one", 0, 5]):
        r = blobtool(cfg, *op)
        assert r.returncode == 2 and b"not found" in r.stderr, (op, r.stderr)
    # deleting what is not there is OK (a retried delete whose first answer was lost)
    ok(blobtool(cfg, "del", "seg/one"))
    assert gcs.seen("DELETE")[-1] and len(gcs.seen("DELETE")) == 2


def test_empty_object(standins, blobtool):
    gcs = standins(GcsStandin)
    cfg = cfg_for(gcs)
    ok(blobtool(cfg, "put", "empty", "-", stdin=b""))
    assert gcs.objects["empty"] == b""
    assert ok(blobtool(cfg, "head", "empty")).strip() == b"0"
    assert ok(blobtool(cfg, "get", "empty")) == b""


@pytest.mark.parametrize("nkeys,page_size,max_keys,pages", [(2500, 1000, 1000, 3), (95, 7, 10, 10)])
def test_listing_pages_every_key_once_in_order(standins, blobtool, nkeys, page_size, max_keys, pages):
    gcs = standins(GcsStandin, page_size=page_size)
    want = [f"seg/dt=2026-01-01/k{i:05d}" for i in range(nkeys)]
    # seeded in the stand-in directly (thousands of puts would test nothing more); in shuffled
    # order, with neighbours outside the prefix on both sides
    for k in sorted(want, key=lambda k: hash(k)) + ["seg", "seg.", "sef/x", "seh/x", "other/k"]:
        gcs.objects[k] = b"x"
    keys, npages = list_keys(ok(blobtool(cfg_for(gcs), "list", "seg/", max_keys)))
    assert keys == want  # every key, once, in byte order
    assert npages == pages
    # pages of the blob interface ride on startOffset; Google's pages on pageToken
    assert gcs.seen("GET", "startOffset=seg%2Fdt%3D2026-01-01%2Fk")
    assert gcs.seen("GET", "pageToken=")
    assert all("prefix=seg%2F" in r[1] for r in gcs.seen("GET", "/o?"))


def test_listing_empty_and_exact_page(standins, blobtool):
    gcs = standins(GcsStandin, page_size=5)
    cfg = cfg_for(gcs)
    assert list_keys(ok(blobtool(cfg, "list", "none/")))[0] == []
    for i in range(10):
        gcs.objects[f"p/{i}"] = b""
    # exactly two pages of 5: no third, empty one (the continuation is only handed out when
    # a key follows)
    keys, npages = list_keys(ok(blobtool(cfg, "list", "p/", 5)))
    assert keys == [f"p/{i}" for i in range(10)] and npages == 2


ODD_KEYS = ["a+b", "x=y", "dt=2026-01-01/n/seg-1.seg", "~", "p%41q", "q?a=1&b=2#frag", "c:d;e,f@g!$'()*"]


def test_keys_needing_encoding(standins, blobtool):
    gcs = standins(GcsStandin)
    cfg = cfg_for(gcs)
    for i, k in enumerate(ODD_KEYS):
        ok(blobtool(cfg, "put", k, "-", stdin=f"v{i}".encode()))
    # the stand-in decoded each name from a strictly encoded URL; they arrived intact
    assert sorted(gcs.objects) == sorted(ODD_KEYS)
    for i, k in enumerate(ODD_KEYS):
        assert ok(blobtool(cfg, "get", k)) == f"v{i}".encode(), k
        assert ok(blobtool(cfg, "head", k)).strip() == str(len(f"v{i}")).encode()
    assert list_keys(ok(blobtool(cfg, "list", "", 3)))[0] == sorted(ODD_KEYS)
    assert list_keys(ok(blobtool(cfg, "list", "dt=2026-01-01/")))[0] == ["dt=2026-01-01/n/seg-1.seg"]
    for k in ODD_KEYS:
        ok(blobtool(cfg, "del", k))
    assert gcs.objects == {}
    # the one path segment of an object, '/' included, as Google's own clients send it
    assert any(r[1].endswith("/o/dt%3D2026-01-01%2Fn%2Fseg-1.seg") for r in gcs.seen("DELETE"))
    assert any("name=a%2Bb" in r[1] for r in gcs.seen("POST"))


# --------------------------------------------------------------------------- files

def test_put_file_streams_a_large_file_and_stream_reads_it_back(standins, blobtool, tmp_path):
    import hashlib
    gcs = standins(GcsStandin)
    cfg = cfg_for(gcs)
    data = os.urandom(9 * 1024 * 1024 + 4321)
    sha = hashlib.sha256(data).hexdigest()
    path = tmp_path / "000042.sst"
    path.write_bytes(data)
    ok(blobtool(cfg, "put-file", "bk/ckpt-1/000042.sst", path))
    assert gcs.objects["bk/ckpt-1/000042.sst"] == data
    post = gcs.seen("POST")[-1]
    assert post[2]["content-length"] == str(len(data)) and "uploadType=media" in post[1]
    assert ok(blobtool(cfg, "stream", "bk/ckpt-1/000042.sst")).decode() == f"{len(data)} {sha}\n"
    # the size (metadata), then 4 MiB ranges up to it
    c = 4 << 20
    assert [r[2]["range"] for r in gcs.seen("GET", "alt=media")] == \
        [f"bytes=0-{c - 1}", f"bytes={c}-{2 * c - 1}", f"bytes={2 * c}-{len(data) - 1}"]
    assert ok(blobtool(cfg, "get", "bk/ckpt-1/000042.sst")) == data
    # a retried upload sends the file again from its first byte
    gcs.faults = [503]
    ok(blobtool(cfg, "put-file", "bk/ckpt-1/again.sst", path))
    assert gcs.objects["bk/ckpt-1/again.sst"] == data
    # an empty file
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    ok(blobtool(cfg, "put-file", "bk/empty", empty))
    assert gcs.objects["bk/empty"] == b""
    assert ok(blobtool(cfg, "stream", "bk/empty")).decode() == f"0 {hashlib.sha256(b'').hexdigest()}\n"
    # not there: not found; a file shorter than the size asked for: no request, no object
    r = blobtool(cfg, "stream", "bk/none")
    assert r.returncode == 2 and b"not found" in r.stderr
    n = len(gcs.requests)
    r = blobtool(cfg, "put-file", "bk/short", path, f"--size={len(data) + 1}")
    assert r.returncode == 1 and b"fewer than" in r.stderr
    assert len(gcs.requests) == n and "bk/short" not in gcs.objects


@pytest.mark.skipif(SANITIZER, reason="the sanitizer's quarantine keeps freed chunks: RSS says nothing there")
def test_put_file_and_stream_hold_a_chunk_not_the_object(standins, tmp_path):
    """Peak RSS of blobtool (os.wait4 of that child alone): put-file and stream of a 48 MiB
    object stay well under its size; get, which holds it whole, does not (the yardstick)."""
    import hashlib
    gcs = standins(GcsStandin)
    cfg = tmp_path / "store.json"
    cfg.write_text(json.dumps({"type": "gcs", "gcs": cfg_for(gcs)}))
    path, h = tmp_path / "big.sst", hashlib.sha256()
    with open(path, "wb") as f:  # written a MiB at a time: the fork of this process stays small
        for _ in range(48):
            b = os.urandom(1 << 20)
            h.update(b)
            f.write(b)

    # a child's peak RSS counts its parent's pages at the fork (before the exec), so
    # blobtool is started by a small interpreter, not by this (large) one
    spawn = ("import os, subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[1:])\n"
             "_, st, ru = os.wait4(p.pid, 0)\n"
             "sys.stderr.write(f'{os.waitstatus_to_exitcode(st)} {ru.ru_maxrss}')\n")

    def peak_mib(*args):
        r = subprocess.run(["/usr/bin/python3", "-c", spawn, BLOBTOOL, str(cfg), *map(str, args)],
                           capture_output=True, timeout=CLI_TIMEOUT * 3)
        rc, kib = r.stderr.decode().split()[-2:]
        assert rc == "0", r.stderr
        return int(kib) / 1024, r.stdout

    put_peak, _ = peak_mib("put-file", "bk/big.sst", path)
    assert hashlib.sha256(gcs.objects["bk/big.sst"]).hexdigest() == h.hexdigest()
    stream_peak, out = peak_mib("stream", "bk/big.sst")
    assert out.decode() == f"{48 << 20} {h.hexdigest()}\n"
    get_peak, out = peak_mib("get", "bk/big.sst")
    assert len(out) == 48 << 20
    assert get_peak > 48, f"get: {get_peak:.0f} MiB (the yardstick holds the object)"
    assert put_peak < 24, f"put-file: {put_peak:.0f} MiB for a 48 MiB file"
    assert stream_peak < 32, f"stream: {stream_peak:.0f} MiB for a 48 MiB object"


# --------------------------------------------------------------------------- auth

def test_token_auth_and_wrong_token(standins, blobtool):
    gcs = standins(GcsStandin, token="right-token-7f3a")
    ok(blobtool(cfg_for(gcs), "put", "k", "-", stdin=b"v"))
    assert gcs.bearers == ["right-token-7f3a"]
    secret = "wrong-token-9c1e"
    r = blobtool(cfg_for(gcs, token=secret), "put", "k2", "-", stdin=b"v")
    err = r.stderr.decode()
    assert r.returncode == 1
    assert "put k2" in err and "HTTP 401" in err and "Invalid Credentials" in err and "authError" in err, err
    assert secret not in err and "right-token" not in err
    assert "k2" not in gcs.objects
    # a 401 is not worth a retry
    assert len(gcs.seen("POST")) == 2


def test_auth_none_sends_no_authorization(standins, blobtool):
    gcs = standins(GcsStandin, auth="none")
    cfg = {"bucket": gcs.bucket, "endpoint": gcs.url, "auth": "none"}
    ok(blobtool(cfg, "put", "a/b", "-", stdin=b"hello"))
    assert ok(blobtool(cfg, "get", "a/b")) == b"hello"
    assert list_keys(ok(blobtool(cfg, "list", "a/")))[0] == ["a/b"]
    ok(blobtool(cfg, "del", "a/b"))
    # the stand-in refuses (and records) any Authorization header; none came
    assert len(gcs.requests) >= 5 and not any("authorization" in r[2] for r in gcs.requests)
    # and the same stand-in does notice one
    r = blobtool(cfg_for(gcs, token="t"), "head", "a/b")
    assert r.returncode == 1
    assert gcs.violations
    gcs.violations.clear()


def test_auth_metadata_fetches_and_caches_a_token(standins, blobtool):
    md = standins(MetadataStandin, expires_in=3599)
    gcs = standins(GcsStandin, auth="metadata", metadata=md, page_size=4)
    cfg = {"bucket": gcs.bucket, "endpoint": gcs.url, "auth": "metadata"}
    env = {"GCE_METADATA_HOST": md.host}
    for i in range(12):
        gcs.objects[f"m/{i:02d}"] = b""
    keys, _ = list_keys(ok(blobtool(cfg, "list", "m/", 5, env=env)))
    assert len(keys) == 12
    # one token for the whole process: fetched once, with Metadata-Flavor (else 403)
    assert len(md.requests) == 1 and md.refusals == 0
    assert md.requests[0][2]["metadata-flavor"] == "Google"
    assert len(gcs.bearers) >= 4 and set(gcs.bearers) == {"md-token-1"}
    ok(blobtool(cfg, "put", "m/new", "-", stdin=b"v", env=env))
    assert gcs.bearers[-1] == "md-token-2"  # a new process asks again


def test_auth_metadata_token_near_expiry_is_renewed(standins, blobtool):
    # expires_in at the 60 s margin: the adapter must not reuse it for a later request
    md = standins(MetadataStandin, expires_in=60)
    gcs = standins(GcsStandin, auth="metadata", metadata=md, page_size=4)
    cfg = {"bucket": gcs.bucket, "endpoint": gcs.url, "auth": "metadata"}
    for i in range(12):
        gcs.objects[f"m/{i:02d}"] = b""
    keys, _ = list_keys(ok(blobtool(cfg, "list", "m/", 5, env={"GCE_METADATA_HOST": md.host})))
    assert len(keys) == 12
    n = len(gcs.requests)
    assert n >= 4 and len(md.requests) == n
    assert gcs.bearers == [f"md-token-{i + 1}" for i in range(n)]


def test_auth_metadata_failure_is_clear(standins, blobtool):
    md = standins(MetadataStandin)
    gcs = standins(GcsStandin, auth="metadata", metadata=md)
    cfg = {"bucket": gcs.bucket, "endpoint": gcs.url, "auth": "metadata"}
    md.PATH = "/elsewhere"  # the token endpoint answers 400 (recorded as a violation below)
    r = blobtool(cfg, "put", "k", "-", stdin=b"v", env={"GCE_METADATA_HOST": md.host})
    err = r.stderr.decode()
    assert r.returncode == 1 and "metadata token" in err and "HTTP 400" in err and "put k" in err, err
    assert not gcs.requests  # nothing went to storage without a credential
    md.violations.clear()


# --------------------------------------------------------------------------- retries

def test_retry_after_503_succeeds(standins, blobtool):
    gcs = standins(GcsStandin)
    gcs.faults = [503]
    ok(blobtool(cfg_for(gcs), "put", "k", "-", stdin=b"payload"))
    assert gcs.objects["k"] == b"payload"
    posts = gcs.seen("POST")
    assert len(posts) == 2
    assert posts[1][3] - posts[0][3] >= 0.18  # waited ~200 ms before the second attempt
    gcs.faults = [429, 502]
    assert ok(blobtool(cfg_for(gcs), "get", "k")) == b"payload"


def test_500_forever_fails_clearly_after_two_retries(standins, blobtool):
    gcs = standins(GcsStandin)
    gcs.always = 500
    t0 = time.monotonic()
    r = blobtool(cfg_for(gcs), "put", "k", "-", stdin=b"v")
    took = time.monotonic() - t0
    err = r.stderr.decode()
    assert r.returncode == 1
    assert "put k" in err and "HTTP 500" in err and "Backend Error" in err, err
    assert gcs.token not in err
    posts = gcs.seen("POST")
    assert len(posts) == 3
    assert posts[1][3] - posts[0][3] >= 0.18 and posts[2][3] - posts[1][3] >= 0.95
    assert took >= 1.15


def test_retries_and_timeout_are_configurable(standins, blobtool):
    """gcs.retries (the original's option): 0 makes one attempt, 4 makes five (200 ms, then
    1 s apart); gcs.timeout_ms bounds each attempt."""
    gcs = standins(GcsStandin)
    gcs.always = 503
    r = blobtool(dict(cfg_for(gcs), retries=0), "put", "k", "-", stdin=b"v")
    assert r.returncode == 1 and "HTTP 503" in r.stderr.decode()
    assert len(gcs.seen("POST")) == 1
    r = blobtool(dict(cfg_for(gcs), retries=4), "put", "k2", "-", stdin=b"v")
    assert r.returncode == 1
    assert len(gcs.seen("POST")) == 1 + 5, gcs.seen("POST")
    gcs.always = None
    import socket
    quiet = socket.socket()
    quiet.bind(("127.0.0.1", 0))
    quiet.listen(1)  # accepts, never answers
    try:
        cfg = {"bucket": "b", "endpoint": f"http://127.0.0.1:{quiet.getsockname()[1]}", "auth": "none",
               "timeout_ms": 300, "retries": 0}
        t0 = time.monotonic()
        r = blobtool(cfg, "head", "x")
        took = time.monotonic() - t0
        assert r.returncode == 1 and "timeout" in r.stderr.decode().lower(), r.stderr
        assert took < 5, f"one 300 ms attempt took {took:.1f}s"
    finally:
        quiet.close()


def test_transport_failure_fails_clearly(blobtool):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: every attempt is refused
    cfg = {"bucket": "b", "endpoint": f"http://127.0.0.1:{port}", "auth": "token", "token": "tok-secret"}
    t0 = time.monotonic()
    r = blobtool(cfg, "list", "x/")
    err = r.stderr.decode()
    assert r.returncode == 1 and "gcs list" in err and "tok-secret" not in err, err
    assert time.monotonic() - t0 >= 1.15  # retried twice before giving up


def test_config_errors(blobtool):
    r = blobtool({"bucket": "b", "endpoint": "http://127.0.0.1:1", "auth": "token"}, "head", "k")
    assert r.returncode == 1 and b"gcs.token" in r.stderr
    r = blobtool({"endpoint": "http://127.0.0.1:1", "auth": "none"}, "head", "k")
    assert r.returncode == 1 and b"gcs.bucket" in r.stderr
    r = blobtool({"bucket": "b", "endpoint": "ftp://x", "auth": "none"}, "head", "k")
    assert r.returncode == 1 and b"gcs.endpoint" in r.stderr
