#!/usr/bin/env bash
# What backups cost ingest (issue 24): the node's CPU per hook with `backup` every 5 s
# against the same node without it, the ingest rate beside it, and /ready probed all
# through, as an A/B of one binary in alternating rounds of one invocation (off then on,
# then on then off, ...), each side a fresh node on a fresh data dir, medians per side.
#
#   make && ROUNDS=5 bash bench/backup.sh
#
# The two sides, both roles [edge] (the source's sink is `log`, never run: no dispatcher):
#   off: no backup section
#   on:  backup: {enabled: true, interval_ms: INTERVAL_MS (5000), keep: 3, signing_key,
#        store: {type: local, root: <the side's dir>/backup, beside its data dir},
#        verify_interval_ms: 0}
# Why ingest only: the backup is then the only difference between the sides, and ingest
# alone is the strictest denominator (~20-45 us of CPU per hook, against ~70-80 with
# delivery, whose own cost and its ±20 % spread here would hide the backup's). The first
# run is an interval after the node's start, each next one an interval after the end of
# the previous, so the default DURATION of 15 s holds 2-3 backups: 2 here (ending ~5.3 and
# ~10.5 s after the start), the third (~15.7 s) just after wrk's end when the runs take
# ~0.2 s; with slower runs or a later wrk start it falls inside. The last backup on the
# clean stop is after the measured window, not in it. The local store is on the same filesystem as the data
# dir (bench/out: the repo's disk, real fsync), so the copy is real I/O, not a network.
#
# Per side: wrk POSTs 1 KiB bodies (bench/post1k.lua) for DURATION s, while a background
# loop GETs /ready every PROBE_MS (50) with curl (1 s timeout), on both sides. Figures:
#   ingest/s   201s (ankusa_ingest_responses_total, read right after wrk) / DURATION
#   us/hook    the node's user+system CPU (/proc/PID/stat) from just before wrk to its
#              end, / the 201s: the target is judged on this, on/off <= 1.10
#   backup     the ak-backup thread's CPU over the same span, per hook: the checkpoint
#              (links, the copies of MANIFEST, OPTIONS and the WAL), the SHA-256 of new
#              files, the copy to the store, the manifest, the purge; and its system part
#              (the copies and fsyncs; the user part is mostly the hashing). Beside it the
#              writer threads (ak-writer), the ingest loops (ak-ingest), RocksDB's
#              background threads (rocksdb:*: flushes and compactions, among them the
#              checkpoint's flush when the WAL is over 16 MiB) and the rest (the admin
#              listener, the backup's HTTP client threads, ...), all read in one pass over /proc
#   backups    the `msg="backup taken" target=primary` lines of the node's log (level info
#              on both sides: it logs nothing per hook) stamped within wrk's run, with
#              the MiB uploaded (ankusa_backup_uploaded_bytes_total) and the last run's
#              seconds (ankusa_backup_duration_seconds) at wrk's end; a run with a result
#              other than ok in ankusa_backup_runs_total fails the run
#   /ready     the probes' count, those not answered 200 (any > 0 fails the run: the
#              issue asks that it never fails during a checkpoint) and the slowest answer
#
# BODY=random: bodies the store cannot compress (see below) instead of post1k.lua's fixed
# one, which RocksDB shrinks ~10x, so that every backup copies and hashes ~10x less.
#
# Environment: ROUNDS (5), DURATION (15), CONNECTIONS (64), THREADS (2), INTERVAL_MS
# (5000), BODY (fixed), PROBE_MS (50), STRICT=1 (exit 1 when on/off misses 1.10), BIN (build/ankusa),
# KEEP_TMP=1, BENCH_TMP (bench/out; not a tmpfs). Exit status 1 when a check failed: a
# node died or did not start, wrk saw errors, the node logged errors, /ready answered
# other than 200, a backup run did not end ok, or "on" took no backup in the window.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck disable=SC2034 # read by bench/lib.sh
BENCH_NAME=backup.sh
ROUNDS=${ROUNDS:-5}
DURATION=${DURATION:-15}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
INTERVAL_MS=${INTERVAL_MS:-5000}
BODY=${BODY:-fixed}
PROBE_MS=${PROBE_MS:-50}
STRICT=${STRICT:-0}
TARGET=1.10
BIN=${BIN:-$REPO/build/ankusa}
WRK=${WRK:-wrk}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive ROUNDS DURATION CONNECTIONS THREADS INTERVAL_MS PROBE_MS
((INTERVAL_MS >= 100)) || die "INTERVAL_MS must be at least 100 (backup.interval_ms's minimum)"
[ -x "$BIN" ] || die "$BIN not found: run 'make' first"
command -v "$WRK" >/dev/null || die "wrk not found (scripts/deps.sh installs it)"
TICK_US=$((1000000 / $(getconf CLK_TCK)))
# a fixed, bench-only key (>= 32 bytes): these backups are deleted with the side's dir
SIGNING_KEY=bench-backup-signing-key-0123456789abcdef

