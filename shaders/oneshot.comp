#version 450
#extension GL_GOOGLE_include_directive : require
// oneshot — the sum of every device's piece at once:
//   user.v[user_off + i] = sum over j < nseg with bit j of mask set, ascending j, of
//   dec(segment j)_i, where segment j is the wire piece at in_off + j·seg_words.
// The sum starts from the first contributing segment's value (so -0 stays -0) and adds
// the others in order, in f32; with no contributing segment it is +0. mode is unused.
#include "piece.glsl"

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint n = pc.count;
  const uint nblocks = piece_blocks(n);
  const uint nseg = min(pc.nseg, 32u);
  const uint mask = pc.mask;
  for (uint b = gl_WorkGroupID.x; b < nblocks; b += gl_NumWorkGroups.x) {
    const uvec2 e = pair_elems(b, t);
    const bvec2 valid = lessThan(e, uvec2(n));
    vec2 acc = vec2(0.0);
    bool first = true;
    for (uint j = 0u; j < nseg; ++j) {
      if (((mask >> j) & 1u) == 0u) continue;
      const vec2 x = decode_raw(load_raw(pc.in_off + j * pc.seg_words, n, b, t));
      acc = first ? x : acc + x;
      first = false;
    }
    store_user(e, valid, acc);
  }
}
