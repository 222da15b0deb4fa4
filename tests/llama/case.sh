#!/usr/bin/env bash
# One llama.cpp test case: the same prompt through -sm none, -sm tensor with ggml's own
# AllReduce (GGML_VK_DISABLE_TPAR=1) and -sm tensor with tpar, on lavapipe devices
# (GGML_VK_VISIBLE_DEVICES=0,0 opens one physical device as two ggml devices), logits
# compared number for number, and tpar's own account of its calls checked.
#   case.sh NAME   with BIN (llama.cpp's bin/), MODELS (the test models), WORK (scratch)
set -euo pipefail
name=$1
: "${BIN:?}" "${MODELS:?}" "${WORK:?}"
dir="$WORK/$name"
rm -rf "$dir" && mkdir -p "$dir"
fail() { echo "FAIL ($name): $*" >&2; exit 1; }

# run LABEL MODEL VISIBLE SM [ENV...]: logits to $dir/LABEL.logits, stderr to $dir/LABEL.log
run() {
  local label=$1 model=$2 visible=$3 sm=$4; shift 4
  echo "== $label: -sm $sm on devices $visible ${*}"
  if ! env "$@" GGML_VK_VISIBLE_DEVICES="$visible" TPAR_LOG=info \
      "$BIN/tpar-llama-logits" run -m "$MODELS/$model" --sm "$sm" ${RUN_ARGS:--n 8} -o "$dir/$label.logits" > "$dir/$label.out" 2> "$dir/$label.log"; then
    tail -30 "$dir/$label.log"
    fail "$label: tpar-llama-logits failed"
  fi
  cat "$dir/$label.out"
  grep "tpar" "$dir/$label.log" || true
}
compare() {  # A B [--exact | --bound X]
  "$BIN/tpar-llama-logits" compare "$dir/$1.logits" "$dir/$2.logits" "${@:3}" || fail "$1 vs $2 ${*:3}"
}
# tpar's summary line when the meta backend frees it: "N AllReduces on the GPUs (the
# largest M values), E empty, D declined to ggml's fallback"
summary() { grep -o 'ggml comm: [0-9]* AllReduces on the GPUs.*' "$dir/$1.log" || fail "$1: no tpar summary (tpar did not serve -sm tensor)"; }
field() { summary "$1" | sed -E "s/.*$2.*/\\1/"; }
check_served() {  # LABEL DEVICES: tpar served every AllReduce, none declined
  grep -q "ggml comm: AllReduce over $2 devices" "$dir/$1.log" || fail "$1: tpar's hook was not set up over $2 devices"
  local reduced declined
  reduced=$(field "$1" 'comm: ([0-9]+) AllReduces')
  declined=$(field "$1" ', ([0-9]+) declined')
  echo "tpar: $reduced AllReduces, $declined declined"
  [[ $reduced -gt 0 ]] || fail "$1: tpar reduced nothing"
  [[ $declined -eq 0 ]] || fail "$1: $declined calls fell back to ggml's AllReduce"
}

# tpar runs with TPAR_WIRE=f32 where its logits must equal ggml's own AllReduce's: its
# default sends bf16 from 1 MiB (prefill-sized calls; none in these small models).

# How far -sm tensor may stray from -sm none, as a fraction of the largest |logit|: the
# split changes the order of every matmul's f32 sums. Measured on these models on
# lavapipe: 0.0069 (dense, 2 devices), 0.0075 (3 devices), 0.0075 (MoE); the same
# with ggml's own AllReduce, since it and tpar agree bit for bit at 2 devices.
bound_vs_none="--relative 0.02"

