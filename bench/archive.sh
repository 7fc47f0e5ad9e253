#!/usr/bin/env bash
# The archive compactor under load: the hooks/s it archives next to the durable ingest
# rate of the same run, and what it costs the node, as an A/B of one binary with and
# without the storage role, in alternating rounds of one invocation (off then on, then on
# then off, ...), each side on a fresh data dir, medians per side.
#
#   make && ROUNDS=5 bash bench/archive.sh                  # LocalFS, ingest only
#   make && VARIANT=s3 ROUNDS=5 bash bench/archive.sh       # the same against s3rver
#   make && MODE=deliver ROUNDS=5 bash bench/archive.sh     # the default roles, delivering
#
# The two sides (MODE=ingest, the default):
#   off: roles [edge]           the source's sink is `log`, never run (no dispatcher)
#   on:  roles [edge, storage]  the same plus the compactor, archiving continuously
#        (storage.roll_ms ROLL_MS 1000, storage.interval_ms INTERVAL_MS 200, roll_bytes
#        16 MiB as shipped, so a segment is cut by size about every 0.4 s at 40k hooks/s)
# Why this isolation: the compactor is then the only difference between the sides. Ingest
# alone is also the strictest denominator: ~20-25 us of CPU per hook, against ~70 with
# delivery, whose own cost (~35-50 us, spread ±20 % here) would hide the compactor's, and
# whose backlog (the dispatcher keeps up with 0.7-0.8 of ingest, bench/deliver.sh) puts a
# different number of deliveries into each side's window. MODE=deliver runs the default
# roles instead, [edge, dispatch] against [edge, dispatch, storage], the http sink to an
# nginx answering a static 201 (as bench/ab.sh): there reclaim also waits for the
# compactor's cursor, which is part of what is measured; its CPU per hook includes the
# deliveries made in the window, so it is the noisier figure.
#
# Per side: wrk POSTs 1 KiB bodies (bench/post1k.lua) for DURATION s while /metrics is read
# every SAMPLE_MS (both sides, so both pay for the scrapes); then, on "on", the time until
# ankusa_queue_archive_pending is 0 and every 201 archived (the drain; "off" waits for its
# counts to hold still). Figures:
#   ingest/s      201s answered during the wrk run / DURATION
#   us/hook       the node's user+system CPU (/proc/PID/stat) from just before wrk to the
#                 end of the drain, / the 201s: every hook's archiving (MODE=deliver: and
#                 delivery, on both sides) is in it; the target
#                 is judged on this, on/off <= 1.15. "window" is the same over the wrk run
#                 alone (it leaves out the last ~roll_ms of archiving)
#   compactor     the ak-compactor thread's CPU over the same span, per hook (also the
#                 writer, ingest and rocksdb threads, bench/lib.sh thread_ticks)
#   archived/s    ankusa_compact_records_total's increase over the wrk run / DURATION
#   ratio         archived / ingested over the wrk run after its first WARM_S s (2): the
#                 slope of ankusa_compact_records_total against the 201 count, read in the
#                 same scrapes, so the saw of segment cuts averages out; >= 1.0 when the
#                 compactor keeps up (the whole run's archived / 201s, which starts from an
#                 empty archive and so ends a segment's latency behind, is printed beside it).
#                 Its resolution is a segment step (~13,500 hooks) against the hooks of the
#                 window: the median may sit up to KEEP_TOL (0.03) below 1.0, with pending
#                 bounded by two segments' worth of 1 KiB hooks (32,768), and still pass
#   pending       the highest ankusa_queue_archive_pending seen during the run, and at its end
#   drain         seconds from wrk's end until pending is 0 and every 201 archived
#   rest          the node's threads not named above (MODE=deliver: the dispatcher and the
#                 HTTP client's threads)
#
# VARIANT=local: the LocalFS store (<data_dir>/default/segments). VARIANT=s3: s3rver 3.7.1
# (.deps/npm, `npm install --prefix .deps/npm s3rver@3.7.1`, or S3RVER=path) on a free
# loopback port with bucket `bench`, storage.type s3 pointed at it (path style, region
# us-east-1, static credentials S3RVER/S3RVER); s3rver's own CPU per archived hook is
# printed too (it shares the two cores). Both are started and stopped by PID.
#
# Environment: VARIANT (local), MODE (ingest), ROUNDS (5), DURATION (10), CONNECTIONS (64),
# THREADS (2), ROLL_MS (1000), INTERVAL_MS (200), SAMPLE_MS (250), WARM_S (2), KEEP_TOL
# (0.03), BIN
# (build/ankusa), NGINX (/usr/sbin/nginx), S3RVER, KEEP_TMP=1, BENCH_TMP (bench/out; not
# a tmpfs). Exit status 1 when a check failed: a node died or did not start, a 201 was
# not archived after the drain (ankusa_compact_records_total < the 201s), the drain did
# not finish within DRAIN_MAX_S (120), wrk saw errors; 2 when the ratio or CPU target was
# missed and STRICT=1.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC2034 # read by bench/lib.sh
BENCH_NAME=archive.sh
VARIANT=${VARIANT:-local}
MODE=${MODE:-ingest}
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-10}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
ROLL_MS=${ROLL_MS:-1000}
INTERVAL_MS=${INTERVAL_MS:-200}
SAMPLE_MS=${SAMPLE_MS:-250}
WARM_S=${WARM_S:-2}
DRAIN_MAX_S=${DRAIN_MAX_S:-120}
KEEP_TOL=${KEEP_TOL:-0.03}
STRICT=${STRICT:-0}
BIN=${BIN:-$REPO/build/ankusa}
NGINX=${NGINX:-/usr/sbin/nginx}
S3RVER=${S3RVER:-$REPO/.deps/npm/node_modules/.bin/s3rver}
WRK=${WRK:-wrk}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive ROUNDS DURATION CONNECTIONS THREADS ROLL_MS SAMPLE_MS DRAIN_MAX_S
[[ $INTERVAL_MS =~ ^[0-9]+$ ]] || die "INTERVAL_MS must be an integer"
if ! [[ $WARM_S =~ ^[0-9]+$ ]] || ((WARM_S >= DURATION)); then die "WARM_S must be an integer below DURATION"; fi
[ -x "$BIN" ] || die "$BIN not found: run 'make' first"
command -v "$WRK" >/dev/null || die "wrk not found (scripts/deps.sh installs it)"
case $VARIANT in local | s3) ;; *) die "VARIANT must be local or s3 (got '$VARIANT')" ;; esac
case $MODE in
  ingest) ROLES_OFF='["edge"]' ROLES_ON='["edge", "storage"]' ;;
  deliver) ROLES_OFF='["edge", "dispatch"]' ROLES_ON='["edge", "dispatch", "storage"]'
    [ -x "$NGINX" ] || die "$NGINX not found (MODE=deliver delivers to it)" ;;
  *) die "MODE must be ingest or deliver (got '$MODE')" ;;
