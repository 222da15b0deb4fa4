// ChunkedRing — for large tensors, where bandwidth is everything: reduce-scatter then
// all-gather around the ring 0 -> 1 -> ... -> n-1 -> 0. The tensor is cut into n chunks
// and each chunk into pieces; a piece travels 2(n-1) hops, each an upload by the sender
// (transfer queue, into its host staging) and a download + combine by the receiver
// (compute queue), so uploads of one piece overlap downloads and adds of the next. With
// RingParams::separate_downloads the download runs on its own queue (a second copy engine)
// and the combine waits for it, so the device copies both ways at once on two engines.
//
// Chunk c starts at device c and is reduced along c, c+1, ..., c-1; its owner c-1 rounds
// the final sum through the wire and keeps exactly what it sends, and every other device
// decodes those same bytes, so all devices end bit-identical.
#pragma once

#include <tpar/algo/request.hpp>

#include <algorithm>
#include <map>
#include <utility>

namespace tpar::inline v0 {

struct ChunkedRing {
  static constexpr std::string_view name = "ring";
  static constexpr AlgoChoice choice = AlgoChoice::ring;  // what Options::algo calls it

  struct Piece {
    std::size_t lo = 0, hi = 0;  // values [lo, hi) of the tensor
    std::size_t size() const { return hi - lo; }
  };

  // The pieces of chunk c (some may be empty when the tensor is small).
  static std::vector<Piece> pieces(std::size_t count, std::uint32_t n, std::uint32_t c, std::size_t per_chunk) {
    const std::size_t blocks = (count + wire_block - 1) / wire_block;
    const std::size_t b0 = blocks * c / n, b1 = blocks * (c + 1) / n;
    const std::size_t chunk_blocks = b1 - b0;
    std::vector<Piece> out(per_chunk);
    for (std::size_t s = 0; s < per_chunk; ++s) {
      const std::size_t lo = (b0 + chunk_blocks * s / per_chunk) * wire_block;
      const std::size_t hi = (b0 + chunk_blocks * (s + 1) / per_chunk) * wire_block;
      out[s] = {std::min(lo, count), std::min(hi, count)};
    }
    return out;
  }

  // Bytes of one lane's region (a piece in, a piece out use two): the largest piece on
  // the wire.
  static std::uint64_t lane_bytes_for(const ScheduleRequest& rq, std::size_t per_chunk) {
    std::size_t largest = 0;
    for (std::uint32_t c = 0; c < rq.devices; ++c)
      for (const auto& p : pieces(rq.count, rq.devices, c, per_chunk)) largest = std::max(largest, p.size());
    return detail::align_up(std::max<std::uint64_t>(wire_words(rq.wire, largest) * 4, 4), detail::region_align);
  }

  // The pieces per chunk the request asks for: with a fixed piece size, enough that no
  // piece exceeds it, at most max_pieces_per_chunk; else as many as keep pieces at least
  // min_piece_wire_bytes on the wire, at most max_pieces.
  static std::size_t preferred_pieces(const ScheduleRequest& rq) {
    const std::size_t blocks = (rq.count + wire_block - 1) / wire_block;
    const std::size_t max_chunk_blocks = (blocks + rq.devices - 1) / rq.devices;
    if (rq.ring.piece_elems) {
      const std::size_t piece_blocks = std::max<std::size_t>(1, rq.ring.piece_elems / wire_block);
      return std::clamp<std::size_t>((max_chunk_blocks + piece_blocks - 1) / piece_blocks, 1, max_pieces_per_chunk);
    }
    const std::size_t chunk_wire = wire_words(rq.wire, max_chunk_blocks * wire_block) * 4;
    const std::size_t pieces = chunk_wire / std::max<std::size_t>(rq.ring.min_piece_wire_bytes, 1);
    return std::clamp<std::size_t>(pieces, 1, std::max<std::uint32_t>(rq.ring.max_pieces, 1));
  }

  // Pieces per chunk: those asked for, or where their lanes would not fit in
  // max_scratch_bytes (a kernel binds the whole scratch), more and smaller ones, up to
  // max_pieces_per_chunk: a call that runs beats one that cannot.
  static std::size_t pieces_per_chunk(const ScheduleRequest& rq) {
    std::size_t per_chunk = preferred_pieces(rq);
    if (rq.max_scratch_bytes) {
      const std::uint64_t lanes = std::max<std::uint32_t>(rq.ring.lanes, 1);
      while (per_chunk < max_pieces_per_chunk && 2 * lanes * lane_bytes_for(rq, per_chunk) > rq.max_scratch_bytes) ++per_chunk;
    }
    return per_chunk;
  }

