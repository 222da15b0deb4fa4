// split_extent — cut one extent (rows or columns along a tensor's split axis) into one
// contiguous share per device, in proportion to SplitWeights, on a Granularity.
//
//   auto weights = tpar::SplitWeights::from_free_memory(free_bytes);
//   auto g = tpar::Granularity::lcm_of({block_size, head_dim, 128});
//   std::vector<tpar::Share> shares = tpar::split_extent(weights, n_ff, g, {.layer = il});
//   // device i owns rows [shares[i].offset, shares[i].end())
//
// Shares lie in device order (device 0 first), which is what ggml's split state and any
// engine that only records sizes assume. Let E be the extent, g the granularity, w_i / W
// device i's weight, and ideal_i = E·w_i / W. The result guarantees, exactly (integer
// arithmetic, no floating point):
//   - the sizes sum to E and every offset is the previous share's end;
//   - every boundary between two devices is a multiple of g or equals E. When E is not a
//     multiple of g, the tail E mod g therefore ends the last nonempty share;
//   - per layer, every device:      |size_i − ideal_i| < g;
//   - over any `period` consecutive layers (see layer_rotation.hpp), every device:
//                                   |Σ size_i − period·ideal_i| < g;
//   - a device of weight 0 gets size 0. A device of positive weight whose ideal share is
//     below g may get 0 too: that is the nearest split the granularity allows.
// How: boundary k ideally lies at E·(w_0 + … + w_{k−1}) / W; it moves to the start or the
// end of the granule containing it (the last granule may be the short tail), as the
// layer's rounding phase decides. With one phase for all boundaries, every boundary's
// displacement lies in the same half-open window of width g, so a share — the difference
// of two boundaries — is off by less than g; the ends 0 and E do not move and lie in the
// window too.
//
// The result is a std::vector: the device count is a run-time value with no natural cap,
// and a split is computed once per tensor at model load, never per token, so one small
// allocation costs nothing that matters while a fixed capacity would impose a device limit.
//
// Impossible requests throw tpar::Error(ErrorCode::invalid_argument): a negative extent,
// or an extent smaller than the granularity (one device would take everything; 0 is
// accepted: every share is empty).
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/plan/granularity.hpp>
#include <tpar/plan/layer_rotation.hpp>
#include <tpar/plan/split_weights.hpp>
#include <tpar/detail/wide_arithmetic.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0 {

// One device's contiguous slice of an extent: [offset, offset + size).
struct Share {
  std::int64_t offset = 0;
  std::int64_t size = 0;

  constexpr std::int64_t end() const { return offset + size; }
  friend constexpr bool operator==(Share, Share) = default;
};

namespace detail {

// Throws unless `extent` can be split on `granularity`; `what` names the caller's input.
inline void require_splittable(std::int64_t extent, Granularity granularity,
                               const std::string& what) {
  if (extent < 0)
    throw Error(ErrorCode::invalid_argument,
                what + " " + std::to_string(extent) +
                    " is negative; pass the number of rows or columns along the split axis");
  if (extent > 0 && extent < granularity.value())
    throw Error(ErrorCode::invalid_argument,
                what + " " + std::to_string(extent) + " is smaller than the granularity " +
                    std::to_string(granularity.value()) +
                    ", so no boundary fits inside it and one device would take everything; "
                    "use a finer granularity or keep this tensor whole (mirrored)");
}

// Where the boundary that ideally lies at E·prefix/total ends up, for rounding phase
// phase/period. Preconditions: 0 <= prefix <= total, total > 0, extent >= 0, step >= 1,
// phase < period.
inline std::int64_t place_boundary(std::int64_t extent, std::int64_t step, std::uint64_t prefix,
                                   std::uint64_t total, std::uint64_t phase,
                                   std::uint64_t period) {
  // Every device from here on has weight 0: the boundary goes to the very end, so the tail
  // stays with the last device that takes a share instead of a device of weight 0.
  if (prefix == total) return extent;
  const auto ideal = divide(multiply_wide(static_cast<std::uint64_t>(extent), prefix), total);
  // ideal position = whole + fraction / total, with whole < extent because prefix < total.
  const auto whole = static_cast<std::int64_t>(ideal.quotient.low);
  const std::uint64_t fraction = ideal.remainder;

  const std::int64_t granule_start = whole / step * step;
  // The granules are [k·g, (k+1)·g) and, when E is not a multiple of g, the short tail.
  const std::int64_t granule_size = extent - granule_start >= step ? step : extent - granule_start;
  if (phase == 0) return granule_start;

  // Round up when the ideal position's fraction of the way through its granule,
  // x / y, is at least (period − phase) / period; all in units of 1/total.
  const auto offset_in_granule = static_cast<std::uint64_t>(whole - granule_start);
  const Wide x = add(multiply_wide(offset_in_granule, total), widen(fraction));
  const Wide y = multiply_wide(static_cast<std::uint64_t>(granule_size), total);
  // threshold = ceil((period − phase)·y / period), computed without a 192-bit product.
  const std::uint64_t rest = period - phase;
  const auto y_over_period = divide(y, period);
  const auto leftover = divide(multiply_wide(rest, y_over_period.remainder), period);
  Wide threshold = add(multiply(y_over_period.quotient, rest), leftover.quotient);
  if (leftover.remainder != 0) threshold = add(threshold, widen(1));
  return x >= threshold ? granule_start + granule_size : granule_start;
}

// Fills `out` (one entry per device) with the shares of `extent`. Inputs already checked.
inline void split_into(const SplitWeights& weights, std::int64_t extent, Granularity granularity,
                       LayerRotation rotation, std::span<Share> out) {
  const std::size_t n = weights.device_count();
  const std::uint64_t period = rotation.resolved_period(n);
  const std::uint64_t phase = rotation.phase(n);
  std::uint64_t prefix = 0;
  std::int64_t start = 0;
  for (std::size_t i = 0; i < n; ++i) {
    prefix += weights.weight(i);
    const std::int64_t end =
        place_boundary(extent, granularity.value(), prefix, weights.total(), phase, period);
    out[i] = Share{start, end - start};
    start = end;
  }
}

}  // namespace detail

inline std::vector<Share> split_extent(const SplitWeights& weights, std::int64_t extent,
                                       Granularity granularity = {},
                                       LayerRotation rotation = {}) {
  detail::require_splittable(extent, granularity, "extent");
  std::vector<Share> shares(weights.device_count());
  detail::split_into(weights, extent, granularity, rotation, shares);
  return shares;
}

}  // namespace tpar::inline v0
