// The AllReduce on lavapipe virtual devices, under the validation layer: n in
// {1,2,3,4,5,8} x counts {0, 1, 7, n-1, 4096, 2^20+13, 12 MiB} x every wire x both
// algorithms. Integer inputs must come out exact; random inputs bit-identical to the CPU
// simulation of the same schedule on every device, and within the documented bound. The
// ring runs twice: downloads in the combine's batch, and as batches of their own.
// Synchronization validation checks each recorded command buffer, whose shape does not
// depend on the group beyond 3 devices, the count beyond its pieces, or the sync policy:
// one test records every shape under it on 2 and 3 devices, and the ProxyBridge matrices
// on more than one device run the core checks alone (docs/testing.md says why).
#include <doctest/doctest.h>
#include <tpar/comm/communicator.hpp>
#include <tpar/sync/native_import.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/simulate.hpp"
#include "support/tracked_bridge.hpp"

#include <fcntl.h>

#include <set>

using namespace tpar;
using namespace tpar_test;

namespace {

// The ring both ways: downloads inside the combine's batch, and as batches of their own
// (a second copy engine on GPUs that have one; the same queue on lavapipe).
constexpr std::pair<AlgoChoice, DownloadQueue> runs[] = {
    {AlgoChoice::oneshot, DownloadQueue::compute}, {AlgoChoice::ring, DownloadQueue::compute}, {AlgoChoice::ring, DownloadQueue::separate}};

Options matrix_options(AlgoChoice algo, DownloadQueue downloads, Wire wire) {
  Options o;
  o.algo = algo;
  o.downloads = downloads;
  o.wire = wire;
  o.timeout = test_timeout;
  o.piece_bytes = 512 * 1024;  // several pieces per chunk at the larger counts
  return o;
}

template <class Sync>
void run_matrix(std::uint32_t n, bool sync_validation = true) {
  VkEnv env(n, {.sync_validation = sync_validation});
  if (!env.ok()) return;
  if constexpr (Sync::kind == SyncKind::native_import) {
    const auto gate = env.group().sync_gate();
    if (n > 1 && !gate.native_possible) {
      MESSAGE("[skipped] NativeImport needs exportable timeline semaphores: " << gate.reason);
      return;
    }
  }
  const std::set<std::size_t> counts = {0, 1, 7, n - 1, 4096, (std::size_t{1} << 20) + 13, 3 * (std::size_t{1} << 20) + 7};
  for (auto [algo, downloads] : runs) {
    for (Wire wire : all_wires) {
      Communicator<Sync> comm(env.group(), matrix_options(algo, downloads, wire));
      for (std::size_t count : counts) {
        CAPTURE(n);
        CAPTURE(to_string(algo));
        CAPTURE(to_string(downloads));
        CAPTURE(to_string(wire));
        CAPTURE(count);
        Rig rig(env.group(), count);
        // Integers: exact.
        const auto xi = integer_inputs(n, count, 17 * count + n);
        rig.write(xi);
        settled_wait(comm.allreduce(rig.spans()));
        const auto expect = integer_sum(xi);
        for (const auto& r : rig.read()) REQUIRE(bit_identical(r, expect));
        if (count == 0) continue;
        // Random values: the simulated schedule, bit for bit, on every device; the bound.
        const auto xr = random_inputs(n, count, 31 * count + n);
        rig.write(xr);
        settled_wait(comm.allreduce(rig.spans()));
        CHECK(comm.last_call().wire == wire);
        CHECK(comm.last_call().algorithm == (n > 1 ? to_string(algo) : "none"));
        auto oracle = xr;
        if (n > 1) simulate(BySize::build(comm.schedule_request(count)), oracle, 1, false);
        const auto got = rig.read();
        for (std::uint32_t d = 0; d < n; ++d) REQUIRE(bit_identical(got[d], oracle[0]));
        const auto b = check_bound(wire, xr, got[0]);
        CHECK_MESSAGE(b.violations == 0, b.first);
      }
    }
  }
}

}  // namespace

