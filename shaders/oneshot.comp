#version 450
#extension GL_GOOGLE_include_directive : require
// oneshot — the sum of every device's piece at once:
//   user.v[user_off + i] = sum over j < nseg with bit j of mask set, ascending j, of
//   dec(segment j)_i.
// Where segment j is:
//   mode 0 SCRATCH: the wire piece at scratch in_off + j·seg_words (the peers' pieces
//                   copied there first);
//   mode 1 DIRECT:  for j == self, the piece at scratch out_off; for any other j, the
//                   piece at in_off of peer[j] (source j's host staging, read in place:
//                   no copy, no barrier). Needs nseg <= MAX_DIRECT_PEERS.
// The sum starts from the first contributing segment's value (so -0 stays -0) and adds
// the others in order, in f32 with subnormals flushed (flush_subnormal, wire.glsl); with
// no contributing segment it is +0.
#include "piece.glsl"

const uint SCRATCH = 0u;
const uint DIRECT = 1u;
const uint MAX_DIRECT_PEERS = 8u;

// Source j's host staging for the call, as this device sees it (DIRECT).
layout(set = 0, binding = 3, std430) readonly buffer Peer {
  uint w[];
} peer[MAX_DIRECT_PEERS];

// Constant indices only: dynamic indexing of a buffer array is an optional feature.
uint peer_word(uint j, uint i) {
  switch (j) {
    case 0u: return peer[0].w[i];
    case 1u: return peer[1].w[i];
    case 2u: return peer[2].w[i];
    case 3u: return peer[3].w[i];
    case 4u: return peer[4].w[i];
    case 5u: return peer[5].w[i];
    case 6u: return peer[6].w[i];
    default: return peer[7].w[i];
  }
}

// load_raw (piece.glsl) for a piece in peer[j].
uvec2 load_raw_peer(uint j, uint off, uint n, uint b, uint t) {
  if (WIRE == WIRE_F32) {
    const uvec2 e = pair_elems(b, t);
    return uvec2(e.x < n ? peer_word(j, off + e.x) : 0u, e.y < n ? peer_word(j, off + e.y) : 0u);
  }
  const uint dw = piece_data_words(n);
  const uint i = b * GROUP_SIZE + t;
  const uint word = i < dw ? peer_word(j, off + i) : 0u;
  return uvec2(word, WIRE == WIRE_F16 ? peer_word(j, off + dw + b) : 0u);
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint n = pc.count;
  const uint nblocks = piece_blocks(n);
  const bool direct = pc.mode == DIRECT;
  const uint nseg = min(pc.nseg, direct ? MAX_DIRECT_PEERS : 32u);
  const uint mask = pc.mask;
  for (uint b = gl_WorkGroupID.x; b < nblocks; b += gl_NumWorkGroups.x) {
    const uvec2 e = pair_elems(b, t);
    const bvec2 valid = lessThan(e, uvec2(n));
    vec2 acc = vec2(0.0);
    bool first = true;
    for (uint j = 0u; j < nseg; ++j) {
      if (((mask >> j) & 1u) == 0u) continue;
      uvec2 r;
      if (!direct) r = load_raw(pc.in_off + j * pc.seg_words, n, b, t);
      else if (j == pc.self) r = load_raw(pc.out_off, n, b, t);
      else r = load_raw_peer(j, pc.in_off, n, b, t);
      const vec2 x = flush_subnormal(decode_raw(r));
      acc = first ? x : add_flushed(acc, x);
      first = false;
    }
    store_user(e, valid, acc);
  }
}
