// The algorithms, run on the CPU simulator: deadlock-free in every queue arrangement,
// order-independent (no forgotten dependency), bit-identical on all devices, exact on
// integers and within the documented bound on random values.
#include <doctest/doctest.h>
#include <tpar/algo/chunked_ring.hpp>
#include <tpar/algo/one_shot.hpp>

#include <algorithm>
#include <bit>

#include "support/numerics.hpp"
#include "support/simulate.hpp"

using namespace tpar;
using namespace tpar_test;

namespace {

template <class Algo>
void check_algorithm(std::uint32_t n, std::size_t count, Wire wire, std::uint32_t contributing, std::size_t piece,
                     std::uint32_t lanes) {
  ScheduleRequest rq;
  rq.devices = n;
  rq.count = count;
  rq.wire = wire;
  rq.contributing = contributing;
  rq.piece_elems = piece;
  rq.min_piece_wire_bytes = 2048;  // automatic pieces (piece == 0): several even at test sizes
  rq.max_pieces = 3;
  rq.lanes = lanes;
  const Schedule s = Algo::build(rq);
  CAPTURE(n);
  CAPTURE(count);
  CAPTURE(to_string(wire));
  CAPTURE(contributing);
  CAPTURE(piece);
  CAPTURE(lanes);

  // Integer inputs: exact, whatever the order.
  {
    auto x = integer_inputs(n, count, 1000 + n + count);
    const auto expect = integer_sum(x, contributing);
    // Garbage in the buffers of devices that contribute nothing must not leak in.
    for (std::uint32_t d = 0; d < n; ++d)
      if (!((contributing >> d) & 1u)) std::fill(x[d].begin(), x[d].end(), std::nanf(""));
    for (bool merged : {false, true}) {
      auto y = x;
      simulate(s, y, 7, merged);
      for (std::uint32_t d = 0; d < n; ++d) REQUIRE(bit_identical(y[d], expect));
    }
  }
  // Random inputs: bit-identical across devices and seeds, within the bound.
  const auto x = random_inputs(n, count, 99 + n);
  std::vector<float> first;
  for (std::uint64_t seed : {1, 2, 3}) {
    auto y = x;
    simulate(s, y, seed, seed == 3);
    for (std::uint32_t d = 1; d < n; ++d) REQUIRE(bit_identical(y[d], y[0]));
    if (first.empty()) first = y[0];
    REQUIRE(bit_identical(y[0], first));
  }
  const auto b = check_bound(wire, x, first, contributing);
  CHECK_MESSAGE(b.violations == 0, b.first);
}

}  // namespace

TEST_CASE("OneShot: exact, identical and bounded for every size, wire and contribution pattern") {
  for (std::uint32_t n : {1u, 2u, 3u, 4u, 5u, 8u, 9u})
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{n - 1 ? n - 1 : 1}, std::size_t{513},
                              std::size_t{4096}, std::size_t{12345}})
      for (Wire w : all_wires) {
        const std::uint32_t all = n == 32 ? ~0u : (1u << n) - 1;
        check_algorithm<OneShot>(n, count, w, all, 0, 0);
        if (n > 1) check_algorithm<OneShot>(n, count, w, all & ~2u, 0, 0);
        check_algorithm<OneShot>(n, count, w, 0, 0, 0);
      }
}

