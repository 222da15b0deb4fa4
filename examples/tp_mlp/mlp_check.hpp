// tp-mlp's numerics: the deterministic inputs, and the bound within which the
// tensor-parallel result must match the single-device one. Pure host code, no Vulkan.
//
// The MLP is y = W_down . act(W_up . x) with x [T x H], W_up [I x H], W_down [H x I]
// (all row-major, activations token-major: x[t][k]). Device d holds rows [o_d, o_d + I_d)
// of W_up and the same columns of W_down, computes a_d = act(W_up[o_d..] . x) and the
// partial y_d = W_down[:, o_d..] . a_d, and the AllReduce sums the partials.
//
// Why the results differ at all: the single-device run sums the I products of an output
// in one order, the split run sums I_d products per device and then adds the n partials
// (through the AllReduce's wire). Both are f32 sums of the same exact products; each is
// within a classical bound of the exact value, so their difference is within the sum of
// the two bounds. For one output y[t][h], with u = 2^-24 (f32 unit roundoff) and
// gamma(k) = k u / (1 - k u) (Higham, Accuracy and Stability of Numerical Algorithms,
// Lemma 3.1 and section 3.1: a sum of k products, in any order and with or without fused
// multiply-add, is within gamma(k) * sum |products| of the exact value):
//
//   single device:  |y_ref - sum_i W[h][i] a_ref[i]|      <= gamma(I + 1) S_ref
//   device sums:    |p_d - sum_{i in d} W[h][i] a_dev[i]| <= gamma(I_d + 1) S_d
//   AllReduce:      |y - sum_d p_d|   <= n (u_wire + u) sum_d |p_d|       (docs/numerics.md)
//                   (+ n 2^-38 max over the f16 block of sum_d |p_d|, f16 wire only)
//   intermediates:  |sum_i W[h][i] (a_dev[i] - a_ref[i])| <= ||W[h]||_2 ||a_dev - a_ref||_2
//
// where S = sum_i |W[h][i] a[i]| <= ||W[h]||_2 ||a||_2 (Cauchy-Schwarz), sum_d |p_d| <=
// (1 + gamma(I_max + 1)) S_dev. So, per output,
//
//   bound[t][h] = ||W_down[h]||_2 * ( gamma(I + 1) ||a_ref[t]||_2
//                 + (gamma(I_max + 1) + n (u_wire + u)(1 + gamma(I_max + 1))) ||a_dev[t]||_2
//                 + ||a_dev[t] - a_ref[t]||_2 )  + f16 term + underflow floor.
//
// a_ref and a_dev are the activations read back from the devices, so the intermediate
// term is measured, not assumed: it is exactly 0 when every device computes its slice
// bit for bit as device 0 does (identical devices: same kernel, same order over K), and
// it covers devices of different kinds whose exp() or fma differ. The underflow floor
// covers f32 subnormal flushing (Vulkan allows it): 2^-126 per operation on the path.
//
// This is a guarantee, not an estimate, and therefore loose: rounding errors of random
// data grow like sqrt(k) u rather than k u, so the measured error is typically 10-100x
// below the bound (tp-mlp prints the ratio). It is still tight enough to catch a broken
// split: one missing or misplaced product of a small MLP moves an output by
// |W a| ~ 1/sqrt(I), far above the bound at test sizes.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tp_mlp {

enum class Act : std::uint32_t { none = 0, silu = 1, gelu = 2 };

// ---- deterministic inputs ----------------------------------------------------------

// What each generated tensor is, for the generator's key.
enum class Tensor : std::uint32_t { x = 1, w_up = 2, w_down = 3 };

inline std::uint64_t mix64(std::uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Element `index` (row-major in the whole, unsplit tensor) of a tensor: uniform in
// [-1, 1) on a grid of 2^-23, times `scale`. A function of (seed, tensor, index) only,
// so a device's slice holds exactly the values of the corresponding part of the whole.
inline float generated(std::uint64_t seed, Tensor tensor, std::uint64_t index, float scale) {
  const std::uint64_t key = mix64(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(tensor)));
  const std::uint64_t z = mix64(key + (index + 1) * 0x9e3779b97f4a7c15ULL);
  const float unit = static_cast<float>(static_cast<std::int64_t>(z >> 40) - (std::int64_t{1} << 23)) * 0x1p-23f;
  return unit * scale;
}

