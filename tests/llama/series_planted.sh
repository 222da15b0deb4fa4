#!/usr/bin/env bash
# series.sh must name the patch that breaks the series: copies of the patches where the
# fourth (of seven) no longer compiles (an enumerator misspelt in a line it adds), where
# the third compiles only with tpar (tpar's header included outside #ifdef
# GGML_VULKAN_TPAR), and where a header numbers its patch wrong; each run must fail,
# naming that patch.
#   series_planted.sh BUILD WORK
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: series_planted.sh BUILD WORK} work=${2:?usage: series_planted.sh BUILD WORK}
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL (series planted): $*" >&2; exit 1; }
planted() {  # NAME SED-EXPRESSION PATCH-GLOB: the series with that patch edited, then series.sh on it
  local name=$1 expr=$2 glob=$3
  mkdir -p "$work/$name"
  cp "$here/../../integrations/llama.cpp/patches/"*.patch "$work/$name/"
  local target
  target=$(ls "$work/$name/"$glob)
  sed -i "$expr" "$target"
  cmp -s "$target" "$here/../../integrations/llama.cpp/patches/$(basename "$target")" && fail "$name: the edit changed nothing in $(basename "$target")"
  rc=0
  "$here/series.sh" "$build" "$work/$name-run" --patches "$work/$name" > "$work/$name.log" 2>&1 || rc=$?
  grep -E "^series.sh: FAIL|^000" "$work/$name.log" | sed 's/^/  | /'
  [[ $rc -eq 1 ]] || fail "$name: series.sh exited $rc, not 1"
  grep -q "FAIL: $(basename "$target")" "$work/$name.log" || fail "$name: series.sh did not name $(basename "$target")"
  echo "caught: $name ($(basename "$target"))"
}
planted misspelt 's/^\(+.*\)eMesaLlvmpipe/\1eMesaLlvmpip/' '0004-*.patch'
planted tpar-only 's/^+#ifdef GGML_VULKAN_TPAR$/+#if 1/' '0003-*.patch'
grep -q "does not compile with GGML_VULKAN_TPAR=OFF" "$work/tpar-only.log" || fail "tpar-only: not found as a failure without tpar"
planted numbered 's/^Subject: \[PATCH 2\//Subject: [PATCH 3\//' '0002-*.patch'
echo "PASS (series planted)"
