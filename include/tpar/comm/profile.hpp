// CallProfile — where one AllReduce spent its time: every batch of every device, with
// its start and end read from GPU timestamps (Options::profile).
#pragma once

#include <tpar/sync/schedule.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace tpar::inline v0 {

struct BatchTiming {
  Role role = Role::compute;  // the queue it ran on
  std::string what;  // "pack", "upload", "download+add", "relay", ...
  double start_us = std::numeric_limits<double>::quiet_NaN();  // NaN: the queue has no timestamps
  double end_us = std::numeric_limits<double>::quiet_NaN();
};

struct CallProfile {
  // True when every device's clock was related to the host's (VK_EXT_calibrated_timestamps),
  // so times compare across devices; otherwise each device counts from its own first batch.
  bool aligned = false;
  std::vector<std::vector<BatchTiming>> devices;

  double span_us() const {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (const auto& d : devices)
      for (const auto& b : d)
        if (!std::isnan(b.start_us)) {
          lo = std::min(lo, b.start_us);
          hi = std::max(hi, b.end_us);
        }
    return hi > lo ? hi - lo : 0.0;
  }
};

// A short name for what a batch does.
inline std::string describe(const Batch& b) {
  std::string s;
  if (b.role == Role::download) return "download";
  if (b.role == Role::transfer) {
    // A copy engine's upload, or a kernel that writes host staging itself.
    for (const auto& c : b.commands)
      if (c.type == Command::Type::kernel) return c.args.mode == static_cast<std::uint32_t>(PackMode::zeros) ? "zeros+publish" : "pack+publish";
    return "upload";
  }
  bool copies = false;
  for (const auto& c : b.commands) copies |= c.type == Command::Type::copy;
  if (copies) s = "download+";
  for (const auto& c : b.commands) {
    if (c.type != Command::Type::kernel) continue;
    switch (c.kernel) {
      case Kernel::pack: s += c.args.mode == static_cast<std::uint32_t>(PackMode::zeros) ? "zeros" : "pack"; break;
      case Kernel::oneshot: s += "sum"; break;
      case Kernel::relay:
        s += (c.args.mode & relay_mode::collect) == 0 ? "publish" : (c.args.mode & relay_mode::arrive) == 0 ? "collect" : "relay";
        break;
      case Kernel::combine:
        switch (static_cast<CombineMode>(c.args.mode)) {
          case CombineMode::add_forward: s += "add"; break;
          case CombineMode::copy: s += "forward"; break;
          case CombineMode::add_final: s += "add+round"; break;
          case CombineMode::copy_final: s += "round"; break;
          case CombineMode::unpack: s += "unpack"; break;
        }
        break;
    }
  }
  return s.empty() ? "wait" : s;
}

}  // namespace tpar::inline v0