bench_setup backup

# the load's script: bench/post1k.lua (one fixed body, which the store's compression
# shrinks ~10x: every backup copies and hashes that much less), or BODY=random: 1,024
# distinct bodies of the same size per wrk thread, random printable characters (~6.5 bits
# a byte), cycled: 1 MiB between two equal bodies, beyond any block's compression window
case $BODY in
  fixed) LUA=$REPO/bench/post1k.lua ;;
  random) LUA=$TMP/random1k.lua
    cat >"$LUA" <<'LUAEOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local pool, n, i = {}, 1024, 0
function init(args)
  math.randomseed(os.time() + math.floor(os.clock() * 1e6) + tonumber(tostring({}):match("0x(%x+)") or "0", 16) % 100000)
  local chars = {}
  for c = 0x21, 0x7e do
    if c ~= 0x22 and c ~= 0x5c then chars[#chars + 1] = string.char(c) end
  end
  for k = 1, n do
    local t = {}
    for j = 1, 1024 - 11 do t[j] = chars[math.random(#chars)] end
    pool[k] = '{"pad":"' .. table.concat(t) .. '"}'
  end
end
function request()
  i = i % n + 1
  return wrk.format(nil, nil, nil, pool[i])
end
LUAEOF
    ;;
  *) die "BODY must be fixed or random (got '$BODY')" ;;
esac

config() { # DIR SIDE: the node's config (JSON is YAML)
  local backup=""
  [ "$2" = on ] && backup=",
 \"backup\": {\"enabled\": true, \"interval_ms\": $INTERVAL_MS, \"keep\": 3, \"signing_key\": \"$SIGNING_KEY\",
            \"store\": {\"type\": \"local\", \"root\": \"$1/backup\"}, \"verify_interval_ms\": 0}"
  cat >"$1/node.yml" <<EOF
{"node": {"roles": ["edge"], "data_dir": "$1/data"},
 "log": {"level": "info"},
 "http": {"port": $HTTP_PORT}, "admin": {"port": $ADMIN_PORT},
 "sources": {"bench": {"sinks": [{"type": "log"}]}}$backup}
EOF
}

# refuse at once a config the binary cannot run
mkdir -p "$TMP/check"
config "$TMP/check" on
"$BIN" check-config --config "$TMP/check/node.yml" >"$TMP/check/out" 2>&1 ||
  { cat "$TMP/check/out" >&2; die "$BIN refuses the 'on' side's config"; }

metric() { # FILE NAME{labels}: one series' value (0 when absent)
  awk -v k="$2" '$1 == k { v = $2 } END { printf "%.0f", v + 0 }' "$1"
}
K201='ankusa_ingest_responses_total{instance="default",status="201"}'
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

# probe_ready OUT STOPFILE: GET /ready every PROBE_MS (on a fixed schedule: a probe that
# took longer is followed at once by the next) until STOPFILE exists; one line per probe,
# "<status> <seconds>" (000 when curl got no answer within 1 s)
probe_ready() {
  local now next wait_us
  next=${EPOCHREALTIME/./}
  while [ ! -e "$2" ]; do
    curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 1 "http://127.0.0.1:$HTTP_PORT/ready" >>"$1" || true
    next=$((next + PROBE_MS * 1000))
    now=${EPOCHREALTIME/./}
    wait_us=$((next - now))
    if ((wait_us > 0)); then sleep "$(printf '%d.%06d' $((wait_us / 1000000)) $((wait_us % 1000000)))"; else next=$now; fi
  done
}

# snap PID: one pass over /proc (so the figures are of one instant): the process's
# user+system ticks, then those of its threads named ak-backup*, ak-writer*, ak-ingest*,
# rocksdb*, then ak-backup*'s system ticks alone
snap() {
  awk -v proc="/proc/$1/stat" '{
    i = index($0, "("); j = match($0, /\) [A-Za-z] /); name = substr($0, i + 1, j - i - 1)
    split(substr($0, j + 2), f, " "); t = f[12] + f[13]
    if (FILENAME == proc) { tot = t; next }
    if (name ~ /^ak-backup/) { b += t; bs += f[13] }
    else if (name ~ /^ak-writer/) w += t
    else if (name ~ /^ak-ingest/) g += t
    else if (name ~ /^rocksdb/) r += t
  } END { printf "%d %d %d %d %d %d\n", tot, b, w, g, r, bs }' /proc/"$1"/stat /proc/"$1"/task/*/stat 2>/dev/null
}