  // Lanes the scratch holds: those asked for, fewer where even the most pieces leave them
  // too large for max_scratch_bytes (at least one; what still does not fit, the
  // communicator reports).
  static std::uint32_t lanes_for(const ScheduleRequest& rq, std::uint64_t lane_bytes) {
    const std::uint32_t lanes = std::max<std::uint32_t>(rq.ring.lanes, 1);
    if (!rq.max_scratch_bytes) return lanes;
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(rq.max_scratch_bytes / (2 * lane_bytes), 1, lanes));
  }

  static Schedule build(const ScheduleRequest& rq) {
    rq.validate_enums();
    using detail::align_up;
    const std::uint32_t n = rq.devices;
    const std::size_t per_chunk = pieces_per_chunk(rq);
    std::vector<std::vector<Piece>> chunk(n);
    for (std::uint32_t c = 0; c < n; ++c) chunk[c] = pieces(rq.count, n, c, per_chunk);
    const std::uint64_t lane_bytes = lane_bytes_for(rq, per_chunk);
    const std::uint32_t lanes = lanes_for(rq, lane_bytes);
    auto recv_region = [&](std::uint32_t lane) { return 2 * lane * lane_bytes; };
    auto send_region = [&](std::uint32_t lane) { return (2 * lane + 1) * lane_bytes; };
    const std::uint32_t steps = 2 * (n - 1);
    auto mod = [n](std::int64_t v) { return static_cast<std::uint32_t>(((v % n) + n) % n); };

    Schedule s = empty_schedule(name, rq);
    s.scratch_per_piece = true;
    s.scratch_bytes.assign(n, 2 * lanes * lane_bytes);

    // Pass 1: every device's uploads, in the order its transfer queue runs them, with
    // their place in its host staging. Device d sends chunk d-t at step t.
    struct Upload {
      std::uint32_t index;
      std::uint64_t offset;
    };
    std::vector<std::map<std::pair<std::uint32_t, std::size_t>, Upload>> uploads(n);
    for (std::uint32_t d = 0; d < n; ++d) {
      std::uint32_t index = 0;
      std::uint64_t offset = 0;
      for (std::uint32_t t = 0; t < steps; ++t) {
        const auto& ps = chunk[mod(std::int64_t(d) - t)];
        for (std::size_t p = 0; p < ps.size(); ++p) {
          if (!ps[p].size()) continue;
          uploads[d][{t, p}] = {index++, offset};
          offset += align_up(wire_words(rq.wire, ps[p].size()) * 4, detail::region_align);
        }
      }
      s.host_bytes[d] = offset;
    }

    // Pass 2: each device's batches in one order valid for a single queue: every compute
    // batch is followed by the upload of what it produced.
    for (std::uint32_t d = 0; d < n; ++d) {
      auto& out = s.devices[d].batches;
      const bool mine = rq.contributes(d);
      std::uint32_t compute_index = 0, download_index = 0;
      std::vector<std::int64_t> lane_reader(lanes, -1);  // last upload reading each lane
      // Separate downloads write a lane's receive region on their own queue, so each waits
      // for whatever read that region last: a combine, and an upload forwarding it.
      std::vector<std::int64_t> recv_combine(lanes, -1), recv_upload(lanes, -1);

      auto push_compute = [&](Batch b, std::uint32_t lane) {
        b.role = Role::compute;
        if (compute_index == 0) b.wait_ready = b.wait_previous_call = true;
        if (lane_reader[lane] >= 0)
          b.waits.push_back({d, Role::transfer, static_cast<std::uint32_t>(lane_reader[lane])});
        out.push_back(std::move(b));
        return compute_index++;
      };
      auto push_download = [&](const BatchRef& from, std::uint64_t offset, std::uint64_t bytes, std::uint32_t lane) {
        Batch b;
        b.role = Role::download;
        // The first download of a call may overwrite what the previous call's combines
        // and uploads still read; later ones follow it on their queue.
        if (download_index == 0) b.wait_previous_call = b.wait_previous_compute = true;
        b.waits.push_back(from);
        if (recv_combine[lane] >= 0) b.waits.push_back({d, Role::compute, static_cast<std::uint32_t>(recv_combine[lane])});
        if (recv_upload[lane] >= 0) b.waits.push_back({d, Role::transfer, static_cast<std::uint32_t>(recv_upload[lane])});
        b.commands.push_back(detail::copy_cmd(Region::host(from.device, offset), Region::scratch(recv_region(lane)), bytes));
        out.push_back(std::move(b));
        return download_index++;
      };
      auto push_upload = [&](std::uint32_t t, std::size_t p, std::uint32_t producer, std::uint64_t from,
                             std::uint64_t bytes, std::uint32_t lane) {
        const auto& up = uploads[d].at({t, p});
        Batch b;
        b.role = Role::transfer;
        b.waits.push_back({d, Role::compute, producer});
        b.commands.push_back(detail::copy_cmd(Region::scratch(from), Region::host(d, up.offset), bytes));
        b.commands.push_back(detail::barrier_cmd(Command::Type::host_barrier));
        out.push_back(std::move(b));
        lane_reader[lane] = up.index;
        if (from == recv_region(lane)) recv_upload[lane] = up.index;
      };

      // Step 0: pack this device's own chunk.
      const auto& own = chunk[d];
      for (std::size_t p = 0; p < own.size(); ++p) {
        if (!own[p].size()) continue;
        const std::uint32_t lane = compute_index % lanes;
        KernelArgs a;
        a.count = static_cast<std::uint32_t>(own[p].size());
        a.user_off = static_cast<std::uint32_t>(own[p].lo);
        a.out_off = static_cast<std::uint32_t>(send_region(lane) / 4);
        a.mode = static_cast<std::uint32_t>(mine ? PackMode::encode : PackMode::zeros);
        Batch b;
        b.commands.push_back(detail::kernel_cmd(Kernel::pack, a));
        const auto producer = push_compute(std::move(b), lane);
        push_upload(0, p, producer, send_region(lane), wire_words(rq.wire, own[p].size()) * 4, lane);
      }

      // Steps 0..2n-3: receive chunk d-1-t from device d-1 and combine it.
      const std::uint32_t src = mod(std::int64_t(d) - 1);
      for (std::uint32_t t = 0; t < steps; ++t) {
        const auto& ps = chunk[mod(std::int64_t(d) - 1 - t)];
        CombineMode mode;
        if (t + 2 < n) mode = mine ? CombineMode::add_forward : CombineMode::copy;
        else if (t + 2 == n) mode = mine ? CombineMode::add_final : CombineMode::copy_final;
        else mode = CombineMode::unpack;
        const bool reduce_step = t + 2 <= n;  // output in the send region; else forward what arrived
        for (std::size_t p = 0; p < ps.size(); ++p) {
          if (!ps[p].size()) continue;
          const std::uint32_t lane = compute_index % lanes;
          const std::uint64_t bytes = wire_words(rq.wire, ps[p].size()) * 4;
          const auto& in = uploads[src].at({t, p});
          KernelArgs a;
          a.count = static_cast<std::uint32_t>(ps[p].size());
          a.user_off = static_cast<std::uint32_t>(ps[p].lo);
          a.in_off = static_cast<std::uint32_t>(recv_region(lane) / 4);
          a.out_off = static_cast<std::uint32_t>(send_region(lane) / 4);
          a.mode = static_cast<std::uint32_t>(mode);
          Batch b;
          if (rq.ring.separate_downloads) {
            const auto got = push_download({src, Role::transfer, in.index}, in.offset, bytes, lane);
            b.waits.push_back({d, Role::download, got});
          } else {
            b.waits.push_back({src, Role::transfer, in.index});
            b.commands.push_back(detail::copy_cmd(Region::host(src, in.offset), Region::scratch(recv_region(lane)), bytes));
            b.commands.push_back(detail::barrier_cmd());
          }
          b.commands.push_back(detail::kernel_cmd(Kernel::combine, a));
          const auto producer = push_compute(std::move(b), lane);
          recv_combine[lane] = producer;
          if (t + 1 < steps)
            push_upload(t + 1, p, producer, reduce_step ? send_region(lane) : recv_region(lane), bytes, lane);
        }
      }
    }
    return s;
  }
};

static_assert(Algorithm<ChunkedRing>);

}  // namespace tpar::inline v0
