"""Secrets at rest (source_store.secret_key): the secrets of API-managed sources are sealed
in the store (read back through the store's own iterator, so block compression cannot hide
a plaintext, and in the raw files), open again after a restart (a signed hook verifies,
the sink's header arrives), a persistent store without a key or with a bad one is a
config error (78), a row sealed with a key the node lacks stops the boot naming the
source, rotate-secrets re-seals with the new key, and rows written in the clear by an
earlier build are sealed at the first start with a key."""
import base64
import hashlib
import json

from helpers import LOOPBACK, PERSISTENT_STORE, SOURCE_STORE_KEY, admin_json, github_sig, run_cli

FAST = {"retry": {"base_ms": 50, "max_ms": 300, "max_attempts": 84, "jitter": False}, "breaker_failures": 0}
KEY_B = base64.b64encode(b"another-test-key-0123456789abcde").decode()
assert len(base64.b64decode(KEY_B)) == 32

GH_NEW = "gh-at-rest-secret-new-7Qx"
GH_OLD = "gh-at-rest-secret-old-9Wz"
SINK_SECRET = "whsec_c2VhbGVkLWF0LXJlc3Qtc2luay1zZWNyZXQ="
HEADER_VALUE = "Bearer header-token-5Rk"
URL_TOKEN = "url-query-token-3Lm"
SECRETS = [GH_NEW, GH_OLD, SINK_SECRET, HEADER_VALUE, URL_TOKEN, "header-token-5Rk"]


def key_id(text):
    return hashlib.sha256(base64.b64decode(text)).hexdigest()[:8]


def forms(secret):
    """The secret as it could sit in a file: plain, base64 (with or without padding), hex."""
    raw = secret.encode()
    b64 = base64.b64encode(raw)
    return [raw, b64, b64.rstrip(b"="), base64.urlsafe_b64encode(raw).rstrip(b"="), raw.hex().encode(),
            raw.hex().upper().encode()]


def config(key=SOURCE_STORE_KEY, **store):
    ss = dict(PERSISTENT_STORE, secret_key=key, **store)
    if key is None:
        del ss["secret_key"]
    return dict(LOOPBACK, source_store=ss, dispatch=FAST)


def spec(rx, name="gh_api"):
    return {"name": name, "verify": {"type": "github", "secret": [GH_NEW, GH_OLD]},
            "sinks": [{"type": "http", "url": f"{rx.url}?token={URL_TOKEN}", "secret": SINK_SECRET,
                       "headers": {"authorization": HEADER_VALUE}}]}


def rows(node, prefix=None):
    """Every row of every column family, through the store's iterator (values decompressed)."""
    args = ["inspect", "rows", "--data-dir", node.data_dir]
    if prefix:
        args += ["--prefix", prefix]
    p = run_cli(*args)
    assert p.returncode == 0, p.stderr
    return p.stdout


# -- the store's files, raw and decompressed: RocksDB compresses blocks (Snappy by default,
# LZ4 for hooks), and a compressed value is not a substring of the file. Tiny decoders of
# the two raw block formats, tried at every offset (the files of these tests are small).

def lz4_block(src, pos, n_out):
    """One raw LZ4 block from src[pos:] that decodes to exactly n_out bytes, or None."""
    out = bytearray()
    end = len(src)
    while pos < end:
        token = src[pos]
        pos += 1
        lit = token >> 4
        if lit == 15:
            while True:
                if pos >= end:
                    return None
                b = src[pos]
                pos += 1
                lit += b
                if b != 255:
                    break
        if pos + lit > end or len(out) + lit > n_out:
            return None
        out += src[pos:pos + lit]
        pos += lit
        if len(out) == n_out:
            return bytes(out)
        if pos + 2 > end:
            return None
        off = src[pos] | (src[pos + 1] << 8)
        pos += 2
        if off == 0 or off > len(out):
            return None
        ml = token & 15
        if ml == 15:
            while True:
                if pos >= end:
                    return None
                b = src[pos]
                pos += 1
                ml += b
                if b != 255:
                    break
        ml += 4
        if len(out) + ml > n_out:
            return None
        for _ in range(ml):
            out.append(out[-off])
    return None


