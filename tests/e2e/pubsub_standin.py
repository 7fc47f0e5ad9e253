"""A loopback stand-in for Google Cloud Pub/Sub's REST API (tests/e2e/test_sink_pubsub.py).
Standard library only; runs on a thread of the test process, on a free port of 127.0.0.1.

  POST /v1/projects/{project}/topics/{topic}:publish
       {"messages": [{"data": base64, "attributes": {str: str}, "orderingKey": str}]}
       -> {"messageIds": [...]}; an unknown topic -> 404 NOT_FOUND
  POST /v1/projects/{project}/subscriptions/{sub}:pull          {"maxMessages": n}
       -> {"receivedMessages": [{"ackId", "message": {data, attributes, messageId, publishTime,
          orderingKey}}]}
  POST /v1/projects/{project}/subscriptions/{sub}:acknowledge   {"ackIds": [...]}
Every subscription (name -> topic, given at construction) gets its own copy of what its
topic receives; a pulled message comes back after `ack_deadline` seconds unless acked.

Auth, on every request: "token" wants `Authorization: Bearer <token>` (else 401
UNAUTHENTICATED, counted in `auth_failures`), "none" wants no Authorization header (one is a
violation), "metadata" wants a token gcs_standin.MetadataStandin handed out. A request of
a shape Google would refuse (unknown keys, data that is not standard base64, an attribute
key starting with "goog" or over 256 bytes, a value over 1024 bytes, a wrong content type)
is a *violation*: answered 400 INVALID_ARGUMENT and recorded, so a test can assert there
were none.

Faults for publish (after the auth check): `faults` is a list consumed one per request,
`always` applies to every request; each a dict with any of
  status + code  -> Google's error document {"error": {"code", "message", "status": code}}
  status + raw   -> that status with a body that is not Google's (a proxy's page)
  ids: n         -> a 200 whose messageIds holds n ids (nothing kept)
  delay: seconds -> wait before answering
"""
import base64
import binascii
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PUBLISH_RE = re.compile(r"^/v1/projects/([^/]+)/topics/([^/:]+):publish$")
SUB_RE = re.compile(r"^/v1/projects/([^/]+)/subscriptions/([^/:]+):(pull|acknowledge)$")


def google_error(code, status, message):
    return {"error": {"code": code, "message": message, "status": status}}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Reject(Exception):
    def __init__(self, code, status, message, violation=True):
        super().__init__(message)
        self.code, self.status, self.message, self.violation = code, status, message, violation


