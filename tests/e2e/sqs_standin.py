"""A loopback stand-in for Amazon SQS's JSON 1.0 protocol (tests/e2e/test_sink_sqs.py).
Standard library plus python3-botocore (its SigV4 signer only); runs on a thread of the
test process, on a free port of 127.0.0.1.

Actions (POST /, Content-Type application/x-amz-json-1.0, X-Amz-Target AmazonSQS.<Action>):
  SendMessage     QueueUrl, MessageBody, MessageAttributes (String only, non-empty values),
                  MessageGroupId, MessageDeduplicationId: a FIFO queue (name ends .fifo) wants
                  both (no content-based deduplication) and keeps one message per dedupe id
                  (the answer repeats the first MessageId, as SQS's 5-minute window does); a
                  standard queue refuses a dedupe id (InvalidParameterValue). Answers
                  {MessageId, MD5OfMessageBody} (hex MD5 of the body's UTF-8 bytes).
  ReceiveMessage  QueueUrl, MaxNumberOfMessages, WaitTimeSeconds, VisibilityTimeout,
                  MessageAttributeNames, MessageSystemAttributeNames
  DeleteMessage   QueueUrl, ReceiptHandle
Every request must carry a SigV4 Authorization (service sqs, the queue's region) by one of
`credentials` (key id -> secret): the signature is recomputed here with botocore's
SigV4Auth over the headers the request says it signed, independently of the sender's
signer. A bad signature is answered 403 SignatureDoesNotMatch (and counted in
`auth_failures`); a request of the wrong shape is a *violation*, answered 400 and
recorded, so a test can assert there were none.

Faults for SendMessage (after the signature check): `faults` is a list consumed one per
request, `always` applies to every request; each is a dict with any of
  status + code  -> an SQS error document {"__type": "com.amazonaws.sqs#<code>", ...}
  status + raw   -> that status with a body that is not an SQS error (a proxy's page)
  md5: "wrong"   -> a 200 whose MD5OfMessageBody is not the body's
  delay: seconds -> wait before answering (then answer normally unless more is set)
  store: false   -> with a code/raw fault, nothing is kept (the default)
"""
import hashlib
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

AUTH_RE = re.compile(r"^AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
                     r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})$")
SEND_KEYS = {"QueueUrl", "MessageBody", "MessageAttributes", "MessageGroupId", "MessageDeduplicationId",
             "DelaySeconds", "MessageSystemAttributes"}


def sqs_error(code, message):
    return {"__type": f"com.amazonaws.sqs#{code}", "message": message}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Reject(Exception):
    def __init__(self, status, code, message, violation=True):
        super().__init__(message)
        self.status, self.code, self.message, self.violation = status, code, message, violation


