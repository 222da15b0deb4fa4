#version 450
#extension GL_GOOGLE_include_directive : require
// pack — user values to a wire piece.
//   mode 0 ENCODE: the wire piece at out_off = enc(user.v[user_off + i]), i < count.
//   mode 1 ZERO:   an all-zero piece of count values at out_off (data and f16 scales),
//                  for a device that contributes nothing. user.v is not touched.
// Either mode also writes the piece to host.w at host_out_off unless that is NO_HOST_OUT:
// the device publishes it to its peers with no copy (the host staging is imported
// host memory; the batch's barrier makes the writes visible to the host).
#include "piece.glsl"

const uint ENCODE = 0u;
const uint ZERO = 1u;

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint n = pc.count;
  const uint nblocks = piece_blocks(n);
  const bool encode = pc.mode == ENCODE;
  const bool scaled = WIRE == WIRE_F16 && encode;
  if (scaled) block_max_init();
  uint it = 0u;
  for (uint b = gl_WorkGroupID.x; b < nblocks; b += gl_NumWorkGroups.x, ++it) {
    uvec2 r = uvec2(0u);
    if (encode) {
      const uvec2 e = pair_elems(b, t);
      const bvec2 valid = lessThan(e, uvec2(n));
      const vec2 x = load_user(e, valid);
      const int k = scaled ? block_shift(x, valid, it) : 0;
      r = encode_raw(x, valid, k);
    }
    store_raw(pc.out_off, n, b, t, r);
    if (pc.host_out_off != NO_HOST_OUT) store_raw_host(pc.host_out_off, n, b, t, r);
  }
}
