#!/usr/bin/env bash
# Broker delivery cost benchmark: per broker, the CPU per confirmed message of ankusa's
# sink (src/sinks/<type>.c, as a node runs it) next to a raw client of the same library
# publishing the same bytes with the same confirm rule to the same broker, in the same
# run, and both throughputs. Target (issue 23): the sink at most 2 x the raw client's CPU
# per message, on the medians of RUNS alternating rounds. See bench/brokers.c.
#
#   bash bench/brokers.sh
#   RUNS=5 REQUESTS=50000 TYPES="kafka redis" bash bench/brokers.sh
#
# Environment:
#   RUNS         rounds of each mode per broker (5)    REQUESTS  messages per round (20000)
#   CONCURRENCY  publishes outstanding (32)            SIZE      body bytes (1024)
#   TYPES        brokers ("kafka rabbitmq nats redis sqs google_pubsub")
#   MODES        "sink raw" (either alone to try one)
#   HTTP_REQUESTS messages per round for sqs and google_pubsub (2000: their loopback stand-ins
#                are Python, tests/e2e/*_standin.py, and bound the rate, not the client's CPU)
#   BUILD        meson build dir (build)               BENCH_TMP parent of the temp dir (bench/out)
#
# The brokers run on loopback, started here and stopped by PID: librdkafka's mock cluster
# (3 brokers, in a process of its own), nats-server with JetStream (file store), one
# rabbitmq-server (its own epmd port and node name), redis-server with one subscriber, and
# the SQS and Pub/Sub stand-ins of the e2e tests (SigV4 and the request shapes checked).
# Builds the program on demand with `ninja -C build brokers` (not part of `make`).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-5}
REQUESTS=${REQUESTS:-20000}
CONCURRENCY=${CONCURRENCY:-32}
SIZE=${SIZE:-1024}
TYPES=${TYPES:-kafka rabbitmq nats redis sqs google_pubsub}
HTTP_REQUESTS=${HTTP_REQUESTS:-2000}
MODES=${MODES:-sink raw}
BUILD=${BUILD:-$REPO/build}
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3

BENCH_NAME=brokers.sh
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"

need_positive RUNS REQUESTS CONCURRENCY
[ -f "$BUILD/build.ninja" ] || die "$BUILD is not a meson build dir: run 'make' first"
ninja -C "$BUILD" brokers >/dev/null || die "building brokers failed (ninja -C $BUILD brokers)"
BIN=$BUILD/brokers

bench_setup brokers
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A OPTS=()

start_kafka() {
  mkfifo "$TMP/kafka.in"
  "$BIN" mock kafka bench <"$TMP/kafka.in" >"$TMP/kafka.boot" 2>"$TMP/kafka.log" &
  PIDS+=($!)
  exec 7>"$TMP/kafka.in" # the mock runs until this closes (cleanup)
  for _ in $(seq 100); do [ -s "$TMP/kafka.boot" ] && break; sleep 0.1; done
  local boot
  boot=$(head -1 "$TMP/kafka.boot")
  [ -n "$boot" ] || die "kafka mock cluster did not start: $(cat "$TMP/kafka.log")"
  OPTS[kafka]="{\"brokers\":\"$boot\",\"topic\":\"bench\",\"key\":\"bench\"}"
}

start_nats() {
  local port
  port=$(free_port)
  mkdir -p "$TMP/nats"
  nats-server -js -sd "$TMP/nats" -a 127.0.0.1 -p "$port" >"$TMP/nats.log" 2>&1 &
  PIDS+=($!)
  OPTS[nats]="{\"servers\":[\"nats://127.0.0.1:$port\"],\"subject\":\"bench.hooks\"}"
  for _ in $(seq 50); do "$BIN" setup nats "${OPTS[nats]}" 2>/dev/null && return; sleep 0.2; done
  die "nats-server did not start: $(tail -5 "$TMP/nats.log")"
}

start_rabbitmq() {
  local port dist epmd
  port=$(free_port) dist=$(free_port) epmd=$(free_port)
  mkdir -p "$TMP/rabbit/mnesia" "$TMP/rabbit/log"
  echo "[]." >"$TMP/rabbit/advanced.config"
  # its own epmd, in the foreground (stopped by PID): left to the VM, epmd daemonizes out of
  # every process group and outlives the benchmark
  setsid epmd -port "$epmd" -address 127.0.0.1 >"$TMP/epmd.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$epmd") 2>/dev/null && break; sleep 0.1; done
  # its own node name and epmd port: nothing else on the box is touched
  RABBITMQ_NODE_PORT=$port RABBITMQ_DIST_PORT=$dist ERL_EPMD_PORT=$epmd RABBITMQ_NODENAME="bench$$@localhost" \
    RABBITMQ_MNESIA_BASE="$TMP/rabbit/mnesia" RABBITMQ_LOG_BASE="$TMP/rabbit/log" HOME="$TMP/rabbit" \
    RABBITMQ_CONFIG_FILE="$TMP/rabbit/rabbitmq" RABBITMQ_ADVANCED_CONFIG_FILE="$TMP/rabbit/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$TMP/rabbit/enabled_plugins" RABBITMQ_FEATURE_FLAGS_FILE="$TMP/rabbit/feature_flags" \
    RABBITMQ_PLUGINS_EXPAND_DIR="$TMP/rabbit/plugins-expand" ERL_CRASH_DUMP="$TMP/rabbit/erl_crash.dump" \
    setsid /usr/lib/rabbitmq/bin/rabbitmq-server >"$TMP/rabbit.log" 2>&1 &
  RABBIT_PGID=$!
  PIDS+=($!)
  OPTS[rabbitmq]="{\"url\":\"amqp://guest:guest@127.0.0.1:$port\",\"exchange\":\"bench\",\"routing_key\":\"ankusa.bench\"}"
  for _ in $(seq 120); do "$BIN" setup rabbitmq "${OPTS[rabbitmq]}" 2>/dev/null && return; sleep 0.5; done
  die "rabbitmq-server did not start: $(tail -5 "$TMP/rabbit.log")"
}

