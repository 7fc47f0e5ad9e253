"""Loopback stand-ins for Google Cloud Storage's JSON API and the GCE metadata server
(tests/e2e/test_blob_gcs.py). Standard library only; each runs on a thread of the test
process.

GcsStandin keeps objects in memory and holds every request to the shape Google documents
(https://cloud.google.com/storage/docs/json_api/v1/objects):
  POST   /upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}
  GET    /storage/v1/b/{bucket}/o/{name}?alt=media      (Range: bytes=a-b -> 206 / 416)
  GET    /storage/v1/b/{bucket}/o/{name}                (metadata; "size" is a string)
  DELETE /storage/v1/b/{bucket}/o/{name}
  GET    /storage/v1/b/{bucket}/o?prefix=&maxResults=&pageToken=&startOffset=&fields=
An object name travels percent-encoded as one path segment ('/' as %2F) or one query
value: a name not encoded exactly as RFC 3986 asks (every byte but the unreserved ones),
an unknown parameter, a missing one or a wrong method is a *violation*: answered 400 and
recorded, so a test's teardown fails on it. Auth is checked on every request: "token"
wants `Authorization: Bearer <token>`, "none" wants no Authorization header at all (one
present is a violation), "metadata" wants a token the MetadataStandin handed out. Listings
are paged at page_size (default 1000, the JSON API's cap) with an opaque nextPageToken that
is only valid for the query that produced it. `faults` (statuses answered, in order, before
anything else) and `always` (a status answered to every request) drive retry tests.
"""
import base64
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

UNRESERVED_SAFE = ""  # quote() keeps A-Z a-z 0-9 - . _ ~ and, with safe="", nothing else


def gcs_error(code, message, reason):
    return {"error": {"code": code, "message": message,
                      "errors": [{"domain": "global", "reason": reason, "message": message}]}}


def canonical(raw):
    """The percent-encoding Google's clients produce for raw's decoded value."""
    return quote(unquote(raw), safe=UNRESERVED_SAFE)


class _Violation(Exception):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Base:
    """A ThreadingHTTPServer on 127.0.0.1, a free port, served on a thread."""

    def __init__(self):
        self.requests = []      # (method, raw path, headers dict) of every request
        self.violations = []    # protocol violations (strings)
        self.lock = threading.Lock()
        self._httpd = None
        self._thread = None

    def _handler(self):
        owner = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as curl expects

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                hdrs = {k.lower(): v for k, v in self.headers.items()}
                with owner.lock:
                    owner.requests.append((self.command, self.path, hdrs, time.monotonic()))
                try:
                    status, headers, out = owner.handle(self.command, self.path, hdrs, body)
                except _Violation as v:
                    with owner.lock:
                        owner.violations.append(f"{self.command} {self.path}: {v}")
                    status, headers, out = 400, {}, gcs_error(400, f"stand-in: {v}", "invalid")
                if isinstance(out, (dict, list)):
                    out = json.dumps(out).encode()
                    headers.setdefault("Content-Type", "application/json; charset=UTF-8")
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(out)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _any

        return H

    def start(self):
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._httpd:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._thread.join(5)
            self._httpd = None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"


def _parse_query(raw, allowed, required=()):
    """{name: decoded value} of a raw query, each value checked for canonical encoding."""
    out = {}
    if raw:
        for part in raw.split("&"):
            k, sep, v = part.partition("=")
            if not sep:
                raise _Violation(f"query part {part!r} without '='")
            if k not in allowed:
                raise _Violation(f"unknown query parameter {k!r}")
            if k in out:
                raise _Violation(f"query parameter {k!r} twice")
            if v != canonical(v):
                raise _Violation(f"{k}={v!r} is not percent-encoded as RFC 3986 asks ({canonical(v)!r})")
            out[k] = unquote(v)
    for k in required:
        if k not in out:
            raise _Violation(f"missing query parameter {k!r}")
    return out


