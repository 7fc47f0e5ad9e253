"""The original Ankusa's example configs (../shared/reference/ankusa-examples/*.yml) load with
`check-config`, with the variables each one reads set to valid values; direct.yml (wal.type
none) also runs against a real RabbitMQ and acks a Stripe hook on the broker's confirm.

A file loads unless it uses a feature not built yet or meets a deliberate departure; then its
complaints must be exactly the lines listed below, so that a feature's issue removes its
lines when it lands (and the test fails if a complaint disappears without its line going)."""
import hashlib
import hmac
import re
import time

import pytest

from helpers import REPO, Server, free_ports, run_cli
from rabbitmq_server import RabbitServer, available

EXAMPLES = REPO.parent / "shared" / "reference" / "ankusa-examples"
WHSEC = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

# A valid value for every ${VAR} the examples read (outside comments), by its meaning.
VALUES = {
    "STRIPE_WHSEC": WHSEC,
    "STANDARD_WEBHOOKS_SECRET": WHSEC,
    "SINK_WHSEC": WHSEC,
    "GITHUB_WEBHOOK_SECRET": "gh-webhook-secret",
    "SINK_URL": "https://sink.example.com/hooks",
    "RABBITMQ_URL": "amqp://user:pass@rabbitmq:5672/%2F",
    "RABBITMQ_EXCHANGE": "ankusa.hooks",
    "KAFKA_BROKERS": "kafka-1:9092,kafka-2:9092",
    "KAFKA_TOPIC": "ankusa.hooks",
    "KAFKA_USERNAME": "ankusa",
    "KAFKA_SASL_PASSWORD": "kafka-password",
    "NATS_SERVERS": "nats-1:4222,nats-2:4222",
    "NATS_SUBJECT": "ankusa.hooks",
    "NATS_USERNAME": "ankusa",
    "NATS_PASSWORD": "nats-password",
    "REDIS_SINK_URL": "redis://:pass@redis:6379/0",
    "SQS_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/123456789012/ankusa-hooks",
    "GCP_TOKEN": "ya29.token",
    "S3_BUCKET": "ankusa-segments",
    "S3_REGION": "us-east-1",
    "S3_ENDPOINT": "https://s3.us-east-1.amazonaws.com",
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "GCS_BUCKET": "ankusa-segments",
}

ADMIN_OPEN = ("admin.ip: 0.0.0.0 is not a loopback address; without admin.principals the admin API has no "
              "authentication and listens on loopback only (127.0.0.1, ::1): add admin.principals or bind 127.0.0.1")
CLAIMS_OPEN = ("claim_check.ip: 0.0.0.0 is not a loopback address; without admin.principals the claim gateway has "
               "no one to authenticate and listens on loopback only: add admin.principals with the claims:read "
               "scope, or bind 127.0.0.1")


# (a) Features not built yet: none left (each issue deleted the lines of its feature).
NOT_BUILT = {}

# (b) Deliberate departures (docs/migrating.md): an unauthenticated listener on 0.0.0.0 is
# refused, the admin API's and the claim gateway's alike.
DEPARTURES = {
    "nats-consumer.yml": [ADMIN_OPEN, CLAIMS_OPEN],
    "kafka-fanout.yml": [CLAIMS_OPEN],
    "nats-fanout.yml": [CLAIMS_OPEN],
}

def example_files():
    return sorted(p.name for p in EXAMPLES.glob("*.yml")) if EXAMPLES.is_dir() else []


def expected(name):
    return sorted(NOT_BUILT.get(name, []) + DEPARTURES.get(name, []))


def read_vars(text):
    """The ${VAR} names a file reads outside comments, and whether each has a default."""
    names = {}
    for line in text.splitlines():
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#") else ""
        for m in re.finditer(r"\$\{([A-Z0-9_]+)(:-[^}]*)?\}", code):
            names[m.group(1)] = names.get(m.group(1), False) or m.group(2) is None
    return names


def test_the_examples_are_there():
    if not EXAMPLES.is_dir():
        pytest.fail(f"the example configs are not at {EXAMPLES}", pytrace=False)
    names = example_files()
    assert len(names) >= 10, names
    listed = set(NOT_BUILT) | set(DEPARTURES)
    assert listed <= set(names), f"exceptions for files that are gone: {sorted(listed - set(names))}"


@pytest.mark.parametrize("name", example_files())
def test_example_loads(name):
    path = EXAMPLES / name
    reads = read_vars(path.read_text())
    missing = [v for v, required in reads.items() if required and v not in VALUES]
    assert not missing, f"{name} reads {missing}: give them a valid value in VALUES"
    env = {v: VALUES[v] for v in reads if v in VALUES}
    p = run_cli("check-config", "--config", path, env=env)
    want = expected(name)
    if not want:
        assert p.returncode == 0, f"{name} did not load:\n{p.stderr}"
        assert p.stdout.startswith("config OK: "), p.stdout
        assert p.stderr == "", p.stderr
        return
    assert p.returncode == 78, f"{name}: exit {p.returncode}\n{p.stdout}{p.stderr}"
    lines = p.stderr.splitlines()
    assert lines[0] == "ankusa: invalid configuration", p.stderr
    assert all(ln.startswith("  ") for ln in lines[1:]), p.stderr
    assert sorted(ln[2:] for ln in lines[1:]) == want, f"{name}: complaints differ:\n{p.stderr}"


def test_direct_example_runs_and_acks_on_the_broker_confirm(tmp_path):
    """direct.yml as shipped, served: a signed Stripe event is 201 once RabbitMQ confirmed it,
    and the message is in a queue bound to the exchange; the node runs the edge role only."""
    why = available()
    if why:
        pytest.fail(f"cannot start rabbitmq-server: {why}", pytrace=False)
    broker = RabbitServer().start()
    node = None
    try:
        broker.bind_queue("ankusa.direct", "q.direct", "ankusa.#")
        http_port, admin_port = free_ports(2)
        env = {"STRIPE_WHSEC": WHSEC, "RABBITMQ_URL": broker.url, "RABBITMQ_EXCHANGE": "ankusa.direct",
               "ANKUSA_HTTP_PORT": str(http_port), "ANKUSA_ADMIN_PORT": str(admin_port),
               "ANKUSA_DATA_DIR": str(tmp_path / "data")}
        node = Server(tmp_path, name="direct", env=env, config_text=(EXAMPLES / "direct.yml").read_text())
        node.http_port, node.admin_port = http_port, admin_port
        node.start()
        body = b'{"id":"evt_1","object":"event","type":"charge.succeeded"}'
        ts = int(time.time())
        sig = hmac.new(WHSEC.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
        r = node.post("/webhooks/stripe", body, {"Content-Type": "application/json",
                                                 "Stripe-Signature": f"t={ts},v1={sig}"})
        assert r.status == 201, r
        got = broker.get_all("q.direct")
        assert len(got) == 1, got
        assert got[0][1].message_id == r.json["id"]
        assert node.admin("/health").json["roles"] == ["edge"]
        assert node.admin("/v1/wal").status == 409
        forged = node.post("/webhooks/stripe", body, {"Stripe-Signature": f"t={ts},v1={'0' * 64}"})
        assert forged.status == 401, forged
        assert broker.get_all("q.direct") == []
    finally:
        if node is not None:
            assert node.stop() == 0, node.log_tail()
        broker.stop()