esac
TICK_US=$((1000000 / $(getconf CLK_TCK)))

bench_setup archive
[ "$MODE" = deliver ] && nginx_static_start

# ---------------------------------------------------------------- s3rver
S3_PORT="" S3_PID=""
if [ "$VARIANT" = s3 ]; then
  [ -x "$S3RVER" ] || die "s3rver not found at $S3RVER: npm install --prefix .deps/npm s3rver@3.7.1"
  S3_PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$TMP/s3rver"
  # s3rver pages listings with DES, which Node 20's OpenSSL 3 has only in its legacy provider
  NODE_OPTIONS=--openssl-legacy-provider "$S3RVER" --directory "$TMP/s3rver" --address 127.0.0.1 \
    --port "$S3_PORT" --silent --configure-bucket bench >"$TMP/s3rver.log" 2>&1 &
  S3_PID=$!
  PIDS+=("$S3_PID")
  wait_http "http://127.0.0.1:$S3_PORT/bench" 200 "$S3_PID" 30 ||
    { cat "$TMP/s3rver.log" >&2; die "s3rver did not serve bucket bench on 127.0.0.1:$S3_PORT"; }
  S3_VERSION=$(node -p 'require(process.argv[1]).version' "$(dirname "$(readlink -f "$S3RVER")")/../package.json" 2>/dev/null || echo '?')
fi

