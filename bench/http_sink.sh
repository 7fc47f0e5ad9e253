#!/usr/bin/env bash
# HTTP delivery cost benchmark: CPU per delivery of ankusa's HTTP sink (src/sinks/http.c on
# the shared client src/net/httpc.c, as shipped) next to two yardsticks on the same box, in
# the same run: a bare libcurl multi loop (one thread, epoll, handles and one header list
# reused: what libcurl itself costs) and a minimal HTTP/1.1 keep-alive client on epoll (the
# floor: the kernel's loopback TCP). All send the same request bytes to the same receiver
# (nginx answering the static 201 of bench/nginx.conf.in). The modes alternate, in a
# rotating order, RUNS times each; the medians and the sink's distance to each are printed.
# See bench/http_sink.c.
#
#   bash bench/http_sink.sh
#   RUNS=5 REQUESTS=200000 bash bench/http_sink.sh
#   BASE_BUILD=/path/to/other/build RUNS=5 bash bench/http_sink.sh   # A/B: adds "base"
#
# Environment:
#   RUNS         runs of each mode (3)          REQUESTS  deliveries per run (100000)
#   CONCURRENCY  requests outstanding (32: dispatch.concurrency's default)
#   BUILD        meson build dir (build)        NGINX     nginx binary (/usr/sbin/nginx)
#   BASE_BUILD   a second build dir whose http_sink runs as mode "base" (its sink),
#                to compare two checkouts in one invocation; built there the same way
#   MODES        modes to run ("sink curl raw", plus "base" with BASE_BUILD)
#   BENCH_TMP    parent of the temporary directory (bench/out)
#
# Builds the program on demand with `ninja -C build http_sink` (not part of `make`).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-100000}
CONCURRENCY=${CONCURRENCY:-32}
BUILD=${BUILD:-$REPO/build}
NGINX=${NGINX:-/usr/sbin/nginx}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BENCH_NAME=http_sink.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive RUNS REQUESTS CONCURRENCY
[ -x "$NGINX" ] || die "$NGINX not found: install nginx-light (scripts/deps.sh)"
[ -f "$BUILD/build.ninja" ] || die "$BUILD is not a meson build dir: run 'make' first"
ninja -C "$BUILD" http_sink >/dev/null || die "building http_sink failed (ninja -C $BUILD http_sink)"
BIN=$BUILD/http_sink
BASE_BUILD=${BASE_BUILD:-}
if [ -n "$BASE_BUILD" ]; then
  [ -f "$BASE_BUILD/build.ninja" ] || die "$BASE_BUILD is not a meson build dir"
  ninja -C "$BASE_BUILD" http_sink >/dev/null || die "building http_sink failed in $BASE_BUILD"
  MODES=${MODES:-base sink curl raw}
else
  MODES=${MODES:-sink curl raw}
fi
read -r -a MODE_LIST <<<"$MODES"

bench_setup http_sink

nginx_static_start

declare -A RES=()
NM=${#MODE_LIST[@]}
for ((r = 1; r <= RUNS; r++)); do
  # rotate the order, so no mode always meets the box in the same phase
  for ((k = 0; k < NM; k++)); do
    mode=${MODE_LIST[$(((k + r - 1) % NM))]}
    bin=$BIN arg=$mode
    if [ "$mode" = base ]; then bin=$BASE_BUILD/http_sink arg=sink; fi
    out=$("$bin" "$arg" "$NGINX_PORT" "$CONCURRENCY" "$REQUESTS") || die "$mode run $r failed"
    us=${out#"$arg "}
    printf '  run %d  %-4s %7.2f us CPU per delivery\n' "$r" "$mode" "$us"
    RES[$mode]="${RES[$mode]:-} $us"
  done
done

declare -A MED=()
for mode in "${MODE_LIST[@]}"; do
  # shellcheck disable=SC2086
  MED[$mode]=$(median ${RES[$mode]})
done
echo
echo "== summary: $REQUESTS deliveries of 1 KiB per run, $CONCURRENCY outstanding, median of $RUNS runs"
echo "  date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); checkout $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
label() {
  case $1 in
    sink) echo "ankusa HTTP sink ($BUILD)" ;;
    base) echo "base HTTP sink ($BASE_BUILD)" ;;
    curl) echo "bare libcurl multi (one thread, epoll)" ;;
    curlp) echo "bare libcurl multi (perform + poll)" ;;
    raw) echo "floor (HTTP/1.1 on epoll, raw)" ;;
  esac
}
for mode in "${MODE_LIST[@]}"; do
  printf '  %-44s %7.2f us CPU per delivery   runs:%s\n' "$(label "$mode")" "${MED[$mode]}" "${RES[$mode]}"
done
for y in curl curlp raw; do
  [ -n "${MED[$y]:-}" ] || continue
  for x in sink base; do
    [ -n "${MED[$x]:-}" ] || continue
    awk -v s="${MED[$x]}" -v r="${MED[$y]}" -v x="$x" -v y="$y" \
      'BEGIN { printf "  %s - %s: %+.2f us (%s / %s %.2f)\n", x, y, s - r, x, y, s / r }'
  done
done
if [ -n "${MED[base]:-}" ] && [ -n "${MED[sink]:-}" ]; then
  awk -v a="${MED[base]}" -v b="${MED[sink]}" 'BEGIN { printf "  sink / base: %.3f\n", b / a }'
fi
