#!/usr/bin/env bash
# The docs' checks catch a planted change, on a copy of README.md and docs/: a figure in
# README's rendered table (llama_report.py --check), a row of a sweep table that
# report.py checks (report.py --check), and a figure typed into PERFORMANCE.md's prose
# (figures.py --check). The copy as it is passes all three first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t="$tmp/t"
copy() { rm -rf "$t" && mkdir -p "$t/scripts" && cp -r "$root/README.md" "$root/docs" "$t/" && cp "$root/scripts/timeline.py" "$t/scripts/"; }
checks() {
  python3 "$t/docs/perf/llama_report.py" --check && python3 "$t/docs/perf/report.py" --check &&
    python3 "$t/docs/perf/figures.py" --check
}
expect_fail() {  # WHAT COMMAND...
  local what=$1; shift
  if "$@" > "$tmp/out" 2>&1; then
    echo "FAIL: $what: the check passed"; cat "$tmp/out"; exit 1
  fi
  echo "caught $what: $(grep -v '^$' "$tmp/out" | head -1)"
}
plant() {  # FILE PYTHON-REGEX REPLACEMENT: the first match only; fails if none
  python3 - "$@" <<'PY'
import re, sys
path, pattern, repl = sys.argv[1:4]
text = open(path).read()
new, n = re.subn(pattern, repl, text, count=1, flags=re.S)
if n != 1:
    sys.exit(f"planted_edits.sh: nothing matched {pattern!r} in {path}")
open(path, "w").write(new)
PY
}

copy
checks > /dev/null || { echo "FAIL: the unchanged copy does not pass its checks"; checks; exit 1; }
echo "the unchanged copy passes llama_report.py, report.py and figures.py --check"

# 1. README's first table: the first bold ratio one hundredth up.
plant "$t/README.md" '(<!-- rendered: readme-first -->.*?\| \*\*)(\d+)\.(\d\d)x' '\g<1>\g<2>.99x'
expect_fail "a changed figure in README's rendered table" python3 "$t/docs/perf/llama_report.py" --check

# 2. A sweep row report.py holds the page to: its NCCL time.
copy
plant "$t/docs/PERFORMANCE.md" '(\n\| 16 KiB \| )(\d+)\.(\d) /' '\g<1>\g<2>.0 /'
expect_fail "a changed row of a sweep table" python3 "$t/docs/perf/report.py" --check

# 3. A figure typed into the prose.
copy
plant "$t/docs/PERFORMANCE.md" '(## What bounds each figure\n)' '\g<1>\nDecode on two H200s runs at 1.21x one GPU.\n'
expect_fail "a figure typed into PERFORMANCE.md's prose" python3 "$t/docs/perf/figures.py" --check
echo "PASS: every planted change was caught"