class GcsStandin(_Base):
    def __init__(self, bucket="ak-bucket", auth="token", token="test-token", page_size=1000, metadata=None):
        super().__init__()
        self.bucket = bucket
        self.auth = auth            # "token" | "none" | "metadata"
        self.token = token
        self.metadata = metadata    # the MetadataStandin whose tokens count for auth "metadata"
        self.page_size = page_size
        self.objects = {}           # name -> bytes
        self.faults = []            # statuses answered (then dropped) before anything else
        self.always = None          # a status answered to every request
        self.bearers = []           # the bearer token of each request that carried one

    # what tests look at
    def seen(self, method=None, contains=None):
        with self.lock:
            return [r for r in self.requests
                    if (method is None or r[0] == method) and (contains is None or contains in r[1])]

    def _auth(self, hdrs):
        a = hdrs.get("authorization")
        if a is not None and a.startswith("Bearer "):
            with self.lock:
                self.bearers.append(a[len("Bearer "):])
        if self.auth == "none":
            if a is not None:
                raise _Violation("Authorization header sent with auth none")
            return True
        if self.auth == "token":
            return a == f"Bearer {self.token}"
        if self.auth == "metadata":
            return a is not None and a.startswith("Bearer ") and self.metadata.valid(a[len("Bearer "):])
        raise AssertionError(self.auth)

    def handle(self, method, raw, hdrs, body):
        if self.faults or self.always:
            with self.lock:
                st = self.faults.pop(0) if self.faults else self.always
            if st:
                return st, {}, gcs_error(st, "Backend Error", "backendError")
        if not self._auth(hdrs):
            return 401, {"WWW-Authenticate": 'Bearer realm="https://accounts.google.com/"'}, \
                gcs_error(401, "Invalid Credentials", "authError")
        path, _, query = raw.partition("?")
        up = f"/upload/storage/v1/b/{self.bucket}/o"
        base = f"/storage/v1/b/{self.bucket}/o"
        if path.startswith("/upload/") or path.startswith("/storage/"):
            if not (path == up or path == base or path.startswith(base + "/")):
                return 404, {}, gcs_error(404, "The specified bucket does not exist.", "notFound")
        if path == up:
            if method != "POST":
                raise _Violation(f"{method} on the upload path")
            q = _parse_query(query, {"uploadType", "name"}, ("uploadType", "name"))
            if q["uploadType"] != "media":
                raise _Violation(f"uploadType {q['uploadType']!r}")
            if hdrs.get("content-type") != "application/octet-stream":
                raise _Violation(f"upload Content-Type {hdrs.get('content-type')!r}")
            if "content-length" not in hdrs:
                raise _Violation("upload without Content-Length")
            with self.lock:
                self.objects[q["name"]] = body
            return 200, {}, self._meta(q["name"], body)
        if path == base:
            if method != "GET":
                raise _Violation(f"{method} on the objects collection")
            return self._list(query)
        if path.startswith(base + "/"):
            seg = path[len(base) + 1:]
            if "/" in seg:
                raise _Violation("object name not one path segment ('/' must be %2F)")
            if seg != canonical(seg):
                raise _Violation(f"object name {seg!r} is not percent-encoded as RFC 3986 asks")
            name = unquote(seg)
            with self.lock:
                data = self.objects.get(name)
            missing = (404, {}, gcs_error(404, f"No such object: {self.bucket}/{name}", "notFound"))
            if method == "DELETE":
                _parse_query(query, set())
                if data is None:
                    return missing
                with self.lock:
                    self.objects.pop(name, None)
                return 204, {}, b""
            if method != "GET":
                raise _Violation(f"{method} on an object")
            q = _parse_query(query, {"alt", "fields"})
            if data is None:
                return missing
            if q.get("alt") is None:
                return 200, {}, self._meta(name, data)
            if q["alt"] != "media":
                raise _Violation(f"alt={q['alt']!r}")
            rng = hdrs.get("range")
            if rng is None:
                return 200, {"Content-Type": "application/octet-stream"}, data
            if not rng.startswith("bytes=") or "-" not in rng:
                raise _Violation(f"Range {rng!r}")
            a, _, b = rng[len("bytes="):].partition("-")
            a, b = int(a), int(b)
            if b < a:
                raise _Violation(f"Range {rng!r} ends before it starts")
            if a >= len(data):
                return 416, {"Content-Range": f"bytes */{len(data)}"}, \
                    gcs_error(416, "The requested range cannot be satisfied.", "requestedRangeNotSatisfiable")
            piece = data[a:b + 1]
            return 206, {"Content-Type": "application/octet-stream",
                         "Content-Range": f"bytes {a}-{a + len(piece) - 1}/{len(data)}"}, piece
        raise _Violation("not a JSON API path")

    def _meta(self, name, data):
        return {"kind": "storage#object", "id": f"{self.bucket}/{name}/1", "name": name,
                "bucket": self.bucket, "generation": "1", "contentType": "application/octet-stream",
                "size": str(len(data))}

    def _list(self, query):
        q = _parse_query(query, {"prefix", "maxResults", "pageToken", "startOffset", "fields"})
        try:
            mx = int(q.get("maxResults", "1000"))
        except ValueError:
            raise _Violation(f"maxResults {q['maxResults']!r}")
        if not 1 <= mx <= 1000:
            raise _Violation(f"maxResults {mx} outside 1..1000")
        prefix, start = q.get("prefix", ""), q.get("startOffset")
        # a page token is opaque and bound to its query (as Google's are)
        bound = {"prefix": prefix, "startOffset": start}
        after = None
        if "pageToken" in q:
            try:
                tok = json.loads(base64.urlsafe_b64decode(q["pageToken"]))
            except ValueError:
                raise _Violation("unreadable pageToken")
            if tok["q"] != bound:
                raise _Violation("pageToken used with another query")
            after = tok["after"]
        with self.lock:
            names = sorted(n for n in self.objects if n.startswith(prefix)
                           and (start is None or n >= start) and (after is None or n > after))
        n = min(mx, self.page_size)
        page, rest = names[:n], names[n:]
        out = {"kind": "storage#objects"}
        if page:
            out["items"] = [{"name": x} for x in page] if q.get("fields") else \
                [self._meta(x, self.objects.get(x, b"")) for x in page]
        if rest:
            out["nextPageToken"] = base64.urlsafe_b64encode(
                json.dumps({"q": bound, "after": page[-1]}).encode()).decode()
        return 200, {}, out


