// The algorithms, run on the CPU simulator: deadlock-free in every queue arrangement,
// order-independent (no forgotten dependency), bit-identical on all devices, exact on
// integers and within the documented bound on random values.
#include <doctest/doctest.h>
#include <tpar/algo/by_size.hpp>
#include <tpar/algo/chunked_ring.hpp>
#include <tpar/algo/one_shot.hpp>
#include <tpar/algo/relay.hpp>

#include <algorithm>
#include <bit>

#include "support/numerics.hpp"
#include "support/simulate.hpp"

using namespace tpar;
using namespace tpar_test;

namespace {

// Whether every scratch region of a ring schedule (copies into and out of it, the pack
// and combine kernels' pieces) lies within its device's scratch_bytes: the simulator's
// kernels do not check, and a binding of the scratch spans no more.
bool ring_scratch_in_bounds(const Schedule& s) {
  for (std::size_t d = 0; d < s.devices.size(); ++d)
    for (const auto& b : s.devices[d].batches)
      for (const auto& c : b.commands) {
        auto within = [&](std::uint64_t offset, std::uint64_t bytes) { return offset + bytes <= s.scratch_bytes[d]; };
        if (c.type == Command::Type::copy) {
          if (c.src.kind == Region::Kind::scratch && !within(c.src.offset, c.bytes)) return false;
          if (c.dst.kind == Region::Kind::scratch && !within(c.dst.offset, c.bytes)) return false;
        } else if (c.type == Command::Type::kernel) {
          const std::uint64_t bytes = wire_words(s.wire, c.args.count) * 4;
          if (!within(std::uint64_t(c.args.out_off) * 4, bytes)) return false;
          if (c.kernel == Kernel::combine && !within(std::uint64_t(c.args.in_off) * 4, bytes)) return false;
        }
      }
  return true;
}

template <class Algo>
void check_algorithm(std::uint32_t n, std::size_t count, Wire wire, std::uint32_t contributing, std::size_t piece,
                     std::uint32_t lanes, bool separate_downloads = false, std::uint64_t max_scratch = 0) {
  ScheduleRequest rq;
  rq.devices = n;
  rq.count = count;
  rq.wire = wire;
  rq.contributing = contributing;
  rq.ring.piece_elems = piece;
  rq.ring.min_piece_wire_bytes = 2048;  // automatic pieces (piece == 0): several even at test sizes
  rq.ring.max_pieces = 3;
  rq.ring.lanes = lanes;
  rq.ring.separate_downloads = separate_downloads;
  rq.max_scratch_bytes = max_scratch;
  const Schedule s = Algo::build(rq);
  CAPTURE(n);
  CAPTURE(count);
  CAPTURE(to_string(wire));
  CAPTURE(contributing);
  CAPTURE(piece);
  CAPTURE(lanes);
  CAPTURE(separate_downloads);
  CAPTURE(max_scratch);
  if (max_scratch)
    for (std::uint32_t d = 0; d < n; ++d) CHECK(s.scratch_bytes[d] <= max_scratch);

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
          for (bool separate : {false, true}) {
            check_algorithm<ChunkedRing>(n, count, w, all, piece, lanes, separate);
            if (count == 4096) {
              check_algorithm<ChunkedRing>(n, count, w, all & ~1u, piece, lanes, separate);
              check_algorithm<ChunkedRing>(n, count, w, 0, piece, lanes, separate);
            }
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
  rq.ring.piece_elems = 1 << 20;          // fixed pieces of 4 MiB f32
  rq.count = std::size_t{64} << 20;
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 32);
  // Fixed pieces too small for the chunk: at most max_pieces_per_chunk, each larger.
  // (2 KiB pieces of a 64 MiB call, 16,384 a chunk, made NVIDIA's driver lose the device.)
  rq.ring.piece_elems = 512;
  rq.count = std::size_t{16} << 20;
  CHECK(ChunkedRing::pieces_per_chunk(rq) == max_pieces_per_chunk);
  rq.count = 2 * 64 * 512;  // exactly 64 pieces of 512 a chunk
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 64);
  rq.count = 2 * 65 * 512;  // one block more a chunk: still 64 (one of them two blocks), not 65
  CHECK(ChunkedRing::pieces_per_chunk(rq) == 64);
  check_algorithm<ChunkedRing>(2, 2 * 65 * 512, Wire::f32, ~0u, 512, 4);  // the capped pieces sum exactly
  check_algorithm<ChunkedRing>(3, 3 * 70 * 512 + 100, Wire::bf16, ~0u, 512, 2);
}

