// tpar/plan: fused tensors split part by part, and the shared SplitPlan.
#include <doctest/doctest.h>

#include "plan_checks.hpp"

#include <tpar/plan/segments.hpp>
#include <tpar/plan/split_plan.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using tpar::Granularity;
using tpar::Part;
using tpar::SegmentedSplit;
using tpar::Share;
using tpar::SplitPlan;
using tpar::SplitWeights;
using tpar::TensorAxis;

namespace {

using plan_checks::invalid_argument_message;

// What segments.hpp guarantees: every part instance is tiled by the devices' slices in
// device order, each slice is that part's split_extent share (so split.hpp's bounds hold
// per part), totals are the sums of the slices, and each total is within
// g × instances of the fused ideal. `expected` gives each part's shares.
std::string check_segments(const SegmentedSplit& s, const SplitWeights& weights,
                           std::span<const Part> parts, std::int64_t step,
                           const std::vector<std::vector<Share>>& expected) {
  const std::size_t n = weights.device_count();
  std::int64_t part_start = 0, instances = 0;
  std::vector<std::int64_t> totals(n, 0);
  std::size_t instance = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    for (std::int64_t r = 0; r < parts[p].repeat; ++r, ++instance, ++instances) {
      std::int64_t expected_offset = part_start;
      for (std::size_t d = 0; d < n; ++d) {
        const Share slice = s.slices(d)[instance];
        const std::string where = "part " + std::to_string(p) + " repeat " + std::to_string(r) +
                                  " device " + std::to_string(d) + ": ";
        if (slice.offset != expected_offset) return where + "slices do not tile the part";
        if (slice.size != expected[p][d].size || slice.offset - part_start != expected[p][d].offset)
          return where + "slice differs from the part's own split";
        if (s.size(d, p) != slice.size) return where + "size() disagrees with slices()";
        totals[d] += slice.size;
        expected_offset = slice.end();
      }
      part_start += parts[p].size;
      if (expected_offset != part_start) return "part " + std::to_string(p) + " not covered";
    }
  }
  if (s.extent() != part_start) return "extent() is not the fused extent";
  for (std::size_t d = 0; d < n; ++d) {
    if (s.total(d) != totals[d]) return "total(" + std::to_string(d) + ") is not the sum";
    const auto have = tpar::detail::multiply_wide(static_cast<std::uint64_t>(totals[d]), weights.total());
    const auto ideal = tpar::detail::multiply_wide(static_cast<std::uint64_t>(part_start), weights.weight(d));
    const auto limit = tpar::detail::multiply_wide(static_cast<std::uint64_t>(step * instances), weights.total());
    if (!plan_checks::within(have, ideal, limit)) return "device total too far from its ideal";
  }
  return {};
}

}  // namespace

TEST_CASE("segments: fused QKV gets a slice of every part") {
  // 8 q heads, 2 k heads, 2 v heads of 4 rows each, over 2 equal devices.
  const std::array<Part, 3> qkv{{{32}, {8}, {8}}};
  const auto s = tpar::split_segments(SplitWeights::equal(2), qkv, Granularity(4));
  CHECK(s.extent() == 48);
  CHECK(s.instance_count() == 3);
  CHECK(std::vector<Share>(s.slices(0).begin(), s.slices(0).end()) ==
        std::vector<Share>{{0, 16}, {32, 4}, {40, 4}});
  CHECK(std::vector<Share>(s.slices(1).begin(), s.slices(1).end()) ==
        std::vector<Share>{{16, 16}, {36, 4}, {44, 4}});
  CHECK(s.total(0) == 24);
  CHECK(s.size(1, 0) == 16);
}

TEST_CASE("segments: a repeated part is split the same way in every repetition") {
  const std::array<Part, 2> parts{{{12, 3}, {6}}};
  const auto s = tpar::split_segments(SplitWeights::from_ratios({2, 1}), parts, Granularity(3));
  CHECK(std::vector<Share>(s.slices(1).begin(), s.slices(1).end()) ==
        std::vector<Share>{{6, 6}, {18, 6}, {30, 6}, {39, 3}});
  CHECK(s.size(1, 0) == 6);
  CHECK(s.total(1) == 21);
}

