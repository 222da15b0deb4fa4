#version 450
// Stands in for a decode matmul: reads every 16-byte word of the weights once (grid-stride,
// so the work groups sweep the buffer from its start, as a matrix-vector product's rows
// go), sums them, and writes one sum a work group for the host to check.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) readonly buffer W { uvec4 w[]; } wb;
layout(std430, set = 0, binding = 1) buffer O { uint v[]; } o;
layout(push_constant) uniform P { uint first; uint count; uint unused0; uint unused1; } p;
shared uint part[256];
void main() {
  uint acc = 0;
  const uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  for (uint i = gl_GlobalInvocationID.x; i < p.count; i += stride) {
    const uvec4 x = wb.w[p.first + i];
    acc += x.x + x.y + x.z + x.w;
  }
  part[gl_LocalInvocationID.x] = acc;
  barrier();
  for (uint s = 128; s > 0; s >>= 1) {
    if (gl_LocalInvocationID.x < s) part[gl_LocalInvocationID.x] += part[gl_LocalInvocationID.x + s];
    barrier();
  }
  if (gl_LocalInvocationID.x == 0) o.v[2048 + gl_WorkGroupID.x] = part[0];
}
