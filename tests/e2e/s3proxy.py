"""A loopback S3 signing proxy for tests/e2e/test_blob_s3.py (DESIGN.md §8).

s3rver 3.7.1 accepts any SigV4 signature, so it cannot tell whether ankusa signs right.
This proxy stands in front of it and recomputes every request's signature with an
implementation of its own (hmac/hashlib, following AWS's documented algorithm: canonical
request, string to sign, signing key), independent of libcurl's. It answers 403 (an S3
error document) when:
  - the Authorization header is missing or not AWS4-HMAC-SHA256 with Credential,
    SignedHeaders and Signature;
  - the access key id is unknown, the scope is not DATE/REGION/s3/aws4_request, or
    x-amz-date is missing or more than 15 minutes away;
  - host, x-amz-date or x-amz-content-sha256 is not signed, or a signed header is absent;
  - x-amz-content-sha256 is not the SHA-256 of the body received (UNSIGNED-PAYLOAD too);
  - the key has a session token and x-amz-security-token is not it, or is present but not
    signed;
  - the signature differs.
Otherwise it strips Authorization and x-amz-security-token (s3rver knows none of our keys)
and forwards the request to s3rver, answering what s3rver answers.

Test modes: `fail_next` (a list of statuses answered before anything is checked or
forwarded, one per request, e.g. [503]), `fail_always` (a status answered to every
request). `requests` records (method, path, verdict) for the tests to look at.

Standard library only. Usable in-process (SigV4Proxy(...).start()) or as a script:
  python3 s3proxy.py UPSTREAM_PORT KEY_ID SECRET [TOKEN]   (prints the port, serves forever)
"""
import hashlib
import hmac
import http.client
import http.server
import sys
import threading
import time
import urllib.parse
from datetime import datetime, timezone

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNRESERVED = "-_.~"


def uri_encode(s, keep_slash=False):
    return urllib.parse.quote(s, safe=UNRESERVED + ("/" if keep_slash else ""))


def canonical_uri(raw_path):
    """S3's canonical URI: every segment decoded and encoded once (RFC 3986, unreserved kept)."""
    return "/".join(uri_encode(urllib.parse.unquote(seg)) for seg in raw_path.split("/")) or "/"


def canonical_query(raw_query):
    pairs = []
    for part in raw_query.split("&") if raw_query else []:
        k, _, v = part.partition("=")
        pairs.append((uri_encode(urllib.parse.unquote(k)), uri_encode(urllib.parse.unquote(v))))
    pairs.sort()
    return "&".join(f"{k}={v}" for k, v in pairs)


def header_value(v):
    return " ".join(v.strip().split())


def signing_key(secret, date, region, service):
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return k


def signature(secret, method, raw_target, headers, signed, payload_hash, amz_date, region, service="s3"):
    """The SigV4 signature of a request. headers: {lowercase name: value}; signed: the
    lowercase names, in the order they are signed (sorted)."""
    path, _, query = raw_target.partition("?")
    creq = "\n".join([
        method,
        canonical_uri(path),
        canonical_query(query),
        "".join(f"{h}:{header_value(headers[h])}\n" for h in signed),
        ";".join(signed),
        payload_hash,
    ])
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    sts = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(creq.encode()).hexdigest()])
    return hmac.new(signing_key(secret, amz_date[:8], region, service), sts.encode(), hashlib.sha256).hexdigest()


def parse_authorization(value):
    """{'Credential': ..., 'SignedHeaders': ..., 'Signature': ...} or None."""
    if not value or not value.startswith("AWS4-HMAC-SHA256 "):
        return None
    out = {}
    for part in value[len("AWS4-HMAC-SHA256 "):].split(","):
        k, sep, v = part.strip().partition("=")
        if not sep:
            return None
        out[k] = v
    if not {"Credential", "SignedHeaders", "Signature"} <= out.keys():
        return None
    return out


