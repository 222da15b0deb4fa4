#!/usr/bin/env bash
# README's C++ snippet ("Using it") compiles as it stands: the first ```cpp block after
# the heading, compiled with the project's headers.
#   readme_snippet.sh CXX
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cxx=${1:?usage: readme_snippet.sh CXX}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
awk '/^## Using it/ { on = 1 } on && /^```cpp$/ { code = 1; next } code && /^```$/ { exit } code { print }' \
  "$root/README.md" > "$scratch/snippet.cpp"
[[ -s "$scratch/snippet.cpp" ]] || { echo "FAIL: no C++ snippet under README's 'Using it'"; exit 1; }
"$cxx" -std=c++20 -fsyntax-only -I"$root/include" "$scratch/snippet.cpp"
echo "PASS: README's snippet ($(wc -l < "$scratch/snippet.cpp") lines) compiles"
