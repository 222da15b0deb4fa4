// RelaySetup — what a communicator knows of the relay from its creation on: the relay
// options checked, the gate, the relay's part of a schedule request and the inputs of its
// self-test; RelayRefusal, the relay asked for where it cannot run.
#pragma once

#include <tpar/algo/relay.hpp>
#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/log.hpp>
#include <tpar/core/options.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tpar::inline v0::detail {

// The relay asked for where it cannot run (the gate, or its self-test): a tpar::Error
// (unsupported) that make_communicator passes on rather than reading it as NativeImport's.
struct RelayRefusal : Error {
  using Error::Error;
};

// What a communicator knows of the relay from its creation on: whether and how the group
// can run it, and whether it was asked for.
struct RelaySetup {
  RelayGate gate;
  bool asked = false;              // TPAR_ALGO=relay or host-played peers: no fallback
  bool off = false;                // the automatic choice took it and its memory could not be made, or its self-test failed
  std::uint32_t spin_bound_ms = 0;
  RelayHub::Config config;
  // The self-test (comm/detail/relay_self_test.hpp): which devices' kernels wait for the
  // host's write, at the relay's largest call; run where the relay may be used at all.
  std::uint32_t test_kernel_waits = 0;
  std::size_t test_count = 0;
  std::chrono::milliseconds test_start_bound{0};
  bool needs_test() const { return asked || gate.automatic; }

  // Throws on bad relay options, and where the relay is asked for but the group cannot
  // run it (the reason in words, as for TPAR_SYNC=native).
  static RelaySetup check(const DeviceGroup& group, const Options& options) {
    RelaySetup r;
    r.gate = group.relay_gate();
    const std::size_t n = group.size();
    if (options.relay_max_bytes < sizeof(float) || options.relay_max_bytes % sizeof(float) ||
        options.relay_max_bytes > (std::size_t{64} << 20))
      throw Error(ErrorCode::invalid_argument, "relay_max_bytes " + std::to_string(options.relay_max_bytes) +
                                                   " is out of range: use a multiple of 4 from 4 to 64 MiB");
    if (options.relay_host_peers && n + options.relay_host_peers > max_group_devices)
      throw Error(ErrorCode::invalid_argument, "relay_host_peers " + std::to_string(options.relay_host_peers) + " with " +
                                                   std::to_string(n) + " devices is more than " +
                                                   std::to_string(max_group_devices) + " contributions");
    r.asked = options.algo == AlgoChoice::relay || options.relay_host_peers;
    if (r.asked && !r.gate.possible)
      throw RelayRefusal(ErrorCode::unsupported, "the relay was asked for (TPAR_ALGO=relay) but " + r.gate.reason);
    // A GPU's queues waiting for the host's release: correct, never taken automatically
    // (RelayGate::gpu_queue_waits); asked for, it runs, and says so.
    if (r.asked && r.gate.gpu_queue_waits)
      log(LogLevel::info, "the relay runs with a GPU's queue waiting for the host's sum (" + r.gate.reason + ")");
    // Twice the host's bound (and at least a second more): the host thread, which aborts a
    // late call at its timeout, always ends a kernel's wait first.
    const auto bound = std::max(2 * options.timeout, options.timeout + std::chrono::seconds(1));
    r.spin_bound_ms = static_cast<std::uint32_t>(
        std::min<std::int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(bound).count(), 0xFFFFFFFF));
    r.config.depth = options.max_slot_sets();
    r.config.max_bytes = options.relay_max_bytes;
    r.config.host_peers = options.relay_host_peers;
    r.config.timeout = options.timeout;
    r.config.queue_waits = r.gate.queue_waits;
    r.config.scalar_sum = options.relay_scalar_sum;
    RelayHub::check_threads(options.relay_threads);  // refused at creation, not at the first relay call
    r.config.threads = options.relay_threads;
    r.config.sites = options.relay_ride ? 1024 : 0;
    r.test_kernel_waits = ~r.gate.queue_waits & (n >= 32 ? ~0u : (1u << n) - 1u);
    const std::size_t largest = r.asked ? options.relay_max_bytes : std::min(options.relay_max_bytes, r.gate.automatic_max_bytes);
    r.test_count = std::clamp<std::size_t>(largest / sizeof(float), 1, std::size_t{relay_max_groups} * 512);
    // Asked for, the relay waits for a busy queue as long as any call would; chosen
    // automatically, half a second, then calls take OneShot (and the next communicator
    // tries again).
    const auto timeout_ms = std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout);
    r.test_start_bound = r.asked ? timeout_ms : std::min(timeout_ms, std::chrono::milliseconds(500));
    return r;
  }

  void fill(ScheduleRequest& rq, const Options& options) const {
    if (options.relay_host_peers) rq.by_size.choice = AlgoChoice::relay;
    rq.relay.max_bytes = options.relay_max_bytes;
    rq.relay.automatic = gate.automatic && !off;
    rq.relay.automatic_max_bytes = gate.automatic_max_bytes;
    rq.relay.queue_waits = gate.queue_waits;
    rq.relay.spin_bound_ms = spin_bound_ms;
  }
};

}  // namespace tpar::inline v0::detail
