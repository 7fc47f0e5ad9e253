#!/usr/bin/env bash
# Boot benchmark: the time from process start to `/ready` = 200 with PENDING hooks waiting
# for delivery, against the same binary booting an empty data dir in the same run.
#
#   bash bench/boot.sh                                   # 1,000,000 pending, 5 rounds
#   PENDING=100000 ROUNDS=3 bash bench/boot.sh           # a quicker look
#   ANKUSA_BIN=/tmp/base/build/ankusa ANKUSA_BIN_B=build/ankusa bash bench/boot.sh   # A/B
#
# Fill (once per binary, with that binary, so a binary that changes the store layout
# reads a store it wrote): the node with roles [edge] (no dispatcher, no compactor) and one
# source whose one http sink points at a closed loopback port; wrk POSTs BODY-byte bodies,
# capped by a lua script and stopped when ankusa_store_hooks reaches PENDING (a few dozen
# more at most); SIGTERM. Then one untimed warm-up boot of that store with the dispatcher
# (it pays the WAL replay of the fill once, so round 1 is like the others), SIGTERM.
#
# Rounds (ROUNDS, alternating: A then B, then B then A, ...; within a side, pending and
# baseline alternate the same way):
#   pending:  the filled data dir started with roles [edge, dispatch, storage], the sink
#             still pointing at the closed port (so nothing drains: every attempt is
#             refused and rescheduled); the time from just before exec to the first
#             GET /ready = 200 on the ingest port (polled every 10 ms: ~15 ms resolution);
#             SIGTERM at once (listener.drain_delay_ms 0: no load balancer to wait for).
#   baseline: the same binary and the same config on an empty data dir (made fresh per
#             round, so it includes creating the store).
# Printed per round: both times, their difference, and what the node logged about its
# load: the dispatcher's `due index loaded rows=.. seconds=..` (plus, on store layout 2, its
# `hook log loaded pending_hooks=.. seconds=..`: the two are added), the store's
# `wal_replay_seconds=..` (and `dedupe index loaded`, if present). Then medians per side.
#
# Checks (exit 1 when one fails): the fill stored at least PENDING hooks; each pending
# boot's due index (and hook log) holds at least PENDING (when the node logs them); every node
# became ready within READY_TIMEOUT and exited 0 on SIGTERM without an error line.
#
# Environment:
#   PENDING      hooks stored before the timed boots (1000000)   ROUNDS  rounds (5)
#   BODY         body bytes per hook (256)                       CONNECTIONS  wrk connections (64)
#   THREADS      wrk threads (2)                                 READY_TIMEOUT  seconds to ready (600)
#   FILL_TIMEOUT seconds the fill may take (1800)
#   ANKUSA_BIN   binary A (build/ankusa)        ANKUSA_BIN_B  binary B (unset: no A/B)
#   KEEP_TMP=1   keep the temporary directory   BENCH_TMP     its parent (bench/out; not a tmpfs)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PENDING=${PENDING:-1000000}
ROUNDS=${ROUNDS:-5}
BODY=${BODY:-256}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
READY_TIMEOUT=${READY_TIMEOUT:-600}
FILL_TIMEOUT=${FILL_TIMEOUT:-1800}
BIN_A=${ANKUSA_BIN:-$REPO/build/ankusa}
BIN_B=${ANKUSA_BIN_B:-}
WRK=${WRK:-wrk}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BENCH_NAME=boot.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive PENDING ROUNDS BODY CONNECTIONS THREADS READY_TIMEOUT FILL_TIMEOUT
((PENDING % THREADS == 0)) || die "PENDING must be a multiple of THREADS"
((CONNECTIONS >= THREADS)) || die "CONNECTIONS must be at least THREADS"
((BODY >= 16)) || die "BODY must be at least 16"
[ -x "$BIN_A" ] || die "$BIN_A not found: run 'make' first (or set ANKUSA_BIN)"
[ -z "$BIN_B" ] || [ -x "$BIN_B" ] || die "ANKUSA_BIN_B=$BIN_B is not an executable"
command -v "$WRK" >/dev/null || die "wrk not found: install wrk (scripts/deps.sh)"
command -v curl >/dev/null || die "curl not found"

# NGINX_PORT is taken as the closed port the sink points at: bound, then released, and
# nothing here listens on it (no nginx runs in this bench)
bench_setup boot
DEAD_PORT=$NGINX_PORT

