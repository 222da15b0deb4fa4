// What pack.comp, combine.comp and oneshot.comp share: the work-group size, the wire
// (specialization constant 0), descriptor set 0, the push constants, and how one
// invocation reads and writes its part of a wire piece.
//
// A piece of n values is worked on in blocks of WIRE_BLOCK = 512 values (the f16 scale
// blocks), one block at a time per work group, 256 invocations per group, two values
// per invocation:
//   f32:       values t and t + 256 of the block, so neighbours touch neighbouring words;
//   bf16, f16: values 2t and 2t + 1, the low and high halves of data word 256·b + t.
// Values at or past n are never read from or written to user.v; on the wire they are 0.
#ifndef TPAR_PIECE_GLSL
#define TPAR_PIECE_GLSL

#include "wire.glsl"

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

// 0 = f32, 1 = bf16, 2 = f16 (block-scaled); see tpar::Wire.
layout(constant_id = 0) const uint WIRE = 0u;

// The caller's f32 tensor.
layout(set = 0, binding = 0, std430) buffer User {
  float v[];
} user;

// Wire data.
layout(set = 0, binding = 1, std430) buffer Scratch {
  uint w[];
} scratch;

// The device's own host staging for the call (what peers read): pack writes its output
// here too when pc.host_out_off is not NO_HOST_OUT.
layout(set = 0, binding = 2, std430) buffer Host {
  uint w[];
} host;

layout(push_constant, std430) uniform PC {
  uint count;      // values in this piece
  uint user_off;   // value offset into user.v
  uint in_off;     // word offset into scratch.w of the wire input piece
  uint out_off;    // word offset into scratch.w of the wire output piece
  uint mode;       // shader-specific
  uint nseg;       // oneshot: number of segments
  uint seg_words;  // oneshot: words between consecutive segments
  uint mask;       // oneshot: bit j set = segment j contributes
  uint host_out_off;  // pack: word offset into host.w for a second copy of the output, or NO_HOST_OUT
  uint self;          // oneshot DIRECT: this device's segment index
} pc;

const uint NO_HOST_OUT = 0xFFFFFFFFu;

const uint GROUP_SIZE = 256u;

uint piece_blocks(uint n) { return n / WIRE_BLOCK + ((n % WIRE_BLOCK) != 0u ? 1u : 0u); }

uint piece_data_words(uint n) { return WIRE == WIRE_F32 ? n : n / 2u + (n & 1u); }

// The two values invocation t handles in block b (indices into the piece).
uvec2 pair_elems(uint b, uint t) {
  const uint base = b * WIRE_BLOCK;
  return WIRE == WIRE_F32 ? uvec2(base + t, base + GROUP_SIZE + t)
                          : uvec2(base + 2u * t, base + 2u * t + 1u);
}

vec2 load_user(uvec2 e, bvec2 valid) {
  return vec2(valid.x ? user.v[pc.user_off + e.x] : 0.0,
              valid.y ? user.v[pc.user_off + e.y] : 0.0);
}

void store_user(uvec2 e, bvec2 valid, vec2 x) {
  if (valid.x) user.v[pc.user_off + e.x] = x.x;
  if (valid.y) user.v[pc.user_off + e.y] = x.y;
}

// The wire words behind an invocation's pair ("raw"): f32: the words of its two values;
// bf16: its data word in x; f16: its data word in x and the block's scale exponent in y.
// Words past the piece read as 0 and are never written.
uvec2 load_raw(uint off, uint n, uint b, uint t) {
  if (WIRE == WIRE_F32) {
    const uvec2 e = pair_elems(b, t);
    return uvec2(e.x < n ? scratch.w[off + e.x] : 0u, e.y < n ? scratch.w[off + e.y] : 0u);
  }
  const uint dw = piece_data_words(n);
  const uint i = b * GROUP_SIZE + t;
  const uint word = i < dw ? scratch.w[off + i] : 0u;
  return uvec2(word, WIRE == WIRE_F16 ? scratch.w[off + dw + b] : 0u);
}

// store_raw writes scratch.w, store_raw_host host.w; the same layout.
#define TPAR_DEFINE_STORE_RAW(NAME, BUF)                              \
  void NAME(uint off, uint n, uint b, uint t, uvec2 r) {              \
    if (WIRE == WIRE_F32) {                                           \
      const uvec2 e = pair_elems(b, t);                               \
      if (e.x < n) BUF.w[off + e.x] = r.x;                            \
      if (e.y < n) BUF.w[off + e.y] = r.y;                            \
      return;                                                         \
    }                                                                 \
    const uint dw = piece_data_words(n);                              \
    const uint i = b * GROUP_SIZE + t;                                \
    if (i < dw) BUF.w[off + i] = r.x;                                 \
    if (WIRE == WIRE_F16 && t == 0u) BUF.w[off + dw + b] = r.y;       \
  }
TPAR_DEFINE_STORE_RAW(store_raw, scratch)
TPAR_DEFINE_STORE_RAW(store_raw_host, host)

vec2 decode_raw(uvec2 r) {
  if (WIRE == WIRE_F32) return uintBitsToFloat(r);
  if (WIRE == WIRE_BF16) return vec2(bf16_decode(r.x & 0xFFFFu), bf16_decode(r.x >> 16));
  const int k = int(r.y);
  return vec2(f16_decode(r.x & 0xFFFFu, k), f16_decode(r.x >> 16, k));
}

// Encodes a pair; values that are not valid (past the piece) encode as 0. k is the f16
// block's scale exponent (ignored for the other wires).
uvec2 encode_raw(vec2 x, bvec2 valid, int k) {
  if (WIRE == WIRE_F32) return floatBitsToUint(x);
  const float hi = valid.y ? x.y : 0.0;
  if (WIRE == WIRE_BF16) return uvec2(bf16_encode(x.x) | (bf16_encode(hi) << 16), 0u);
  return uvec2(f16_encode(x.x, k) | (f16_encode(hi, k) << 16), uint(k));
}

// f16 block scale: a work-group max-reduction in shared memory. Three slots rotate so
// one barrier per block suffices: iteration `it` gathers into slot it % 3 and clears
// slot (it + 1) % 3, whose last readers (iteration it - 2) all passed the barrier of
// iteration it - 1, and whose next writers (iteration it + 1) come after this
// iteration's barrier. Call block_max_init() once before the loop; both must be
// reached by the whole work group (uniform control flow).
shared uint s_block_max[3];

void block_max_init() {
  if (gl_LocalInvocationID.x == 0u) s_block_max[0] = 0u;
  barrier();
}

int block_shift(vec2 x, bvec2 valid, uint it) {
  const uint slot = it % 3u;
  if (gl_LocalInvocationID.x == 0u) s_block_max[(it + 1u) % 3u] = 0u;
  const uint m = max(valid.x ? f16_shift_key(x.x) : 0u, valid.y ? f16_shift_key(x.y) : 0u);
  if (m != 0u) atomicMax(s_block_max[slot], m);
  memoryBarrierShared();
  barrier();
  return f16_shift_of_max(s_block_max[slot]);
}

#endif  // TPAR_PIECE_GLSL
