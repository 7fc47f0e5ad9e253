"""Mutual TLS through the real edge: a second ingest listener (http.tls) and the
client_cert verifier, with real handshakes from Python's ssl module.

Certificates are made with the openssl CLI in a temp dir: a CA, a server certificate for
127.0.0.1, two client certificates issued by the CA (one pinned, one not) and a
self-signed client certificate. What the design gives for each client:

  client_cert: request (the default when client_ca is set)
    pinned CA-issued cert  -> 201
    unpinned CA-issued     -> 401 {"error":"verification_failed","reason":":no_match"}
    no certificate         -> 401 reason missing_signature
    self-signed            -> 401 reason missing_signature: the handshake is let through,
                              but a certificate that does not chain to client_ca is
                              treated as no certificate at all
  client_cert: require
    no certificate / self-signed -> refused in the TLS handshake (on TLS 1.3 the client
                              learns it on its first read); CA-issued certs as above.

The plain port keeps serving every source; a client_cert source over plain HTTP has no
certificate (401 missing_signature).
"""
import hashlib
import http.client
import json
import socket
import ssl
import subprocess
import time

import pytest

from helpers import LOG, is_uuid7, reserve_port, run_cli

SRC = "/webhooks/mtls_src"


# --------------------------------------------------------------------------- certificates

def _openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"openssl {' '.join(args)}:\n{p.stderr}"
    return p.stdout


def _issue(d, name, subj, ca, ext):
    """A P-256 key and a certificate for it, signed by `ca` (a name in d) or self-signed."""
    (d / f"{name}.ext").write_text(ext)
    if ca is None:
        _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                 "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", subj,
                 "-extensions", "v3", "-config", _req_config(d, name, ext), cwd=d)
        return
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subj, cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
             "-set_serial", str(int.from_bytes(name.encode(), "big") % (1 << 62)), "-out", f"{name}.pem",
             "-days", "2", "-extfile", f"{name}.ext", cwd=d)


def _req_config(d, name, ext):
    cfg = d / f"{name}.cnf"
    cfg.write_text("[req]\ndistinguished_name = dn\n[dn]\n[v3]\n" + ext)
    return str(cfg)


def _fingerprint(d, name):
    der = subprocess.run(["openssl", "x509", "-in", str(d / f"{name}.pem"), "-outform", "DER"],
                         capture_output=True, check=True, timeout=60).stdout
    return hashlib.sha256(der).hexdigest()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    _issue(d, "ca", "/CN=ankusa test CA", None,
           "basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n")
    _issue(d, "server", "/CN=127.0.0.1", "ca",
           "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n"
    _issue(d, "pinned", "/CN=pinned client", "ca", client_ext)
    _issue(d, "unpinned", "/CN=unpinned client", "ca", client_ext)
    _issue(d, "selfsigned", "/CN=self-signed client", None, client_ext)
    fp = {n: _fingerprint(d, n) for n in ("pinned", "unpinned", "selfsigned")}
    # the CLI's own colon form is a pin too (the verifier takes it as written)
    colon = _openssl("x509", "-in", "pinned.pem", "-noout", "-fingerprint", "-sha256", cwd=d)
    assert colon.strip().split("=", 1)[1].replace(":", "").lower() == fp["pinned"]
    return {"dir": d, "fp": fp, "colon": colon.strip().split("=", 1)[1]}


# --------------------------------------------------------------------------- server

def _start(ankusa, pki, client_cert=None, pins=None):
    """ankusa with http.tls on a port of its own, the sources mtls_src (client_cert) and
    demo (no verifier). Returns (server, tls_port)."""
    d = pki["dir"]
    held, tls_port = reserve_port()  # held while the Server picks its own two ports
    tls = {"port": tls_port, "cert": str(d / "server.pem"), "key": str(d / "server.key"),
           "client_ca": str(d / "ca.pem")}
    if client_cert:
        tls["client_cert"] = client_cert
    sources = {
        "mtls_src": {"verify": {"type": "client_cert", "pins": pins or [f"sha256:{pki['fp']['pinned']}"]},
                     "sinks": LOG},
        "demo": {"sinks": LOG},
    }
    try:
        s = ankusa(config={"http": {"tls": tls}}, sources=sources, start=False)
    finally:
        held.close()
    s.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", tls_port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or not s.running():
                raise AssertionError(f"nothing listens on http.tls.port {tls_port}\n{s.log_tail()}")
            time.sleep(0.05)
    return s, tls_port


def _ctx(pki, client=None, version=None):
    d = pki["dir"]
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.load_verify_locations(str(d / "ca.pem"))  # and check the server's cert for 127.0.0.1
    if client:
        ctx.load_cert_chain(str(d / f"{client}.pem"), str(d / f"{client}.key"))
    if version:
        ctx.minimum_version = ctx.maximum_version = version
    return ctx


def _post_tls(port, ctx, path=SRC, body=b'{"hello":"mtls"}'):
    """(status, json body) of one POST over TLS."""
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=15)
    try:
        conn.request("POST", path, body=body, headers={"Content-Type": "application/json",
                                                       "Connection": "close"})
        r = conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None
    finally:
        conn.close()


