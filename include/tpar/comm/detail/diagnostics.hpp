// What a person needs to see where a stall is: each device's timelines against what was
// submitted, the sync policy's state, and the first batch of every queue still waiting
// with what it waits for. It goes into every error and log line about work that did not
// finish (a timeout, a communicator destroyed with its work pending).
#pragma once

#include <tpar/comm/detail/comm_plan.hpp>
#include <tpar/sync/schedule.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace tpar::inline v0::detail {

// What was handed to the batches so far: [role * n + device], the form the slot sets'
// and plans' "done" values take.
inline std::vector<std::uint64_t> submitted_values(const std::vector<DeviceContext>& ctx) {
  const std::size_t n = ctx.size();
  std::vector<std::uint64_t> v(role_count * n);
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t r = 0; r < role_count; ++r) v[r * n + d] = ctx[d].submitted[r];
  return v;
}

// For each device and queue, the first submitted batch not yet signalled and what it
// waits for: each semaphore's value needed against where it stands now. `cache`: the
// plans (PlanCache), whose submit structures the batches are.
template <class Sync, class Cache>
std::string pending_batches(const std::vector<DeviceContext>& ctx, const Sync& sync, const Cache& cache) {
  const std::size_t n = ctx.size();
  std::string out;
  for (std::size_t d = 0; d < n; ++d) {
    const auto& c = ctx[d];
    const vk::Device vkd = c.device->handle();
    auto value_of = [&](vk::Semaphore s) {
      std::uint64_t v = 0;
      (void)vkd.getSemaphoreCounterValue(s, &v);
      return v;
    };
    auto name_of = [&](vk::Semaphore s) -> std::string {
      if (s == c.compute.handle()) return "compute";
      if (s == c.transfer.handle()) return "uploads";
      if (s == c.download.handle()) return "downloads";
      for (std::size_t j = 0; j < n; ++j)
        if (j != d && s == sync.wait_semaphore(static_cast<std::uint32_t>(d), static_cast<std::uint32_t>(j))) {
          std::string peer = "device ";
          peer += std::to_string(j);
          peer += "'s uploads";
          return peer;
        }
      return "a ready point";
    };
    for (std::size_t r = 0; r < role_count; ++r) {
      const vk::Semaphore own = c.timeline(static_cast<Role>(r)).handle();
      const std::uint64_t now = value_of(own);
      const vk::SubmitInfo* first = nullptr;
      const vk::TimelineSemaphoreSubmitInfo* first_ti = nullptr;
      std::uint64_t first_value = ~std::uint64_t{0};
      auto scan = [&](const auto& plan) {
        if (d >= plan.submits.size()) return;
        for (const auto& sub : plan.submits[d])
          for (const auto& g : sub.groups)
            for (std::size_t k = 0; k < g.infos.size(); ++k) {
              const auto& info = g.infos[k];
              const auto& ti = g.timeline_infos[k];
              if (!info.signalSemaphoreCount || info.pSignalSemaphores[0] != own) continue;
              const std::uint64_t v = ti.pSignalSemaphoreValues[0];
              if (v > now && v <= c.submitted[r] && v < first_value) {
                first_value = v;
                first = &info;
                first_ti = &ti;
              }
            }
      };
      cache.for_each_plan(scan);
      if (!first) continue;
      out += "; device ";
      out += std::to_string(d);
      out += r == 0 ? " compute" : r == 1 ? " uploads" : " downloads";
      out += " batch ";
      out += std::to_string(first_value);
      out += " waits:";
      for (std::uint32_t w = 0; w < first->waitSemaphoreCount; ++w) {
        out += ' ';
        out += name_of(first->pWaitSemaphores[w]);
        out += ' ';
        out += std::to_string(first_ti->pWaitSemaphoreValues[w]);
        out += " (at ";
        out += std::to_string(value_of(first->pWaitSemaphores[w]));
        out += ')';
      }
    }
  }
  return out;
}

// Each device's timelines against what was submitted, and the sync policy's state:
// what a person needs to see where a stall is.
template <class Sync, class Cache>
std::string progress(const std::vector<DeviceContext>& ctx, const Sync& sync, const Cache& cache) {
  std::string out;
  for (std::size_t d = 0; d < ctx.size(); ++d) {
    const auto& c = ctx[d];
    std::uint64_t v[role_count] = {};
    for (std::size_t r = 0; r < role_count; ++r)
      (void)c.device->handle().getSemaphoreCounterValue(c.timeline(static_cast<Role>(r)).handle(), &v[r]);
    out += (d ? "; device " : "device ") + std::to_string(d) + " compute " + std::to_string(v[0]) + "/" +
           std::to_string(c.submitted[0]) + " uploads " + std::to_string(v[1]) + "/" + std::to_string(c.submitted[1]);
    if (c.submitted[2]) out += " downloads " + std::to_string(v[2]) + "/" + std::to_string(c.submitted[2]);
  }
  if constexpr (requires(const Sync& s) { s.describe(); }) out += sync.describe();
  out += pending_batches(ctx, sync, cache);
  return out;
}

// Device d did not finish `what` within the timeout (or its wait failed with `r`).
inline Error not_finished(std::size_t d, const std::string& what, vk::Result r, const std::string& progress) {
  return Error(r == vk::Result::eTimeout ? ErrorCode::timeout : code_for(r),
               "device " + std::to_string(d) + " did not finish " + what + " within the timeout (" + vk::to_string(r) +
                   "): " + progress,
               r);
}

}  // namespace tpar::inline v0::detail
