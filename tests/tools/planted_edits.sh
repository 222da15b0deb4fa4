#!/usr/bin/env bash
# The docs' checks catch a planted change, on a copy of README.md and docs/: a figure in
# README's rendered table (llama_report.py --check), a row of a sweep table that
# report.py checks (report.py --check), a figure typed into PERFORMANCE.md's prose
# (figures.py --check); on README's first screen a commit hash, a run label, "before", a
# figure outside the rendered block, a figure edited inside it, a screen longer than 45
# lines and a log newer than the render (tests/tools/first_screen.py); and a raw log without
# its stamp (tests/tools/check_stamps.py). The copy as it is passes every check first.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
t="$tmp/t"
copy() { rm -rf "$t" && mkdir -p "$t/scripts" && cp -r "$root/README.md" "$root/docs" "$t/" && cp "$root/scripts/timeline.py" "$t/scripts/"; }
tools=$root/tests/tools
checks() {
  python3 "$t/docs/perf/llama_report.py" --check && python3 "$t/docs/perf/report.py" --check &&
    python3 "$t/docs/perf/figures.py" --check && python3 "$tools/first_screen.py" --root "$t" &&
    python3 "$tools/check_stamps.py" --raw "$t/docs/perf/raw"
}
expect_fail() {  # WHAT [--says TEXT] COMMAND...: COMMAND fails (saying TEXT)
  local what=$1 says=""; shift
  if [[ $1 == --says ]]; then says=$2; shift 2; fi
  if "$@" > "$tmp/out" 2>&1; then
    echo "FAIL: $what: the check passed"; cat "$tmp/out"; exit 1
  fi
  if [[ -n $says ]] && ! grep -qF -- "$says" "$tmp/out"; then
    echo "FAIL: $what: the check failed without saying '$says'"; cat "$tmp/out"; exit 1
  fi
  echo "caught $what: $(grep -v '^$' "$tmp/out" | grep -F -- "${says:-}" | head -1)"
}
plant() {  # FILE PYTHON-REGEX REPLACEMENT: the first match only; fails if none
  python3 - "$@" <<'PY'
import re, sys
path, pattern, repl = sys.argv[1:4]
text = open(path).read()
new, n = re.subn(pattern, repl, text, count=1, flags=re.S | re.M)
if n != 1:
    sys.exit(f"planted_edits.sh: nothing matched {pattern!r} in {path}")
open(path, "w").write(new)
PY
}

copy
checks > /dev/null || { echo "FAIL: the unchanged copy does not pass its checks"; checks; exit 1; }
echo "the unchanged copy passes llama_report.py, report.py and figures.py --check, first_screen.py and check_stamps.py"

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

# 4-11. README's first screen (lines 1-45), each caught by the rule it breaks.
screen() { python3 "$tools/first_screen.py" --root "$t"; }
copy
plant "$t/README.md" '^(# tpar [^\n]*)' '\g<1> (tree 5b869da)'
expect_fail "a commit hash on the first screen" --says "commit hash 5b869da" screen
copy
plant "$t/README.md" '^(# tpar [^\n]*)' '\g<1>, as run Q1 measured it'
expect_fail "a run label on the first screen" --says "run label 'Q1'" screen
copy
plant "$t/README.md" '^(# tpar [^\n]*)' '\g<1>, faster than before'
expect_fail "'before' on the first screen" --says "'before'" screen
copy
plant "$t/README.md" '^(# tpar [^\n]*)' '\g<1>: 1.21x one GPU'
expect_fail "a figure outside the rendered block" --says "figure 1.21x outside the rendered block" screen
copy
plant "$t/README.md" '(<!-- rendered: readme-first -->.*?generation )(\d+)\.(\d\d)-' '\g<1>\g<2>.99-'
expect_fail "a figure edited inside the rendered block" --says "is not what llama_report.py renders" screen
copy
plant "$t/README.md" '^(# tpar [^\n]*\n)' '\g<1>\n'
expect_fail "a first screen longer than 45 lines" --says "ends past line 45" screen
copy
python3 - "$t/docs/perf/raw" <<'PY'
import re, sys
raw = sys.argv[1]
text = open(f"{raw}/glance-h200x2-5b869da.txt").read()
text = re.sub(r"^# ran 2026-11-27T", "# ran 2026-12-01T", text, flags=re.M)  # a newer run of the same table
text = text.replace("| tensor |   1 |           tg128 |        220.16 ± 5.27 |", "| tensor |   1 |           tg128 |        240.16 ± 5.27 |")
open(f"{raw}/glance-h200x2-newer.txt", "w").write(text)
PY
expect_fail "a stamped log newer than the first screen's render" --says "is not what llama_report.py renders" screen
copy
plant "$t/docs/perf/llama_report.py" '("\*\*What to expect\*\* on )' '"(run Q1) " \g<1>'
python3 "$t/docs/perf/llama_report.py" > /dev/null
expect_fail "a run label the renderer writes itself" --says "run label 'Q1'" screen

# 11. A raw log without its stamp.
copy
sed -i 1,2d "$t/docs/perf/raw/wake-x2.txt"
expect_fail "a raw log without its stamp" python3 "$tools/check_stamps.py" --raw "$t/docs/perf/raw"
echo "PASS: every planted change was caught"
