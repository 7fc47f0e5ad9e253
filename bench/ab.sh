#!/usr/bin/env bash
# A/B of two ankusa binaries on the machine's own noise: ankusa's CPU per ingest request
# and per delivery, in alternating rounds of one invocation (A then B, then B then A, ...),
# medians per side. CPU is the server's user+system time over the load (from /proc), so
# it holds when throughput swings with the machine's other work.
#
#   A_BIN=/tmp/base/build/ankusa B_BIN=build/ankusa ROUNDS=5 bash bench/ab.sh
#
# Each round, for each side, on a fresh data dir:
#   ingest:  roles [edge] (no dispatcher, no compactor), wrk POSTing 1 KiB bodies for DURATION
#            s; CPU per request = the node's CPU over the wrk run / the hooks it stored
#            (checked: ankusa_ingest_requests_total{status="201"} <= ankusa_store_hooks; a
#            few more are stored whose client left when wrk stopped).
#   (and the writer threads' CPU alone, per stored hook: /proc/PID/task, threads ak-writer*)
#   deliver: the same store restarted with roles [edge, dispatch, storage] and its http
#            sink pointed at nginx answering a static 201; CPU per delivery = the node's
#            CPU from its start until every stored hook was delivered / the deliveries
#            (start-up and the load of the backlog included, as bench/deliver.sh counts it), and
#            of that the dispatch thread's and the HTTP client's threads (ak-dispatch, ak-httpc*).
#
# Environment: A_BIN, B_BIN (required), ROUNDS (5), DURATION (8), CONNECTIONS (64),
# THREADS (2), NGINX (/usr/sbin/nginx), KEEP_TMP=1, BENCH_TMP (bench/out; not a tmpfs).
# Exit status 1 when a check failed (a node died, a 201 count differs from the stored
# hooks, a drain did not finish, a delivery was dead-lettered).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BENCH_NAME=ab
A_BIN=${A_BIN:-}
B_BIN=${B_BIN:-}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-8}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
NGINX=${NGINX:-/usr/sbin/nginx}
WRK=${WRK:-wrk}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

[ -x "$A_BIN" ] || die "A_BIN must name an ankusa binary (got '$A_BIN')"
[ -x "$B_BIN" ] || die "B_BIN must name an ankusa binary (got '$B_BIN')"
need_positive ROUNDS DURATION CONNECTIONS THREADS
command -v "$WRK" >/dev/null || die "wrk not found (scripts/deps.sh installs it)"
TICK_US=$((1000000 / $(getconf CLK_TCK)))

bench_setup ab
nginx_static_start