class PubsubStandin:
    def __init__(self, project, topics, subscriptions=None, auth="none", token=None, metadata=None,
                 ack_deadline=10.0):
        self.project = project
        self.topics = set(topics)
        self.subs = dict(subscriptions or {})   # name -> topic
        self.auth = auth
        self.token = token
        self.metadata = metadata
        self.ack_deadline = ack_deadline
        self.lock = threading.Lock()
        self.requests = []      # dicts: kind, path, headers, json, status
        self.violations = []
        self.auth_failures = 0
        self.faults = []
        self.always = None
        self.published = {t: [] for t in self.topics}  # topic -> [message dict]
        self._queues = {s: [] for s in self.subs}        # sub -> [message dict]
        self._leased = {}                                # ackId -> (sub, message, deadline)
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def snapshot(self, topic):
        with self.lock:
            return list(self.published[topic])

    def publishes(self):
        with self.lock:
            return [r for r in self.requests if r["kind"] == "publish"]

    # ---- checks --------------------------------------------------------------------------

    def _check_auth(self, headers):
        got = headers.get("authorization")
        if self.auth == "none":
            if got is not None:
                raise _Reject(400, "INVALID_ARGUMENT", "Authorization sent with auth none")
            return
        ok = False
        if got and got.startswith("Bearer "):
            tok = got[7:]
            ok = tok == self.token if self.auth == "token" else self.metadata.valid(tok)
        if not ok:
            self.auth_failures += 1
            raise _Reject(401, "UNAUTHENTICATED", "Request had invalid authentication credentials.",
                          violation=False)

    def _publish(self, topic, j):
        if set(j) != {"messages"} or not isinstance(j["messages"], list) or len(j["messages"]) != 1:
            raise _Reject(400, "INVALID_ARGUMENT", "want exactly one message")
        m = j["messages"][0]
        if not isinstance(m, dict) or set(m) - {"data", "attributes", "orderingKey"}:
            raise _Reject(400, "INVALID_ARGUMENT", f"message keys {sorted(m) if isinstance(m, dict) else m!r}")
        try:
            data = base64.b64decode(m.get("data", ""), validate=True)
        except (binascii.Error, TypeError):
            raise _Reject(400, "INVALID_ARGUMENT", "data is not standard base64")
        attrs = m.get("attributes", {})
        if not isinstance(attrs, dict):
            raise _Reject(400, "INVALID_ARGUMENT", "attributes")
        for k, v in attrs.items():
            if (not isinstance(v, str) or k.lower().startswith("goog") or len(k.encode()) > 256
                    or len(v.encode()) > 1024):
                raise _Reject(400, "INVALID_ARGUMENT", f"attribute {k!r}")
        if not data and not attrs:
            raise _Reject(400, "INVALID_ARGUMENT", "a message needs data or attributes")
        key = m.get("orderingKey")
        if key is not None and (not isinstance(key, str) or not key):
            raise _Reject(400, "INVALID_ARGUMENT", "orderingKey")
        msg = {"messageId": str(uuid.uuid4().int)[:16], "data": data, "attributes": attrs, "orderingKey": key,
               "publishTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        self.published[topic].append(msg)
        for s, t in self.subs.items():
            if t == topic:
                self._queues[s].append(msg)
        return {"messageIds": [msg["messageId"]]}

    def _pull(self, sub, j):
        n = int(j.get("maxMessages", 1))
        now = time.time()
        for ack, (s, m, dl) in list(self._leased.items()):
            if dl <= now:
                del self._leased[ack]
                self._queues[s].insert(0, m)
        out = []
        while self._queues[sub] and len(out) < n:
            m = self._queues[sub].pop(0)
            ack = uuid.uuid4().hex
            self._leased[ack] = (sub, m, now + self.ack_deadline)
            wire = {"data": base64.b64encode(m["data"]).decode(), "attributes": m["attributes"],
                    "messageId": m["messageId"], "publishTime": m["publishTime"]}
            if m["orderingKey"]:
                wire["orderingKey"] = m["orderingKey"]
            out.append({"ackId": ack, "message": wire})
        return {"receivedMessages": out} if out else {}

    def _ack(self, j):
        for a in j.get("ackIds", []):
            self._leased.pop(a, None)
        return {}

    # ---- the server ----------------------------------------------------------------------

    def _handler(self):
        ps = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self, status, obj=None, raw=None):
                data = raw if raw is not None else json.dumps(obj if obj is not None else {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json; charset=UTF-8" if raw is None else "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                headers = {k.lower(): v for k, v in self.headers.items()}
                pm, sm = PUBLISH_RE.match(self.path), SUB_RE.match(self.path)
                kind = "publish" if pm else (sm.group(3) if sm else "unknown")
                rec = {"kind": kind, "path": self.path, "headers": headers, "json": None, "status": None}
                with ps.lock:
                    ps.requests.append(rec)
                try:
                    if not (pm or sm):
                        raise _Reject(404, "NOT_FOUND", f"no route {self.path}")
                    project = (pm or sm).group(1)
                    if not headers.get("content-type", "").startswith("application/json"):
                        raise _Reject(400, "INVALID_ARGUMENT", "content-type")
                    try:
                        j = json.loads(body)
                    except ValueError:
                        raise _Reject(400, "INVALID_ARGUMENT", "body is not JSON")
                    rec["json"] = j
                    with ps.lock:
                        ps._check_auth(headers)
                    if project != ps.project:
                        raise _Reject(404, "NOT_FOUND", "no such project", violation=False)
                    fault = None
                    if pm:
                        with ps.lock:
                            fault = ps.faults.pop(0) if ps.faults else ps.always
                    if fault and fault.get("delay"):
                        time.sleep(fault["delay"])
                    if fault and "code" in fault:
                        raise _Reject(fault.get("status", 400), fault["code"], "injected", violation=False)
                    if fault and "raw" in fault:
                        rec["status"] = fault.get("status", 502)
                        return self._answer(rec["status"], raw=fault["raw"].encode())
                    if fault and "ids" in fault:
                        rec["status"] = 200
                        return self._answer(200, {"messageIds": [str(i + 1) for i in range(fault["ids"])]})
                    with ps.lock:
                        if pm:
                            if pm.group(2) not in ps.topics:
                                raise _Reject(404, "NOT_FOUND", "Resource not found", violation=False)
                            out = ps._publish(pm.group(2), j)
                        else:
                            if sm.group(2) not in ps.subs:
                                raise _Reject(404, "NOT_FOUND", "Resource not found", violation=False)
                            out = ps._pull(sm.group(2), j) if kind == "pull" else ps._ack(j)
                    rec["status"] = 200
                    self._answer(200, out)
                except _Reject as e:
                    if e.violation:
                        with ps.lock:
                            ps.violations.append(f"{kind}: {e.message}")
                    rec["status"] = e.code
                    self._answer(e.code, google_error(e.code, e.status, e.message))

        return H