case "$name" in
  dense-2)
    run none dense.gguf 0 none
    run ggml dense.gguf 0,0 tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf 0,0 tensor TPAR_WIRE=f32
    check_served tpar 2
    compare tpar ggml --exact          # both sum two f32 values: a + b == b + a
    compare tpar none $bound_vs_none
    compare ggml none $bound_vs_none
    ;;
  dense-3-zero-slices)
    # 256 wide, 4 heads, 2 KV heads over 3 devices: the attention split's granularity
    # (128) leaves one device with no heads in every layer, so its partial sums are
    # computed by no one and must count as zeros.
    run none dense.gguf 0 none
    run ggml dense.gguf 0,0,0 tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf 0,0,0 tensor TPAR_WIRE=f32
    check_served tpar 3
    idle=$(field tpar ', ([0-9]+) with a device that computed nothing')
    echo "tpar: $idle calls had a device contributing zeros"
    [[ $idle -gt 0 ]] || fail "no call had a zero-size slice: the test does not test what it claims"
    compare tpar none $bound_vs_none
    compare tpar ggml --relative 0.001  # three values, summed in different orders
    ;;
  moe-2)
    # Mesa 22.3's lavapipe crashes in ggml-vulkan's single-token MoE matmuls and in its
    # fused top-k shader, whatever the split and with ggml's own AllReduce too: on
    # lavapipe the case runs the prompt only, unfused; GPUs run it whole.
    if [[ "${TPAR_TEST_DEVICES:-}" != gpus ]]; then
      RUN_ARGS="-n 0"
      export GGML_VK_DISABLE_FUSION=1
    fi
    run none moe.gguf 0 none
    run ggml moe.gguf 0,0 tensor GGML_VK_DISABLE_TPAR=1
    run tpar moe.gguf 0,0 tensor TPAR_WIRE=f32
    check_served tpar 2
    # The meta backend delays an MoE layer's AllReduce past the sum of the experts: the
    # largest call is then n_embd x prompt tokens, not that times the experts used.
    largest=$(field tpar 'the largest ([0-9]+) values')
    tokens=$(sed -nE 's/.*\(([0-9]+) prompt tokens.*/\1/p' "$dir/tpar.out")
    echo "tpar: largest call $largest values, prompt $tokens tokens x 256 wide"
    [[ $largest -eq $((tokens * 256)) ]] || fail "the largest AllReduce is $largest values, not $((tokens * 256)): the delayed path was not taken"
    compare tpar ggml --exact
    compare tpar none $bound_vs_none
    ;;
  refused)
    # A group tpar must refuse: its hook logs why at init and ggml's own AllReduce gives the
    # same answers as without the hook. On lavapipe, NativeImport asked for where it
    # cannot run (no exportable semaphores); everywhere, a TPAR_SYNC value that is no sync.
    run ggml dense.gguf 0,0 tensor GGML_VK_DISABLE_TPAR=1
    refusals=("badvalue:TPAR_SYNC=sideways")
    [[ "${TPAR_TEST_DEVICES:-}" == gpus ]] || refusals+=("native:TPAR_SYNC=native")
    for r in "${refusals[@]}"; do
      label=refused-${r%%:*}
      run "$label" dense.gguf 0,0 tensor "${r#*:}"
      grep -q "ggml comm: no accelerated AllReduce" "$dir/$label.log" || fail "$label: tpar did not log why it refused"
      ! grep -q "AllReduces on the GPUs" "$dir/$label.log" || fail "$label: tpar served calls it should have refused"
      compare "$label" ggml --exact
    done
    ;;
  validation)
    # The ordering between ggml-vulkan's own work and tpar's, checked by the Khronos
    # validation layer with synchronization validation: any report fails the case but
    # the layer's own stall report (layers before 1.3.296; docs/testing.md).
    [[ -n "$(ls /usr/share/vulkan/explicit_layer.d/*validation* 2>/dev/null)" ]] || { echo "[skipped] no validation layer installed"; exit 0; }
    RUN_ARGS="-n 2"
    run tpar dense.gguf 0,0 tensor VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
        VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
    check_served tpar 2
    reports=$(cat "$dir/tpar.out" "$dir/tpar.log" | grep -o 'Validation [A-Za-z]*: \[ [A-Za-z0-9_-]* \]' | sort | uniq -c || true)
    echo "validation layer reports: ${reports:-none}"
    if echo "$reports" | grep -v 'UNASSIGNED-VkSemaphore-state-timeout' | grep -q Validation; then
      fail "the validation layer reported the above"
    fi
    ;;
  *) echo "case.sh: unknown case '$name'" >&2; exit 2 ;;
esac
echo "PASS ($name)"
