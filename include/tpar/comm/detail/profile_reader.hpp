// Reads a communicator's profile of its last call: per device and batch, when it ran.
#pragma once

#include <tpar/comm/profile.hpp>
#include <tpar/sync/schedule.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace tpar::inline v0::detail {

// The GPU timestamps of one call's batches (Options::profile), on the host's clock where
// every device has VK_EXT_calibrated_timestamps, counted from the call's first batch.
// The call must have finished.
template <class Plan>
CallProfile read_profile(const DeviceGroup& group, const Plan& plan, std::uint32_t slot_set) {
  CallProfile out;
  out.devices.resize(group.size());
  const std::size_t n = group.size();
  std::vector<double> offset(n, 0.0);  // device ticks -> host microseconds
  bool aligned = true;
  for (std::size_t d = 0; d < n; ++d) {
    const auto& fns = group[d].extension_fns();
    if (!fns.get_calibrated_timestamps) {
      aligned = false;
      continue;
    }
    const VkCalibratedTimestampInfoEXT infos[2] = {{VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_DEVICE_EXT},
                                                  {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
    std::uint64_t ts[2] = {0, 0}, deviation = 0;
    if (fns.get_calibrated_timestamps(group[d].handle(), 2, infos, ts, &deviation) != VK_SUCCESS) {
      aligned = false;
      continue;
    }
    offset[d] = double(ts[1]) / 1e3 - double(ts[0]) * group[d].capabilities().timestamp_period_ns / 1e3;
  }
  out.aligned = aligned;
  for (std::size_t d = 0; d < n; ++d) {
    const auto& batches = plan.schedule.devices[d].batches;
    const auto& sub = plan.submits[d][slot_set];
    out.devices[d].resize(batches.size());
    const auto queries = static_cast<std::uint32_t>(2 * batches.size());  // a start and an end per batch
    std::vector<std::uint64_t> avail(2 * std::size_t{queries}, 0);            // each: value, availability
    if (sub.timestamps)
      (void)group[d].handle().getQueryPoolResults(sub.timestamps, 0, queries,
                                                   avail.size() * sizeof(std::uint64_t), avail.data(), 2 * sizeof(std::uint64_t),
                                                   vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWithAvailability);
    const double period = group[d].capabilities().timestamp_period_ns / 1e3;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      auto& t = out.devices[d][b];
      t.role = queue_of(batches[b]);
      t.what = describe(batches[b]);
      if (avail[4 * b + 1] && avail[4 * b + 3]) {
        t.start_us = double(avail[4 * b]) * period + (aligned ? offset[d] : 0.0);
        t.end_us = double(avail[4 * b + 2]) * period + (aligned ? offset[d] : 0.0);
      }
    }
  }
  // Count from the first batch: across devices when aligned, per device otherwise.
  auto rebase = [](std::vector<BatchTiming>& v, double origin) {
    for (auto& t : v) {
      t.start_us -= origin;
      t.end_us -= origin;
    }
  };
  auto first = [](const std::vector<BatchTiming>& v) {
    double lo = std::numeric_limits<double>::infinity();
    for (const auto& t : v)
      if (!std::isnan(t.start_us)) lo = std::min(lo, t.start_us);
    return std::isinf(lo) ? 0.0 : lo;
  };
  double origin = std::numeric_limits<double>::infinity();
  for (const auto& v : out.devices) origin = std::min(origin, first(v));
  for (auto& v : out.devices) rebase(v, aligned ? origin : first(v));
  return out;
}

}  // namespace tpar::inline v0::detail