class SqsStandin:
    def __init__(self, queues, credentials, region="us-east-1"):
        """queues: queue names ("orders", "orders.fifo"); credentials: {key_id: secret}."""
        self.region = region
        self.credentials = dict(credentials)
        self.lock = threading.Lock()
        self.requests = []     # one dict per request: action, headers, json, status
        self.violations = []
        self.auth_failures = 0
        self.faults = []
        self.always = None
        self.sent = {}         # queue url -> [message dict] in arrival order (what SendMessage kept)
        self._visible = {}     # queue url -> [message dict]
        self._inflight = {}    # receipt handle -> (queue url, message, deadline)
        self._dedupe = {}      # (queue url, dedupe id) -> (message id, time)
        self._httpd = _Server(("127.0.0.1", 0), self._handler())
        self.port = self._httpd.server_address[1]
        self.origin = f"http://127.0.0.1:{self.port}"
        self.account = "000000000000"
        self.queue_urls = {}
        for q in queues:
            url = f"{self.origin}/{self.account}/{q}"
            self.queue_urls[q] = url
            self.sent[url] = []
            self._visible[url] = []
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, queue):
        return self.queue_urls[queue]

    def close(self):
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)

    def snapshot(self, queue):
        with self.lock:
            return list(self.sent[self.queue_urls[queue]])

    def actions(self, name="SendMessage"):
        with self.lock:
            return [r for r in self.requests if r["action"] == name]

    # ---- checks --------------------------------------------------------------------------

    def _check_signature(self, method, path, headers, body):
        auth = headers.get("authorization", "")
        m = AUTH_RE.match(auth)
        if not m:
            raise _Reject(403, "IncompleteSignature", "no SigV4 Authorization", violation=True)
        key_id, day, region, service, signed, sig = m.groups()
        if service != "sqs" or region != self.region:
            raise _Reject(403, "SignatureDoesNotMatch", "wrong scope", violation=True)
        secret = self.credentials.get(key_id)
        if secret is None:
            raise _Reject(403, "InvalidClientTokenId", "unknown access key", violation=False)
        amz_date = headers.get("x-amz-date", "")
        if not amz_date.startswith(day):
            raise _Reject(403, "SignatureDoesNotMatch", "x-amz-date outside the scope", violation=True)
        names = signed.split(";")
        for need in ("host", "x-amz-date", "content-type", "x-amz-target"):
            if need not in names:
                raise _Reject(403, "SignatureDoesNotMatch", f"{need} not signed", violation=True)
        hdrs = {n: headers[n] for n in names if n in headers}
        if len(hdrs) != len(names):
            raise _Reject(403, "SignatureDoesNotMatch", "a signed header is missing", violation=True)
        token = headers.get("x-amz-security-token")
        req = AWSRequest(method=method, url=f"http://{headers['host']}{path}", data=body, headers=hdrs)
        req.context["timestamp"] = amz_date
        signer = SigV4Auth(Credentials(key_id, secret, token), "sqs", region)
        canonical = signer.canonical_request(req)
        expected = signer.signature(signer.string_to_sign(req, canonical), req)
        if expected != sig:
            raise _Reject(403, "SignatureDoesNotMatch", "signature does not match", violation=False)

    def _queue(self, j):
        url = j.get("QueueUrl")
        if url not in self._visible:
            raise _Reject(400, "QueueDoesNotExist", "no such queue", violation=False)
        return url

    # ---- actions -------------------------------------------------------------------------

    def _send(self, j):
        extra = set(j) - SEND_KEYS
        if extra:
            raise _Reject(400, "InvalidParameterValue", f"unknown keys {sorted(extra)}")
        url = self._queue(j)
        body = j.get("MessageBody")
        if not isinstance(body, str) or not body:
            raise _Reject(400, "MissingParameter", "MessageBody")
        attrs = j.get("MessageAttributes", {})
        if not isinstance(attrs, dict) or len(attrs) > 10:
            raise _Reject(400, "InvalidParameterValue", "MessageAttributes")
        for name, a in attrs.items():
            if (not isinstance(a, dict) or set(a) != {"DataType", "StringValue"} or a["DataType"] != "String"
                    or not isinstance(a["StringValue"], str) or not a["StringValue"]):
                raise _Reject(400, "InvalidParameterValue", f"attribute {name}")
        fifo = url.endswith(".fifo")
        group = j.get("MessageGroupId")
        dedupe = j.get("MessageDeduplicationId")
        for v, what in ((group, "MessageGroupId"), (dedupe, "MessageDeduplicationId")):
            if v is not None and (not isinstance(v, str) or not 1 <= len(v) <= 128):
                raise _Reject(400, "InvalidParameterValue", what)
        if fifo and (group is None or dedupe is None):
            raise _Reject(400, "MissingParameter", "FIFO needs MessageGroupId and MessageDeduplicationId")
        if not fifo and dedupe is not None:
            raise _Reject(400, "InvalidParameterValue", "MessageDeduplicationId on a standard queue")
        md5 = hashlib.md5(body.encode("utf-8")).hexdigest()
        if fifo:
            prev = self._dedupe.get((url, dedupe))
            if prev and time.time() - prev[1] < 300:
                return {"MessageId": prev[0], "MD5OfMessageBody": md5}
        msg = {"MessageId": str(uuid.uuid4()), "Body": body, "MD5OfBody": md5, "MessageAttributes": attrs,
               "MessageGroupId": group, "MessageDeduplicationId": dedupe}
        self.sent[url].append(msg)
        self._visible[url].append(msg)
        if fifo:
            self._dedupe[(url, dedupe)] = (msg["MessageId"], time.time())
        return {"MessageId": msg["MessageId"], "MD5OfMessageBody": md5}

    def _receive(self, j):
        url = self._queue(j)
        n = int(j.get("MaxNumberOfMessages", 1))
        vis = float(j.get("VisibilityTimeout", 30))
        now = time.time()
        for rh, (u, m, deadline) in list(self._inflight.items()):
            if deadline <= now:
                del self._inflight[rh]
                self._visible[u].insert(0, m)
        out = []
        while self._visible[url] and len(out) < n:
            m = self._visible[url].pop(0)
            rh = uuid.uuid4().hex
            self._inflight[rh] = (url, m, now + vis)
            out.append({"MessageId": m["MessageId"], "ReceiptHandle": rh, "MD5OfBody": m["MD5OfBody"],
                        "Body": m["Body"], "MessageAttributes": m["MessageAttributes"]})
        return {"Messages": out} if out else {}

    def _delete(self, j):
        self._queue(j)
        if self._inflight.pop(j.get("ReceiptHandle"), None) is None:
            raise _Reject(400, "ReceiptHandleIsInvalid", "unknown receipt handle", violation=False)
        return {}

    # ---- the server ----------------------------------------------------------------------

    def _handler(self):
        sq = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self, status, obj=None, raw=None):
                data = raw if raw is not None else json.dumps(obj or {}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.0" if raw is None else "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                headers = {k.lower(): v for k, v in self.headers.items()}
                target = headers.get("x-amz-target", "")
                action = target.split(".", 1)[1] if target.startswith("AmazonSQS.") else target
                rec = {"action": action, "headers": headers, "body": body, "json": None, "status": None}
                with sq.lock:
                    sq.requests.append(rec)
                # a receive may wait for messages (long polling), outside the lock
                wait = 0.0
                try:
                    try:
                        j = json.loads(body)
                    except ValueError:
                        raise _Reject(400, "SerializationException", "not JSON")
                    rec["json"] = j
                    if headers.get("content-type") != "application/x-amz-json-1.0":
                        raise _Reject(400, "InvalidParameterValue", "content-type")
                    if self.path != "/":
                        raise _Reject(400, "InvalidParameterValue", "path")
                    with sq.lock:
                        sq._check_signature("POST", self.path, headers, body)
                    if action == "ReceiveMessage":
                        wait = min(float(j.get("WaitTimeSeconds", 0)), 2.0)
                    fault = None
                    if action == "SendMessage":
                        with sq.lock:
                            fault = sq.faults.pop(0) if sq.faults else sq.always
                    if fault and fault.get("delay"):
                        time.sleep(fault["delay"])
                    if fault and "code" in fault:
                        raise _Reject(fault.get("status", 400), fault["code"], "injected", violation=False)
                    if fault and "raw" in fault:
                        rec["status"] = fault.get("status", 502)
                        return self._answer(rec["status"], raw=fault["raw"].encode())
                    deadline = time.time() + wait
                    while True:
                        with sq.lock:
                            if action == "SendMessage":
                                out = sq._send(j)
                                if fault and fault.get("md5") == "wrong":
                                    out["MD5OfMessageBody"] = hashlib.md5(b"something else").hexdigest()
                            elif action == "ReceiveMessage":
                                out = sq._receive(j)
                            elif action == "DeleteMessage":
                                out = sq._delete(j)
                            else:
                                raise _Reject(400, "InvalidAction", f"unknown action {action!r}")
                        if out or action != "ReceiveMessage" or time.time() >= deadline:
                            break
                        time.sleep(0.05)
                    rec["status"] = 200
                    self._answer(200, out)
                except _Reject as e:
                    if e.violation:
                        with sq.lock:
                            sq.violations.append(f"{action}: {e.message}")
                    if e.code in ("SignatureDoesNotMatch", "InvalidClientTokenId", "IncompleteSignature"):
                        with sq.lock:
                            sq.auth_failures += 1
                    rec["status"] = e.status
                    self._answer(e.status, sqs_error(e.code, e.message))

        return H
