#!/usr/bin/env python3
"""Reads ankusa's messages from a NATS JetStream stream and handles each with
ankusa_consumer.Consumer (body or claim, size and SHA-256 check, dedupe by
idempotency_key), printing one JSON line per message:

    {"id", "idempotency_key", "size", "sha256_ok": true, "duplicate": bool, ...}

The nats sink publishes to a subject that a stream (created by the operator, never by the
sink) covers. This example reads that stream in sequence order with the JetStream API's
direct message fetch ($JS.API.STREAM.MSG.GET.<stream> {"seq": n}): no consumer state on the
server, so it can be re-run from any sequence. A production worker would rather use a
durable pull consumer and ack each message after processing it; the handling per message is
the same.

Python 3 standard library only (a small NATS protocol client below).

    nats_consumer.py --server nats://127.0.0.1:4222 --stream ANKUSA [--from-seq 1]
                     [--follow] [--claim-base http://127.0.0.1:4001 --token TOKEN]
"""
import argparse
import base64
import json
import os
import socket
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ankusa_consumer import ClaimError, Consumer  # noqa: E402


class NatsClient:
    """Just enough NATS: CONNECT, SUB to a private inbox, request/reply, PING/PONG."""

    def __init__(self, url, timeout=10.0, user=None, password=None, token=None):
        u = urlparse(url if "://" in url else "nats://" + url)
        self.sock = socket.create_connection((u.hostname or "127.0.0.1", u.port or 4222), timeout=timeout)
        self.buf = b""
        self.inbox = "_INBOX." + os.urandom(8).hex()
        self.n = 0
        info = self._line()
        if not info.startswith(b"INFO "):
            raise ConnectionError(f"not a NATS server: {info[:40]!r}")
        conn = {"verbose": False, "pedantic": False, "headers": True, "no_responders": True,
                "protocol": 1, "name": "ankusa-nats-consumer", "lang": "python", "version": "1"}
        if user:
            conn.update(user=user, **{"pass": password or ""})
        if token:
            conn["auth_token"] = token
        self.sock.sendall(b"CONNECT " + json.dumps(conn).encode() + b"\r\n" +
                          f"SUB {self.inbox}.* 1\r\nPING\r\n".encode())
        while self._next() != "PONG":
            pass

    def _fill(self):
        d = self.sock.recv(1 << 20)
        if not d:
            raise ConnectionError("the server closed the connection")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        ln, self.buf = self.buf.split(b"\r\n", 1)
        return ln

    def _exact(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def _next(self):
        while True:
            ln = self._line()
            if ln == b"PING":
                self.sock.sendall(b"PONG\r\n")
            elif ln == b"PONG":
                return "PONG"
            elif ln.startswith(b"-ERR"):
                raise ConnectionError(ln.decode(errors="replace"))
            elif ln.startswith(b"MSG "):
                p = ln.decode().split(" ")
                return (p[1], None, self._exact(int(p[-1])))
            elif ln.startswith(b"HMSG "):
                p = ln.decode().split(" ")
                hlen, total = int(p[-2]), int(p[-1])
                raw = self._exact(total)
                status = raw[:hlen].split(b"\r\n", 1)[0].split(b" ")
                return (p[1], int(status[1]) if len(status) > 1 and status[1].isdigit() else None, raw[hlen:])

    def request(self, subject, payload):
        self.n += 1
        reply = f"{self.inbox}.{self.n}"
        self.sock.sendall(f"PUB {subject} {reply} {len(payload)}\r\n".encode() + payload + b"\r\n")
        while True:
            m = self._next()
            if m != "PONG" and m[0] == reply:
                return m

    def js(self, api, body):
        _, status, data = self.request("$JS.API." + api, json.dumps(body).encode())
        if status == 503:
            raise ConnectionError("no responders: is JetStream enabled?")
        return json.loads(data)

    def close(self):
        self.sock.close()


def run(args, out=sys.stdout):
    consumer = Consumer(claim_base=args.claim_base, token=args.token)
    client = NatsClient(args.server, user=args.user, password=os.environ.get("NATS_PASSWORD"),
                        token=os.environ.get("NATS_TOKEN"))
    seq = args.from_seq
    idle_since = time.monotonic()
    try:
        while True:
            r = client.js(f"STREAM.MSG.GET.{args.stream}", {"seq": seq})
            err = r.get("error")
            if err:
                if err.get("err_code") == 10037:  # no message at seq: past the end (or deleted)
                    info = client.js(f"STREAM.INFO.{args.stream}", {})
                    if "error" in info:
                        raise SystemExit(f"stream {args.stream}: {info['error'].get('description')}")
                    if seq <= info["state"]["last_seq"]:
                        seq += 1  # a deleted message: move on
                        continue
                    if not args.follow or time.monotonic() - idle_since > args.idle_exit_s > 0:
                        return 0
                    time.sleep(0.2)
                    continue
                raise SystemExit(f"stream {args.stream}: {err.get('description')}")
            idle_since = time.monotonic()
            raw = base64.b64decode(r["message"].get("data", ""))
            try:
                d = consumer.handle(raw)
            except ClaimError as e:
                print(json.dumps({"seq": seq, "error": "claim", "detail": str(e), "retryable": e.retryable}),
                      file=out, flush=True)
            except ValueError as e:
                print(json.dumps({"seq": seq, "error": "malformed", "detail": str(e)}), file=out, flush=True)
            else:
                print(d.line(), file=out, flush=True)
            seq += 1
    finally:
        client.close()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--server", default="nats://127.0.0.1:4222")
    p.add_argument("--stream", required=True)
    p.add_argument("--from-seq", type=int, default=1)
    p.add_argument("--follow", action="store_true", help="wait for new messages instead of stopping at the end")
    p.add_argument("--idle-exit-s", type=float, default=0, help="with --follow: stop after this long without one")
    p.add_argument("--user", help="user name (password from $NATS_PASSWORD); or $NATS_TOKEN")
    p.add_argument("--claim-base", help="claim gateway base URL, for claim refs")
    p.add_argument("--token", help="bearer token for the claim gateway")
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
