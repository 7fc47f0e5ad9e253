#!/usr/bin/env bash
# The layering rule of DESIGN.md §5: a folder of src/ may include headers of its own
# folder and of the folders before it in this order, never of one after it:
#   core < net < http < blob < store < fleet < verify < queue < sinks < dispatch < archive
#   < backup < intake < routes < edge < lifecycle < tenant < admin < main (src/*.c)
# A lower layer reaches a higher one only through an interface it defines and a higher
# layer registers at start. Also refused: a folder of src/ that is not in the order (add
# it to the order first), and rocksdb/c.h outside src/store/.
# Usage: scripts/layers.sh [SRC_DIR]   (default: src). Exit 1 and one line per breach.
set -u
SRC="${1:-src}"
ORDER=(core net http blob store fleet verify queue sinks dispatch archive backup intake routes edge lifecycle tenant admin main)
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
# Every include of every file in one grep, judged in one awk (a process per include line
# made the check take half a minute): quoted includes against the order and the RocksDB
# headers, <rocksdb/...> outside store/.
out=$(find "$SRC" -name '*.[ch]' -print0 | sort -z |
  xargs -0 grep -n -H -E '^[[:space:]]*#[[:space:]]*include[[:space:]]+("[^"]+"|<rocksdb/)' |
  awk -v src="$SRC/" -v order="${ORDER[*]}" -v rocks="$rocks_headers" '
    BEGIN { n = split(order, o, " "); for (i = 1; i <= n; i++) rank[o[i]] = i
            m = split(rocks, r, /[ \n]+/); for (i = 1; i <= m; i++) if (r[i] != "") rh[r[i]] = 1 }
    {
      file = $0; sub(/:[0-9]+:.*/, "", file); rel = substr(file, length(src) + 1)
      rest = substr($0, length(file) + 2); line = rest; sub(/:.*/, "", line)
      from = (index(rel, "/") ? substr(rel, 1, index(rel, "/") - 1) : "main")
      if (!(from in rank)) next
      if (rest ~ /<rocksdb\//) {
        if (from != "store" && !(rel in said)) { print "layers: " rel " includes a RocksDB header: only src/store/ may"; said[rel] = 1 }
        next
      }
      inc = rest; sub(/^[^"]*"/, "", inc); sub(/".*$/, "", inc)
      to = (index(inc, "/") ? substr(inc, 1, index(inc, "/") - 1) : "")
      if (to == "") next                      # "modules.h": the main layer'"'"'s own header
      if (from != "store" && (inc in rh))
        print "layers: " rel ":" line " includes \"" inc "\", which exposes RocksDB'"'"'s C API: only src/store/ may"
      if (!(to in rank)) next                 # not a folder of ours
      if (rank[to] > rank[from])
        print "layers: " rel ":" line " includes \"" inc "\": " from " may not include " to " (it comes after " from ")"
    }')
if [ -n "$out" ]; then
  echo "$out"
  bad=1
fi

if [ "$bad" -ne 0 ]; then exit 1; fi
echo "layers: ok"
