// OneShot — for small (decode-sized) tensors, where latency is everything: every device
// publishes its whole tensor once; every device then sums all contributions in device
// order 0..n-1, the same order everywhere, so every device ends bit-identical.
#pragma once

#include <tpar/algo/request.hpp>

namespace tpar::inline v0 {

struct OneShot {
  static constexpr std::string_view name = "oneshot";

  static Schedule build(const ScheduleRequest& rq) {
    using detail::align_up;
    const std::uint32_t n = rq.devices;
    const std::uint64_t wire_bytes = wire_words(rq.wire, rq.count) * 4;
    const std::uint64_t seg_bytes = align_up(wire_bytes, detail::region_align);
    const auto seg_words = static_cast<std::uint32_t>(seg_bytes / 4);
    const std::uint32_t mask = n >= 32 ? rq.contributing : rq.contributing & ((1u << n) - 1u);

    Schedule s = empty_schedule(name, rq);
    s.scratch_bytes.assign(n, seg_bytes * n);
    for (std::uint32_t d = 0; d < n; ++d) {
      auto& out = s.devices[d].batches;
      if (rq.contributes(d)) {
        Batch pack;
        pack.role = Role::compute;
        pack.wait_ready = pack.wait_previous_call = true;
        KernelArgs a;
        a.count = static_cast<std::uint32_t>(rq.count);
        a.out_off = d * seg_words;
        a.mode = static_cast<std::uint32_t>(PackMode::encode);
        pack.commands.push_back(detail::kernel_cmd(Kernel::pack, a));
        out.push_back(std::move(pack));

        Batch upload;
        upload.role = Role::transfer;
        upload.waits.push_back({d, Role::compute, 0});
        upload.commands.push_back(detail::copy_cmd(Region::scratch(d * seg_bytes), Region::host(d, 0), wire_bytes));
        upload.commands.push_back(detail::barrier_cmd(Command::Type::host_barrier));
        out.push_back(std::move(upload));
        s.host_bytes[d] = seg_bytes;
      }
      Batch sum;
      sum.role = Role::compute;
      if (!rq.contributes(d)) sum.wait_ready = sum.wait_previous_call = true;
      for (std::uint32_t j = 0; j < n; ++j) {
        if (j == d || !rq.contributes(j)) continue;
        sum.waits.push_back({j, Role::transfer, 0});
        sum.commands.push_back(detail::copy_cmd(Region::host(j, 0), Region::scratch(j * seg_bytes), wire_bytes));
      }
      if (!sum.waits.empty()) sum.commands.push_back(detail::barrier_cmd());
      KernelArgs a;
      a.count = static_cast<std::uint32_t>(rq.count);
      a.nseg = n;
      a.seg_words = seg_words;
      a.mask = mask;
      sum.commands.push_back(detail::kernel_cmd(Kernel::oneshot, a));
      out.push_back(std::move(sum));
    }
    return s;
  }
};

static_assert(Algorithm<OneShot>);

}  // namespace tpar::inline v0