start_redis() {
  local port
  port=$(free_port)
  redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --client-output-buffer-limit "pubsub 0 0 0" >"$TMP/redis.log" 2>&1 &
  PIDS+=($!)
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$port" subscribe bench >/dev/null 2>&1 & # one receiver: PUBLISH answers 1
  PIDS+=($!)
  sleep 0.3
  OPTS[redis]="{\"url\":\"redis://127.0.0.1:$port\",\"channel\":\"bench\"}"
}

# a stand-in of tests/e2e in a Python process of its own: prints its port, runs until SIGTERM
start_standin() { # NAME PYTHON_EXPR
  "$PY" -c "import signal, sys; sys.path.insert(0, '$REPO/tests/e2e'); $2; print(s.port, flush=True); signal.pause()" \
    >"$TMP/$1.port" 2>"$TMP/$1.log" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$TMP/$1.port" ] && break; sleep 0.1; done
  [ -s "$TMP/$1.port" ] || die "$1 stand-in did not start: $(cat "$TMP/$1.log")"
  head -1 "$TMP/$1.port"
}

start_sqs() {
  local port
  port=$(start_standin sqs "from sqs_standin import SqsStandin; s = SqsStandin(['bench'], {'AKIDBENCH': 'bench-secret'})")
  OPTS[sqs]="{\"queue_url\":\"http://127.0.0.1:$port/000000000000/bench\",\"region\":\"us-east-1\",\"access_key_id\":\"AKIDBENCH\",\"secret_access_key\":\"bench-secret\"}"
}

start_pubsub() {
  local port
  port=$(start_standin pubsub "from pubsub_standin import PubsubStandin; s = PubsubStandin('bench', ['bench'], auth='token', token='bench-token')")
  OPTS[google_pubsub]="{\"project\":\"bench\",\"topic\":\"bench\",\"endpoint\":\"http://127.0.0.1:$port\",\"auth\":\"token\",\"token\":\"bench-token\"}"
}

# the process group of rabbitmq-server (the script execs beam, which starts epmd): stopped
# by its group id, which is the PID we started
stop_rabbit_group() { [ -n "${RABBIT_PGID:-}" ] && kill -TERM -- "-$RABBIT_PGID" 2>/dev/null || true; }
trap 'stop_rabbit_group; bench_cleanup' EXIT

read -r -a TYPE_LIST <<<"$TYPES"
for t in "${TYPE_LIST[@]}"; do
  case $t in
    kafka) start_kafka ;;
    nats) start_nats ;;
    rabbitmq) start_rabbitmq ;;
    redis) start_redis ;;
    sqs) start_sqs ;;
    google_pubsub) start_pubsub ;;
    *) die "no broker $t (kafka rabbitmq nats redis sqs google_pubsub)" ;;
  esac
done

declare -A CPU=() RATE=()
for t in "${TYPE_LIST[@]}"; do
  for ((r = 1; r <= RUNS; r++)); do
    read -r -a ML <<<"$MODES"
    # alternate the order, so no mode always meets the box in the same phase
    ((r % 2 == 0)) && ML=($(printf '%s\n' "${ML[@]}" | tac))
    for mode in "${ML[@]}"; do
      reqs=$REQUESTS
      case $t in sqs | google_pubsub) reqs=$HTTP_REQUESTS ;; esac
      out=$("$BIN" "$mode" "$t" "$CONCURRENCY" "$reqs" "$SIZE" "${OPTS[$t]}") || die "$t $mode round $r failed: $out"
      cpu=$(echo "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["cpu_us_per"])')
      rate=$(echo "$out" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["rate"])')
      printf '  %-8s round %d  %-4s %7.2f us CPU per message  %8.0f msg/s\n' "$t" "$r" "$mode" "$cpu" "$rate"
      CPU[$t.$mode]="${CPU[$t.$mode]:-} $cpu"
      RATE[$t.$mode]="${RATE[$t.$mode]:-} $rate"
    done
  done
done

echo
echo "== summary: $REQUESTS messages ($HTTP_REQUESTS for sqs, google_pubsub) of a $SIZE-byte body per round, $CONCURRENCY outstanding, medians of $RUNS rounds"
echo "  date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); checkout $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
printf '  %-9s %12s %12s %8s %12s %12s  %s\n' broker "sink us/msg" "raw us/msg" ratio "sink msg/s" "raw msg/s" "target <= 2.00"
for t in "${TYPE_LIST[@]}"; do
  [ -n "${CPU[$t.sink]:-}" ] && [ -n "${CPU[$t.raw]:-}" ] || continue
  # shellcheck disable=SC2086
  s=$(median ${CPU[$t.sink]}) r=$(median ${CPU[$t.raw]}) sr=$(median ${RATE[$t.sink]}) rr=$(median ${RATE[$t.raw]})
  awk -v t="$t" -v s="$s" -v r="$r" -v sr="$sr" -v rr="$rr" 'BEGIN {
    q = s / r; printf "  %-9s %12.2f %12.2f %8.2f %12.0f %12.0f  %s\n", t, s, r, q, sr, rr, (q <= 2.0 ? "met" : "missed") }'
done
