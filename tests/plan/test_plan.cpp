// tpar/plan: exact arithmetic, granularity, weights, split_extent and layer rotation.
// Segments and SplitPlan are in test_segments.cpp, layer ranges in test_layer_split.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include "plan_checks.hpp"

#include <tpar/plan/granularity.hpp>
#include <tpar/plan/layer_rotation.hpp>
#include <tpar/plan/split.hpp>
#include <tpar/plan/split_weights.hpp>
#include <tpar/detail/wide_arithmetic.hpp>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

using tpar::Granularity;
using tpar::LayerRotation;
using tpar::Share;
using tpar::SplitWeights;
using tpar::detail::Wide;

namespace {

using plan_checks::invalid_argument_message;

std::vector<std::int64_t> sizes_of(const std::vector<Share>& shares) {
  std::vector<std::int64_t> sizes;
  for (const Share& s : shares) sizes.push_back(s.size);
  return sizes;
}

// Weight vectors for n devices: equal, ascending, skewed, with zeros at either end and in
// the middle, and free-memory-like byte counts.
std::vector<SplitWeights> weight_cases(std::size_t n) {
  std::vector<SplitWeights> cases{SplitWeights::equal(n)};
  std::vector<std::uint64_t> ascending, skewed, zero_first, zero_last, zero_middle, bytes;
  for (std::size_t i = 0; i < n; ++i) {
    ascending.push_back(i + 1);
    skewed.push_back(i == 0 ? 100 : 1);
    zero_first.push_back(i == 0 ? 0 : 3);
    zero_last.push_back(i + 1 == n ? 0 : 2 + i);
    zero_middle.push_back(i == n / 2 ? 0 : 5);
    bytes.push_back((std::uint64_t{7} << 30) + i * 123456789u);
  }
  for (const auto& w : {ascending, skewed, bytes}) cases.push_back(SplitWeights::from_free_memory(w));
  if (n > 1)
    for (const auto& w : {zero_first, zero_last, zero_middle})
      cases.push_back(SplitWeights::from_free_memory(w));
  cases.push_back(SplitWeights::from_ratios(std::vector<double>(n, 0.3)));
  return cases;
}

}  // namespace

TEST_CASE("wide arithmetic matches hand-computed values") {
  using namespace tpar::detail;
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  CHECK(multiply_wide(max, max) == Wide{max - 1, 1});  // (2^64−1)^2 = 2^128 − 2^65 + 1
  CHECK(multiply_wide(std::uint64_t{1} << 32, std::uint64_t{1} << 32) == Wide{1, 0});
  CHECK(multiply_wide(0xffffffffu, 0xffffffffu) == Wide{0, 0xfffffffe00000001u});
  CHECK(add(Wide{0, max}, widen(1)) == Wide{1, 0});
  CHECK(subtract(Wide{1, 0}, widen(1)) == Wide{0, max});
  CHECK(multiply(Wide{1, 2}, 3) == Wide{3, 6});
  const auto q = divide(multiply_wide(max, max), max);
  CHECK(q.quotient == widen(max));
  CHECK(q.remainder == 0);
  const auto r = divide(Wide{5, 7}, 10);  // (5·2^64 + 7) / 10
  CHECK(add(multiply(r.quotient, 10), widen(r.remainder)) == Wide{5, 7});
  CHECK(r.remainder == (5 * 6 + 7) % 10);  // 2^64 ≡ 6 (mod 10)
  CHECK(Wide{1, 0} > Wide{0, max});
#ifdef __SIZEOF_INT128__
  // Where the compiler has a 128-bit type, compare on many random values.
  __extension__ typedef unsigned __int128 u128;  // not ISO C++, hence __extension__
  std::mt19937_64 random(20240611);
  for (int i = 0; i < 20000; ++i) {
    const std::uint64_t a = random() >> (random() % 64), b = random() >> (random() % 64);
    const std::uint64_t d = (random() >> (random() % 64)) | 1u;
    const u128 product = static_cast<u128>(a) * b;
    const Wide wide = multiply_wide(a, b);
    REQUIRE(wide == Wide{static_cast<std::uint64_t>(product >> 64), static_cast<std::uint64_t>(product)});
    const auto div = divide(wide, d);
    const u128 quotient = product / d;
    REQUIRE(div.quotient == Wide{static_cast<std::uint64_t>(quotient >> 64), static_cast<std::uint64_t>(quotient)});
    REQUIRE(div.remainder == static_cast<std::uint64_t>(product % d));
  }
#endif
}

