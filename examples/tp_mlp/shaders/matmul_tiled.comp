#version 450
#extension GL_GOOGLE_include_directive : require
// matmul_tiled — C = act(A . B^T) for many tokens (prefill). Work group: 16 x 16
// invocations computing a 64 (rows of A) x 64 (tokens) tile of C, 4 x 4 outputs each.
// K is walked in steps of 16: the group stages a 64 x 16 slice of A and of B in shared
// memory (transposed, padded against bank conflicts), then every invocation multiplies
// from shared memory. Each output sums its products in plain order k = 0, 1, ..., K-1.
// Dispatch: (ceil(M / 64), ceil(N / 64), 1).
#include "matmul_common.glsl"

layout(local_size_x = 16, local_size_y = 16, local_size_z = 1) in;

const uint BM = 64u;  // rows of A per tile
const uint BN = 64u;  // tokens per tile
const uint BK = 16u;  // K per step
const uint TM = 4u;   // outputs per invocation along M (strided by 16)
const uint TN = 4u;   // outputs per invocation along N (strided by 16)

shared float As[BK][BM + 1u];
shared float Bs[BK][BN + 1u];

void main() {
  const uint tx = gl_LocalInvocationID.x;
  const uint ty = gl_LocalInvocationID.y;
  const uint tid = ty * 16u + tx;
  const uint m0 = gl_WorkGroupID.x * BM;
  const uint n0 = gl_WorkGroupID.y * BN;

  float acc[TM][TN];
  for (uint i = 0u; i < TM; ++i)
    for (uint j = 0u; j < TN; ++j) acc[i][j] = 0.0;

  for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
    // 64 x 16 values of A and of B, 4 of each per invocation; 16 consecutive
    // invocations read 16 consecutive values of one row.
    for (uint l = 0u; l < 4u; ++l) {
      const uint idx = tid + l * 256u;
      const uint r = idx / BK;
      const uint kk = idx % BK;
      const uint gk = k0 + kk;
      const uint gm = m0 + r;
      const uint gn = n0 + r;
      As[kk][r] = (gm < pc.M && gk < pc.K) ? a[gm * pc.K + gk] : 0.0;
      Bs[kk][r] = (gn < pc.N && gk < pc.K) ? b[gn * pc.K + gk] : 0.0;
    }
    barrier();
    // Past K's end the staged values are zeros; they are not added, so that an output's
    // sum is the same whatever K's remainder modulo 16.
    const uint steps = min(BK, pc.K - k0);
    for (uint kk = 0u; kk < steps; ++kk) {
      float av[TM];
      float bv[TN];
      for (uint i = 0u; i < TM; ++i) av[i] = As[kk][tx + 16u * i];
      for (uint j = 0u; j < TN; ++j) bv[j] = Bs[kk][ty + 16u * j];
      for (uint i = 0u; i < TM; ++i)
        for (uint j = 0u; j < TN; ++j) acc[i][j] += av[i] * bv[j];
    }
    barrier();
  }

  for (uint i = 0u; i < TM; ++i) {
    const uint m = m0 + tx + 16u * i;
    if (m >= pc.M) continue;
    for (uint j = 0u; j < TN; ++j) {
      const uint n = n0 + ty + 16u * j;
      if (n < pc.N) c[n * pc.ldc + pc.c_off + m] = activate(acc[i][j]);
    }
  }
}
