#!/usr/bin/env bash
# llama.cpp with tpar, end to end: unpacks the pinned llama.cpp (third_party/), or takes
# the user's own checkout (--source), applies tpar's patches
# (integrations/llama.cpp/patches/), builds it with Vulkan and tpar
# (Release, only what is needed), makes a model with random weights, and runs llama-bench
# with -sm none, -sm layer, -sm tensor through ggml's own AllReduce, and -sm tensor
# through tpar, over this machine's GPUs (two lavapipe devices when there is none).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
llama_commit=de3ff815  # the pinned llama.cpp (third_party/README.md)
tarball="$root/third_party/llama.cpp-$llama_commit.tar.xz"
tarball_sha256=5c35cf89de9a45f8a3c7202aa2c402315c7ceb0746cd43d84e0d0014bdddb12f
patches=("$root"/integrations/llama.cpp/patches/*.patch)

usage() {
  cat <<'EOF'
usage: scripts/llama.sh [options]

Builds the pinned llama.cpp with tpar answering -sm tensor's AllReduce, makes a model
with random weights, and compares llama-bench's pp/tg over the split modes:
  -sm none (one device), -sm layer, -sm tensor with ggml's own AllReduce
  (GGML_VK_DISABLE_TPAR=1), and -sm tensor with tpar.

  --build-dir DIR    where everything goes (default: build-llama/ in the checkout)
  --source DIR       your own llama.cpp checkout instead of the pinned tree: the patches
                     are applied to it in place (3-way where the text moved; nothing in
                     DIR changes when one does not apply: the patch and why are named,
                     exit 1), or found already applied; then it is built in --build-dir.
                     Known to work: llama.cpp de3ff815 (2026-09-28), the pinned tree.
  --patch-only       stop after the patches are applied (with --source: build DIR with
                     your own CMake line, adding -DGGML_VULKAN=ON -DGGML_VULKAN_TPAR=ON)
  --build-only       stop after the build (the programs are in DIR/build/bin)
  --bin DIR          use the programs already built in DIR (llama-bench, tpar-llama-model):
                     no setup, no build; for machines that only run them
  --devices LIST     the Vulkan devices for the split modes, as GGML_VK_VISIBLE_DEVICES
                     takes them (default: every GPU; one GPU opened twice, 0,0, where
                     there is one; two lavapipe devices where there is none)
  --preset NAME      the model's shapes: tiny (default), tiny-moe, llama3-8b, llama3-70b
  --type TYPE        the model's weights: q8_0 (default), q4_0, q4_k_m, q5_k_m, q6_k,
                     f16, f32 (tpar-llama-model --help)
  --model FILE       bench this GGUF instead of making one
  --bench-args ARGS  passed to every llama-bench run (default: "-p 512 -n 128 -r 3")
  -h, --help         this text

Before the benches it runs tpar-info --self-test over the same devices (every gate and
self-test tpar's automatic choices rest on, each transport timed at 4 KiB, 16 KiB and
1 MiB): that summary comes first on stdout, then the table; send both with a report.

The first run takes a while (the build: 10-14 minutes on two cores); later runs
reuse it. Progress goes to stderr, the summary and the table to stdout.
exit status: 0 success, 1 a failure, 2 a usage error
EOF
}

die_usage() { echo "llama.sh: $1 (scripts/llama.sh --help)" >&2; exit 2; }
say() { echo "llama.sh: $*" >&2; }

build_dir="$root/build-llama" build_only=0 patch_only=0 source="" prebuilt="" devices="" preset=tiny type=q8_0 model="" bench_args="-p 512 -n 128 -r 3"
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --build-dir) [[ $# -ge 2 ]] || die_usage "--build-dir needs a folder"; build_dir=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --patch-only) patch_only=1; shift ;;
    --source) [[ $# -ge 2 && -f $2/ggml/src/ggml-vulkan/ggml-vulkan.cpp ]] ||
                die_usage "--source needs a llama.cpp checkout (a folder with ggml/src/ggml-vulkan/ggml-vulkan.cpp)"
              source=$(cd "$2" && pwd); shift 2 ;;
    --bin) [[ $# -ge 2 && -x $2/llama-bench ]] || die_usage "--bin needs a folder holding llama-bench"; prebuilt=$(cd "$2" && pwd); shift 2 ;;
    --devices) [[ $# -ge 2 && $2 =~ ^[0-9]+(,[0-9]+)+$ ]] || die_usage "--devices takes at least two indices, e.g. 0,1 or 0,0"; devices=$2; shift 2 ;;
    --preset) [[ $# -ge 2 && $2 =~ ^(tiny|tiny-moe|llama3-8b|llama3-70b)$ ]] || die_usage "--preset takes tiny, tiny-moe, llama3-8b or llama3-70b"; preset=$2; shift 2 ;;
    --type) [[ $# -ge 2 && $2 =~ ^(q8_0|q4_0|q4_k_m|q5_k_m|q6_k|f16|f32)$ ]] || die_usage "--type takes q8_0, q4_0, q4_k_m, q5_k_m, q6_k, f16 or f32"; type=$2; shift 2 ;;
    --model) [[ $# -ge 2 ]] || die_usage "--model needs a file"; model=$2; shift 2 ;;
    --bench-args) [[ $# -ge 2 ]] || die_usage "--bench-args needs a value"; bench_args=$2; shift 2 ;;
    *) die_usage "unknown option '$1'" ;;
  esac
done
[[ -z "$model" || -f "$model" ]] || { echo "llama.sh: no model file $model" >&2; exit 1; }
[[ -z "$prebuilt" || ( -z "$source" && $patch_only -eq 0 ) ]] || die_usage "--bin runs programs already built: it takes no --source or --patch-only"
mkdir -p "$build_dir" && build_dir=$(cd "$build_dir" && pwd)

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

# The pinned tree, unpacked and patched under the build folder (once: a stamp names the
# tarball and the patches it holds).
unpack_pinned() {
  [[ -f "$tarball" ]] || { echo "llama.sh: the pinned llama.cpp is missing: $tarball" >&2; exit 1; }
  src="$build_dir/src/llama.cpp"
  stamp_want=$( (echo "$tarball_sha256"; cat "${patches[@]}") | sha256sum | cut -d' ' -f1)
  if [[ "$(cat "$build_dir/src/.stamp" 2>/dev/null)" != "$stamp_want" ]]; then
    echo "$tarball_sha256  $tarball" | sha256sum --check --status ||
      { echo "llama.sh: $tarball is not the pinned llama.cpp (sha256 differs)" >&2; exit 1; }
    # unpacked and patched beside the tree the last build used; then only the files that
    # differ replace theirs, so that a change to one patch rebuilds only what it touches
    local fresh="$build_dir/src.new"
    rm -rf "$fresh" && mkdir -p "$fresh"
    say "unpacking llama.cpp $llama_commit"
    tar -xJf "$tarball" -C "$fresh"
    for p in "${patches[@]}"; do
      say "applying $(basename "$p")"
      patch -d "$fresh/llama.cpp" -p1 --forward --batch --quiet < "$p" ||
        { echo "llama.sh: $(basename "$p") does not apply to the pinned tree" >&2; exit 1; }
    done
    if [[ -d "$src" ]]; then
      local line a b n=0
      while IFS= read -r line; do
        if [[ $line =~ ^Files\ (.+)\ and\ (.+)\ differ$ ]]; then
          a=${BASH_REMATCH[1]} b=${BASH_REMATCH[2]}
          cp "$b" "$a"; n=$((n + 1))  # not -p: a file back at the tarball's older time would not rebuild
        elif [[ $line =~ ^Only\ in\ (.+):\ (.+)$ ]]; then
          a=${BASH_REMATCH[1]}/${BASH_REMATCH[2]}
          if [[ $a == "$fresh"/* ]]; then cp -r "$a" "$src${a#"$fresh/llama.cpp"}"; else rm -rf "$a"; fi
          n=$((n + 1))
        fi
      done < <(diff -rq "$src" "$fresh/llama.cpp" || true)
      say "$n files of the tree changed"
      rm -rf "$fresh"
    else
      rm -rf "$build_dir/src" && mkdir -p "$build_dir/src"
      mv "$fresh/llama.cpp" "$src" && rm -rf "$fresh"
    fi
    echo "$stamp_want" > "$build_dir/src/.stamp"
  fi
}

# The series applied to the user's checkout ($source), all or nothing. The work happens
# in a scratch git repository holding only the files the series touches: first the pinned
# tree's, with the series applied (so every patch's preimage is there for a 3-way
# merge), then the user's, onto which `git am -3` applies the series. Only when every
# patch applied are the results copied into the checkout. A checkout that already holds
# the series (every patch reverses, last first) is left as it is.
apply_to_source() {
  local files=() created=() pinned=() f rc failed user_commit
  mapfile -t files < <(sed -nE 's|^diff --git a/([^ ]+) b/.*|\1|p' "${patches[@]}" | sort -u)
  # the files the series creates (a shader) are in neither tree
  mapfile -t created < <(awk '/^diff --git a\// { f = substr($3, 3) } /^new file mode/ { print f }' "${patches[@]}" | sort -u)
  for f in "${files[@]}"; do [[ " ${created[*]} " == *" $f "* ]] || pinned+=("$f"); done
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/tpar-source.XXXXXX")
  trap 'rm -rf "$scratch"' EXIT  # (global: the trap runs after this function returned)
  local g=(git -C "$scratch/repo" -c user.name=tpar -c user.email=tpar@example.invalid -c advice.detachedHead=false -c core.autocrlf=false)
  git init -q "$scratch/repo"

  # the pinned tree's files and the series on them: every preimage blob, for -3
  tar -xJf "$tarball" -C "$scratch" "${pinned[@]/#/llama.cpp/}" ||
    { echo "llama.sh: cannot read the pinned files from $tarball" >&2; exit 1; }
  for f in "${pinned[@]}"; do mkdir -p "$scratch/repo/$(dirname "$f")"; cp "$scratch/llama.cpp/$f" "$scratch/repo/$f"; done
  "${g[@]}" add -A && "${g[@]}" commit -q -m pinned
  "${g[@]}" am -q "${patches[@]}" > "$scratch/am.log" 2>&1 ||
    { cat "$scratch/am.log" >&2; echo "llama.sh: the series does not apply to the pinned tree" >&2; exit 1; }

  # the user's files
  "${g[@]}" checkout -q --orphan user
  "${g[@]}" rm -rqf . >/dev/null
  local absent=()
  for f in "${files[@]}"; do
    if [[ -f "$source/$f" ]]; then mkdir -p "$scratch/repo/$(dirname "$f")"; cp "$source/$f" "$scratch/repo/$f"
    elif [[ " ${created[*]} " != *" $f "* ]]; then absent+=("$f"); fi
  done
  "${g[@]}" add -A && "${g[@]}" commit -q -m user
  user_commit=$("${g[@]}" rev-parse HEAD)

  # already applied? (every patch reverses, the last first)
  if grep -q GGML_VULKAN_TPAR "$source/ggml/CMakeLists.txt" 2>/dev/null; then
    local i reverses=1
    for (( i=${#patches[@]}-1; i>=0; i-- )); do
      "${g[@]}" apply -R --index "${patches[$i]}" 2>/dev/null || { reverses=0; break; }
    done
    if [[ $reverses -eq 1 ]]; then
      say "the series is already applied to $source: nothing to change"
      return 0
    fi
    echo "llama.sh: $source already holds a tpar change to ggml (GGML_VULKAN_TPAR in ggml/CMakeLists.txt), but not this series:" >&2
    echo "llama.sh: $(basename "${patches[$i]}") does not reverse. Put ggml's files back to upstream's first (another tpar series, or your own change?) and run again; nothing was changed" >&2
    exit 1
  fi

  say "applying ${#patches[@]} patches to $source (3-way where the text moved)"
  set +e
  "${g[@]}" am -3 "${patches[@]}" > "$scratch/am.log" 2>&1
  rc=$?
  set -e
  if [[ $rc -ne 0 ]]; then
    failed=$(sed -nE 's/^Patch failed at ([0-9]+) (.*)/\1 \2/p' "$scratch/am.log" | head -1)
    echo "llama.sh: patch ${failed:-?} does not apply to $source; nothing in it was changed" >&2
    local conflicts
    conflicts=$("${g[@]}" diff --name-only --diff-filter=U 2>/dev/null | paste -sd" " - || true)
    if [[ -n "$conflicts" ]]; then
      echo "llama.sh: the 3-way merge conflicts in: $conflicts" >&2
      "${g[@]}" diff --diff-filter=U 2>/dev/null | grep -A12 '^[ +-]*<<<<<<<' | head -40 | sed 's/^/  /' >&2
    fi
    for f in "${absent[@]}"; do echo "llama.sh: $source has no $f (the series is made for llama.cpp's ggml-vulkan as split in 2026-09)" >&2; done
    grep -E '^(error|fatal|CONFLICT)' "$scratch/am.log" | sed 's/^/  /' >&2 || true
    echo "llama.sh: the series is made against llama.cpp $llama_commit (third_party/README.md)" >&2
    exit 1
  fi
  local changed=() new=() before="$build_dir/source-before"
  mapfile -t changed < <("${g[@]}" diff --name-only "$user_commit" HEAD)
  # the files as they were, kept to undo with (a git checkout would also drop the user's
  # own uncommitted changes to them, which the 3-way merge kept)
  rm -rf "$before" && mkdir -p "$before"
  for f in "${changed[@]}"; do
    if [[ -f "$source/$f" ]]; then mkdir -p "$before/$(dirname "$f")" && cp -p "$source/$f" "$before/$f"
    else new+=("$f"); fi
  done
  for f in "${changed[@]}"; do
    mkdir -p "$source/$(dirname "$f")"
    cp "$scratch/repo/$f" "$source/$f.tpar-new" && mv "$source/$f.tpar-new" "$source/$f"
  done
  local merged
  merged=$(awk '/^Applying: / { p = substr($0, 11) } /^Using index info to reconstruct a base tree/ { printf "%s\"%s\"", n++ ? ", " : "", p }' "$scratch/am.log")
  [[ -z "$merged" ]] || say "merged 3-way (the text around them differs from $llama_commit): $merged"
  say "applied; changed in $source: ${changed[*]}"
  if [[ ${#new[@]} -gt 0 ]]; then
    say "to undo: cp -r $before/. $source/ (the files as they were), then remove what the series added: (cd $source && rm ${new[*]})"
  else
    say "to undo: cp -r $before/. $source/ (the files as they were)"
  fi
}

# Applies the series (to the pinned tree, or to --source), then builds the programs.
build_llama() {
  stage "setup"
  "$root/scripts/setup.sh" llama

  stage "source"
  if [[ -n "$source" ]]; then
    src=$source
    apply_to_source
  else
    unpack_pinned
  fi
  [[ $patch_only -eq 0 ]] || return 0

  stage "build"
  targets=(llama-bench llama-batched-bench llama-server llama-quantize tpar-llama-model tpar-llama-logits test-llama-archs tpar-info)
  if [[ ! -f "$build_dir/build/build.ninja" || "$(cat "$build_dir/build/.source" 2>/dev/null)" != "$src" ]]; then
    say "configuring for $src"
    cmake -S "$root/integrations/llama.cpp" -B "$build_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
          -DLLAMA_SOURCE_DIR="$src" > "$build_dir/configure.log" 2>&1 ||
      { tail -30 "$build_dir/configure.log" >&2; echo "llama.sh: configuring failed (log: $build_dir/configure.log)" >&2; exit 1; }
    echo "$src" > "$build_dir/build/.source"
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
  if [[ $patch_only -eq 1 ]]; then
    stage "done"
    say "patched tree: $src"
    exit 0
  fi
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
# The self-test report over the same devices, first in the output. GGML_VK_VISIBLE_DEVICES
# counts Vulkan's physical devices in enumeration order, as tpar-info's --devices does; one
# device listed several times (0,0) is tpar-info's --virtual.
self_test() {
  local info="$bin/tpar-info"
  if [[ ! -x "$info" ]]; then say "no tpar-info in $bin: the self-test report is left out"; return 0; fi
  local -a list flags
  IFS=, read -ra list <<< "$devices"
  if [[ ${#list[@]} -ge 2 && $(printf '%s\n' "${list[@]}" | sort -u | wc -l) -eq 1 ]]; then
    flags=(--devices "${list[0]}" --virtual "${#list[@]}")
  else
    flags=(--devices "$devices")
  fi
  say "tpar-info --self-test ${flags[*]}"
  if "$info" --self-test "${flags[@]}" > "$build_dir/self-test.txt" 2> "$build_dir/self-test.log"; then
    { echo "### tpar-info --self-test ${flags[*]}"; echo '```'; cat "$build_dir/self-test.txt"; echo '```'; echo; } >> "$out"
  else  # a report, not a gate: the benches run anyway
    tail -20 "$build_dir/self-test.txt" "$build_dir/self-test.log" >&2
    say "tpar-info --self-test failed (log: $build_dir/self-test.log); the benches run anyway"
    { echo "### tpar-info --self-test ${flags[*]}: failed"; echo '```'; cat "$build_dir/self-test.txt" "$build_dir/self-test.log"; echo '```'; echo; } >> "$out"
  fi
}
self_test
bench() {  # label, visible devices, split mode, extra environment
  local label=$1 visible=$2 sm=$3; shift 3
  say "llama-bench: $label"
  # shellcheck disable=SC2086
  if ! env "$@" GGML_VK_VISIBLE_DEVICES="$visible" TPAR_LOG="${TPAR_LOG:-info}" \
       "$bin/llama-bench" -v -m "$model" -ngl 99 -fa 1 -sm "$sm" $bench_args -o md > "$build_dir/bench-$label.md" 2> "$build_dir/bench-$label.log"; then
    tail -20 "$build_dir/bench-$label.log" >&2
    echo "llama.sh: llama-bench ($label) failed (log: $build_dir/bench-$label.log)" >&2
    exit 1
  fi
  grep -h "^tpar: " "$build_dir/bench-$label.log" | sed 's/^/  /' >&2 || true
  { echo "### $label (GGML_VK_VISIBLE_DEVICES=$visible $*)"; cat "$build_dir/bench-$label.md"; echo; } >> "$out"
}
bench "none" "$first" none
bench "layer" "$devices" layer
bench "tensor-ggml" "$devices" tensor GGML_VK_DISABLE_TPAR=1
bench "tensor-tpar" "$devices" tensor
stage "done"
cat "$out"
say "summary and table also in $out"
