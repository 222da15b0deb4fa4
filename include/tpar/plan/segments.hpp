// split_segments — split a fused tensor part by part, so every device gets its slice of
// every part: q/k/v stacked in one matrix, up and gate side by side, or a part repeated.
//
//   // ffn up and gate fused side by side: each device needs matching rows of both
//   std::array<tpar::Part, 2> up_gate{{{n_ff}, {n_ff}}};
//   tpar::SegmentedSplit s = tpar::split_segments(weights, up_gate, g, {.layer = il});
//   for (std::size_t d = 0; d < n; ++d)
//     for (tpar::Share slice : s.slices(d)) { /* rows [slice.offset, slice.end()) */ }
//
// Splitting the fused extent as one range would give one device only up rows and another
// only gate rows (or, for a fused q/k/v, one device most of q and another all of k and v).
// Instead each part is split like split_extent would split an extent of its size,
// with the same weights, granularity and rotation; a part repeated r times is laid out r
// times in a row and every repetition is split the same way (ggml's `nr`). So for every
// part instance: the devices' slices tile it in device order, and each slice obeys
// split.hpp's bounds relative to the part's size. A device's total is the sum of its
// slices; it differs from fused_extent·w_i/W by less than g × (number of part instances).
//
// Parts whose shares must correspond to each other — q heads grouped over kv heads under
// GQA — must come from one SplitPlan (split_plan.hpp, apply_parts): independent splits of
// 32 q heads and 8 kv heads over 3 devices need not keep each device's q heads with its
// kv heads.
//
// Throws tpar::Error(ErrorCode::invalid_argument) for no parts, a part whose size is
// negative or not a multiple of the granularity (its tail would push every later boundary
// off the granularity), a repeat below 1, or a fused extent past 2^63 − 1.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/plan/granularity.hpp>
#include <tpar/plan/layer_rotation.hpp>
#include <tpar/plan/split.hpp>
#include <tpar/plan/split_weights.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0 {

// `size` rows of one part, laid out `repeat` times in a row within the fused extent.
struct Part {
  std::int64_t size = 0;
  std::int64_t repeat = 1;
};

class SegmentedSplit;

namespace detail {
inline SegmentedSplit assemble_segments(std::span<const Part> parts, std::size_t device_count,
                                        std::span<const Share> part_shares);
}

class SegmentedSplit {
 public:
  std::size_t device_count() const { return device_count_; }
  std::size_t part_count() const { return parts_.size(); }
  // Every repetition of every part, counted once per repetition.
  std::size_t instance_count() const { return instance_count_; }
  std::int64_t extent() const { return extent_; }
  std::span<const Part> parts() const { return parts_; }

  // Device's slices of every part instance, in fused order: offsets within the fused extent.
  std::span<const Share> slices(std::size_t device) const {
    check_device(device);
    return std::span<const Share>(slices_).subspan(device * instance_count_, instance_count_);
  }
  // Device's rows in each repetition of `part` (one entry of ggml's split-state `ne`).
  std::int64_t size(std::size_t device, std::size_t part) const {
    check_device(device);
    return part_sizes_.at(device * parts_.size() + part);
  }
  std::int64_t total(std::size_t device) const { return totals_.at(device); }

 private:
  friend SegmentedSplit detail::assemble_segments(std::span<const Part>, std::size_t,
                                                  std::span<const Share>);
  SegmentedSplit() = default;

  void check_device(std::size_t device) const {
    if (device >= device_count_)
      throw Error(ErrorCode::invalid_argument,
                  "device " + std::to_string(device) + " is out of range: this split has " +
                      std::to_string(device_count_) + " devices");
  }

  std::vector<Part> parts_;
  std::size_t device_count_ = 0;
  std::size_t instance_count_ = 0;
  std::int64_t extent_ = 0;
  std::vector<std::int64_t> part_sizes_;  // device-major: [device][part]
  std::vector<Share> slices_;             // device-major: [device][instance]
  std::vector<std::int64_t> totals_;
};

namespace detail {

// Throws unless `parts` describe a fused layout (at least one part, sizes >= 0, repeats
// >= 1, a fused extent that fits in int64); returns the fused extent.
inline std::int64_t require_fusable(std::span<const Part> parts) {
  if (parts.empty())
    throw Error(ErrorCode::invalid_argument,
                "a fused tensor needs at least one part; pass one Part per segment");
  std::int64_t extent = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const std::string name = "part " + std::to_string(p);
    if (parts[p].size < 0)
      throw Error(ErrorCode::invalid_argument,
                  name + " has " + std::to_string(parts[p].size) +
                      " rows; a part's size must be >= 0");
    if (parts[p].repeat < 1)
      throw Error(ErrorCode::invalid_argument,
                  name + " repeats " + std::to_string(parts[p].repeat) +
                      " times; a part is laid out at least once");
    const std::int64_t room = std::numeric_limits<std::int64_t>::max() - extent;
    if (parts[p].size != 0 && parts[p].repeat > room / parts[p].size)
      throw Error(ErrorCode::invalid_argument,
                  "the fused extent exceeds 2^63 - 1 rows at " + name + " (" +
                      std::to_string(parts[p].size) + " rows x " +
                      std::to_string(parts[p].repeat) + ")");
    extent += parts[p].size * parts[p].repeat;
  }
  return extent;
}

// part_shares: for part p and device d, entry p·device_count + d, offsets within the part.
inline SegmentedSplit assemble_segments(std::span<const Part> parts, std::size_t device_count,
                                        std::span<const Share> part_shares) {
  SegmentedSplit s;
  s.parts_.assign(parts.begin(), parts.end());
  s.device_count_ = device_count;
  for (const Part& part : parts) s.instance_count_ += static_cast<std::size_t>(part.repeat);
  s.part_sizes_.resize(device_count * parts.size());
  s.slices_.resize(device_count * s.instance_count_);
  s.totals_.assign(device_count, 0);

  std::int64_t part_start = 0;
  std::size_t instance = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    for (std::int64_t r = 0; r < parts[p].repeat; ++r, ++instance) {
      for (std::size_t d = 0; d < device_count; ++d) {
        const Share within = part_shares[p * device_count + d];
        s.slices_[d * s.instance_count_ + instance] = {part_start + within.offset, within.size};
        s.totals_[d] += within.size;
      }
      part_start += parts[p].size;
    }
    for (std::size_t d = 0; d < device_count; ++d)
      s.part_sizes_[d * parts.size() + p] = part_shares[p * device_count + d].size;
  }
  s.extent_ = part_start;
  return s;
}

}  // namespace detail

inline SegmentedSplit split_segments(const SplitWeights& weights, std::span<const Part> parts,
                                     Granularity granularity = {}, LayerRotation rotation = {}) {
  detail::require_fusable(parts);
  for (std::size_t p = 0; p < parts.size(); ++p)
    if (parts[p].size % granularity.value() != 0)
      throw Error(ErrorCode::invalid_argument,
                  "part " + std::to_string(p) + " has " + std::to_string(parts[p].size) +
                      " rows, not a multiple of the granularity " +
                      std::to_string(granularity.value()) +
                      ": its tail would push every later boundary off the granularity");
  const std::size_t n = weights.device_count();
  std::vector<Share> part_shares(parts.size() * n);
  for (std::size_t p = 0; p < parts.size(); ++p)
    detail::split_into(weights, parts[p].size, granularity, rotation,
                       std::span<Share>(part_shares).subspan(p * n, n));
  return detail::assemble_segments(parts, n, part_shares);
}

}  // namespace tpar::inline v0
