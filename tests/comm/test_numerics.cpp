// What the wires do at the edges of f32, per algorithm: subnormal inputs (below 2^-126)
// and sums past the largest finite f32. docs/numerics.md states what holds there; these
// tests check exactly that on the devices at hand, and print what they saw.
#include <doctest/doctest.h>
#include <tpar/comm/communicator.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"

#include <cfloat>
#include <cmath>
#include <bit>
#include <cstring>
#include <random>

using namespace tpar;
using namespace tpar_test;

namespace {

struct Seen {
  std::size_t values = 0, zero = 0, exact = 0, inf = 0, nan = 0, subnormal = 0;
  double worst_abs = 0;     // largest |result - exact sum| among finite results
  double worst_excess = 0;  // largest |error| minus the floor-extended bound (<= 0: within)
  bool identical = true;
};

// The documented bound, extended below f32's normal range by an absolute n * 2^-126.
double bound_with_floor(Wire wire, std::size_t n, double magnitude) {
  return double(n) * (wire_unit_roundoff(wire) + std::ldexp(1.0, -24)) * 1.0001 * magnitude + double(n) * std::ldexp(1.0, -126);
}

// Every device's result of one AllReduce of x (x[d]: device d's input).
std::vector<std::vector<float>> reduce(VkEnv& env, AlgoChoice algo, Wire wire, const std::vector<std::vector<float>>& x) {
  Options o;
  o.algo = algo;
  o.wire = wire;
  o.timeout = test_timeout;
  Communicator<ProxyBridge> comm(env.group(), o);
  Rig rig(env.group(), x[0].size());
  rig.write(x);
  comm.allreduce(rig.spans()).wait();
  return rig.read();
}

Seen run(VkEnv& env, AlgoChoice algo, Wire wire, const std::vector<std::vector<float>>& x) {
  const std::size_t n = x.size(), count = x[0].size();
  const auto got = reduce(env, algo, wire, x);
  Seen s;
  s.worst_excess = -1;
  for (std::size_t d = 1; d < n; ++d) s.identical &= bit_identical(got[d], got[0]);
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0, magnitude = 0;
    for (std::size_t d = 0; d < n; ++d) {
      exact += x[d][i];
      magnitude += std::fabs(x[d][i]);
    }
    const float r = got[0][i];
    ++s.values;
    if (std::isnan(r)) ++s.nan;
    else if (std::isinf(r)) ++s.inf;
    else {
      s.zero += r == 0.0f;
      s.subnormal += r != 0.0f && std::fabs(r) < FLT_MIN;
      s.exact += double(r) == exact;
      const double err = std::fabs(double(r) - exact);
      s.worst_abs = std::max(s.worst_abs, err);
      s.worst_excess = std::max(s.worst_excess, err - bound_with_floor(wire, n, magnitude));
      // The other devices' results against the same bound (they equal device 0's unless
      // the group spans two drivers).
      for (std::size_t d = 1; d < n; ++d) {
        const float rd = got[d][i];
        const double err_d = std::isfinite(rd) ? std::fabs(double(rd) - exact) : HUGE_VAL;
        s.worst_excess = std::max(s.worst_excess, err_d - bound_with_floor(wire, n, magnitude));
      }
    }
  }
  return s;
}

std::string describe(const Seen& s) {
  std::string out = std::to_string(s.values) + " values: " + std::to_string(s.exact) + " exact, " + std::to_string(s.zero) +
                    " zero, " + std::to_string(s.subnormal) + " subnormal, " + std::to_string(s.inf) + " inf, " +
                    std::to_string(s.nan) + " NaN";
  if (s.worst_abs > 0) out += "; worst |error| 2^" + std::to_string(std::log2(s.worst_abs));
  return out;
}

constexpr std::size_t count = 4096;
constexpr AlgoChoice algos[] = {AlgoChoice::oneshot, AlgoChoice::ring};

}  // namespace