def verify(method, raw_target, headers, body, keys, region, now=None):
    """None when the request is signed right, else why not. headers: {lowercase name:
    value}; keys: {key id: (secret, session token or None)}."""
    auth = parse_authorization(headers.get("authorization"))
    if not auth:
        return "no AWS4-HMAC-SHA256 authorization"
    cred = auth["Credential"].split("/")
    if len(cred) != 5:
        return "malformed credential"
    key_id, date, creg, service, term = cred
    if key_id not in keys:
        return "unknown access key id"
    secret, token = keys[key_id]
    if creg != region or service != "s3" or term != "aws4_request":
        return f"wrong scope {creg}/{service}/{term}"
    amz_date = headers.get("x-amz-date", "")
    try:
        t = datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        return "no x-amz-date"
    if abs((now or time.time()) - t) > 900 or date != amz_date[:8]:
        return "x-amz-date out of range"
    signed = auth["SignedHeaders"].split(";")
    if signed != sorted(signed):
        return "signed headers not sorted"
    for need in ("host", "x-amz-date", "x-amz-content-sha256"):
        if need not in signed:
            return f"{need} not signed"
    for h in signed:
        if h not in headers:
            return f"signed header {h} absent"
    if "x-amz-security-token" in headers and "x-amz-security-token" not in signed:
        return "x-amz-security-token not signed"
    if token is not None and headers.get("x-amz-security-token") != token:
        return "wrong or missing session token"
    payload = headers.get("x-amz-content-sha256")
    if payload != hashlib.sha256(body).hexdigest():
        return "x-amz-content-sha256 is not the body's hash"
    want = signature(secret, method, raw_target, headers, signed, payload, amz_date, region)
    if not hmac.compare_digest(want, auth["Signature"]):
        return "signature mismatch"
    return None


HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection",
       "authorization", "x-amz-security-token", "expect"}


class SigV4Proxy:
    def __init__(self, upstream_port, keys, region="us-east-1"):
        self.upstream_port = upstream_port
        self.keys = dict(keys)
        self.region = region
        self.fail_next = []
        self.fail_always = None
        self.requests = []  # (method, path, verdict): "ok", "forced NNN" or the refusal's reason
        self.lock = threading.Lock()
        self.server = None
        self.thread = None

    @property
    def port(self):
        return self.server.server_address[1]

    def start(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive and Expect: 100-continue, like S3

            def log_message(self, *a):
                pass

            def _answer(self, status, body=b"", headers=()):
                self.send_response(status)
                sent = set()
                for k, v in headers:
                    sent.add(k.lower())
                    self.send_header(k, v)
                if "content-length" not in sent:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD" and body:
                    self.wfile.write(body)

            def _error(self, status, code, msg):
                doc = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                       f"<Message>{msg}</Message></Error>").encode()
                self._answer(status, doc, [("Content-Type", "application/xml")])

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                hdrs = {}
                for k, v in self.headers.items():
                    k = k.lower()
                    hdrs[k] = f"{hdrs[k]},{v}" if k in hdrs else v
                with proxy.lock:
                    forced = proxy.fail_next.pop(0) if proxy.fail_next else proxy.fail_always
                if forced:
                    proxy.requests.append((self.command, self.path, f"forced {forced}"))
                    return self._error(forced, "InternalError" if forced == 500 else "SlowDown",
                                       "forced by the test proxy")
                why = verify(self.command, self.path, hdrs, body, proxy.keys, proxy.region)
                proxy.requests.append((self.command, self.path, why or "ok"))
                if why:
                    return self._error(403, "SignatureDoesNotMatch", why)
                up = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                try:
                    fwd = {k: v for k, v in hdrs.items() if k not in HOP}
                    fwd["content-length"] = str(len(body))
                    up.request(self.command, self.path, body=body, headers=fwd)
                    r = up.getresponse()
                    data = r.read()
                    out = [(k, v) for k, v in r.getheaders() if k.lower() not in HOP]
                    if self.command == "HEAD":
                        self._answer(r.status, b"", out)
                    else:
                        out = [(k, v) for k, v in out if k.lower() != "content-length"]
                        self._answer(r.status, data, out)
                finally:
                    up.close()

            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


if __name__ == "__main__":
    up, key_id, secret = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    tok = sys.argv[4] if len(sys.argv) > 4 else None
    p = SigV4Proxy(up, {key_id: (secret, tok)}).start()
    print(p.port, flush=True)
    try:
        p.thread.join()
    except KeyboardInterrupt:
        p.stop()