def _refused(port, ctx):
    """True when the server ends the connection in (or right after) the handshake
    instead of answering."""
    try:
        status, body = _post_tls(port, ctx)
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected, BrokenPipeError) as e:
        return repr(e)
    raise AssertionError(f"the server answered {status} {body} instead of refusing the handshake")


VERSIONS = [pytest.param(ssl.TLSVersion.TLSv1_2, id="tls1.2"), pytest.param(ssl.TLSVersion.TLSv1_3, id="tls1.3")]


# --------------------------------------------------------------------------- tests

@pytest.mark.parametrize("version", VERSIONS)
def test_request_mode_pins(ankusa, pki, version):
    s, port = _start(ankusa, pki)

    status, body = _post_tls(port, _ctx(pki, "pinned", version))
    assert status == 201, body
    assert body["status"] == "accepted" and is_uuid7(body["id"]), body
    accepted = {body["id"]}

    assert _post_tls(port, _ctx(pki, "unpinned", version)) == \
        (401, {"error": "verification_failed", "reason": ":no_match"})
    assert _post_tls(port, _ctx(pki, None, version)) == \
        (401, {"error": "verification_failed", "reason": ":missing_signature"})
    # request mode lets a certificate from another issuer complete the handshake, and then
    # treats it as no certificate: its fingerprint is never even compared with the pins
    assert _post_tls(port, _ctx(pki, "selfsigned", version)) == \
        (401, {"error": "verification_failed", "reason": ":missing_signature"})

    # the TLS port serves every source; the plain port is unchanged
    status, body = _post_tls(port, _ctx(pki, None, version), path="/webhooks/demo")
    assert status == 201, body
    accepted.add(body["id"])
    r = s.post("/webhooks/demo", b"plain")
    assert r.status == 201, r
    accepted.add(r.json["id"])
    # no TLS session on the plain port: a client_cert source has no certificate there
    r = s.post(SRC, b"plain")
    assert (r.status, r.json) == (401, {"error": "verification_failed", "reason": ":missing_signature"})

    stored = s.inspect()
    assert {h["id"] for h in stored} == accepted, "a refused request was stored (or an accepted one lost)"
    assert sorted(h["source_id"] for h in stored) == ["demo", "demo", "mtls_src"]


def test_pin_forms_and_keep_alive(ankusa, pki):
    """Two pins (rotation) written in the other accepted forms; several requests on one
    TLS connection each verified."""
    fp = pki["fp"]
    s, port = _start(ankusa, pki, pins=[pki["colon"], fp["unpinned"].upper()])
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=_ctx(pki, "pinned"), timeout=15)
    try:
        for i in range(3):
            conn.request("POST", SRC, body=b"n%d" % i)
            r = conn.getresponse()
            assert r.status == 201, r.read()
            r.read()
    finally:
        conn.close()
    status, _ = _post_tls(port, _ctx(pki, "unpinned"))
    assert status == 201, "the second pin did not match"
    assert _post_tls(port, _ctx(pki, "selfsigned"))[0] == 401
    assert len(s.inspect()) == 4


