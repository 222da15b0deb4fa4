#!/usr/bin/env bash
# The main job: build tpar's programs and run an AllReduce on whatever Vulkan devices this
# machine has (its GPUs; 4 lavapipe virtual devices when there is none), checking every
# result and printing a table. Extra arguments go to tpar-bench (see --help).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${TPAR_BUILD_DIR:-$root/build}"
for arg in "$@"; do
  if [[ "$arg" == -h || "$arg" == --help ]]; then
    # at once: no package installed, nothing built, no folder made
    cat <<USAGE
Usage: scripts/run.sh [tpar-bench options]
Builds tpar-info and tpar-bench in $build/examples (TPAR_BUILD_DIR
moves it; the first run installs the Debian packages it needs), lists this machine's
Vulkan devices (tpar-info), then runs tpar-bench with the options given: by default over
every GPU, or four lavapipe virtual devices when there is none. Wrong options stop it
before the device listing.
exit status: 0 success, 1 runtime failure, 2 usage error, 3 a result checked wrong
USAGE
    if [[ -x "$build/examples/tpar-bench" ]]; then
      echo
      exec "$build/examples/tpar-bench" --help
    fi
    echo "tpar-bench's options: $build/examples/tpar-bench --help, once a run has built it"
    exit 0
  fi
done
"$root/scripts/setup.sh"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_BUILD_TESTS=OFF >/dev/null
cmake --build "$build" --target tpar-info tpar-bench >/dev/null
# The options first (exit 2, nothing on stdout, when they are wrong), then the devices.
"$build/examples/tpar-bench" --dry-run "$@"
"$build/examples/tpar-info"
echo
exec "$build/examples/tpar-bench" "$@"
