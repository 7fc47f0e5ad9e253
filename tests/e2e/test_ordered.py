"""Ordered sinks (a sink entry with `ordered: true`, docs/delivery.md): the hooks of one
lane {tenant, source, sink} reach the sink one at a time in seq order, across retries and
kill -9; a lane held by a retry holds nobody else; an unordered sink beside it is not
held either."""
import time

import pytest

from helpers import LOOPBACK, SLOW, admin_json
from receiver import Receiver


def cfg(**dispatch):
    c = dict(LOOPBACK)
    c["dispatch"] = {"retry": {"base_ms": 50, "max_ms": 200, "max_attempts": 84, "jitter": False},
                     "breaker_failures": 0, "concurrency": 16}
    c["dispatch"].update(dispatch)
    c["node"] = {"roles": ["edge", "dispatch"]}
    return c


def post_in_order(node, src, n, tag):
    """n hooks posted one after the other (each answered before the next is sent): their
    seqs follow this order. Returns their ids in order."""
    ids = []
    for i in range(n):
        r = node.post(f"/webhooks/{src}", f"{tag}-{i}".encode(), {"Content-Type": "text/plain"})
        assert r.status == 201, r
        ids.append(r.json["id"])
    return ids


def attempts_in_order(rx, ids, what):
    """Every request the lane's sink got, in arrival order, may only be for a hook whose
    predecessors had all been answered 2xx already (a redelivery of an earlier hook, after a
    kill, is allowed); and the first 2xx of each hook come in seq order. Catches a lane that
    lets two attempts run at once, takes a later hook past a retry, or loses its order at a
    restart."""
    pos = {h: k for k, h in enumerate(ids)}
    done = 0  # hooks 0..done-1 answered 2xx
    firsts = []
    for d in rx.snapshot():
        k = pos.get(d.id)
        assert k is not None, f"{what}: a delivery of a hook not in this lane: {d.id}"
        assert k <= done, (f"{what}: hook #{k} was sent while #{done} had not been delivered yet "
                           f"(order broken)")
        if 200 <= d.status < 300 and k == done:
            firsts.append(k)
            done += 1
    assert firsts == list(range(len(ids))), f"{what}: first deliveries out of order: {firsts[:20]}"


def test_lane_is_ordered_and_a_retry_holds_only_its_lane(ankusa):
    # lane a: its first hook fails until 1.5 s have passed; every third hook fails once.
    # lane b (another source, ordered too) and an unordered sink of source a are healthy.
    t0 = [None]
    fails = {}

    def behave_a(d, n):
        body = d.body.decode()
        if body == "a-0" and (t0[0] is None or time.monotonic() - t0[0] < 1.5 * SLOW):
            return 500, {}, 0
        if int(body.split("-")[1]) % 3 == 0 and n == 0:
            return 503, {}, 0
        return 204, {}, 0

    rx_a, rx_b, rx_u = Receiver(behave_a), Receiver(), Receiver()
    try:
        sources = {
            "sa": {"tenant": "acme", "sinks": [{"type": "http", "url": rx_a.url, "ordered": True},
                                               {"type": "http", "url": rx_u.url}]},
            "sb": {"tenant": "acme", "sinks": [{"type": "http", "url": rx_b.url, "ordered": True}]},
        }
        node = ankusa(config=cfg(), sources=sources)
        t0[0] = time.monotonic()
        ids_a = post_in_order(node, "sa", 30, "a")
        ids_b = post_in_order(node, "sb", 30, "b")
        # lane b and the unordered sink finish while lane a is still held by its first hook
        rx_b.wait_for(lambda ds: len({d.id for d in ds if d.status == 204}) >= 30, timeout=10 * SLOW,
                      what="lane b")
        rx_u.wait_for(lambda ds: len({d.id for d in ds if d.status == 204}) >= 30, timeout=10 * SLOW,
                      what="the unordered sink")
        ok_a = {d.id for d in rx_a.snapshot() if d.status == 204}
        if time.monotonic() - t0[0] < 1.5 * SLOW:
            assert not ok_a, "lane a went past its held first hook"
        # while held, lane a only ever retried its first hook
        assert {d.id for d in rx_a.snapshot()} <= {ids_a[0]} or ok_a, "lane a sent a later hook while held"
        rx_a.wait_for(lambda ds: len({d.id for d in ds if d.status == 204}) >= 30, timeout=20 * SLOW,
                      what="lane a")
        attempts_in_order(rx_a, ids_a, "lane a")
        attempts_in_order(rx_b, ids_b, "lane b")
        assert len([d for d in rx_a.snapshot() if d.id == ids_a[0]]) >= 3, "the held hook was not retried"
        # the lane rows are gone and the hooks reclaimed
        deadline = time.monotonic() + 10 * SLOW
        while node.metrics().value("ankusa_store_hooks", instance="default") != 0:
            assert time.monotonic() < deadline, "delivered hooks of ordered lanes were not reclaimed"
            time.sleep(0.2)
    finally:
        for r in (rx_a, rx_b, rx_u):
            r.close()


@pytest.mark.parametrize("kills", [4])
def test_lane_order_survives_kill9(ankusa, kills):
    # a fifth of the first attempts fail; kills land while the lane delivers
    def behave(d, n):
        k = int(d.body.decode().split("-")[1])
        return (500, {}, 0) if n == 0 and k % 5 == 2 else (204, {}, 0.002)

    rx = Receiver(behave)
    try:
        sources = {"so": {"tenant": "acme", "sinks": [{"type": "http", "url": rx.url, "ordered": True}]}}
        node = ankusa(config=cfg(), sources=sources)
        ids = []
        for n in range(kills):
            ids += post_in_order(node, "so", 40, f"o{n}")
            time.sleep(0.05)  # the lane is mid-way through its hooks
            node.kill9()
            node.start()
        rx.wait_for(lambda ds: len({d.id for d in ds if d.status == 204}) >= len(ids), timeout=30 * SLOW,
                    what="every acked hook of the lane")
        attempts_in_order(rx, ids, "lane after kills")
        r = admin_json(node, "GET", "/v1/dlq")
        assert r.json["total"] == 0, r.json
    finally:
        rx.close()
