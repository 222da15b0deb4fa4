#!/usr/bin/env bash
# scripts/run.sh --help prints its help at once: exit 0, the usage on stdout, and no
# build folder made, no package installed, nothing built (a build folder that does not
# exist must still not exist afterwards).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
out=$(TPAR_BUILD_DIR="$scratch/build" "$root/scripts/run.sh" --help)
grep -q "^Usage: scripts/run.sh" <<< "$out" || { echo "FAIL: no usage in: $out"; exit 1; }
[[ ! -e "$scratch/build" ]] || { echo "FAIL: run.sh --help made $scratch/build"; exit 1; }
out=$(TPAR_BUILD_DIR="$scratch/build" "$root/scripts/run.sh" --threads 4 -h)
grep -q "^Usage: scripts/run.sh" <<< "$out" || { echo "FAIL: -h after another option printed no usage"; exit 1; }
[[ ! -e "$scratch/build" ]] || { echo "FAIL: run.sh -h made $scratch/build"; exit 1; }
echo "PASS: run.sh --help printed its usage and made nothing"
