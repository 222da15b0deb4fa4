#!/usr/bin/env bash
# llama.cpp with tpar, end to end: unpacks the pinned llama.cpp (third_party/), applies
# tpar's patches (integrations/llama.cpp/patches/), builds it with Vulkan and tpar
# (Release, only what is needed), makes a model with random weights, and runs llama-bench
# with -sm none, -sm layer, -sm tensor through ggml's own AllReduce, and -sm tensor
# through tpar, over this machine's GPUs (two lavapipe devices when there is none).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tarball="$root/third_party/llama.cpp-3f545bec.tar.xz"
tarball_sha256=c706498cee583f10dda009e81f399e807e0e49bb20a3fe6ebefd9791a91044d6
patches=("$root"/integrations/llama.cpp/patches/*.patch)

usage() {
  cat <<'EOF'
usage: scripts/llama.sh [options]

Builds the pinned llama.cpp with tpar answering -sm tensor's AllReduce, makes a model
with random weights, and compares llama-bench's pp/tg over the split modes:
  -sm none (one device), -sm layer, -sm tensor with ggml's own AllReduce
  (GGML_VK_DISABLE_TPAR=1), and -sm tensor with tpar.

  --build-dir DIR    where everything goes (default: build-llama/ in the checkout)
  --build-only       stop after the build (the programs are in DIR/build/bin)
  --bin DIR          use the programs already built in DIR (llama-bench, tpar-llama-model):
                     no setup, no build; for machines that only run them
  --devices LIST     the Vulkan devices for the split modes, as GGML_VK_VISIBLE_DEVICES
                     takes them (default: every GPU; one GPU opened twice, 0,0, where
                     there is one; two lavapipe devices where there is none)
  --preset NAME      the model's shapes: tiny (default), tiny-moe, llama3-8b, llama3-70b
  --type TYPE        the model's weights: q8_0 (default), f16, f32
  --model FILE       bench this GGUF instead of making one
  --bench-args ARGS  passed to every llama-bench run (default: "-p 512 -n 128 -r 3")
  -h, --help         this text

The first run takes a while (the build: 10-14 minutes on two cores); later runs
reuse it. Progress goes to stderr, the table to stdout.
exit status: 0 success, 1 a failure, 2 a usage error
EOF
}

die_usage() { echo "llama.sh: $1 (scripts/llama.sh --help)" >&2; exit 2; }
say() { echo "llama.sh: $*" >&2; }

build_dir="$root/build-llama" build_only=0 prebuilt="" devices="" preset=tiny type=q8_0 model="" bench_args="-p 512 -n 128 -r 3"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --build-dir) [[ $# -ge 2 ]] || die_usage "--build-dir needs a folder"; build_dir=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --bin) [[ $# -ge 2 && -x $2/llama-bench ]] || die_usage "--bin needs a folder holding llama-bench"; prebuilt=$(cd "$2" && pwd); shift 2 ;;
    --devices) [[ $# -ge 2 && $2 =~ ^[0-9]+(,[0-9]+)+$ ]] || die_usage "--devices takes at least two indices, e.g. 0,1 or 0,0"; devices=$2; shift 2 ;;
    --preset) [[ $# -ge 2 && $2 =~ ^(tiny|tiny-moe|llama3-8b|llama3-70b)$ ]] || die_usage "--preset takes tiny, tiny-moe, llama3-8b or llama3-70b"; preset=$2; shift 2 ;;
    --type) [[ $# -ge 2 && $2 =~ ^(q8_0|f16|f32)$ ]] || die_usage "--type takes q8_0, f16 or f32"; type=$2; shift 2 ;;
    --model) [[ $# -ge 2 ]] || die_usage "--model needs a file"; model=$2; shift 2 ;;
    --bench-args) [[ $# -ge 2 ]] || die_usage "--bench-args needs a value"; bench_args=$2; shift 2 ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done
[[ -z "$model" || -f "$model" ]] || { echo "llama.sh: no model file $model" >&2; exit 1; }

stage_start=$SECONDS
stage() {
  local now=$SECONDS
  [[ -n "${stage_name:-}" ]] && say "$stage_name: $((now - stage_start)) s"
  stage_name=$1 stage_start=$now
}

# ninja's [done/total] lines, thinned to one every 10% or 30 s
progress() {
  local last=-10 shown=$SECONDS begin=$SECONDS line pct
  while IFS= read -r line; do
    # (the few-step lines are ggml's shader generator, a build of its own inside)
    [[ $line =~ ^\[([0-9]+)/([0-9]+)\] ]] && (( BASH_REMATCH[2] > 10 )) || continue
    pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2]))
    if (( pct >= last + 10 || SECONDS - shown >= 30 )); then
      say "built ${BASH_REMATCH[1]}/${BASH_REMATCH[2]} ($pct%, $((SECONDS - begin)) s)"
      last=$pct shown=$SECONDS
    fi
  done
}

# Unpacks and patches the pinned tree (once: a stamp names the tarball and the patches
# it holds), then builds the programs.
build_llama() {
  stage "setup"
  "$root/scripts/setup.sh" llama

  stage "source"
  [[ -f "$tarball" ]] || { echo "llama.sh: the pinned llama.cpp is missing: $tarball" >&2; exit 1; }
  src="$build_dir/src/llama.cpp"
  stamp_want=$( (echo "$tarball_sha256"; cat "${patches[@]}") | sha256sum | cut -d' ' -f1)
  if [[ "$(cat "$build_dir/src/.stamp" 2>/dev/null)" != "$stamp_want" ]]; then
    echo "$tarball_sha256  $tarball" | sha256sum --check --status ||
      { echo "llama.sh: $tarball is not the pinned llama.cpp (sha256 differs)" >&2; exit 1; }
    rm -rf "$build_dir/src"
    mkdir -p "$build_dir/src"
    say "unpacking llama.cpp 3f545bec"
    tar -xJf "$tarball" -C "$build_dir/src"
    for p in "${patches[@]}"; do
      say "applying $(basename "$p")"
      patch -d "$src" -p1 --forward --batch --quiet < "$p" ||
        { echo "llama.sh: $(basename "$p") does not apply to the pinned tree" >&2; exit 1; }
    done
    echo "$stamp_want" > "$build_dir/src/.stamp"
  fi

  stage "build"
  targets=(llama-bench llama-server tpar-llama-model tpar-llama-logits)
  if [[ ! -f "$build_dir/build/build.ninja" ]]; then
    say "configuring"
    cmake -S "$root/integrations/llama.cpp" -B "$build_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
          -DLLAMA_SOURCE_DIR="$src" > "$build_dir/configure.log" 2>&1 ||
      { tail -30 "$build_dir/configure.log" >&2; echo "llama.sh: configuring failed (log: $build_dir/configure.log)" >&2; exit 1; }
  fi
  say "building ${targets[*]} (log: $build_dir/build.log)"
  set +e
  cmake --build "$build_dir/build" --target "${targets[@]}" 2>&1 | tee "$build_dir/build.log" | progress
  local rc=${PIPESTATUS[0]}
  set -e
  if [[ $rc -ne 0 ]]; then
    grep -E "error|Error" "$build_dir/build.log" | head -20 >&2
    echo "llama.sh: the build failed (log: $build_dir/build.log)" >&2
    exit 1
  fi
}

if [[ -n "$prebuilt" ]]; then
  bin=$prebuilt
else
  build_llama
  bin="$build_dir/build/bin"
  if [[ $build_only -eq 1 ]]; then
    stage "done"
    say "programs in $bin"
    exit 0
  fi
fi
mkdir -p "$build_dir"

# Devices: the GPUs ggml sees by default; one GPU opened twice; else two lavapipe devices.
stage "devices"
if [[ -z "$devices" ]]; then
  gpus=$("$bin/llama-bench" --list-devices 2>/dev/null | grep -c '^ *Vulkan[0-9]' || true)
  if [[ $gpus -ge 2 ]]; then
    devices=$(seq -s, 0 $((gpus - 1)))
  else
    devices=0,0
    if [[ $gpus -eq 1 ]]; then say "one GPU: opening it as two ggml devices (0,0); they time-slice one GPU"
    else say "no GPU: two lavapipe devices (0,0)"; fi
  fi
fi
say "devices for the split modes: $devices"

stage "model"
if [[ -z "$model" ]]; then
  model="$build_dir/models/$preset-$type.gguf"
  if [[ ! -f "$model" ]]; then
    mkdir -p "$build_dir/models"
    "$bin/tpar-llama-model" --preset "$preset" --type "$type" -o "$model"
  fi
fi

stage "bench"
first=${devices%%,*}
out="$build_dir/bench.md"
: > "$out"
bench() {  # label, visible devices, split mode, extra environment
  local label=$1 visible=$2 sm=$3; shift 3
  say "llama-bench: $label"
  # shellcheck disable=SC2086
  if ! env "$@" GGML_VK_VISIBLE_DEVICES="$visible" TPAR_LOG="${TPAR_LOG:-info}" \
       "$bin/llama-bench" -m "$model" -ngl 99 -fa 1 -sm "$sm" $bench_args -o md > "$build_dir/bench-$label.md" 2> "$build_dir/bench-$label.log"; then
    tail -20 "$build_dir/bench-$label.log" >&2
    echo "llama.sh: llama-bench ($label) failed (log: $build_dir/bench-$label.log)" >&2
    exit 1
  fi
  grep -h "tpar" "$build_dir/bench-$label.log" | sed 's/^/  /' >&2 || true
  { echo "### $label (GGML_VK_VISIBLE_DEVICES=$visible $*)"; cat "$build_dir/bench-$label.md"; echo; } >> "$out"
}
bench "none" "$first" none
bench "layer" "$devices" layer
bench "tensor-ggml" "$devices" tensor GGML_VK_DISABLE_TPAR=1
bench "tensor-tpar" "$devices" tensor
stage "done"
cat "$out"
say "table also in $out"