# backups_in LOG FROM TO: "backup taken" lines of the primary store whose ts is within
# [FROM, TO] (epoch seconds)
backups_in() {
  "$PY" - "$@" <<'PYEOF'
import sys, datetime
log, lo, hi = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
n = 0
for line in open(log, errors="replace"):
    if 'msg="backup taken"' in line and "target=primary" in line and line.startswith("ts="):
        ts = datetime.datetime.strptime(line[3:line.index(" ")], "%Y-%m-%dT%H:%M:%S.%fZ")
        t = ts.replace(tzinfo=datetime.timezone.utc).timestamp()
        n += lo <= t <= hi
print(n)
PYEOF
}

# one side of one round; prints one line of figures:
# ingest/s us/hook backup writer ingest rocksdb rest backups probes ready_bad ready_max_ms
# uploaded_MiB last_run_s backup_sys
side() {
  local s=$1 dir wpid ppid wrc=0 m c201 runs=0 bad nprobe maxms i rest mb=0 secs=0 ws we
  local -a th0 th1 d
  dir=$(mktemp -d "$TMP/$s.XXXXXX")
  config "$dir" "$s"
  sync # the previous side's files out of writeback before this side's fsyncs
  start_node "$dir"
  m=$dir/m.txt
  probe_ready "$dir/ready.txt" "$dir/probe.stop" &
  ppid=$!
  PIDS+=("$ppid")
  ws=$EPOCHREALTIME
  read -r -a th0 < <(snap "$NODE_PID")
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d"${DURATION}s" -s "$LUA" \
    "http://127.0.0.1:$HTTP_PORT/webhooks/bench" >"$dir/wrk.txt" 2>&1 &
  wpid=$!
  PIDS+=("$wpid")
  wait "$wpid" || wrc=$?
  forget_pid "$wpid"
  read -r -a th1 < <(snap "$NODE_PID")
  we=$EPOCHREALTIME
  touch "$dir/probe.stop"
  wait "$ppid" || true
  forget_pid "$ppid"
  scrape "$m"
  [ "$wrc" = 0 ] || { cat "$dir/wrk.txt" >&2; die "wrk failed (status $wrc)"; }
  grep -q 'Non-2xx\|Socket errors' "$dir/wrk.txt" && { grep 'Non-2xx\|Socket errors' "$dir/wrk.txt" >&2; ERRORS=1; }
  alive "$NODE_PID" || { tail -20 "$dir/node.log" >&2; die "node died during the load"; }
  c201=$(metric "$m" "$K201")
  ((c201 > 0)) || die "$s: no 201 at all (see $dir/wrk.txt)"
  if [ "$s" = on ]; then
    mb=$(awk '/^ankusa_backup_uploaded_bytes_total\{/ { t += $2 } END { printf "%.1f", t / 1048576 }' "$m")
    secs=$(awk '/^ankusa_backup_duration_seconds\{/ { printf "%.2f", $2 }' "$m")
    [ -n "$secs" ] || secs=0
    local notok
    notok=$(awk '/^ankusa_backup_runs_total\{/ && !/result="ok"/ { t += $2 } END { printf "%.0f", t + 0 }' "$m")
    ((notok == 0)) || { echo "  !! on: $notok backup runs did not end ok (see $dir/node.log)" >&2; ERRORS=1; }
  fi
  nprobe=$(wc -l <"$dir/ready.txt")
  bad=$(awk '$1 != "200" { n++ } END { print n + 0 }' "$dir/ready.txt")
  maxms=$(awk '{ if ($2 > m) m = $2 } END { printf "%.0f", m * 1000 }' "$dir/ready.txt")
  ((bad == 0)) || { echo "  !! $s: /ready answered other than 200 $bad times of $nprobe:" >&2; awk '$1 != "200"' "$dir/ready.txt" | sort | uniq -c | head -5 >&2; ERRORS=1; }
  grep -q 'level=error' "$dir/node.log" && { echo "  !! $s: the node logged errors:" >&2; grep 'level=error' "$dir/node.log" | head -3 >&2; ERRORS=1; }
  stop_pid "$NODE_PID" 60 || die "$s: node exited non-zero on SIGTERM (see $dir/node.log)"
  forget_pid "$NODE_PID"
  if [ "$s" = on ]; then
    runs=$(backups_in "$dir/node.log" "$ws" "$we")
    ((runs > 0)) || { echo "  !! on: no backup taken during the ${DURATION}s run" >&2; ERRORS=1; }
  fi
  [ "${KEEP_TMP:-0}" = 1 ] || rm -rf "$dir/data" "$dir/backup"
  for i in 0 1 2 3 4 5; do d[i]=$((th1[i] - th0[i])); done
  rest=$((d[0] - d[1] - d[2] - d[3] - d[4]))
  echo "$(div "$c201" "$DURATION" %.0f) $(per_hook "${d[0]}" "$c201")" \
    "$(per_hook "${d[1]}" "$c201") $(per_hook "${d[2]}" "$c201") $(per_hook "${d[3]}" "$c201") $(per_hook "${d[4]}" "$c201") $(per_hook "$rest" "$c201")" \
    "$runs $nprobe $bad $maxms $mb $secs $(per_hook "${d[5]}" "$c201")"
}