def snappy_block(src, pos, n_out):
    """One raw snappy block from src[pos:] (after its varint length) of exactly n_out bytes, or None."""
    out = bytearray()
    end = len(src)
    while len(out) < n_out:
        if pos >= end:
            return None
        tag = src[pos]
        pos += 1
        kind = tag & 3
        if kind == 0:
            ln = tag >> 2
            if ln >= 60:
                nb = ln - 59
                if pos + nb > end:
                    return None
                ln = int.from_bytes(src[pos:pos + nb], "little")
                pos += nb
            ln += 1
            if pos + ln > end or len(out) + ln > n_out:
                return None
            out += src[pos:pos + ln]
            pos += ln
            continue
        if kind == 1:
            if pos >= end:
                return None
            ln = 4 + ((tag >> 2) & 7)
            off = ((tag >> 5) << 8) | src[pos]
            pos += 1
        else:
            nb = 2 if kind == 2 else 4
            if pos + nb > end:
                return None
            ln = (tag >> 2) + 1
            off = int.from_bytes(src[pos:pos + nb], "little")
            pos += nb
        if off == 0 or off > len(out) or len(out) + ln > n_out:
            return None
        for _ in range(ln):
            out.append(out[-off])
    return bytes(out)


def decoded_blocks(data):
    """Every RocksDB block compressed with LZ4 or Snappy found at any offset of data (a
    varint32 size, then the block): a value in a compressed block is not in the raw bytes."""
    found = []
    for i in range(len(data)):
        n, shift, p = 0, 0, i
        while p < len(data) and shift <= 28:
            b = data[p]
            p += 1
            n |= (b & 0x7f) << shift
            shift += 7
            if not b & 0x80:
                break
        else:
            continue
        if not 16 <= n <= (1 << 20):
            continue
        for dec in (lz4_block, snappy_block):
            text = dec(data, p, n)
            if text:
                found.append(text)
    return found


def raw_files(node):
    """Every file of the node's data dir, and the text of every compressed block in them."""
    out = []
    for f in sorted(node.data_dir.rglob("*")):
        if f.is_file():
            data = f.read_bytes()
            out.append(data)
            out.extend(decoded_blocks(data))
    return b"\n".join(out)


def assert_no_secret(blob, where):
    if isinstance(blob, str):
        blob = blob.encode()
    for s in SECRETS:
        for form in forms(s):
            assert form not in blob, f"{s!r} ({form!r}) found in {where}"


def post_signed(node, secret, body=b'{"event":"push"}', name="gh_api"):
    return node.post(f"/webhooks/{name}", body,
                     {"Content-Type": "application/json", "X-Hub-Signature-256": github_sig(secret, body)})


def create(node, rx, name="gh_api"):
    r = admin_json(node, "POST", "/v1/tenants/acme/sources", spec(rx, name))
    assert r.status == 201, r
    return r


def test_sealed_in_the_store_and_open_after_restart(ankusa, rx):
    node = ankusa(config=config())
    create(node, rx)
    # an update: its audit row has a before and an after
    s2 = spec(rx)
    s2["on_verify_failure"] = "reject"
    s2["dedupe"] = {"header": "x-github-delivery"}
    s2.pop("name")
    r = admin_json(node, "PUT", "/v1/tenants/acme/sources/gh_api", s2)
    assert r.status == 200, r
    assert post_signed(node, GH_NEW).status == 201
    rx.wait_for(lambda ds: len(ds) >= 1)
    assert node.stop() == 0

    dump = rows(node)
    (row,) = [line for line in dump.splitlines() if line.startswith("default\ts:acme")]
    stored = json.loads(row.split("\t", 2)[2])
    assert stored["v"] == 2 and stored["tenant"] == "acme" and stored["name"] == "gh_api"
    kid = key_id(SOURCE_STORE_KEY)
    sealed = stored["spec"]["verify"]["secret"]
    assert isinstance(sealed, list) and len(sealed) == 2, "each element of a secret list sealed on its own"
    assert all(v.startswith(f"enc:v1:{kid}:") for v in sealed)
    sink = stored["spec"]["sinks"][0]
    assert sink["secret"].startswith(f"enc:v1:{kid}:") and sink["url"].startswith(f"enc:v1:{kid}:")
    assert sink["headers"]["authorization"].startswith(f"enc:v1:{kid}:"), "header names stay, values are sealed"
    assert stored["spec"]["verify"]["type"] == "github" and stored["spec"]["dedupe"] == {"header": "x-github-delivery"}
    assert len(set(sealed)) == 2
    audit = [line for line in dump.splitlines() if line.startswith("audit\t") and "source:acme/gh_api" in line]
    assert len(audit) >= 2, dump
    # the live rows, every column family (the audit trail included), the raw files, the log
    assert_no_secret(dump, "the store's rows")
    assert_no_secret(raw_files(node), "the store's files")
    assert_no_secret(node.log_text(), "the node's log")

    node.start()
    assert post_signed(node, GH_NEW).status == 201, "the verifier's secret opened"
    assert post_signed(node, GH_OLD).status == 201, "and the list's second one"
    assert post_signed(node, "wrong-secret").status == 401
    ds = rx.wait_for(lambda ds: len(ds) >= 3)
    assert ds[-1].headers["authorization"] == HEADER_VALUE, "the sink's header opened"
    assert "webhook-signature" in ds[-1].headers
    # the API still never shows them
    v = admin_json(node, "GET", "/v1/tenants/acme/sources/gh_api").json
    assert_no_secret(json.dumps(v), "GET")
    assert_no_secret(node.log_text(), "the node's log")


