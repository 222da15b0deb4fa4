// tpar-bench --soak: random AllReduce calls for a set time, every result checked. Where the
// table repeats one size on one communicator, the soak varies what a long-running host
// varies: device counts, syncs, algorithms and communicator options (one communicator at a
// time, made and destroyed again and again), sizes (a few per communicator, so that its
// plan cache both hits and misses, and now and then one it has not seen; a zero count now
// and then), wires, offsets (each device its own), devices that contribute nothing, and
// groups of deferred calls submitted by flush(), by a later call or by a wait.
//
// Every call's inputs are small integers that depend on the seed and the call, so any
// wire sums them exactly: each result must equal the host's sum on every device, bit for
// bit, and every byte of the buffers outside the calls' spans must be as it was. Everything
// random is drawn from one generator seeded by --seed, so a seed repeats the same calls
// (as far as the time allows).
#pragma once

#include "bench.hpp"
#include "options.hpp"
#include "rig.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tpar_bench {

// The soak's sizes: --sizes (drawn from), or the range -b (default 4 bytes) to -e (default
// 4M on lavapipe, 64M on GPUs), returned as {smallest, largest}.
inline std::vector<std::size_t> soak_sizes(const Config& c, bool gpu) {
  if (!c.sizes.empty()) return c.sizes;
  const std::size_t lo = c.has("--min-bytes") ? c.min_bytes : 4;
  const std::size_t hi = c.max_bytes ? c.max_bytes : (gpu ? std::size_t{64} << 20 : std::size_t{4} << 20);
  if (lo > hi)
    tpar_cli::usage_error(program, "-b " + human_bytes(lo) + " is above the soak's largest size, " + human_bytes(hi) +
                                       " by default on " + (gpu ? "GPUs" : "lavapipe") + ": give -e as well");
  return {lo, hi};
}

struct SoakTotals {
  std::uint64_t calls = 0, bytes = 0, wrong_values = 0, failures = 0, communicators = 0;
};

class Soak {
 public:
  Soak(const Config& cfg, const tpar::Options& env, tpar::DeviceGroup group)
      : cfg_(cfg), gpu_(group[0].capabilities().is_gpu()), max_devices_(group.size()), rng_(seed_) {
    slots_.resize(max_devices_ + 1);
    slots_[max_devices_].group.emplace(std::move(group));
    if (cfg.has("--sizes")) {
      sizes_ = cfg.sizes;
    } else {
      lo_ = cfg.sizes[0];
      hi_ = cfg.sizes[1];
    }
    largest_ = cfg.has("--sizes") ? *std::max_element(sizes_.begin(), sizes_.end()) : hi_;
    if (cfg.has("--algo")) algos_ = cfg.algos;
    else if (env.algo != tpar::AlgoChoice::automatic) algos_ = {env.algo};  // TPAR_ALGO rules every communicator
    else {
      algos_ = {tpar::AlgoChoice::automatic};
      algos_.insert(algos_.end(), std::begin(algo_choices), std::end(algo_choices));
      // The relay only where every device has the memory it needs (asked for elsewhere,
      // a communicator is refused).
      if (!(*slots_[max_devices_].group).relay_gate().possible) std::erase(algos_, tpar::AlgoChoice::relay);
    }
    if (cfg.has("--wire")) wires_ = cfg.wires;
    else {
      wires_ = {std::nullopt};
      wires_.insert(wires_.end(), std::begin(wire_choices), std::end(wire_choices));
    }
    if (cfg.has("--sync")) syncs_ = {cfg.sync};
    else if (env.sync != tpar::SyncChoice::automatic) syncs_ = {env.sync};  // TPAR_SYNC rules every communicator
    else syncs_ = {tpar::SyncChoice::automatic, tpar::SyncChoice::proxy, tpar::SyncChoice::native};
  }