TEST_CASE("OneShot: one compute-queue submission per device, its kernel publishing to host staging") {
  // The latency path: a device's whole call is [publish, sum] on its compute queue, the
  // publish writing host staging from the pack kernel (no copy engine, no queue hop).
  for (std::uint32_t n : {2u, 4u, 8u, 9u})
    for (std::uint32_t contributing : {(1u << n) - 1, ((1u << n) - 1) & ~2u}) {
      ScheduleRequest rq;
      rq.devices = n;
      rq.count = 1000;
      rq.contributing = contributing;
      const Schedule s = OneShot::build(rq);
      for (std::uint32_t d = 0; d < n; ++d) {
        CAPTURE(n);
        CAPTURE(d);
        const auto& bs = s.devices[d].batches;
        const bool mine = rq.contributes(d);
        REQUIRE(bs.size() == (mine ? 2u : 1u));
        for (const auto& b : bs) CHECK(queue_of(b) == Role::compute);
        CHECK(s.devices[d].count(Role::transfer) == (mine ? 1u : 0u));
        if (!mine) continue;
        const Batch& publish = bs[0];
        CHECK(publish.role == Role::transfer);
        REQUIRE(publish.commands.size() == 2);
        CHECK(publish.commands[0].kernel == Kernel::pack);
        CHECK(publish.commands[0].args.host_out_off == 0);
        CHECK(publish.commands[1].type == Command::Type::host_barrier);
        CHECK(s.host_bytes[d] >= wire_words(rq.wire, rq.count) * 4);
        // Up to max_direct_peers devices the sum reads the peers in place: no copies.
        const Batch& sum = bs.back();
        const auto copies = std::count_if(sum.commands.begin(), sum.commands.end(),
                                          [](const Command& c) { return c.type == Command::Type::copy; });
        const auto peers = std::popcount(contributing & ~(1u << d));
        CHECK(copies == (n <= max_direct_peers ? 0 : peers));
        CHECK(sum.commands.back().args.mode ==
              static_cast<std::uint32_t>(n <= max_direct_peers ? OneShotMode::direct : OneShotMode::scratch));
        // What the kernels move through host staging themselves (bindings 2 and 3).
        const std::uint64_t piece = wire_words(rq.wire, rq.count) * 4;
        const HostTraffic t = kernel_host_traffic(rq.wire, s.devices[d]);
        CHECK(t.to_host == piece);
        CHECK(t.from_host == (n <= max_direct_peers ? piece * std::uint64_t(peers) : 0));
      }
    }
}

TEST_CASE("ChunkedRing: exact, identical and bounded for every size, wire, piece size and lane count") {
  for (std::uint32_t n : {2u, 3u, 4u, 5u, 8u})
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{n - 1}, std::size_t{513}, std::size_t{4096},
                              std::size_t{40000 + 13}})
      for (Wire w : all_wires)
        for (auto [piece, lanes] : {std::pair<std::size_t, std::uint32_t>{512, 1}, {1024, 2}, {4096, 4}, {1 << 20, 4}, {0, 2}}) {
          const std::uint32_t all = (1u << n) - 1;
          check_algorithm<ChunkedRing>(n, count, w, all, piece, lanes);
          if (count == 4096) {
            check_algorithm<ChunkedRing>(n, count, w, all & ~1u, piece, lanes);
            check_algorithm<ChunkedRing>(n, count, w, 0, piece, lanes);
          }
        }
}

TEST_CASE("ChunkedRing sizes pieces by wire bytes: at least the minimum, at most max_pieces per chunk") {
  ScheduleRequest rq;
  rq.devices = 2;
  rq.wire = Wire::bf16;
  rq.count = std::size_t{64} << 20;  // 256 MiB of f32: chunks of 64 MiB on a bf16 wire
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 4);
  rq.count = std::size_t{4} << 20;   // 16 MiB: chunks of 4 MiB on the wire -> 4 pieces of 1 MiB
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 4);
  rq.count = std::size_t{1} << 20;   // 4 MiB: chunks of 1 MiB on the wire -> one piece
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 1);
  rq.count = 1000;
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 1);
  rq.piece_elems = 1 << 20;          // fixed pieces of 4 MiB f32
  rq.count = std::size_t{64} << 20;
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 32);
}

TEST_CASE("ChunkedRing pipelines: uploads of one piece precede downloads of the next") {
  ScheduleRequest rq;
  rq.devices = 4;
  rq.count = 64 * 1024;
  rq.piece_elems = 4096;
  rq.lanes = 4;
  const auto s = ChunkedRing::build(rq);
  // 64Ki values / 4 chunks / 4096 per piece = 4 pieces per chunk; 6 steps.
  CHECK(s.devices[0].count(Role::compute) == 4 + 6 * 4);
  CHECK(s.devices[0].count(Role::transfer) == 6 * 4);
  // Host staging: each device sends 2(n-1) chunks of a quarter of the tensor.
  CHECK(s.host_bytes[0] == 6 * 16 * 1024 * 4);
  // Scratch is bounded by the lanes, not the tensor.
  CHECK(s.scratch_bytes[0] == 2 * 4 * 4096 * 4);
}
