// Capacity — how much staging to keep: grow at once when a call needs more, shrink when
// what is held is far larger than recent calls needed, so a long prefill never leaves
// every later decode-sized call paying for (or pinning) its staging.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace tpar::inline v0 {

class Capacity {
 public:
  static constexpr std::uint64_t granule = 64 * 1024;
  static constexpr std::size_t window = 64;  // calls remembered
  static constexpr std::uint64_t shrink_ratio = 4;

  std::uint64_t current() const { return current_; }

  // The capacity the next call should use when it must change, given what it needs.
  std::optional<std::uint64_t> update(std::uint64_t required) {
    recent_[next_++ % window] = required;
    ++since_change_;
    if (required > current_) return change(std::max(required, current_ + current_ / 4));
    if (since_change_ >= window && current_ > granule) {
      const std::uint64_t peak = *std::max_element(recent_.begin(), recent_.end());
      if (current_ > shrink_ratio * std::max(peak, granule)) return change(peak + peak / 4);
    }
    return std::nullopt;
  }

 private:
  std::uint64_t change(std::uint64_t bytes) {
    current_ = std::max(granule, (bytes + granule - 1) / granule * granule);
    since_change_ = 0;
    return current_;
  }

  std::uint64_t current_ = 0;
  std::array<std::uint64_t, window> recent_{};
  std::size_t next_ = 0;
  std::size_t since_change_ = 0;
};

}  // namespace tpar::inline v0
