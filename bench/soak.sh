#!/usr/bin/env bash
# Soak: one node for an hour at the seed's target load, with delivery, watched every minute.
#
#   bash bench/soak.sh                          # the full hour (DURATION=3600)
#   DURATION=300 WARMUP=60 SAMPLE=30 bash bench/soak.sh   # a short look
#
# An nginx receiver answers 204 to POST /hook; bench/soak.py starts the node (one source,
# an http sink to nginx), POSTs BODY-byte bodies at RATE req/s and samples RSS, open files,
# threads, the store's size on disk, the backlog and the ack latency of each interval
# (p50/p99/max). The targets (seed): RSS growth <= 5 % over the hour after the warm-up,
# ack p99 <= 50 ms. Until the archive compactor lands the store only grows; the table
# shows what that does to memory.
#
# Environment:
#   DURATION  seconds of load (3600)        WARMUP  seconds before the baseline sample (120)
#   SAMPLE    seconds between samples (60)  RATE    requests per second (1000)
#   BODY      body bytes (10240)            CONNECTIONS  keep-alive client connections (16)
#   ANKUSA_BIN  binary under test (build/ankusa)   NGINX  nginx binary (/usr/sbin/nginx)
#   OUT       the JSON figures (bench/out/soak-<date>.json)   KEEP_TMP=1  keep the temp dir
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export DURATION=${DURATION:-3600} WARMUP=${WARMUP:-120} SAMPLE=${SAMPLE:-60}
export RATE=${RATE:-1000} BODY=${BODY:-10240} CONNECTIONS=${CONNECTIONS:-16}
export ANKUSA_BIN=${ANKUSA_BIN:-$REPO/build/ankusa}
NGINX=${NGINX:-/usr/sbin/nginx}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BENCH_NAME=soak.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
need_positive DURATION SAMPLE RATE BODY CONNECTIONS
[ -x "$ANKUSA_BIN" ] || die "$ANKUSA_BIN not found: run make"
[ -x "$NGINX" ] || die "$NGINX not found: install nginx-light (scripts/deps.sh)"

bench_setup soak
mkdir -p "$REPO/bench/out"
export OUT=${OUT:-$REPO/bench/out/soak-$(date -u +%Y%m%dT%H%M%SZ).json}
export TMP HTTP_PORT ADMIN_PORT NGINX_PORT

mkdir -p "$TMP/nginx"
cat >"$TMP/nginx.conf" <<NGX
daemon off;
master_process on;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/error.log warn;
events { worker_connections 4096; use epoll; }
http {
    access_log off;
    keepalive_requests 1000000;
    keepalive_timeout 75s;
    client_max_body_size 2m;
    client_body_buffer_size 64k;
    client_body_temp_path $TMP/nginx/client_body;
    proxy_temp_path $TMP/nginx/proxy;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT backlog=4096;
        location = /hook { return 204; }
        location = /ping { return 200 'ok'; }
    }
}
NGX
"$NGINX" -e "$TMP/nginx/error.log" -p "$TMP/nginx/" -c "$TMP/nginx.conf" >"$TMP/nginx/out" 2>&1 &
NGINX_PID=$!
PIDS+=("$NGINX_PID")
wait_http "http://127.0.0.1:$NGINX_PORT/ping" 200 "$NGINX_PID" 10 || die "nginx did not start"
for c in $(ps -o pid= --ppid "$NGINX_PID" || true); do PIDS+=("$c"); done

echo "soak.sh: $("$ANKUSA_BIN" version | head -1), $(nproc) cores, $(date -u +%FT%TZ)"
"$PY" "$REPO/bench/soak.py"
