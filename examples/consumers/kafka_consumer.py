"""Read ankusa's kafka sink: every record of a topic is one SinkMessageV1, handed to
ankusa_consumer.Consumer (body or claim, size/sha256 check, dedupe by idempotency_key),
and one JSON line is printed per record:

  {"id", "idempotency_key", "size", "sha256_ok": true, "duplicate": bool, "by_claim": bool}

Two ways to read (confluent-kafka, Debian's python3-confluent-kafka):

  kafka_consumer.py --brokers H:P[,H:P] --topic T --group G     # a consumer group: runs until
                                                                # stopped, commits after handling
  kafka_consumer.py --brokers H:P --topic T --until-eof         # every partition from the
                                                                # beginning, exits at the end

A record that is not a SinkMessageV1 or whose claim does not match is reported on stderr
and skipped (a real worker dead-letters it); a claim the gateway cannot serve now
(5xx, unreachable) stops the worker so that the record is read again after a restart.
The record's headers carry the same identity (ankusa_id, ankusa_idempotency_key, ...) for
routing without parsing; this example reads the message itself.
"""
import argparse
import json
import sys
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer as KafkaConsumer, KafkaError, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ankusa_consumer import ClaimError, Consumer  # noqa: E402


def handle(consumer, record):
    """One record -> a printed line; False when the worker must stop (retry later)."""
    try:
        d = consumer.handle(record.value())
    except ValueError as e:
        print(json.dumps({"error": f"malformed: {e}", "partition": record.partition(),
                          "offset": record.offset()}), file=sys.stderr)
        return True
    except ClaimError as e:
        print(json.dumps({"error": str(e), "partition": record.partition(), "offset": record.offset()}),
              file=sys.stderr)
        return not e.retryable
    print(d.line(), flush=True)
    return True


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", required=True, help="bootstrap servers, host:port[,host:port]")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--group", help="consumer group (committed offsets); without it: --until-eof")
    ap.add_argument("--until-eof", action="store_true", help="read every partition from the start, then exit")
    ap.add_argument("--claim-base", help="claim gateway base URL (http://host:4001)")
    ap.add_argument("--token", help="bearer token for the claim gateway")
    ap.add_argument("--timeout", type=float, default=30.0, help="--until-eof: give up after this many seconds")
    args = ap.parse_args(argv)
    if not args.group and not args.until_eof:
        ap.error("give --group, or --until-eof")

    conf = {"bootstrap.servers": args.brokers, "enable.auto.commit": False,
            "group.id": args.group or "ankusa-kafka-consumer-example", "auto.offset.reset": "earliest",
            "enable.partition.eof": bool(args.until_eof)}
    kc = KafkaConsumer(conf)
    consumer = Consumer(claim_base=args.claim_base, token=args.token)
    try:
        if args.until_eof:
            return read_to_end(kc, consumer, args.topic, args.timeout)
        kc.subscribe([args.topic])
        while True:
            rec = kc.poll(1.0)
            if rec is None:
                continue
            if rec.error():
                print(json.dumps({"error": str(rec.error())}), file=sys.stderr)
                continue
            if not handle(consumer, rec):
                return 75
            kc.commit(message=rec, asynchronous=False)
    except KeyboardInterrupt:
        return 0
    finally:
        kc.close()


def read_to_end(kc, consumer, topic, timeout):
    import time
    md = kc.list_topics(topic, timeout=10)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        print(json.dumps({"error": f"topic {topic}: {t.error if t else 'unknown'}"}), file=sys.stderr)
        return 1
    parts = []
    for p in sorted(t.partitions):
        lo, hi = kc.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        if hi > lo:
            parts.append(TopicPartition(topic, p, OFFSET_BEGINNING))
    if not parts:
        return 0
    kc.assign(parts)
    left = {tp.partition for tp in parts}
    deadline = time.monotonic() + timeout
    while left and time.monotonic() < deadline:
        rec = kc.poll(0.5)
        if rec is None:
            continue
        if rec.error():
            if rec.error().code() == KafkaError._PARTITION_EOF:
                left.discard(rec.partition())
            else:
                print(json.dumps({"error": str(rec.error())}), file=sys.stderr)
            continue
        if not handle(consumer, rec):
            return 75
    if left:
        print(json.dumps({"error": f"partitions not read to the end: {sorted(left)}"}), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
