#!/usr/bin/env bash
# Runs, on a GPU machine, what scripts/gpu-bundle.sh built elsewhere, and writes raw logs
# that each begin with a stamp: the tree the programs were built from, the GPUs, driver,
# Vulkan version and the date. Parts run in the order given; each can be run again by
# itself (models already made are kept), so a long suite splits over several commands.
#
#   scripts/gpu-suite.sh [options] PART...
#
# parts:
#   env       the stamp alone (tpar-info, nvidia-smi)
#   tests     tpar's test programs (NativeImport on NVIDIA; over the GPUs where there are
#             two or more, else the first GPU opened as several devices), then part cases
#   cases     the llama.cpp cases (tests/llama/case.sh) on two GPUs: dense-2, decode-growth, quant-2
#             (a Q4_K_M model), slots-apart, slots-many, two-contexts, off-switch, logging and
#             archs (llama.cpp's test-llama-archs through tpar, every architecture, at 2 and 3
#             devices); CASES picks some
#   sweep     tpar-bench from 4 KiB to 256 MiB by 4, -r 3, on 2 and on all GPUs, each into a
#             log of its own (sweep-KIND-nN.txt, what docs/perf/report.py reads): NativeImport
#             with the link probe first and every wire (link-native), the runtime's choice
#             (default), ProxyBridge (proxy); time per call, bus bandwidth, every result checked
#   nccl      the NCCL anchor (scripts/nccl_anchor.py through PyTorch, on 2 and all GPUs):
#             the sweep's sizes with peer-to-peer off (staged through host memory, as tpar
#             must) and on (sweep-nccl-nN.txt), and the chain at 4/16/64 KiB with and without
#             58 MiB of weights, peer-to-peer off, from PyTorch's loop and replayed from a
#             captured CUDA graph (the host's enqueue out of the figure); NCCL_CHAIN_ONLY=1
#             or NCCL_SWEEP_ONLY=1 leaves the other half out
#   chain     tpar-bench --chain 64 at 4/16/64 KiB, with and without 58 MiB of weights a
#             dispatch, wirings streams, semaphores and threads, on 2 and on all GPUs
#   llama     llama-bench -fa 1 on 1, 2 and all GPUs: -sm none, layer, tensor with ggml's
#             AllReduce, tensor with tpar before (the replay patch off: the same binary
#             with GGML_VK_DISABLE_REPLAY=1) and after (the defaults);
#             Llama-3-8B's shapes (pp512, tg128; and -d 8192 -n 128 on 2 GPUs) and
#             Llama-3-70B's with 20 of 80 layers (pp512, tg64)
#   move      llama.cpp's move to a newer tree: the same models through the bundle's
#             llama-bench (the tree in STAMP) and bin-old's (gpu-bundle.sh --with-old REF):
#             -sm none on one GPU, -sm layer and -sm tensor with tpar on 2; Llama-3-8B's
#             shapes (pp512, tg128) and 70B's with 20 layers (pp512, tg64), each in q8_0
#             and q4_k_m; old and new taking turns, model by model (MOVE_MODELS=8b or
#             70b20 runs one of the two, to split the part over two commands;
#             MOVE_TREES=new times the bundle's tree alone, without bin-old)
#   decode    a token's AllReduce boundary, each decode path side by side in one run: the
#             chain (tpar-bench --chain 64, 58 MiB of weights a step, wiring streams) at
#             4/16/64 KiB with OneShot, the relay (its default two threads), the relay with
#             TPAR_RELAY_THREADS=1 and =4, and with TPAR_STREAM_HOLD=1; then llama-bench
#             decode with -sm none on one GPU (first and last) and -sm tensor with tpar on
#             2 (the automatic choice, TPAR_ALGO=oneshot, TPAR_ALGO=relay, the relay with
#             TPAR_RELAY_THREADS=1, and with TPAR_STREAM_HOLD=1, each call its own
#             submission): Llama-3-8B's shapes q8_0
#             and Q4_K_M (tg128, and -d 8192 -n 128), 70B's with 20 layers (tg64) and the
#             32-layer, 256-wide model (tg64). DECODE_MODELS picks some of
#             8b,8b-d8192,8b-q4_k_m,70b20,tiny (default all), DECODE_CHAIN=0 leaves the
#             chain out, DECODE_CHAIN_ROWS picks its rows (some of oneshot,relay,relay-t1,
#             relay-t2,relay-t4,relay-t8,relay-hold1,relay-ride,relay-ride-ordered; default
#             oneshot,relay,relay-t1,relay-t4,relay-hold1: all but the t2, t8 and the last
#             two: the relay riding in each step's command buffer, --chain-wiring ride, and
#             with no barrier before its kernel, ride-ordered), DECODE_SIZES sets its sizes (default 4K,16K,64K; 4K,16K,32K,48K,64K
#             finds the relay's crossover with OneShot; DECODE_RELAY_MAX=256K lets the
#             relay rows take calls up to 256 KiB), DECODE_OPS=1 adds ggml-vulkan's
#             timing of every op of 8B decode (GGML_VK_PERF_LOGGER) on one GPU and on
#             each of two, DECODE_N=4 runs the chain and the tensor rows on 4 devices
#             (labels tpar4-...), DECODE_ROWS picks the tensor rows (some of
#             auto,oneshot,relay,relay-t1,relay-t2,relay-t4,relay-t8,relay-hold1,ride-off,skip;
#             default all but relay-t2, relay-t4, relay-t8, ride-off and skip; ride-off:
#             TPAR_RELAY_RIDE=0, the relay's kernels in tpar's own command buffers; skip:
#             TPAR_GGML_SKIP_ALLREDUCE=1, every AllReduce accepted and not summed, the
#             token's bound with free boundaries, wrong results), DECODE_TRACE=1 adds a 2-GPU 8B
#             token's trace, host-only and with GPU stamps, for OneShot and the relay
#             (DECODE_TRACE_ROWS picks them: some of oneshot, relay, ride-off, the relay in
#             its own command buffers; default "oneshot relay"; traces-decode.tar.xz)
#   series    each patch by its switch: llama-bench pp512/tg on 2 devices, -sm tensor through
#             ggml's own AllReduce, tpar with GGML_VK_DISABLE_REPLAY=1 (the core alone) and
#             tpar's defaults, -sm none beside them; SERIES_MODELS picks some of 8b,tiny32
#   selftest  tpar-info --self-test (and --json, selftest.json) over the suite's devices
#   shard     each GPU's share of a -sm tensor decode step on two GPUs as one GPU runs it: the
#             half-width model (half the heads, KV heads and FFN) against the whole model,
#             -sm none on one GPU, llama-bench tg128 twice in turn and ggml-vulkan's timing of
#             every op (GGML_VK_PERF_LOGGER); SHARD_MODELS picks some of 8b,70b20
#   tiny      llama-bench -p 0 -n 64 on a 32-layer, 256-wide model (no GPU work to speak of:
#             the host's time per token is the token): -sm none, layer, and tensor with tpar
#             before and after, on 2 and all GPUs
#   cuda      the CUDA anchor: the pinned llama.cpp (scripts/llama.sh's) built here with ggml-cuda (nvcc, sm_90;
#             NCCL from PyTorch's wheel), llama-bench on the same models: -sm none, and
#             -sm tensor on 2 and all GPUs with GGML_CUDA_ALLREDUCE=internal, nccl, and nccl
#             with NCCL_P2P_DISABLE=1 (staged through host memory, as tpar must)
#   server    llama-server on the 8B shapes (--model-preset tiny for a quick look), 4 slots
#             and 8 requests of 128 tokens at once, twice: -sm none (one GPU), -sm layer,
#             -sm tensor with tpar and with ggml's own AllReduce (2 devices); then one slot
#             and three requests in a row through tpar (TPAR_WIRE=f32) and ggml's, every
#             text equal. No grammar: the GPUs, not sampling, bound it; a request that
#             fails or comes back short counts as a failure of its mode (the summary)
#   server-mixed  llama-server on the 8B shapes, 4 slots, under mixed traffic
#             (server_load.py --mixed 16 --seed 1: 1 to 10 requests at once, prompts of 3 to
#             400 words, 8 to 256 tokens, temperature 0 or 0.7, cache_prompt for half),
#             the same requests in every mode: -sm none, -sm layer, -sm tensor with tpar
#             (replay recording a subgraph when seen twice, the default), tpar without
#             replay, and ggml's own AllReduce; MIXED_MODES picks some of none,layer,tpar,
#             none-adjacent and tpar-adjacent (a step's slots in one ubatch only where their
#             KV streams are adjacent: llama-server --kv-runs 1),tpar-oneshot,
#             tpar-relay-tN (N relay threads, 1 to 16: TPAR_RELAY_THREADS=N; tpar-relay-t4 four),
#             tpar-relay256 (the relay up to 256 KiB: TPAR_RELAY_MAX=256K),tpar-ride-off (the
#             relay in tpar's own command buffers: TPAR_RELAY_RIDE=0),tpar-skip (the
#             bound with free boundaries: TPAR_GGML_SKIP_ALLREDUCE=1, timing only),tpar-depth8
#             (TPAR_DEPTH=8: eight calls in flight at every size),
#             tpar-noreplay,ggml and adds steady (llama-bench 8B tg128 under each replay
#             rule) and trace (a host-only trace of 8 mixed steps after the first 400,
#             MIXED_TRACE_SPAN and MIXED_TRACE_SKIP set those counts; traces-mixed.tar.xz;
#             trace-none one GPU's, trace-skip with free boundaries); none, layer, tpar,
#             tpar-noreplay and ggml also as MODE-kvu (--kv-unified: one KV cache for all
#             slots, llama-server's default where -np is not given);
#             MIXED_PASSES=N runs the modes N times (1 to 9), every second pass in the
#             reverse order, the servers of pass K labelled mixed-MODE-pK from the second
#             (steady and trace run in the first pass only);
#             MIXED_ROUNDS, MIXED_SEED and MIXED_MAX_SECONDS (default 480, a mode's bound);
#             each server first answers server_load.py --warm's requests, untimed
#             (MIXED_WARM=0 leaves them out, as runs before the warm-up did)
#   batched   llama-batched-bench on the 8B shapes (q8_0): decode with 1, 2, 3 and 4
#             sequences at once (-npp 128 -ntg 128 -npl 1,2,3,4), a server's decode steps
#             without the server: -sm none on one GPU, -sm tensor with tpar on 2;
#             BATCHED_ROWS picks the tensor rows (some of auto, relay-tN: TPAR_RELAY_THREADS=N, 1 to 16,
#             oneshot, skip: free boundaries,
#             timing only, ggml; default auto,relay-t4,skip),
#             BATCHED_MODELS some of 8b,8b-q4_k_m (default 8b)
#   server-steps  llama-server on the 8B shapes, 4 slots: scripts/server_steps.py's
#             phases (1 to 4 requests at once, long prompts, and at the end 2 requests after
#             a history of slots used in turn), one server a mode; STEPS_MODES picks some
#             of none,tpar,skip,oneshot,noreplay (default none,tpar), each also as MODE-kvu
#             (--kv-unified), and either of them as MODE-reuse
#             (llama.cpp's graph reuse counted by phase: -v, LLAMA_GRAPH_RESULT_DEBUG=2) or
#             MODE-trace (the host's spans of 8 steps from STEPS_TRACE_SKIP, default 990;
#             traces-steps.tar.xz)
#   mixed     a group of two drivers, the first GPU beside llvmpipe (the bundle of
#             gpu-bundle.sh --mixed, or any bundle with lvp.tar.xz from
#             scripts/lavapipe-pack.sh added): tpar-info, the numerics test (every result
#             identical on both devices), where the bundle has llama.cpp's programs the
#             llama.cpp cases dense-2 and uneven-split over the pair, and tpar-bench --soak
#             MIXED_SOAK seconds (default 240) over the pair
#   relay-probe  where the relay stalls: soaks of relay calls (larger ones go as the
#             automatic choice; --soak-timeout 3, RELAY_SOAK seconds each, default 40) on
#             two GPUs as they are, with relay calls only, one call in flight, downloads on
#             the compute queue; then the first GPU beside llvmpipe: per call at 4/16/64
#             KiB against OneShot, and the soak
#   probes    probes/cbgap on the first GPU: what ending a command buffer and starting the
#             next costs on the GPU's timeline against a barrier in one command buffer, at
#             16 KiB and 256 KiB a step (PROBE_STEPS, default 256); probes/eventwait: a
#             command buffer waiting between two dispatches for an event the host sets
#             after submission (which the specification forbids: what drivers do);
#             probes/l2warm: reading the next weights while a kernel waits, and what
#             it takes off the product after (32 MiB a step, 7 and 16 us waits);
#             probes/sysread: whether a kernel sees host memory written while it runs
#             (atomics, acquire loads, a first read) and how fast it reads it
#   trace     a decode token's host time (TPAR_TRACE, TPAR_TRACE_GPU=0) for the 8B shapes
#             at 1, 2 and all GPUs, before and after; and a timeline of a 2-GPU token (the
#             traces come back in traces.tar.xz; scripts/timeline.py draws them)
#
# options:
#   --bin DIR      the bundle (default: out/gpu in this checkout)
#   --out DIR      where logs go (default: out/gpu-logs in this checkout)
#   --python PATH  the Python with PyTorch (its NCCL) for parts nccl and cuda (default: the
#                  first python3 on PATH that imports torch)
#   --models DIR   where the random-weight models are made (default /tmp/tpar-models)
#   --gpus N       use the first N GPUs as "all" (default: every GPU the driver shows)
#   --virtual N    one GPU opened as N devices (GGML_VK_VISIBLE_DEVICES=0,0,...): host
#                  times only, the GPU time-slices between the devices
#   --quick        fewer repetitions (llama-bench -r 1), for a first look
#   --tests LIST   part tests: only these test programs, in this order (default: every
#                  one in the bundle, by name), e.g. stream,numerics,allreduce
#   -h, --help     this text
#
# exit status: 0 every part ran, 1 a part failed (the log says which), 2 a usage error
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bundle="$root/out/gpu" out="$root/out/gpu-logs" python="" models=/tmp/tpar-models gpus="" virtual=0 reps=3 server_preset=llama3-8b test_list=""
parts=()
usage() { sed -n '2,/^set /{/^#/p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die_usage() { echo "gpu-suite.sh: $1 (--help)" >&2; exit 2; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --bin) [[ $# -ge 2 ]] || die_usage "--bin needs a folder"; bundle=$2; shift 2 ;;
    --out) [[ $# -ge 2 ]] || die_usage "--out needs a folder"; out=$2; shift 2 ;;
    --python) [[ $# -ge 2 && -x $2 ]] || die_usage "--python needs a Python interpreter"; python=$2; shift 2 ;;
    --models) [[ $# -ge 2 ]] || die_usage "--models needs a folder"; models=$2; shift 2 ;;
    --gpus) [[ $# -ge 2 && $2 =~ ^[1-8]$ ]] || die_usage "--gpus takes 1 to 8"; gpus=$2; shift 2 ;;
    --virtual) [[ $# -ge 2 && $2 =~ ^[2-8]$ ]] || die_usage "--virtual takes 2 to 8"; virtual=$2; shift 2 ;;
    --quick) reps=1; shift ;;
    --tests) [[ $# -ge 2 && $2 =~ ^[a-z_,]+$ ]] || die_usage "--tests takes a comma-separated list of test programs"; test_list=$2; shift 2 ;;
    --model-preset) [[ $# -ge 2 && $2 =~ ^(tiny|llama3-8b)$ ]] || die_usage "--model-preset takes tiny or llama3-8b"; server_preset=$2; shift 2 ;;
    env|tests|cases|sweep|nccl|chain|llama|move|decode|tiny|shard|series|trace|mixed|relay-probe|cuda|server|server-mixed|server-steps|batched|probes|selftest) parts+=("$1"); shift ;;
    *) die_usage "unknown part or option '$1'" ;;
  esac
done
[[ ${#parts[@]} -gt 0 ]] || die_usage "name at least one part"
[[ -f "$bundle/STAMP" ]] || { echo "gpu-suite.sh: no bundle in $bundle (scripts/gpu-bundle.sh makes it)" >&2; exit 1; }
mkdir -p "$out" "$models"
bin=/tmp/tpar-gpu-bin
log="$out/suite-$(IFS=-; echo "${parts[*]}").log"
say() { echo "gpu-suite.sh: $*" | tee -a "$log" >&2; }
relative() { sed "s|$out/||g; s|$root/||g"; }  # a log names files beside it or relative to the checkout, not this machine's paths

# The Vulkan loader (and vulkaninfo) where the machine has none: Debian's packages that
# gpu-bundle.sh put in the bundle.
if ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
  compgen -G "$bundle/debs/*.deb" > /dev/null ||
    { echo "gpu-suite.sh: no Vulkan loader here and none in $bundle/debs (remake the bundle)" >&2; exit 1; }
  for f in "$bundle"/debs/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
[[ -n "${VK_DRIVER_FILES:-}" || ! -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ]] ||
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
unpack() {  # FROM TO: the bundle's FROM/*.xz into TO
  local f t
  mkdir -p "$2"
  for f in "$bundle/$1"/*.xz; do
    [[ -f "$f" ]] || continue
    t="$2/$(basename "$f" .xz)"
    [[ -x "$t" && "$t" -nt "$f" ]] || { xz -dc "$f" > "$t" && chmod +x "$t"; }
  done
}
unpack bin "$bin"
unpack tests "$bin/tests"
unpack bin-old "$bin/old"

stamp() {
  echo "# tpar gpu-suite: ${parts[*]}"
  sed 's/^/# /' "$bundle/STAMP"
  echo "# ran $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $(nproc) CPU cores"
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,name,driver_version,memory.total,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader | sed 's/^/# gpu /'
  fi
  "$bin/tpar-info" 2>/dev/null | grep -iE "vulkan|driver|device" | head -12 | sed 's/^/# tpar-info: /'
}
stamp > "$log"

n_gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
[[ -n "$gpus" ]] && n_gpus=$gpus
visible() {  # N: the GGML_VK_VISIBLE_DEVICES (or tpar --devices) list of N devices
  if [[ $virtual -gt 0 ]]; then printf '0%.0s,' $(seq 1 "$1") | sed 's/,$//'; else seq -s, 0 $(($1 - 1)); fi
}
all=$n_gpus
[[ $virtual -gt 0 ]] && all=$virtual
say "devices: $all ($([[ $virtual -gt 0 ]] && echo "one GPU opened $virtual times" || echo "$n_gpus GPUs"))"
failed=0
part_fail() { say "FAILED: $*"; failed=1; }

model() {  # NAME ARGS...: the model file, made once
  local name=$1; shift
  local f="$models/$name.gguf"
  if [[ ! -f "$f" ]]; then
    say "making $name ($*)"
    "$bin/tpar-llama-model" "$@" -o "$f.part" >> "$log" 2>&1 && mv "$f.part" "$f" || { part_fail "tpar-llama-model $name"; return 1; }
    sync  # the model's pages written back now, not beside the first benchmark
  fi
  echo "$f"
}

# The same binary before and after: the replay patch off (GGML_VK_DISABLE_REPLAY=1: no
# replay, tpar's kernels in tpar's own command buffers, barriers as ggml-vulkan has them),
# and the defaults.
declare -A variant=(
  [before]="GGML_VK_DISABLE_REPLAY=1"
  [after]=""
)

bench() {  # LABEL MODEL DEVICES SM ARGS ENV...: one llama-bench, its table into the log
  local label=$1 m=$2 n=$3 sm=$4 args=$5; shift 5
  local vis
  vis=$(visible "$n")
  [[ $sm == none ]] && vis=0
  echo "## llama-bench $label: GGML_VK_VISIBLE_DEVICES=$vis $* llama-bench -m $(basename "$m") -ngl 99 -fa 1 -sm $sm $args -r $reps" >> "$log"
  local start=$SECONDS
  # shellcheck disable=SC2086
  if env "$@" GGML_VK_VISIBLE_DEVICES="$vis" TPAR_LOG=info "${bench_bin:-$bin}/llama-bench" -v -m "$m" -ngl 99 -fa 1 -sm "$sm" $args -r "$reps" \
       -o md > "$out/bench.tmp" 2> "$out/bench.err"; then
    cat "$out/bench.tmp" >> "$log"
    grep -E "ggml comm: [0-9]+ AllReduces|enqueued by each|subgraphs replayed|the relay served|relay thread came|AllReduces skipped|device parts recorded|first values came|relay.s kernels|host staging made" "$out/bench.err" | sed 's/^/# /' >> "$log"
  else
    tail -15 "$out/bench.err" >> "$log"
    part_fail "llama-bench $label"
  fi
  echo "# ($((SECONDS - start)) s)" >> "$log"
}

run_tests() {
  say "part tests"
  # tpar's test programs: on 2 or more GPUs over the GPUs (TPAR_TEST_DEVICES=gpus), on one
  # (or with --virtual) the first GPU opened as each test's devices. No validation layer
  # travels: they run without it, as on every GPU run. A program gets 540 s, under a
  # 10-minute command limit: fault's sweep alone ran past 300 s on one H100 (f343600), so
  # give it and allreduce calls of their own (--tests fault, --tests allreduce).
  local devices=gpus t name rc
  [[ $n_gpus -lt 2 || $virtual -gt 0 ]] && devices=""
  echo "## tpar's tests, TPAR_TEST_DEVICES=${devices:-(unset: the first GPU opened as several devices)} TPAR_TEST_NO_VALIDATION=1" >> "$log"
  local programs=("$bin"/tests/*)
  if [[ -n $test_list ]]; then
    programs=()
    for name in ${test_list//,/ }; do
      [[ -x "$bin/tests/$name" ]] || { part_fail "no test program $name in the bundle"; return; }
      programs+=("$bin/tests/$name")
    done
  fi
  for t in "${programs[@]}"; do
    name=$(basename "$t")
    local targs=(--no-version)
    [[ $name == c_api_* ]] && targs=(3)
    [[ $name == c_api_threads ]] && targs=()  # both sections: deferred tickets on a second thread, an abort
    rc=0
    TPAR_TEST_DEVICES=$devices TPAR_TEST_NO_VALIDATION=1 TPAR_TRACE=/tmp/tpar-trace-test.json \
      timeout 540 "$t" "${targs[@]}" > "$out/test.tmp" 2>&1 || rc=$?
    echo "# $name: exit $rc" >> "$log"
    grep -E "SKIP|ERROR|FAILED|CHECK failed|REQUIRE failed|test cases|assertions|passed|failed" "$out/test.tmp" | tail -12 >> "$log"
    [[ $rc -eq 0 ]] || part_fail "test $name (exit $rc)"
  done
  run_cases
}

run_cases() {
  local dense quant l8 l32 c
  dense=$(model tiny "--preset" tiny) || return
  quant=$(model quant-q4_k_m --preset tiny --embd 1536 --heads 24 --heads-kv 12 --ff 3072 --layers 2 --type q4_k_m) || return
  l8=$(model layers8-f16 --preset tiny --layers 8 --type f16) || return
  l32=$(model layers32-f16 --layers 32 --embd 256 --heads 4 --heads-kv 2 --ff 512 --type f16) || return
  mkdir -p "$models/cases"
  cp "$dense" "$models/cases/dense.gguf"
  cp "$quant" "$models/cases/quant.gguf"
  cp "$l8" "$models/cases/layers8.gguf"
  cp "$l32" "$models/cases/layers32.gguf"
  # three devices: three GPUs, or where there are two, the second opened twice
  local triple=0,1,1
  [[ $virtual -gt 0 || $all -ge 3 ]] && triple=$(visible 3)
  # every architecture of llama.cpp's test-llama-archs (ARCHS=all), the rest as on lavapipe
  for c in ${CASES:-dense-2 decode-growth quant-2 slots-apart slots-many two-contexts off-switch logging archs}; do
    echo "## case $c on devices $(visible 2)" >> "$log"
    local start=$SECONDS
    BIN=$bin MODELS=$models/cases WORK=/tmp/tpar-cases LAYER=$bundle/layer TPAR_LLAMA_PAIR=$(visible 2) TPAR_LLAMA_TRIPLE=$triple \
      TPAR_TEST_DEVICES=gpus ARCHS=all "$root/tests/llama/case.sh" "$c" > "$out/case.tmp" 2>&1 || part_fail "case $c"
    # the case's verdicts in full (test-llama-archs' summaries among them), then its last lines
    grep -E "^(Summary|at [0-9]+ devices|PASS|FAIL)" "$out/case.tmp" >> "$log"
    grep -vE "^(tpar: ggml comm: AllReduce over|tpar info: ggml comm: AllReduce over|run: )" "$out/case.tmp" | tail -25 >> "$log"
    echo "# case $c: $((SECONDS - start)) s" >> "$log"
  done
}

run_sweep() {
  say "part sweep"
  local n kind
  for n in 2 "$all"; do
    local dev=(--devices "$(visible "$n")")
    [[ $virtual -gt 0 ]] && dev=(--virtual "$n")
    for kind in link-native default proxy; do
      local sargs=(-q -r "$reps" -b 4K -e 256M) f="$out/sweep-$kind-n$n.txt"
      case $kind in
        link-native) sargs+=(--link --sync native --wire all) ;;
        default) sargs+=(--sync native) ;;
        proxy) sargs+=(--sync proxy) ;;
      esac
      { stamp; echo "# tpar-bench ${dev[*]} ${sargs[*]}"; } > "$f"
      local start=$SECONDS
      "$bin/tpar-bench" "${dev[@]}" "${sargs[@]}" >> "$f" 2>&1 || part_fail "sweep $kind n=$n"
      echo "# sweep $kind n=$n: $(basename "$f"), $((SECONDS - start)) s" >> "$log"
    done
    [[ $n == "$all" ]] && break
  done
}

# The Python that imports PyTorch: --python, else the first python3 on PATH that does.
torch_python() {
  local p
  if [[ -n $python ]]; then
    "$python" -c "import torch" 2> /dev/null && { echo "$python"; return 0; }
    part_fail "$python does not import torch"; return 1
  fi
  for p in $(type -ap python3); do
    "$p" -c "import torch" 2> /dev/null && { echo "$p"; return 0; }
  done
  part_fail "no python3 on PATH imports torch: name one with --python PATH"; return 1
}

run_nccl() {
  say "part nccl"
  [[ $virtual -eq 0 && $n_gpus -ge 2 ]] || { say "part nccl: needs 2 or more GPUs, one process each (not run)"; return; }
  local py
  py=$(torch_python) || { failed=1; return; }
  local n p2p work mode f
  for n in 2 "$all"; do
    f="$out/sweep-nccl-n$n.txt"
    if [[ -n ${NCCL_CHAIN_ONLY:-} ]]; then say "NCCL_CHAIN_ONLY: the NCCL sweep left out"; else
    { stamp; echo "# scripts/nccl_anchor.py sweep $n p2p-off (NCCL_P2P_DISABLE=1), then nvlink (NCCL's default)"; } > "$f"
    for p2p in p2p-off nvlink; do
      local off=()
      [[ $p2p == p2p-off ]] && off=(NCCL_P2P_DISABLE=1)
      env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 "${off[@]}" \
        CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((n - 1)))" "$py" "$root/scripts/nccl_anchor.py" sweep "$n" "$p2p" >> "$f" 2>&1 ||
        part_fail "NCCL sweep n=$n $p2p"
    done
    echo "# NCCL sweep n=$n: $(basename "$f")" >> "$log"
    fi
    if [[ -n ${NCCL_SWEEP_ONLY:-} ]]; then say "NCCL_SWEEP_ONLY: the NCCL chain left out"; [[ $n == "$all" ]] && break; continue; fi
    for work in 0 58M; do
      for mode in eager graph; do
        local g=()
        [[ $mode == graph ]] && g=(--graph)
        echo "## NCCL_P2P_DISABLE=1 scripts/nccl_anchor.py chain $n p2p-off --work $work ${g[*]}" >> "$log"
        env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NCCL_P2P_DISABLE=1 \
          CUDA_VISIBLE_DEVICES="$(seq -s, 0 $((n - 1)))" "$py" "$root/scripts/nccl_anchor.py" chain "$n" p2p-off --work "$work" \
          "${g[@]}" > "$out/nccl.tmp" 2>&1 || part_fail "NCCL chain n=$n work=$work $mode"
        grep -E "chain n=|Error|error|File |Thread |Timeout" "$out/nccl.tmp" | tail -40 >> "$log"
      done
    done
    [[ $n == "$all" ]] && break
  done
}

run_chain() {
  say "part chain"
  local n
  for n in 2 "$all"; do
    for work in 0 58M; do
      echo "## tpar-bench --devices $(visible "$n") --chain 64 --chain-work $work --chain-wiring all" >> "$log"
      local dev=(--devices "$(visible "$n")")
      [[ $virtual -gt 0 ]] && dev=(--virtual "$n")
      "$bin/tpar-bench" "${dev[@]}" --chain 64 --chain-work "$work" --chain-wiring all --sizes 4K,16K,64K -n 20 -r "$reps" -q \
        >> "$log" 2>&1 || part_fail "chain n=$n work=$work"
    done
    [[ $n == "$all" ]] && break
  done
}

# tpar's three decode variants at 2 GPUs and at all of them: TAG MODEL "ARGS"
variants() {
  local n v
  for n in 2 "$all"; do
    for v in before after; do
      # shellcheck disable=SC2086
      bench "tpar$n-$v-$1" "$2" "$n" tensor "$3" ${variant[$v]}
    done
    [[ $n == "$all" ]] && break
  done
}

run_llama() {
  say "part llama"
  local m8 m70
  m8=$(model llama3-8b-q8_0 --preset llama3-8b) || return
  bench none-8b "$m8" 1 none "-p 512 -n 128"
  bench layer2-8b "$m8" 2 layer "-p 512 -n 128"
  bench ggml2-8b "$m8" 2 tensor "-p 512 -n 128" GGML_VK_DISABLE_TPAR=1
  variants 8b "$m8" "-p 512 -n 128"
  bench none-8b-d8192 "$m8" 1 none "-p 0 -n 128 -d 8192"
  bench layer2-8b-d8192 "$m8" 2 layer "-p 0 -n 128 -d 8192"
  # shellcheck disable=SC2086
  bench tpar2-before-8b-d8192 "$m8" 2 tensor "-p 0 -n 128 -d 8192" ${variant[before]}
  bench tpar2-after-8b-d8192 "$m8" 2 tensor "-p 0 -n 128 -d 8192"
  m70=$(model llama3-70b-20l-q8_0 --preset llama3-70b --layers 20) || return
  bench none-70b20 "$m70" 1 none "-p 512 -n 64"
  bench layer2-70b20 "$m70" 2 layer "-p 512 -n 64"
  variants 70b20 "$m70" "-p 512 -n 64"
}

run_move() {
  say "part move"
  local trees=${MOVE_TREES:-old new}
  [[ $trees == new || -x "$bin/old/llama-bench" ]] ||
    { part_fail "no bin-old/llama-bench in the bundle (scripts/gpu-bundle.sh --with-old REF)"; return; }
  grep -E "^(built|old tree)" "$bundle/STAMP" | sed 's/^/# move: /' >> "$log"
  local spec tag preset args type m tree
  for spec in "8b:llama3-8b::-p 512 -n 128" "70b20:llama3-70b:--layers 20:-p 512 -n 64"; do
    IFS=: read -r tag preset extra args <<< "$spec"
    [[ -z ${MOVE_MODELS:-} || ${MOVE_MODELS} == "$tag" ]] || continue
    for type in q8_0 q4_k_m; do
      # shellcheck disable=SC2086
      m=$(model "$preset${extra:+-20l}-$type" --preset "$preset" $extra --type "$type") || return
      for tree in $trees; do
        local bb="$bin"
        [[ $tree == old ]] && bb="$bin/old"
        bench_bin=$bb bench "move-$tree-none-$tag-$type" "$m" 1 none "$args"
        bench_bin=$bb bench "move-$tree-layer2-$tag-$type" "$m" 2 layer "$args"
        bench_bin=$bb bench "move-$tree-tpar2-$tag-$type" "$m" 2 tensor "$args"
      done
    done
  done
}

# One llama-server of model $m in the background (srv_pid, srv_port), its log in
# $out/server-LABEL.err, its command as a section head in the suite's log (CLIENT: what
# talks to it); false, with the log's tail in the suite's log, where it did not come up:
# LABEL SPLIT DEVICES SLOTS CONTEXT "SERVER ARGS" CLIENT ENV...
server_up() {
  local label=$1 sm=$2 n=$3 slots=$4 ctx=$5 server_args=$6 client=$7; shift 7
  local vis ready=0
  srv_port=$((20000 + RANDOM % 20000))
  vis=$(visible "$n")
  [[ $sm == none ]] && vis=0
  echo "## llama-server $label: GGML_VK_VISIBLE_DEVICES=$vis $* llama-server -m $(basename "$m") -ngl 99 -fa on -sm $sm -c $ctx -np $slots${server_args:+ $server_args}; $client" | relative >> "$log"
  # shellcheck disable=SC2086
  env "$@" GGML_VK_VISIBLE_DEVICES="$vis" TPAR_LOG=info "$bin/llama-server" -m "$m" -ngl 99 -fa on -sm "$sm" -c "$ctx" \
    -np "$slots" --no-warmup $server_args --host 127.0.0.1 --port "$srv_port" > "$out/server-$label.err" 2>&1 &
  srv_pid=$!
  for _ in $(seq 1 600); do
    python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$srv_port/health', timeout=1)" 2>/dev/null && { ready=1; break; }
    kill -0 $srv_pid 2>/dev/null || break
    sleep 0.5
  done
  if [[ $ready -ne 1 ]]; then
    kill $srv_pid 2>/dev/null; tail -20 "$out/server-$label.err" >> "$log"
    echo "$label: llama-server did not come up" >> "$log"; part_fail "llama-server $label did not come up"; return 1
  fi
}

# The server stopped, and tpar's summary lines from its log: LABEL
server_down() {
  kill -INT $srv_pid 2>/dev/null; wait $srv_pid 2>/dev/null
  grep -E "ggml comm: [0-9]+ AllReduces|subgraphs replayed|device parts recorded|first values came|the relay served|relay thread came|relay.s kernels|host staging made|AllReduces skipped" "$out/server-$1.err" | sed 's/^/# /' >> "$log" || true
}

# One llama-server of model $m, then server_load.py's requests into the log (fixed token
# counts, no grammar; an unanswered or short request is a failure of the mode):
# LABEL SPLIT DEVICES SLOTS CONTEXT "LOAD ARGS" ENV... ($srv_args: more llama-server options)
serve_load() {
  local label=$1 sm=$2 n=$3 slots=$4 ctx=$5 load=$6; shift 6
  server_up "$label" "$sm" "$n" "$slots" "$ctx" "${srv_args:-}" "server_load.py $load" "$@" || return 0
  # shellcheck disable=SC2086
  if ! python3 "$root/scripts/server_load.py" --port "$srv_port" --label "$label" --slots "$slots" $load \
         --out "$out/server-$label.json" >> "$log" 2>&1; then
    part_fail "requests to llama-server $label"
    kill -0 $srv_pid 2>/dev/null || echo "# llama-server $label exited: $(tail -3 "$out/server-$label.err" | tr '\n' ' ')" >> "$log"
  fi
  server_down "$label"
}

run_server() {
  say "part server"
  local m
  m=$(model "server-$server_preset" --preset "$server_preset") || return
  serve_rounds() {  # LABEL SPLIT DEVICES SLOTS ENV...: 128 tokens a request, by rounds
    local label=$1 sm=$2 n=$3 slots=$4; shift 4
    serve_load "$label" "$sm" "$n" "$slots" 4096 "--n-predict 128" "$@"
  }
  # 4 slots, 8 requests at once, twice: one GPU, -sm layer, and -sm tensor with tpar and with
  # ggml's own AllReduce, each as a user runs it (defaults)
  serve_rounds none-4 none 1 4
  serve_rounds layer-4 layer 2 4
  serve_rounds tpar-4 tensor 2 4
  serve_rounds ggml-4 tensor 2 4 GGML_VK_DISABLE_TPAR=1
  # one slot, three requests in a row, the f32 wire: tpar's texts must be ggml's
  serve_rounds tpar-1 tensor 2 1 TPAR_WIRE=f32
  serve_rounds ggml-1 tensor 2 1 GGML_VK_DISABLE_TPAR=1
  # With several slots the server batches requests as they happen to arrive, and a batch's
  # size picks ggml's kernels: two runs of one backend already differ in some texts (on two
  # H100s, ggml against ggml 8 of 16 the same). So only the one-slot texts are checked.
  python3 "$root/scripts/server_load.py" --compare "$out/server-tpar-1.json" "$out/server-ggml-1.json" >> "$log" 2>&1 ||
    part_fail "tpar's texts differ from ggml's (one slot)"
  echo "## server summary ($(basename "$m"), 128 tokens a request)" >> "$log"
  grep -E "^[a-z0-9-]+: ([0-9]+ of [0-9]+ requests answered|llama-server did not come up)" "$log" | sed 's/^/# /' >> "$log"
}

# A server's decode steps without the server (part batched): llama-batched-bench, decode of
# 1 to 4 sequences at once, each sequence in its own KV stream as llama-server's slots are.
run_batched() {
  say "part batched"
  local name m row
  local names=${BATCHED_MODELS:-8b}  # not "models": that is the models' folder
  for name in ${names//,/ }; do
    case $name in
      8b) m=$(model llama3-8b-q8_0 --preset llama3-8b) || return ;;
      8b-q4_k_m) m=$(model llama3-8b-q4_k_m --preset llama3-8b --type q4_k_m) || return ;;
      *) part_fail "BATCHED_MODELS: no model $name (8b, 8b-q4_k_m)"; continue ;;
    esac
    batched_one "none-$name" "$m" 1 none
    for row in $(tr ',' ' ' <<< "${BATCHED_ROWS:-auto,relay-t4,skip}"); do
      case $row in
        auto) batched_one "tpar-$name" "$m" 2 tensor ;;
        relay-t[1-9] | relay-t1[0-6]) batched_one "tpar-$row-$name" "$m" 2 tensor TPAR_RELAY_THREADS=${row#relay-t} ;;
        oneshot) batched_one "tpar-oneshot-$name" "$m" 2 tensor TPAR_ALGO=oneshot ;;
        skip) batched_one "tpar-skip-$name" "$m" 2 tensor TPAR_GGML_SKIP_ALLREDUCE=1 ;;
        ggml) batched_one "ggml-$name" "$m" 2 tensor GGML_VK_DISABLE_TPAR=1 ;;
        *) part_fail "BATCHED_ROWS: no row $row (auto, relay-t1 to relay-t16, oneshot, skip, ggml)" ;;
      esac
    done
    batched_one "none-$name-last" "$m" 1 none
  done
}

batched_one() {  # LABEL MODEL DEVICES SM ENV...
  local label=$1 m=$2 n=$3 sm=$4; shift 4
  local vis args="-ngl 99 -fa on -c 4096 -npp 128 -ntg 128 -npl 1,2,3,4"
  vis=$(visible "$n")
  [[ $sm == none ]] && vis=0
  echo "## llama-batched-bench $label: GGML_VK_VISIBLE_DEVICES=$vis $* llama-batched-bench -m $(basename "$m") -sm $sm $args" >> "$log"
  local start=$SECONDS
  # shellcheck disable=SC2086
  if env "$@" GGML_VK_VISIBLE_DEVICES="$vis" TPAR_LOG=info "$bin/llama-batched-bench" -m "$m" -sm "$sm" $args \
       > "$out/batched.tmp" 2> "$out/batched.err"; then
    grep -E "^\|" "$out/batched.tmp" >> "$log"
    grep -E "ggml comm: [0-9]+ AllReduces|subgraphs replayed|device parts recorded|first values came|the relay served|relay thread came|relay.s kernels|host staging made|AllReduces skipped" "$out/batched.err" | sed 's/^/# /' >> "$log"
  else
    tail -15 "$out/batched.err" >> "$log"
    part_fail "llama-batched-bench $label"
  fi
  echo "# ($((SECONDS - start)) s)" >> "$log"
}

# A server's decode steps phase by phase (part server-steps): scripts/server_steps.py
# against llama-server on the 8B shapes, 4 slots, one server a mode.
run_server_steps() {
  say "part server-steps"
  local m mode
  m=$(model "server-$server_preset" --preset "$server_preset") || return
  local modes=${STEPS_MODES:-none,tpar}
  for mode in ${modes//,/ }; do
    local base=${mode%-reuse} sm=tensor n=2 server_args="" label="steps-$mode" extra=() logarg=()
    base=${base%-trace}
    # -kvu: one KV cache for all slots (llama-server's default where -np is not given)
    [[ $base == *-kvu ]] && { base=${base%-kvu}; server_args=--kv-unified; }
    case $base in
      none) sm=none n=1 ;;
      tpar) ;;
      skip) extra=(TPAR_GGML_SKIP_ALLREDUCE=1) ;;
      oneshot) extra=(TPAR_ALGO=oneshot) ;;
      noreplay) extra=(GGML_VK_DISABLE_REPLAY=1) ;;
      *) part_fail "STEPS_MODES: no mode $mode (none, tpar, skip, oneshot, noreplay; each also with -kvu, and then -reuse or -trace)"; continue ;;
    esac
    # -reuse: llama.cpp's graph reuse checks in the server's log, counted by phase
    [[ $mode == *-reuse ]] && { extra+=(LLAMA_GRAPH_RESULT_DEBUG=2); server_args+="${server_args:+ }-v"; logarg=(--log "$out/server-$label.err"); }
    # -trace: the host's spans of 8 steps from step STEPS_TRACE_SKIP (default 990: the last phase)
    [[ $mode == *-trace ]] && extra+=(TPAR_TRACE="$out/trace-$label.json" TPAR_TRACE_GPU=0 TPAR_TRACE_SKIP="${STEPS_TRACE_SKIP:-990}" TPAR_TRACE_SPAN=8)
    server_up "$label" "$sm" "$n" 4 16384 "$server_args" server_steps.py "${extra[@]}" || continue
    python3 "$root/scripts/server_steps.py" --port "$srv_port" --label "$label" "${logarg[@]}" >> "$log" 2>&1 ||
      part_fail "requests to llama-server $label"
    server_down "$label"
    if [[ $mode == *-trace ]]; then
      if [[ -f "$out/trace-$label.json" ]]; then
        python3 "$root/scripts/timeline.py" "$out/trace-$label.json" --step all 2>&1 | relative >> "$log"
      else
        part_fail "no trace of the steps ($label)"
      fi
    fi
  done
  if compgen -G "$out/trace-steps-*.json" > /dev/null; then
    (cd "$out" && tar -cJf traces-steps.tar.xz trace-steps-*.json && rm -f trace-steps-*.json)
  fi
}

run_server_mixed() {
  say "part server-mixed"
  local m mode
  m=$(model "server-$server_preset" --preset "$server_preset") || return
  local load="--mixed ${MIXED_ROUNDS:-16} --seed ${MIXED_SEED:-1} --max-seconds ${MIXED_MAX_SECONDS:-480}"
  # untimed warm-up requests first, so that the first server on a machine does not pay alone
  # for compiling its GPU programs into the driver's cache
  [[ ${MIXED_WARM:-1} == 0 ]] || load+=" --warm"
  local modes=${MIXED_MODES:-none,layer,tpar,tpar-noreplay,ggml}
  local passes=${MIXED_PASSES:-1} pass p order
  [[ $passes =~ ^[1-9]$ ]] || { part_fail "MIXED_PASSES: a number of passes from 1 to 9, not '$passes'"; return; }
  for ((pass = 1; pass <= passes; pass++)); do
    # the passes take turns in the order, so that no mode always runs first or last
    order=${modes//,/ } p=""
    if ((pass % 2 == 0)); then order=$(tr ' ' '\n' <<< "$order" | tac | tr '\n' ' '); fi
    if ((pass > 1)); then p=-p$pass; fi
    for mode in $order; do
      if [[ -n $p && $mode =~ ^(steady|trace|trace-none|trace-skip)$ ]]; then continue; fi
      local srv_args="" kvu=""
      # -kvu: one KV cache for all slots (llama-server's default where -np is not given), so
      # that a step's slots go in one ubatch whichever they are
      if [[ $mode == *-kvu ]]; then
        srv_args=--kv-unified kvu=-kvu mode=${mode%-kvu}
        [[ $mode =~ ^(none|layer|tpar|tpar-noreplay|ggml)$ ]] ||
          { part_fail "MIXED_MODES: no mode $mode-kvu (-kvu goes with none, layer, tpar, tpar-noreplay, ggml)"; continue; }
      fi
      case $mode in
        none) serve_load mixed-none$kvu$p none 1 4 16384 "$load" ;;
        layer) serve_load mixed-layer$kvu$p layer 2 4 16384 "$load" ;;
        tpar) serve_load mixed-tpar$kvu$p tensor 2 4 16384 "$load" ;;
        # a step's slots in one ubatch only where their KV streams are adjacent (--kv-runs 1, llama.cpp's rule without patch 7)
        none-adjacent) srv_args="--kv-runs 1" serve_load mixed-none-adjacent$p none 1 4 16384 "$load" ;;
        tpar-adjacent) srv_args="--kv-runs 1" serve_load mixed-tpar-adjacent$p tensor 2 4 16384 "$load" ;;
        tpar-oneshot) serve_load mixed-tpar-oneshot$p tensor 2 4 16384 "$load" TPAR_ALGO=oneshot ;;
        tpar-relay-t[1-9] | tpar-relay-t1[0-6]) serve_load mixed-$mode$p tensor 2 4 16384 "$load" TPAR_RELAY_THREADS=${mode#tpar-relay-t} ;;
        tpar-relay256) serve_load mixed-tpar-relay256$p tensor 2 4 16384 "$load" TPAR_RELAY_MAX=256K ;;
        # the relay's kernels in tpar's own command buffers, not riding in ggml-vulkan's
        tpar-ride-off) serve_load mixed-tpar-ride-off$p tensor 2 4 16384 "$load" TPAR_RELAY_RIDE=0 ;;
        # the bound with free boundaries: every AllReduce accepted and not summed (timing only)
        tpar-skip) serve_load mixed-tpar-skip$p tensor 2 4 16384 "$load" TPAR_GGML_SKIP_ALLREDUCE=1 ;;
        # eight calls in flight whatever their size (the default: as many as 8 MiB of staging holds, at least 2)
        tpar-depth8) serve_load mixed-tpar-depth8$p tensor 2 4 16384 "$load" TPAR_DEPTH=8 ;;
        tpar-noreplay) serve_load mixed-tpar-noreplay$kvu$p tensor 2 4 16384 "$load" GGML_VK_DISABLE_REPLAY=1 ;;
        ggml) serve_load mixed-ggml$kvu$p tensor 2 4 16384 "$load" GGML_VK_DISABLE_TPAR=1 ;;
        steady)  # steady decode, the same replay rules: llama-bench on the 8B shapes
          local m8
          m8=$(model llama3-8b-q8_0 --preset llama3-8b) || return
          local k
          for k in 1 2; do  # twice, taking turns
            bench replay-second-8b-$k "$m8" 2 tensor "-p 0 -n 128"
            bench replay-off-8b-$k "$m8" 2 tensor "-p 0 -n 128" GGML_VK_DISABLE_REPLAY=1
          done ;;
        trace|trace-none|trace-skip)  # the host's time in mixed steps (no GPU stamps): tpar (default replay), one GPU, free boundaries
          local tl=tpar sm=tensor nd=2 extra=()
          [[ $mode == trace-none ]] && { tl=none; sm=none; nd=1; }
          [[ $mode == trace-skip ]] && { tl=tpar-skip; extra=(TPAR_GGML_SKIP_ALLREDUCE=1); }
          serve_load "mixed-$tl-trace" $sm $nd 4 16384 "--mixed 4 --seed ${MIXED_SEED:-1}" "${extra[@]}" \
            TPAR_TRACE="$out/trace-mixed-$tl.json" TPAR_TRACE_GPU=0 TPAR_TRACE_SKIP="${MIXED_TRACE_SKIP:-400}" TPAR_TRACE_SPAN="${MIXED_TRACE_SPAN:-8}"
          if [[ -f "$out/trace-mixed-$tl.json" ]]; then
            echo "## trace mixed-$tl: TPAR_TRACE_GPU=0, ${MIXED_TRACE_SPAN:-8} steps after the first ${MIXED_TRACE_SKIP:-400} of the server under mixed traffic" >> "$log"
            python3 "$root/scripts/timeline.py" "$out/trace-mixed-$tl.json" --step all 2>&1 | relative >> "$log"
            [[ ${PIPESTATUS[0]} -eq 0 ]] || part_fail "timeline mixed $tl"
          else
            part_fail "no trace of the mixed steps ($tl)"
          fi ;;
        *) part_fail "MIXED_MODES: no mode $mode (none, layer, tpar, none-adjacent, tpar-adjacent, tpar-oneshot, tpar-relay-t1 to tpar-relay-t16, tpar-relay256, tpar-ride-off, tpar-skip, tpar-depth8, tpar-noreplay, ggml, steady, trace; none, layer, tpar, tpar-noreplay and ggml also with -kvu)" ;;
      esac
    done
  done
  if compgen -G "$out/trace-mixed-*.json" > /dev/null; then
    (cd "$out" && tar -cJf traces-mixed.tar.xz trace-mixed-*.json && rm -f trace-mixed-*.json)
  fi
  echo "## server-mixed summary ($(basename "$m"), $load)" >> "$log"
  grep -E "^mixed-[a-z0-9-]+: ([0-9]+ of [0-9]+ requests answered|llama-server did not come up)" "$log" | sed 's/^/# /' >> "$log"
}

run_cuda() {
  say "part cuda"
  local work=/tmp/tpar-cuda nccl py
  py=$(torch_python) || { failed=1; return; }
  # NCCL as PyTorch's wheel carries it (nvidia-nccl), asked of that Python
  nccl=$("$py" -c "import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__) if nvidia.nccl.__file__ else list(nvidia.nccl.__path__)[0])" 2> /dev/null)
  [[ -n "$nccl" && -f "$nccl/include/nccl.h" ]] || { part_fail "no NCCL headers beside $py's PyTorch (nvidia-nccl)"; return; }
  [[ -e "$nccl/lib/libnccl.so" ]] || ln -s libnccl.so.2 "$nccl/lib/libnccl.so"
  if [[ ! -x $work/build/bin/llama-bench ]]; then
    local commit
    commit=$(sed -nE 's/^llama_commit=([0-9a-f]+).*/\1/p' "$root/scripts/llama.sh")
    mkdir -p $work && tar -xJf "$root/third_party/llama.cpp-$commit.tar.xz" -C $work
    local start=$SECONDS
    cmake -S $work/llama.cpp -B $work/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DGGML_CUDA_NCCL=ON -DNCCL_ROOT="$nccl" -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
      -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF > $work/configure.log 2>&1 &&
      cmake --build $work/build --target llama-bench -j "$(nproc)" > $work/build.log 2>&1 ||
      { tail -20 $work/configure.log $work/build.log >> "$log"; part_fail "the CUDA build"; return; }
    echo "# llama.cpp $commit with ggml-cuda (sm_90, NCCL $(ls $nccl/lib/libnccl.so.* | head -1 | sed 's/.*so\.//')), built in $((SECONDS - start)) s" >> "$log"
  fi
  local m8 m70 n mode
  m8=$(model llama3-8b-q8_0 --preset llama3-8b) || return
  m70=$(model llama3-70b-20l-q8_0 --preset llama3-70b --layers 20) || return
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 LD_LIBRARY_PATH="$nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  cuda_bench() {  # LABEL MODEL N SM ARGS ENV...
    local label=$1 m=$2 k=$3 sm=$4 args=$5; shift 5
    local vis
    vis=$(seq -s, 0 $((k - 1)))
    echo "## llama-bench $label: CUDA_VISIBLE_DEVICES=$vis $* llama-bench (CUDA) -m $(basename "$m") -ngl 99 -fa 1 -sm $sm $args -r $reps" >> "$log"
    # shellcheck disable=SC2086
    if env "$@" CUDA_VISIBLE_DEVICES="$vis" $work/build/bin/llama-bench -m "$m" -ngl 99 -fa 1 -sm "$sm" $args -r "$reps" -o md \
         > "$out/bench.tmp" 2> "$out/bench.err"; then
      cat "$out/bench.tmp" >> "$log"
    else
      tail -15 "$out/bench.err" >> "$log"
      part_fail "CUDA llama-bench $label"
    fi
  }
  for pair in "8b:$m8:-p 512 -n 128" "70b20:$m70:-p 512 -n 64"; do
    local suffix=${pair%%:*} rest=${pair#*:}
    local m=${rest%%:*} args=${rest#*:}
    cuda_bench "cuda-none-$suffix" "$m" 1 none "$args"
    for n in 2 "$all"; do
      for mode in internal nccl nccl-p2p-off; do
        if [[ $mode == nccl-p2p-off ]]; then
          cuda_bench "cuda$n-$mode-$suffix" "$m" "$n" tensor "$args" GGML_CUDA_ALLREDUCE=nccl NCCL_P2P_DISABLE=1
        else
          cuda_bench "cuda$n-$mode-$suffix" "$m" "$n" tensor "$args" GGML_CUDA_ALLREDUCE=$mode
        fi
      done
      [[ $n == "$all" ]] && break
    done
  done
}

run_mixed() {
  say "part mixed"
  [[ -f "$bundle/lvp.tar.xz" ]] || { part_fail "no lavapipe in the bundle (scripts/gpu-bundle.sh --mixed)"; return; }
  mkdir -p /tmp/tpar-lvp && tar -xJf "$bundle/lvp.tar.xz" -C /tmp/tpar-lvp
  (
    export VK_DRIVER_FILES="${VK_DRIVER_FILES:+$VK_DRIVER_FILES:}/tmp/tpar-lvp/lvp_icd.json"
    echo "## tpar-info --devices 0,1 (VK_DRIVER_FILES=$VK_DRIVER_FILES)" >> "$log"
    "$bin/tpar-info" --devices 0,1 >> "$log" 2>&1 || part_fail "tpar-info over the pair"
    # numerics: in bin/ in gpu-bundle.sh --mixed's bundle, in tests/ in the full one
    local numerics=$bin/numerics
    [[ -x $numerics ]] || numerics=$bin/tests/numerics
    echo "## TPAR_TEST_DEVICES=all TPAR_TEST_NO_VALIDATION=1 numerics" >> "$log"
    TPAR_TEST_DEVICES=all TPAR_TEST_NO_VALIDATION=1 "$numerics" --no-version > "$out/numerics.tmp" 2>&1 || part_fail "numerics over the pair"
    grep -E "MESSAGE|SKIP|ERROR|FAILED|test cases|assertions" "$out/numerics.tmp" | tail -20 >> "$log"
    if [[ -x "$bin/tpar-llama-logits" ]]; then
      # llama.cpp's -sm tensor over the GPU and llvmpipe (GGML_VK_VISIBLE_DEVICES=0,1):
      # every AllReduce served by tpar, logits equal to ggml's own; uneven-split gives the
      # GPU three quarters of every layer, as a user of a mixed pair would.
      local dense c
      dense=$(model tiny --preset tiny) || return
      mkdir -p "$models/cases" && cp "$dense" "$models/cases/dense.gguf"
      for c in dense-2 uneven-split; do
        echo "## case $c on devices 0,1 (the GPU and llvmpipe)" >> "$log"
        BIN=$bin MODELS=$models/cases WORK=/tmp/tpar-cases TPAR_LLAMA_PAIR=0,1 TPAR_TEST_DEVICES=all \
          "$root/tests/llama/case.sh" "$c" > "$out/case.tmp" 2>&1 || part_fail "case $c over the pair"
        grep -vE "^(tpar info: ggml comm: AllReduce over|run: )" "$out/case.tmp" | tail -25 >> "$log"
      done
    fi
    echo "## tpar-bench --devices 0,1 --soak ${MIXED_SOAK:-240}" >> "$log"
    "$bin/tpar-bench" --devices 0,1 --soak "${MIXED_SOAK:-240}" -q >> "$log" 2>&1 || part_fail "soak over the pair"
  ) || true
}

run_relay_probe() {
  say "part relay-probe"
  [[ -f "$bundle/lvp.tar.xz" ]] || { part_fail "no lavapipe in the bundle (scripts/gpu-bundle.sh --mixed)"; return; }
  mkdir -p /tmp/tpar-lvp && tar -xJf "$bundle/lvp.tar.xz" -C /tmp/tpar-lvp
  (
    export VK_DRIVER_FILES="${VK_DRIVER_FILES:+$VK_DRIVER_FILES:}/tmp/tpar-lvp/lvp_icd.json"
    local soak=${RELAY_SOAK:-40} pair="0,$n_gpus"  # llvmpipe comes after the GPUs
    # A soak of relay calls (larger ones go as the automatic choice), a stall costing 3 s:
    # each failure line names the communicator's options, so the probes tell what the
    # stalls share.
    probe() {  # LABEL DEVICES ARGS...
      local label=$1 devs=$2; shift 2
      echo "## $label: tpar-bench --devices $devs --soak $soak --soak-timeout 3 --algo relay $*" >> "$log"
      "$bin/tpar-bench" --devices "$devs" --soak "$soak" --soak-timeout 3 --algo relay "$@" -q >> "$log" 2>&1 ||
        echo "# $label: the soak failed" >> "$log"
    }
    if [[ $virtual -eq 0 && $n_gpus -ge 2 ]]; then
      probe "two GPUs, one driver" 0,1
      probe "two GPUs, relay calls only" 0,1 --sizes 4K,16K,64K
      probe "two GPUs, one call in flight" 0,1 --depth 1
      probe "two GPUs, downloads on the compute queue" 0,1 --downloads compute
    fi
    echo "## tpar-info --devices $pair (VK_DRIVER_FILES=$VK_DRIVER_FILES)" >> "$log"
    "$bin/tpar-info" --devices "$pair" 2>&1 | grep -E "^device|relay|sync " >> "$log" || part_fail "tpar-info over the pair"
    local algo
    for algo in relay oneshot; do
      echo "## tpar-bench --devices $pair --algo $algo --sizes 4K,16K,64K -r 3" >> "$log"
      "$bin/tpar-bench" --devices "$pair" --algo "$algo" --sizes 4K,16K,64K -r 3 -q >> "$log" 2>&1 ||
        part_fail "tpar-bench --algo $algo over the pair"
    done
    probe "a GPU beside llvmpipe" "$pair"
  ) || true
}

# The decode paths side by side (part decode): ARGS for llama-bench, then the model.
decode_rows() {  # TAG MODEL ARGS (on DECODE_N devices, default 2)
  local k=${DECODE_N:-2}
  local rows=,${DECODE_ROWS:-auto,oneshot,relay,relay-t1,relay-hold1},
  bench "none-$1" "$2" 1 none "$3"
  [[ $rows == *,auto,* ]] && bench "tpar$k-auto-$1" "$2" "$k" tensor "$3"
  [[ $rows == *,oneshot,* ]] && bench "tpar$k-oneshot-$1" "$2" "$k" tensor "$3" TPAR_ALGO=oneshot
  [[ $rows == *,relay,* ]] && bench "tpar$k-relay-$1" "$2" "$k" tensor "$3" TPAR_ALGO=relay
  local t
  for t in 1 2 4 8; do
    [[ $rows == *,relay-t$t,* ]] && bench "tpar$k-relay-t$t-$1" "$2" "$k" tensor "$3" TPAR_ALGO=relay TPAR_RELAY_THREADS=$t
  done
  [[ $rows == *,relay-hold1,* ]] && bench "tpar$k-relay-hold1-$1" "$2" "$k" tensor "$3" TPAR_ALGO=relay TPAR_STREAM_HOLD=1
  # the relay's kernels in tpar's own command buffers, not riding in ggml-vulkan's
  [[ $rows == *,ride-off,* ]] && bench "tpar$k-ride-off-$1" "$2" "$k" tensor "$3" TPAR_RELAY_RIDE=0
  # the token's bound: every AllReduce accepted and not summed (wrong results, timing only)
  [[ $rows == *,skip,* ]] && bench "tpar$k-skip-$1" "$2" "$k" tensor "$3" TPAR_GGML_SKIP_ALLREDUCE=1
  # one GPU again: the first run after a model is made can find the GPU cold
  bench "none2-$1" "$2" 1 none "$3"
}

run_decode() {
  say "part decode"
  if [[ ${DECODE_CHAIN:-1} != 0 ]]; then
    local row how chain_rows=,${DECODE_CHAIN_ROWS:-oneshot,relay,relay-t1,relay-t4,relay-hold1},
    for row in oneshot relay relay-t1 relay-t2 relay-t4 relay-t8 relay-hold1 relay-ride relay-ride-ordered; do
      [[ $chain_rows == *,$row,* ]] || continue
      local hold=16 threads=2 wiring=streams how=relay
      case $row in
        oneshot) how=oneshot ;;
        relay-t[1-8]) threads=${row#relay-t} ;;
        relay-hold1) hold=1 ;;
        relay-ride) wiring=ride ;;
        relay-ride-ordered) wiring=ride-ordered ;;
      esac
      [[ $how == relay && -n ${DECODE_RELAY_MAX:-} ]] && how="relay --relay-max $DECODE_RELAY_MAX"
      echo "## TPAR_STREAM_HOLD=$hold TPAR_RELAY_THREADS=$threads tpar-bench --devices $(visible "${DECODE_N:-2}") --chain 64 --chain-work 58M --chain-wiring $wiring --algo $how" >> "$log"
      # shellcheck disable=SC2086
      TPAR_STREAM_HOLD=$hold TPAR_RELAY_THREADS=$threads "$bin/tpar-bench" --devices "$(visible "${DECODE_N:-2}")" --chain 64 --chain-work 58M \
        --chain-wiring $wiring --algo $how --sizes "${DECODE_SIZES:-4K,16K,64K}" -n 20 -r "$reps" -q >> "$log" 2>&1 ||
        part_fail "decode chain $row"
    done
  fi
  local which=${DECODE_MODELS:-8b,8b-d8192,8b-q4_k_m,70b20,tiny} m
  if [[ ,$which, == *,8b,* || ,$which, == *,8b-d8192,* ]]; then
    m=$(model llama3-8b-q8_0 --preset llama3-8b) || return
    [[ ,$which, == *,8b,* ]] && decode_rows 8b "$m" "-p 0 -n 128"
    [[ ,$which, == *,8b-d8192,* ]] && decode_rows 8b-d8192 "$m" "-p 0 -n 128 -d 8192"
    if [[ ${DECODE_OPS:-0} == 1 ]]; then
      # ggml-vulkan's own timing of every op (GGML_VK_PERF_LOGGER: a timestamp after each
      # dispatch and a fence wait per graph, so times run long), one GPU against each of
      # two; OneShot, whose waits are the queues' (the relay's kernels would wait for a
      # peer whose graph the logger has not yet submitted).
      local sm
      for sm in none tensor; do
        local vis=0
        [[ $sm == tensor ]] && vis=$(visible 2)
        echo "## ops $sm: GGML_VK_VISIBLE_DEVICES=$vis TPAR_ALGO=oneshot GGML_VK_PERF_LOGGER=1 llama-bench -m $(basename "$m") -ngl 99 -fa 1 -sm $sm -p 0 -n 32 -r 1" >> "$log"
        TPAR_ALGO=oneshot GGML_VK_PERF_LOGGER=1 GGML_VK_PERF_LOGGER_FREQUENCY=1000000 GGML_VK_VISIBLE_DEVICES="$vis" \
          "$bin/llama-bench" -m "$m" -ngl 99 -fa 1 -sm $sm -p 0 -n 32 -r 1 -o md > "$out/bench.tmp" 2> "$out/bench.err" ||
          part_fail "ops $sm"
        sed -n '/Vulkan Timings/,/Total time/p' "$out/bench.err" >> "$log"
      done
    fi
    if [[ ${DECODE_TRACE:-0} == 1 ]]; then
      local a
      for a in ${DECODE_TRACE_ROWS:-oneshot relay}; do
        local trace_env=(TPAR_ALGO="$a")
        [[ $a == ride-off ]] && trace_env=(TPAR_ALGO=relay TPAR_RELAY_RIDE=0)
        trace_one "host-tpar2-$a-8b" "$m" 2 tensor 0 "${trace_env[@]}"
        trace_one "gpu-tpar2-$a-8b" "$m" 2 tensor 1 "${trace_env[@]}"
      done
      (cd "$out" && tar -cJf traces-decode.tar.xz trace-*.json && rm -f trace-*.json)
    fi
  fi
  if [[ ,$which, == *,8b-q4_k_m,* ]]; then
    m=$(model llama3-8b-q4_k_m --preset llama3-8b --type q4_k_m) || return
    decode_rows 8b-q4_k_m "$m" "-p 0 -n 128"
  fi
  if [[ ,$which, == *,70b20,* ]]; then
    m=$(model llama3-70b-20l-q8_0 --preset llama3-70b --layers 20) || return
    decode_rows 70b20 "$m" "-p 0 -n 64"
  fi
  if [[ ,$which, == *,tiny,* ]]; then
    m=$(model tiny32-f16 --preset tiny --layers 32 --type f16) || return
    decode_rows tiny32 "$m" "-p 0 -n 64"
  fi
}

# Each GPU's share of a decode step under -sm tensor on two GPUs, as one GPU runs a model:
# the half-width model (half the heads and KV heads at the same head width, half the FFN;
# the embedding, norms and output whole, as the meta backend keeps them) against the whole model, both -sm none on the first GPU: llama-bench tg, and
# ggml-vulkan's timing of every op (GGML_VK_PERF_LOGGER) of each. SHARD_MODELS picks some
# of 8b, 70b20 (default both).
run_shard() {
  say "part shard"
  local which=${SHARD_MODELS:-8b,70b20} full half tag
  for tag in ${which//,/ }; do
    case $tag in
      8b) full=$(model llama3-8b-q8_0 --preset llama3-8b) || return
          half=$(model llama3-8b-half-q8_0 --preset llama3-8b --heads 16 --heads-kv 4 --head-dim 128 --ff 7168) || return ;;
      70b20) full=$(model llama3-70b20-q8_0 --preset llama3-70b --layers 20) || return
             half=$(model llama3-70b20-half-q8_0 --preset llama3-70b --layers 20 --heads 32 --heads-kv 4 --head-dim 128 --ff 14336) || return ;;
      *) part_fail "SHARD_MODELS: no model $tag (8b, 70b20)"; continue ;;
    esac
    local k
    for k in 1 2; do  # twice, taking turns
      bench "shard-full-$tag-$k" "$full" 1 none "-p 0 -n 128"
      bench "shard-half-$tag-$k" "$half" 1 none "-p 0 -n 128"
    done
    local m label
    for label in full half; do
      m=$full; [[ $label == half ]] && m=$half
      echo "## ops shard-$label-$tag: GGML_VK_VISIBLE_DEVICES=0 GGML_VK_PERF_LOGGER=1 llama-bench -m $(basename "$m") -ngl 99 -fa 1 -sm none -p 0 -n 32 -r 1" >> "$log"
      GGML_VK_PERF_LOGGER=1 GGML_VK_PERF_LOGGER_FREQUENCY=1000000 GGML_VK_VISIBLE_DEVICES=0 \
        "$bin/llama-bench" -m "$m" -ngl 99 -fa 1 -sm none -p 0 -n 32 -r 1 -o md > "$out/bench.tmp" 2> "$out/bench.err" ||
        part_fail "ops shard-$label-$tag"
      sed -n '/Vulkan Timings/,/Total time/p' "$out/bench.err" >> "$log"
    done
  done
}

# Each patch of the series by its switch, on the tree it applies to: llama-bench pp512 and
# tg128 (tg64 for the 32-layer model) on 2 devices with -sm tensor through ggml's own
# AllReduce (GGML_VK_DISABLE_TPAR=1: the series without its core at work), through tpar
# with the replay patch off (GGML_VK_DISABLE_REPLAY=1: the core alone) and with the
# defaults, and -sm none on one GPU beside them; twice, taking turns. SERIES_MODELS picks
# some of 8b, tiny32 (default both).
run_series() {
  say "part series"
  local which=${SERIES_MODELS:-8b,tiny32} m args tag k
  for tag in ${which//,/ }; do
    case $tag in
      8b) m=$(model llama3-8b-q8_0 --preset llama3-8b) || return; args="-p 512 -n 128" ;;
      tiny32) m=$(model tiny32-f16 --preset tiny --layers 32 --type f16) || return; args="-p 512 -n 64" ;;
      *) part_fail "SERIES_MODELS: no model $tag (8b, tiny32)"; continue ;;
    esac
    for k in 1 2; do
      bench "series-none-$tag-$k" "$m" 1 none "$args"
      bench "series-ggml-$tag-$k" "$m" 2 tensor "$args" GGML_VK_DISABLE_TPAR=1
      bench "series-core-$tag-$k" "$m" 2 tensor "$args" GGML_VK_DISABLE_REPLAY=1
      bench "series-all-$tag-$k" "$m" 2 tensor "$args"
    done
  done
}

# tpar-info --self-test over the suite's devices (every GPU, or the first opened --virtual
# times), as text and as JSON (selftest.json beside the log): every gate and self-test,
# each transport timed, the choice at each size.
run_selftest() {
  say "part selftest"
  local dev=(-g "$all")
  [[ $virtual -gt 0 ]] && dev=(--virtual "$virtual")
  echo "## tpar-info --self-test ${dev[*]}" >> "$log"
  local start=$SECONDS rc=0
  "$bin/tpar-info" --self-test "${dev[@]}" >> "$log" 2>&1 || rc=$?
  "$bin/tpar-info" --self-test --json "${dev[@]}" > "$out/selftest.json" 2>> "$log" || rc=$?
  echo "# tpar-info --self-test: exit $rc, $((SECONDS - start)) s" >> "$log"
  [[ $rc -eq 0 ]] || part_fail "tpar-info --self-test (exit $rc)"
}

run_tiny() {
  say "part tiny"
  local m
  m=$(model tiny32-f16 --preset tiny --layers 32 --type f16) || return
  bench none-tiny32 "$m" 1 none "-p 0 -n 64"
  bench layer2-tiny32 "$m" 2 layer "-p 0 -n 64"
  variants tiny32 "$m" "-p 0 -n 64"
}

trace_one() {  # LABEL MODEL N SM GPU(0|1) ENV...: a trace of decode tokens, summarized
  local label=$1 m=$2 n=$3 sm=$4 gpu=$5; shift 5
  local vis
  vis=$(visible "$n")
  [[ $sm == none ]] && vis=0
  local f="$out/trace-$label.json"
  rm -f "$f"
  env "$@" TPAR_TRACE="$f" TPAR_TRACE_GPU="$gpu" TPAR_TRACE_SKIP=24 TPAR_TRACE_SPAN=6 GGML_VK_VISIBLE_DEVICES="$vis" \
    "$bin/llama-bench" -m "$m" -ngl 99 -fa 1 -sm "$sm" -p 0 -n 48 -r 1 -o md > /dev/null 2> "$out/trace.err" ||
    { tail -5 "$out/trace.err" >> "$log"; part_fail "trace $label"; return; }
  echo "## trace $label: GGML_VK_VISIBLE_DEVICES=$vis $* TPAR_TRACE_GPU=$gpu llama-bench -sm $sm -p 0 -n 48 (a token in the middle)" >> "$log"
  python3 "$root/scripts/timeline.py" "$f" -o "/tmp/timeline-$label.svg" --title "$label" --step all 2>&1 | relative >> "$log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || part_fail "timeline $label"
}

run_probes() {
  say "part probes"
  [[ -x "$bin/cbgap" ]] || { part_fail "no cbgap in the bundle (remake it)"; return; }
  local w
  for w in 4096 65536; do
    echo "## PD=0 cbgap ${PROBE_STEPS:-256} $w 30" >> "$log"
    PD=0 "$bin/cbgap" "${PROBE_STEPS:-256}" "$w" 30 >> "$log" 2>&1 || part_fail "cbgap $w"
  done
  if [[ -x "$bin/eventwait" ]]; then
    echo "## PD=0 eventwait 5000" >> "$log"
    PD=0 "$bin/eventwait" 5000 >> "$log" 2>&1 || part_fail "eventwait"
  fi
  if [[ -x "$bin/l2warm" ]]; then
    for w in 7 16; do
      echo "## PD=0 l2warm 32 $w 64 20" >> "$log"
      PD=0 "$bin/l2warm" 32 "$w" 64 20 >> "$log" 2>&1 || part_fail "l2warm $w"
    done
  fi
  if [[ -x "$bin/sysread" ]]; then
    # sys-atomic and sys-acquire exit 1 where the kernel never sees the host's writes (the
    # finding on NVIDIA's 580 driver): logged, not a failure of the part.
    local m
    for m in bar-stale bar-fresh sys-atomic sys-acquire; do
      echo "## PD=0 sysread $m 2000 4096" >> "$log"
      PD=0 "$bin/sysread" "$m" 2000 4096 >> "$log" 2>&1 || echo "# sysread $m: exit $?" >> "$log"
    done
    for w in 1024 4096 16384 32768; do
      for m in wide-bar wide-fresh; do
        echo "## PD=0 sysread $m 2000 $w 32" >> "$log"
        PD=0 "$bin/sysread" "$m" 2000 "$w" 32 >> "$log" 2>&1 || part_fail "sysread $m $w"
      done
    done
  fi
}

run_trace() {
  say "part trace"
  local m8 n
  m8=$(model llama3-8b-q8_0 --preset llama3-8b) || return
  trace_one host-none-8b "$m8" 1 none 0
  local v
  for n in 2 "$all"; do
    for v in before after; do
      # shellcheck disable=SC2086
      trace_one "host-tpar$n-$v-8b" "$m8" "$n" tensor 0 ${variant[$v]}
    done
    [[ $n == "$all" ]] && break
  done
  trace_one gpu-tpar2-after-8b "$m8" 2 tensor 1
  # one file back for all the traces
  (cd "$out" && tar -cJf traces.tar.xz trace-*.json && rm -f trace-*.json)
}

for p in "${parts[@]}"; do
  start=$SECONDS
  case "$p" in
    env) ;;
    tests) run_tests ;;
    cases) run_cases ;;
    sweep) run_sweep ;;
    nccl) run_nccl ;;
    relay-probe) run_relay_probe ;;
    chain) run_chain ;;
    llama) run_llama ;;
    move) run_move ;;
    tiny) run_tiny ;;
    shard) run_shard ;;
    selftest) run_selftest ;;
    series) run_series ;;
    decode) run_decode ;;
    mixed) run_mixed ;;
    cuda) run_cuda ;;
    server) run_server ;;
    server-mixed) run_server_mixed ;;
    server-steps) run_server_steps ;;
    batched) run_batched ;;
    trace) run_trace ;;
    probes) run_probes ;;
  esac
  say "part $p: $((SECONDS - start)) s"
done
rm -f "$out"/*.tmp "$out"/*.err
exit $failed
