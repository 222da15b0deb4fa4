#!/usr/bin/env bash
# Builds tpar's tests with sanitizers and runs the subset that covers its lifetime,
# failure and concurrency code (docs/testing.md, "Sanitizers"):
#   scripts/sanitize.sh address,undefined   behavior, fault (C++ API sweeps), c_api/dynamic, core, algo,
#                                           the relay's host thread and its vector sum,
#                                           the relay's self-test and a premise failing mid-run,
#                                           an abort whose work stays on a queue (behavior/:
#                                           kept, then freed once the point comes)
#   scripts/sanitize.sh thread              behavior (ProxyBridge threads, two callers), the
#                                           fault sweeps of ring calls and destruction (failures
#                                           met on ProxyBridge's threads, released from others),
#                                           a thread per device enqueuing its part of each
#                                           call (stream/, as the meta backend's threads do),
#                                           the relay's host thread against devices the
#                                           test plays from another thread, relay calls
#                                           the streams hold and release (stream/), and the
#                                           relay's self-test and its thread's checks, and the
#                                           C ABI from two threads (deferred tickets waited on
#                                           a second thread while the first calls; abort)
# Built at -O1 -g1: a sanitized -O2 -g build of one test takes four times as long, and
# CI runs both stages within its budget. Suppressions, each justified, are under
# tests/sanitizers/ (only for the CPU driver and LLVM, which are not instrumented).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
kind="${1:?usage: scripts/sanitize.sh address,undefined|thread}"
build="${TPAR_BUILD_DIR:-$root/build-sanitize-${kind//,/-}}"
supp="$root/tests/sanitizers"
# The relay's host thread with the test playing the devices (not its CPU-time test, which
# a sanitizer's slowdown would make meaningless)
relay_tests='relay/relay (sum|hub: (sums|host-played|stamps|a device that never|a part a helper|a kernel that does not confirm))'
case "$kind" in
  address,undefined)
    # (Not c_api/threads_abort: it ends the process with lavapipe's queue still blocked on
    # the point it never signals, and LeakSanitizer then reports lavapipe's own wait state,
    # 192 bytes in 4 allocations made inside the driver.)
    targets=(behavior fault c_api_dynamic core algo relay relay_self_test)
    tests="^(behavior/|fault/every|c_api/dynamic\$|core/|algo/|relay_self_test/|$relay_tests)"
    export ASAN_OPTIONS="detect_leaks=1:strict_string_checks=1"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
    ;;
  thread)
    targets=(behavior fault stream relay relay_self_test c_api_threads)
    tests="^(behavior/|fault/every|stream/streams: (a thread per device|relay calls are held|a fenced submission)|relay_self_test/|c_api/threads_|$relay_tests)"
    export TPAR_FAULT_ONLY="call, ring|destruction"
    export TSAN_OPTIONS="suppressions=$supp/tsan.supp:halt_on_error=0:second_deadlock_stack=1"
    ;;
  *) echo "scripts/sanitize.sh: unknown sanitizer set '$kind' (use address,undefined or thread)" >&2; exit 2 ;;
esac
"$root/scripts/setup.sh" test
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
      -DTPAR_SANITIZE="$kind" -DTPAR_BUILD_EXAMPLES=OFF -DTPAR_LLAMA_TESTS=OFF >/dev/null
cmake --build "$build" --target "${targets[@]}"
# The plain suite runs under the validation layer; here it would cost more time than
# the sanitizers themselves (its 1.3.239 timeline tracking stalls, and it is not
# instrumented), so it is off.
export TPAR_TEST_NO_VALIDATION=1
jobs=$(nproc 2>/dev/null || echo 2)
ctest --test-dir "$build" --output-on-failure -j "$jobs" --timeout 1200 -R "$tests"
