#!/usr/bin/env bash
# One llama.cpp test case: the same prompt through -sm none, -sm tensor with ggml's own
# AllReduce (GGML_VK_DISABLE_TPAR=1) and -sm tensor with tpar, on lavapipe devices
# (GGML_VK_VISIBLE_DEVICES=0,0 opens one physical device as two ggml devices), logits
# compared number for number, and tpar's own account of its calls checked.
#   case.sh NAME   with BIN (llama.cpp's bin/), MODELS (the test models), WORK (scratch)
set -euo pipefail
name=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
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
# server_up LABEL SLOTS CONTEXT [ENV...]: a llama-server with -sm tensor on the dense
# model over two lavapipe devices (SERVER_MODEL, SERVER_SM, SERVER_DEVICES and
# SERVER_ARGS change them), its log in $dir/LABEL-server.log; sets server_port and
# server_pid once it answers /health, or fails the case. server_down stops it.
server_up() {
  local label=$1 slots=$2 ctx=$3; shift 3
  server_port=$((20000 + RANDOM % 20000))
  # (-lv 4: llama-server's log shows ggml's info lines, tpar's among them)
  # shellcheck disable=SC2086
  env "$@" GGML_VK_VISIBLE_DEVICES="${SERVER_DEVICES:-0,0}" TPAR_LOG=info "$BIN/llama-server" -m "$MODELS/${SERVER_MODEL:-dense.gguf}" \
      -ngl 99 -fa on -sm "${SERVER_SM:-tensor}" -c "$ctx" -np "$slots" --no-warmup --host 127.0.0.1 --port "$server_port" -lv 4 \
      ${SERVER_ARGS:-} > "$dir/$label-server.log" 2>&1 &
  server_pid=$!
  local ready=0
  for _ in $(seq 1 240); do
    if curl -sf "http://127.0.0.1:$server_port/health" > /dev/null 2>&1; then ready=1; break; fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.5
  done
  if [[ $ready -ne 1 ]]; then
    kill "$server_pid" 2>/dev/null || true
    tail -30 "$dir/$label-server.log"
    fail "$label: llama-server did not come up"
  fi
}
server_down() {  # LABEL
  kill -INT "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  grep "tpar" "$dir/$1-server.log" || true
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

# The two devices of the -sm tensor runs (GGML_VK_VISIBLE_DEVICES): one lavapipe device
# opened twice, by default; a GPU run names its own (0,1: two GPUs, or a GPU and llvmpipe
# in a group of two drivers, docs/devices/).
pair=${TPAR_LLAMA_PAIR:-0,0}

case "$name" in
  dense-2)
    run none dense.gguf 0 none
    run ggml dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32
    # The relay (TPAR_ALGO=relay): its host thread sums the devices' f32 values, with the
    # vector loop and with the one-value loop (TPAR_RELAY_SUM=scalar): the same logits.
    run tpar-relay dense.gguf "$pair" tensor TPAR_ALGO=relay
    run tpar-relay-scalar dense.gguf "$pair" tensor TPAR_ALGO=relay TPAR_RELAY_SUM=scalar
    check_served tpar 2
    for label in tpar-relay tpar-relay-scalar; do
      check_served $label 2
      grep -q "relay: the host thread sums" "$dir/$label.log" || fail "$label: no relay call was made"
      compare $label ggml --exact
    done
    compare tpar ggml --exact          # both sum two f32 values: a + b == b + a
    compare tpar none $bound_vs_none
    compare ggml none $bound_vs_none
    # Steps of 32 and 64 tokens make relay calls of 8192 and 16384 values, 16 and 32
    # grains of 512: served in parts by the relay's host threads (TPAR_RELAY_THREADS=4), and by
    # one thread, the same logits as OneShot's f32 sum (equal to ggml's AllReduce above;
    # ggml's own, on two lavapipe devices, crashes in the driver on these steps).
    RUN_ARGS="-n 8 --batch-at 2:32,5:64" run tpar-steps dense.gguf "$pair" tensor TPAR_ALGO=oneshot TPAR_WIRE=f32
    for t in 1 4; do
      RUN_ARGS="-n 8 --batch-at 2:32,5:64" run tpar-relay-t$t dense.gguf "$pair" tensor TPAR_ALGO=relay TPAR_RELAY_THREADS=$t
      check_served tpar-relay-t$t 2
      compare tpar-relay-t$t tpar-steps --exact
    done
    split=$(sed -nE 's/.*the relay served [0-9]+ AllReduces, ([0-9]+) of them in parts.*/\1/p' "$dir/tpar-relay-t4.log")
    echo "tpar-relay-t4: $split relay calls served in parts"
    [[ ${split:-0} -gt 0 ]] || fail "tpar-relay-t4: no relay call was served in parts"
    split=$(sed -nE 's/.*the relay served [0-9]+ AllReduces, ([0-9]+) of them in parts.*/\1/p' "$dir/tpar-relay-t1.log")
    [[ ${split:-x} == 0 ]] || fail "tpar-relay-t1: $split relay calls served in parts with one thread"
    ;;
  dense-3-zero-slices)
    # 256 wide, 4 heads, 2 KV heads over 3 devices: the attention split's granularity
    # (128) leaves one device with no heads in every layer, so its partial sums are
    # computed by no one and must count as zeros.
    run none dense.gguf 0 none
    run ggml dense.gguf 0,0,0 tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf 0,0,0 tensor TPAR_WIRE=f32
    run tpar-relay dense.gguf 0,0,0 tensor TPAR_ALGO=relay
    check_served tpar 3
    check_served tpar-relay 3
    idle=$(field tpar ', ([0-9]+) with a device that computed nothing')
    echo "tpar: $idle calls had a device contributing zeros"
    [[ $idle -gt 0 ]] || fail "no call had a zero-size slice: the test does not test what it claims"
    compare tpar none $bound_vs_none
    compare tpar ggml --relative 0.001  # three values, summed in different orders
    compare tpar-relay tpar --exact     # both sum in device order, a device's zeros too
    ;;
  moe-2)
    # Mesa 22.3's lavapipe crashes in ggml-vulkan's single-token MoE matmuls and in its
    # fused top-k shader, whatever the split and with ggml's own AllReduce too: where
    # lavapipe takes part (TPAR_TEST_DEVICES unset, or all: a GPU beside llvmpipe) the
    # case runs the prompt only, unfused; GPUs alone run it whole.
    if [[ "${TPAR_TEST_DEVICES:-}" != gpus ]]; then
      RUN_ARGS="-n 0"
      export GGML_VK_DISABLE_FUSION=1
    fi
    run none moe.gguf 0 none
    run ggml moe.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
    run tpar moe.gguf "$pair" tensor TPAR_WIRE=f32
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
  uneven-split)
    # Three quarters of every layer on the first device (--ts 3,1), as a user gives the
    # faster GPU of a mixed pair the larger share: the devices' calls are as large as
    # ever (an AllReduce sums whole rows), their compute is not.
    # On two lavapipe devices ggml's own AllReduce corrupts the heap with this split
    # (glibc aborts, "corrupted double-linked list"; tpar's runs do not), so the exact
    # comparison with it runs where the devices are real (TPAR_TEST_DEVICES set).
    RUN_ARGS="-n 16 --ts 3,1"
    run none dense.gguf 0 none
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32
    check_served tpar 2
    compare tpar none $bound_vs_none
    if [[ -n "${TPAR_TEST_DEVICES:-}" ]]; then
      run ggml dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
      compare tpar ggml --exact
    fi
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
    # the layer's own stall reports (layers before 1.3.296; docs/testing.md): the
    # semaphore's, and the queue's or fence's that follow it for what waits behind the
    # stalled timeline (ggml-vulkan's fences: CI of 6377984, under load).
    [[ -n "$(ls /usr/share/vulkan/explicit_layer.d/*validation* 2>/dev/null)" ]] || { echo "[skipped] no validation layer installed"; exit 0; }
    RUN_ARGS="-n 2"
    run tpar dense.gguf 0,0 tensor VK_INSTANCE_LAYERS=VK_LAYER_KHRONOS_validation \
        VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT
    for label in tpar; do
      check_served $label 2
      reports=$(cat "$dir/$label.out" "$dir/$label.log" | grep -o 'Validation [A-Za-z]*: \[ [A-Za-z0-9_-]* \]' | sort | uniq -c || true)
      echo "$label: validation layer reports: ${reports:-none}"
      if echo "$reports" | grep -vE 'UNASSIGNED-Vk(Semaphore|Queue|Fence)-state-timeout' | grep -q Validation; then
        fail "$label: the validation layer reported the above"
      fi
    done
    ;;
  decode-64)
    # Decode-sized AllReduces one token at a time, 64 of them after the prompt: every
    # step's logits through tpar equal ggml's own AllReduce's, number for number, with the
    # AllReduce riding in ggml-vulkan's submissions.
    RUN_ARGS="-n 64"
    run none dense.gguf 0 none
    run ggml dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32
    check_served tpar 2
    grep -q "on the backends' compute queues in their own submissions (streams)" "$dir/tpar.log" ||
      fail "tpar: the AllReduce did not ride in ggml-vulkan's submissions"
    rows=$(sed -nE 's/^run: ([0-9]+) rows.*/\1/p' "$dir/tpar.out")
    [[ $rows -ge 64 ]] || fail "tpar: $rows rows of logits, not the prompt's and 64 tokens'"
    compare tpar ggml --exact
    compare tpar none $bound_vs_none
    ;;
  decode-growth)
    # Decode through changes of the graph mid-stream: past 256 cells of KV cache (llama.cpp
    # then pads n_kv to 512 and builds the graph anew, with new subgraph ids) and through
    # two changes of batch size (3 tokens at step 100, 5 at step 200, then 1 again). While a
    # graph stays, ggml-vulkan replays each subgraph's recorded command buffers (the
    # default). Every step's logits must equal ggml's own AllReduce's, number for number:
    # with replay and without (GGML_VK_DISABLE_REPLAY=1).
    RUN_ARGS="--ctx 1024 -n 300 --batch-at 100:3,200:5"
    run ggml dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32
    run tpar-noreplay dense.gguf "$pair" tensor TPAR_WIRE=f32 GGML_VK_DISABLE_REPLAY=1
    run tpar-relay dense.gguf "$pair" tensor TPAR_ALGO=relay
    replay() {  # LABEL: "replayed recorded" of device 0, or nothing
      sed -nE 's/.*ggml-vulkan Vulkan0: ([0-9]+) subgraphs replayed, ([0-9]+) recorded for replay.*/\1 \2/p' "$dir/$1.log"
    }
    for label in tpar tpar-noreplay tpar-relay; do
      check_served $label 2
      compare $label ggml --exact
      echo "$label: replayed, recorded for replay: $(replay $label)"
    done
    read -r replayed recorded <<< "$(replay tpar)"
    once=$(sed -nE 's/.*ggml-vulkan Vulkan0: .* ([0-9]+) seen once and recorded as usual.*/\1/p' "$dir/tpar.log")
    echo "tpar: $once subgraphs seen once and recorded as usual"
    # The 4-layer test model has 9 subgraphs a graph. A subgraph is recorded for replay when
    # seen a second time unchanged, and found again by its nodes: the decode
    # graphs before and after the KV cache grows differ, so both are recorded; the decode
    # graphs built anew after the 3-token and the 5-token step have the nodes of one of
    # those where the meta backend took the same set of its tensors, and are recorded
    # anew where it took the other; the 3- and 5-token steps' graphs, seen once, are not.
    # A recording replayed for a graph that changed would show in the logits, which must
    # equal the fallback's.
    [[ ${replayed:-0} -gt 1000 ]] || fail "tpar: ${replayed:-no} subgraphs replayed: replay did not run"
    [[ ${recorded:-0} -ge 18 && ${recorded:-0} -le 36 ]] ||
      fail "tpar: ${recorded:-no} subgraphs recorded for replay, not between the 2 and the 4 decode graphs' worth the run builds"
    [[ ${once:-0} -ge $((recorded + 18)) ]] || fail "tpar: ${once:-no} subgraphs seen once: the one-step graphs were recorded for replay"
    [[ -z "$(replay tpar-noreplay)" ]] || fail "tpar-noreplay: GGML_VK_DISABLE_REPLAY=1 still replayed"
    ;;
  slots-apart)
    # A step whose sequences' KV streams are not adjacent, as a server's slots 0, 1 and 3
    # once slot 2's request has finished: llama.cpp runs it as two ubatches ({0, 1}, then
    # {3}: two passes over the weights, each graph built anew) with --kv-runs 1 (upstream's
    # rule); by default (n_kv_runs 8) it is one, the attention run once for each run of
    # adjacent streams. Each sequence has its
    # own prompt, so a run reading another's stream shows. The same steps fed one sequence
    # at a time (three ubatches a step) must give the same logits within a bound (other
    # batch sizes change the matmuls' kernels), in one device's run and in -sm tensor's;
    # tpar's must equal ggml's own AllReduce's, number for number. And every step must be
    # one ubatch: 3 prompts + 6 steps (LLAMA_BATCH_DEBUG=1 logs each ubatch); two with
    # --kv-runs 1.
    ubatches() { grep -c 'added ubatch to split' "$dir/$1.log" || true; }
    RUN_ARGS="--ctx 256 -n 6 --seqs 0,1,3"
    run none dense.gguf 0 none LLAMA_BATCH_DEBUG=1
    run ggml dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1 LLAMA_BATCH_DEBUG=1
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32 LLAMA_BATCH_DEBUG=1
    RUN_ARGS="--ctx 256 -n 6 --seqs 0,1,3 --kv-runs 1" run tpar-adjacent dense.gguf "$pair" tensor TPAR_WIRE=f32 LLAMA_BATCH_DEBUG=1
    RUN_ARGS="--ctx 256 -n 6 --seqs 0,1,3 --one-by-one"
    run none-one dense.gguf 0 none LLAMA_BATCH_DEBUG=1
    run tpar-one dense.gguf "$pair" tensor TPAR_WIRE=f32 LLAMA_BATCH_DEBUG=1
    check_served tpar 2
    for label in none ggml tpar; do
      echo "$label: $(ubatches $label) ubatches"
      [[ $(ubatches $label) -eq 9 ]] || fail "$label: $(ubatches $label) ubatches for 3 prompts and 6 steps of slots 0, 1 and 3 (9 if each step is one)"
    done
    [[ $(ubatches tpar-one) -eq 21 ]] || fail "tpar-one: $(ubatches tpar-one) ubatches, not 3 + 6 x 3"
    # --kv-runs 1: upstream's split, {0, 1} then {3}
    echo "tpar-adjacent: $(ubatches tpar-adjacent) ubatches"
    [[ $(ubatches tpar-adjacent) -eq 15 ]] || fail "tpar-adjacent: $(ubatches tpar-adjacent) ubatches, not 3 + 6 x 2"
    compare tpar-adjacent tpar-one --relative 1e-3
    compare tpar ggml --exact
    compare none none-one --relative 1e-4
    compare tpar tpar-one --relative 1e-3
    compare tpar none $bound_vs_none
    ;;
  slots-many)
    # Steps of 8 and 16 sequences whose KV streams are not adjacent, as a llama-server with
    # 16 or 32 slots busy in every other one. A step's sequences go in one ubatch in at most
    # n_kv_runs (8 by default) runs of adjacent streams, the attention once for each run, and
    # the graph's node budget counts every run's nodes (without it a 32-layer model aborted
    # in ggml_view_3d at 5 runs, one device, no tpar). On an 8-layer and a 32-layer model,
    # even and odd slots, at -sm none and through tpar at 2 and 3 devices: each run's
    # logits within a bound of the same steps fed a sequence at a time, and the ubatches as
    # the runs make them (8 runs: one a step; 16: two). The 32-layer model's runs cost
    # three times the 8-layer's, so it runs the case that aborted (8 runs, -sm none) and
    # through tpar at 2 devices; 16 runs and 3 devices go on the 8-layer model (the whole
    # case took 632 s in a loaded CI when every pattern ran on both).
    ubatches() { grep -c 'added ubatch to split' "$dir/$1.log" || true; }
    even8=0,2,4,6,8,10,12,14 odd8=1,3,5,7,9,11,13,15 even16=$(seq -s, 0 2 30)
    prompt=abcdefghijklmnopqrstuvwxyz0123456789  # 36 characters: more tokens than the highest sequence id
    plan=("layers8:odd8:$odd8:none,tensor2" "layers8:even16:$even16:none,tensor3"
          "layers32:even8:$even8:none,tensor2")
    for p in "${plan[@]}"; do
      IFS=: read -r model pat seqs modes <<< "$p"
      base="--ctx 128 -n 3 -p $prompt --seqs $seqs"
      RUN_ARGS="$base --one-by-one" run "$model-$pat-one" "$model.gguf" 0 none
      for m in ${modes//,/ }; do
        label=$model-$pat-$m
        case $m in
          none) RUN_ARGS=$base run "$label" "$model.gguf" 0 none LLAMA_BATCH_DEBUG=1
                compare "$label" "$model-$pat-one" --relative 1e-3 ;;
          tensor2) RUN_ARGS=$base run "$label" "$model.gguf" "$pair" tensor TPAR_WIRE=f32 LLAMA_BATCH_DEBUG=1
                   check_served "$label" 2
                   compare "$label" "$model-$pat-one" $bound_vs_none ;;
          tensor3) RUN_ARGS=$base run "$label" "$model.gguf" 0,0,0 tensor TPAR_WIRE=f32 LLAMA_BATCH_DEBUG=1
                   check_served "$label" 3
                   compare "$label" "$model-$pat-one" $bound_vs_none ;;
        esac
        n_seqs=$(tr ',' '\n' <<< "$seqs" | wc -l)
        want=$((n_seqs + 3 * (n_seqs > 8 ? 2 : 1)))
        echo "$label: $(ubatches "$label") ubatches ($n_seqs prompts, 3 steps)"
        [[ $(ubatches "$label") -eq $want ]] || fail "$label: $(ubatches "$label") ubatches, not $want"
      done
    done
    ;;
  two-contexts)
    # Two contexts in one process on the same devices, as a draft model or an application's
    # second model has them: a -sm tensor context through tpar and, beside it, another
    # instance of the model at -sm none (one device) or -sm layer (both devices; pipeline
    # parallel where the devices offer events, so its scheduler records and waits on them),
    # each of its steps run while the tensor context's step is in flight. tpar serves the
    # tensor context alone: every context's logits equal its run alone, number for number.
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32
    run none dense.gguf 0 none
    run layer dense.gguf "$pair" layer
    RUN_ARGS="-n 8 --beside none --beside-output $dir/beside-none.logits" run tpar-none dense.gguf "$pair" tensor TPAR_WIRE=f32
    RUN_ARGS="-n 8 --beside layer --beside-output $dir/beside-layer.logits" run tpar-layer dense.gguf "$pair" tensor TPAR_WIRE=f32
    if grep -q "pipeline parallelism enabled" "$dir/tpar-layer.log"; then
      echo "tpar-layer: the -sm layer context beside is pipeline parallel (events)"
    else
      echo "tpar-layer: the -sm layer context beside is not pipeline parallel (the devices offer no events)"
    fi
    for label in tpar-none tpar-layer; do
      check_served "$label" 2
      compare "$label" tpar --exact
    done
    compare beside-none none --exact
    compare beside-layer layer --exact
    ;;
  off-switch)
    # GGML_VK_DISABLE_TPAR=1 turns tpar off: no comm hook (ggml's own AllReduce runs), no
    # device extension asked for on tpar's behalf, every submission on ggml-vulkan's own
    # path. The fault layer (tests/llama/fault_layer.c) names the extensions each device was
    # made with, and makes every vkQueueSubmit from the N-th on fail as from a lost device:
    # with the switch and without it, ggml-vulkan reports the lost device through its own
    # handler.
    [[ -f "$LAYER/VK_LAYER_TPAR_fault.json" ]] || fail "no fault layer in $LAYER"
    layer=(VK_LAYER_PATH="$LAYER" VK_INSTANCE_LAYERS=VK_LAYER_TPAR_fault)
    run on dense.gguf "$pair" tensor "${layer[@]}" TPAR_FAULT_LOG_EXTENSIONS=1 TPAR_FAULT_LOG_SUBMITS=1 TPAR_WIRE=f32
    run off dense.gguf "$pair" tensor "${layer[@]}" TPAR_FAULT_LOG_EXTENSIONS=1 TPAR_FAULT_LOG_SUBMITS=1 GGML_VK_DISABLE_TPAR=1
    check_served on 2
    ! grep -q "ggml comm:" "$dir/off.log" || fail "off: tpar's hook ran with GGML_VK_DISABLE_TPAR=1"
    compare on off --exact
    exts() { grep -o 'tpar fault layer: device extensions:.*' "$dir/$1.log" | head -1 | cut -d: -f3 | tr ' ' '\n' | sed '/^$/d' | sort; }
    added=$(comm -23 <(exts on) <(exts off) | paste -sd' ' -)
    echo "extensions asked for on tpar's behalf: ${added:-none}"
    for e in VK_KHR_external_semaphore_fd VK_KHR_shader_clock VK_EXT_calibrated_timestamps; do
      ! exts off | grep -qx "$e" || fail "off: $e was asked for with GGML_VK_DISABLE_TPAR=1"
    done
    for label in off on; do
      # halfway through the run's own submissions (tpar makes fewer: one a boundary)
      total=$(sed -nE 's/.*tpar fault layer: ([0-9]+) vkQueueSubmit calls.*/\1/p' "$dir/$label.log" | tail -1)
      [[ ${total:-0} -gt 10 ]] || fail "$label: the fault layer counted ${total:-no} submissions"
      extra=(TPAR_WIRE=f32); [[ $label == off ]] && extra=(GGML_VK_DISABLE_TPAR=1)
      env "${layer[@]}" TPAR_FAULT_SUBMIT_LOST=$((total / 2)) "${extra[@]}" GGML_VK_VISIBLE_DEVICES="$pair" TPAR_LOG=info \
        "$BIN/tpar-llama-logits" run -m "$MODELS/dense.gguf" --sm tensor -n 8 -o "$dir/lost-$label.logits" \
        > "$dir/lost-$label.out" 2> "$dir/lost-$label.log" && fail "lost-$label: the run succeeded on a lost device"
      grep -m1 "tpar fault layer: vkQueueSubmit" "$dir/lost-$label.log"
      grep -m1 "ggml_vulkan: device lost on Vulkan" "$dir/lost-$label.log" ||
        { tail -20 "$dir/lost-$label.log"; fail "lost-$label: ggml-vulkan did not report the lost device"; }
    done
    ;;
  logging)
    # tpar's messages go through ggml's logger, so that an application's callback
    # (llama_log_set, ggml_log_set) sees them: at TPAR_LOG=info the hook's lines reach the
    # callback at ggml's info level (2), at the default (warning) none of them does.
    RUN_ARGS="-n 2 --log-prefix [callback]" run info dense.gguf "$pair" tensor TPAR_WIRE=f32
    check_served info 2
    grep -q '^\[callback\] 2: tpar: ggml comm: AllReduce over 2 devices' "$dir/info.log" ||
      fail "info: tpar's message did not reach the log callback at ggml's info level"
    ! grep -v '^\[callback\]' "$dir/info.log" | grep -q 'ggml comm:' || fail "info: a tpar message bypassed the log callback"
    echo "== quiet: TPAR_LOG unset"
    GGML_VK_VISIBLE_DEVICES="$pair" "$BIN/tpar-llama-logits" run -m "$MODELS/dense.gguf" --sm tensor -n 2 \
      --log-prefix '[callback]' -o "$dir/quiet.logits" > "$dir/quiet.out" 2> "$dir/quiet.log" || fail "quiet: tpar-llama-logits failed"
    ! grep -q 'tpar: ggml comm' "$dir/quiet.log" || fail "quiet: tpar's info lines were logged at TPAR_LOG's default level"
    compare quiet info --exact
    ;;
  shape-steps)
    # A batch of another size at every step, as a server under mixed traffic makes them:
    # 48 steps of 1 to 5 tokens, no two neighbours alike, so that llama.cpp builds every
    # step's graph anew. Every step's logits must equal the fallback's, with replay (a
    # subgraph recorded for replay when seen twice) and without. And replay must not pay
    # for what it never replays: most subgraphs of such a run are seen once, and those are
    # recorded as usual, not for replay.
    sched=$(awk 'BEGIN { for (k = 0; k < 48; k++) printf "%s%d:%d", (k ? "," : ""), k, 1 + (k * 3) % 5 }')
    RUN_ARGS="--ctx 512 -n 56 --batch-at $sched"
    run ggml dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
    run tpar dense.gguf "$pair" tensor TPAR_WIRE=f32
    run tpar-noreplay dense.gguf "$pair" tensor TPAR_WIRE=f32 GGML_VK_DISABLE_REPLAY=1
    recorded() { sed -nE 's/.*ggml-vulkan Vulkan0: [0-9]+ subgraphs replayed, ([0-9]+) recorded for replay.*/\1/p' "$dir/$1.log"; }
    once() { sed -nE 's/.*ggml-vulkan Vulkan0: .* ([0-9]+) seen once and recorded as usual.*/\1/p' "$dir/$1.log"; }
    for label in tpar tpar-noreplay; do
      check_served $label 2
      compare $label ggml --exact
    done
    mine=$(recorded tpar) seen=$(once tpar)
    echo "recorded for replay: ${mine:-none}; seen once and recorded as usual: ${seen:-none}"
    [[ -n "$mine" && -n "$seen" ]] || fail "no replay account in the logs"
    [[ $seen -ge 12 && $((3 * mine)) -le $seen ]] ||
      fail "recorded $mine subgraphs for replay against $seen seen once: it records what it does not replay"
    # Two shapes in turn, as a server's slots taking turns make them: llama.cpp builds every
    # step's graph anew (new uids), and the meta backend's nodes repeat every second build.
    # Found by their nodes, those subgraphs replay from their third build on, every step's
    # logits still the fallback's. (Every step is scheduled: a run of equal steps would
    # reuse its graph and replay by itself.)
    turns=$(awk 'BEGIN { for (k = 0; k < 24; k++) printf "%s%d:%d", (k ? "," : ""), k, 2 + k % 2 }')
    RUN_ARGS="--ctx 512 -n 24 --batch-at $turns" run ggml-turns dense.gguf "$pair" tensor GGML_VK_DISABLE_TPAR=1
    RUN_ARGS="--ctx 512 -n 24 --batch-at $turns" run tpar-turns dense.gguf "$pair" tensor TPAR_WIRE=f32
    check_served tpar-turns 2
    compare tpar-turns ggml-turns --exact
    turned=$(sed -nE 's/.*ggml-vulkan Vulkan0: ([0-9]+) subgraphs replayed.*/\1/p' "$dir/tpar-turns.log")
    echo "tpar-turns: ${turned:-no} subgraphs replayed"
    [[ ${turned:-0} -gt 0 ]] || fail "tpar-turns: nothing replayed: a graph built anew is not found by its nodes"
    ;;
  server-slots)
    # A llama-server with 16 slots (-np 16: a KV stream each) on the 32-layer model, two
    # rounds of requests at once pinned to the even slots, then the odd ones (8 runs of
    # streams a step, where the 18-patch series aborted), short prompts and 4 to 16 tokens
    # each (tests/llama/slots_load.py; lavapipe is a CPU: the case took 513 s with three
    # rounds, the third all 16 slots, in a fresh-clone CI beside a build): every request
    # answered, on one device (-sm none: no tpar, the KV runs' change alone) and through
    # tpar. The same with a draft model (--model-draft, the dense model on the first
    # device) beside the 8-layer one: a second context on the same devices beside the
    # -sm tensor one, every request answered.
    [[ -x "$BIN/llama-server" ]] || fail "no llama-server in $BIN"
    slots_serve() {  # LABEL MODEL SM DEVICES [SERVER_ARGS]
      local label=$1 rc=0
      SERVER_MODEL=$2 SERVER_SM=$3 SERVER_DEVICES=$4 SERVER_ARGS=${5:-} server_up "$label" 16 8192 TPAR_WIRE=f32
      python3 "$here/slots_load.py" --port "$server_port" --slots 16 --rounds 2 --max-predict "${SLOTS_MAX_PREDICT:-16}" --timeout 600 || rc=$?
      server_down "$label"
      [[ $rc -eq 0 ]] || fail "$label: a request was not answered"
      ! grep -q "GGML_ASSERT\|Aborted" "$dir/$label-server.log" || fail "$label: the server aborted"
    }
    slots_serve none layers32.gguf none 0
    slots_serve tpar layers32.gguf tensor "$pair"
    check_served tpar-server 2
    slots_serve draft layers8.gguf tensor "$pair" "--model-draft $MODELS/dense.gguf -ngld 99 -devd Vulkan0 --spec-draft-n-max 4"
    check_served draft-server 2
    ;;
  server-mixed)
    # llama-server under mixed traffic (scripts/server_load.py --mixed: 1 to several
    # requests at once, prompts of 3 to 48 words, 8 to 32 tokens, temperature 0 or 0.7,
    # cache_prompt for half), two rounds: with 4 slots through tpar every request is
    # answered; with one slot and every temperature 0, tpar's texts (TPAR_WIRE=f32) are
    # ggml's own AllReduce's. (A grammar keeps the random model's text to letters.)
    [[ -x "$BIN/llama-server" ]] || fail "no llama-server in $BIN"
    mixed_serve() {  # LABEL SLOTS CONTEXT "LOAD ARGS" [ENV...]
      local label=$1 slots=$2 ctx=$3 load=$4; shift 4
      server_up "$label" "$slots" "$ctx" "$@"
      local rc=0
      # shellcheck disable=SC2086
      python3 "$here/../../scripts/server_load.py" --port "$server_port" --label "$label" --slots "$slots" $load --grammar \
        --timeout 300 --out "$dir/$label.json" || rc=$?
      server_down "$label"
      [[ $rc -eq 0 ]] || fail "$label: a request was not answered"
    }
    # (Prompts of at most 48 words and 32 tokens a request: lavapipe is a CPU.)
    small="--max-words 48 --max-predict 32"
    mixed_serve tpar-4 4 4096 "--mixed 2 --seed 3 $small"
    # (One slot serves its requests one after another: seed 15's two rounds are 4 and 2
    # requests, prompts of 8 to 48 words, 8 or 32 tokens, cache_prompt on and off.)
    mixed_serve tpar-1 1 1024 "--mixed 2 --seed 15 --greedy $small" TPAR_WIRE=f32
    mixed_serve ggml-1 1 1024 "--mixed 2 --seed 15 --greedy $small" GGML_VK_DISABLE_TPAR=1
    python3 "$here/../../scripts/server_load.py" --compare "$dir/tpar-1.json" "$dir/ggml-1.json" ||
      fail "tpar's texts differ from ggml's own AllReduce's (one slot)"
    ;;
  server)
    # Requests in a row to one llama-server with -sm tensor through tpar (users of an
    # earlier Vulkan AllReduce saw the second slow to a crawl, 2 t/s from 40): each must
    # give the text ggml's own AllReduce gives, and the later ones must not crawl: the
    # faster of requests 2 and 3 runs at least half as fast as the first. (The best of
    # two, and the case runs alone (RUN_SERIAL): a lasting slowdown fails it, a moment's
    # load on the machine does not.)
    # (A grammar keeps the random model's text to letters: the server rejects output that
    # is not valid UTF-8.)
    [[ -x "$BIN/llama-server" ]] || fail "no llama-server in $BIN"
    requests=3
    serve() {  # LABEL [ENV...]: $requests completions from a fresh server into $dir/LABEL-{1,2,...}.json
      local label=$1; shift
      server_up "$label" 1 1024 "$@"
      for k in $(seq 1 $requests); do
        curl -sf -m 300 "http://127.0.0.1:$server_port/completion" -H 'Content-Type: application/json' \
          -d '{"prompt": "The quick brown fox jumps over the lazy dog, and then", "n_predict": 32, "temperature": 0, "ignore_eos": true, "cache_prompt": false, "grammar": "root ::= [a-z ]+"}' \
          > "$dir/$label-$k.json" || { kill "$server_pid"; fail "$label: request $k failed"; }
      done
      server_down "$label"
    }
    serve ggml GGML_VK_DISABLE_TPAR=1
    serve tpar TPAR_WIRE=f32
    check_served tpar-server 2  # (its summary comes when the server shuts down and frees the model)
    for k in $(seq 1 $requests); do
      want=$(jq -r .content "$dir/ggml-$k.json")
      got=$(jq -r .content "$dir/tpar-$k.json")
      [[ -n "$got" && "$got" == "$want" ]] || fail "request $k: tpar's text differs from ggml's AllReduce's: '$got' vs '$want'"
    done
    speed() { jq -r .timings.predicted_per_second "$dir/tpar-$1.json"; }
    first=$(speed 1) second=$(speed 2) third=$(speed 3)
    echo "tpar: request 1 at $first tokens/s, request 2 at $second, request 3 at $third"
    awk -v a="$first" -v b="$second" -v c="$third" 'BEGIN { exit !((b > c ? b : c) >= 0.5 * a) }' ||
      fail "the later requests ran at $second and $third tokens/s against $first"
    ;;
  long-context)
    # Decode 4096 tokens deep (llama-bench -d) through tpar and through ggml's own AllReduce,
    # on the same two devices: tpar serves every call, and its decode speed falls with the
    # depth no more than the fallback's does. What the attention's growing work costs, both
    # pay; only the AllReduce differs (an earlier Vulkan AllReduce fell from 43.6 to 9 t/s
    # there). ggml's own AllReduce must also get through: without the lavapipe patch it crashed in
    # lavapipe's queue thread after the first depth (three runs of three): a descriptor
    # set's unused binding still named a prealloc buffer ggml-vulkan had made anew, and
    # lavapipe reads every bound buffer at a dispatch. (Without the patch it ran through at
    # -d 2048,0, 1024,0, 512,0 and 2048,0 with -ub 2048, so the depth stays 4096.)
    # (The first depth only warms up: lavapipe compiles a pipeline when it is first used;
    # the third restores the first's cached state, so each run fills 4096 cells once. The
    # model is 64 wide with two heads, one a device. Filling the depth is nearly all of the
    # case's time: on an idle 2-core machine each run took about 230 s, one device's 86 s,
    # which is why one device is not run as well.)
    depths=${LONG_DEPTH:-4096,0,4096}
    for label in tpar ggml; do
      extra=()
      if [[ $label == ggml ]]; then extra=(GGML_VK_DISABLE_TPAR=1); fi
      echo "== $label: llama-bench -sm tensor -d $depths ${extra[*]}"
      env "${extra[@]}" GGML_VK_VISIBLE_DEVICES=$pair TPAR_LOG=info "$BIN/llama-bench" -v -m "$MODELS/narrow.gguf" -ngl 99 -fa 1 \
          -sm tensor -p 0 -n 32 -d "$depths" -r 1 -o json > "$dir/$label.json" 2> "$dir/$label.log" ||
        { tail -20 "$dir/$label.log"; fail "$label: llama-bench failed"; }
      jq -r '.[] | "\(.n_depth) deep: \(.avg_ts) t/s"' "$dir/$label.json"
    done
    summary tpar > /dev/null
    declined=$(summary tpar | sed -E 's/.*, ([0-9]+) declined.*/\1/' | awk '{ s += $1 } END { print s + 0 }')
    [[ $declined -eq 0 ]] || fail "tpar: $declined calls fell back to ggml's AllReduce"
    ratio() { jq -r '[.[] | .avg_ts] | (.[2] / .[1])' "$dir/$1.json"; }
    r_ggml=$(ratio ggml)
    r_tpar=$(ratio tpar)
    echo "decode speed at depth over speed at 0: tpar $r_tpar, ggml's own AllReduce $r_ggml"
    awk -v t="$r_tpar" -v g="$r_ggml" 'BEGIN { exit !(t >= 0.5 * g) }' ||
      fail "tpar's decode fell with depth to $r_tpar of its speed, ggml's own AllReduce's to $r_ggml"
    ;;
  quant-2|quant-3)
    # The weights llama.cpp users mostly run: Q4_K_M (tpar-llama-model --type q4_k_m: most
    # tensors Q4_K, the output and the second layer's attn_v and ffn_down Q6_K, as
    # llama-quantize gives them). 1536 wide, 24 heads of 64, 12 KV heads: the attention
    # split's granularity is 256 (a whole Q4_K block of pairs of heads), so 2 and 3
    # devices get equal shares (768 or 512 each), as the FFN's (3072) do. (An uneven split,
    # 768 wide over 2 devices, makes ggml's own AllReduce abort on two lavapipe devices in
    # glibc, "free(): invalid pointer", as case uneven-split notes; tpar's runs do not.)
    # At 2 devices tpar's sums are ggml's own AllReduce's, bit for bit; at 3 ggml's
    # fallback adds the third device's values first ((a0 + a2) + a1) and tpar in device
    # order, so they agree within a bound.
    n=${name#quant-}
    devices=$(printf '0%.0s,' $(seq 1 "$n") | sed 's/,$//')
    [[ $n == 2 ]] && devices=$pair
    "$BIN/tpar-llama-model" --describe "$MODELS/quant.gguf" | awk '{ print $2 }' | sort | uniq -c | tr '\n' ' '; echo
    run none quant.gguf 0 none
    run ggml quant.gguf "$devices" tensor GGML_VK_DISABLE_TPAR=1
    run tpar quant.gguf "$devices" tensor TPAR_WIRE=f32
    check_served tpar "$n"
    compare tpar none $bound_vs_none
    if [[ $n == 2 ]]; then
      compare tpar ggml --exact
    else
      compare tpar ggml --relative 0.001
    fi
    ;;
  archs)
    # llama.cpp's own test of its architectures (tests/test-llama-archs.cpp, the pinned
    # tree's): each architecture's random model on every device alone and through -sm tensor
    # over all of them (its "Meta" rows), the logits against the CPU's (NMSE at most 1e-4),
    # with tpar answering -sm tensor's AllReduce, at 2 and at 3 devices. On lavapipe, for
    # time, ARCHS_2 and ARCHS_3 (GQA, QK norms, a fused QKV, biases, parallel attention and
    # MLP, sliding-window attention, MoE, attention sinks); ARCHS=all runs every one.
    archs2=${ARCHS_2:-llama|qwen3|qwen3moe|gemma3|phi3|starcoder2|command-r|gpt-oss}
    archs3=${ARCHS_3:-llama|qwen3moe|gemma3|gpt-oss}
    if [[ ${ARCHS:-} == all ]]; then archs2=.; archs3=.; fi
    for n in 2 3; do
      devices=$pair; [[ $n == 3 ]] && devices=0,0,0
      [[ $n == 3 && -n ${TPAR_LLAMA_TRIPLE:-} ]] && devices=$TPAR_LLAMA_TRIPLE
      a=$archs2; [[ $n == 3 ]] && a=$archs3
      [[ $a == . ]] || a="^($a)\$"
      echo "== test-llama-archs -a '$a' on devices $devices"
      rc=0
      env GGML_VK_VISIBLE_DEVICES="$devices" TPAR_LOG=info TPAR_WIRE=f32 "$BIN/test-llama-archs" -a "$a" -s 1 -v 4 \
        > "$dir/archs-$n.out" 2> "$dir/archs-$n.log" || rc=$?
      sed 's/\x1b\[[0-9;]*m//g' "$dir/archs-$n.out" | grep -E '\| *Meta\||^Summary'
      summary_line=$(grep '^Summary' "$dir/archs-$n.out" || true)
      [[ $rc -eq 0 && $summary_line == "Summary: all "*" test(s) passed" ]] || fail "test-llama-archs at $n devices: ${summary_line:-no summary} (exit $rc)"
      meta=$(sed 's/\x1b\[[0-9;]*m//g' "$dir/archs-$n.out" | grep -cE '\| *Meta\|.*\| *OK ')
      served=$(grep -c "ggml comm: AllReduce over $n devices" "$dir/archs-$n.log" || true)
      reduced=$(grep -o 'ggml comm: [0-9]* AllReduces on the GPUs' "$dir/archs-$n.log" | awk '{ s += $3 } END { print s + 0 }')
      declined=$(grep -o ', [0-9]* declined' "$dir/archs-$n.log" | awk '{ s += $2 } END { print s + 0 }')
      echo "at $n devices: $meta -sm tensor models checked, tpar set up for $served of them, $reduced AllReduces, $declined declined"
      [[ $meta -gt 0 && $served -eq $meta ]] || fail "at $n devices: tpar served $served of the $meta -sm tensor models"
      [[ $reduced -gt 0 && $declined -eq 0 ]] || fail "at $n devices: $reduced AllReduces through tpar, $declined declined"
    done
    ;;
  quant-mix)
    # tpar-llama-model's quantized types are llama-quantize's: for each mix, a model
    # written directly in it holds every tensor in the type llama-quantize (llama.cpp's
    # own quantizer, built beside it) gives the same model's f32 weights. Three shapes
    # exercise the rules: a dense model (the _M mixes' more bits for some layers), an
    # 80-layer GQA model (llama.cpp's "70B": attn_v moved up) and an 8-expert MoE model
    # (attn_v and attn_k in q8_0).
    [[ -x "$BIN/llama-quantize" ]] || fail "no llama-quantize in $BIN"
    shapes=("dense:--preset tiny --layers 9"
            "80-layers:--preset tiny --ff 256 --layers 80"
            "moe-8:--preset tiny-moe --experts 8 --experts-used 2 --layers 2")
    for shape in "${shapes[@]}"; do
      tag=${shape%%:*}
      # shellcheck disable=SC2086
      "$BIN/tpar-llama-model" ${shape#*:} --type f32 -o "$dir/$tag-f32.gguf" 2> /dev/null || fail "$tag: tpar-llama-model f32"
      for mix in q4_0 q4_k_m q5_k_m q6_k; do
        upper=$(echo "$mix" | tr a-z A-Z)
        "$BIN/llama-quantize" "$dir/$tag-f32.gguf" "$dir/$tag-$mix-llama.gguf" "$upper" 2 > "$dir/$tag-$mix-quantize.log" 2>&1 ||
          { tail -5 "$dir/$tag-$mix-quantize.log"; fail "$tag: llama-quantize $upper"; }
        # shellcheck disable=SC2086
        "$BIN/tpar-llama-model" ${shape#*:} --type "$mix" -o "$dir/$tag-$mix.gguf" 2> /dev/null || fail "$tag: tpar-llama-model $mix"
        "$BIN/tpar-llama-model" --describe "$dir/$tag-$mix-llama.gguf" | sort > "$dir/$tag-$mix-llama.txt"
        "$BIN/tpar-llama-model" --describe "$dir/$tag-$mix.gguf" | sort > "$dir/$tag-$mix.txt"
        diff "$dir/$tag-$mix-llama.txt" "$dir/$tag-$mix.txt" > "$dir/$tag-$mix.diff" ||
          { head -20 "$dir/$tag-$mix.diff"; fail "$tag $mix: tensor types differ from llama-quantize's (< llama-quantize, > tpar-llama-model)"; }
        echo "$tag $mix: $(wc -l < "$dir/$tag-$mix.txt") tensors as llama-quantize types them ($(awk '{ print $2 }' "$dir/$tag-$mix.txt" | sort | uniq -c | awk '{ printf "%s %s ", $1, $2 }'))"
      done
      rm -f "$dir/$tag"-*.gguf
    done
    ;;
  *) echo "case.sh: unknown case '$name'" >&2; exit 2 ;;
esac
echo "PASS ($name)"
