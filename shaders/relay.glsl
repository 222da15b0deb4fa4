// relay — one device's part of the relay (include/tpar/algo/relay.hpp): its contribution
// out to host memory, the sum back from its slot in its own memory, which the host
// writes while the kernel runs. relay.comp and relay_clock.comp build this file, the
// latter with TPAR_RELAY_CLOCK (bounds the wait by the device clock, VK_KHR_shader_clock).
//
// Bindings, for the call's slot set (SITE: for every slot set, see below):
//   0  user.v[]: the caller's f32 tensor (from user_off, count values);
//   1  slot.w[]: the device's slot (device-local, host-visible memory). Word SEQ: the
//      call's stamp, written by the host before submission; FLAG: the stamp of the sum
//      in the slot; ABORT: nonzero once the host gave up; the sum from word PAYLOAD;
//   2  pub: the device's publish area (host memory the host reads while the kernel
//      runs). header[ARRIVED]: the stamp of the last call this device started;
//      header[GAVE_UP]: the stamp of a call whose wait (in any work group) hit the spin
//      bound; header[SEEN] (u[4].x): the stamp of the last call whose sum work group 0
//      saw in the slot (the host checks that every kernel saw the sum it wrote); unit[i]:
//      (bits of value i, stamp), stored as one 8-byte word so the host never sees a
//      stamp without its value. With TPAR_RELAY_CLOCK, work group 0 also stamps the low
//      32 bits of the device clock (ns) into the header: u[1] = (stamp, kernel start),
//      u[2] = (its values published, the sum seen), u[3] = (its copy done, stamp), the
//      last written last, so the host reads a call's four times once both stamps match.
// Modes (bits of pc.mode):
//   CONTRIBUTE  write the user values into pub.unit, stamped;
//   ARRIVE      write the stamp into pub.header[ARRIVED] (the host writes a device's slot
//               only after it arrived: it has then finished with its slots' earlier sums);
//   COLLECT     wait until slot FLAG holds the stamp (ABORT, or the spin bound, ends the
//               wait with user.v untouched), then copy the sum into user.v;
//   SITE        a kernel recorded once into the host's own command buffers and run again
//               for later calls (a ride site, docs/design/relay-ride.md): bindings 1 and 2
//               span every slot set, and the call's slot set is read from slot word
//               in_off, which the host writes before each submission (NO_CALL: return at
//               once, touching nothing); seg_words is a slot set's size in slot words,
//               out_off its size in publish units of 8 bytes.
// An aborted call touches nothing. Work groups split the values in blocks of 512, in a
// grid-stride loop; every work group waits on its own, so the kernel needs all its
// groups running at once (the communicator dispatches at most 32).
#ifndef TPAR_RELAY_GLSL
#define TPAR_RELAY_GLSL

#ifdef TPAR_RELAY_CLOCK
#extension GL_EXT_shader_realtime_clock : require
#endif

layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0, std430) buffer User {
  float v[];
} user;

layout(set = 0, binding = 1, std430) coherent volatile buffer Slot {
  uint w[];
} slot;

// Volatile as well: on NVIDIA volatile accesses have system scope, so the stores leave
// the GPU while the kernel runs rather than when its caches are flushed.
// u[base + 0].x is header word ARRIVED, .y GAVE_UP; the units start at u[base + 32].
layout(set = 0, binding = 2, std430) coherent volatile buffer Publish {
  uvec2 u[];
} pub;

// tpar::KernelArgs; the relay reads count, user_off, mode and spin_bound.
layout(push_constant, std430) uniform PC {
  uint count;
  uint user_off;
  uint in_off;
  uint out_off;
  uint mode;
  uint nseg;
  uint seg_words;
  uint mask;
  uint host_out_off;
  uint self;
  uint spin_bound;  // clock variant: milliseconds; count variant: unused (2^32 polls)
} pc;

const uint SEQ = 0u;
const uint FLAG = 1u;
const uint ABORT = 2u;
const uint PAYLOAD = 64u;
const uint ARRIVED = 0u;
const uint GAVE_UP = 1u;

const uint UNITS = 32u;  // header_bytes / 8

const uint CONTRIBUTE = 1u;
const uint ARRIVE = 2u;
const uint COLLECT = 4u;
const uint SITE = 8u;
const uint NO_CALL = 0xFFFFFFFFu;

const uint GO = 0u;
const uint ABORTED = 1u;
const uint BOUND = 2u;

const uint BLOCK = 512u;

shared uint s_state;
shared uint s_seq;
shared uint s_set;

