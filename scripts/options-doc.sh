#!/usr/bin/env bash
# Regenerate the option reference in docs/configuration.md (between <!-- options:begin -->
# and <!-- options:end -->) from the option rows, with the release binary (build/ankusa,
# `make` builds it). tests/e2e/test_modules.py fails when the page and the rows differ.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/ankusa}
gen=$("$bin" options --markdown)
python3 - "$gen" <<'PY'
import re, sys
p = "docs/configuration.md"
text = open(p).read()
new, n = re.subn(r"(<!-- options:begin -->\n).*(<!-- options:end -->)",
                 lambda m: m.group(1) + sys.argv[1] + "\n" + m.group(2), text, flags=re.S)
if n != 1:
    sys.exit("docs/configuration.md: no single <!-- options:begin/end --> region")
open(p, "w").write(new)
PY
echo "docs/configuration.md: option reference regenerated"
