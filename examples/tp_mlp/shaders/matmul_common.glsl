// What tp-mlp's two matmul kernels share: the bindings, the push constants and the
// activation applied to each output (fused into the epilogue of the up projection).
//
// Both compute, for the rows [0, M) of one chunk of A:
//     C[n * ldc + c_off + m] = act( sum_{k<K} A[m * K + k] * B[n * K + k] ),  n < N
// A is row-major [M x K] (weights: one chunk of rows), B is [N x K] and C is [N x ldc]
// (activations, token-major: each token's values contiguous, as ggml stores them).
//
// The order in which a kernel sums the K products of one output depends only on K and
// the kernel, never on M, on the chunk, or on where the output sits in its tile: a row
// of A gives bit for bit the same output whichever device or split computes it.

layout(std430, set = 0, binding = 0) readonly buffer MatA { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer MatB { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer MatC { float c[]; };

layout(push_constant) uniform Args {
  uint M;      // rows of A in this chunk
  uint N;      // tokens
  uint K;      // the summed dimension
  uint ldc;    // row stride of C (all rows of the matrix, over every chunk)
  uint c_off;  // where this chunk's rows start in a row of C
  uint act;    // ACT_NONE, ACT_SILU or ACT_GELU
} pc;

const uint ACT_NONE = 0u;
const uint ACT_SILU = 1u;  // x * sigmoid(x)
const uint ACT_GELU = 2u;  // tanh form: 0.5 x (1 + tanh(z)) = x * sigmoid(2z), z = sqrt(2/pi) (x + 0.044715 x^3)

float activate(float x) {
  if (pc.act == ACT_SILU) return x / (1.0 + exp(-x));
  if (pc.act == ACT_GELU) {
    const float z = 0.7978845608 * (x + 0.044715 * x * x * x);
    return x / (1.0 + exp(-2.0 * z));
  }
  return x;
}
