#!/usr/bin/env bash
# Builds the libFuzzer harnesses under fuzz/ into build-fuzz/ and runs each for a while.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     (default 20 s each; targets: route envelope config
#                                              uuid verify token dedupe http marker segment
#                                              redis_url claim backup_manifest rpath;
#                                              "fuzz_verify" = "verify")
# Each harness stops at SECONDS or FUZZ_RUNS executions (10,000,000), whichever comes
# first; FUZZ_JOBS harnesses run at once (1). The campaign: FUZZ_SECONDS=1800 make fuzz.
# Every run starts from a throwaway copy of fuzz/corpus/<target>/, so the committed seeds
# never grow. Crash, leak, timeout and UBSan reproducers land in build-fuzz/artifacts/.
# Prints one line per harness and exits non-zero when any harness fails. Installs nothing
# itself beyond calling scripts/deps.sh when clang is missing.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2

DURATION="${1:-20}"
if ! [[ "$DURATION" =~ ^[0-9]+$ ]] || [ "$DURATION" -lt 1 ]; then
  echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2
  exit 2
fi
shift $(( $# > 0 ? 1 : 0 ))
TARGETS=("${@#fuzz_}")
[ "${#TARGETS[@]}" -eq 0 ] && TARGETS=(route envelope config uuid verify token dedupe http marker segment redis_url claim backup_manifest rpath)

if ! command -v clang >/dev/null 2>&1; then
  bash scripts/deps.sh || exit 2
fi
CC="${FUZZ_CC:-clang}"

# The code under test of each harness (compiled together with it, no library).
# the verifiers and the plug-in lookup and error list of the config engine they report to
VERIFY_SRCS="$(echo src/verify/*.c) src/core/config.c src/core/config_view.c src/core/yamltree.c src/core/buf.c src/core/header.c"
# The config engine validates against the module table (src/modules.c), whose modules'
# check hooks build each source's verifier, read the http.tls files, check sink URLs
# against the egress guard and parse rate-limit entries and proxy CIDRs: the whole
# library but main.c, compiled once (two at a time) into build-fuzz/libak.a.
LIB_SRCS="$(ls src/*/*.c src/*.c | grep -v '^src/main.c$' | tr '\n' ' ')"
CONFIG_SRCS="build-fuzz/libak.a"
declare -A SRCS=(
  [route]="$CONFIG_SRCS"
  [envelope]="src/core/envelope.c"
  [config]="$CONFIG_SRCS"
  [uuid]="src/core/ids.c"
  [verify]="$VERIFY_SRCS"
  [token]="$VERIFY_SRCS"
  [dedupe]="src/queue/dedupe_record.c src/store/keys.c"
  [marker]="src/store/marker.c src/store/keys.c"
  # the server layer's request engine, without its sockets (server.c) or TLS
  [http]="src/http/proto.c src/http/parse.c src/core/buf.c src/core/netaddr.c"
  # the archive's segment and index codec, the records it frames and their checksum
  [segment]="src/archive/segment.c src/core/envelope.c src/store/crc32c.c"
  # the fleet store's URL (fleet.store.url): config and environment input
  [redis_url]="src/net/redis.c"
  # the claim check's ids, refs, keys and pack reads (the claim gateway's input)
  [claim]="$CONFIG_SRCS"
  # the backup manifest and LATEST formats (read back from a blob store)
  [backup_manifest]="src/backup/manifest.c src/core/buf.c"
  # the route guard's path rule and pattern matching (routes.enabled: every request path)
  [rpath]="src/routes/pattern.c"
)

# shellcheck disable=SC2054  # the commas belong to -fsanitize=
CFLAGS=(-std=gnu11 -D_GNU_SOURCE '-DAK_VERSION="fuzz"' -Isrc -I/usr/include/hiredis -g -O1 -fno-omit-frame-pointer
        -Werror=incompatible-pointer-types -Werror=implicit-function-declaration
        -fsanitize=fuzzer,address,undefined)
read -r -a LIBS <<<"$(pkg-config --libs jansson yaml-0.1 libssl libcrypto libcurl rocksdb libuv hiredis rdkafka librabbitmq libnats) -lhttp_parser -lm -pthread"

OUT=build-fuzz
mkdir -p "$OUT/artifacts" || exit 2

for t in "${TARGETS[@]}"; do
  if [ -z "${SRCS[$t]+x}" ]; then
    echo "fuzz: unknown target '$t' (known: ${!SRCS[*]})" >&2
    exit 2
  fi
done

# the library, when a target links it
if printf '%s\n' "${TARGETS[@]}" | grep -qx -e route -e config -e claim; then
  rm -rf "$OUT/lib" "$OUT/libak.a" && mkdir -p "$OUT/lib" || exit 2
  LIBFLAGS=("${CFLAGS[@]/-fsanitize=fuzzer,/-fsanitize=fuzzer-no-link,}")
  # shellcheck disable=SC2086
  if ! printf '%s\n' $LIB_SRCS | xargs -P 2 -I{} bash -c 'f="{}"; o="$0/lib/$(echo "$f" | tr / _).o"; exec "$1" "${@:2}" -c "$f" -o "$o"' \
        "$OUT" "$CC" "${LIBFLAGS[@]}" 2>"$OUT/libak.build.log" ||
     ! ar rcs "$OUT/libak.a" "$OUT"/lib/*.o 2>>"$OUT/libak.build.log"; then
    cat "$OUT/libak.build.log" >&2
    echo "fuzz: building the library failed" >&2
    exit 2
  fi
fi

for t in "${TARGETS[@]}"; do
  # shellcheck disable=SC2086
  if ! "$CC" "${CFLAGS[@]}" -o "$OUT/fuzz_$t" "fuzz/fuzz_$t.c" ${SRCS[$t]} "${LIBS[@]}" \
      2>"$OUT/fuzz_$t.build.log"; then
    cat "$OUT/fuzz_$t.build.log" >&2
    echo "fuzz: building fuzz_$t failed" >&2
    exit 2
  fi
done

TMP="$(mktemp -d "${TMPDIR:-/tmp}/ankusa-fuzz.XXXXXX")" || exit 2
trap 'rm -rf "$TMP"' EXIT

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

RUNS="${FUZZ_RUNS:-10000000}"
JOBS="${FUZZ_JOBS:-1}"
if ! [[ "$RUNS" =~ ^[1-9][0-9]*$ && "$JOBS" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: FUZZ_RUNS and FUZZ_JOBS must be positive integers" >&2
  exit 2
fi

# run_one TARGET: one harness; its line goes to $TMP/TARGET.result, its status is 0 or 1
run_one() {
  local t=$1 name corpus log rc execs result art secs extra=()
  name="fuzz_$t"
  corpus="$TMP/$t"
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$t" ] && cp -R "fuzz/corpus/$t/." "$corpus/"
  [ -f "fuzz/$t.dict" ] && extra+=("-dict=fuzz/$t.dict")
  log="$OUT/$name.log"
  secs=$SECONDS
  "./$OUT/$name" -max_total_time="$DURATION" -runs="$RUNS" -timeout=5 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$name-" "${extra[@]}" "$corpus" \
    >"$log" 2>&1
  rc=$?
  secs=$((SECONDS - secs))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  if [ -z "$execs" ]; then
    execs="$(grep -Eo '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')"
  fi
  local ok=0
  if [ "$rc" -eq 0 ] && ! grep -q -e 'runtime error:' -e 'ERROR: LeakSanitizer' "$log"; then
    result="ok"
  else
    ok=1
    if grep -q 'ERROR: LeakSanitizer' "$log"; then result="LEAK"
    elif grep -q 'runtime error:' "$log"; then result="UBSAN"
    elif grep -q 'ERROR: AddressSanitizer' "$log"; then result="ASAN"
    elif grep -q 'ERROR: libFuzzer: timeout' "$log"; then result="TIMEOUT"
    elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then result="OOM"
    else result="CRASH(rc=$rc)"
    fi
    art="$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)"
    [ -n "$art" ] && result="$result reproducer=$art"
    result="$result log=$log"
  fi
  printf '%-14s executions=%-10s seconds=%-5s result=%s\n' "$name" "${execs:-?}" "$secs" "$result" \
    >"$TMP/$t.result"
  return $ok
}

failed=0
running=0
for t in "${TARGETS[@]}"; do
  if [ "$running" -ge "$JOBS" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  run_one "$t" &
  running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for t in "${TARGETS[@]}"; do cat "$TMP/$t.result" 2>/dev/null || echo "fuzz_$t: no result"; done

exit "$failed"