def test_persistent_without_key_is_a_config_error(ankusa, tmp_path):
    node = ankusa(config=config(key=None), start=False)
    for cmd in (["serve"], ["check-config"]):
        p = run_cli(*cmd, "--config", node.config_path)
        assert p.returncode == 78, p.stderr
        assert "source_store.secret_key: required with type persistent" in p.stderr
        assert "openssl rand -base64 32" in p.stderr and "ANKUSA_SOURCE_STORE_SECRET_KEY" in p.stderr
    # a static store needs none
    static = ankusa(config={"source_store": {"type": "static"}}, start=False)
    assert run_cli("check-config", "--config", static.config_path).returncode == 0
    # the environment or a file holds it
    p = run_cli("check-config", "--config", node.config_path, env={"ANKUSA_SOURCE_STORE_SECRET_KEY": KEY_B})
    assert p.returncode == 0, p.stderr
    kf = tmp_path / "ankusa.key"
    kf.write_text(KEY_B + "\n")
    p = run_cli("check-config", "--config", node.config_path, env={"ANKUSA_SOURCE_STORE_SECRET_KEY_FILE": str(kf)})
    assert p.returncode == 0, p.stderr
    p = run_cli("print-config", "--config", node.config_path, env={"ANKUSA_SOURCE_STORE_SECRET_KEY": KEY_B})
    assert p.returncode == 0 and KEY_B not in p.stdout
    shown = json.loads(p.stdout)["source_store"]
    assert shown["secret_key"] == "[REDACTED]" and shown["previous_secret_keys"] is None
    p = run_cli("print-config", "--config", node.config_path,
                env={"ANKUSA_SOURCE_STORE_SECRET_KEY": KEY_B,
                     "ANKUSA_SOURCE_STORE_PREVIOUS_SECRET_KEYS": f"{SOURCE_STORE_KEY},{KEY_B}"})
    assert p.returncode == 0 and KEY_B not in p.stdout and SOURCE_STORE_KEY not in p.stdout, p.stdout
    assert json.loads(p.stdout)["source_store"]["previous_secret_keys"] == "[REDACTED]"


def test_bad_key_text_is_a_config_error_never_echoed(ankusa, tmp_path):
    short = base64.b64encode(b"x" * 31).decode()
    for bad in ("not-base64-at-all!", short, base64.b64encode(b"y" * 33).decode(), "00" * 32):
        node = ankusa(config=config(key=bad), start=False)
        p = run_cli("serve", "--config", node.config_path)
        assert p.returncode == 78, p.stderr
        assert "source_store.secret_key: not a key" in p.stderr, p.stderr
        assert bad not in p.stderr and bad not in p.stdout
    node = ankusa(config=config(previous_secret_keys=[short]), start=False)
    p = run_cli("check-config", "--config", node.config_path)
    assert p.returncode == 78 and "source_store.previous_secret_keys[0]: not a key" in p.stderr
    assert short not in p.stderr
    kf = tmp_path / "bad.key"
    kf.write_text("short\n")
    node = ankusa(config=config(key=None, secret_key_file=str(kf)), start=False)
    p = run_cli("check-config", "--config", node.config_path)
    assert p.returncode == 78 and "source_store.secret_key_file:" in p.stderr and "short" not in p.stderr


def test_wrong_key_stops_the_boot_naming_the_source(ankusa, rx):
    node = ankusa(config=config())
    create(node, rx)
    assert node.stop() == 0
    node.config["source_store"]["secret_key"] = KEY_B
    node.write_config()
    node.start(wait=False)
    rc = node.wait_exit(30)
    assert rc not in (None, 0), node.log_tail()
    log = node.log_text()
    assert "stored source acme/gh_api" in log and key_id(SOURCE_STORE_KEY) in log, node.log_tail()
    assert "previous_secret_keys" in log
    assert_no_secret(log, "the log")


