// Inputs and checks shared by the AllReduce tests: integer inputs whose sums every
// order represents exactly, random inputs checked against a double-precision reference
// within the documented bound (docs/numerics.md), and bit-identity across devices.
#pragma once

#include <tpar/core/wire.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace tpar_test {

using tpar::Wire;

// Integers in [-8, 8]: every partial sum of up to 16 of them is an integer of magnitude
// at most 128, exact in bf16, f16 and f32, whatever the order.
inline std::vector<std::vector<float>> integer_inputs(std::size_t n, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(-8, 8);
  std::vector<std::vector<float>> x(n, std::vector<float>(count));
  for (auto& v : x)
    for (auto& e : v) e = static_cast<float>(dist(rng));
  return x;
}

// Normal-range values of mixed sign and magnitude (1e-3 .. 1e3).
inline std::vector<std::vector<float>> random_inputs(std::size_t n, std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mant(-1.0, 1.0);
  std::uniform_int_distribution<int> exp(-10, 10);
  std::vector<std::vector<float>> x(n, std::vector<float>(count));
  for (auto& v : x)
    for (auto& e : v) e = static_cast<float>(std::ldexp(mant(rng), exp(rng)));
  return x;
}

// The documented bound: |result - exact| <= n*(u_wire + 2^-24) * sum_j |x_j|
// (+ n*2^-38 * the largest sum_j |x_j| in the value's 512-block, for f16).
struct BoundCheck {
  std::size_t violations = 0;
  double worst_ratio = 0;  // max error / bound
  std::string first;
};

inline BoundCheck check_bound(Wire wire, const std::vector<std::vector<float>>& inputs, const std::vector<float>& result,
                              std::uint32_t contributing = ~0u) {
  const std::size_t n = inputs.size(), count = result.size();
  std::vector<double> exact(count, 0.0), mag(count, 0.0);
  for (std::size_t d = 0; d < n; ++d) {
    if (!((contributing >> d) & 1u)) continue;
    for (std::size_t i = 0; i < count; ++i) {
      exact[i] += inputs[d][i];
      mag[i] += std::fabs(inputs[d][i]);
    }
  }
  const double per_value = double(n) * (tpar::wire_unit_roundoff(wire) + std::ldexp(1.0, -24)) * 1.0001;
  BoundCheck out;
  for (std::size_t i = 0; i < count; ++i) {
    double bound = per_value * mag[i];
    if (wire == Wire::f16) {
      double block = 0;
      const std::size_t b0 = i / tpar::wire_block * tpar::wire_block;
      for (std::size_t j = b0; j < std::min(count, b0 + tpar::wire_block); ++j) block = std::max(block, mag[j]);
      bound += double(n) * std::ldexp(block, -38);
    }
    const double err = std::fabs(double(result[i]) - exact[i]);
    if (bound > 0) out.worst_ratio = std::max(out.worst_ratio, err / bound);
    if (!(err <= bound)) {
      if (!out.violations)
        out.first = "value " + std::to_string(i) + ": got " + std::to_string(result[i]) + ", exact " +
                    std::to_string(exact[i]) + ", bound " + std::to_string(bound);
      ++out.violations;
    }
  }
  return out;
}

inline std::vector<float> integer_sum(const std::vector<std::vector<float>>& inputs, std::uint32_t contributing = ~0u) {
  std::vector<float> s(inputs[0].size(), 0.0f);
  for (std::size_t d = 0; d < inputs.size(); ++d)
    if ((contributing >> d) & 1u)
      for (std::size_t i = 0; i < s.size(); ++i) s[i] += inputs[d][i];
  return s;
}

inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace tpar_test