TEST_CASE("segments: impossible requests throw and name the part") {
  const auto two = SplitWeights::equal(2);
  CHECK(invalid_argument_message([&] { tpar::split_segments(two, {}); }).find("at least one part") !=
        std::string::npos);
  const std::array<Part, 2> off_granularity{{{256}, {100}}};
  const std::string off = invalid_argument_message(
      [&] { tpar::split_segments(two, off_granularity, Granularity(32)); });
  CHECK(off.find("part 1 has 100 rows") != std::string::npos);
  CHECK(off.find("granularity 32") != std::string::npos);
  const std::array<Part, 1> never{{{64, 0}}};
  CHECK(invalid_argument_message([&] { tpar::split_segments(two, never); }).find("part 0 repeats 0") !=
        std::string::npos);
  const std::array<Part, 1> negative{{{-8}}};
  CHECK(invalid_argument_message([&] { tpar::split_segments(two, negative); }).find("-8") !=
        std::string::npos);
  const std::array<Part, 2> overflow{{{std::int64_t{1} << 61, 3}, {std::int64_t{1} << 61}}};
  CHECK(invalid_argument_message([&] { tpar::split_segments(two, overflow); }).find("2^63") !=
        std::string::npos);
  const std::array<Part, 1> one{{{64}}};
  const auto s = tpar::split_segments(two, one);
  CHECK(invalid_argument_message([&] { (void)s.slices(2); }).find("device 2") != std::string::npos);
}

TEST_CASE("segments: every invariant, randomized (fixed seeds)") {
  const std::int64_t steps[] = {1, 2, 3, 4, 8, 32, 128};
  for (std::uint64_t seed : {7u, 8u, 9u}) {
    std::mt19937_64 random(seed);
    for (int trial = 0; trial < 300; ++trial) {
      const std::size_t n = 1 + random() % 6;
      std::vector<std::uint64_t> bytes(n);
      for (auto& b : bytes) b = random() % 4 == 0 ? 0 : 1 + random() % 1000;
      bytes[random() % n] += 1;
      const auto weights = SplitWeights::from_free_memory(bytes);
      const std::int64_t step = steps[random() % 7];
      std::vector<Part> parts(1 + random() % 4);
      for (Part& part : parts)
        part = {step * static_cast<std::int64_t>(random() % 20), 1 + static_cast<std::int64_t>(random() % 3)};
      const tpar::LayerRotation rotation{static_cast<std::uint32_t>(random() % 10)};
      const auto s = tpar::split_segments(weights, parts, Granularity(step), rotation);
      std::vector<std::vector<Share>> expected;
      for (const Part& part : parts)
        expected.push_back(tpar::split_extent(weights, part.size, Granularity(step), rotation));
      const std::string problem = check_segments(s, weights, parts, step, expected);
      INFO("seed=", seed, " trial=", trial);
      REQUIRE_MESSAGE(problem.empty(), problem);
    }
  }
}

TEST_CASE("plan: independent splits can disagree, a plan cannot") {
  // 32 q heads grouped over 8 kv heads (GQA, 4 q heads per kv head), 3 equal devices.
  const auto three = SplitWeights::equal(3);
  const auto q_alone = tpar::split_extent(three, 32);
  const auto kv_alone = tpar::split_extent(three, 8);
  bool some_device_disagrees = false;
  for (std::size_t d = 0; d < 3; ++d)
    some_device_disagrees |= q_alone[d].size != 4 * kv_alone[d].size;
  CHECK(some_device_disagrees);  // the reported assert with 3 mixed GPUs

  const SplitPlan plan(three, 8, Granularity{});  // in kv heads
  const auto q = plan.apply({32, Granularity{}});
  const auto kv = plan.apply({8, Granularity{}});
  for (std::size_t d = 0; d < 3; ++d) {
    CHECK(q[d].size == 4 * kv[d].size);
    CHECK(q[d].offset == 4 * kv[d].offset);
  }
}

TEST_CASE("plan: for_tensors picks the granularity every tensor needs") {
  // Attention with 8 kv heads of 128 rows, 32 q heads; wk/wv use a 256-row block, so a
  // plan boundary every 2 kv heads is the finest all four tensors can take.
  const std::int64_t head_dim = 128, n_kv = 8, n_head = 32;
  const std::array<TensorAxis, 4> attn{{
      {n_head * head_dim, Granularity(32)},
      {n_kv * head_dim, Granularity(256)},
      {n_kv * head_dim, Granularity(256)},
      {n_head * head_dim, Granularity(32)},
  }};
  const auto weights = SplitWeights::from_free_memory({24ull << 30, 12ull << 30, 12ull << 30});
  for (std::uint32_t layer = 0; layer < 6; ++layer) {
    const auto plan = SplitPlan::for_tensors(weights, n_kv, attn, {layer});
    CHECK(plan.granularity().value() == 2);
    CHECK(plan.phase() == layer % 3);
    CHECK(plan.period() == 3);
    for (const TensorAxis& tensor : attn) {
      const auto shares = plan.apply(tensor);
      const std::int64_t scale = tensor.extent / n_kv;
      const std::string problem =
          plan_checks::check_split(weights, tensor.extent, scale * 2, shares);
      CHECK_MESSAGE(problem.empty(), problem);
      for (std::size_t d = 0; d < 3; ++d) {
        CHECK(shares[d].offset % tensor.granularity.value() == 0);
        CHECK(shares[d] == Share{plan.share(d).offset * scale, plan.share(d).size * scale});
      }
    }
    // The fused wqkv applies the same plan part by part.
    const std::array<Part, 3> qkv{{{n_head * head_dim}, {n_kv * head_dim}, {n_kv * head_dim}}};
    const auto fused = plan.apply_parts(qkv, Granularity(256));
    for (std::size_t d = 0; d < 3; ++d) {
      CHECK(fused.size(d, 0) == 4 * fused.size(d, 1));
      CHECK(fused.size(d, 1) == fused.size(d, 2));
      CHECK(fused.total(d) == 6 * head_dim * plan.share(d).size);
    }
  }
  // Equal inputs give equal plans, so an engine can assert two tensors share one.
  CHECK(SplitPlan::for_tensors(weights, n_kv, attn, {1}) == SplitPlan::for_tensors(weights, n_kv, attn, {4}));
  const auto three = SplitWeights::equal(3);
  CHECK(SplitPlan(three, 8, Granularity{}, {0}) != SplitPlan(three, 8, Granularity{}, {1}));
  CHECK(SplitPlan(three, 8, Granularity{}) != SplitPlan(three, 16, Granularity{}));
}

