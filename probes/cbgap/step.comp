#version 450
// One dependent step: every invocation updates one word of the buffer the step before wrote.
layout(local_size_x = 256) in;
layout(std430, set = 0, binding = 0) buffer B { uint v[]; } b;
layout(push_constant) uniform P { uint nwords; uint k; } p;
void main() {
  uint i = gl_GlobalInvocationID.x;
  if (i < p.nwords) b.v[i] = b.v[i] * 3u + p.k;
}
