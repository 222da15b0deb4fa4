// tpar/plan: contiguous layer ranges sized to each device's usable memory.
#include <doctest/doctest.h>

#include "plan_checks.hpp"

#include <tpar/plan/layer_split.hpp>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

using tpar::LayerBudget;
using tpar::LayerRange;

namespace {

constexpr std::uint64_t GiB = std::uint64_t{1} << 30;
constexpr std::uint64_t MiB = std::uint64_t{1} << 20;

using plan_checks::invalid_argument_message;

// Does any contiguous split in device order keep every device within `usable`? Tries
// every one.
bool fits_somehow(const std::vector<std::uint64_t>& usable, const std::vector<std::uint64_t>& layers,
                  std::size_t device = 0, std::size_t start = 0) {
  if (device + 1 == usable.size()) {
    std::uint64_t rest = 0;
    for (std::size_t j = start; j < layers.size(); ++j) rest += layers[j];
    return rest <= usable[device];
  }
  std::uint64_t bytes = 0;
  for (std::size_t end = start;; ++end) {
    if (bytes > usable[device]) return false;
    if (fits_somehow(usable, layers, device + 1, end)) return true;
    if (end == layers.size()) return false;
    bytes += layers[end];
  }
}

}  // namespace

TEST_CASE("usable memory: free minus headroom, with a floor") {
  CHECK(tpar::usable_memory(10 * GiB, {.headroom_bytes = GiB}) == 9 * GiB);
  CHECK(tpar::usable_memory(GiB / 2, {.headroom_bytes = GiB}) == 0);
  // The floor lets a small device keep a share by eating into its headroom...
  CHECK(tpar::usable_memory(GiB, {.headroom_bytes = GiB, .min_usable_fraction = 0.25}) == GiB / 4);
  // ...and never matters where the headroom leaves more.
  CHECK(tpar::usable_memory(8 * GiB, {.headroom_bytes = GiB, .min_usable_fraction = 0.25}) == 7 * GiB);
  CHECK(tpar::usable_memory(GiB, {.min_usable_fraction = 1.0}) == GiB);
  CHECK(invalid_argument_message([] { tpar::usable_memory(GiB, {.min_usable_fraction = 1.5}); })
            .find("min_usable_fraction 1.5") != std::string::npos);
  CHECK_THROWS_AS(tpar::usable_memory(GiB, {.min_usable_fraction = -0.1}), tpar::Error);
}

TEST_CASE("layer split: worked examples") {
  // 24 GiB and 8 GiB free, 32 layers of 512 MiB: 3 : 1.
  const std::vector<std::uint64_t> layers(32, 512 * MiB);
  const std::vector<std::uint64_t> free{24 * GiB, 8 * GiB};
  const auto ranges = tpar::split_layers(free, layers);
  CHECK(ranges == std::vector<LayerRange>{{0, 24, 12 * GiB}, {24, 32, 4 * GiB}});

  // Layers of different sizes: the cut lands on the layer boundary nearest the bytes'
  // 5 : 3 point (62.5 of 100), a tie going to the earlier boundary.
  CHECK(tpar::split_layers({100, 60}, {10, 10, 10, 40, 30}) ==
        std::vector<LayerRange>{{0, 4, 70}, {4, 5, 30}});
  CHECK(tpar::split_layers({100, 100}, {10, 10, 10, 40, 30}) ==
        std::vector<LayerRange>{{0, 3, 30}, {3, 5, 70}});

  // Nearest-cut rounding would give device 0 12 bytes of its 11; the cut moves to fit.
  CHECK(tpar::split_layers({11, 25}, {6, 6, 6, 6, 6}) ==
        std::vector<LayerRange>{{0, 1, 6}, {1, 5, 24}});

  // The floor keeps a small device in play: 2.5 GiB free with a 2 GiB headroom.
  const std::vector<std::uint64_t> uneven_free{24 * GiB, 5 * GiB / 2};
  const std::vector<std::uint64_t> forty(40, 256 * MiB);
  const auto without_floor = tpar::split_layers(uneven_free, forty, {.headroom_bytes = 2 * GiB});
  const auto with_floor =
      tpar::split_layers(uneven_free, forty, {.headroom_bytes = 2 * GiB, .min_usable_fraction = 0.5});
  CHECK(without_floor[1].count() == 1);  // 0.5 GiB usable of 22.5: 0.89 layers
  CHECK(with_floor[1].count() == 2);     // 1.25 GiB usable of 23.25: 2.15 layers
  CHECK(with_floor[1].bytes <= 5 * GiB / 4);

  // No layers, or no bytes: empty or evenly counted ranges.
  CHECK(tpar::split_layers({GiB, GiB}, {}) == std::vector<LayerRange>(2));
  CHECK(tpar::split_layers({0, 0, 0}, {0, 0, 0, 0, 0, 0}) ==
        std::vector<LayerRange>{{0, 2, 0}, {2, 4, 0}, {4, 6, 0}});
}

