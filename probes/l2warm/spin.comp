#version 450
// Stands in for a relay kernel waiting for the host's sum: one invocation a work group
// spins on the device clock (ns) for p.ns, then writes how long it spun.
#extension GL_EXT_shader_realtime_clock : require
layout(local_size_x = 64) in;
layout(std430, set = 0, binding = 1) buffer O { uint v[]; } o;
layout(push_constant) uniform P { uint ns; uint unused0; uint unused1; uint unused2; } p;
void main() {
  if (gl_LocalInvocationID.x != 0) return;
  const uint start = clockRealtime2x32EXT().x;
  uint now = start;
  while (now - start < p.ns) now = clockRealtime2x32EXT().x;
  o.v[1024 + gl_WorkGroupID.x] = now - start;
}
