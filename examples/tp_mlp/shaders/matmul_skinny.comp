#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_skinny — C = act(A . B^T) for at most 8 tokens (decode): a matrix-vector
// product, bound by reading A once. Work group: 16 x 16 invocations, one row of A per 16
// (so a 32-wide warp reads two 64-byte runs of two rows at a time). Lane l sums the
// products k = l, l + 16, l + 32, ... in that order, for every token at once; after one
// barrier, invocation n of the row adds the 16 lane sums of token n in lane order. The
// order depends only on K. (A tree of barriers instead would be as fast on a GPU and
// several times slower on lavapipe, whose barriers are costly.)
// Dispatch: (ceil(M / 16), 1, 1); N must be <= 8.
#include "matmul_common.glsl"

layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;

const uint LANES = 16u;  // invocations per row
const uint ROWS = 16u;   // rows per work group
const uint NMAX = 8u;    // tokens at most

shared float partial[ROWS][NMAX][LANES];

void main() {
  const uint lane = gl_LocalInvocationID.x;
  const uint row = gl_LocalInvocationID.y;
  const uint m = gl_WorkGroupID.x * ROWS + row;
  const uint n_tok = min(pc.N, NMAX);

  float acc[NMAX];
  for (uint n = 0u; n < NMAX; ++n) acc[n] = 0.0;
  if (m < pc.M) {
    const uint base = m * pc.K;
    for (uint k = lane; k < pc.K; k += LANES) {
      const float av = a[base + k];
      for (uint n = 0u; n < NMAX; ++n)
        if (n < n_tok) acc[n] += av * b[n * pc.K + k];
    }
  }
  for (uint n = 0u; n < NMAX; ++n) partial[row][n][lane] = acc[n];
  barrier();
  if (lane < n_tok && m < pc.M) {
    float sum = 0.0;
    for (uint l = 0u; l < LANES; ++l) sum += partial[row][lane][l];
    c[lane * pc.ldc + pc.c_off + m] = activate(sum);
  }
}
