#!/usr/bin/env python3
"""The soak's load and its sampler (run by bench/soak.sh, which starts the receiver).

Starts one ankusa node (one source, an http sink to the receiver), POSTs BODY-byte bodies
at RATE requests/s on keep-alive connections for DURATION seconds, and every SAMPLE
seconds records: the node's RSS, open files, threads, the store's bytes on disk, the ack
latency of that interval's 201s (p50/p99/max as the client saw it; the server's p99 as
the bucket of ankusa_ingest_duration_seconds that holds it), acks and refusals, the backlog
(accepted minus delivered). After WARMUP seconds the first sample is the baseline: RSS
growth from it to the end is the figure the seed bounds (<= 5 % in an hour), as is the
ack p99 (<= 50 ms). Prints a table as it goes, a summary, and writes both as JSON to
OUT. Exit 1 when the node died, a 201 was missing its delivery at the end (after a drain
wait), or any request got an answer other than 201.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

ENV = os.environ
BIN = ENV["ANKUSA_BIN"]
TMP = ENV["TMP"]
HTTP_PORT = int(ENV["HTTP_PORT"])
ADMIN_PORT = int(ENV["ADMIN_PORT"])
RECV_PORT = int(ENV["NGINX_PORT"])
DURATION = float(ENV.get("DURATION", "3600"))
WARMUP = float(ENV.get("WARMUP", "120"))
SAMPLE = float(ENV.get("SAMPLE", "60"))
RATE = float(ENV.get("RATE", "1000"))
BODY = int(ENV.get("BODY", "10240"))
CONNS = int(ENV.get("CONNECTIONS", "16"))
OUT = ENV.get("OUT", os.path.join(TMP, "soak.json"))

lock = threading.Lock()
lat = []            # ack latencies (s) of the current interval
counts = {"ok": 0, "refused": 0, "other": 0, "errors": 0}
stop = threading.Event()


def start_node():
    data = os.path.join(TMP, "data")
    cfg = os.path.join(TMP, "ankusa.yml")
    with open(cfg, "w") as f:
        f.write(f"""node: {{data_dir: {data}}}
log: {{level: warning}}
http: {{port: {HTTP_PORT}, max_body_bytes: 1000000}}
admin: {{port: {ADMIN_PORT}}}
listener: {{drain_delay_ms: 0}}
sources:
  soak:
    sinks:
      - {{type: http, url: "http://127.0.0.1:{RECV_PORT}/hook"}}
""")
    log = open(os.path.join(TMP, "ankusa.log"), "wb")
    p = subprocess.Popen([BIN, "--config", cfg], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", ADMIN_PORT, timeout=1)
            c.request("GET", "/ready")
            if c.getresponse().status == 200:
                return p, data
        except OSError:
            pass
        if p.poll() is not None:
            sys.exit(f"soak: ankusa exited with {p.returncode} at start (see {TMP}/ankusa.log)")
        time.sleep(0.05)
    sys.exit("soak: ankusa not ready after 10 s")


def worker(idx, per_conn_rate, body):
    conn = None
    interval = 1.0 / per_conn_rate
    nxt = time.perf_counter() + idx * interval / CONNS
    n = 0
    while not stop.is_set():
        now = time.perf_counter()
        if now < nxt:
            time.sleep(nxt - now)
        nxt += interval
        n += 1
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", HTTP_PORT, timeout=10)
            t0 = time.perf_counter()
            conn.request("POST", "/webhooks/soak", body, {"content-type": "application/json"})
            r = conn.getresponse()
            r.read()
            dt = time.perf_counter() - t0
            with lock:
                if r.status == 201:
                    counts["ok"] += 1
                    lat.append(dt)
                elif r.status in (429, 503):
                    counts["refused"] += 1
                else:
                    counts["other"] += 1
            if r.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException):
            with lock:
                counts["errors"] += 1
            if conn:
                conn.close()
            conn = None
            time.sleep(0.05)


def metric(text, name, **labels):
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def buckets(text, name):
    """Cumulative bucket counts of a histogram, summed over its series: {le: count}."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            le = float("inf") if le == "+Inf" else float(le)
            out[le] = out.get(le, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def hist_quantile(now, before, q):
    """The upper bound of the bucket holding quantile q of the observations between two
    scrapes (the server's view of the same interval)."""
    les = sorted(now)
    total = now[les[-1]] - before.get(les[-1], 0.0) if les else 0
    if total <= 0:
        return float("nan")
    for le in les:
        if now[le] - before.get(le, 0.0) >= q * total:
            return le
    return float("inf")


def scrape():
    c = http.client.HTTPConnection("127.0.0.1", ADMIN_PORT, timeout=5)
    c.request("GET", "/metrics")
    return c.getresponse().read().decode()


def proc_status(pid):
    rss = threads = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                threads = int(line.split()[1])
    return rss, threads, len(os.listdir(f"/proc/{pid}/fd"))


def du(path):
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def pct(v, q):
    if not v:
        return float("nan")
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))]


