#!/usr/bin/env bash
# The layering rule of DESIGN.md §5: a folder of src/ may include headers of its own
# folder and of the folders before it in this order, never of one after it:
#   core < net < http < blob < store < fleet < verify < queue < sinks < dispatch < archive
#   < backup < intake < edge < admin < main (src/*.c)
# A lower layer reaches a higher one only through an interface it defines and a higher
# layer registers at start. Also refused: a folder of src/ that is not in the order (add
# it to the order first), and rocksdb/c.h outside src/store/.
# Usage: scripts/layers.sh [SRC_DIR]   (default: src). Exit 1 and one line per breach.
set -u
SRC="${1:-src}"
ORDER=(core net http blob store fleet verify queue sinks dispatch archive backup intake edge admin main)
declare -A RANK=()
for i in "${!ORDER[@]}"; do RANK[${ORDER[$i]}]=$i; done

bad=0
for dir in "$SRC"/*/; do
  d=$(basename "$dir")
  if [ -z "${RANK[$d]+x}" ]; then
    echo "layers: $SRC/$d/ is not in the layer order (scripts/layers.sh, DESIGN.md §5)"
    bad=1
  fi
done

# store headers that include RocksDB's: only store/ may include them (RocksDB's C API
# stays behind the store's own types)
rocks_headers=$(grep -l -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+<rocksdb/' "$SRC"/store/*.h 2>/dev/null |
                sed "s|^$SRC/||")

# file -> its layer: src/<folder>/x.[ch] is <folder>; src/x.[ch] is main
while IFS= read -r f; do
  rel=${f#"$SRC"/}
  case "$rel" in
    */*) from=${rel%%/*} ;;
    *) from=main ;;
  esac
  [ -n "${RANK[$from]+x}" ] || continue
  while IFS=: read -r line inc; do
    to=${inc%%/*}
    if [ "$inc" = "$to" ]; then continue; fi          # "modules.h": the main layer's own header
    if [ "$from" != store ] && printf '%s\n' $rocks_headers | grep -qx "$inc"; then
      echo "layers: $rel:$line includes \"$inc\", which exposes RocksDB's C API: only src/store/ may"
      bad=1
    fi
    if [ -z "${RANK[$to]+x}" ]; then continue; fi     # not a folder of ours
    if [ "${RANK[$to]}" -gt "${RANK[$from]}" ]; then
      echo "layers: $rel:$line includes \"$inc\": $from may not include $to (it comes after $from)"
      bad=1
    fi
  done < <(grep -n -o -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+"[^"]+"' "$f" | sed -E 's/^([0-9]+):.*"([^"]+)"/\1:\2/')
  if [ "$from" != store ] && grep -n -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+<rocksdb/' "$f" >/dev/null; then
    echo "layers: $rel includes a RocksDB header: only src/store/ may"
    bad=1
  fi
done < <(find "$SRC" -name '*.[ch]' | sort)

if [ "$bad" -ne 0 ]; then exit 1; fi
echo "layers: ok"
