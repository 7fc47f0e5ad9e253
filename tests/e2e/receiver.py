"""A webhook receiver for delivery tests: a threaded HTTP server on a free loopback port
that records every request (arrival time, method, path, headers, raw body) and answers
what the test's `behavior` callable decides. It runs in the test process, so it outlives
the ankusa processes a test kills."""
import base64
import hashlib
import hmac
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Delivery:
    def __init__(self, method, path, headers, body):
        self.at = time.time()
        self.method = method
        self.path = path
        self.headers = headers  # lowercased name -> value (last one wins)
        self.raw_headers = None  # list of (name, value) in received order
        self.body = body
        self.status = None  # what the receiver answered (set once behavior has decided)

    @property
    def id(self):
        return self.headers.get("x-ankusa-id")


class Receiver:
    def __init__(self, behavior=None):
        self.lock = threading.Lock()
        self.deliveries = []
        self.seen = {}  # hook id -> requests received for it (so far)
        # behavior(delivery, n_seen_for_this_id) -> (status, headers dict, delay seconds)
        self.behavior = behavior or (lambda d, n: (204, {}, 0))
        rx = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _handle(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                d = Delivery(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                d.raw_headers = [(k.lower(), v) for k, v in self.headers.items()]
                with rx.lock:
                    seen = rx.seen.get(d.id, 0)  # a count kept per id: a drill sends thousands
                    rx.seen[d.id] = seen + 1
                    rx.deliveries.append(d)
                status, hdrs, delay = rx.behavior(d, seen)
                d.status = status
                if delay:
                    time.sleep(delay)
                self.send_response(status)
                for k, v in hdrs.items():
                    self.send_header(k, v)
                self.send_header("content-length", "0")
                self.end_headers()

            do_POST = do_PUT = do_PATCH = _handle

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a killed ankusa resets its connections: expected, not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def snapshot(self):
        with self.lock:
            return list(self.deliveries)

    def ids(self):
        return {d.id for d in self.snapshot()}

    def for_id(self, hook_id):
        return [d for d in self.snapshot() if d.id == hook_id]

    def wait_for(self, pred, timeout=20.0, what="deliveries"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred(self.snapshot()):
                return self.snapshot()
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; got {len(self.snapshot())} deliveries")


def sw_signature(secret, msg_id, timestamp, body):
    """Standard Webhooks v1 signature, computed independently of ankusa."""
    key = base64.b64decode(secret[len("whsec_"):]) if secret.startswith("whsec_") else secret.encode()
    mac = hmac.new(key, f"{msg_id}.{timestamp}.".encode() + body, hashlib.sha256).digest()
    return "v1," + base64.b64encode(mac).decode()
