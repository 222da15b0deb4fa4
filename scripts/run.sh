#!/usr/bin/env bash
# The main job: build tpar's programs and run an AllReduce on whatever Vulkan devices this
# machine has (its GPUs; 4 lavapipe virtual devices when there is none), checking every
# result and printing a table. Extra arguments go to tpar-bench (see --help).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build="${TPAR_BUILD_DIR:-$root/build}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target tpar-info tpar-bench >/dev/null
"$build/examples/tpar-info"
echo
exec "$build/examples/tpar-bench" "$@"