TEST_CASE("granularities combine as their least common multiple") {
  CHECK(Granularity{}.value() == 1);
  CHECK(Granularity::lcm_of({}).value() == 1);
  CHECK(Granularity::lcm_of({32, 128, 128}).value() == 128);
  CHECK(Granularity::lcm_of({256, 96}).value() == 768);
  CHECK(Granularity::lcm_of({3, 4, 8}).value() == 24);
  CHECK(Granularity(6).combined_with(Granularity(4)).value() == 12);

  CHECK(invalid_argument_message([] { Granularity(0); }).find("granularity 0") != std::string::npos);
  CHECK(invalid_argument_message([] { Granularity(-4); }).find("-4") != std::string::npos);
  const std::string zero_in_list = invalid_argument_message([] { Granularity::lcm_of({32, 0}); });
  CHECK(zero_in_list.find("entry 1 of 2") != std::string::npos);
  const std::int64_t big = std::int64_t{1} << 62;
  CHECK(invalid_argument_message([&] { Granularity::lcm_of({big, 3}); }).find("exceeds") !=
        std::string::npos);
}

TEST_CASE("weights: equal, free memory, ratios, and what they reject") {
  CHECK(SplitWeights::equal(3).total() == 3);
  const auto bytes = SplitWeights::from_free_memory({8u << 20, 0, 24u << 20});
  CHECK(bytes.weight(1) == 0);
  CHECK(bytes.total() == (32u << 20));
  // Ratios keep their proportions: {3, 1} and {0.75, 0.25} are the same weights.
  CHECK(SplitWeights::from_ratios({3.0, 1.0}) == SplitWeights::from_ratios({0.75, 0.25}));
  CHECK(SplitWeights::from_ratios({2.0, 1.0}).weight(0) == (std::uint64_t{1} << 40));
  CHECK(SplitWeights::from_ratios({2.0, 1.0}).weight(1) == (std::uint64_t{1} << 39));

  CHECK(invalid_argument_message([] { SplitWeights::equal(0); }).find("0 devices") != std::string::npos);
  CHECK(invalid_argument_message([] { SplitWeights::from_free_memory({}); }).find("0 devices") !=
        std::string::npos);
  CHECK(invalid_argument_message([] { SplitWeights::from_free_memory({0, 0}); }).find("0 bytes") !=
        std::string::npos);
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  CHECK(invalid_argument_message([&] { SplitWeights::from_free_memory({max, 1}); })
            .find("device 1") != std::string::npos);
  CHECK(invalid_argument_message([] { SplitWeights::from_ratios({1.0, -0.5}); })
            .find("device 1 is -0.5") != std::string::npos);
  CHECK(invalid_argument_message([] {
          SplitWeights::from_ratios({std::numeric_limits<double>::quiet_NaN(), 1.0});
        }).find("device 0 is nan") != std::string::npos);
  CHECK(invalid_argument_message([] {
          SplitWeights::from_ratios({1.0, std::numeric_limits<double>::infinity()});
        }).find("device 1 is inf") != std::string::npos);
  CHECK(invalid_argument_message([] { SplitWeights::from_ratios({0.0, 0.0}); }).find("are 0") !=
        std::string::npos);
}

