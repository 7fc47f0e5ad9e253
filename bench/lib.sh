# Shared by bench/ingest.sh, bench/deliver.sh and bench/http_sink.sh: process bookkeeping
# by PID (never by name), the temp dir and its cleanup, free loopback ports, and small
# helpers. Sourced after the caller set BENCH_NAME (for messages), REPO and PY. The only
# server it starts is the static-201 nginx baseline, when asked (nginx_static_start).

die() { echo "$BENCH_NAME: $*" >&2; exit 1; }

alive() { kill -0 "$1" 2>/dev/null; }

# stop_pid PID [SECONDS]: SIGTERM, wait up to SECONDS (10), then SIGKILL. Returns the
# process's exit status when it is our child, else 0.
stop_pid() {
  local pid=$1 limit=${2:-10} i rc=0
  alive "$pid" || { wait "$pid" 2>/dev/null || rc=$?; return $rc; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < limit * 10; i++)); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    echo "$BENCH_NAME: PID $pid did not stop within ${limit}s after SIGTERM; sending SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || rc=$?
  return $rc
}

forget_pid() { # drop a stopped PID from PIDS
  local keep=() p
  for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  PIDS=("${keep[@]}")
}

# shellcheck disable=SC2317 # called by the EXIT trap
bench_cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do stop_pid "$pid" 10 || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then echo "$BENCH_NAME: kept $TMP" >&2; else rm -rf "$TMP"; fi
}

# bench_setup PREFIX: TMP (a fresh dir under BENCH_TMP), PIDS, the cleanup traps, and
# NGINX_PORT HTTP_PORT ADMIN_PORT: three sockets bound to port 0 at once (so they
# differ), their ports printed, then released.
bench_setup() {
  BENCH_TMP=${BENCH_TMP:-$REPO/bench/out}
  mkdir -p "$BENCH_TMP"
  TMP=$(mktemp -d "$BENCH_TMP/$1.XXXXXX")
  PIDS=() # every process this script started; stopped by PID, never by name
  trap bench_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  read -r NGINX_PORT HTTP_PORT ADMIN_PORT < <("$PY" -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])
for s in ss: s.close()
')
}

need_positive() { # VAR...: each must hold a positive integer, else die naming it
  local v
  for v in "$@"; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
  done
}

median() { # median of the arguments (mean of the middle two for an even count)
  printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) { print "nan"; exit }
    if (NR % 2) printf "%.3f", a[(NR + 1) / 2]; else printf "%.3f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

wait_http() { # URL EXPECTED_CODE PID SECONDS [curl args...]
  local url=$1 want=$2 pid=$3 limit=$4 i code
  shift 4
  for ((i = 0; i < limit * 20; i++)); do
    alive "$pid" || return 1
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 "$@" "$url" || true)
    [ "$code" = "$want" ] && return 0
    sleep 0.05
  done
  return 1
}

thread_ticks() { # PID PREFIX: user+system ticks of PID's threads whose name starts with PREFIX
  local f t=0 u
  for f in /proc/"$1"/task/*; do
    case "$(cat "$f/comm" 2>/dev/null)" in
    "$2"*) u=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "$f/stat" 2>/dev/null || echo 0)
      t=$((t + u)) ;;
    esac
  done
  echo "$t"
}

cpu_ticks() { # PID...: user+system clock ticks used so far by these processes
  local p t=0 u
  for p in "$@"; do
    u=$(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null || echo 0)
    t=$((t + u))
  done
  echo "$t"
}

# nginx_static_start: nginx with bench/nginx.conf.in (a static 201 to every request) on
# NGINX_PORT under TMP; sets NGINX_PID and NGINX_STATIC_KIDS (its workers), all in PIDS.
nginx_static_start() {
  local c
  sed -e "s|@PREFIX@|$TMP|g" -e "s|@PORT@|$NGINX_PORT|g" "$REPO/bench/nginx.conf.in" >"$TMP/nginx.conf"
  "$NGINX" -e "$TMP/nginx-error.log" -p "$TMP/" -c "$TMP/nginx.conf" >"$TMP/nginx.out" 2>&1 &
  NGINX_PID=$!
  PIDS+=("$NGINX_PID")
  if ! wait_http "http://127.0.0.1:$NGINX_PORT/webhooks/bench" 201 "$NGINX_PID" 10 -X POST -d '{}'; then
    cat "$TMP/nginx.out" "$TMP/nginx-error.log" >&2 2>/dev/null || true
    die "nginx did not answer 201 on 127.0.0.1:$NGINX_PORT"
  fi
  # the workers too, by PID, in case the master is killed before it can stop them
  NGINX_STATIC_KIDS=$(ps -o pid= --ppid "$NGINX_PID" || true)
  for c in $NGINX_STATIC_KIDS; do PIDS+=("$c"); done
}

# nginx_static_stop: stop what nginx_static_start started (the master, then any worker
# still alive), by PID, and drop them from PIDS. nginx exits 0 on SIGTERM (fast shutdown).
nginx_static_stop() {
  local c
  stop_pid "$NGINX_PID" 10 || true
  forget_pid "$NGINX_PID"
  for c in $NGINX_STATIC_KIDS; do
    if alive "$c"; then stop_pid "$c" 5 || true; fi
    forget_pid "$c"
  done
}
