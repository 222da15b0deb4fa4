// Exact checks of the bounds tpar/plan promises, shared by the plan tests. Products such
// as size × total weight overflow 64 bits for real inputs, so the checks compare 128-bit
// values (detail::Wide, itself tested against hand-computed values in test_plan.cpp).
#pragma once

#include <doctest/doctest.h>

#include <tpar/plan/split.hpp>
#include <tpar/plan/split_weights.hpp>
#include <tpar/detail/wide_arithmetic.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace plan_checks {

using tpar::detail::Wide;

// Calls `f` and returns the message of the tpar::Error(invalid_argument) it throws.
template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const tpar::Error& e) {
    CHECK(e.code_value() == tpar::ErrorCode::invalid_argument);
    return e.what();
  }
  FAIL("no tpar::Error thrown");
  return {};
}


// |a − b| < limit, on 128-bit values.
inline bool within(Wide a, Wide b, Wide limit) {
  const Wide distance = a >= b ? tpar::detail::subtract(a, b) : tpar::detail::subtract(b, a);
  return distance < limit;
}

inline std::string describe(std::span<const tpar::Share> shares) {
  std::string text = "{";
  for (const tpar::Share& s : shares)
    text += " [" + std::to_string(s.offset) + "+" + std::to_string(s.size) + "]";
  return text + " }";
}

// Everything split.hpp guarantees for one split, except the bound over layers. Returns ""
// when all hold, else what failed.
inline std::string check_split(const tpar::SplitWeights& weights, std::int64_t extent,
                               std::int64_t step, std::span<const tpar::Share> shares) {
  if (shares.size() != weights.device_count()) return "wrong number of shares";
  std::int64_t expected_offset = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    const tpar::Share s = shares[i];
    const std::string where = "device " + std::to_string(i) + " in " + describe(shares) + ": ";
    if (s.offset != expected_offset) return where + "not contiguous";
    if (s.size < 0) return where + "negative size";
    if (i + 1 < shares.size() && s.end() != extent && s.end() % step != 0)
      return where + "boundary " + std::to_string(s.end()) + " is off the granularity";
    if (weights.weight(i) == 0 && s.size != 0) return where + "weight 0 but a nonzero share";
    // |size − E·w/W| < g  ⇔  |size·W − E·w| < g·W
    const Wide have = tpar::detail::multiply_wide(static_cast<std::uint64_t>(s.size), weights.total());
    const Wide ideal = tpar::detail::multiply_wide(static_cast<std::uint64_t>(extent), weights.weight(i));
    const Wide limit = tpar::detail::multiply_wide(static_cast<std::uint64_t>(step), weights.total());
    if (!within(have, ideal, limit)) return where + "more than one granule off its ideal share";
    expected_offset = s.end();
  }
  if (expected_offset != extent) return "shares sum to " + std::to_string(expected_offset);
  return {};
}

// The bound over a period: |Σ_layers size_i − layers·E·w_i/W| < g for every device.
inline std::string check_totals(const tpar::SplitWeights& weights, std::int64_t extent,
                                std::int64_t step, std::uint64_t layers,
                                std::span<const std::int64_t> totals) {
  for (std::size_t i = 0; i < totals.size(); ++i) {
    const Wide have = tpar::detail::multiply_wide(static_cast<std::uint64_t>(totals[i]), weights.total());
    const Wide ideal = tpar::detail::multiply(
        tpar::detail::multiply_wide(static_cast<std::uint64_t>(extent), weights.weight(i)), layers);
    const Wide limit = tpar::detail::multiply_wide(static_cast<std::uint64_t>(step), weights.total());
    if (!within(have, ideal, limit))
      return "device " + std::to_string(i) + " total " + std::to_string(totals[i]) + " over " +
             std::to_string(layers) + " layers is a granule or more off its ideal";
  }
  return {};
}

}  // namespace plan_checks