TEST_CASE("ChunkedRing fits its scratch in max_scratch_bytes: more pieces, then fewer lanes") {
  constexpr std::uint64_t mib = 1 << 20, limit = 128 * mib;  // lavapipe's maxStorageBufferRange
  // The layout of a schedule: its staging, and every command's regions and pieces.
  auto same_layout = [](const Schedule& a, const Schedule& b) {
    if (a.scratch_bytes != b.scratch_bytes || a.host_bytes != b.host_bytes || a.devices.size() != b.devices.size())
      return false;
    for (std::size_t d = 0; d < a.devices.size(); ++d) {
      const auto &x = a.devices[d].batches, &y = b.devices[d].batches;
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (x[i].role != y[i].role || x[i].commands.size() != y[i].commands.size()) return false;
        for (std::size_t j = 0; j < x[i].commands.size(); ++j) {
          const Command &p = x[i].commands[j], &q = y[i].commands[j];
          if (p.type != q.type || p.src.offset != q.src.offset || p.dst.offset != q.dst.offset || p.bytes != q.bytes ||
              p.args.count != q.args.count || p.args.user_off != q.args.user_off || p.args.in_off != q.args.in_off ||
              p.args.out_off != q.args.out_off)
            return false;
        }
      }
    }
    return true;
  };
  auto check_fits = [&](ScheduleRequest rq, std::size_t pieces_free, std::uint64_t scratch_free, std::size_t pieces_fit) {
    CAPTURE(rq.count);
    CAPTURE(rq.ring.lanes);
    CAPTURE(rq.ring.max_pieces);
    // No limit, or one not reached: the schedule as it always was.
    const Schedule free = ChunkedRing::build(rq);
    CHECK(ChunkedRing::pieces_per_chunk(rq) == pieces_free);
    CHECK(free.scratch_bytes[0] == scratch_free);
    rq.max_scratch_bytes = scratch_free;
    CHECK(same_layout(ChunkedRing::build(rq), free));
    // The limit: more pieces, each lane smaller, the same bytes through host staging.
    rq.max_scratch_bytes = limit;
    CHECK(ChunkedRing::pieces_per_chunk(rq) == pieces_fit);
    const Schedule fit = ChunkedRing::build(rq);
    for (std::uint32_t d = 0; d < rq.devices; ++d) CHECK(fit.scratch_bytes[d] <= limit);
    CHECK(fit.host_bytes == free.host_bytes);
    CHECK(ring_scratch_in_bounds(fit));
  };
  ScheduleRequest rq;
  rq.devices = 2;
  // 256 MiB of f32: chunks of 128 MiB, 4 pieces of 32 MiB, 4 lanes -> 256 MiB of scratch;
  // 8 pieces of 16 MiB fit.
  rq.count = 64 * mib;
  check_fits(rq, 4, 256 * mib, 8);
  // 64 MiB with one piece a chunk on 6 lanes (seen on a GPU + llvmpipe group): 32 MiB pieces
  // -> 384 MiB; 4 pieces of 8 MiB (96 MiB) fit, 3 of 10.7 MiB not quite.
  rq.count = 16 * mib;
  rq.ring.lanes = 6;
  rq.ring.max_pieces = 1;
  check_fits(rq, 1, 384 * mib, 4);

  // Where even max_pieces_per_chunk pieces leave the lanes too large, fewer lanes: 64
  // pieces of 4 KiB a chunk, 8 KiB a lane, so a 16 KiB limit holds two of the four.
  rq.count = 2 * 128 * wire_block;
  rq.ring.lanes = 4;
  rq.max_scratch_bytes = 16 << 10;
  CHECK(ChunkedRing::pieces_per_chunk(rq) == max_pieces_per_chunk);
  const Schedule two = ChunkedRing::build(rq);
  CHECK(two.scratch_bytes[0] == 16 << 10);
  CHECK(ring_scratch_in_bounds(two));
  // ... and the schedule still sums exactly, identically and within the bound.
  for (bool separate : {false, true}) {
    check_algorithm<ChunkedRing>(2, 2 * 128 * wire_block, Wire::f32, ~0u, 0, 4, separate, 16 << 10);
    check_algorithm<ChunkedRing>(3, 3 * 100 * wire_block + 77, Wire::bf16, 5u, 0, 3, separate, 4 << 10);
  }
  // Not even one lane fits: the smallest layout, for the communicator to report.
  rq.max_scratch_bytes = 4 << 10;
  CHECK(ChunkedRing::build(rq).scratch_bytes[0] == 2 * 4096);
}