# ---------------------------------------------------------------- the rounds
ERRORS=0
declare -A F # F[side,field] = space-separated values, one per round
FIELDS=(rate us backup writer ingest rocks other runs probes bad maxms mb secs bsys)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD -- src meson.build 2>/dev/null || REV="$REV + uncommitted changes in src"
echo "backup.sh: $BIN ($REV)"
echo "  off = roles [edge], no backup; on = the same with backup every ${INTERVAL_MS} ms to a local store beside the data dir (keep 3, no read-back)"
echo "  $ROUNDS rounds alternating; wrk -t$THREADS -c$CONNECTIONS -d${DURATION}s 1 KiB POST (BODY=$BODY); /ready every ${PROBE_MS} ms; data under $TMP ($(df -T "$TMP" | awk 'NR == 2 { print $2 }')); load average $LOAD_BEFORE"
for ((rd = 1; rd <= ROUNDS; rd++)); do
  order="off on"
  ((rd % 2 == 0)) && order="on off"
  for s in $order; do
    # in this shell, not a subshell: a failed check's die stops the node by PID
    side "$s" >"$TMP/figures"
    read -r -a v <"$TMP/figures"
    ((${#v[@]} == ${#FIELDS[@]})) || die "round $rd $s: no figures"
    for ((k = 0; k < ${#FIELDS[@]}; k++)); do F[$s,${FIELDS[k]}]+="${v[k]} "; done
    printf '  round %d %-3s %6s hooks/s, %6.2f us/hook (ak-backup %s, of it system %s; writer %s, ingest %s, rocksdb %s, rest %s), %s backups (%s MiB uploaded, the last in %s s), /ready %s probes (one per %s ms): %s not 200, slowest %s ms\n' \
      "$rd" "$s:" "${v[0]}" "${v[1]}" "${v[2]}" "${v[13]}" "${v[3]}" "${v[4]}" "${v[5]}" "${v[6]}" "${v[7]}" "${v[11]}" "${v[12]}" "${v[8]}" "$(div $((DURATION * 1000)) "${v[8]}" %.0f)" "${v[9]}" "${v[10]}"
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
  RATES=$(div "$(med on rate)" "$(med off rate)")
  BAD=$(printf '%s\n' ${F[off,bad]} ${F[on,bad]} | awk '{ t += $1 } END { print t + 0 }')
  echo "== medians (min-max) of $ROUNDS rounds; load average $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after"
  echo "  ingest, hooks/s:     off $(stat3 ${F[off,rate]}), on $(stat3 ${F[on,rate]})  (on/off $RATES)"
  echo "  CPU us per hook:     off $(stat3 ${F[off,us]}), on $(stat3 ${F[on,us]})  on/off $CPU_RATIO (target <= $TARGET)"
  echo "    ak-backup thread:  on $(stat3 ${F[on,backup]}), of it system time $(stat3 ${F[on,bsys]})"
  echo "    writer threads:    off $(stat3 ${F[off,writer]}), on $(stat3 ${F[on,writer]})"
  echo "    ingest loops:      off $(stat3 ${F[off,ingest]}), on $(stat3 ${F[on,ingest]})"
  echo "    rocksdb threads:   off $(stat3 ${F[off,rocks]}), on $(stat3 ${F[on,rocks]})"
  echo "    the rest:          off $(stat3 ${F[off,other]}), on $(stat3 ${F[on,other]})"
  echo "  backups in the run:  on $(stat3 ${F[on,runs]}); uploaded, MiB $(stat3 ${F[on,mb]}); the last run, s $(stat3 ${F[on,secs]})"
  echo "  /ready not 200:      $BAD of $(printf '%s\n' ${F[off,probes]} ${F[on,probes]} | awk '{ t += $1 } END { print t + 0 }') probes; slowest, ms: off $(stat3 ${F[off,maxms]}), on $(stat3 ${F[on,maxms]})"
}
MISSED=0
if awk -v r="$CPU_RATIO" -v t="$TARGET" 'BEGIN { exit !(r <= t) }'; then
  echo "  CPU: met"
else
  echo "  CPU: MISSED"
  MISSED=1
fi
((ERRORS == 0)) || { echo "backup.sh: a check failed (wrk or /ready errors, node errors, a backup run not ok; see above)" >&2; exit 1; }
[ "$STRICT" = 1 ] && ((MISSED)) && exit 1
exit 0