// Groups without the validation layer where it is older than 1.3.296: these tests make
// many short-lived communicators, on which its timeline tracking stalls 10 s at a time
// (40 s here, for 0.3 s of work); they are about results, not API use.
TEST_CASE("subnormals: flushed to zero of their sign in every sum, the same on every device and driver") {
  VkEnv env(2, {.old_layer_ok = false});
  if (!env.ok()) return;
  {
    vk::PhysicalDeviceFloatControlsProperties fc;
    vk::PhysicalDeviceProperties2 p2;
    p2.pNext = &fc;
    env.group()[0].physical().getProperties2(&p2);
    MESSAGE(env.group()[0].capabilities().name << ": shaderDenormPreserveFloat32 " << bool(fc.shaderDenormPreserveFloat32)
                                               << ", shaderDenormFlushToZeroFloat32 " << bool(fc.shaderDenormFlushToZeroFloat32)
                                               << " (tpar's kernels flush subnormals themselves: the driver's choice does not enter)");
  }
  std::mt19937 rng(7);
  // Every input subnormal, random of both signs: every result is zero.
  std::uniform_int_distribution<std::uint32_t> mantissa(1, 0x007FFFFF);
  std::vector<std::vector<float>> tiny(2, std::vector<float>(count));
  for (auto& v : tiny)
    for (auto& e : v) e = std::bit_cast<float>(static_cast<std::uint32_t>(mantissa(rng) | (rng() & 0x80000000u)));
  // Normal inputs of magnitude 2^-126 to 2^-125 whose sums cancel into the subnormal
  // range (never to zero): each result is the zero of the exact sum's sign.
  std::vector<std::vector<float>> cancel(2, std::vector<float>(count));
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t m1 = mantissa(rng);
    std::uint32_t m2 = mantissa(rng);
    if (m2 == m1) m2 = m1 ^ 1u;
    const std::uint32_t sign = static_cast<std::uint32_t>(rng() & 0x80000000u);
    cancel[0][i] = std::bit_cast<float>(sign | 0x00800000u | m1);                   // ±(1 + m1·2^-23)·2^-126
    cancel[1][i] = std::bit_cast<float>((sign ^ 0x80000000u) | 0x00800000u | m2);  // the other sign
  }
  for (AlgoChoice algo : algos)
    for (Wire wire : all_wires) {
      CAPTURE(to_string(algo));
      CAPTURE(to_string(wire));
      const Seen s = run(env, algo, wire, tiny);
      MESSAGE(to_string(algo) << ", " << to_string(wire) << " wire, subnormal inputs: " << describe(s));
      // On devices of every driver: the kernels flush, not the driver. No result is
      // subnormal. bf16's encoder may round an input just below 2^-126 up to 2^-126,
      // which then counts as a normal value; f32 and f16 leave every result zero.
      CHECK(s.identical);
      CHECK(s.subnormal == 0);
      if (wire != Wire::bf16) CHECK(s.zero == s.values);
      CHECK(s.worst_excess <= 0);  // |error| <= the bound + n * 2^-126

      const Seen c = run(env, algo, wire, cancel);
      MESSAGE(to_string(algo) << ", " << to_string(wire) << " wire, normal inputs with subnormal sums: " << describe(c));
      CHECK(c.identical);
      CHECK(c.subnormal == 0);
      if (wire != Wire::bf16) CHECK(c.zero == c.values);
      CHECK(c.worst_excess <= 0);
    }
  // The sign of a flushed sum, on the f32 wire (the others round the inputs first, and
  // may round both to one magnitude, whose sum is +0).
  for (AlgoChoice algo : algos) {
    CAPTURE(to_string(algo));
    const auto got = reduce(env, algo, Wire::f32, cancel);
    std::size_t signs_right = 0;
    for (std::size_t i = 0; i < count; ++i)
      signs_right += std::signbit(got[0][i]) == ((double(cancel[0][i]) + double(cancel[1][i])) < 0);
    CHECK(signs_right == count);
  }
}

TEST_CASE("sums past the largest finite f32 become infinite in each algorithm's own order, and devices agree") {
  VkEnv env(3, {.old_layer_ok = false});
  if (!env.ok()) return;
  auto constant = [](std::initializer_list<float> per_device) {
    std::vector<std::vector<float>> x;
    for (float v : per_device) x.emplace_back(count, v);
    return x;
  };
  // Every partial sum past FLT_MAX: +inf everywhere, for every algorithm and wire.
  const auto past = constant({1.2e38f, 1.2e38f, 1.2e38f});  // 3.6e38
  // The exact sum (2e38) is finite, but devices 0 and 1 together pass FLT_MAX. OneShot
  // adds in device order 0, 1, 2 for every value: +inf. The ring adds each chunk in ring
  // order from the device after its owner: finite in the chunks whose order cancels first.
  const auto order = constant({2e38f, 2e38f, -2e38f});
  // The same values in another device order: OneShot cancels first and is exact.
  const auto cancels = constant({-2e38f, 2e38f, 2e38f});
  for (AlgoChoice algo : algos)
    for (Wire wire : all_wires) {
      CAPTURE(to_string(algo));
      CAPTURE(to_string(wire));
      const Seen a = run(env, algo, wire, past), b = run(env, algo, wire, order), c = run(env, algo, wire, cancels);
      MESSAGE(to_string(algo) << ", " << to_string(wire) << " wire: 1.2e38 x3: " << describe(a) << " | 2e38, 2e38, -2e38: "
                              << describe(b) << " | -2e38, 2e38, 2e38: " << describe(c));
      CHECK((a.identical && b.identical && c.identical));
      CHECK(a.inf == a.values);
      if (algo == AlgoChoice::oneshot) {
        CHECK(b.inf == b.values);
        CHECK(c.inf == 0);
      } else {
        CHECK(b.inf > 0);
        CHECK(b.inf < b.values);
        if (wire == Wire::f32) CHECK(b.exact == b.values - b.inf);
      }
    }
}
