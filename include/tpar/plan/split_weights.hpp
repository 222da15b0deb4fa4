// SplitWeights — how large a share of every split each device should take, relative to
// the others. Device i's ideal share of an extent E is E × weight(i) / total().
//
//   auto w = tpar::SplitWeights::equal(3);                          // 1 : 1 : 1
//   auto w = tpar::SplitWeights::from_free_memory(free_bytes);      // bytes per device
//   auto w = tpar::SplitWeights::from_ratios({3.0, 1.0});           // llama.cpp --tensor-split
//
// Weights are stored as integers so every split computed from them is exact (see
// split.hpp for the bounds this buys). Free memory is used as is; ratios are scaled so the
// largest becomes 2^40 and rounded to the nearest integer, a relative change below 2^-40
// that the bounds then refer to (weight() returns the integers that are actually used).
// A device of weight 0 takes no share. Invalid weights throw
// tpar::Error(ErrorCode::invalid_argument) here, so a split never sees them.
#pragma once

#include <tpar/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tpar::inline v0 {

class SplitWeights {
 public:
  static SplitWeights equal(std::size_t device_count) {
    if (device_count == 0)
      throw Error(ErrorCode::invalid_argument,
                  "cannot split across 0 devices: SplitWeights::equal needs a device count of "
                  "at least 1");
    return SplitWeights(std::vector<std::uint64_t>(device_count, 1));
  }

  // Free device memory in bytes, one entry per device (what vkGetPhysicalDeviceMemory-
  // Properties2 with VK_EXT_memory_budget, or ggml_backend_dev_memory, reports).
  static SplitWeights from_free_memory(std::span<const std::uint64_t> free_bytes) {
    require_devices(free_bytes.size(), "from_free_memory");
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < free_bytes.size(); ++i) {
      if (free_bytes[i] > std::numeric_limits<std::uint64_t>::max() - total)
        throw Error(ErrorCode::invalid_argument,
                    "free memory of device " + std::to_string(i) + " (" +
                        std::to_string(free_bytes[i]) +
                        " bytes) makes the devices' total exceed 2^64 - 1 bytes; pass sizes "
                        "in bytes, not a sentinel such as UINT64_MAX");
      total += free_bytes[i];
    }
    if (total == 0)
      throw Error(ErrorCode::invalid_argument,
                  "every one of the " + std::to_string(free_bytes.size()) +
                      " devices reports 0 bytes of free memory, so there is nothing to split "
                      "in proportion to; use SplitWeights::equal or from_ratios instead");
    return SplitWeights(std::vector<std::uint64_t>(free_bytes.begin(), free_bytes.end()));
  }

  static SplitWeights from_free_memory(std::initializer_list<std::uint64_t> free_bytes) {
    return from_free_memory(std::span<const std::uint64_t>(free_bytes.begin(), free_bytes.size()));
  }

  // Relative shares, any scale: {3, 1} and {0.75, 0.25} mean the same.
  static SplitWeights from_ratios(std::span<const double> ratios) {
    require_devices(ratios.size(), "from_ratios");
    double largest = 0.0;
    for (std::size_t i = 0; i < ratios.size(); ++i) {
      if (!std::isfinite(ratios[i]) || ratios[i] < 0.0)
        throw Error(ErrorCode::invalid_argument,
                    "split ratio of device " + std::to_string(i) + " is " +
                        format_double(ratios[i]) +
                        "; every ratio must be a finite number >= 0 (0 gives the device "
                        "nothing)");
      if (ratios[i] > largest) largest = ratios[i];
    }
    if (largest == 0.0)
      throw Error(ErrorCode::invalid_argument,
                  "all " + std::to_string(ratios.size()) +
                      " split ratios are 0, so no device would take anything; give at least "
                      "one device a positive ratio");
    std::vector<std::uint64_t> weights(ratios.size());
    // Dividing by the largest first keeps every scaled value within [0, 2^40].
    for (std::size_t i = 0; i < ratios.size(); ++i)
      weights[i] = static_cast<std::uint64_t>(std::llround(std::ldexp(ratios[i] / largest, 40)));
    return SplitWeights(std::move(weights));
  }

  static SplitWeights from_ratios(std::initializer_list<double> ratios) {
    return from_ratios(std::span<const double>(ratios.begin(), ratios.size()));
  }

  std::size_t device_count() const { return weights_.size(); }
  std::uint64_t weight(std::size_t device) const { return weights_.at(device); }
  std::span<const std::uint64_t> weights() const { return weights_; }
  // Sum of all weights: > 0 and < 2^64 by construction.
  std::uint64_t total() const { return total_; }

  friend bool operator==(const SplitWeights&, const SplitWeights&) = default;

 private:
  explicit SplitWeights(std::vector<std::uint64_t> weights) : weights_(std::move(weights)) {
    for (std::uint64_t w : weights_) total_ += w;
  }

  static void require_devices(std::size_t count, const char* factory) {
    if (count == 0)
      throw Error(ErrorCode::invalid_argument,
                  std::string("cannot split across 0 devices: SplitWeights::") + factory +
                      " got an empty list; pass one entry per device");
  }

  static std::string format_double(double value) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", value);
    return text;
  }

  std::vector<std::uint64_t> weights_;
  std::uint64_t total_ = 0;
};

}  // namespace tpar::inline v0