// Polls the slot until it holds the sum for `seq`, the host aborts, or the bound passes.
// The outcome is read from the slot once the loop is over, not carried out of it: a
// driver that ends long loops on its own (lavapipe stops every shader's loops after 65535
// iterations in all) leaves the loop by a path the compiler never saw, where a value
// carried out of the loop is undefined.
uint wait_for(uint seq, uint sb) {
#ifdef TPAR_RELAY_CLOCK
  // The device clock in nanoseconds (as on NVIDIA and lavapipe), summed from 32-bit
  // steps so that no 64-bit arithmetic is needed; read every 256 polls.
  uint last = clockRealtime2x32EXT().x;
  uint ns = 0u, ms = 0u;
#endif
  for (uint polls = 1u; polls != 0xFFFFFFFFu; ++polls) {
    if (slot.w[sb + FLAG] == seq || slot.w[sb + ABORT] != 0u) break;
#ifdef TPAR_RELAY_CLOCK
    if ((polls & 255u) == 0u) {
      const uint now = clockRealtime2x32EXT().x;
      ns += now - last;
      last = now;
      ms += ns / 1000000u;
      ns %= 1000000u;
      if (ms >= pc.spin_bound) break;
    }
#endif
  }
  if (slot.w[sb + FLAG] == seq) return GO;
  return slot.w[sb + ABORT] != 0u ? ABORTED : BOUND;
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  if (t == 0u) {
    s_set = (pc.mode & SITE) != 0u ? slot.w[pc.in_off] : 0u;
    const uint sb0 = s_set * pc.seg_words;
    s_state = s_set == NO_CALL ? ABORTED : slot.w[sb0 + ABORT] != 0u ? ABORTED : GO;
    s_seq = s_set == NO_CALL ? 0u : slot.w[sb0 + SEQ];
  }
  memoryBarrierShared();
  barrier();
  if (s_state != GO) return;
  const uint seq = s_seq;
#ifdef TPAR_RELAY_CLOCK
  const bool stamps = gl_WorkGroupID.x == 0u && t == 0u;
  const uint t_start = clockRealtime2x32EXT().x;
#endif
  // Where this call's slot set starts (0 unless SITE).
  const uint sb = (pc.mode & SITE) != 0u ? s_set * pc.seg_words : 0u;
  const uint pb = (pc.mode & SITE) != 0u ? s_set * pc.out_off : 0u;
  const uint n = pc.count;
  const uint nblocks = n / BLOCK + ((n % BLOCK) != 0u ? 1u : 0u);
  if ((pc.mode & ARRIVE) != 0u && gl_WorkGroupID.x == 0u && t == 0u) pub.u[pb].x = seq;
  if ((pc.mode & CONTRIBUTE) != 0u) {
    for (uint b = gl_WorkGroupID.x; b < nblocks; b += gl_NumWorkGroups.x) {
      const uint i0 = b * BLOCK + t;
      const uint i1 = i0 + BLOCK / 2u;
      if (i0 < n) pub.u[pb + UNITS + i0] = uvec2(floatBitsToUint(user.v[pc.user_off + i0]), seq);
      if (i1 < n) pub.u[pb + UNITS + i1] = uvec2(floatBitsToUint(user.v[pc.user_off + i1]), seq);
    }
  }
  if ((pc.mode & COLLECT) == 0u) return;
  barrier();  // every invocation past its publishing before s_state is written again
#ifdef TPAR_RELAY_CLOCK
  const uint t_published = clockRealtime2x32EXT().x;
#endif
  if (t == 0u) {
    s_state = wait_for(seq, sb);
    // What this kernel saw, for the host: a work group that gave up leaves its values
    // untouched, which the host must report rather than pass for a sum.
    if (s_state == GO && gl_WorkGroupID.x == 0u) pub.u[pb + 4u].x = seq;
    if (s_state == BOUND) pub.u[pb].y = seq;
  }
  memoryBarrierShared();
  memoryBarrierBuffer();
  barrier();
#ifdef TPAR_RELAY_CLOCK
  const uint t_seen = clockRealtime2x32EXT().x;
#endif
  if (s_state != GO) return;
  for (uint b = gl_WorkGroupID.x; b < nblocks; b += gl_NumWorkGroups.x) {
    const uint i0 = b * BLOCK + t;
    const uint i1 = i0 + BLOCK / 2u;
    if (i0 < n) user.v[pc.user_off + i0] = uintBitsToFloat(slot.w[sb + PAYLOAD + i0]);
    if (i1 < n) user.v[pc.user_off + i1] = uintBitsToFloat(slot.w[sb + PAYLOAD + i1]);
  }
#ifdef TPAR_RELAY_CLOCK
  barrier();  // work group 0's copy done
  if (stamps) {
    pub.u[pb + 1u] = uvec2(seq, t_start);
    pub.u[pb + 2u] = uvec2(t_published, t_seen);
    memoryBarrierBuffer();
    pub.u[pb + 3u] = uvec2(clockRealtime2x32EXT().x, seq);
  }
#endif
}

#endif  // TPAR_RELAY_GLSL