TEST_CASE("layer split: a model that cannot fit is an error that says why") {
  const std::string short_total = invalid_argument_message(
      [] { tpar::split_layers(std::vector<std::uint64_t>{4 * GiB, 4 * GiB},
                              std::vector<std::uint64_t>(20, 512 * MiB)); });
  CHECK(short_total.find("needs 10737418240 bytes") != std::string::npos);
  CHECK(short_total.find("2147483648 bytes (2048.0 MiB) short") != std::string::npos);
  CHECK(short_total.find("device 1: 4294967296 bytes") != std::string::npos);

  const std::string big_layer =
      invalid_argument_message([] { tpar::split_layers({10, 10}, {2, 11, 2}); });
  CHECK(big_layer.find("layer 1 alone needs 11 bytes") != std::string::npos);

  const std::string not_contiguous =
      invalid_argument_message([] { tpar::split_layers({10, 11}, {6, 3, 3, 6, 3}); });
  CHECK(not_contiguous.find("not as contiguous layer ranges") != std::string::npos);

  const std::string after_headroom = invalid_argument_message(
      [] { tpar::split_layers({GiB, GiB}, {GiB / 2, GiB / 2}, {.headroom_bytes = GiB}); });
  CHECK(after_headroom.find("headroom of 1073741824 bytes") != std::string::npos);

  CHECK(invalid_argument_message([] { tpar::split_layers({}, {1}); }).find("0 devices") !=
        std::string::npos);
}

TEST_CASE("layer split: every invariant, against brute force (fixed seeds)") {
  int fitted = 0, refused = 0, proportional = 0;
  for (std::uint64_t seed : {11u, 12u, 13u, 14u}) {
    std::mt19937_64 random(seed);
    for (int trial = 0; trial < 2500; ++trial) {
      const std::size_t n = 1 + random() % 4;
      std::vector<std::uint64_t> usable(n), layers(random() % 9);
      for (auto& u : usable) u = random() % 4 == 0 ? 0 : random() % 40;
      for (auto& l : layers) l = random() % 10;
      INFO("seed=", seed, " trial=", trial);
      if (!fits_somehow(usable, layers)) {
        CHECK_THROWS_AS(tpar::split_layers(usable, layers), tpar::Error);
        ++refused;
        continue;
      }
      const auto ranges = tpar::split_layers(usable, layers);
      ++fitted;
      REQUIRE(ranges.size() == n);
      std::size_t next = 0;
      for (std::size_t d = 0; d < n; ++d) {
        REQUIRE(ranges[d].begin == next);
        REQUIRE(ranges[d].end >= ranges[d].begin);
        std::uint64_t bytes = 0;
        for (std::size_t j = ranges[d].begin; j < ranges[d].end; ++j) bytes += layers[j];
        REQUIRE(ranges[d].bytes == bytes);
        REQUIRE(bytes <= usable[d]);
        next = ranges[d].end;
      }
      REQUIRE(next == layers.size());

      // Where every device's proportional bytes leave room for one largest layer more,
      // each device is within one largest layer of its proportional bytes:
      // |bytes_d − B·u_d/U| <= max_layer  ⇔  |bytes_d·U − B·u_d| <= max_layer·U.
      std::uint64_t model = 0, total = 0, largest = 0;
      for (auto l : layers) model += l, largest = std::max(largest, l);
      for (auto u : usable) total += u;
      if (total == 0 || model == 0) continue;
      bool roomy = true;
      for (std::size_t d = 0; d < n; ++d) roomy &= model * usable[d] + largest * total <= usable[d] * total;
      if (!roomy) continue;
      ++proportional;
      for (std::size_t d = 0; d < n; ++d) {
        const std::uint64_t have = ranges[d].bytes * total, ideal = model * usable[d];
        CHECK((have > ideal ? have - ideal : ideal - have) <= largest * total);
      }
    }
  }
  MESSAGE(fitted, " fitted, ", refused, " refused, ", proportional, " checked for proportionality");
  CHECK(fitted > 1000);
  CHECK(refused > 1000);
  CHECK(proportional > 300);
}
