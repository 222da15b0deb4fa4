// OneShot — for small (decode-sized) tensors, where latency is everything: every device
// publishes its whole tensor once; every device then sums all contributions in device
// order 0..n-1, the same order everywhere, so every device ends bit-identical.
// Per device and call: two batches on the compute queue, [publish, sum], one submission.
#pragma once

#include <tpar/algo/request.hpp>

namespace tpar::inline v0 {

struct OneShot {
  static constexpr std::string_view name = "oneshot";
  static constexpr AlgoChoice choice = AlgoChoice::oneshot;  // what Options::algo calls it

  static Schedule build(const ScheduleRequest& rq) {
    rq.validate_enums();
    using detail::align_up;
    const std::uint32_t n = rq.devices;
    const std::uint64_t wire_bytes = wire_words(rq.wire, rq.count) * 4;
    const std::uint64_t seg_bytes = align_up(wire_bytes, detail::region_align);
    const auto seg_words = static_cast<std::uint32_t>(seg_bytes / 4);
    const std::uint32_t mask = n >= 32 ? rq.contributing : rq.contributing & ((1u << n) - 1u);

    // Up to max_direct_peers devices, the sum reads the peers' segments where they were
    // published (host staging, in place) and scratch holds only the device's own; in
    // larger groups every segment is copied into scratch first.
    const bool direct = n <= max_direct_peers;
    auto own_words = [&](std::uint32_t d) { return direct ? 0u : d * seg_words; };

    Schedule s = empty_schedule(name, rq);
    s.scratch_bytes.assign(n, direct ? seg_bytes : seg_bytes * n);
    for (std::uint32_t d = 0; d < n; ++d) {
      auto& out = s.devices[d].batches;
      if (rq.contributes(d)) {
        // Publish: pack writes the wire segment into scratch (for this device's own sum)
        // and into its host staging (for the peers) in one kernel, on the compute queue,
        // and signals the uploads timeline the peers wait on: one batch and one queue,
        // where a copy on the transfer queue would add a batch and a hop between queues.
        Batch publish;
        publish.role = Role::transfer;
        publish.on_compute_queue = true;
        publish.wait_ready = publish.wait_previous_call = true;
        KernelArgs a;
        a.count = static_cast<std::uint32_t>(rq.count);
        a.out_off = own_words(d);
        a.host_out_off = 0;
        a.mode = static_cast<std::uint32_t>(PackMode::encode);
        publish.commands.push_back(detail::kernel_cmd(Kernel::pack, a));
        publish.commands.push_back(detail::barrier_cmd(Command::Type::host_barrier));
        out.push_back(std::move(publish));
        s.host_bytes[d] = seg_bytes;
      }
      Batch sum;
      sum.role = Role::compute;
      if (!rq.contributes(d)) sum.wait_ready = sum.wait_previous_call = true;
      for (std::uint32_t j = 0; j < n; ++j) {
        if (j == d || !rq.contributes(j)) continue;
        sum.waits.push_back({j, Role::transfer, 0});
        if (!direct) sum.commands.push_back(detail::copy_cmd(Region::host(j, 0), Region::scratch(j * seg_bytes), wire_bytes));
      }
      if (!sum.commands.empty()) sum.commands.push_back(detail::barrier_cmd());
      KernelArgs a;
      a.count = static_cast<std::uint32_t>(rq.count);
      a.nseg = n;
      a.mask = mask;
      if (direct) {
        a.mode = static_cast<std::uint32_t>(OneShotMode::direct);
        a.self = d;
        a.in_off = 0;  // a peer's segment starts its host staging
        a.out_off = own_words(d);
      } else {
        a.mode = static_cast<std::uint32_t>(OneShotMode::scratch);
        a.seg_words = seg_words;
      }
      sum.commands.push_back(detail::kernel_cmd(Kernel::oneshot, a));
      out.push_back(std::move(sum));
    }
    return s;
  }
};

static_assert(Algorithm<OneShot>);

}  // namespace tpar::inline v0
