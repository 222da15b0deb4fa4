// Host implementation of the wire formats, bit for bit what shaders/wire.glsl computes.
// Tests use it to predict exact device results; it is also the reference for the
// numerics documented in docs/numerics.md.
#pragma once

#include <tpar/core/wire.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace tpar::inline v0::detail {

inline std::uint32_t f32_bits(float x) { return std::bit_cast<std::uint32_t>(x); }
inline float bits_f32(std::uint32_t b) { return std::bit_cast<float>(b); }

// bf16, round to nearest even. NaN stays NaN (quieted); a finite value that would round
// to infinity saturates to the largest bf16 of its sign instead.
inline std::uint32_t bf16_encode(float x) {
  const std::uint32_t b = f32_bits(x);
  if ((b & 0x7F800000u) == 0x7F800000u) return (b >> 16) | ((b & 0x007FFFFFu) ? 0x40u : 0u);
  std::uint32_t h = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  if ((h & 0x7F80u) == 0x7F80u) h = ((b >> 16) & 0x8000u) | 0x7F7Fu;
  return h;
}

inline float bf16_decode(std::uint32_t h) { return bits_f32(h << 16); }

// The scale exponent k of an f16 block: the largest finite magnitude m maps to
// m·2^-k in [2^14, 2^15). Blocks with no normal finite value use k = 0.
inline std::int32_t f16_block_shift(const float* x, std::size_t n) {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = f32_bits(x[i]) & 0x7FFFFFFFu;
    if (a < 0x7F800000u) m = std::max(m, a);
  }
  if (m < 0x00800000u) return 0;
  return static_cast<std::int32_t>(m >> 23) - 127 - 14;
}

// x·2^-k rounded to f16 (nearest even). Infinities and NaNs keep their kind; f32
// subnormals become zero.
inline std::uint32_t f16_encode(float x, std::int32_t k) {
  const std::uint32_t b = f32_bits(x);
  const std::uint32_t s = (b >> 16) & 0x8000u;
  const std::uint32_t e = (b >> 23) & 0xFFu;
  const std::uint32_t mant = b & 0x007FFFFFu;
  if (e == 0xFFu) return s | 0x7C00u | (mant ? 0x200u : 0u);
  if (e == 0u) return s;
  const std::int32_t eh = static_cast<std::int32_t>(e) - 127 - k + 15;
  if (eh >= 31) return s | 0x7BFFu;
  const std::uint32_t full = mant | 0x00800000u;
  if (eh >= 1) {
    const std::uint32_t r = (full + 0xFFFu + ((full >> 13) & 1u)) >> 13;
    std::uint32_t h = (static_cast<std::uint32_t>(eh) << 10) + (r - 0x400u);
    if (h >= 0x7C00u) h = 0x7BFFu;
    return s | h;
  }
  const std::int32_t shift = 14 - eh;
  if (shift > 24) return s;
  const std::uint32_t r = (full + ((1u << (shift - 1)) - 1u) + ((full >> shift) & 1u)) >> shift;
  return s | r;
}

// The f16 value h times 2^k, exactly; results below f32's normal range become zero and
// results past its largest finite value saturate to it.
inline float f16_decode(std::uint32_t h, std::int32_t k) {
  const std::uint32_t s = (h & 0x8000u) << 16;
  const std::uint32_t eh = (h >> 10) & 0x1Fu;
  const std::uint32_t m = h & 0x3FFu;
  if (eh == 31u) return bits_f32(s | 0x7F800000u | (m << 13));
  std::uint32_t sig;
  std::int32_t p;
  if (eh == 0u) {
    if (m == 0u) return bits_f32(s);
    sig = m;
    p = -24 + k;
  } else {
    sig = m | 0x400u;
    p = static_cast<std::int32_t>(eh) - 25 + k;
  }
  const std::int32_t msb = 31 - std::countl_zero(sig);
  const std::int32_t e32 = p + msb + 127;
  if (e32 <= 0) return bits_f32(s);
  if (e32 >= 255) return bits_f32(s | 0x7F7FFFFFu);
  const std::uint32_t mant32 = (sig << (23 - msb)) & 0x007FFFFFu;
  return bits_f32(s | (static_cast<std::uint32_t>(e32) << 23) | mant32);
}

// Sums are made in f32 with subnormals (magnitude below 2^-126) flushed to zero of their
// sign, every operand and every sum: Vulkan lets each driver flush or keep them in shader
// arithmetic, so the kernels flush them themselves, with integer operations, and devices
// of every driver agree bit for bit (docs/numerics.md). The sum of two values that are
// zero or normal is exact whenever it is subnormal, so no rounding mode enters.
inline float flush_subnormal(float x) {
  const std::uint32_t b = f32_bits(x);
  return (b & 0x7F800000u) == 0u ? bits_f32(b & 0x80000000u) : x;
}

inline float add_flushed(float a, float b) { return flush_subnormal(flush_subnormal(a) + flush_subnormal(b)); }

// Encodes `count` values into wire_words(w, count) words at `out`.
inline void encode_piece(Wire w, const float* x, std::size_t count, std::uint32_t* out) {
  if (w == Wire::f32) {
    for (std::size_t i = 0; i < count; ++i) out[i] = f32_bits(x[i]);
    return;
  }
  const std::size_t data = wire_data_words(w, count);
  for (std::size_t b = 0; b * wire_block < count; ++b) {
    const std::size_t lo = b * wire_block;
    const std::size_t hi = std::min(count, lo + wire_block);
    const std::int32_t k = w == Wire::f16 ? f16_block_shift(x + lo, hi - lo) : 0;
    if (w == Wire::f16) out[data + b] = static_cast<std::uint32_t>(k);
    for (std::size_t i = lo; i < hi; i += 2) {
      const float a = x[i];
      const float c = i + 1 < count ? x[i + 1] : 0.0f;
      out[i / 2] = w == Wire::bf16 ? (bf16_encode(a) | (bf16_encode(c) << 16))
                                   : (f16_encode(a, k) | (f16_encode(c, k) << 16));
    }
  }
}

// Decodes `count` values from the wire words at `in`.
inline void decode_piece(Wire w, const std::uint32_t* in, std::size_t count, float* out) {
  const std::size_t data = wire_data_words(w, count);
  for (std::size_t i = 0; i < count; ++i) {
    if (w == Wire::f32) {
      out[i] = bits_f32(in[i]);
      continue;
    }
    const std::uint32_t half = (in[i / 2] >> ((i & 1) * 16)) & 0xFFFFu;
    out[i] = w == Wire::bf16
                 ? bf16_decode(half)
                 : f16_decode(half, static_cast<std::int32_t>(in[data + i / wire_block]));
  }
}

}  // namespace tpar::inline v0::detail