// Scales giving every sum unit variance per input: W_up ~ U(-1,1) sqrt(3/H) makes
// (W_up x)[i] ~ N(0, 1/3) for x ~ U(-1,1); W_down ~ U(-1,1) sqrt(3/I) likewise.
inline float up_scale(std::int64_t hidden) { return static_cast<float>(std::sqrt(3.0 / double(hidden))); }
inline float down_scale(std::int64_t intermediate) { return static_cast<float>(std::sqrt(3.0 / double(intermediate))); }

// ---- the bound ----------------------------------------------------------------------

inline constexpr double f32_unit_roundoff = 0x1p-24;

inline double gamma_k(double k) {
  const double ku = k * f32_unit_roundoff;
  return ku / (1.0 - ku);
}

struct BoundInputs {
  std::int64_t intermediate = 0;       // I
  std::int64_t largest_share = 0;      // I_max = max_d I_d
  std::size_t devices = 1;             // n
  double wire_unit_roundoff = 0;       // 0 (f32), 2^-8 (bf16), 2^-11 (f16)
  bool f16_wire = false;
};

// Per output: bound[t][h] = row_norm[h] * per_token[t] + floor.
struct OutputBound {
  std::vector<double> per_token;
  double floor = 0;

  double at(std::size_t t, double row_norm) const { return row_norm * per_token[t] + floor; }
};

// a_ref_norm[t] = ||a_ref[t]||_2, a_dev_norm[t] = ||a_dev[t]||_2 (the devices' slices,
// concatenated), delta_norm[t] = ||a_dev[t] - a_ref[t]||_2; max_row_norm = max_h ||W_down[h]||_2.
inline OutputBound output_bound(const BoundInputs& in, std::span<const double> a_ref_norm,
                                std::span<const double> a_dev_norm, std::span<const double> delta_norm,
                                double max_row_norm) {
  const double g_ref = gamma_k(double(in.intermediate) + 1.0);
  const double g_dev = gamma_k(double(in.largest_share) + 1.0);
  const double n = double(in.devices);
  const double wire = n * (in.wire_unit_roundoff + f32_unit_roundoff) * (1.0 + g_dev);
  OutputBound b;
  b.per_token.resize(a_ref_norm.size());
  double largest_partial_sum = 0;  // bounds sum_d |p_d| for every output
  for (std::size_t t = 0; t < a_ref_norm.size(); ++t) {
    b.per_token[t] = g_ref * a_ref_norm[t] + (g_dev + wire) * a_dev_norm[t] + delta_norm[t];
    largest_partial_sum = std::max(largest_partial_sum, (1.0 + g_dev) * max_row_norm * a_dev_norm[t]);
  }
  // Subnormal flushing: at most one 2^-126 per operation an output passes through.
  b.floor = 2.0 * (double(in.intermediate) + 2.0 * n + 2.0) * 0x1p-126;
  if (in.f16_wire) b.floor += n * 0x1p-38 * largest_partial_sum;
  return b;
}

// The bound for an intermediate value act(u) computed on two devices of different kinds
// (with identical devices the values must be bit-identical instead). u is a dot product
// of H terms: each device is within gamma(H + 1) ||W_up[i]|| ||x[t]|| of the exact one.
// act is Lipschitz with constant L (SiLU 1.0998, GELU 1.1290: max |act'|), and each
// device evaluates it within Vulkan's precision for exp (3 + 2|arg| ulp), one addition
// and one division (2.5 ulp): at most (7 + 2|arg|) ulp of |act(u)|, ulp <= 2^-23 |value|,
// with |arg| <= 2 * 0.8 (|u| + 0.045 |u|^3) for GELU and |u| for SiLU, |u| bounded by
// ||W_up[i]|| ||x[t]|| (Cauchy-Schwarz).
inline double intermediate_bound(Act act, std::int64_t hidden, double up_row_norm, double x_norm, double value_ref,
                                 double value_dev) {
  const double dot = up_row_norm * x_norm * (1.0 + gamma_k(double(hidden) + 1.0));
  const double du = 2.0 * gamma_k(double(hidden) + 1.0) * up_row_norm * x_norm;
  if (act == Act::none) return du;
  const double lipschitz = act == Act::silu ? 1.0998 : 1.1290;
  const double arg = act == Act::silu ? dot : 2.0 * 0.7978845608 * (dot + 0.044715 * dot * dot * dot);
  const double ulps = 7.0 + 2.0 * arg;
  return lipschitz * du + ulps * 0x1p-23 * (std::fabs(value_ref) + std::fabs(value_dev)) + 0x1p-120;
}

