#version 450
// chain_step — one step of tpar-bench's chain (--chain): the work a device does between
// two AllReduces, standing in for half a transformer layer. It reads `weight_vec4s`
// vec4s of a weights buffer, as a decode matmul reads its weight matrix (each work group
// a contiguous run, invocations striding 256 apart), and rewrites the span from the last
// sum: x <- ((x + 1024) * 5 + device + step + i) mod 17 - 8 for integers x >= -1024,
// small integers that any summation order sums exactly, so the host checks every step.
// The weights are zeros; their sum feeds the span only where it equals a value zeros
// never sum to, so the reads cannot be dropped and change nothing.
// Bindings: 0 the span (f32), 1 the weights. Any number of work groups is correct.
layout(local_size_x = 256, local_size_y = 1, local_size_z = 1) in;

layout(set = 0, binding = 0) buffer Span { float v[]; } span;
layout(set = 0, binding = 1) readonly buffer Weights { vec4 w[]; } weights;

layout(push_constant) uniform Args {
  uint count;         // values in the span
  uint device;
  uint step;
  uint weight_vec4s;  // vec4s of weights read by the whole dispatch
} pc;

void main() {
  const uint groups = gl_NumWorkGroups.x;
  const uint g = gl_WorkGroupID.x;
  const uint l = gl_LocalInvocationID.x;
  const uint per = (pc.weight_vec4s + groups - 1u) / groups;
  const uint begin = g * per;
  const uint end = min(begin + per, pc.weight_vec4s);
  vec4 acc = vec4(0.0);
  for (uint i = begin + l; i < end; i += 256u) acc += weights.w[i];
  const float total = acc.x + acc.y + acc.z + acc.w;
  for (uint i = g * 256u + l; i < pc.count; i += groups * 256u) {
    const uint x = uint(int(span.v[i]) + 1024);
    const uint y = (x * 5u + pc.device + pc.step + i) % 17u;
    span.v[i] = float(int(y) - 8) + (total == 1234567.0 ? total : 0.0);
  }
}
