#version 450
#pragma use_vulkan_memory_model
#extension GL_KHR_memory_scope_semantics : require
// Mode 2 of poll.comp under the Vulkan memory model: invocation 0 polls a flag in host
// memory with an acquire load that makes the buffer's writes visible at queue-family
// scope, then the group reads the round's payload (host memory, region round % regions)
// with plain loads.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) buffer Flag { uint flag; } fb;
layout(std430, set = 0, binding = 1) buffer Payload { uint data[]; } pb;
layout(std430, set = 0, binding = 2) buffer Out { uint flag; uint status; } outb;
layout(push_constant) uniform P { uint rounds; uint spin_max; uint nwords; uint mode; uint regions; } p;
shared uint go;
shared uint badc;
void main() {
  for (uint r = 1; r <= p.rounds; ++r) {
    if (gl_LocalInvocationIndex == 0) {
      uint s = 0;
      while (atomicLoad(fb.flag, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsAcquire | gl_SemanticsMakeVisible) < r && s < p.spin_max) s++;
      go = (s < p.spin_max) ? 1u : 0u;
      badc = 0;
    }
    barrier();
    if (go == 0u) {
      if (gl_LocalInvocationIndex == 0) { atomicStore(outb.status, 0xdead0000u | r, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsRelease | gl_SemanticsMakeAvailable); atomicStore(outb.flag, r, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsRelease | gl_SemanticsMakeAvailable); }
      return;
    }
    uint base = (r % p.regions) * p.nwords;
    uint bad = 0;
    for (uint i = gl_LocalInvocationIndex; i < p.nwords; i += 256) {
      uint v = atomicLoad(pb.data[base + i], gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsAcquire | gl_SemanticsMakeVisible);
      if (v != r * 1000003u + i) bad++;
    }
    if (bad != 0) atomicAdd(badc, bad);
    barrier();
    if (gl_LocalInvocationIndex == 0) {
      atomicStore(outb.status, badc, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsRelease | gl_SemanticsMakeAvailable);
      atomicStore(outb.flag, r, gl_ScopeQueueFamily, gl_StorageSemanticsBuffer, gl_SemanticsRelease | gl_SemanticsMakeAvailable);
    }
    barrier();
  }
}
