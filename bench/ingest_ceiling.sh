#!/usr/bin/env bash
# Where bench/ingest.sh's ratio goes: the same load (wrk, 64 connections, 1 KiB POST) on
# nginx's static 201 and on three ankusa nodes that differ only in what a commit does:
#
#   nostore  the writer takes the batch, assigns seqs and answers 201 without writing it:
#            the edge (http/ layer, suspend/resume), the handler and the writer queue
#   nosync   the batch is written to RocksDB without the fsync
#   durable  the real thing (as bench/ingest.sh's plain load)
#
# The first two are NOT durable: they exist only in the test build (`make test-build`,
# ANKUSA_TEST_COMMIT_MODE), and this script refuses to run them on any other binary. The
# loads alternate, each ankusa mode on a fresh node and data dir on the repository's
# filesystem, and the summary prints the median of each and its ratio to nginx.
#
#   bash bench/ingest_ceiling.sh              # 3 rounds of 10 s loads
#   ROUNDS=5 DURATION=8 bash bench/ingest_ceiling.sh
#
# Environment: ROUNDS (3), DURATION seconds per load (10), CONNECTIONS (64), THREADS (2),
# ANKUSA_BIN (build-test/ankusa), NGINX (/usr/sbin/nginx), KEEP_TMP=1, BENCH_TMP.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ANKUSA=${ANKUSA_BIN:-$REPO/build-test/ankusa}
NGINX=${NGINX:-/usr/sbin/nginx}
LUA=$REPO/bench/post1k.lua
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BENCH_NAME=ingest_ceiling.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive ROUNDS DURATION CONNECTIONS THREADS
[ -x "$ANKUSA" ] || die "$ANKUSA not found: run 'make test-build' first"
[ -x "$NGINX" ] || die "$NGINX not found: install nginx-light (scripts/deps.sh)"
command -v wrk >/dev/null || die "wrk not found: install wrk (scripts/deps.sh)"
bench_setup ingest-ceiling

# load URL: one wrk run; sets RPS and REQS, fails on any non-2xx or socket error
load() {
  local out=$TMP/wrk.txt wpid wrc=0
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" -s "$LUA" "$1" >"$out" 2>&1 &
  wpid=$!
  PIDS+=("$wpid")
  wait "$wpid" || wrc=$?
  forget_pid "$wpid"
  [ "$wrc" = 0 ] || { cat "$out" >&2; die "wrk failed against $1"; }
  RPS=$(awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$out")
  REQS=$(awk '/ requests in / { print $1 }' "$out")
  ! grep -q -e 'Non-2xx' -e 'Socket errors' "$out" || { cat "$out" >&2; die "errors in the load on $1"; }
}

ankusa_mode() { # ROUND MODE: one load on a fresh node; sets M_RPS and M_US (CPU per request)
  local dir=$TMP/$2-$1 pid t0 t1 env=()
  mkdir -p "$dir/data"
  cat >"$dir/ankusa.yml" <<EOF
node: {data_dir: $dir/data, roles: [edge, storage]}
log: {level: warning}
http: {port: $HTTP_PORT}
admin: {enabled: true, ip: 127.0.0.1, port: $ADMIN_PORT}
sources:
  bench:
    sinks: [{type: log}]
EOF
  [ "$2" = durable ] || env=(ANKUSA_TEST_COMMIT_MODE="$2")
  sync
  env "${env[@]}" "$ANKUSA" serve --config "$dir/ankusa.yml" >"$dir/ankusa.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_http "http://127.0.0.1:$HTTP_PORT/ready" 200 "$pid" 30 || { cat "$dir/ankusa.log" >&2; die "ankusa did not start"; }
  if [ "$2" != durable ] && ! grep -q 'commits are NOT durable' "$dir/ankusa.log"; then
    die "$ANKUSA ignored ANKUSA_TEST_COMMIT_MODE=$2: it is not a test build (make test-build)"
  fi
  t0=$(cpu_ticks "$pid")
  load "http://127.0.0.1:$HTTP_PORT/webhooks/bench"
  t1=$(cpu_ticks "$pid")
  stop_pid "$pid" 30 || die "ankusa ($2) did not exit cleanly"
  forget_pid "$pid"
  rm -rf "$dir/data"
  M_RPS=$RPS
  M_US=$(awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" -v n="$REQS" 'BEGIN { printf "%.2f", 1e6 * (b - a) / hz / n }')
}

declare -A R C
echo "ingest ceiling: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s -s bench/post1k.lua, $ROUNDS round(s); binary $ANKUSA"
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
for ((r = 1; r <= ROUNDS; r++)); do
  sync
  nginx_static_start
  load "http://127.0.0.1:$NGINX_PORT/webhooks/bench"
  nginx_static_stop
  R[nginx]+="$RPS "
  line="  round $r: nginx $RPS req/s"
  for mode in nostore nosync durable; do
    ankusa_mode "$r" "$mode"
    R[$mode]+="$M_RPS " C[$mode]+="$M_US "
    line+=" | $mode $M_RPS req/s ($M_US us/request)"
  done
  echo "$line"
done

# shellcheck disable=SC2086 # the arrays are space-separated lists of numbers
NR=$(median ${R[nginx]})
echo
echo "== summary (median of $ROUNDS rounds; load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after)"
printf '  %-44s %9.0f req/s\n' "nginx (static 201)" "$NR"
for mode in nostore nosync durable; do
  # shellcheck disable=SC2086
  m=$(median ${R[$mode]}) u=$(median ${C[$mode]})
  case $mode in
    nostore) what="ankusa, commit writes nothing (not durable)" ;;
    nosync) what="ankusa, commit not fsynced (not durable)" ;;
    durable) what="ankusa, 201 after fsync" ;;
  esac
  printf '  %-44s %9.0f req/s  %6.2f us/request  ratio to nginx %.3f\n' "$what" "$m" "$u" \
    "$(awk -v a="$m" -v n="$NR" 'BEGIN { print (n > 0) ? a / n : 0 }')"
done
