"""What every consumer of ankusa's broker sinks does with one message (docs/sink-message.md).

A broker sink delivers SinkMessageV1: one JSON object per hook and attempt. A consumer

  1. parses it and ignores keys it does not know (`v` is 1);
  2. takes the body: `body_base64` decoded, or the `claim` ref redeemed at the claim
     gateway (GET /v1/claims/{tenant}/{claim_id}, a bearer token with claims:read);
  3. checks the body's length and SHA-256 against `size` and `sha256` (a claim that does
     not match is dead-lettered by the consumer, never processed);
  4. drops what it already processed, by `idempotency_key` (delivery is at least once:
     a redelivery after a lost ack, a restart or a replay is the same key).

The per-broker examples beside this file read their broker and hand each message to
Consumer.handle. Python 3 standard library only; `validate` uses the jsonschema module
(Debian: python3-jsonschema) to check a message against the published schema.
"""
import base64
import binascii
import hashlib
import json
import re
import urllib.error
import urllib.request
from pathlib import Path

SCHEMA_PATH = Path(__file__).resolve().parents[2] / "docs" / "sink-message-v1.schema.json"
CLAIM_RE = re.compile(r"^urn:ankusa:claim:v1:([A-Za-z0-9_-]{1,64}):([0-7][0-9A-HJKMNP-TV-Z]{25})$")


class ClaimError(Exception):
    """The claim could not be redeemed, or its bytes do not match the message."""

    def __init__(self, message, retryable=False):
        super().__init__(message)
        self.retryable = retryable  # a 5xx or an unreachable gateway: try again later


class Delivery:
    def __init__(self, message, body, duplicate):
        self.message = message
        self.body = body
        self.duplicate = duplicate

    def line(self):
        """The JSON line the examples print for this message."""
        m = self.message
        return json.dumps({"id": m["id"], "idempotency_key": m["idempotency_key"], "size": m["size"],
                           "sha256_ok": True, "duplicate": self.duplicate,
                           "by_claim": "claim" in m})


class Consumer:
    def __init__(self, claim_base=None, token=None, timeout=10.0, seen_max=1_000_000):
        self.claim_base = claim_base.rstrip("/") if claim_base else None
        self.token = token
        self.timeout = timeout
        self.seen = {}
        self.seen_max = seen_max

    def redeem(self, ref):
        m = CLAIM_RE.match(ref)
        if not m:
            raise ClaimError(f"not a v1 claim ref: {ref!r}")
        if not self.claim_base:
            raise ClaimError("a claim ref arrived but no claim gateway is configured")
        req = urllib.request.Request(f"{self.claim_base}/v1/claims/{m.group(1)}/{m.group(2)}")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            raise ClaimError(f"claim gateway answered {e.code}", retryable=e.code >= 500) from None
        except OSError as e:
            raise ClaimError(f"claim gateway unreachable: {e}", retryable=True) from None

    def handle(self, raw):
        try:
            msg = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise ValueError(f"not JSON: {e}") from None
        if not isinstance(msg, dict) or msg.get("v") != 1:
            raise ValueError("not a SinkMessageV1 (v != 1)")
        for k in ("id", "idempotency_key", "sha256"):
            if not isinstance(msg.get(k), str):
                raise ValueError(f"{k} missing")
        if not isinstance(msg.get("size"), int):
            raise ValueError("size missing")
        if ("body_base64" in msg) == ("claim" in msg):
            raise ValueError("exactly one of body_base64 and claim is expected")
        if "claim" in msg:
            body = self.redeem(msg["claim"])
        else:
            try:
                body = base64.b64decode(msg["body_base64"], validate=True)
            except (binascii.Error, TypeError) as e:
                raise ValueError(f"body_base64: {e}") from None
        if len(body) != msg["size"] or hashlib.sha256(body).hexdigest() != msg["sha256"]:
            what = "claim" if "claim" in msg else "inline body"
            raise ClaimError(f"{what} of {msg['id']} does not match size/sha256")
        key = msg["idempotency_key"]
        duplicate = key in self.seen
        if not duplicate:
            if len(self.seen) >= self.seen_max:
                self.seen.pop(next(iter(self.seen)))
            self.seen[key] = True
        return Delivery(msg, body, duplicate)


_validator = None


def validate(raw):
    """Check one message against docs/sink-message-v1.schema.json; raises on failure."""
    global _validator
    if _validator is None:
        import jsonschema
        schema = json.loads(SCHEMA_PATH.read_text())
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        _validator = cls(schema)
    msg = json.loads(raw)
    _validator.validate(msg)
    return msg
