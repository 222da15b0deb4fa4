#version 450
// Modes wide-bar and wide-fresh: `groups` work groups, as a relay kernel has. Each round
// invocation 0 of every group polls the flag in the BAR, then the group reads its share
// of the payload as 16-byte loads (the BAR, or host memory at a new address every round),
// counts the words that differ from what the host wrote, and answers in its own answer
// slot in host memory. Bounded spin; status 0xdead<<16|round on timeout.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) coherent volatile buffer Flag { uint flag; } fb;
layout(std430, set = 0, binding = 1) coherent volatile buffer Payload { uvec4 data[]; } pb;
layout(std430, set = 0, binding = 2) coherent volatile buffer Out { uint a[]; } outb;
layout(push_constant) uniform P { uint rounds; uint spin_max; uint nwords; uint mode; uint regions; } p;
shared uint go;
shared uint badc;
void main() {
  const uint g = gl_WorkGroupID.x, groups = gl_NumWorkGroups.x;
  const uint per = p.nwords / 4u / groups;  // 16-byte units a group reads
  for (uint r = 1; r <= p.rounds; ++r) {
    if (gl_LocalInvocationIndex == 0) {
      uint s = 0;
      while (fb.flag < r && s < p.spin_max) s++;
      go = (s < p.spin_max) ? 1u : 0u;
      badc = 0;
    }
    memoryBarrierShared();
    memoryBarrierBuffer();
    barrier();
    if (go == 0u) {
      if (gl_LocalInvocationIndex == 0) { outb.a[g * 16u + 1u] = 0xdead0000u | r; memoryBarrierBuffer(); outb.a[g * 16u] = r; }
      return;
    }
    uint base = (r % p.regions) * (p.nwords / 4u) + g * per;
    uint bad = 0;
    for (uint i = gl_LocalInvocationIndex; i < per; i += 256) {
      uvec4 v = pb.data[base + i];
      uint w = (g * per + i) * 4u;
      uvec4 want = uvec4(r * 1000003u) + uvec4(w, w + 1u, w + 2u, w + 3u);
      bad += uint(v.x != want.x) + uint(v.y != want.y) + uint(v.z != want.z) + uint(v.w != want.w);
    }
    if (bad != 0) atomicAdd(badc, bad);
    memoryBarrierShared();
    barrier();
    if (gl_LocalInvocationIndex == 0) { outb.a[g * 16u + 1u] = badc; memoryBarrierBuffer(); outb.a[g * 16u] = r; }
    barrier();
  }
}