TEST_CASE("plan: apply_parts and apply agree with the plan for random layouts (fixed seed)") {
  std::mt19937_64 random(99);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t n = 1 + random() % 5;
    std::vector<double> ratios(n);
    for (double& r : ratios) r = static_cast<double>(random() % 50);
    ratios[0] += 1.0;
    const auto weights = SplitWeights::from_ratios(ratios);
    const std::int64_t step = 1 + static_cast<std::int64_t>(random() % 4);
    const std::int64_t extent = step + static_cast<std::int64_t>(random() % 60);
    const SplitPlan plan(weights, extent, Granularity(step), {static_cast<std::uint32_t>(trial)});
    REQUIRE(plan_checks::check_split(weights, extent, step, plan.shares()).empty());
    std::vector<Part> parts(1 + random() % 3);
    for (Part& part : parts) part = {extent * (1 + static_cast<std::int64_t>(random() % 4)), 1 + static_cast<std::int64_t>(random() % 2)};
    const auto fused = plan.apply_parts(parts);
    std::vector<std::vector<Share>> expected;
    for (const Part& part : parts) expected.push_back(plan.apply({part.size, Granularity{}}));
    // Each part is split like the plan, scaled; its bound scales with it (step × scale).
    std::int64_t largest_scale = 0;
    for (const Part& part : parts) largest_scale = std::max(largest_scale, part.size / extent);
    const std::string problem = check_segments(fused, weights, parts, step * largest_scale, expected);
    INFO("trial=", trial);
    REQUIRE_MESSAGE(problem.empty(), problem);
  }
}

TEST_CASE("plan: impossible requests throw and say what to do") {
  const auto two = SplitWeights::equal(2);
  const SplitPlan plan(two, 8, Granularity(2));
  const std::string not_multiple = invalid_argument_message([&] { plan.apply({100, Granularity{}}); });
  CHECK(not_multiple.find("extent 100") != std::string::npos);
  CHECK(not_multiple.find("plan's extent 8") != std::string::npos);
  const std::string coarse = invalid_argument_message([&] { plan.apply({8 * 64, Granularity(256)}); });
  CHECK(coarse.find("multiples of 128") != std::string::npos);
  CHECK(coarse.find("granularity 256") != std::string::npos);
  const std::array<Part, 2> parts{{{16}, {12}}};
  CHECK(invalid_argument_message([&] { plan.apply_parts(parts); }).find("extent 12") != std::string::npos);
  CHECK(invalid_argument_message([&] { plan.apply({-8, Granularity{}}); }).find("-8") != std::string::npos);
  CHECK(invalid_argument_message([&] { SplitPlan(two, 1, Granularity(2)); }).find("plan extent 1") !=
        std::string::npos);
  // One kv head of 128 rows cannot be cut on a 256-row block: the plan would need
  // boundaries every 2 heads, more than the 1 it has.
  const std::array<TensorAxis, 1> wk{{{128, Granularity(256)}}};
  const std::string too_fine = invalid_argument_message([&] { SplitPlan::for_tensors(two, 1, wk); });
  CHECK(too_fine.find("every 2 units") != std::string::npos);
  CHECK(too_fine.find("tensor 0") != std::string::npos);
  // An empty plan applies only to empty tensors.
  const SplitPlan empty(two, 0, Granularity(4));
  CHECK(empty.apply({0, Granularity{}}) == std::vector<Share>(2));
  CHECK_THROWS_AS(empty.apply({4, Granularity{}}), tpar::Error);
}