def main():
    node, data = start_node()
    body = (b'{"pad":"' + b"x" * max(0, BODY - 10) + b'"}')[:BODY]
    per = RATE / CONNS
    threads = [threading.Thread(target=worker, args=(i, per, body), daemon=True) for i in range(CONNS)]
    for t in threads:
        t.start()
    t_start = time.monotonic()
    samples = []
    print(f"soak: {RATE:.0f} req/s of {BODY} B for {DURATION:.0f} s, sample every {SAMPLE:.0f} s, "
          f"baseline after {WARMUP:.0f} s warm-up; node PID {node.pid}", flush=True)
    print(f"{'t_s':>6} {'rss_MB':>8} {'fds':>5} {'thr':>4} {'store_MB':>9} {'acks/s':>8} "
          f"{'p50_ms':>7} {'p99_ms':>7} {'max_ms':>7} {'srv_p99':>8} {'backlog':>8} {'refused':>8} {'errors':>6}", flush=True)
    next_sample = t_start + min(WARMUP, SAMPLE) if WARMUP > 0 else t_start + SAMPLE
    last_ok = 0
    last_hist = {}
    died = False
    while True:
        now = time.monotonic()
        if now - t_start >= DURATION:
            break
        time.sleep(max(0.0, min(next_sample, t_start + DURATION) - now))
        if node.poll() is not None:
            died = True
            break
        if time.monotonic() < next_sample:
            continue
        with lock:
            window, lat[:] = list(lat), []
            c = dict(counts)
        rss, thr, fds = proc_status(node.pid)
        m = scrape()
        hist = buckets(m, "ankusa_ingest_duration_seconds")
        srv_p99 = hist_quantile(hist, last_hist, 0.99) * 1e3
        last_hist = hist
        accepted = metric(m, "ankusa_store_hooks")
        delivered = metric(m, "ankusa_deliveries_total", result="ok")
        s = {"t_s": round(time.monotonic() - t_start, 1), "rss_bytes": rss, "fds": fds, "threads": thr,
             "store_bytes": du(data), "acks": c["ok"] - last_ok,
             "p50_ms": pct(window, 0.50) * 1e3, "p99_ms": pct(window, 0.99) * 1e3,
             "max_ms": (max(window) if window else float("nan")) * 1e3, "server_p99_ms_le": srv_p99,
             "backlog": accepted - delivered, "refused": c["refused"], "errors": c["errors"],
             "warmup": time.monotonic() - t_start < WARMUP}
        interval = SAMPLE if samples else (next_sample - t_start)
        last_ok = c["ok"]
        samples.append(s)
        print(f"{s['t_s']:>6.0f} {rss / 2**20:>8.1f} {fds:>5} {thr:>4} {s['store_bytes'] / 2**20:>9.1f} "
              f"{s['acks'] / interval:>8.0f} {s['p50_ms']:>7.2f} {s['p99_ms']:>7.2f} {s['max_ms']:>7.1f} {'<=%g' % srv_p99:>8} "
              f"{s['backlog']:>8.0f} {s['refused']:>8} {s['errors']:>6}" + ("  (warm-up)" if s["warmup"] else ""),
              flush=True)
        next_sample += SAMPLE
    stop.set()
    for t in threads:
        t.join(timeout=15)
    ok = True
    summary = {"rate": RATE, "body_bytes": BODY, "duration_s": DURATION, "warmup_s": WARMUP,
               "acks": counts["ok"], "refused": counts["refused"], "other": counts["other"],
               "errors": counts["errors"], "node_died": died}
    if not died:
        # drain: every 201 delivered
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            m = scrape()
            if metric(m, "ankusa_deliveries_total", result="ok") >= metric(m, "ankusa_store_hooks"):
                break
            time.sleep(1)
        m = scrape()
        summary["stored"] = metric(m, "ankusa_store_hooks")
        summary["delivered"] = metric(m, "ankusa_deliveries_total", result="ok")
        if summary["delivered"] < summary["stored"]:
            print(f"soak: !! {summary['stored'] - summary['delivered']:.0f} stored hooks not delivered after 120 s")
            ok = False
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
    else:
        print(f"soak: !! the node died (exit {node.returncode}); see {TMP}/ankusa.log")
        ok = False
    steady = [s for s in samples if not s["warmup"]]
    if len(steady) >= 2:
        base, end = steady[0], steady[-1]
        # RSS swings with each memtable's fill and flush: compare the median of the first
        # three samples after the warm-up with that of the last three
        k = min(3, len(steady) // 2)
        med = lambda xs: sorted(xs)[len(xs) // 2]
        rss0 = med([s["rss_bytes"] for s in steady[:k]])
        rss1 = med([s["rss_bytes"] for s in steady[-k:]])
        summary.update({
            "rss_base_mb": rss0 / 2**20, "rss_end_mb": rss1 / 2**20,
            "rss_max_mb": max(s["rss_bytes"] for s in steady) / 2**20,
            "rss_growth_pct": 100.0 * (rss1 - rss0) / rss0,
            "fds_base": base["fds"], "fds_end": end["fds"], "fds_max": max(s["fds"] for s in steady),
            "store_base_mb": base["store_bytes"] / 2**20, "store_end_mb": end["store_bytes"] / 2**20,
            "p99_ms_max_interval": max(s["p99_ms"] for s in steady),
            "p99_ms_median_interval": sorted(s["p99_ms"] for s in steady)[len(steady) // 2],
        })
        print("soak: summary (after warm-up)")
        print(f"  RSS (median of {k} samples) {summary['rss_base_mb']:.1f} -> {summary['rss_end_mb']:.1f} MB "
              f"({summary['rss_growth_pct']:+.1f} %; target <= +5 %), max {summary['rss_max_mb']:.1f} MB")
        print(f"  open files {summary['fds_base']} -> {summary['fds_end']} (max {summary['fds_max']})")
        print(f"  store {summary['store_base_mb']:.0f} -> {summary['store_end_mb']:.0f} MB on disk")
        print(f"  ack p99 per interval: median {summary['p99_ms_median_interval']:.2f} ms, "
              f"worst {summary['p99_ms_max_interval']:.2f} ms (target <= 50 ms)")
    print(f"  acks {counts['ok']}, refused {counts['refused']}, other {counts['other']}, errors {counts['errors']}")
    if counts["other"]:
        ok = False
    with open(OUT, "w") as f:
        json.dump({"summary": summary, "samples": samples}, f, indent=1)
    print(f"soak: figures in {OUT}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