@pytest.mark.parametrize("version", VERSIONS)
def test_require_mode_refuses_in_handshake(ankusa, pki, version):
    s, port = _start(ankusa, pki, client_cert="require")
    _refused(port, _ctx(pki, None, version))
    _refused(port, _ctx(pki, "selfsigned", version))
    status, body = _post_tls(port, _ctx(pki, "pinned", version))
    assert status == 201, body
    assert _post_tls(port, _ctx(pki, "unpinned", version)) == \
        (401, {"error": "verification_failed", "reason": ":no_match"})
    assert s.post("/webhooks/demo", b"plain").status == 201
    assert len(s.inspect()) == 2


def test_bad_tls_files_exit_78(pki, tmp_path):
    """A named PEM file that is missing is a config error naming the key and the path."""
    d = pki["dir"]
    cfg = tmp_path / "bad.yml"
    cfg.write_text(json.dumps({
        "node": {"data_dir": str(tmp_path / "data")},
        "http": {"tls": {"cert": str(d / "server.pem"), "key": str(tmp_path / "missing.key"),
                         "client_ca": str(d / "ca.pem")}},
    }))
    p = run_cli("check-config", "--config", cfg)
    assert p.returncode == 78, (p.returncode, p.stdout, p.stderr)
    assert f"http.tls.key: cannot read {tmp_path / 'missing.key'}: No such file or directory" in p.stderr
    assert "PRIVATE KEY" not in p.stderr + p.stdout


# --------------------------------------------------------------------------- SIGHUP

def _served_cert_sha256(port):
    """SHA-256 of the certificate the TLS listener presents to a new connection."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw) as t:
            return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()


def test_sighup_reloads_the_certificate_and_keeps_the_old_one_on_a_bad_file(ankusa, pki, tmp_path):
    """SIGHUP re-reads http.tls's files: new connections get the new certificate, a
    connection already open keeps its session and is still served, and a replacement that
    fails the load checks (a key that does not match) is refused, logged, and the
    certificate in use stays."""
    import shutil
    import signal

    d = pki["dir"]
    _issue(d, "server2", "/CN=127.0.0.1", "ca",
           "basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(d / "server.pem", live / "server.pem")
    shutil.copy(d / "server.key", live / "server.key")
    held, tls_port = reserve_port()
    tls = {"port": tls_port, "cert": str(live / "server.pem"), "key": str(live / "server.key"),
           "client_ca": str(d / "ca.pem")}
    try:
        s = ankusa(config={"http": {"tls": tls}}, sources={"demo": {"sinks": LOG}}, start=False)
    finally:
        held.close()
    s.start()
    first, second = _fingerprint(d, "server"), _fingerprint(d, "server2")
    assert _served_cert_sha256(tls_port) == first

    # a keep-alive connection opened before the reload
    old = http.client.HTTPSConnection("127.0.0.1", tls_port, context=_ctx(pki), timeout=15)
    old.request("POST", "/webhooks/demo", body=b"{}", headers={"Content-Type": "application/json"})
    r = old.getresponse()
    r.read()
    assert r.status == 201

    shutil.copy(d / "server2.pem", live / "server.pem")
    shutil.copy(d / "server2.key", live / "server.key")
    s.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while _served_cert_sha256(tls_port) != second:
        assert time.monotonic() < deadline, f"the new certificate is not served\n{s.log_tail()}"
        time.sleep(0.1)
    assert "TLS certificate reloaded" in s.log_text()
    assert _post_tls(tls_port, _ctx(pki), path="/webhooks/demo")[0] == 201
    old.request("POST", "/webhooks/demo", body=b"{}", headers={"Content-Type": "application/json"})
    r = old.getresponse()
    r.read()
    assert r.status == 201, "a connection opened before the reload is still served"
    old.close()

    # a key that does not match its certificate: refused, the certificate in use stays
    shutil.copy(d / "server.key", live / "server.key")
    s.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "TLS certificate not reloaded" not in s.log_text():
        assert time.monotonic() < deadline, f"no refusal logged\n{s.log_tail()}"
        time.sleep(0.1)
    assert "http.tls.key" in s.log_text()
    assert "BEGIN" not in s.log_text() and "PRIVATE" not in s.log_text(), "no byte of a key in the log"
    assert _served_cert_sha256(tls_port) == second
    assert _post_tls(tls_port, _ctx(pki), path="/webhooks/demo")[0] == 201
    assert s.running()
