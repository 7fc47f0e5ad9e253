"""Drain on SIGTERM behind a load balancer (the seed's "Shutdown (SIGTERM)" row): /ready
answers 503 {"status":"draining"} at once, the ingest listener keeps serving for
listener.drain_delay_ms, then stops accepting and waits for the requests it is serving;
the writer is waited on until empty (within listener.drain_timeout_ms). Every request in
flight is answered 201 (stored) or 503 (nothing stored), never reset, and every 201 is in
the store after a restart."""
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from helpers import (SLOW, http_request, is_uuid7, parse_responses, post_bytes, raw_connect, sha256_hex)

DEMO = "/webhooks/demo"


class KeepAliveClient:
    """One client thread on a keep-alive connection, POSTing distinct bodies until
    told to stop starting new requests. Records (t_start, t_end, sha256, outcome) for every
    request it started: outcome is a RawResp or a string naming the failure."""

    def __init__(self, port, k, may_start):
        self.port, self.k, self.may_start = port, k, may_start
        self.records = []
        self.sock = None
        self.buf = b""
        self.thread = threading.Thread(target=self.run, daemon=True)

    def _one(self, data):
        if self.sock is None:
            self.sock = raw_connect(self.port, timeout=30.0 * SLOW)
            self.buf = b""
        self.sock.sendall(data)
        deadline = time.monotonic() + 30.0 * SLOW
        while True:
            resps, rest = parse_responses(self.buf)
            if resps:
                r = resps[0]
                self.buf = rest
                if r.headers.get("connection", "").lower() == "close":
                    self.sock.close()
                    self.sock = None
                return r
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer within 30 s")
            self.sock.settimeout(left)
            d = self.sock.recv(65536)
            if not d:
                raise ConnectionError(f"closed without an answer (got {self.buf[:200]!r})")
            self.buf += d

    def run(self):
        rnd = random.Random(os.urandom(8))
        n = 0
        while self.may_start():
            n += 1
            body = b"drain-c%d-%d-" % (self.k, n) + rnd.randbytes(rnd.randint(16, 2000))
            t0 = time.monotonic()
            try:
                out = self._one(post_bytes(DEMO, body))
            except Exception as e:  # noqa: BLE001 - classified by the test
                out = f"{type(e).__name__}: {e}"
                if self.sock is not None:
                    self.sock.close()
                    self.sock = None
            self.records.append((t0, time.monotonic(), sha256_hex(body), out))
            if isinstance(out, str):
                time.sleep(0.05)
        if self.sock is not None:
            self.sock.close()


def test_sigterm_drain_behind_a_balancer(ankusa):
    delay = 1.5
    s = ankusa(config={"listener": {"drain_delay_ms": int(delay * 1000)}})
    state = {"not_ready_at": None}
    polls = []  # (t, status | error string, json or None)
    t_term_box = {}
    balancer_stop = threading.Event()

    def may_start():
        nr = state["not_ready_at"]
        return nr is None or time.monotonic() < nr + 0.3

    def balancer():
        while not balancer_stop.is_set():
            t = time.monotonic()
            try:
                r = http_request(s.http_port, "GET", "/ready", timeout=5)
                polls.append((t, r.status, r.json if r.body else None))
                if r.status != 200 and state["not_ready_at"] is None:
                    state["not_ready_at"] = time.monotonic()
            except Exception as e:  # noqa: BLE001
                polls.append((t, f"{type(e).__name__}: {e}", None))
                if state["not_ready_at"] is None:
                    state["not_ready_at"] = time.monotonic()
            # a balancer stops probing a backend it took out; ours stops before the delay ends
            if "t" in t_term_box and time.monotonic() > t_term_box["t"] + delay - 0.4:
                return
            time.sleep(0.05)

    clients = [KeepAliveClient(s.http_port, k, may_start) for k in range(16)]
    bt = threading.Thread(target=balancer, daemon=True)
    bt.start()
    for c in clients:
        c.thread.start()
    time.sleep(1.0)
    t_term = t_term_box["t"] = time.monotonic()
    s.proc.send_signal(15)  # SIGTERM by PID
    rc = s.wait_exit(60 if SLOW > 1 else 40)
    t_exit = time.monotonic()
    for c in clients:
        c.thread.join(40)
    balancer_stop.set()
    bt.join(10)
    assert rc == 0, f"exit code {rc} after SIGTERM\n{s.log_tail()}"

    # /ready: 200 until the SIGTERM, then 503 draining at once, and still answered
    # (the listener keeps serving) while the balancer probes during the delay
    before = [p for p in polls if p[0] < t_term - 0.05]
    assert before and all(p[1] == 200 for p in before), f"/ready not 200 before SIGTERM: {before[-3:]}"
    after = [p for p in polls if p[0] > t_term + 0.02]
    assert after, "the balancer did not probe after the SIGTERM"
    nr = state["not_ready_at"]
    assert nr is not None and nr - t_term < 0.5 * SLOW, f"/ready still 200 {None if nr is None else nr - t_term}s after SIGTERM"
    for t, st, j in after:
        assert st == 503, f"/ready {t - t_term:.2f}s after SIGTERM (drain_delay_ms 1500): {st}"
        assert j and j.get("status") == "draining", j

    records = [r for c in clients for r in c.records]
    broken = [(round(t0 - t_term, 3), out) for (t0, t1, sha, out) in records if isinstance(out, str)]
    assert not broken, f"{len(broken)} requests got no answer (reset/closed/timeout), e.g. {broken[:5]}"
    odd = [out for (_, _, _, out) in records if out.status not in (201, 503)]
    assert not odd, f"answers other than 201/503: {odd[:5]}"
    for (_, _, _, out) in records:
        if out.status == 503:
            assert out.headers.get("retry-after"), out
    started_in_drain = [r for r in records if r[0] > t_term]
    assert started_in_drain, "no request started after the SIGTERM: the test did not bite"
    assert t_exit - t_term >= delay - 0.1, (
        f"exited {t_exit - t_term:.2f}s after SIGTERM, before listener.drain_delay_ms ({delay}s)")

    acked = {}
    refused = set()
    for (_, _, sha, out) in records:
        if out.status == 201:
            hid = out.json.get("id")
            assert is_uuid7(hid or ""), out
            assert hid not in acked, f"id {hid} handed out twice"
            acked[hid] = sha
        else:
            refused.add(sha)
    assert len(acked) >= 50, f"only {len(acked)} hooks accepted: the load did not run"

    s.config["listener"]["drain_delay_ms"] = 0  # the teardown's SIGTERM need not wait
    s.write_config()
    s.start()  # the same data dir

    def fetch(hid):
        r = s.admin(f"/v1/hooks/{hid}")
        return hid, r.status, (r.json.get("sha256") if r.status == 200 else r.body[:200])
    with ThreadPoolExecutor(8) as ex:
        got = list(ex.map(fetch, acked))
    missing = [(h, st) for (h, st, _) in got if st != 200]
    assert not missing, f"{len(missing)} of {len(acked)} answered 201 are not in the store after restart: {missing[:5]}"
    differ = [h for (h, _, sha) in got if sha != acked[h]]
    assert not differ, f"{len(differ)} stored hooks differ from what was answered 201: {differ[:5]}"
    stored = {h["sha256"] for h in s.inspect()}
    leaked = stored & refused
    assert not leaked, f"{len(leaked)} requests answered 503 are in the store"
    assert stored == set(acked.values()), "the store holds hooks that were never answered 201"
    n503 = sum(1 for r in records if r[3].status == 503)
    print(f"drain: {len(records)} requests, {len(acked)} x 201, {n503} x 503, {len(started_in_drain)} started "
          f"after SIGTERM; /ready 503 after {nr - t_term:.3f}s; exit after {t_exit - t_term:.2f}s")


