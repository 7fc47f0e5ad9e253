#!/usr/bin/env bash
# Direct-mode benchmark (wal.type none, docs/direct.md): ankusa's 201/s when every hook is
# published to one HTTP receiver inside the request, next to that receiver's own rate under
# the same load, in the same run. The receiver is nginx answering the static 201 of
# bench/nginx.conf.in; ankusa's source has one http sink pointing at it, so each ankusa 201
# is one request to nginx plus ankusa's own work. The two loads alternate RUNS times
# (receiver, ankusa, receiver, ...) and the medians and their ratio are printed.
#
#   bash bench/direct.sh
#   RUNS=5 DURATION=10 bash bench/direct.sh
#
# Environment:
#   RUNS         rounds of each load (5)         DURATION     seconds per wrk run (10)
#   CONNECTIONS  wrk connections (64)            THREADS      wrk threads (2)
#   ANKUSA_BIN   binary under test (build/ankusa)  NGINX  nginx binary (/usr/sbin/nginx)
#   KEEP_TMP=1   keep the temporary directory    BENCH_TMP    its parent (bench/out)
#
# Exit status 1 when a server did not start, wrk failed, or a load saw non-2xx answers.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-5}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ANKUSA=${ANKUSA_BIN:-$REPO/build/ankusa}
NGINX=${NGINX:-/usr/sbin/nginx}
WRK=${WRK:-wrk}
LUA=$REPO/bench/post1k.lua
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BENCH_NAME=direct.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive RUNS DURATION CONNECTIONS THREADS
[ -x "$ANKUSA" ] || die "$ANKUSA not found: run 'make' first"
[ -x "$NGINX" ] || die "$NGINX not found: install nginx-light (scripts/deps.sh)"
command -v "$WRK" >/dev/null || die "wrk not found: install wrk (scripts/deps.sh)"

bench_setup direct
nginx_static_start

# load URL OUT: one wrk run; prints its requests/s, dies on non-2xx or a failed run
load() {
  local url=$1 out=$2 wpid wrc=0 non2xx
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" -s "$LUA" "$url" >"$out" 2>&1 &
  wpid=$!
  PIDS+=("$wpid")
  wait "$wpid" || wrc=$?
  forget_pid "$wpid"
  [ "$wrc" = 0 ] || { cat "$out" >&2; die "wrk failed against $url (status $wrc)"; }
  non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
  [ -z "$non2xx" ] || { cat "$out" >&2; die "$url answered $non2xx non-2xx responses"; }
  awk '/^Requests\/sec:/ { printf "%.0f", $2 }' "$out"
}

cat >"$TMP/ankusa.yml" <<EOF
node: {data_dir: "$TMP/data"}
log: {level: warning}
http: {port: $HTTP_PORT}
admin: {enabled: true, ip: 127.0.0.1, port: $ADMIN_PORT}
listener: {drain_delay_ms: 0}
egress: {allow_http: true, allow_cidrs: [127.0.0.0/8]}
wal: {type: none}
sources:
  bench:
    sinks:
      - {type: http, url: "http://127.0.0.1:$NGINX_PORT/hook"}
EOF
"$ANKUSA" serve --config "$TMP/ankusa.yml" >"$TMP/ankusa.log" 2>&1 &
APID=$!
PIDS+=("$APID")
wait_http "http://127.0.0.1:$HTTP_PORT/ready" 200 "$APID" 20 || { cat "$TMP/ankusa.log" >&2; die "ankusa did not start"; }

echo "direct-mode benchmark: wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s -s bench/post1k.lua, $RUNS alternating rounds"
RX=() AK=() RT=()
for ((i = 1; i <= RUNS; i++)); do
  r=$(load "http://127.0.0.1:$NGINX_PORT/webhooks/bench" "$TMP/wrk-rx-$i.txt")
  a=$(load "http://127.0.0.1:$HTTP_PORT/webhooks/bench" "$TMP/wrk-ankusa-$i.txt")
  alive "$APID" || { cat "$TMP/ankusa.log" >&2; die "ankusa died during round $i"; }
  t=$(awk -v a="$a" -v r="$r" 'BEGIN { printf "%.3f", a / r }')
  RX+=("$r") AK+=("$a") RT+=("$t")
  printf '  round %d: receiver %8d req/s   ankusa (wal none, 1 http sink) %8d 201/s   ratio %s\n' "$i" "$r" "$a" "$t"
done
MR=$(median "${RX[@]}")
MA=$(median "${AK[@]}")
stop_pid "$APID" 30 || die "ankusa did not stop cleanly"
forget_pid "$APID"
echo "== summary (medians of $RUNS rounds)"
echo "  receiver (nginx static 201): $MR req/s"
echo "  ankusa wal.type none -> that receiver: $MA 201/s"
awk -v a="$MA" -v r="$MR" 'BEGIN { printf "  ratio of the medians ankusa / receiver: %.3f\n", a / r }'
echo "  median of the per-round ratios: $(median "${RT[@]}")"
