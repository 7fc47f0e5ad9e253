#!/usr/bin/env python3
"""Consume ankusa's `sqs` sink: long-poll a queue, hand each MessageBody (a SinkMessageV1)
to ankusa_consumer.Consumer, print one JSON line per message, delete it once handled.

    sqs_consumer.py --queue-url URL [--region R] [--endpoint URL] [--max N] [--idle S]
                    [--claim-base URL] [--token T]

Credentials come from botocore's usual chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
profiles, instance roles). A message that is not a SinkMessageV1 is reported and left on
the queue (its redrive policy dead-letters it); a claim that cannot be redeemed now
(gateway 5xx or unreachable) is left for the visibility timeout to bring back; one whose
bytes do not match is reported and left too. Duplicates (the same idempotency_key) are
printed with "duplicate": true and deleted without being processed again.

It speaks SQS's JSON 1.0 protocol itself (urllib, signed by botocore's SigV4Auth), so it
works the same with an old botocore whose client still speaks the query protocol. Needs
python3-botocore (Debian) or botocore from PyPI.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ankusa_consumer import ClaimError, Consumer  # noqa: E402

import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

import botocore.session  # noqa: E402
from botocore.auth import SigV4Auth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402


class Sqs:
    """The two SQS actions a consumer needs, over the JSON 1.0 protocol."""

    def __init__(self, endpoint, region):
        self.url = endpoint.rstrip("/") + "/"
        self.region = region
        self.session = botocore.session.get_session()

    def call(self, action, params):
        creds = self.session.get_credentials()
        if creds is None:
            raise SystemExit("no AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or a role)")
        body = json.dumps(params).encode()
        req = AWSRequest(method="POST", url=self.url, data=body,
                         headers={"Content-Type": "application/x-amz-json-1.0",
                                  "X-Amz-Target": f"AmazonSQS.{action}"})
        SigV4Auth(creds.get_frozen_credentials(), "sqs", self.region).add_auth(req)
        r = urllib.request.Request(self.url, data=body, method="POST", headers=dict(req.headers.items()))
        try:
            with urllib.request.urlopen(r, timeout=30) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise SystemExit(f"sqs {action}: HTTP {e.code}: {e.read()[:300]!r}") from None


def region_of(url):
    host = url.split("://", 1)[-1].split("/", 1)[0]
    parts = host.split(".")
    if len(parts) >= 4 and parts[0] == "sqs":
        return parts[1]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queue-url", required=True)
    ap.add_argument("--region")
    ap.add_argument("--endpoint", help="default: the queue URL's origin")
    ap.add_argument("--max", type=int, default=0, help="stop after this many messages (0: never)")
    ap.add_argument("--idle", type=float, default=0, help="stop after this many seconds without one (0: never)")
    ap.add_argument("--claim-base", help="the claim gateway, for bodies sent by claim")
    ap.add_argument("--token", help="bearer token with claims:read")
    a = ap.parse_args()

    endpoint = a.endpoint or "/".join(a.queue_url.split("/", 3)[:3])
    region = a.region or region_of(a.queue_url) or "us-east-1"
    sqs = Sqs(endpoint, region)
    consumer = Consumer(claim_base=a.claim_base, token=a.token)
    done = 0
    last = time.monotonic()
    while (not a.max or done < a.max) and (not a.idle or time.monotonic() - last < a.idle):
        r = sqs.call("ReceiveMessage", {"QueueUrl": a.queue_url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1,
                                        "MessageAttributeNames": ["All"]})
        for m in r.get("Messages", []):
            last = time.monotonic()
            try:
                d = consumer.handle(m["Body"].encode("utf-8"))
            except ValueError as e:
                print(json.dumps({"error": f"not a SinkMessageV1: {e}", "message_id": m["MessageId"]}), flush=True)
                continue
            except ClaimError as e:
                print(json.dumps({"error": str(e), "retryable": e.retryable, "message_id": m["MessageId"]}),
                      flush=True)
                continue
            print(d.line(), flush=True)
            sqs.call("DeleteMessage", {"QueueUrl": a.queue_url, "ReceiptHandle": m["ReceiptHandle"]})
            done += 1
            if a.max and done >= a.max:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
