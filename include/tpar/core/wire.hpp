// Wire — the format partial sums travel in between devices. Accumulation is always f32;
// the wire only decides how many bytes cross the host and how values round on the way.
#pragma once

#include <tpar/core/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tpar::inline v0 {

enum class Wire : std::uint32_t {
  f32 = 0,   // exact: only f32 summation order matters
  bf16 = 1,  // f32's range, 8-bit significand, round-to-nearest-even; never overflows
  f16 = 2,   // 11-bit significand with one power-of-two scale per block of 512 values:
             // every finite block fits f16's range, so nothing overflows to inf
};

inline constexpr std::array<Wire, 3> all_wires{Wire::f32, Wire::bf16, Wire::f16};

// Values per f16 scale block. Piece boundaries are multiples of it, so every block of a
// piece is scaled the same way on every device.
inline constexpr std::size_t wire_block = 512;

// Unit roundoff of one rounding to the wire (0 for f32: no wire rounding).
inline constexpr double wire_unit_roundoff(Wire w) {
  switch (w) {
    case Wire::f32: return 0.0;
    case Wire::bf16: return 1.0 / 256.0;   // 2^-8
    case Wire::f16: return 1.0 / 2048.0;   // 2^-11
  }
  return 0.0;
}

constexpr std::string_view to_string(Wire w) {
  switch (w) {
    case Wire::f32: return "f32";
    case Wire::bf16: return "bf16";
    case Wire::f16: return "f16";
  }
  return "?";
}

inline std::optional<Wire> parse_wire(std::string_view s) {
  for (Wire w : all_wires)
    if (s == to_string(w)) return w;
  return std::nullopt;
}

// 32-bit words a piece of `count` values occupies on the wire: data words (16-bit
// formats pack two values per word, low half first), then for f16 one int32 scale
// exponent per block.
constexpr std::size_t wire_data_words(Wire w, std::size_t count) {
  return w == Wire::f32 ? count : (count + 1) / 2;
}
constexpr std::size_t wire_scale_words(Wire w, std::size_t count) {
  return w == Wire::f16 ? (count + wire_block - 1) / wire_block : 0;
}
constexpr std::size_t wire_words(Wire w, std::size_t count) {
  return wire_data_words(w, count) + wire_scale_words(w, count);
}

}  // namespace tpar::inline v0
