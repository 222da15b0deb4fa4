// split_layers — give each device a contiguous range of layers (blocks) sized to its
// usable memory, for layer-parallel (pipeline) placement.
//
//   std::vector<std::uint64_t> free = {24ull << 30, 8ull << 30};   // bytes per device
//   std::vector<std::uint64_t> layers = per_layer_weight_bytes();  // may differ per layer
//   auto ranges = tpar::split_layers(free, layers, {.headroom_bytes = 1ull << 30,
//                                                   .min_usable_fraction = 0.25});
//   // device i runs layers [ranges[i].begin, ranges[i].end)
//
// Usable memory is free memory minus the headroom (kept for the KV cache, compute buffers
// and the driver), but never less than min_usable_fraction of free memory: that floor lets
// a small device whose free memory barely exceeds the headroom keep a share, by eating
// into its headroom rather than past its free memory.
//
// Ranges lie in device order, cover every layer exactly once, and are contiguous (device 0
// gets the first layers). The result:
//   - keeps every device's bytes within its usable memory whenever any contiguous split in
//     device order can; when none can, throws tpar::Error(ErrorCode::invalid_argument)
//     saying by how much the model misses;
//   - cuts where the bytes are split in proportion to usable memory, each cut at the layer
//     boundary nearest its ideal, so a device is off its proportional bytes by at most
//     half a layer at each end (at most one largest layer in all). Where that would
//     overfill a device, cuts move just far enough to fit; if every device's proportional
//     bytes leave room for one largest layer more, no cut moves.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/detail/wide_arithmetic.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0 {

struct LayerRange {
  std::size_t begin = 0;   // first layer
  std::size_t end = 0;     // one past the last layer
  std::uint64_t bytes = 0; // sum of the range's layer sizes

  constexpr std::size_t count() const { return end - begin; }
  friend constexpr bool operator==(LayerRange, LayerRange) = default;
};

struct LayerBudget {
  std::uint64_t headroom_bytes = 0;  // left free on every device
  double min_usable_fraction = 0.0;  // in [0, 1]: usable >= this fraction of free memory
};

inline std::uint64_t usable_memory(std::uint64_t free_bytes, const LayerBudget& budget) {
  if (!(budget.min_usable_fraction >= 0.0 && budget.min_usable_fraction <= 1.0)) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", budget.min_usable_fraction);
    throw Error(ErrorCode::invalid_argument,
                std::string("min_usable_fraction ") + text +
                    " is not a fraction of free memory; pass a value in [0, 1]");
  }
  const std::uint64_t after_headroom =
      free_bytes > budget.headroom_bytes ? free_bytes - budget.headroom_bytes : 0;
  // The floor never exceeds free memory; the clamp only matters where long double is as
  // narrow as double and a size near 2^64 rounds up.
  const long double floor_bytes =
      std::floor(static_cast<long double>(free_bytes) * budget.min_usable_fraction);
  const std::uint64_t floor_value = floor_bytes >= static_cast<long double>(free_bytes)
                                        ? free_bytes
                                        : static_cast<std::uint64_t>(floor_bytes);
  return std::max(after_headroom, floor_value);
}