TEST_CASE("split_extent: worked examples") {
  const auto three = SplitWeights::equal(3);
  // 31 granules over 3 devices: the extra granule goes to the last device, then rotates
  // backwards one device per layer.
  CHECK(sizes_of(tpar::split_extent(three, 31 * 128, Granularity(128))) ==
        std::vector<std::int64_t>{1280, 1280, 1408});
  CHECK(sizes_of(tpar::split_extent(three, 31 * 128, Granularity(128), {.layer = 1})) ==
        std::vector<std::int64_t>{1280, 1408, 1280});
  CHECK(sizes_of(tpar::split_extent(three, 31 * 128, Granularity(128), {.layer = 2})) ==
        std::vector<std::int64_t>{1408, 1280, 1280});
  CHECK(tpar::split_extent(three, 31 * 128, Granularity(128), {.layer = 3}) ==
        tpar::split_extent(three, 31 * 128, Granularity(128)));
  // 32 granules: the short device rotates forwards.
  CHECK(sizes_of(tpar::split_extent(three, 4096, Granularity(128))) ==
        std::vector<std::int64_t>{1280, 1408, 1408});
  CHECK(sizes_of(tpar::split_extent(three, 4096, Granularity(128), {.layer = 1})) ==
        std::vector<std::int64_t>{1408, 1280, 1408});
  CHECK(sizes_of(tpar::split_extent(three, 4096, Granularity(128), {.layer = 2})) ==
        std::vector<std::int64_t>{1408, 1408, 1280});
  // Not a multiple of the granularity: the tail ends the last share.
  CHECK(tpar::split_extent(SplitWeights::equal(2), 10, Granularity(4)) ==
        std::vector<Share>{{0, 4}, {4, 6}});
  // A last device of weight 0 takes nothing, not even the tail.
  CHECK(tpar::split_extent(SplitWeights::from_ratios({1, 1, 0}), 10, Granularity(4)) ==
        std::vector<Share>{{0, 4}, {4, 6}, {10, 0}});
  // Proportional to free memory: 24 GiB and 8 GiB take 3/4 and 1/4.
  CHECK(sizes_of(tpar::split_extent(SplitWeights::from_free_memory({24ull << 30, 8ull << 30}),
                                    14336, Granularity(256))) ==
        std::vector<std::int64_t>{10752, 3584});
  // An empty extent splits into empty shares.
  CHECK(tpar::split_extent(three, 0, Granularity(256)) == std::vector<Share>(3));
}

TEST_CASE("split_extent: impossible requests throw and name the value") {
  const auto two = SplitWeights::equal(2);
  CHECK(invalid_argument_message([&] { tpar::split_extent(two, -1); }).find("extent -1") !=
        std::string::npos);
  const std::string small = invalid_argument_message([&] { tpar::split_extent(two, 100, Granularity(128)); });
  CHECK(small.find("extent 100") != std::string::npos);
  CHECK(small.find("granularity 128") != std::string::npos);
}

TEST_CASE("split_extent: every invariant, exhaustively for small cases") {
  // Extents 0..64, 1..5 devices, granularities {1,2,3,4,8}, the weight cases above, and
  // every layer of three rotation periods (the device count, 3 and 7).
  int splits = 0;
  for (std::size_t n = 1; n <= 5; ++n) {
    for (const SplitWeights& weights : weight_cases(n)) {
      for (std::int64_t step : {1, 2, 3, 4, 8}) {
        const Granularity g(step);
        for (std::int64_t extent = 0; extent <= 64; ++extent) {
          if (extent > 0 && extent < step) {
            CHECK_THROWS_AS(tpar::split_extent(weights, extent, g), tpar::Error);
            continue;
          }
          for (std::uint32_t period : {std::uint32_t{0}, std::uint32_t{3}, std::uint32_t{7}}) {
            const std::uint64_t layers = LayerRotation{0, period}.resolved_period(n);
            std::vector<std::int64_t> totals(n, 0);
            for (std::uint32_t layer = 0; layer < layers; ++layer) {
              const auto shares = tpar::split_extent(weights, extent, g, {layer, period});
              const std::string problem = plan_checks::check_split(weights, extent, step, shares);
              INFO("n=", n, " extent=", extent, " g=", step, " layer=", layer, "/", layers);
              REQUIRE_MESSAGE(problem.empty(), problem);
              for (std::size_t d = 0; d < n; ++d) totals[d] += shares[d].size;
              ++splits;
            }
            const std::string problem = plan_checks::check_totals(weights, extent, step, layers, totals);
            INFO("n=", n, " extent=", extent, " g=", step, " period=", layers);
            REQUIRE_MESSAGE(problem.empty(), problem);
          }
        }
      }
    }
  }
  MESSAGE(splits, " splits checked");
}

