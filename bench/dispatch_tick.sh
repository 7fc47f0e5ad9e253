#!/usr/bin/env bash
# Scheduling-pass benchmark: the cost of one dispatcher pass (ak_dispatch_debug_scan) with
# 10 vs 100,000 due rows and 10 vs 10,000 tenants, which should be flat, next to a plain
# RocksDB seek + 128 nexts in the same store (the noise floor of the box). See the header
# of bench/dispatch_tick.c for what each case holds.
#
#   bash bench/dispatch_tick.sh                # 3 runs of the program, medians across runs
#   RUNS=5 REPS=15 bash bench/dispatch_tick.sh
#
# Environment:
#   RUNS     runs of the program (3)      REPS    fresh dispatchers per case and run (9)
#   PASSES   passes timed per dispatcher (5; pass 1 is the headline, 2.. continue from
#            the tenants' cursors)
#   TOMBSTONES=0  skip the tombstones diagnostic case
#   FLAT_MAX ratio of the slowest to the fastest of the four cases (us per claimed row,
#            pass 1) above which the script exits 1 (5). The backlog spans 10,000x and the
#            tenant count 1,000x: a pass that grew with either would be orders of magnitude
#            apart (the tombstones case shows what that looks like). What remains is a
#            fixed cost per pass (iterator, read options) spread over 10 rows instead of
#            128, and one seek per tenant served (10 vs 128 per pass), and the box's noise.
#   BUILD    meson build dir (build)      BENCH_TMP  parent of the stores (bench/out; not a tmpfs)
#
# Builds the program on demand with `ninja -C build dispatch_tick` (not part of `make`).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNS=${RUNS:-3}
REPS=${REPS:-9}
PASSES=${PASSES:-5}
TOMBSTONES=${TOMBSTONES:-1}
FLAT_MAX=${FLAT_MAX:-5}
BUILD=${BUILD:-$REPO/build}
BENCH_TMP=${BENCH_TMP:-$REPO/bench/out}

die() { echo "dispatch_tick.sh: $*" >&2; exit 1; }
for v in RUNS REPS PASSES; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done

if [ ! -f "$BUILD/build.ninja" ]; then
  (cd "$REPO" && make >/dev/null) || die "make failed"
fi
ninja -C "$BUILD" dispatch_tick >"$BENCH_TMP.dispatch_tick.ninja.out" 2>&1 ||
  { cat "$BENCH_TMP.dispatch_tick.ninja.out" >&2; rm -f "$BENCH_TMP.dispatch_tick.ninja.out"; die "build failed"; }
rm -f "$BENCH_TMP.dispatch_tick.ninja.out"
BIN=$BUILD/dispatch_tick
mkdir -p "$BENCH_TMP"

median() { # median of the arguments (mean of the middle two for an even count)
  printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END {
    if (NR == 0) { print "nan"; exit }
    if (NR % 2) printf "%.2f", a[(NR + 1) / 2]; else printf "%.2f", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}

NAMES=("10 rows x 10 tenants" "10 rows x 10,000 tenants" "100,000 rows x 10 tenants"
  "100,000 rows x 10,000 tenants" "100,000 rows x 1,000 tenants"
  "tombstones: 100,000 deleted + 1,000 due, 1 tenant")
NCASES=6
[ "$TOMBSTONES" = 1 ] || NCASES=5
ARGS=(-r "$REPS" -p "$PASSES" -d "$BENCH_TMP")
[ "$TOMBSTONES" = 1 ] || ARGS+=(-q)

OUT=$(mktemp "$BENCH_TMP/dispatch_tick.XXXXXX.txt")
trap 'rm -f "$OUT"' EXIT
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
REV=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
git -C "$REPO" diff --quiet HEAD -- src meson.build bench/dispatch_tick.c 2>/dev/null || REV="$REV + uncommitted changes"
for ((r = 1; r <= RUNS; r++)); do
  echo "== run $r"
  "$BIN" "${ARGS[@]}" | tee -a "$OUT" | grep -v '^#'
done

echo
echo "== summary (median of $RUNS runs, each the median of $REPS fresh dispatchers)"
echo "  date: $(date -u '+%Y-%m-%d %H:%M UTC'); nproc $(nproc); load avg $LOAD_BEFORE before, $(cut -d' ' -f1-3 /proc/loadavg) after; checkout $REV"
printf '  %-50s %10s %6s %9s | %10s %9s | %8s\n' case 'pass 1 us' rows 'us/row' 'later us' 'us/row' 'load ms'
PR=()
for ((i = 0; i < NCASES; i++)); do
  mapfile -t P1 < <(awk -v i="$i" '$1 == "#case" && $2 == i { print $3 }' "$OUT")
  mapfile -t RW < <(awk -v i="$i" '$1 == "#case" && $2 == i { print $4 }' "$OUT")
  mapfile -t PU < <(awk -v i="$i" '$1 == "#case" && $2 == i && $4 > 0 { print $3 / $4 }' "$OUT")
  mapfile -t LU < <(awk -v i="$i" '$1 == "#case" && $2 == i && $5 >= 0 { print $5 }' "$OUT")
  mapfile -t LR < <(awk -v i="$i" '$1 == "#case" && $2 == i && $6 > 0 { print $5 / $6 }' "$OUT")
  mapfile -t LD < <(awk -v i="$i" '$1 == "#case" && $2 == i { print $7 }' "$OUT")
  p1=$(median "${P1[@]}") rw=$(median "${RW[@]}") pu=$(median "${PU[@]}")
  if [ "${#LU[@]}" -gt 0 ]; then lu=$(median "${LU[@]}") lr=$(median "${LR[@]}"); else lu=- lr=-; fi
  printf '  %-50s %10s %6s %9s | %10s %9s | %8s\n' "${NAMES[$i]}" "$p1" "$rw" "$pu" "$lu" "$lr" "$(median "${LD[@]}")"
  if [ "$i" -lt 4 ]; then PR+=("$pu"); fi
done
mapfile -t BS < <(awk '$1 == "#baseline" { print $2 }' "$OUT")
mapfile -t BG < <(awk '$1 == "#baseline" { print $3 }' "$OUT")
bs=$(median "${BS[@]}") bg=$(median "${BG[@]}")
printf '  baseline: RocksDB seek + 128 next %s us (%s us/key); + 128 hook point reads %s us (%s us/row)\n' \
  "$bs" "$(awk -v b="$bs" 'BEGIN { printf "%.2f", b / 128 }')" "$bg" "$(awk -v b="$bg" 'BEGIN { printf "%.2f", b / 128 }')"
FLAT=$(printf '%s\n' "${PR[@]}" | sort -g | awk 'NR == 1 { mn = $1 } { mx = $1 } END { printf "%.2f", (mn > 0) ? mx / mn : 0 }')
echo "  flatness: slowest / fastest of the four cases, us per claimed row in pass 1 = $FLAT (limit $FLAT_MAX)"
if awk -v f="$FLAT" -v m="$FLAT_MAX" 'BEGIN { exit !(f > m) }'; then
  echo "  !! the pass cost grows with the backlog or the tenant count"
  exit 1
fi
