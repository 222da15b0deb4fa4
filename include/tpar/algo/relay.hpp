// Relay — for small (decode-sized) tensors, with no cross-device semaphore: per device
// one kernel publishes its values to host memory, a host thread of the communicator
// (detail::RelayHub) sums every device's values in device order and writes the sum into
// each device's slot in the device's own host-visible memory, and the kernel, polling
// that slot, copies the sum into the caller's buffer. One sum for everyone: every device
// ends bit-identical. Values travel as f32 whatever wire was asked for (exact, so any
// wire's bound holds). docs/relay.md has the protocol and what bounds each wait.
//
// Per device and call, on a device whose kernels may wait (GPUs): one compute batch, one
// kernel. Where a driver ends long shader loops itself (lavapipe), the wait moves to the
// queue: a batch that publishes, then one that waits on a semaphore the host thread
// signals once the sum is in the slot, and copies it.
#pragma once

#include <tpar/algo/request.hpp>

namespace tpar::inline v0 {

struct Relay {
  static constexpr std::string_view name = "relay";
  static constexpr AlgoChoice choice = AlgoChoice::relay;  // what Options::algo calls it

  // Whether a call of the request's size is one the relay takes (RelayParams::max_bytes),
  // and whether the automatic choice may give it one (the group's RelayGate).
  static bool takes(const ScheduleRequest& rq) { return rq.count * sizeof(float) <= rq.relay.max_bytes; }
  static bool automatic_takes(const ScheduleRequest& rq) {
    return rq.relay.automatic && rq.devices >= 2 && rq.count * sizeof(float) <= rq.relay.automatic_max_bytes;
  }

  static Schedule build(const ScheduleRequest& rq) {
    rq.validate_enums();
    const std::uint32_t n = rq.devices;
    ScheduleRequest f32 = rq;
    f32.wire = Wire::f32;
    Schedule s = empty_schedule(name, f32);
    s.transport = Transport::relay;
    KernelArgs a;
    a.count = static_cast<std::uint32_t>(rq.count);
    a.spin_bound = rq.relay.spin_bound_ms;
    for (std::uint32_t d = 0; d < n; ++d) {
      auto& out = s.devices[d].batches;
      const std::uint32_t publish = relay_mode::arrive | (rq.contributes(d) ? relay_mode::contribute : 0u);
      Batch first;
      first.role = Role::compute;
      first.wait_ready = first.wait_previous_call = true;
      if ((rq.relay.queue_waits >> d) & 1u) {
        a.mode = publish;
        first.commands.push_back(detail::kernel_cmd(Kernel::relay, a));
        first.commands.push_back(detail::barrier_cmd(Command::Type::host_barrier));
        out.push_back(std::move(first));
        Batch collect;
        collect.role = Role::compute;
        collect.wait_relay = true;
        a.mode = relay_mode::collect;
        collect.commands.push_back(detail::kernel_cmd(Kernel::relay, a));
        out.push_back(std::move(collect));
      } else {
        a.mode = publish | relay_mode::collect;
        first.commands.push_back(detail::kernel_cmd(Kernel::relay, a));
        out.push_back(std::move(first));
      }
    }
    return s;
  }
};

static_assert(Algorithm<Relay>);

// What the relay's host thread contributes as host-played peer `peer` (Options::
// relay_host_peers) at value `i`: small integers, so that sums are exact in any order.
inline float relay_host_peer_value(std::uint32_t peer, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + std::size_t{peer} * 5 + 3) % 16) - 8);
}

}  // namespace tpar::inline v0