class MetadataStandin(_Base):
    """The GCE metadata server's token endpoint: wants `Metadata-Flavor: Google` (403
    otherwise, as the real one answers), hands out md-token-1, md-token-2, ... each valid
    for expires_in seconds."""
    PATH = "/computeMetadata/v1/instance/service-accounts/default/token"

    def __init__(self, expires_in=3599):
        super().__init__()
        self.expires_in = expires_in
        self.issued = {}  # token -> monotonic deadline
        self.refusals = 0

    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    def valid(self, tok):
        with self.lock:
            dl = self.issued.get(tok)
        return dl is not None and time.monotonic() < dl

    def handle(self, method, raw, hdrs, body):
        if "authorization" in hdrs:
            raise _Violation("Authorization header sent to the metadata server")
        if hdrs.get("metadata-flavor") != "Google":
            with self.lock:
                self.refusals += 1
            return 403, {}, b"Missing Metadata-Flavor:Google header."
        if method != "GET" or raw != self.PATH:
            raise _Violation(f"{method} {raw}: not the token endpoint")
        with self.lock:
            tok = f"md-token-{len(self.issued) + 1}"
            self.issued[tok] = time.monotonic() + self.expires_in
        return 200, {"Metadata-Flavor": "Google"}, \
            {"access_token": tok, "expires_in": self.expires_in, "token_type": "Bearer"}