msum() { # FILE METRIC [label=value ...]: the sum of the matching series
  local f=$1 n=$2
  shift 2
  awk -v n="$n" -v want="$*" '
    BEGIN { k = split(want, w, " ") }
    { s = $1; name = s; sub(/\{.*/, "", name); if (name != n) next
      for (i = 1; i <= k; i++) { split(w[i], kv, "="); if (index(s, kv[1] "=\"" kv[2] "\"") == 0) next }
      t += $2 }
    END { printf "%.0f", t + 0 }' "$f"
}

config() { # DIR ROLES: a node config (JSON is YAML) for this bench
  cat >"$1/node.yml" <<EOF
{"node": {"roles": $2, "data_dir": "$1/data"},
 "log": {"level": "warning"},
 "http": {"port": $HTTP_PORT}, "admin": {"port": $ADMIN_PORT},
 "egress": {"allow_http": true, "allow_cidrs": ["127.0.0.1/32"]},
 "sources": {"bench": {"sinks": [{"type": "http", "url": "http://127.0.0.1:$NGINX_PORT/webhooks/bench"}]}}}
EOF
}

start_node() { # BIN DIR: NODE_PID
  "$1" serve --config "$2/node.yml" >>"$2/node.log" 2>&1 &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
  wait_http "http://127.0.0.1:$HTTP_PORT/ready" 200 "$NODE_PID" 30 || { tail -20 "$2/node.log" >&2; die "node did not get ready"; }
}

stop_node() {
  stop_pid "$NODE_PID" 30 || die "node exited non-zero on SIGTERM (see $1/node.log)"
  forget_pid "$NODE_PID"
}

# one side of one round: prints "<us per request> <us per delivery> <writer us per hook>
# <dispatch thread us per delivery> <http client threads us per delivery>"
side() {
  local bin=$1 dir t0 t1 m c201 hooks ok dlq i w0 w1 dsp hc
  dir=$(mktemp -d "$TMP/run.XXXXXX")
  config "$dir" '["edge"]'
  start_node "$bin" "$dir"
  t0=$(cpu_ticks "$NODE_PID")
  w0=$(thread_ticks "$NODE_PID" ak-writer)
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" -s "$REPO/bench/post1k.lua" \
    "http://127.0.0.1:$HTTP_PORT/webhooks/bench" >"$dir/wrk.txt" 2>&1
  t1=$(cpu_ticks "$NODE_PID")
  w1=$(thread_ticks "$NODE_PID" ak-writer)
  m=$dir/m1.txt
  curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$m"
  c201=$(msum "$m" ankusa_ingest_requests_total instance=default source_id=_all outcome=accepted)
  hooks=$(msum "$m" ankusa_store_hooks instance=default)
  # every 201 is a stored hook; a few more may be stored whose client left when wrk stopped
  ((c201 <= hooks)) || die "$bin: $c201 answered 201 but only $hooks stored"
  ((c201 > 0)) || die "$bin: no 201 at all (see $dir/wrk.txt)"
  local ingest_us
  ingest_us=$(awk -v t=$((t1 - t0)) -v u="$TICK_US" -v n="$hooks" 'BEGIN { printf "%.2f", t * u / n }')
  local writer_us
  writer_us=$(awk -v t=$((w1 - w0)) -v u="$TICK_US" -v n="$hooks" 'BEGIN { printf "%.2f", t * u / n }')
  stop_node "$dir"
  config "$dir" '["edge", "dispatch", "storage"]'
  start_node "$bin" "$dir"
  for ((i = 0; i < 6000; i++)); do
    curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$dir/m2.txt" || true
    ok=$(msum "$dir/m2.txt" ankusa_deliveries_total instance=default sink=http result=ok)
    ((ok >= hooks)) && break
    sleep 0.1
  done
  t1=$(cpu_ticks "$NODE_PID")
  dsp=$(thread_ticks "$NODE_PID" ak-dispatch)
  hc=$(thread_ticks "$NODE_PID" ak-httpc)
  dlq=$(msum "$dir/m2.txt" ankusa_deliveries_total instance=default result=dlq)
  ((ok >= hooks)) || die "$bin: delivered $ok of $hooks within 600 s"
  ((dlq == 0)) || die "$bin: $dlq deliveries dead-lettered"
  local deliver_us
  deliver_us=$(awk -v t="$t1" -v u="$TICK_US" -v n="$ok" 'BEGIN { printf "%.2f", t * u / n }')
  local dsp_us hc_us
  dsp_us=$(awk -v t="$dsp" -v u="$TICK_US" -v n="$ok" 'BEGIN { printf "%.2f", t * u / n }')
  hc_us=$(awk -v t="$hc" -v u="$TICK_US" -v n="$ok" 'BEGIN { printf "%.2f", t * u / n }')
  stop_node "$dir"
  rm -rf "$dir"
  echo "$ingest_us $deliver_us $writer_us $dsp_us $hc_us"
}

A_IN=() A_DE=() B_IN=() B_DE=() A_W=() B_W=() A_D=() B_D=() A_H=() B_H=()
echo "ab: A=$A_BIN B=$B_BIN; $ROUNDS rounds, alternating; wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s 1 KiB POST"
for ((r = 1; r <= ROUNDS; r++)); do
  order="A B"
  ((r % 2 == 0)) && order="B A"
  for s in $order; do
    if [ "$s" = A ]; then read -r i d w dt h < <(side "$A_BIN"); A_IN+=("$i"); A_DE+=("$d"); A_W+=("$w"); A_D+=("$dt"); A_H+=("$h")
    else read -r i d w dt h < <(side "$B_BIN"); B_IN+=("$i"); B_DE+=("$d"); B_W+=("$w"); B_D+=("$dt"); B_H+=("$h"); fi
    echo "  round $r $s: $i us CPU per request (writer $w), $d us CPU per delivery (dispatch thread $dt, http client $h)"
  done
done
mai=$(median "${A_IN[@]}") mbi=$(median "${B_IN[@]}") mad=$(median "${A_DE[@]}") mbd=$(median "${B_DE[@]}")
echo "== medians of $ROUNDS rounds (load avg now $(cut -d' ' -f1-3 /proc/loadavg))"
printf '  ingest:   A %s us, B %s us per request  (B/A %.3f)\n' "$mai" "$mbi" "$(awk -v a="$mai" -v b="$mbi" 'BEGIN{print b/a}')"
printf '  delivery: A %s us, B %s us per delivery (B/A %.3f)\n' "$mad" "$mbd" "$(awk -v a="$mad" -v b="$mbd" 'BEGIN{print b/a}')"
printf '  writer thread per hook:      A %s us, B %s us\n' "$(median "${A_W[@]}")" "$(median "${B_W[@]}")"
printf '  dispatch thread per delivery: A %s us, B %s us\n' "$(median "${A_D[@]}")" "$(median "${B_D[@]}")"
printf '  http client per delivery:    A %s us, B %s us\n' "$(median "${A_H[@]}")" "$(median "${B_H[@]}")"
