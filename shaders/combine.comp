#version 450
#extension GL_GOOGLE_include_directive : require
// combine — one step of the ring. in = dec(wire piece at in_off), user = user.v[user_off + i].
//   mode 0 ADD_FWD:    acc = user + in (f32, subnormals flushed: add_flushed in
//                      wire.glsl); enc(acc) to out_off. user.v is not written.
//   mode 1 COPY:       the wire words at in_off to out_off, verbatim (f16 scales too).
//   mode 2 ADD_FINAL:  acc = user + in; w = enc(acc) to out_off; user = dec(w), so the
//                      owner keeps exactly what its peers will decode.
//   mode 3 COPY_FINAL: as COPY, and user = in.
//   mode 4 UNPACK:     user = in; nothing is written to scratch.
#include "piece.glsl"

const uint ADD_FWD = 0u;
const uint COPY = 1u;
const uint ADD_FINAL = 2u;
const uint COPY_FINAL = 3u;
const uint UNPACK = 4u;

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint n = pc.count;
  const uint mode = pc.mode;
  const uint nblocks = piece_blocks(n);
  const bool adds = mode == ADD_FWD || mode == ADD_FINAL;
  const bool scaled = WIRE == WIRE_F16 && adds;
  if (scaled) block_max_init();
  uint it = 0u;
  for (uint b = gl_WorkGroupID.x; b < nblocks; b += gl_NumWorkGroups.x, ++it) {
    const uvec2 e = pair_elems(b, t);
    const bvec2 valid = lessThan(e, uvec2(n));
    const uvec2 in_raw = load_raw(pc.in_off, n, b, t);
    if (!adds) {
      if (mode != UNPACK) store_raw(pc.out_off, n, b, t, in_raw);
      if (mode != COPY) store_user(e, valid, decode_raw(in_raw));
      continue;
    }
    const vec2 acc = add_flushed(load_user(e, valid), decode_raw(in_raw));
    const int k = scaled ? block_shift(acc, valid, it) : 0;
    const uvec2 out_raw = encode_raw(acc, valid, k);
    store_raw(pc.out_off, n, b, t, out_raw);
    if (mode == ADD_FINAL) store_user(e, valid, decode_raw(out_raw));
  }
}