TEST_CASE("ChunkedRing pipelines: uploads of one piece precede downloads of the next") {
  ScheduleRequest rq;
  rq.devices = 4;
  rq.count = 64 * 1024;
  rq.ring.piece_elems = 4096;
  rq.ring.lanes = 4;
  const auto s = ChunkedRing::build(rq);
  // 64Ki values / 4 chunks / 4096 per piece = 4 pieces per chunk; 6 steps.
  CHECK(s.devices[0].count(Role::compute) == 4 + 6 * 4);
  CHECK(s.devices[0].count(Role::transfer) == 6 * 4);
  // Host staging: each device sends 2(n-1) chunks of a quarter of the tensor.
  CHECK(s.host_bytes[0] == 6 * 16 * 1024 * 4);
  // Scratch is bounded by the lanes, not the tensor.
  CHECK(s.scratch_bytes[0] == 2 * 4 * 4096 * 4);
}

TEST_CASE("ChunkedRing with separate downloads: each on its own queue, the combine waiting for it") {
  ScheduleRequest rq;
  rq.devices = 3;
  rq.count = 48 * 1024;
  rq.ring.piece_elems = 4096;  // 4 pieces per chunk
  rq.ring.lanes = 2;
  rq.ring.separate_downloads = true;
  const auto s = ChunkedRing::build(rq);
  for (std::uint32_t d = 0; d < 3; ++d) {
    CAPTURE(d);
    const auto& bs = s.devices[d].batches;
    // 4 steps of 4 pieces: one download and one combine each, plus 4 packs.
    CHECK(s.devices[d].count(Role::download) == 4 * 4);
    CHECK(s.devices[d].count(Role::compute) == 4 + 4 * 4);
    std::uint32_t downloads = 0;
    for (std::size_t b = 0; b < bs.size(); ++b) {
      const Batch& batch = bs[b];
      if (batch.role == Role::download) {
        // One copy from the previous device's host staging into scratch, nothing else;
        // only the first of the call waits for the previous call.
        REQUIRE(batch.commands.size() == 1);
        CHECK(batch.commands[0].type == Command::Type::copy);
        CHECK(batch.commands[0].src.kind == Region::Kind::host);
        CHECK(batch.commands[0].src.host_owner == (d + 2) % 3);
        CHECK(batch.commands[0].dst.kind == Region::Kind::scratch);
        CHECK(batch.wait_previous_compute == (downloads == 0));
        CHECK(batch.wait_previous_call == (downloads == 0));
        CHECK(queue_of(batch) == Role::download);
        ++downloads;
        continue;
      }
      if (batch.role == Role::transfer) continue;  // uploads, as before
      // No compute batch copies any more; each combine waits for a download of its own device.
      for (const auto& c : batch.commands) CHECK(c.type != Command::Type::copy);
      bool combine = false;
      for (const auto& c : batch.commands) combine |= c.type == Command::Type::kernel && c.kernel == Kernel::combine;
      if (!combine) continue;
      bool waits_download = false;
      for (const auto& w : batch.waits) {
        CHECK(!(w.device != d && w.role == Role::download));  // peers never wait on downloads
        waits_download |= w.device == d && w.role == Role::download && w.index + 1 == downloads;
      }
      CHECK(waits_download);
    }
  }
}


TEST_CASE("Relay: one compute batch and one kernel per device, or publish and collect where the queue waits") {
  for (std::uint32_t n : {1u, 2u, 4u, 8u})
    for (std::uint32_t contributing : {(1u << n) - 1, ((1u << n) - 1) & ~1u, 0u})
      for (std::uint32_t queue_waits : {0u, (1u << n) - 1, 2u}) {
        ScheduleRequest rq;
        rq.devices = n;
        rq.count = 4097;
        rq.wire = Wire::bf16;  // asked for; the relay carries f32
        rq.contributing = contributing;
        rq.relay.queue_waits = queue_waits;
        rq.relay.spin_bound_ms = 1234;
        const Schedule s = Relay::build(rq);
        CAPTURE(n);
        CAPTURE(contributing);
        CAPTURE(queue_waits);
        CHECK(s.algorithm == "relay");
        CHECK(s.wire == Wire::f32);
        for (std::uint32_t d = 0; d < n; ++d) {
          CAPTURE(d);
          const auto& bs = s.devices[d].batches;
          CHECK(s.host_bytes[d] == 0);  // no host staging: the relay has memory of its own
          const std::uint32_t publish = relay_mode::arrive | (rq.contributes(d) ? relay_mode::contribute : 0u);
          for (const auto& b : bs) {
            CHECK(b.role == Role::compute);
            CHECK(queue_of(b) == Role::compute);
            CHECK(b.waits.empty());  // no cross-device semaphore at all
            CHECK(b.commands.front().kernel == Kernel::relay);
            CHECK(b.commands.front().args.count == rq.count);
            CHECK(b.commands.front().args.spin_bound == 1234);
          }
          CHECK(bs.front().wait_ready);
          CHECK(bs.front().wait_previous_call);
          if ((queue_waits >> d) & 1u) {
            REQUIRE(bs.size() == 2);
            CHECK(bs[0].commands[0].args.mode == publish);
            CHECK_FALSE(bs[0].wait_relay);
            CHECK(bs[1].wait_relay);
            CHECK_FALSE(bs[1].wait_ready);
            CHECK(bs[1].commands[0].args.mode == relay_mode::collect);
          } else {
            REQUIRE(bs.size() == 1);
            CHECK_FALSE(bs[0].wait_relay);
            CHECK(bs[0].commands[0].args.mode == (publish | relay_mode::collect));
          }
        }
      }
}

