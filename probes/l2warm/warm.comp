#version 450
// Reads p.count 16-byte words of the weights from p.first (grid-stride) and keeps nothing:
// the result is stored only where it equals a value no sum of the probe's data takes, so
// the loads stay and the reads' only effect is the lines they leave in the caches.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer W { uvec4 w[]; } wb;
layout(std430, set = 0, binding = 1) buffer O { uint v[]; } o;
layout(push_constant) uniform P { uint first; uint count; uint unused0; uint unused1; } p;
void main() {
  uvec4 acc = uvec4(0);
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) acc ^= wb.w[p.first + i];
  if (acc.x == 0xdeadbeefu && acc.y == 0x0badf00du && acc.z == 0x8badf00du && acc.w == 0xfeedfaceu) o.v[0] = acc.x;
}