TEST_CASE("split_extent: rotation evens out any window of `period` consecutive layers") {
  // The bound holds for every window, not only those starting at a multiple of the period.
  const auto weights = SplitWeights::from_free_memory({5, 3, 11, 2});
  for (std::int64_t extent : {40, 41, 63, 64, 1000}) {
    for (std::uint64_t start = 0; start < 9; ++start) {
      std::vector<std::int64_t> totals(4, 0);
      for (std::uint64_t layer = start; layer < start + 4; ++layer) {
        const auto shares = tpar::split_extent(weights, extent, Granularity(4),
                                               {static_cast<std::uint32_t>(layer)});
        for (std::size_t d = 0; d < 4; ++d) totals[d] += shares[d].size;
      }
      const std::string problem = plan_checks::check_totals(weights, extent, 4, 4, totals);
      INFO("extent=", extent, " window start=", start);
      CHECK_MESSAGE(problem.empty(), problem);
    }
  }
}

TEST_CASE("split_extent: every invariant, randomized (fixed seeds)") {
  const std::int64_t steps[] = {1, 2, 3, 4, 8, 32, 64, 96, 128, 256};
  for (std::uint64_t seed : {1u, 2u, 3u, 42u, 20240611u}) {
    std::mt19937_64 random(seed);
    for (int trial = 0; trial < 400; ++trial) {
      const std::size_t n = 1 + random() % 16;
      // Free-memory-like weights up to 2^40 bytes (some devices empty), or ratios.
      std::vector<std::uint64_t> bytes(n);
      std::vector<double> ratios(n);
      for (std::size_t d = 0; d < n; ++d) {
        bytes[d] = random() % 5 == 0 ? 0 : random() >> (24 + random() % 40);
        ratios[d] = static_cast<double>(random() % 1000) / 7.0;
      }
      bytes[random() % n] |= 1;
      ratios[random() % n] += 1.0;
      const SplitWeights weights = trial % 2 == 0 ? SplitWeights::from_free_memory(bytes)
                                                  : SplitWeights::from_ratios(ratios);
      const Granularity g = Granularity::lcm_of({steps[random() % 10], steps[random() % 10]});
      // Extents from just above the granularity to 2^40 (products far past 64 bits).
      const std::int64_t extent =
          g.value() + static_cast<std::int64_t>(random() >> (24 + random() % 40));
      const std::uint32_t period = static_cast<std::uint32_t>(random() % 3 == 0 ? 0 : 1 + random() % 12);
      const std::uint64_t layers = LayerRotation{0, period}.resolved_period(n);
      const std::uint32_t first = static_cast<std::uint32_t>(random() % 100);
      std::vector<std::int64_t> totals(n, 0);
      for (std::uint32_t layer = first; layer < first + layers; ++layer) {
        const auto shares = tpar::split_extent(weights, extent, g, {layer, period});
        const std::string problem = plan_checks::check_split(weights, extent, g.value(), shares);
        INFO("seed=", seed, " trial=", trial, " n=", n, " extent=", extent, " g=", g.value());
        REQUIRE_MESSAGE(problem.empty(), problem);
        for (std::size_t d = 0; d < n; ++d) totals[d] += shares[d].size;
      }
      const std::string problem = plan_checks::check_totals(weights, extent, g.value(), layers, totals);
      INFO("seed=", seed, " trial=", trial, " n=", n, " extent=", extent, " period=", layers);
      REQUIRE_MESSAGE(problem.empty(), problem);
    }
  }
}

TEST_CASE("split_extent: extents near 2^63 stay exact") {
  const std::int64_t huge = std::numeric_limits<std::int64_t>::max() - 5;
  const auto weights = SplitWeights::from_free_memory({std::uint64_t{1} << 62, 3, (std::uint64_t{1} << 61) + 7});
  for (std::uint32_t layer = 0; layer < 3; ++layer) {
    const auto shares = tpar::split_extent(weights, huge, Granularity(1024), {layer});
    const std::string problem = plan_checks::check_split(weights, huge, 1024, shares);
    CHECK_MESSAGE(problem.empty(), problem);
  }
}
