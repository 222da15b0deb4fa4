// Granularity — the step every split boundary must land on.
//
//   // ggml: a boundary must not cut a quantization block, a head, or a 128-row tile.
//   tpar::Granularity g = tpar::Granularity::lcm_of({block_size, head_dim, 128});
//   std::vector<tpar::Share> shares = tpar::split_extent(weights, n_rows, g);
//
// Several constraints combine as their least common multiple: the smallest step that
// satisfies all of them at once. A Granularity is always ≥ 1; invalid steps (0, negative,
// or an LCM past 2^63 − 1) throw tpar::Error(ErrorCode::invalid_argument) where the value
// enters, so no split function ever sees one.
#pragma once

#include <tpar/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numeric>
#include <span>
#include <string>

namespace tpar::inline v0 {

class Granularity {
 public:
  // 1: a boundary may fall anywhere.
  constexpr Granularity() = default;

  explicit Granularity(std::int64_t step) : step_(step) {
    if (step < 1)
      throw Error(ErrorCode::invalid_argument,
                  "granularity " + std::to_string(step) +
                      " is not a step a boundary can land on: it must be at least 1 "
                      "(use 1 for no constraint)");
  }

  // The least common multiple of `steps`; an empty list means no constraint (1).
  static Granularity lcm_of(std::span<const std::int64_t> steps) {
    std::int64_t combined = 1;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (steps[i] < 1)
        throw Error(ErrorCode::invalid_argument,
                    "granularity " + std::to_string(steps[i]) + " (entry " + std::to_string(i) +
                        " of " + std::to_string(steps.size()) +
                        ") must be at least 1; pass 1, or leave it out, for no constraint");
      combined = lcm_checked(combined, steps[i]);
    }
    return Granularity(combined);
  }

  static Granularity lcm_of(std::initializer_list<std::int64_t> steps) {
    return lcm_of(std::span<const std::int64_t>(steps.begin(), steps.size()));
  }

  // The smallest step that satisfies both this granularity and `other`.
  Granularity combined_with(Granularity other) const {
    return Granularity(lcm_checked(step_, other.step_));
  }

  constexpr std::int64_t value() const { return step_; }

  friend constexpr bool operator==(Granularity, Granularity) = default;

 private:
  static std::int64_t lcm_checked(std::int64_t a, std::int64_t b) {
    const std::int64_t a_over_gcd = a / std::gcd(a, b);
    if (a_over_gcd > std::numeric_limits<std::int64_t>::max() / b)
      throw Error(ErrorCode::invalid_argument,
                  "the least common multiple of granularities " + std::to_string(a) + " and " +
                      std::to_string(b) +
                      " exceeds 2^63 - 1; no extent could be split on such a step");
    return a_over_gcd * b;
  }

  std::int64_t step_ = 1;
};

}  // namespace tpar::inline v0