def test_rotation(ankusa, rx):
    node = ankusa(config=config())
    create(node, rx)
    create(node, rx, name="gh_two")
    assert node.stop() == 0
    old, new = key_id(SOURCE_STORE_KEY), key_id(KEY_B)
    # the new key with the old one as previous: the node reads the old rows
    node.config["source_store"].update(secret_key=KEY_B, previous_secret_keys=[SOURCE_STORE_KEY])
    node.write_config()
    node.start()
    assert post_signed(node, GH_NEW).status == 201
    assert "run `ankusa rotate-secrets`" in node.log_text()
    # a running node holds the store: the rotation is offline
    p = run_cli("rotate-secrets", "--config", node.config_path)
    assert p.returncode == 1 and "stop the node first" in p.stderr, p.stderr
    assert node.stop() == 0
    assert f"enc:v1:{old}:" in rows(node, "s:")
    p = run_cli("rotate-secrets", "--config", node.config_path)
    assert p.returncode == 0, p.stderr
    assert "2 stored sources; 2 rows re-sealed (10 secrets)" in p.stdout and new in p.stdout, p.stdout
    assert_no_secret(p.stdout + p.stderr, "rotate-secrets' output")
    live = rows(node, "s:")
    assert f"enc:v1:{old}:" not in live and f"enc:v1:{new}:" in live
    assert f"enc:v1:{old}:".encode() not in raw_files(node), "the old key's rows left the files"
    (audit,) = [line for line in rows(node).splitlines()
                if line.startswith("audit\t") and "source_store.rotate_secrets" in line]
    row = json.loads(audit.split("\t", 2)[2])
    assert row["actor"] == "rotate-secrets" and row["subject"] == "source_store"
    assert row["detail"] == {"sources": 2, "secrets": 10, "key_id": new}
    p = run_cli("rotate-secrets", "--config", node.config_path)
    assert p.returncode == 0 and "0 rows re-sealed" in p.stdout, p.stdout
    # the previous key can go
    del node.config["source_store"]["previous_secret_keys"]
    node.write_config()
    node.start()
    assert post_signed(node, GH_OLD).status == 201
    assert post_signed(node, GH_NEW, name="gh_two").status == 201
    # rotation without the old key: nothing rewritten, the source named
    assert node.stop() == 0
    node.config["source_store"]["secret_key"] = SOURCE_STORE_KEY
    node.write_config()
    p = run_cli("rotate-secrets", "--config", node.config_path)
    assert p.returncode == 1 and "stored source acme/gh_api" in p.stderr and new in p.stderr, p.stderr
    assert "nothing was rewritten" in p.stderr


def test_plain_rows_are_sealed_at_first_start(ankusa, rx):
    # the test build writes rows as the build before sealing did (secrets in the clear)
    node = ankusa(config=config(), env={"ANKUSA_TEST_SOURCE_ROWS_PLAIN": "1"})
    create(node, rx)
    assert node.stop() == 0
    live = rows(node, "s:")
    assert GH_NEW in live and '"v":1' in live, "the seam wrote a plain row"
    # a static store leaves stored rows alone; its recovery flushes them into a compressed file
    node.env = {}
    node.config["source_store"] = {"type": "static"}
    node.write_config()
    node.start()
    assert node.stop() == 0
    files = raw_files(node)
    assert GH_NEW.encode() in files and HEADER_VALUE.encode() in files, "the check sees into compressed blocks"
    # the first start with a persistent store and a key seals them, and the old versions leave the files
    node.config["source_store"] = dict(PERSISTENT_STORE)
    node.write_config()
    node.start()
    assert "their secrets are sealed now" in node.log_text() and "sources=1 secrets=5" in node.log_text(), \
        node.log_tail()
    assert post_signed(node, GH_NEW).status == 201
    assert node.stop() == 0
    live = rows(node, "s:")
    assert '"v":2' in live and f"enc:v1:{key_id(SOURCE_STORE_KEY)}:" in live
    assert_no_secret(live, "the migrated row")
    assert_no_secret(raw_files(node), "the store's files after the migration")
    assert_no_secret(node.log_text(), "the log")
    node.start()
    assert "sealed now" not in node.log_text().split("----- start #4")[-1], "migrated once"
    assert post_signed(node, GH_OLD).status == 201
