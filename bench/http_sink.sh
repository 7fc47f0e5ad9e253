#!/usr/bin/env bash
# HTTP delivery cost benchmark: CPU per delivery of ankusa's HTTP sink (libcurl multi, as
# shipped) next to the floor on the same box, in the same run: a minimal HTTP/1.1
# keep-alive client on epoll sending the same request bytes to the same receiver (nginx
# answering the static 201 of bench/nginx.conf.in). The two modes alternate, RUNS times
# each; the medians and their ratio are printed. See bench/http_sink.c.
#
#   bash bench/http_sink.sh
#   RUNS=5 REQUESTS=200000 bash bench/http_sink.sh
#
# Environment:
#   RUNS         runs of each mode (3)          REQUESTS  deliveries per run (100000)
#   CONCURRENCY  requests outstanding (32: dispatch.concurrency's default)
#   BUILD        meson build dir (build)        NGINX     nginx binary (/usr/sbin/nginx)
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

bench_setup http_sink

nginx_static_start

SINK=() RAW=()
for ((r = 1; r <= RUNS; r++)); do
  # alternate which goes first, so neither always meets the box in the same phase
  if ((r % 2)); then order="sink raw"; else order="raw sink"; fi
  for mode in $order; do
    out=$("$BIN" "$mode" "$NGINX_PORT" "$CONCURRENCY" "$REQUESTS") || die "$mode run $r failed"
    us=${out#"$mode "}
    printf '  run %d  %-4s %7.2f us CPU per delivery\n' "$r" "$mode" "$us"
    if [ "$mode" = sink ]; then SINK+=("$us"); else RAW+=("$us"); fi
  done
done

S=$(median "${SINK[@]}")
R=$(median "${RAW[@]}")
echo
echo "== summary: $REQUESTS deliveries of 1 KiB per run, $CONCURRENCY outstanding, median of $RUNS runs"
echo "  date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); checkout $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
printf '  ankusa HTTP sink (libcurl multi)   %7.2f us CPU per delivery\n' "$S"
printf '  floor (HTTP/1.1 on epoll, raw)     %7.2f us CPU per delivery\n' "$R"
awk -v s="$S" -v r="$R" 'BEGIN { printf "  sink / floor: %.2f   (%.2f us above the floor)\n", s / r, s - r }'
