// Capacity — how much staging to keep: grow at once when a call needs more, shrink when
// what is held is far larger than recent calls needed, so a long prefill never leaves
// every later decode-sized call paying for (or pinning) its staging. A shrink that a
// larger call soon undoes doubles the wait before the next one: a server whose steps
// alternate between prompt chunks and decode tokens would otherwise make its staging
// anew (and every plan with it) at nearly every step, 10-30 ms of the host's time each
// on an H200 host (docs/design/server-mixed.md).
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
  static constexpr std::uint32_t max_doublings = 6;  // waits of up to 64 << 6 = 4096 calls

  std::uint64_t current() const { return current_; }
  // Calls that must need at most current / shrink_ratio before it shrinks.
  std::size_t patience() const { return window << doublings_; }

  // The capacity the next call should use when it must change, given what it needs.
  std::optional<std::uint64_t> update(std::uint64_t required) {
    recent_[next_++ % window] = required;
    ++since_change_;
    if (required > current_) {
      // Grown again soon after a shrink: that shrink came too early; wait twice as long
      // before the next.
      if (last_shrank_ && since_change_ <= 4 * patience()) doublings_ = std::min(doublings_ + 1, max_doublings);
      last_shrank_ = false;
      return change(std::max(required, current_ + current_ / 4));
    }
    since_small_ = shrink_ratio * required > current_ ? 0 : since_small_ + 1;
    if (since_change_ >= window && since_small_ >= patience() && current_ > granule) {
      const std::uint64_t peak = *std::max_element(recent_.begin(), recent_.end());
      if (current_ > shrink_ratio * std::max(peak, granule)) {
        last_shrank_ = true;
        return change(peak + peak / 4);
      }
    }
    return std::nullopt;
  }

 private:
  std::uint64_t change(std::uint64_t bytes) {
    current_ = std::max(granule, (bytes + granule - 1) / granule * granule);
    since_change_ = 0;
    since_small_ = 0;  // "small" was against the old capacity
    return current_;
  }

  std::uint64_t current_ = 0;
  std::array<std::uint64_t, window> recent_{};
  std::size_t next_ = 0;
  std::size_t since_change_ = 0;
  std::size_t since_small_ = 0;  // calls in a row that needed at most current / shrink_ratio
  std::uint32_t doublings_ = 0;
  bool last_shrank_ = false;
};

}  // namespace tpar::inline v0