// ---- the exact MLP on the host --------------------------------------------------------
//
// The check above compares the split run with device 0's single-device run, which uses
// the same kernels; a kernel that is wrong the same way in both would pass it. So
// device 0's run is also compared with the MLP computed on the host in double precision
// (exact up to ~2^-53 relative, negligible here) for a few tokens: its intermediates
// within intermediate_bound() of the exact ones, and each output within
//   ||W_down[h]||_2 (gamma(I + 1) ||a_ref[t]||_2 + ||a_ref[t] - a_exact[t]||_2 + 2^-50 I ||a_exact[t]||_2)
// by the same argument as output_bound() (the last term: the host's own double rounding,
// generously), plus the same underflow floor.
inline OutputBound exact_bound(std::int64_t intermediate, std::span<const double> a_ref_norm, std::span<const double> delta_norm,
                               std::span<const double> a_exact_norm) {
  OutputBound b;
  const double g = gamma_k(double(intermediate) + 1.0);
  for (std::size_t t = 0; t < a_ref_norm.size(); ++t)
    b.per_token.push_back(g * a_ref_norm[t] + delta_norm[t] + 0x1p-50 * double(intermediate) * a_exact_norm[t]);
  b.floor = 2.0 * (double(intermediate) + 2.0) * 0x1p-126;
  return b;
}

inline double activate_exact(Act act, double u) {
  if (act == Act::silu) return u / (1.0 + std::exp(-u));
  if (act == Act::gelu) {
    const double z = 0.7978845608028654 * (u + 0.044715 * u * u * u);
    return u / (1.0 + std::exp(-2.0 * z));
  }
  return u;
}

struct ExactMlp {
  std::vector<std::uint32_t> tokens;  // which tokens
  std::vector<double> act;            // [tokens.size() x I]
  std::vector<double> y;              // [tokens.size() x H]
};

// Regenerates the weights row by row (2 H I values) and runs the MLP for `tokens`.
inline ExactMlp exact_mlp(std::uint64_t seed, std::int64_t hidden, std::int64_t intermediate, Act act,
                          std::vector<std::uint32_t> tokens) {
  const std::size_t H = std::size_t(hidden), I = std::size_t(intermediate), S = tokens.size();
  ExactMlp e;
  e.tokens = std::move(tokens);
  e.act.assign(S * I, 0.0);
  e.y.assign(S * H, 0.0);
  std::vector<double> x(S * H), row(std::max(H, I));
  for (std::size_t s = 0; s < S; ++s)
    for (std::size_t k = 0; k < H; ++k) x[s * H + k] = generated(seed, Tensor::x, std::uint64_t(e.tokens[s]) * H + k, 1.0f);
  const float su = up_scale(hidden), sd = down_scale(intermediate);
  for (std::size_t i = 0; i < I; ++i) {
    for (std::size_t k = 0; k < H; ++k) row[k] = generated(seed, Tensor::w_up, std::uint64_t(i) * H + k, su);
    for (std::size_t s = 0; s < S; ++s) {
      double u = 0;
      for (std::size_t k = 0; k < H; ++k) u += row[k] * x[s * H + k];
      e.act[s * I + i] = activate_exact(act, u);
    }
  }
  for (std::size_t h = 0; h < H; ++h) {
    for (std::size_t i = 0; i < I; ++i) row[i] = generated(seed, Tensor::w_down, std::uint64_t(h) * I + i, sd);
    for (std::size_t s = 0; s < S; ++s) {
      double y = 0;
      for (std::size_t i = 0; i < I; ++i) y += row[i] * e.act[s * I + i];
      e.y[s * H + h] = y;
    }
  }
  return e;
}

}  // namespace tp_mlp