storage_json() {
  if [ "$VARIANT" = s3 ]; then
    printf '{"type": "s3", "roll_ms": %s, "interval_ms": %s, "s3": {"bucket": "bench", "region": "us-east-1", "endpoint": "http://127.0.0.1:%s", "access_key_id": "S3RVER", "secret_access_key": "S3RVER"}}' \
      "$ROLL_MS" "$INTERVAL_MS" "$S3_PORT"
  else
    printf '{"roll_ms": %s, "interval_ms": %s}' "$ROLL_MS" "$INTERVAL_MS"
  fi
}

config() { # DIR ROLES: the node's config (JSON is YAML); the storage section on both sides
  local sink='{"type": "log"}'
  [ "$MODE" = deliver ] && sink="{\"type\": \"http\", \"url\": \"http://127.0.0.1:$NGINX_PORT/webhooks/bench\"}"
  cat >"$1/node.yml" <<EOF
{"node": {"roles": $2, "data_dir": "$1/data"},
 "log": {"level": "warning"},
 "http": {"port": $HTTP_PORT}, "admin": {"port": $ADMIN_PORT},
 "egress": {"allow_http": true, "allow_cidrs": ["127.0.0.1/32"]},
 "storage": $(storage_json),
 "sources": {"bench": {"sinks": [$sink]}}}
EOF
}

# refuse at once what the binary cannot run (e.g. a storage.type it does not support yet)
mkdir -p "$TMP/check"
config "$TMP/check" "$ROLES_ON"
"$BIN" check-config --config "$TMP/check/node.yml" >"$TMP/check/out" 2>&1 ||
  { cat "$TMP/check/out" >&2; die "$BIN refuses the 'on' side's config (VARIANT=$VARIANT)"; }

metric() { # FILE NAME{labels}: one series' value (0 when absent)
  awk -v k="$2" '$1 == k { v = $2 } END { printf "%.0f", v + 0 }' "$1"
}
K201='ankusa_ingest_responses_total{instance="default",status="201"}'
KREC='ankusa_compact_records_total{instance="default"}'
KPEND='ankusa_queue_archive_pending{instance="default"}'
now_s() { date +%s.%N; }
per_hook() { awk -v t="$1" -v u="$TICK_US" -v n="$2" 'BEGIN { printf "%.2f", (n > 0 ? t * u / n : 0) }'; }
div() { awk -v a="$1" -v b="$2" -v f="${3:-%.3f}" 'BEGIN { printf f, (b > 0 ? a / b : 0) }'; }

start_node() { # DIR: NODE_PID
  "$BIN" serve --config "$1/node.yml" >>"$1/node.log" 2>&1 &
  NODE_PID=$!
  PIDS+=("$NODE_PID")
  wait_http "http://127.0.0.1:$HTTP_PORT/ready" 200 "$NODE_PID" 30 || { tail -20 "$1/node.log" >&2; die "node did not get ready"; }
}

scrape() { # FILE
  curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" >"$1" || die "GET /metrics failed (node alive: $(alive "$NODE_PID" && echo yes || echo no))"
}

