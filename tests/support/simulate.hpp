// Runs a Schedule on the CPU with the reference wire codec: the oracle GPU results are
// compared with bit for bit. Batches run one at a time in a random order that respects
// queue order and waits, so a dependency a schedule forgot shows up as a result that
// changes with the seed; a schedule that cannot finish is reported as a deadlock.
#pragma once

#include <tpar/detail/wire_codec.hpp>
#include <tpar/sync/schedule.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tpar_test {

using namespace tpar;

struct SimDevice {
  std::vector<float> user;
  std::vector<std::uint32_t> scratch;
  std::vector<std::uint32_t> host;
};

// Runs kernel command `c` on device `self` of `devs` (OneShot's direct sum reads the
// peers' host staging).
inline void run_kernel(Wire w, const Command& c, std::vector<SimDevice>& devs, std::size_t self) {
  SimDevice& dev = devs[self];
  const auto& a = c.args;
  std::uint32_t* scratch = dev.scratch.data();
  float* user = dev.user.data();
  const std::size_t words = wire_words(w, a.count);
  std::vector<float> in(a.count), acc(a.count);
  switch (c.kernel) {
    case Kernel::pack:
      if (a.mode == static_cast<std::uint32_t>(PackMode::zeros)) std::fill_n(scratch + a.out_off, words, 0u);
      else detail::encode_piece(w, user + a.user_off, a.count, scratch + a.out_off);
      if (a.host_out_off != KernelArgs::no_host_out) {
        if (std::size_t(a.host_out_off) + words > dev.host.size()) throw std::runtime_error("pack writes past its host staging");
        std::copy_n(scratch + a.out_off, words, dev.host.data() + a.host_out_off);
      }
      return;
    case Kernel::combine: {
      const auto mode = static_cast<CombineMode>(a.mode);
      detail::decode_piece(w, scratch + a.in_off, a.count, in.data());
      switch (mode) {
        case CombineMode::add_forward:
        case CombineMode::add_final:
          for (std::size_t i = 0; i < a.count; ++i) acc[i] = detail::add_flushed(user[a.user_off + i], in[i]);
          detail::encode_piece(w, acc.data(), a.count, scratch + a.out_off);
          if (mode == CombineMode::add_final) detail::decode_piece(w, scratch + a.out_off, a.count, user + a.user_off);
          return;
        case CombineMode::copy:
        case CombineMode::copy_final:
          std::memmove(scratch + a.out_off, scratch + a.in_off, words * 4);
          if (mode == CombineMode::copy_final) std::copy(in.begin(), in.end(), user + a.user_off);
          return;
        case CombineMode::unpack:
          std::copy(in.begin(), in.end(), user + a.user_off);
          return;
      }
      return;
    }
    case Kernel::relay:
      // Its sum is formed by the communicator's host thread while the kernels run: tested
      // on devices (tests/comm/test_relay.cpp), not here.
      throw std::runtime_error("the relay is not simulated");
    case Kernel::oneshot: {
      bool first = true;
      std::vector<float> sum(a.count, 0.0f);
      const bool direct = a.mode == static_cast<std::uint32_t>(OneShotMode::direct);
      if (direct && (a.nseg > max_direct_peers || a.self != self)) throw std::runtime_error("bad direct oneshot");
      for (std::uint32_t j = 0; j < a.nseg; ++j) {
        if (!((a.mask >> j) & 1u)) continue;
        const std::uint32_t* seg = scratch + a.in_off + j * a.seg_words;
        if (direct && j == self) seg = scratch + a.out_off;
        else if (direct) {
          if (std::size_t(a.in_off) + words > devs[j].host.size()) throw std::runtime_error("oneshot reads past a peer's host staging");
          seg = devs[j].host.data() + a.in_off;
        }
        detail::decode_piece(w, seg, a.count, in.data());
        for (std::size_t i = 0; i < a.count; ++i) sum[i] = first ? detail::flush_subnormal(in[i]) : detail::add_flushed(sum[i], in[i]);
        first = false;
      }
      std::copy(sum.begin(), sum.end(), user + a.user_off);
      return;
    }
  }
}

