#!/usr/bin/env python3
"""Consume ankusa's `google_pubsub` sink: pull a subscription, hand each message's data
(base64-decoded: a SinkMessageV1) to ankusa_consumer.Consumer, print one JSON line per
message, acknowledge it once handled.

    pubsub_consumer.py --project P --subscription S [--endpoint URL] [--token T | --metadata]
                       [--max N] [--idle S] [--claim-base URL] [--claim-token T]

Auth: --token (or GOOGLE_OAUTH_ACCESS_TOKEN) sends that bearer token; --metadata asks the
GCE metadata server (GCE_METADATA_HOST when set) for one; neither sends none (an
emulator). A message that is not a SinkMessageV1, or whose claim cannot be redeemed or does
not match, is reported and left unacknowledged (the subscription's dead-letter policy
takes it after its attempts). Duplicates (the same idempotency_key) are printed with
"duplicate": true and acknowledged without being processed again.

Python 3 standard library only (REST over urllib).
"""
import argparse
import base64
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ankusa_consumer import ClaimError, Consumer  # noqa: E402


def metadata_token():
    host = os.environ.get("GCE_METADATA_HOST", "metadata.google.internal")
    req = urllib.request.Request(f"http://{host}/computeMetadata/v1/instance/service-accounts/default/token",
                                 headers={"Metadata-Flavor": "Google"})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read())["access_token"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--project", required=True)
    ap.add_argument("--subscription", required=True, help="the short id")
    ap.add_argument("--endpoint", default="https://pubsub.googleapis.com")
    ap.add_argument("--token", default=os.environ.get("GOOGLE_OAUTH_ACCESS_TOKEN"))
    ap.add_argument("--metadata", action="store_true", help="get a token from the GCE metadata server")
    ap.add_argument("--max", type=int, default=0, help="stop after this many messages (0: never)")
    ap.add_argument("--idle", type=float, default=0, help="stop after this many seconds without one (0: never)")
    ap.add_argument("--claim-base", help="the claim gateway, for bodies sent by claim")
    ap.add_argument("--claim-token", help="bearer token with claims:read")
    a = ap.parse_args()

    base = f"{a.endpoint.rstrip('/')}/v1/projects/{a.project}/subscriptions/{a.subscription}"

    def call(verb, payload):
        token = metadata_token() if a.metadata else a.token
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(f"{base}:{verb}", data=json.dumps(payload).encode(), headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise SystemExit(f"pubsub {verb}: HTTP {e.code}: {e.read()[:300]!r}") from None

    consumer = Consumer(claim_base=a.claim_base, token=a.claim_token)
    done = 0
    last = time.monotonic()
    while (not a.max or done < a.max) and (not a.idle or time.monotonic() - last < a.idle):
        got = call("pull", {"maxMessages": 10}).get("receivedMessages", [])
        if not got:
            time.sleep(0.2)
            continue
        acks = []
        for rm in got:
            last = time.monotonic()
            m = rm["message"]
            try:
                d = consumer.handle(base64.b64decode(m.get("data", "")))
            except ValueError as e:
                print(json.dumps({"error": f"not a SinkMessageV1: {e}", "message_id": m["messageId"]}), flush=True)
                continue
            except ClaimError as e:
                print(json.dumps({"error": str(e), "retryable": e.retryable, "message_id": m["messageId"]}),
                      flush=True)
                continue
            print(d.line(), flush=True)
            acks.append(rm["ackId"])
            done += 1
        if acks:
            call("acknowledge", {"ackIds": acks})
    return 0


if __name__ == "__main__":
    sys.exit(main())
