#!/usr/bin/env python3
"""Consume ankusa's rabbitmq sink: read SinkMessageV1 messages from a queue bound to the
sink's exchange, hand each to ankusa_consumer.Consumer (body or claim, size and SHA-256
check, dedupe by idempotency_key) and print one JSON line per message:
{"id", "idempotency_key", "size", "sha256_ok", "duplicate", "by_claim"}.

    python3 rabbitmq_consumer.py --url amqp://guest:guest@localhost:5672/%2F \
        --queue hooks [--exchange ankusa --binding-key 'ankusa.#'] \
        [--claim-base http://127.0.0.1:4001 --token ...] [--idle-exit 5] [--max N]

The sink never declares queues: declare yours (durable) and bind it to the exchange,
here with --exchange (and --binding-key, default '#'), or in your broker's definitions.
A message is acked only after it was handled; a claim that could not be fetched right
now (gateway 5xx, unreachable) is requeued; a malformed message or a claim whose bytes do
not match is rejected without requeue (dead-lettered if the queue has a DLX). Duplicates
(the same idempotency_key seen before by this process) are acked and reported with
"duplicate": true; a real worker would skip them. Needs pika (Debian: python3-pika)."""
import argparse
import json
import sys
from pathlib import Path

import pika

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ankusa_consumer import ClaimError, Consumer  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", default="amqp://guest:guest@localhost:5672/%2F")
    ap.add_argument("--queue", required=True)
    ap.add_argument("--exchange", help="declare the queue (durable) and bind it to this exchange")
    ap.add_argument("--exchange-type", default="topic")
    ap.add_argument("--binding-key", default="#")
    ap.add_argument("--claim-base", help="claim gateway base URL, for messages that carry a claim")
    ap.add_argument("--token", help="bearer token for the claim gateway")
    ap.add_argument("--idle-exit", type=float, default=None, help="exit after this many seconds without a message")
    ap.add_argument("--max", type=int, default=None, help="exit after this many messages")
    ap.add_argument("--prefetch", type=int, default=100)
    a = ap.parse_args(argv)

    consumer = Consumer(claim_base=a.claim_base, token=a.token)
    conn = pika.BlockingConnection(pika.URLParameters(a.url))
    ch = conn.channel()
    if a.exchange:
        ch.exchange_declare(exchange=a.exchange, exchange_type=a.exchange_type, durable=True)
        ch.queue_declare(queue=a.queue, durable=True)
        ch.queue_bind(queue=a.queue, exchange=a.exchange, routing_key=a.binding_key)
    ch.basic_qos(prefetch_count=a.prefetch)
    n = 0
    try:
        for method, props, body in ch.consume(a.queue, inactivity_timeout=a.idle_exit):
            if method is None:  # idle for --idle-exit seconds
                break
            try:
                d = consumer.handle(body)
            except ClaimError as e:
                print(json.dumps({"error": str(e), "retryable": e.retryable}), file=sys.stderr, flush=True)
                ch.basic_nack(method.delivery_tag, requeue=e.retryable)
                continue
            except ValueError as e:
                print(json.dumps({"error": str(e), "message_id": props.message_id}), file=sys.stderr, flush=True)
                ch.basic_reject(method.delivery_tag, requeue=False)
                continue
            print(d.line(), flush=True)
            ch.basic_ack(method.delivery_tag)
            n += 1
            if a.max is not None and n >= a.max:
                break
    finally:
        try:
            ch.cancel()
            conn.close()
        except Exception:  # noqa: BLE001 - the broker may already be gone
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