// Runs `s` over `inputs` (one vector per device, modified in place). `merged`: each
// device runs all its batches on one queue (as on lavapipe); otherwise compute, transfer
// and download are separate queues, each batch on queue_of(batch).
inline void simulate(const Schedule& s, std::vector<std::vector<float>>& inputs, std::uint64_t seed, bool merged) {
  const std::size_t n = s.devices.size();
  std::vector<SimDevice> dev(n);
  for (std::size_t d = 0; d < n; ++d) {
    dev[d].user = inputs[d];
    dev[d].scratch.assign(s.scratch_bytes[d] / 4 + 1, 0xDEADBEEFu);
    dev[d].host.assign(s.host_bytes[d] / 4 + 1, 0xDEADBEEFu);
  }
  // Queues: per device either one (merged) or one per role; each a list of batch indices.
  struct Queue {
    std::size_t device;
    std::vector<std::size_t> batches;
    std::size_t next = 0;
  };
  std::vector<Queue> queues;
  std::vector<std::vector<std::uint32_t>> role_index(n);  // batch -> index within its role
  std::vector<std::array<std::uint32_t, role_count>> done(n, {0, 0, 0});
  for (std::size_t d = 0; d < n; ++d) {
    const auto& bs = s.devices[d].batches;
    std::array<std::uint32_t, role_count> counters{0, 0, 0};
    for (const auto& b : bs) role_index[d].push_back(counters[static_cast<int>(b.role)]++);
    if (merged) {
      Queue q{d, {}};
      for (std::size_t i = 0; i < bs.size(); ++i) q.batches.push_back(i);
      queues.push_back(q);
    } else {
      for (Role r : {Role::compute, Role::transfer, Role::download}) {
        Queue q{d, {}};
        for (std::size_t i = 0; i < bs.size(); ++i)
          if (queue_of(bs[i]) == r) q.batches.push_back(i);
        queues.push_back(q);
      }
    }
  }
  std::mt19937_64 rng(seed);
  for (;;) {
    std::vector<std::size_t> runnable;
    bool finished = true;
    for (std::size_t qi = 0; qi < queues.size(); ++qi) {
      auto& q = queues[qi];
      if (q.next == q.batches.size()) continue;
      finished = false;
      const auto& b = s.devices[q.device].batches[q.batches[q.next]];
      bool ok = true;
      for (const auto& w : b.waits) ok &= done[w.device][static_cast<int>(w.role)] > w.index;
      if (ok) runnable.push_back(qi);
    }
    if (finished) break;
    if (runnable.empty()) throw std::runtime_error("schedule deadlocks");
    auto& q = queues[runnable[rng() % runnable.size()]];
    const std::size_t d = q.device;
    const auto& b = s.devices[d].batches[q.batches[q.next]];
    // Check that waits only name batches that exist and that the role indices agree.
    for (const auto& c : b.commands) {
      if (c.type == Command::Type::copy) {
        auto word_ptr = [&](const Region& r) -> std::uint32_t* {
          auto& mem = r.kind == Region::Kind::scratch ? dev[d].scratch : dev[r.host_owner].host;
          if (r.offset % 4 || (r.offset + c.bytes) / 4 > mem.size()) throw std::runtime_error("copy out of range");
          return mem.data() + r.offset / 4;
        };
        std::memmove(word_ptr(c.dst), word_ptr(c.src), c.bytes);
      } else if (c.type == Command::Type::kernel) {
        run_kernel(s.wire, c, dev, d);
      }
    }
    done[d][static_cast<int>(b.role)] = role_index[d][q.batches[q.next]] + 1;
    ++q.next;
  }
  for (std::size_t d = 0; d < n; ++d) inputs[d] = dev[d].user;
}

}  // namespace tpar_test