  // Runs until the time is up; the exit status.
  int run() {
    // Every kind of device the soak opens, in order: a group of two drivers names both.
    const tpar::DeviceGroup& all = *slots_[max_devices_].group;
    std::vector<std::string> kinds;
    for (std::size_t d = 0; d < all.size(); ++d) {
      std::string k = all[d].capabilities().name + (all[d].is_virtual() ? ", virtual" : "");
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(std::move(k));
    }
    std::string names;
    for (const std::string& k : kinds) names += (names.empty() ? "" : "; ") + k;
    const std::string devices =
        "1 to " + std::to_string(max_devices_) + " device" + (max_devices_ == 1 ? "" : "s") + " (" + names + ")";
    // Always on stderr, -q or not: a run that dies halfway still leaves its seed.
    std::fprintf(stderr, "%s: soak for %g s on %s, seed %llu (--seed %llu repeats these calls)\n", program.c_str(),
                 cfg_.soak_seconds, devices.c_str(), static_cast<unsigned long long>(seed_),
                 static_cast<unsigned long long>(seed_));
    const auto start = Clock::now();
    const auto end = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(cfg_.soak_seconds));
    auto next_progress = start + std::chrono::seconds(10);
    // At least one round, however short the time: a soak that checked nothing proves nothing.
    do {
      try {
        epoch(end, next_progress, start);
      } catch (const tpar::Error& e) {  // opening a group of devices (the calls' own are caught in epoch)
        fail("opening devices", e.what());
      } catch (const tpar_example::Failure& e) {
        fail("allocating buffers", e.what());
      }
    } while (Clock::now() < end && totals_.failures < max_failures);
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    const bool wrong = totals_.wrong_values > 0, failed = totals_.failures > 0;
    std::printf("tpar-bench soak: seed %llu, %.1f s on %s: %llu calls, %s, %llu communicators, %llu wrong values, "
                "%llu failures: %s\n",
                static_cast<unsigned long long>(seed_), seconds, devices.c_str(), static_cast<unsigned long long>(totals_.calls),
                gigabytes(totals_.bytes).c_str(), static_cast<unsigned long long>(totals_.communicators),
                static_cast<unsigned long long>(totals_.wrong_values), static_cast<unsigned long long>(totals_.failures),
                wrong ? "WRONG RESULTS" : failed ? "FAILED" : "every result checked correct");
    std::fflush(stdout);
    return wrong ? exit_wrong_results : failed ? tpar_cli::exit_runtime_failure : 0;
  }

 private:
  static constexpr std::uint64_t max_failures = 10;  // then stop: later ones tend to repeat the first
  static constexpr std::size_t max_reported = 10;    // wrong values described on stderr

  // One device count's devices and buffers, opened when first drawn and kept.
  struct Slot {
    std::optional<tpar::DeviceGroup> group;
    std::vector<std::unique_ptr<DeviceRig>> rigs;
    std::size_t alignment = 4;  // span offsets: a multiple of every device's minStorageBufferOffsetAlignment
    std::size_t capacity = 0;   // bytes per device buffer
  };

  // One call of a round: its count and, per device, its offset, input and contribution.
  struct Call {
    std::size_t count = 0;
    std::optional<tpar::Wire> wire;
    std::vector<std::size_t> offset;  // bytes
    std::vector<char> contributes;    // empty: every device
    std::uint64_t id = 0;
  };

  static std::uint64_t seed_for(const Config& cfg) {
    if (cfg.seed) return *cfg.seed;
    return static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()) ^ std::random_device{}();
  }

  static std::uint64_t mix(std::uint64_t x) {  // splitmix64's finalizer
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  }

  // Call `id`'s input on device d at index i: an integer in [-8, 8], exact on every wire
  // and in any sum of up to 32 of them.
  float input(std::uint64_t id, std::size_t d, std::size_t i) const {
    return float(int(mix(seed_ ^ mix(id * 64 + d) ^ (std::uint64_t(i) << 20)) % 17) - 8);
  }
  // What the buffers hold outside every span: values no call produces.
  static float background(std::size_t d, std::size_t i) { return float(1000 + (i * 7 + d * 13) % 997); }
  // What a device that contributes nothing holds in its span: tpar must not read it.
  static float garbage(std::size_t i) { return i % 3 ? 1e30f : std::nanf(""); }

  std::size_t uniform(std::size_t lo, std::size_t hi) { return std::uniform_int_distribution<std::size_t>(lo, hi)(rng_); }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng_); }
  template <class T>
  T pick(const std::vector<T>& v) {
    return v[uniform(0, v.size() - 1)];
  }

  static std::string gigabytes(std::uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f GB", double(b) / 1e9);
    return buf;
  }

  // A payload size in bytes: from --sizes, or log-uniform over the range (a multiple of 4).
  std::size_t draw_size() {
    if (!sizes_.empty()) return pick(sizes_);
    const double l = std::log(double(lo_)), h = std::log(double(hi_));
    const double b = std::exp(std::uniform_real_distribution<double>(l, h)(rng_));
    return std::clamp<std::size_t>(static_cast<std::size_t>(b) / 4 * 4, lo_, hi_);
  }

  Slot& slot(std::size_t n) {
    Slot& s = slots_[n];
    if (!s.group) {
      tpar::GroupOptions o = cfg_.group;
      if (o.select.virtual_count) o.select.virtual_count = static_cast<std::uint32_t>(n);
      else o.select.count = static_cast<std::uint32_t>(n);
      s.group.emplace(tpar::DeviceGroup::create(o));
    }
    if (s.rigs.empty()) {
      for (std::size_t d = 0; d < n; ++d)
        s.alignment = std::max<std::size_t>(s.alignment, (*s.group)[d].capabilities().min_storage_offset_alignment);
      // Room for the largest call twice over, the gaps between a round's calls, and a tail.
      s.capacity = 2 * largest_ + (2 * max_defer() + 2) * 4 * s.alignment;
      for (std::size_t d = 0; d < n; ++d) s.rigs.push_back(std::make_unique<DeviceRig>((*s.group)[d], s.capacity, false));
    }
    return s;
  }

  std::uint32_t max_defer() const { return cfg_.has("--defer") ? cfg_.defer : 8; }

  void progress(Clock::time_point start, const std::string& now) {
    if (cfg_.quiet) return;
    std::fprintf(stderr, "%s: soak %.0f/%.0f s: %llu calls, %s, %llu wrong values, %llu failures; %s\n", program.c_str(),
                 std::chrono::duration<double>(Clock::now() - start).count(), cfg_.soak_seconds,
                 static_cast<unsigned long long>(totals_.calls), gigabytes(totals_.bytes).c_str(),
                 static_cast<unsigned long long>(totals_.wrong_values), static_cast<unsigned long long>(totals_.failures),
                 now.c_str());
  }

  // One communicator: its device count, sync, algorithm and options drawn, then rounds of
  // calls until the time is up or the rounds drawn are done.
  void epoch(Clock::time_point end, Clock::time_point& next_progress, Clock::time_point start) {
    std::vector<tpar::SyncChoice> syncs;
    // Counts with a sync to draw: NativeImport only where the group's gate allows it.
    std::size_t n = 0;
    for (int tries = 0; tries < 16 && syncs.empty(); ++tries) {
      n = uniform(1, max_devices_);
      const bool native_ok = n > 1 && slot(n).group->sync_gate().native_possible;
      syncs.clear();
      for (auto s : syncs_)
        if (s != tpar::SyncChoice::native || native_ok) syncs.push_back(s);
    }
    if (syncs.empty()) {  // only --sync native was allowed, and no drawn count can use it
      ++totals_.failures;
      std::fprintf(stderr, "%s: soak: NativeImport cannot run on %zu of these devices\n", program.c_str(), n);
      return;
    }
    Slot& s = slot(n);
    tpar::Options o;
    o.sync = pick(syncs);
    o.algo = pick(algos_);
    o.depth = cfg_.depth ? cfg_.depth : static_cast<std::uint32_t>(uniform(1, 8));
    o.lanes = cfg_.lanes ? cfg_.lanes : static_cast<std::uint32_t>(uniform(1, 8));
    o.max_pieces = cfg_.max_pieces ? cfg_.max_pieces : static_cast<std::uint32_t>(uniform(1, 8));
    o.piece_bytes = cfg_.piece_bytes           ? cfg_.piece_bytes
                    : chance(0.25) ? uniform(1, 64) * tpar::wire_block * sizeof(float)
                                   : 0;
    o.downloads = cfg_.has("--downloads") ? cfg_.downloads
                  : chance(0.5)           ? tpar::DownloadQueue::separate
                                          : tpar::DownloadQueue::compute;
    o.timeout = cfg_.soak_timeout > 0
                    ? std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(cfg_.soak_timeout))
                    : std::chrono::nanoseconds(std::chrono::seconds(gpu_ ? 60 : 120));
    // A few sizes per communicator, so that its cached plans are reused.
    std::vector<std::size_t> palette(uniform(1, 12));
    for (auto& b : palette) b = draw_size();
    const std::size_t rounds = uniform(10, 100);

    std::string what = std::to_string(n) + " device" + (n == 1 ? "" : "s") + ", sync " + std::string(tpar::to_string(o.sync)) +
                       ", algo " + std::string(tpar::to_string(o.algo)) + ", depth " + std::to_string(o.depth) + ", lanes " +
                       std::to_string(o.lanes) + ", max pieces " + std::to_string(o.max_pieces) + ", piece bytes " +
                       std::to_string(o.piece_bytes) + ", downloads " + std::string(tpar::to_string(o.downloads));
    std::optional<tpar::AnyCommunicator> comm;
    try {
      comm.emplace(tpar::make_communicator(*s.group, o));
      ++totals_.communicators;
      what += " (" + std::string(tpar::to_string(comm->sync_kind())) + ")";
      for (std::size_t r = 0; r < rounds && (r == 0 || Clock::now() < end); ++r) {
        round(s, *comm, palette, what);
        if (Clock::now() >= next_progress) {
          progress(start, what);
          next_progress += std::chrono::seconds(10);
        }
      }
    } catch (const tpar::Error& e) {
      fail(what, e.what());
    } catch (const tpar_example::Failure& e) {
      fail(what, e.what());
    }
  }

  void fail(const std::string& what, const std::string& why) {
    ++totals_.failures;
    std::fprintf(stderr, "%s: soak: FAILED after %llu calls (seed %llu; %s): %s\n", program.c_str(),
                 static_cast<unsigned long long>(totals_.calls), static_cast<unsigned long long>(seed_), what.c_str(),
                 why.c_str());
  }

  // A group of 1 to --defer calls in one buffer per device, then every value checked.
  void round(Slot& s, tpar::AnyCommunicator& comm, const std::vector<std::size_t>& palette, const std::string& what) {
    const std::size_t n = s.rigs.size();
    const std::size_t group_size = uniform(1, max_defer());
    std::vector<Call> calls;
    std::vector<std::size_t> used(n, 0);  // per device: bytes up to the end of the last span
    for (std::size_t j = 0; j < group_size; ++j) {
      Call c;
      c.id = next_call_++;
      c.count = chance(0.01) ? 0 : (chance(0.9) ? pick(palette) : draw_size()) / 4;
      c.wire = pick(wires_);
      bool fits = true;
      for (std::size_t d = 0; d < n; ++d) {
        const std::size_t at = (used[d] + s.alignment - 1) / s.alignment * s.alignment + uniform(0, 3) * s.alignment;
        c.offset.push_back(at);
        fits &= at + c.count * 4 + s.alignment <= s.capacity;
      }
      if (!fits) break;
      for (std::size_t d = 0; d < n; ++d) used[d] = c.offset[d] + c.count * 4;
      if (n > 1 && chance(0.1)) {
        for (std::size_t d = 0; d < n; ++d) c.contributes.push_back(chance(0.5));
      } else if (n == 1 && chance(0.05)) {
        c.contributes.push_back(false);
      }
      calls.push_back(std::move(c));
    }
    if (calls.empty()) return;

    // Inputs into each device's buffer: the background, then every call's span.
    std::vector<std::size_t> extent(n);
    for (std::size_t d = 0; d < n; ++d) {
      extent[d] = std::min(s.capacity, used[d] + s.alignment);
      float* p = static_cast<float*>(s.rigs[d]->stage->mapped);
      for (std::size_t i = 0; i < extent[d] / 4; ++i) p[i] = background(d, i);
      for (const auto& c : calls) {
        float* span = p + c.offset[d] / 4;
        const bool gives = c.contributes.empty() || c.contributes[d];
        for (std::size_t i = 0; i < c.count; ++i) span[i] = gives ? input(c.id, d, i) : garbage(i);
      }
      s.rigs[d]->copy(s.rigs[d]->stage->buffer, s.rigs[d]->data->buffer, extent[d]);
    }
    for (auto& r : s.rigs) r->finish();

    // The calls: each submitting itself, or deferred and then submitted by flush(), by
    // the last call (not deferred), or by the wait on a ticket.
    enum class Submit { each, flush, last_call, wait } how = Submit::each;
    if (calls.size() > 1 || chance(0.5)) how = static_cast<Submit>(uniform(0, 3));
    std::vector<tpar::Ticket> tickets;
    for (std::size_t j = 0; j < calls.size(); ++j) {
      const Call& c = calls[j];
      std::vector<tpar::BufferSpan> spans;
      for (std::size_t d = 0; d < n; ++d) spans.push_back({s.rigs[d]->data->buffer, c.offset[d], c.count, s.rigs[d]->data->size});
      bool contributes[tpar::max_group_devices];
      for (std::size_t d = 0; d < c.contributes.size(); ++d) contributes[d] = c.contributes[d];
      tpar::AllreduceArgs args;
      args.wire = c.wire;
      if (!c.contributes.empty()) args.contributes = std::span<const bool>(contributes, n);
      args.defer = how != Submit::each && !(how == Submit::last_call && j + 1 == calls.size());
      tickets.push_back(comm.allreduce(spans, args));
      ++totals_.calls;
      totals_.bytes += c.count * 4;
    }
    if (how == Submit::flush) comm.flush();
    if (chance(0.5)) {
      for (auto& t : tickets) t.wait();
    } else {
      for (auto t = tickets.rbegin(); t != tickets.rend(); ++t) t->wait();
    }

    // Every value of every device: the spans' sums, and the background around them.
    for (std::size_t d = 0; d < n; ++d) s.rigs[d]->copy(s.rigs[d]->data->buffer, s.rigs[d]->stage->buffer, extent[d]);
    for (auto& r : s.rigs) r->finish();
    if (cfg_.inject_fault && !injected_) inject(s, calls);
    std::vector<std::vector<char>> in_span(n);
    for (std::size_t d = 0; d < n; ++d) in_span[d].assign(extent[d] / 4, 0);
    for (const auto& c : calls) {
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < c.count; ++i) {
        float want = 0;
        for (std::size_t d = 0; d < n; ++d)
          if (c.contributes.empty() || c.contributes[d]) want += input(c.id, d, i);
        for (std::size_t d = 0; d < n; ++d) {
          const float got = static_cast<const float*>(s.rigs[d]->stage->mapped)[c.offset[d] / 4 + i];
          if (std::memcmp(&got, &want, sizeof got) != 0) {
            ++wrong;
            report(what, call_text(c, d), d, i, got, want);
          }
        }
      }
      for (std::size_t d = 0; d < n; ++d) std::fill_n(in_span[d].begin() + c.offset[d] / 4, c.count, 1);
      totals_.wrong_values += wrong;
    }
    for (std::size_t d = 0; d < n; ++d) {
      const float* p = static_cast<const float*>(s.rigs[d]->stage->mapped);
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < extent[d] / 4; ++i) {
        const float want = background(d, i);
        if (!in_span[d][i] && std::memcmp(&p[i], &want, sizeof want) != 0) {
          ++wrong;
          report(what, "outside every call's span (byte " + std::to_string(4 * i) + ")", d, i, p[i], want);
        }
      }
      totals_.wrong_values += wrong;
    }
  }

  static std::string call_text(const Call& c, std::size_t d) {
    return "in call " + std::to_string(c.id) + " (count " + std::to_string(c.count) + ", wire " +
           (c.wire ? std::string(tpar::to_string(*c.wire)) : "auto") + ", offset " + std::to_string(c.offset[d]) +
           (c.contributes.empty() ? "" : ", some devices contribute nothing") + ")";
  }

  // --inject-fault: the last device's first result of the first call that has one, and
  // the value just past the last span of that device, both changed as a wrong write would.
  void inject(Slot& s, const std::vector<Call>& calls) {
    const std::size_t d = s.rigs.size() - 1;
    float* p = static_cast<float*>(s.rigs[d]->stage->mapped);
    for (const auto& c : calls)
      if (c.count > 0) {
        p[c.offset[d] / 4] += 1.0f;
        const auto& last = calls.back();
        p[(last.offset[d] + last.count * 4) / 4] = 0.0f;
        injected_ = true;
        std::fprintf(stderr, "%s: soak: --inject-fault: call %llu's first value on device %zu and the value after the last span changed\n",
                     program.c_str(), static_cast<unsigned long long>(c.id), d);
        return;
      }
  }

  void report(const std::string& what, const std::string& where, std::size_t d, std::size_t i, float got, float want) {
    if (reported_++ >= max_reported) return;
    std::fprintf(stderr, "%s: soak: WRONG value %s, device %zu, index %zu: got %g, want %g (seed %llu; %s)\n",
                 program.c_str(), where.c_str(), d, i, double(got), double(want), static_cast<unsigned long long>(seed_),
                 what.c_str());
  }

  const Config& cfg_;
  const bool gpu_;
  const std::size_t max_devices_;
  const std::uint64_t seed_ = seed_for(cfg_);
  std::mt19937_64 rng_;
  std::vector<Slot> slots_;
  std::vector<std::size_t> sizes_;
  std::size_t lo_ = 4, hi_ = 4, largest_ = 4;
  std::vector<tpar::AlgoChoice> algos_;
  std::vector<std::optional<tpar::Wire>> wires_;
  std::vector<tpar::SyncChoice> syncs_;
  SoakTotals totals_;
  std::uint64_t next_call_ = 0;
  std::size_t reported_ = 0;
  bool injected_ = false;
};

inline int run_soak(const Config& cfg, const tpar::Options& env, tpar::DeviceGroup group) {
  Soak soak(cfg, env, std::move(group));
  return soak.run();
}

}  // namespace tpar_bench