def test_sigterm_with_a_stalled_writer_answers_every_held_request(ankusa):
    """200 requests held by a writer whose commits take 1.5 s (the test seam
    ANKUSA_TEST_COMMIT_DELAY_MS), then SIGTERM: each gets 201 or 503, never a reset;
    every 201 is stored, no 503 is."""
    s = ankusa(env={"ANKUSA_TEST_COMMIT_DELAY_MS": "1500"})
    n = 200
    bodies = [b"held-%d-" % i + os.urandom(12) for i in range(n)]
    results = [None] * n

    def send(i):
        try:
            results[i] = http_request(s.http_port, "POST", DEMO, body=bodies[i], timeout=60,
                                      headers={"Content-Type": "application/octet-stream"})
        except Exception as e:  # noqa: BLE001
            results[i] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    # wait until the writer holds most of them (buffered or in flight)
    deadline = time.monotonic() + 20 * SLOW
    held = 0
    while time.monotonic() < deadline:
        held = s.metrics().value("ankusa_batcher_queue_records", instance="default")
        if held >= 150:
            break
        time.sleep(0.05)
    assert held >= 150, f"only {held} requests held by the writer; cannot test the drain"
    t_term = time.monotonic()
    s.proc.send_signal(15)  # SIGTERM by PID
    rc = s.wait_exit(60)
    t_exit = time.monotonic()
    for t in threads:
        t.join(30)
    assert rc == 0, f"exit code {rc} after SIGTERM\n{s.log_tail()}"
    # a thread that had not connected when SIGTERM closed the listener was refused at
    # connect: nothing sent, nothing held (at most the ones not yet held)
    unsent = [r for r in results if isinstance(r, str) and r.startswith("ConnectionRefusedError")]
    assert len(unsent) <= n - held, f"{len(unsent)} refused at connect, but {held} of {n} were held"
    sent = [(i, r) for i, r in enumerate(results) if r not in unsent]
    broken = [r for _, r in sent if not hasattr(r, "status")]
    assert not broken, f"{len(broken)} held requests got no answer: {broken[:5]}"
    assert all(r.status in (201, 503) for _, r in sent), [r for _, r in sent if r.status not in (201, 503)][:5]
    acked = {r.json["id"]: sha256_hex(bodies[i]) for i, r in sent if r.status == 201}
    refused = {sha256_hex(bodies[i]) for i, r in sent if r.status == 503}
    s.start()
    for hid, sha in acked.items():
        assert s.hook(hid)["sha256"] == sha
    stored = {h["sha256"] for h in s.inspect()}
    assert not (stored & refused), "a request answered 503 was stored"
    assert stored == set(acked.values())
    print(f"stalled writer: {len(acked)} x 201, {len(refused)} x 503, exit {t_exit - t_term:.2f}s after SIGTERM")