TEST_CASE("ProxyBridge on 1 device") { run_matrix<TrackedProxyBridge>(1); }
TEST_CASE("ProxyBridge on 2 devices") { run_matrix<TrackedProxyBridge>(2, false); }
TEST_CASE("ProxyBridge on 3 devices") { run_matrix<TrackedProxyBridge>(3, false); }
TEST_CASE("ProxyBridge on 4 devices") { run_matrix<TrackedProxyBridge>(4, false); }
TEST_CASE("ProxyBridge on 5 devices") { run_matrix<TrackedProxyBridge>(5, false); }
TEST_CASE("ProxyBridge on 8 devices") { run_matrix<TrackedProxyBridge>(8, false); }
TEST_CASE("NativeImport on 2 devices") { run_matrix<NativeImport>(2); }
TEST_CASE("NativeImport on 3 devices") { run_matrix<NativeImport>(3); }
TEST_CASE("NativeImport on 4 devices") { run_matrix<NativeImport>(4); }
TEST_CASE("NativeImport on 8 devices") { run_matrix<NativeImport>(8); }

// Every batch shape the ProxyBridge tests record, under synchronization validation: both
// algorithms, both places for the ring's downloads, every wire, on 2 devices and on 3
// (the first group where the ring adds and forwards), there also with a device that
// contributes nothing (zeros packed, sums copied on), at a count that cuts every chunk
// into several pieces and reuses the lanes. One call each: its command buffers are what
// this validation checks; the matrices check the numbers.
TEST_CASE("every batch shape under synchronization validation, on 2 and 3 devices") {
  for (std::uint32_t n : {2u, 3u}) {
    VkEnv env(n);
    if (!env.ok()) continue;
    const std::size_t count = (std::size_t{1} << 20) + 13;
    Rig rig(env.group(), count);
    const auto x = integer_inputs(n, count, 11 * n);
    const bool all[3] = {true, true, true}, middle_idle[3] = {true, false, true};
    for (const bool* contributes : {all, middle_idle}) {
      if (n == 2 && contributes == middle_idle) continue;
      const std::uint32_t mask = contributes[1] ? 0b111u : 0b101u;
      for (auto [algo, downloads] : runs) {
        for (Wire wire : all_wires) {
          CAPTURE(n);
          CAPTURE(mask);
          CAPTURE(to_string(algo));
          CAPTURE(to_string(downloads));
          CAPTURE(to_string(wire));
          Communicator<TrackedProxyBridge> comm(env.group(), matrix_options(algo, downloads, wire));
          rig.write(x);
          settled_wait(comm.allreduce(rig.spans(), {.contributes = std::span(contributes, n)}));
          const auto expect = integer_sum(x, mask);
          for (const auto& r : rig.read()) REQUIRE(bit_identical(r, expect));
        }
      }
    }
  }
}

TEST_CASE("NativeImport leaks no file descriptor, built and destroyed many times") {
  VkEnv env(2);
  if (!env.ok()) return;
  const auto gate = env.group().sync_gate();
  if (!gate.native_possible) {
    MESSAGE("[skipped] NativeImport needs exportable timeline semaphores: " << gate.reason);
    return;
  }
  auto open_fds = [] {
    std::size_t k = 0;
    for (int fd = 0; fd < 4096; ++fd) k += ::fcntl(fd, F_GETFD) != -1;
    return k;
  };
  Rig rig(env.group(), 10000);
  const auto x = integer_inputs(2, 10000, 3);
  { Communicator<NativeImport> warm(env.group()); }  // first use may open driver files
  const std::size_t before = open_fds();
  for (int i = 0; i < 20; ++i) {
    Communicator<NativeImport> comm(env.group());
    rig.write(x);
    comm.allreduce(rig.spans()).wait();
    for (const auto& r : rig.read()) REQUIRE(bit_identical(r, integer_sum(x)));
  }
  CHECK(open_fds() == before);
}
