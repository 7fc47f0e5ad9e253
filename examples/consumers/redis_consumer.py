#!/usr/bin/python3
"""Consume ankusa's `redis` sink: SUBSCRIBE to its channel, hand every message to
ankusa_consumer.Consumer.handle, print one JSON line per message on stdout:

    {"id": ..., "idempotency_key": ..., "size": ..., "sha256_ok": true, "duplicate": false, ...}

Redis pub/sub keeps nothing for a subscriber that is not there: ankusa counts a PUBLISH
that reached no subscriber as a failed attempt ("no_subscribers") and retries it, then
dead-letters it (replayable). Start this consumer before the hooks you want to see.

    python3 redis_consumer.py --url redis://127.0.0.1:6379/0 --channel hooks \\
        [--claim-base http://127.0.0.1:8081 --token TOKEN] [--count N] [--timeout SECONDS]

The url may carry a password (redis://:password@host:port/db); the ANKUSA_REDIS_URL
environment variable is read when --url is absent, so it need not appear in a process
list. Needs python3-redis (Debian) and ankusa_consumer.py beside this file. "subscribed"
goes to stderr once the subscription is active; a message that cannot be handled is
reported on stderr (with its id when it has one) and the consumer goes on.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ankusa_consumer import ClaimError, Consumer  # noqa: E402

import redis  # noqa: E402  (python3-redis)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default=os.environ.get("ANKUSA_REDIS_URL"), help="redis://[[user]:password@]host[:port][/db]")
    ap.add_argument("--channel", required=True)
    ap.add_argument("--claim-base", default=None, help="the claim gateway, e.g. http://127.0.0.1:8081")
    ap.add_argument("--token", default=os.environ.get("ANKUSA_CLAIM_TOKEN"), help="bearer token with claims:read")
    ap.add_argument("--count", type=int, default=0, help="exit after this many messages (0: never)")
    ap.add_argument("--timeout", type=float, default=0, help="exit after this many seconds (0: never)")
    a = ap.parse_args(argv)
    if not a.url:
        ap.error("--url (or ANKUSA_REDIS_URL) is required")

    consumer = Consumer(claim_base=a.claim_base, token=a.token)
    client = redis.Redis.from_url(a.url)
    ps = client.pubsub()
    ps.subscribe(a.channel)
    # the confirmation: once it is read, PUBLISH reaches us
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = ps.get_message(timeout=0.5)
        if m and m["type"] == "subscribe":
            break
    else:
        print("no subscribe confirmation", file=sys.stderr)
        return 2
    print("subscribed", file=sys.stderr, flush=True)

    end = time.monotonic() + a.timeout if a.timeout else None
    seen = 0
    failed = 0
    while (not a.count or seen < a.count) and (end is None or time.monotonic() < end):
        m = ps.get_message(timeout=0.2)
        if not m or m["type"] != "message":
            continue
        raw = m["data"]
        seen += 1
        try:
            d = consumer.handle(raw)
        except (ValueError, ClaimError) as e:
            failed += 1
            print(f"message not handled: {e}", file=sys.stderr, flush=True)
            continue
        print(d.line(), flush=True)
    ps.close()
    client.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
