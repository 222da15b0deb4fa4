// The wire encodings on the device: bit for bit what include/tpar/detail/wire_codec.hpp
// computes on the host (keep the two in step). Only integer operations and bit casts:
// packHalf2x16 and friends round as the implementation likes, so they are not used.
// Needs nothing beyond core GLSL 4.50.
#ifndef TPAR_WIRE_GLSL
#define TPAR_WIRE_GLSL

const uint WIRE_F32 = 0u;
const uint WIRE_BF16 = 1u;
const uint WIRE_F16 = 2u;

// Values per f16 scale block (tpar::wire_block).
const uint WIRE_BLOCK = 512u;

// bf16, round to nearest even. NaN stays NaN (quieted); a finite value that would round
// to infinity saturates to the largest bf16 of its sign.
uint bf16_encode(float x) {
  const uint b = floatBitsToUint(x);
  if ((b & 0x7F800000u) == 0x7F800000u)
    return (b >> 16) | ((b & 0x007FFFFFu) != 0u ? 0x40u : 0u);
  uint h = (b + 0x7FFFu + ((b >> 16) & 1u)) >> 16;
  if ((h & 0x7F80u) == 0x7F80u) h = ((b >> 16) & 0x8000u) | 0x7F7Fu;
  return h;
}

float bf16_decode(uint h) { return uintBitsToFloat(h << 16); }

// What one value contributes to its f16 block's maximum: its magnitude bits when finite,
// else 0. Magnitude bits of non-negative floats order like the floats.
uint f16_shift_key(float x) {
  const uint a = floatBitsToUint(x) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;
}

// f16_block_shift given the largest key of the block: the block's largest finite
// magnitude m maps to m·2^-k in [2^14, 2^15); no normal finite value gives k = 0.
int f16_shift_of_max(uint m) {
  if (m < 0x00800000u) return 0;
  return int(m >> 23) - 127 - 14;
}

// x·2^-k rounded to f16 (nearest even). Infinities and NaNs keep their kind; f32
// subnormals become zero.
uint f16_encode(float x, int k) {
  const uint b = floatBitsToUint(x);
  const uint s = (b >> 16) & 0x8000u;
  const uint e = (b >> 23) & 0xFFu;
  const uint mant = b & 0x007FFFFFu;
  if (e == 0xFFu) return s | 0x7C00u | (mant != 0u ? 0x200u : 0u);
  if (e == 0u) return s;
  const int eh = int(e) - 127 - k + 15;
  if (eh >= 31) return s | 0x7BFFu;
  const uint full = mant | 0x00800000u;
  if (eh >= 1) {
    const uint r = (full + 0xFFFu + ((full >> 13) & 1u)) >> 13;
    uint h = (uint(eh) << 10) + (r - 0x400u);
    if (h >= 0x7C00u) h = 0x7BFFu;
    return s | h;
  }
  const int shift = 14 - eh;
  if (shift > 24) return s;
  const uint r = (full + ((1u << uint(shift - 1)) - 1u) + ((full >> uint(shift)) & 1u)) >> uint(shift);
  return s | r;
}

// The f16 value h times 2^k, exactly; results below f32's normal range become zero and
// results past its largest finite value saturate to it.
float f16_decode(uint h, int k) {
  const uint s = (h & 0x8000u) << 16;
  const uint eh = (h >> 10) & 0x1Fu;
  const uint m = h & 0x3FFu;
  if (eh == 31u) return uintBitsToFloat(s | 0x7F800000u | (m << 13));
  uint sig;
  int p;
  if (eh == 0u) {
    if (m == 0u) return uintBitsToFloat(s);
    sig = m;
    p = -24 + k;
  } else {
    sig = m | 0x400u;
    p = int(eh) - 25 + k;
  }
  const int msb = findMSB(sig);
  const int e32 = p + msb + 127;
  if (e32 <= 0) return uintBitsToFloat(s);
  if (e32 >= 255) return uintBitsToFloat(s | 0x7F7FFFFFu);
  const uint mant32 = (sig << uint(23 - msb)) & 0x007FFFFFu;
  return uintBitsToFloat(s | (uint(e32) << 23) | mant32);
}

// Subnormals flushed to zero of their sign, with integer operations: every operand and
// every sum of tpar's kernels passes through it, so a driver's choice to flush or keep
// them in arithmetic changes nothing (flush_subnormal in wire_codec.hpp).
float flush_subnormal(float x) {
  const uint b = floatBitsToUint(x);
  return (b & 0x7F800000u) == 0u ? uintBitsToFloat(b & 0x80000000u) : x;
}

vec2 flush_subnormal(vec2 x) { return vec2(flush_subnormal(x.x), flush_subnormal(x.y)); }

vec2 add_flushed(vec2 a, vec2 b) { return flush_subnormal(flush_subnormal(a) + flush_subnormal(b)); }

#endif  // TPAR_WIRE_GLSL
