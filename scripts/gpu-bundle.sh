#!/usr/bin/env bash
# Builds here what scripts/gpu-suite.sh runs on a GPU machine and packs it small enough to
# travel: llama.cpp with tpar's patches (scripts/llama.sh), tpar-bench, tpar-info and
# tpar's test programs, stripped and xz-compressed into one folder, with Debian's Vulkan loader
# packages (apt-get download; the GPU machines may have no loader) and a stamp naming
# the tree they were built from.
#
#   scripts/gpu-bundle.sh [--out DIR]     (default: out/gpu in the checkout; git ignores it)
#   scripts/gpu-bundle.sh --with-old REF [--out DIR]
#                                        also llama-bench as this repository's commit REF
#                                        built it (its pinned llama.cpp and patches), in
#                                        bin-old/, for gpu-suite.sh's part move
#   scripts/gpu-bundle.sh --no-tests ...  without tpar's test programs (a smaller bundle,
#                                        for gpu-suite.sh's parts but tests)
#   scripts/gpu-bundle.sh --mixed [--out DIR]
#                                        (default out/gpu-mixed) for gpu-suite.sh's part mixed:
#                                        tpar-info, tpar-bench, the numerics test and Debian's
#                                        lavapipe packed to run beside the GPU's driver
#
# exit status: 0 packed, 1 a build failed, 2 a usage error
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out="" mixed=0 old_ref="" with_tests=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set /{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --out) [[ $# -ge 2 ]] || { echo "gpu-bundle.sh: --out needs a folder" >&2; exit 2; }; out=$2; shift 2 ;;
    --mixed) mixed=1; shift ;;
    --no-tests) with_tests=0; shift ;;
    --with-old) [[ $# -ge 2 ]] || { echo "gpu-bundle.sh: --with-old needs a commit" >&2; exit 2; }
                git -C "$root" rev-parse --verify -q "$2^{commit}" > /dev/null || { echo "gpu-bundle.sh: no commit $2 in this repository" >&2; exit 2; }
                old_ref=$(git -C "$root" rev-parse --short=7 "$2"); shift 2 ;;
    *) echo "gpu-bundle.sh: unknown option '$1' (--help)" >&2; exit 2 ;;
  esac
done
say() { echo "gpu-bundle.sh: $*" >&2; }
[[ -n "$out" ]] || { [[ $mixed -eq 1 ]] && out="$root/out/gpu-mixed" || out="$root/out/gpu"; }

[[ $mixed -eq 1 ]] || "$root/scripts/llama.sh" --build-only
if [[ -n "$old_ref" ]]; then
  # the older commit's own scripts build its own pinned tree and patches
  old_src="$root/build-llama-old/tpar-$old_ref"
  if [[ ! -x "$old_src/scripts/llama.sh" ]]; then
    rm -rf "$old_src" && mkdir -p "$old_src"
    git -C "$root" archive "$old_ref" | tar -x -C "$old_src"
  fi
  say "building llama.cpp as $old_ref pinned and patched it"
  "$old_src/scripts/llama.sh" --build-only --build-dir "$root/build-llama-old/build-$old_ref"
fi
build="$root/build-gpu"
"$root/scripts/setup.sh" test
# Source paths relative to the checkout (-ffile-prefix-map): a test's messages name its
# files, and the logs that come back from a GPU machine carry no path of this machine.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPAR_LLAMA_TESTS=OFF \
  -DCMAKE_CXX_FLAGS="-ffile-prefix-map=$root/=" > /dev/null
# tpar's test programs that gpu-suite.sh's part tests runs (those ctest runs with a device,
# but the ones that build packages or llama.cpp)
tests=(core algo vk allreduce spans mixed behavior submission numerics relay relay_self_test stream fault trace
  dispatch_static dispatch_dynamic ggml/ggml kernels/tpar_test_kernels plan/tpar_plan_tests
  c_api/c_api_static c_api/c_api_dynamic c_api/c_api_threads policies)
targets=(tpar-bench tpar-info numerics)
[[ $mixed -eq 1 || $with_tests -eq 0 ]] || targets+=("${tests[@]##*/}")
say "building ${targets[*]}"
cmake --build "$build" --target "${targets[@]}" > "$build/bundle-build.log" 2>&1 ||
  { tail -20 "$build/bundle-build.log" >&2; exit 1; }

rm -rf "$out" && mkdir -p "$out/bin" "$out/tests"
pack() {  # FILE [FOLDER]: stripped and compressed into FOLDER/NAME.xz (FOLDER: bin)
  local name dir="$out/${2:-bin}"
  name=$(basename "$1")
  strip -o "$dir/$name" "$1"
  xz -T0 -6 -f "$dir/$name"
}
if [[ $mixed -eq 1 ]]; then
  pack "$build/tests/numerics"
  "$root/scripts/lavapipe-pack.sh" "$out/lvp.tar.xz" >&2
else
  for p in llama-bench llama-batched-bench llama-server llama-quantize tpar-llama-model tpar-llama-logits test-llama-archs; do pack "$root/build-llama/build/bin/$p"; done
  # the Vulkan layer of the llama.cpp case off-switch (a lost device, the extensions asked for)
  mkdir -p "$out/layer"
  gcc -shared -fPIC -O2 -fvisibility=hidden -o "$out/layer/libtpar_fault_layer.so" "$root/tests/llama/fault_layer.c" ||
    { say "building the fault layer failed"; exit 1; }
  sed 's|@TPAR_FAULT_LAYER_PATH@|./libtpar_fault_layer.so|' "$root/tests/llama/fault_layer.json.in" > "$out/layer/VK_LAYER_TPAR_fault.json"
  if [[ -n "$old_ref" ]]; then
    mkdir -p "$out/bin-old"
    pack "$root/build-llama-old/build-$old_ref/build/bin/llama-bench" bin-old
  fi
  if [[ $with_tests -eq 1 ]]; then
    for t in "${tests[@]}"; do pack "$build/tests/$t" tests; done
  fi
fi
pack "$build/examples/tpar-bench"
# probes/cbgap, probes/eventwait, probes/l2warm and probes/sysread for gpu-suite.sh's part probes (standalone programs on the C API)
for probe in cbgap eventwait l2warm sysread; do
  g++ -O2 -std=c++17 -o "$build/$probe" "$root/probes/$probe/$probe.cpp" -lvulkan || { say "building probes/$probe failed"; exit 1; }
  pack "$build/$probe"
done
pack "$build/examples/tpar-info"
# The loader and vulkaninfo, with the GL libraries vulkan-tools links, as .deb files that
# gpu-suite.sh unpacks where the machine has no libvulkan.so.1.
mkdir -p "$out/debs"
(cd "$out/debs" && apt-get download -q libvulkan1 vulkan-tools libglvnd0 libglx0 libgl1 libegl1 \
  libopengl0 libgles2 > /dev/null 2>&1) || { say "apt-get download of the loader packages failed"; exit 1; }
{
  echo "tree $(git -C "$root" rev-parse --short=7 HEAD)$(git -C "$root" diff --quiet HEAD -- . ':!docs' 2>/dev/null || echo "+uncommitted")"
  llama_commit=$(sed -nE 's/^llama_commit=([0-9a-f]+).*/\1/p' "$root/scripts/llama.sh")
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), llama.cpp $llama_commit + $(ls "$root"/integrations/llama.cpp/patches/*.patch | wc -l) patches"
  if [[ -n "$old_ref" ]]; then
    old_commit=$(sed -nE 's/^tarball=.*llama\.cpp-([0-9a-f]+)\.tar\.xz.*/\1/p; s/^llama_commit=([0-9a-f]+).*/\1/p' "$old_src/scripts/llama.sh" | head -1)
    echo "old tree $old_ref: llama.cpp $old_commit + $(ls "$old_src"/integrations/llama.cpp/patches/*.patch | wc -l) patches (bin-old/)"
  fi
} > "$out/STAMP"
say "packed $(du -sh "$out" | cut -f1) into $out: $(cat "$out/STAMP" | head -1)"