TEST_CASE("BySize: the relay up to its bounds where allowed or asked for, then OneShot and ChunkedRing") {
  ScheduleRequest rq;
  rq.devices = 4;
  rq.relay.max_bytes = 64 << 10;
  rq.by_size.oneshot_max_bytes = 12 << 20;
  auto algo = [&](std::size_t count) {
    rq.count = count;
    return std::string(BySize::build(rq).algorithm);
  };
  // Not allowed automatically (one physical device, or no host-visible device memory).
  rq.relay.automatic = false;
  CHECK(algo(4096) == "oneshot");
  // Allowed: the small calls.
  rq.relay.automatic = true;
  CHECK(algo(1) == "relay");
  CHECK(algo(16384) == "relay");   // 64 KiB
  CHECK(algo(16385) == "oneshot");
  CHECK(algo(std::size_t{8} << 20) == "ring");
  // The automatic choice's own bound (the group's RelayGate: 32 KiB on four GPUs); asked
  // for, the relay takes calls up to relay.max_bytes.
  rq.relay.automatic_max_bytes = 32 << 10;
  CHECK(algo(8192) == "relay");
  CHECK(algo(8193) == "oneshot");
  rq.by_size.choice = AlgoChoice::relay;
  CHECK(algo(16384) == "relay");
  rq.by_size.choice = AlgoChoice::automatic;
  rq.relay.automatic_max_bytes = 64 << 10;
  // A single device needs no relay.
  rq.devices = 1;
  CHECK(algo(16) == "oneshot");
  rq.devices = 4;
  // Asked for: every call that fits, the rest as automatic; other choices keep theirs.
  rq.relay.automatic = false;
  rq.by_size.choice = AlgoChoice::relay;
  CHECK(algo(16384) == "relay");
  CHECK(algo(16385) == "oneshot");
  CHECK(algo(std::size_t{8} << 20) == "ring");
  rq.devices = 1;
  CHECK(algo(16) == "relay");  // host-played peers
  rq.devices = 4;
  rq.relay.automatic = true;
  rq.by_size.choice = AlgoChoice::oneshot;
  CHECK(algo(16) == "oneshot");
  rq.by_size.choice = AlgoChoice::ring;
  CHECK(algo(16) == "ring");
}

TEST_CASE("host-played peers contribute small integers") {
  for (std::uint32_t p = 0; p < 31; ++p)
    for (std::size_t i = 0; i < 1000; ++i) {
      const float v = relay_host_peer_value(p, i);
      CHECK(v == float(int(v)));
      CHECK(v >= -8.0f);
      CHECK(v <= 7.0f);
    }
  CHECK(relay_host_peer_value(0, 0) != relay_host_peer_value(1, 0));
}

TEST_CASE("each schedule says how it travels: the relay's schedules take the relay, the others the queues") {
  ScheduleRequest rq;
  rq.devices = 2;
  rq.count = 1024;
  const Schedule relay = Relay::build(rq);
  CHECK(relay.transport == Transport::relay);
  CHECK(takes_relay(relay));
  CHECK_FALSE(relay.scratch_per_piece);
  const Schedule oneshot = OneShot::build(rq);
  CHECK(oneshot.transport == Transport::queues);
  CHECK_FALSE(takes_relay(oneshot));
  CHECK_FALSE(oneshot.scratch_per_piece);
  const Schedule ring = ChunkedRing::build(rq);
  CHECK_FALSE(takes_relay(ring));
  CHECK(ring.scratch_per_piece);  // the ring's scratch is its pieces', not the tensor's
  // BySize's schedules are the ones it chose, and say so whatever name they carry.
  rq.by_size.choice = AlgoChoice::relay;
  CHECK(takes_relay(BySize::build(rq)));
  rq.count = rq.relay.max_bytes / sizeof(float) + 1;  // too large for the relay: as automatic
  CHECK_FALSE(takes_relay(BySize::build(rq)));
  rq.by_size.choice = AlgoChoice::automatic;
  rq.relay.automatic = true;
  rq.count = 16;
  CHECK(takes_relay(BySize::build(rq)));
}
