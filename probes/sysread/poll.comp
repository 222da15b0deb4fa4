#version 450
// One work group. Each round: invocation 0 polls a flag word for the round's number
// (mode 0: plain loads of a flag the host writes into device-local host-visible memory;
// mode 1: atomicAdd(flag, 0) on a flag in host memory), then the group reads the round's
// payload from host memory (mode 0: plain loads; mode 1: atomicAdd(word, 0)) at region
// round % regions, counts the words that differ from what the host wrote, and answers
// through a flag in host memory. Bounded spin; status 0xdead<<16|round on timeout.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) coherent volatile buffer Flag { uint flag; } fb;
layout(std430, set = 0, binding = 1) coherent volatile buffer Payload { uint data[]; } pb;
layout(std430, set = 0, binding = 2) coherent volatile buffer Out { uint flag; uint status; } outb;
layout(push_constant) uniform P { uint rounds; uint spin_max; uint nwords; uint mode; uint regions; } p;
shared uint go;
shared uint badc;
void main() {
  for (uint r = 1; r <= p.rounds; ++r) {
    if (gl_LocalInvocationIndex == 0) {
      uint s = 0;
      if (p.mode == 1u) { while (atomicAdd(fb.flag, 0u) < r && s < p.spin_max) s++; }
      else { while (fb.flag < r && s < p.spin_max) s++; }
      go = (s < p.spin_max) ? 1u : 0u;
      badc = 0;
    }
    memoryBarrierShared();
    memoryBarrierBuffer();
    barrier();
    if (go == 0u) {
      if (gl_LocalInvocationIndex == 0) { outb.status = 0xdead0000u | r; memoryBarrierBuffer(); outb.flag = r; }
      return;
    }
    uint base = (r % p.regions) * p.nwords;
    uint bad = 0;
    for (uint i = gl_LocalInvocationIndex; i < p.nwords; i += 256) {
      uint v = (p.mode == 1u) ? atomicAdd(pb.data[base + i], 0u) : pb.data[base + i];
      if (v != r * 1000003u + i) bad++;
    }
    if (bad != 0) atomicAdd(badc, bad);
    memoryBarrierShared();
    barrier();
    if (gl_LocalInvocationIndex == 0) { outb.status = badc; memoryBarrierBuffer(); outb.flag = r; }
    barrier();
  }
}
