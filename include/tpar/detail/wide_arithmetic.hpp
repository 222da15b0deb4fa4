// Internal to tpar/plan: 128-bit unsigned integers, just enough to place split boundaries
// exactly. extent × weight overflows 64 bits for real inputs (a 2^31-row tensor split by
// free memory in bytes), and rounding in floating point would move a boundary by one
// granule whenever an ideal cut lands a hair from a multiple of the granularity, so the
// bounds tpar promises could not be stated, let alone tested. The compiler's __int128 is
// not portable (MSVC has none), so this is written out once, in plain 64-bit operations.
#pragma once

#include <compare>
#include <cstdint>

namespace tpar::inline v0::detail {

struct Wide {
  std::uint64_t high = 0;
  std::uint64_t low = 0;

  friend constexpr bool operator==(Wide, Wide) = default;
  friend constexpr std::strong_ordering operator<=>(Wide a, Wide b) {
    if (a.high != b.high) return a.high <=> b.high;
    return a.low <=> b.low;
  }
};

constexpr Wide widen(std::uint64_t value) { return {0, value}; }

// The full product of two 64-bit values, from four 32×32-bit partial products.
constexpr Wide multiply_wide(std::uint64_t a, std::uint64_t b) {
  const std::uint64_t mask = 0xffffffffu;
  const std::uint64_t a_low = a & mask, a_high = a >> 32;
  const std::uint64_t b_low = b & mask, b_high = b >> 32;
  const std::uint64_t low_low = a_low * b_low;
  const std::uint64_t high_low = a_high * b_low;
  const std::uint64_t low_high = a_low * b_high;
  const std::uint64_t high_high = a_high * b_high;
  // Middle column: three terms below 2^32 each, so no overflow.
  const std::uint64_t middle = (low_low >> 32) + (high_low & mask) + (low_high & mask);
  return {high_high + (high_low >> 32) + (low_high >> 32) + (middle >> 32),
          (middle << 32) | (low_low & mask)};
}

// a + b; callers guarantee the sum fits in 128 bits.
constexpr Wide add(Wide a, Wide b) {
  const std::uint64_t low = a.low + b.low;
  return {a.high + b.high + (low < a.low ? 1u : 0u), low};
}

// a − b; callers guarantee a ≥ b.
constexpr Wide subtract(Wide a, Wide b) {
  return {a.high - b.high - (a.low < b.low ? 1u : 0u), a.low - b.low};
}

// a × b; callers guarantee the product fits in 128 bits.
constexpr Wide multiply(Wide a, std::uint64_t b) {
  const Wide low_part = multiply_wide(a.low, b);
  return {low_part.high + a.high * b, low_part.low};
}

struct WideQuotient {
  Wide quotient;
  std::uint64_t remainder = 0;
};

// Long division, one bit at a time: 128 steps, which is nothing next to what a plan is
// for (it is computed once per tensor at model load). divisor must not be 0.
constexpr WideQuotient divide(Wide dividend, std::uint64_t divisor) {
  WideQuotient result;
  std::uint64_t remainder = 0;
  for (int bit = 127; bit >= 0; --bit) {
    const std::uint64_t next_bit =
        bit >= 64 ? (dividend.high >> (bit - 64)) & 1u : (dividend.low >> bit) & 1u;
    // remainder < divisor < 2^64, so 2·remainder + 1 needs 65 bits; when the top bit is
    // about to fall off, the true value is ≥ 2^64 > divisor and the subtraction below
    // brings it back under 2^64, so wrapping arithmetic gives the right answer.
    const bool overflows = (remainder >> 63) != 0;
    remainder = (remainder << 1) | next_bit;
    if (overflows || remainder >= divisor) {
      remainder -= divisor;
      if (bit >= 64)
        result.quotient.high |= std::uint64_t{1} << (bit - 64);
      else
        result.quotient.low |= std::uint64_t{1} << bit;
    }
  }
  result.remainder = remainder;
  return result;
}

}  // namespace tpar::inline v0::detail