now_s() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# ---------------------------------------------------------------- ankusa
A_PID=""
write_config() { # DIR ROLES
  local dir=$1 roles=$2
  mkdir -p "$dir/data"
  cat >"$dir/ankusa.yml" <<EOF
# written by bench/boot.sh
node:
  data_dir: $dir/data
  roles: [$roles]
log:
  level: info
http:
  port: $HTTP_PORT
admin:
  enabled: true
  ip: 127.0.0.1
  port: $ADMIN_PORT
listener:
  drain_delay_ms: 0
egress:
  allow_http: true
  allow_cidrs: ["127.0.0.1/32"]
sources:
  bench:
    sinks:
      - type: http
        url: "http://127.0.0.1:$DEAD_PORT/hook"
EOF
}

# ankusa_boot BIN DIR ROLES: start, wait for /ready = 200 (polled every 10 ms); sets
# A_PID and BOOT_S (seconds from just before the exec to the first 200)
ankusa_boot() {
  local bin=$1 dir=$2 roles=$3 t0 code i
  write_config "$dir" "$roles"
  echo "----- start $(date -u +%T.%N)" >>"$dir/ankusa.log"
  t0=$(now_s)
  "$bin" serve --config "$dir/ankusa.yml" >>"$dir/ankusa.log" 2>&1 &
  A_PID=$!
  PIDS+=("$A_PID")
  for ((i = 0; ; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "http://127.0.0.1:$HTTP_PORT/ready" || true)
    [ "$code" = 200 ] && break
    if ! alive "$A_PID"; then
      tail -30 "$dir/ankusa.log" >&2
      die "ankusa ($roles, $bin) exited before it was ready"
    fi
    if awk -v a="$t0" -v b="$(now_s)" -v l="$READY_TIMEOUT" 'BEGIN { exit !(b - a > l) }'; then
      tail -30 "$dir/ankusa.log" >&2
      die "ankusa ($roles, $bin) not ready within ${READY_TIMEOUT}s"
    fi
    sleep 0.01
  done
  BOOT_S=$(elapsed "$t0" "$(now_s)")
}

ankusa_stop() { # DIR: SIGTERM by PID; a non-zero exit or an error line fails the run
  local dir=$1 rc=0
  stop_pid "$A_PID" 120 || rc=$?
  forget_pid "$A_PID"
  if [ "$rc" != 0 ]; then
    tail -20 "$dir/ankusa.log" >&2
    echo "  !! ankusa exited with status $rc on SIGTERM"
    HONEST=0
  fi
  if last_start_log "$dir" | grep -q 'level=error'; then
    echo "  !! ankusa logged errors:"
    last_start_log "$dir" | grep 'level=error' | head -5 | sed 's/^/     /'
    HONEST=0
  fi
}

# last_start_log DIR: the lines the last start logged
last_start_log() { awk '/^----- start / { buf = "" } { buf = buf $0 "\n" } END { printf "%s", buf }' "$1/ankusa.log"; }

# load_fields DIR: what the last start logged about its load, one short string; sets
# DUE_ROWS (empty when the node does not log the due index) and DUE_S, WAL_S
load_fields() {
  local log
  log=$(last_start_log "$1")
  DUE_ROWS=$(sed -n 's/.*msg="due index loaded".* rows=\([0-9]*\).*/\1/p' <<<"$log" | tail -1)
  DUE_S=$(sed -n 's/.*msg="due index loaded".* seconds=\([0-9.]*\).*/\1/p' <<<"$log" | tail -1)
  WAL_S=$(sed -n 's/.*msg="store opened".* wal_replay_seconds=\([0-9.]*\).*/\1/p' <<<"$log" | tail -1)
  # the hook log (store layout 2): the pending hooks it holds and its load time join the
  # due index's (whose rows are then only the exceptions: retries, dead, lanes)
  local lh ls
  lh=$(sed -n 's/.*msg="hook log loaded".* pending_hooks=\([0-9]*\).*/\1/p' <<<"$log" | tail -1)
  ls=$(sed -n 's/.*msg="hook log loaded".* seconds=\([0-9.]*\).*/\1/p' <<<"$log" | tail -1)
  if [ -n "$lh" ] && [ -n "$DUE_ROWS" ]; then
    DUE_ROWS=$((DUE_ROWS + lh))
    DUE_S=$(awk -v a="${DUE_S:-0}" -v b="${ls:-0}" 'BEGIN { printf "%.3f", a + b }')
  fi
  local dd
  dd=$(sed -n 's/.*msg="dedupe index loaded" \(.*\)/\1/p' <<<"$log" | tail -1)
  LOAD_TEXT="due index: ${DUE_ROWS:-?} rows in ${DUE_S:-?} s; wal replay ${WAL_S:-?} s${dd:+; dedupe index: $dd}"
  # any other "... loaded" line a later layout may log instead (issue 20's cursors)
  local other
  other=$(grep -E 'msg="[^"]*(loaded|cursor)[^"]*"' <<<"$log" | grep -v -e 'due index loaded' -e 'dedupe index loaded' |
    sed -n 's/.*msg="\([^"]*\)" \(.*\)/\1: \2/p' | head -3 | paste -sd ';' || true)
  [ -z "$other" ] || LOAD_TEXT="$LOAD_TEXT; $other"
}

# ---------------------------------------------------------------- the fill
CAP_LUA=$TMP/cap.lua
cat >"$CAP_LUA" <<EOF
-- written by bench/boot.sh: at most PENDING / THREADS (+ one per connection) stored
-- hooks per wrk thread; past that, requests go to an unknown source (404, never stored)
local cap = $((PENDING / THREADS + (CONNECTIONS + THREADS - 1) / THREADS))
local body = '{"pad":"' .. string.rep("x", $BODY - 11) .. '"}'
local sent = 0
local hdr = { ["Content-Type"] = "application/json" }
local req, surplus
function init(args)
  req = wrk.format("POST", "/webhooks/bench", hdr, body)
  surplus = wrk.format("POST", "/webhooks/bench-no-such-source", hdr, body)
end
function request()
  sent = sent + 1
  if sent <= cap then return req end
  return surplus
end
EOF

fill() { # SIDE BIN: fills $TMP/SIDE-pending; sets FILLED
  local side=$1 bin=$2 dir=$TMP/$1-pending s0 k c wpid
  ankusa_boot "$bin" "$dir" "edge"
  s0=$(now_s)
  "$WRK" -t"$THREADS" -c"$CONNECTIONS" -d"${FILL_TIMEOUT}s" -s "$CAP_LUA" \
    "http://127.0.0.1:$HTTP_PORT/webhooks/bench" >"$TMP/wrk-fill-$side.txt" 2>&1 &
  wpid=$!
  PIDS+=("$wpid")
  c=0
  for ((k = 0; k < FILL_TIMEOUT * 5; k++)); do
    sleep 0.2
    alive "$wpid" || break
    c=$(curl -sf --max-time 2 "http://127.0.0.1:$ADMIN_PORT/metrics" |
      awk '$1 ~ /^ankusa_store_hooks[{]/ { printf "%.0f", $2 }' || true)
    [ -n "${c:-}" ] && [ "$c" -ge "$PENDING" ] && break
  done
  stop_pid "$wpid" 5 || true # wrk dies of the SIGTERM: its report is not needed
  forget_pid "$wpid"
  sleep 0.5 # the answers to what was in flight
  c=$(curl -sf --max-time 5 "http://127.0.0.1:$ADMIN_PORT/metrics" |
    awk '$1 ~ /^ankusa_store_hooks[{]/ { printf "%.0f", $2 }' || true)
  FILLED=${c:-0}
  printf '  fill %s: %s hooks stored in %ss (roles edge; %s-byte bodies); store %s\n' \
    "$side" "$FILLED" "$(elapsed "$s0" "$(now_s)")" "$BODY" "$(du -sh "$dir/data" | cut -f1)"
  ankusa_stop "$dir"
  if ((FILLED < PENDING)); then
    echo "  !! fill $side stored only $FILLED hooks (wanted $PENDING; see $TMP/wrk-fill-$side.txt)"
    HONEST=0
  fi
  # the warm-up boot: replays the fill's WAL once (untimed in the figures)
  ankusa_boot "$bin" "$dir" "edge, dispatch, storage"
  load_fields "$dir"
  printf '  warm-up boot %s: ready in %ss (%s)\n' "$side" "$BOOT_S" "$LOAD_TEXT"
  ankusa_stop "$dir"
}

# ---------------------------------------------------------------- one measurement
measure_pending() { # SIDE BIN ROUND
  local side=$1 bin=$2 r=$3 dir=$TMP/$1-pending
  ankusa_boot "$bin" "$dir" "edge, dispatch, storage"
  ankusa_stop "$dir"
  load_fields "$dir"
  eval "P_$side+=(\"$BOOT_S\")"
  eval "LOAD_$side+=(\"${DUE_S:-nan}\")"
  P_TEXT="$LOAD_TEXT"
  if [ -n "$DUE_ROWS" ] && ((DUE_ROWS < PENDING)); then
    echo "  !! round $r $side: the due index and the hook log held $DUE_ROWS, fewer than PENDING=$PENDING"
    HONEST=0
  fi
}

measure_empty() { # SIDE BIN ROUND
  local side=$1 bin=$2 r=$3 dir=$TMP/$1-empty-$3
  rm -rf "$dir"
  ankusa_boot "$bin" "$dir" "edge, dispatch, storage"
  ankusa_stop "$dir"
  eval "E_$side+=(\"$BOOT_S\")"
  rm -rf "$dir/data"
}

round_side() { # SIDE BIN ROUND
  local side=$1 bin=$2 r=$3 p e
  if ((r % 2)); then
    measure_pending "$side" "$bin" "$r"; p=$BOOT_S
    measure_empty "$side" "$bin" "$r"; e=$BOOT_S
  else
    measure_empty "$side" "$bin" "$r"; e=$BOOT_S
    measure_pending "$side" "$bin" "$r"; p=$BOOT_S
  fi
  printf '  round %d %s: pending %7.3f s, empty %7.3f s, difference %7.3f s   (%s)\n' \
    "$r" "$side" "$p" "$e" "$(awk -v p="$p" -v e="$e" 'BEGIN { printf "%.3f", p - e }')" "$P_TEXT"
}

# ---------------------------------------------------------------- the runs
HONEST=1
# shellcheck disable=SC2034 # read through eval and declare -n
P_A=() E_A=() LOAD_A=() P_B=() E_B=() LOAD_B=()
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD -- src 2>/dev/null || REV="$REV + uncommitted changes in src"
DATA_FS=$(df -T "$TMP" | awk 'NR == 2 { print $2 " (" $1 ", mounted on " $7 ")" }')
SIDES=(A)
[ -z "$BIN_B" ] || SIDES=(A B)

echo "ankusa boot benchmark: $PENDING pending hooks of $BODY bytes, $ROUNDS round(s); sink http://127.0.0.1:$DEAD_PORT/hook (closed)"
echo "  A: $BIN_A ($("$BIN_A" version 2>&1 | tail -1), built $(date -u -r "$BIN_A" '+%Y-%m-%d %H:%M UTC'))"
[ -z "$BIN_B" ] || echo "  B: $BIN_B ($("$BIN_B" version 2>&1 | tail -1), built $(date -u -r "$BIN_B" '+%Y-%m-%d %H:%M UTC'))"
fill A "$BIN_A"
[ -z "$BIN_B" ] || fill B "$BIN_B"
for ((r = 1; r <= ROUNDS; r++)); do
  if [ -z "$BIN_B" ]; then
    round_side A "$BIN_A" "$r"
  elif ((r % 2)); then
    round_side A "$BIN_A" "$r"
    round_side B "$BIN_B" "$r"
  else
    round_side B "$BIN_B" "$r"
    round_side A "$BIN_A" "$r"
  fi
done

# ---------------------------------------------------------------- summary
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
echo
echo "== machine"
echo "  date:        $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
echo "  nproc:       $(nproc)   cpu: ${CPU:-unknown}   kernel: $(uname -r)"
echo "  data dir fs: $DATA_FS"
echo "  load avg:    $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after"
echo "  checkout at start: $REV"
echo
[ "$ROUNDS" -gt 1 ] && WHAT="median of $ROUNDS rounds" || WHAT="1 round"
echo "== summary ($WHAT; start to /ready = 200, roles edge, dispatch, storage)"
for s in "${SIDES[@]}"; do
  declare -n P="P_$s" E="E_$s" L="LOAD_$s"
  DIFFS=()
  for ((i = 0; i < ${#P[@]}; i++)); do DIFFS+=("$(awk -v p="${P[$i]}" -v e="${E[$i]}" 'BEGIN { printf "%.3f", p - e }')"); done
  printf '  %s: with %s pending %s s, empty data dir %s s, difference %s s; due index load (logged) %s s\n' \
    "$s" "$PENDING" "$(median "${P[@]}")" "$(median "${E[@]}")" "$(median "${DIFFS[@]}")" "$(median "${L[@]}")"
  echo "     rounds: pending ${P[*]}; empty ${E[*]}"
  unset -n P E L
done
if [ -n "$BIN_B" ]; then
  printf '  B / A (pending boot): %s\n' "$(awk -v b="$(median "${P_B[@]}")" -v a="$(median "${P_A[@]}")" 'BEGIN { printf "%.3f", (a > 0) ? b / a : 0 }')"
fi
if [ "$HONEST" = 1 ]; then
  echo "  checks: every fill stored PENDING hooks, every pending boot's due index held them, every node stopped cleanly"
else
  echo "  !! a check FAILED (see above)"
  exit 1
fi
exit 0