namespace detail {

inline std::string describe_bytes(std::uint64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%llu bytes (%.1f MiB)", static_cast<unsigned long long>(bytes),
                static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

[[noreturn]] inline void throw_layers_do_not_fit(std::span<const std::uint64_t> usable,
                                                 std::span<const std::uint64_t> layer_bytes,
                                                 std::uint64_t model_bytes,
                                                 const LayerBudget& budget) {
  std::uint64_t usable_total = 0;  // cannot overflow: checked by the caller
  std::uint64_t usable_largest = 0;
  for (std::uint64_t u : usable) usable_total += u, usable_largest = std::max(usable_largest, u);
  std::string reason;
  const auto largest_layer = std::max_element(layer_bytes.begin(), layer_bytes.end());
  if (model_bytes > usable_total) {
    reason = "the model needs " + describe_bytes(model_bytes) + " but the devices can use " +
             describe_bytes(usable_total) + " in all, " +
             describe_bytes(model_bytes - usable_total) + " short";
  } else if (largest_layer != layer_bytes.end() && *largest_layer > usable_largest) {
    reason = "layer " + std::to_string(largest_layer - layer_bytes.begin()) + " alone needs " +
             describe_bytes(*largest_layer) + ", more than any device can use (at most " +
             describe_bytes(usable_largest) + ")";
  } else {
    reason = "the model's " + describe_bytes(model_bytes) + " would fit in the devices' " +
             describe_bytes(usable_total) +
             " in all, but not as contiguous layer ranges in device order";
  }
  std::string devices;
  for (std::size_t d = 0; d < usable.size(); ++d)
    devices += (d ? ", " : "") + std::string("device ") + std::to_string(d) + ": " +
               describe_bytes(usable[d]);
  throw Error(ErrorCode::invalid_argument,
              "cannot place " + std::to_string(layer_bytes.size()) + " layers: " + reason +
                  ". Usable memory after a headroom of " + describe_bytes(budget.headroom_bytes) +
                  " per device: " + devices +
                  ". Free memory, lower the headroom, add a device or use a smaller model.");
}

// The layer boundary j whose prefix is nearest prefix_total·share/total (ties: lower j).
inline std::size_t nearest_cut(std::span<const std::uint64_t> prefix, std::uint64_t share,
                               std::uint64_t total) {
  const std::uint64_t prefix_total = prefix.back();
  const Wide target = multiply_wide(prefix_total, share);  // ideal cut × total
  // Largest j with prefix[j]·total <= target.
  const auto above = std::upper_bound(
      prefix.begin(), prefix.end(), target,
      [total](const Wide& t, std::uint64_t p) { return t < multiply_wide(p, total); });
  const auto below = static_cast<std::size_t>(above - prefix.begin()) - 1;
  if (above == prefix.end()) return below;
  const Wide distance_below = subtract(target, multiply_wide(prefix[below], total));
  const Wide distance_above = subtract(multiply_wide(*above, total), target);
  return distance_below <= distance_above ? below : below + 1;
}

}  // namespace detail

inline std::vector<LayerRange> split_layers(std::span<const std::uint64_t> free_bytes,
                                            std::span<const std::uint64_t> layer_bytes,
                                            const LayerBudget& budget = {}) {
  const std::size_t n = free_bytes.size();
  if (n == 0)
    throw Error(ErrorCode::invalid_argument,
                "cannot split layers across 0 devices; pass one free-memory entry per device");
  std::vector<std::uint64_t> usable(n);
  std::uint64_t usable_total = 0;
  for (std::size_t d = 0; d < n; ++d) {
    usable[d] = usable_memory(free_bytes[d], budget);
    if (usable[d] > std::numeric_limits<std::uint64_t>::max() - usable_total)
      throw Error(ErrorCode::invalid_argument,
                  "free memory of device " + std::to_string(d) +
                      " makes the devices' usable total exceed 2^64 - 1 bytes; pass sizes in "
                      "bytes, not a sentinel such as UINT64_MAX");
    usable_total += usable[d];
  }

  const std::size_t layers = layer_bytes.size();
  std::vector<std::uint64_t> prefix(layers + 1, 0);  // prefix[j]: bytes of layers [0, j)
  for (std::size_t j = 0; j < layers; ++j) {
    if (layer_bytes[j] > std::numeric_limits<std::uint64_t>::max() - prefix[j])
      throw Error(ErrorCode::invalid_argument,
                  "layer sizes sum past 2^64 - 1 bytes at layer " + std::to_string(j) +
                      "; pass sizes in bytes");
    prefix[j + 1] = prefix[j] + layer_bytes[j];
  }
  const std::uint64_t model_bytes = prefix[layers];
  const auto bytes_between = [&](std::size_t a, std::size_t b) { return prefix[b] - prefix[a]; };

  // first_feasible[d]: the earliest layer from which devices d..n−1 can hold all the rest,
  // packing each as full as it goes from the back. Any later start fits too.
  std::vector<std::size_t> first_feasible(n + 1, layers);
  for (std::size_t d = n; d-- > 0;) {
    std::size_t start = first_feasible[d + 1];
    while (start > 0 && bytes_between(start - 1, first_feasible[d + 1]) <= usable[d]) --start;
    first_feasible[d] = start;
  }
  if (first_feasible[0] != 0)
    detail::throw_layers_do_not_fit(usable, layer_bytes, model_bytes, budget);

  // Proportional targets. With no bytes to weigh (no layers, or all of size 0), split the
  // layer count instead; with no usable memory at all, split evenly.
  std::vector<std::uint64_t> layer_counts;
  std::span<const std::uint64_t> weigh = prefix;
  if (model_bytes == 0) {
    layer_counts.resize(layers + 1);
    for (std::size_t j = 0; j <= layers; ++j) layer_counts[j] = j;
    weigh = layer_counts;
  }
  const bool even = usable_total == 0;

  std::vector<LayerRange> ranges(n);
  std::size_t cut = 0;
  std::uint64_t share_prefix = 0;
  for (std::size_t d = 0; d + 1 < n; ++d) {
    share_prefix += even ? 1 : usable[d];
    const std::size_t target = detail::nearest_cut(weigh, share_prefix, even ? n : usable_total);
    // The cut must leave device d within its budget and devices d+1.. able to hold the rest;
    // both bounds exist and are ordered because first_feasible[0] == 0 (see the header).
    const std::size_t lowest = std::max(first_feasible[d + 1], cut);
    const std::uint64_t reach = prefix[cut] + std::min(usable[d], model_bytes - prefix[cut]);
    const std::size_t highest =
        static_cast<std::size_t>(std::upper_bound(prefix.begin(), prefix.end(), reach) -
                                 prefix.begin()) - 1;
    const std::size_t next = std::clamp(target, lowest, highest);
    ranges[d] = {cut, next, bytes_between(cut, next)};
    cut = next;
  }
  ranges[n - 1] = {cut, layers, bytes_between(cut, layers)};
  return ranges;
}

inline std::vector<LayerRange> split_layers(std::initializer_list<std::uint64_t> free_bytes,
                                            std::initializer_list<std::uint64_t> layer_bytes,
                                            const LayerBudget& budget = {}) {
  return split_layers(std::span<const std::uint64_t>(free_bytes.begin(), free_bytes.size()),
                      std::span<const std::uint64_t>(layer_bytes.begin(), layer_bytes.size()),
                      budget);
}

}  // namespace tpar::inline v0