# one side of one round; prints one line of figures:
# ingest/s us/hook us/hook(window) compactor writer ingest rocksdb other archived/s ratio
# ratio(whole) max_pending end_pending drain_s s3rver_us/archived
side() {
  local s=$1 dir roles t0 t1 t2 c0 w0 i0 r0 s30 s31 wpid wrc=0 m tw0 c201w c201 rec recw
  local maxp=0 p tdrain drain="-" tend i slope
  dir=$(mktemp -d "$TMP/$s.XXXXXX")
  roles=$ROLES_OFF
  [ "$s" = on ] && roles=$ROLES_ON
  config "$dir" "$roles"
  sync # the previous side's files out of writeback before this side's fsyncs
  start_node "$dir"
  m=$dir/m.txt
  t0=$(cpu_ticks "$NODE_PID") c0=$(thread_ticks "$NODE_PID" ak-compactor) w0=$(thread_ticks "$NODE_PID" ak-writer)
  i0=$(thread_ticks "$NODE_PID" ak-ingest) r0=$(thread_ticks "$NODE_PID" rocksdb)
  s30=0
  [ -n "$S3_PID" ] && s30=$(cpu_ticks "$S3_PID")
  tw0=$(now_s)
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" -s "$REPO/bench/post1k.lua" \
    "http://127.0.0.1:$HTTP_PORT/webhooks/bench" >"$dir/wrk.txt" 2>&1 &
  wpid=$!
  PIDS+=("$wpid")
  while alive "$wpid"; do
    sleep "$(awk -v m="$SAMPLE_MS" 'BEGIN { print m / 1000 }')"
    alive "$wpid" || break
    scrape "$m"
    p=$(metric "$m" "$KPEND")
    ((p > maxp)) && maxp=$p
    echo "$(awk -v a="$(now_s)" -v b="$tw0" 'BEGIN { printf "%.3f", a - b }') $(metric "$m" "$K201") $(metric "$m" "$KREC")" >>"$dir/samples"
  done
  wait "$wpid" || wrc=$?
  forget_pid "$wpid"
  t1=$(cpu_ticks "$NODE_PID")
  scrape "$m"
  tdrain=$(now_s)
  [ "$wrc" = 0 ] || { cat "$dir/wrk.txt" >&2; die "wrk failed (status $wrc)"; }
  grep -q 'Non-2xx\|Socket errors' "$dir/wrk.txt" && { grep 'Non-2xx\|Socket errors' "$dir/wrk.txt" >&2; ERRORS=1; }
  alive "$NODE_PID" || { tail -20 "$dir/node.log" >&2; die "node died during the load"; }
  c201w=$(metric "$m" "$K201") recw=$(metric "$m" "$KREC") p=$(metric "$m" "$KPEND")
  ((p > maxp)) && maxp=$p
  tend=$p
  echo "$DURATION $c201w $recw" >>"$dir/samples"
  # archived against ingested, both read in the same scrapes after WARM_S s: the slope of
  # a least-squares line through them, so the saw of segment cuts (a segment is ~13,500
  # hooks of 1 KiB) averages out over the run
  slope=$(awk -v w="$WARM_S" '$1 >= w { n++; x += $2; y += $3; xx += $2 * $2; xy += $2 * $3 }
    END { d = n * xx - x * x; if (n < 3 || d == 0) print "nan"; else printf "%.3f", (n * xy - x * y) / d }' "$dir/samples")
  [ "$slope" != nan ] || die "fewer than 3 samples after ${WARM_S}s (SAMPLE_MS too long?)"
  # the drain: "on" until nothing is pending and every 201 is archived; "off" until the
  # 201 count holds still (the answers to requests in flight when wrk stopped); with
  # MODE=deliver both sides also until every 201 was delivered, so each side's CPU holds
  # every hook's whole path
  local prev="" done_a done_d ok=0
  for ((i = 0; i < DRAIN_MAX_S * 20; i++)); do
    scrape "$m"
    c201=$(metric "$m" "$K201") rec=$(metric "$m" "$KREC") p=$(metric "$m" "$KPEND")
    done_a=1 done_d=1
    if [ "$s" = on ]; then
      ((p == 0 && rec >= c201)) || done_a=0
      ((done_a)) && [ "$drain" = - ] && drain=$(awk -v a="$(now_s)" -v b="$tdrain" 'BEGIN { printf "%.2f", a - b }')
    else
      [ "$c201" = "$prev" ] || done_a=0
      prev=$c201
    fi
    if [ "$MODE" = deliver ]; then
      ok=$(awk '/^ankusa_deliveries_total\{/ && /result="ok"/ { t += $2 } END { printf "%.0f", t + 0 }' "$m")
      ((ok >= c201)) || done_d=0
    fi
    ((done_a && done_d)) && break
    sleep 0.05
  done
  t2=$(cpu_ticks "$NODE_PID")
  [ "$MODE" = deliver ] && { ((ok >= c201)) || die "$s: delivered $ok of $c201 within ${DRAIN_MAX_S}s"; }
  local c r w ig o
  c=$(($(thread_ticks "$NODE_PID" ak-compactor) - c0)) w=$(($(thread_ticks "$NODE_PID" ak-writer) - w0))
  ig=$(($(thread_ticks "$NODE_PID" ak-ingest) - i0)) r=$(($(thread_ticks "$NODE_PID" rocksdb) - r0))
  o=$((t2 - t0 - c - w - ig - r)) # with MODE=deliver mostly ak-dispatch and ak-httpc*
  s31=0
  [ -n "$S3_PID" ] && s31=$(cpu_ticks "$S3_PID")
  if [ "$s" = on ]; then
    ((p == 0 && rec >= c201)) || die "on: after ${DRAIN_MAX_S}s $p hooks still pending, $rec archived of $c201 answered 201 (see $dir)"
    # every 201 must be archived (a few more may be: committed for a connection wrk closed)
    ((rec >= c201)) || die "on: $c201 answered 201 but only $rec archived"
    ((rec - c201 <= CONNECTIONS)) || die "on: $rec archived but only $c201 answered 201 (more than one per connection)"
  fi
  ((c201 > 0)) || die "$s: no 201 at all (see $dir/wrk.txt)"
  grep -q 'level=error' "$dir/node.log" && { echo "  !! $s: the node logged errors:" >&2; grep 'level=error' "$dir/node.log" | head -3 >&2; ERRORS=1; }
  stop_pid "$NODE_PID" 30 || die "$s: node exited non-zero on SIGTERM (see $dir/node.log)"
  forget_pid "$NODE_PID"
  [ "${KEEP_TMP:-0}" = 1 ] || rm -rf "$dir/data"
  echo "$(div "$c201w" "$DURATION" %.0f) $(per_hook $((t2 - t0)) "$c201") $(per_hook $((t1 - t0)) "$c201w")" \
    "$(per_hook "$c" "$c201") $(per_hook "$w" "$c201") $(per_hook "$ig" "$c201") $(per_hook "$r" "$c201") $(per_hook "$o" "$c201")" \
    "$(div "$recw" "$DURATION" %.0f) $slope $(div "$recw" "$c201w") $maxp $tend $drain" \
    "$(per_hook $((s31 - s30)) "$rec")"
}

# ---------------------------------------------------------------- the rounds
ERRORS=0
declare -A F # F[side,field] = space-separated values, one per round
FIELDS=(rate us win comp writer ingest rocks other arch ratio whole maxp endp drain s3)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD -- src meson.build 2>/dev/null || REV="$REV + uncommitted changes in src"
echo "archive.sh: $BIN ($REV), VARIANT=$VARIANT${S3_PORT:+ (s3rver ${S3_VERSION:-?} on 127.0.0.1:$S3_PORT, PID $S3_PID)}, MODE=$MODE"
echo "  off = roles $ROLES_OFF, on = roles $ROLES_ON; storage.roll_ms $ROLL_MS, interval_ms $INTERVAL_MS, roll_bytes 16 MiB"
echo "  $ROUNDS rounds alternating; wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s 1 KiB POST; data under $TMP ($(df -T "$TMP" | awk 'NR == 2 { print $2 }')); load average $LOAD_BEFORE"
for ((rd = 1; rd <= ROUNDS; rd++)); do
  order="off on"
  ((rd % 2 == 0)) && order="on off"
  for s in $order; do
    # in this shell, not a subshell: a failed check's die stops the nodes by PID
    side "$s" >"$TMP/figures"
    read -r -a v <"$TMP/figures"
    ((${#v[@]} == ${#FIELDS[@]})) || die "round $rd $s: no figures"
    for ((k = 0; k < ${#FIELDS[@]}; k++)); do F[$s,${FIELDS[k]}]+="${v[k]} "; done
    if [ "$s" = on ]; then
      printf '  round %d on:  %6s hooks/s ingested, %6s archived/s (ratio %s after %ss, %s whole run), %6.2f us/hook (window %s; compactor %s, writer %s, ingest %s, rocksdb %s, rest %s), pending max %s (end of load %s), drained in %s s%s\n' \
        "$rd" "${v[0]}" "${v[8]}" "${v[9]}" "$WARM_S" "${v[10]}" "${v[1]}" "${v[2]}" "${v[3]}" "${v[4]}" "${v[5]}" "${v[6]}" "${v[7]}" "${v[11]}" "${v[12]}" "${v[13]}" \
        "$([ -n "$S3_PID" ] && echo ", s3rver ${v[14]} us/archived hook")"
    else
      printf '  round %d off: %6s hooks/s ingested, %34s %6.2f us/hook (window %s; writer %s, ingest %s, rocksdb %s, rest %s)\n' \
        "$rd" "${v[0]}" "" "${v[1]}" "${v[2]}" "${v[4]}" "${v[5]}" "${v[6]}" "${v[7]}"
    fi
  done
done

stat3() { # values...: "median (min-max)"
  local md mn mx
  md=$(median "$@" | sed "s/\.000$//")
  mn=$(printf '%s\n' "$@" | sort -g | head -1) mx=$(printf '%s\n' "$@" | sort -g | tail -1)
  echo "$md ($mn-$mx)"
}
# shellcheck disable=SC2086 # the fields are space-separated lists
med() { median ${F[$1,$2]}; }
# shellcheck disable=SC2086
{
  CPU_RATIO=$(div "$(med on us)" "$(med off us)")
  WIN_RATIO=$(div "$(med on win)" "$(med off win)")
  RATES=$(div "$(med on rate)" "$(med off rate)")
  echo "== medians (min-max) of $ROUNDS rounds, VARIANT=$VARIANT MODE=$MODE; load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after"
  echo "  ingest, hooks/s:          off $(stat3 ${F[off,rate]}), on $(stat3 ${F[on,rate]})  (on/off $RATES)"
  echo "  CPU us per hook:          off $(stat3 ${F[off,us]}), on $(stat3 ${F[on,us]})  on/off $CPU_RATIO (target <= 1.15)"
  echo "    over the wrk run alone: off $(stat3 ${F[off,win]}), on $(stat3 ${F[on,win]})  on/off $WIN_RATIO"
  echo "    compactor thread:       on $(stat3 ${F[on,comp]})"
  echo "    writer threads:         off $(stat3 ${F[off,writer]}), on $(stat3 ${F[on,writer]})"
  echo "    ingest loops:           off $(stat3 ${F[off,ingest]}), on $(stat3 ${F[on,ingest]})"
  echo "    rocksdb threads:        off $(stat3 ${F[off,rocks]}), on $(stat3 ${F[on,rocks]})"
  echo "    the rest:               off $(stat3 ${F[off,other]}), on $(stat3 ${F[on,other]})"
  echo "  archived, hooks/s:        $(stat3 ${F[on,arch]})"
  echo "  archived / ingested:      $(stat3 ${F[on,ratio]}) after ${WARM_S}s (target >= 1.0); whole run $(stat3 ${F[on,whole]})"
  echo "  pending, max in the run:  $(stat3 ${F[on,maxp]}); at its end $(stat3 ${F[on,endp]})"
  echo "  drain after the load, s:  $(stat3 ${F[on,drain]})"
  [ -n "$S3_PID" ] && echo "  s3rver CPU us per archived hook: $(stat3 ${F[on,s3]})"
}
MISSED=0
if awk -v r="$CPU_RATIO" 'BEGIN { exit !(r <= 1.15) }'; then
  echo "  CPU: met"
else
  echo "  CPU: MISSED"
  MISSED=1
fi
# keeping up: the ratio at 1.0 within what a segment step allows (KEEP_TOL), and pending
# bounded: never more than two segments' worth of 1 KiB hooks (the one going out and the
# one filling)
# shellcheck disable=SC2086 # a space-separated list
R=$(med on ratio) PMAX=$(printf '%s\n' ${F[on,maxp]} | sort -g | tail -1)
BOUND=$((2 * 16777216 / 1024))
if awk -v r="$R" -v t="$KEEP_TOL" 'BEGIN { exit !(r >= 1.0 - t) }' && ((PMAX <= BOUND)); then
  echo "  keeping up: met (ratio $R: $(awk -v r="$R" 'BEGIN { print (r >= 1.0) ? ">= 1.0" : "within the tolerance" }'), KEEP_TOL $KEEP_TOL; pending at most $PMAX <= $BOUND, two segments)"
else
  echo "  keeping up: MISSED (ratio $R, tolerance $KEEP_TOL; pending at most $PMAX, bound $BOUND)"
  MISSED=1
fi
((ERRORS == 0)) || { echo "archive.sh: wrk saw errors or the node logged errors (see above)" >&2; exit 1; }
[ "$STRICT" = 1 ] && ((MISSED)) && exit 2
exit 0
