// tpar-bench's main mode: back-to-back in-place AllReduce calls timed per size, wire and
// algorithm, then every result checked (integers exact on every device, random data
// within its bound and bit-identical across devices).
#pragma once

#include "bench.hpp"
#include "link.hpp"
#include "options.hpp"
#include "report.hpp"
#include "rig.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace tpar_bench {

// Whether any row of this communicator runs ChunkedRing (the algorithm the schedule for
// each size and wire gets, TPAR_ALGO included).
inline bool runs_ring(const tpar::AnyCommunicator& comm, const Config& cfg) {
  for (std::size_t bytes : cfg.sizes)
    for (const auto& wire : cfg.wires)
      if (tpar::BySize::build(comm.schedule_request(bytes / 4, wire)).algorithm == tpar::ChunkedRing::name) return true;
  return false;
}

// Runs the table; true when every result checked correct.
// The relay's calls one at a time, each waited for before the next, and where the time of
// one went: the call itself on the host (recording, submission), from its submission to
// every device's first values seen by the relay's thread (the GPUs start the kernels,
// which publish), the thread's sum and its writes into every slot, and the rest (the
// kernels see the flag, copy the sum and end; the done point; the host wakes). Means
// over `iters` calls.
template <class Restore>
void print_relay_breakdown(tpar::AnyCommunicator& comm, const std::vector<tpar::BufferSpan>& spans, const tpar::AllreduceArgs& args,
                           int iters, Restore&& restore) {
  using Clock = std::chrono::steady_clock;
  const tpar::RelayStats s0 = comm.relay_stats();
  double call = 0, total = 0;
  for (int i = 0; i < iters; ++i) {
    if (i % 50 == 0) restore();  // the values grow n-fold per call
    const auto t0 = Clock::now();
    tpar::Ticket t = comm.allreduce(spans, args);
    const auto t1 = Clock::now();
    t.wait();
    const auto t2 = Clock::now();
    call += std::chrono::duration<double, std::micro>(t1 - t0).count();
    total += std::chrono::duration<double, std::micro>(t2 - t0).count();
  }
  restore();
  const tpar::RelayStats s1 = comm.relay_stats();
  const double calls = double(s1.calls - s0.calls);
  if (calls < iters) return;  // some went another way
  const double arriving = std::chrono::duration<double, std::micro>(s1.arriving - s0.arriving).count() / calls;
  const double serving = std::chrono::duration<double, std::micro>(s1.serving - s0.serving).count() / calls;
  call /= iters;
  total /= iters;
  std::printf("#   one call at a time: %.1f us = call %.1f (record, submit) + %.1f (GPU starts, publishes; the thread sees it) + "
              "%.1f (host sum into every slot, flags) + %.1f (kernels see the flag, copy, end; done point; host wakes)\n",
              total, call, arriving, serving, total - call - arriving - serving);
}

inline bool run_sweep(tpar::DeviceGroup& group, const Config& cfg, const std::optional<LinkFigures>& link,
                      const std::string& header, const std::string& names, std::size_t largest) {
  const std::size_t n = group.size();
  std::vector<std::unique_ptr<DeviceRig>> rigs;
  for (std::size_t d = 0; d < n; ++d) rigs.push_back(std::make_unique<DeviceRig>(group[d], largest));

  std::vector<Row> rows;
  const std::size_t total = cfg.sizes.size() * cfg.wires.size() * cfg.algos.size();
  std::size_t done_rows = 0;
  bool all_ok = true;
  const bool text = !cfg.csv && !cfg.json;
  bool header_printed = false;
  for (auto algo : cfg.algos) {
    tpar::Options options;
    options.algo = algo;
    options.sync = cfg.sync;
    options.timeout = std::chrono::seconds(60);
    if (cfg.piece_bytes) options.piece_bytes = cfg.piece_bytes;
    options.profile = cfg.profile;
    if (cfg.lanes) options.lanes = cfg.lanes;
    if (cfg.max_pieces) options.max_pieces = cfg.max_pieces;
    options.downloads = cfg.downloads;
    options.depth = cfg.depth ? cfg.depth : cfg.defer > 1 ? std::min<std::uint32_t>(8, 2 * cfg.defer) : options.depth;
    if (cfg.relay_max) options.relay_max_bytes = cfg.relay_max;
    else if (cfg.relay_peers) options.relay_max_bytes = std::max(options.relay_max_bytes, largest);
    options.relay_host_peers = cfg.relay_peers;
    options.relay_scalar_sum = cfg.relay_scalar_sum;
    auto comm = tpar::make_communicator(group, options);
    // With host-played peers no cross-device sync runs: the relay's thread is the peer.
    const std::string sync_name = cfg.relay_peers ? std::string("host-played") : std::string(to_string(comm.sync_kind()));
    if (text && !header_printed) {  // once a communicator exists: a failure to make one prints nothing
      print_table_header(cfg, header, n);
      header_printed = true;
    }
    if (text && runs_ring(comm, cfg))
      std::printf("# ring downloads: %s\n", comm.schedule_request(1).ring.separate_downloads
                                                ? "batches of their own (second transfer queue where the device has one)"
                                                : "in the combine's batch (compute queue)");
    if (text && cfg.relay_peers)
      std::printf("# relay floor: device 0 and %u peer%s played by the relay's host thread (n = %zu), every call through the "
                  "relay; relay(us) is that thread's CPU per call, part of cpu(us)\n",
                  cfg.relay_peers, cfg.relay_peers == 1 ? "" : "s", n + cfg.relay_peers);
    if (text && cfg.defer > 1)
      std::printf("# timed calls: %u per submission (deferred, then flushed), depth %u\n", cfg.defer, options.depth);
    for (std::size_t bytes : cfg.sizes) {
      for (const auto& wire : cfg.wires) {
        const std::size_t count = bytes / 4;
        ++done_rows;
        if (!cfg.quiet && total > 1)
          std::fprintf(stderr, "%s: [%zu/%zu] %s %s %s\n", program.c_str(), done_rows, total, human_bytes(bytes).c_str(),
                       wire ? std::string(to_string(*wire)).c_str() : "auto", std::string(to_string(algo)).c_str());
        std::vector<tpar::BufferSpan> spans;
        for (auto& r : rigs) spans.push_back({r->data->buffer, 0, count, r->data->size});
        tpar::AllreduceArgs args;
        args.wire = wire;
        tpar::AllreduceArgs timed = args;
        timed.defer = cfg.defer > 1;

        // Inputs for timing: magnitudes near 2^-100, so that a batch of back-to-back
        // calls (each multiplying by n) stays within range; restored between batches.
        std::mt19937 rng(1234);
        std::uniform_real_distribution<float> u(1.0f, 2.0f);
        for (std::size_t d = 0; d < n; ++d) {
          float* p = static_cast<float*>(rigs[d]->stage->mapped);
          for (std::size_t i = 0; i < count; ++i) p[i] = std::ldexp(u(rng), -100) * ((i + d) % 2 ? 1.0f : -1.0f);
          rigs[d]->copy(rigs[d]->stage->buffer, rigs[d]->pristine->buffer, bytes);
          rigs[d]->copy(rigs[d]->pristine->buffer, rigs[d]->data->buffer, bytes);
        }
        for (auto& r : rigs) r->finish();
        auto restore = [&] {
          for (auto& r : rigs) r->copy(r->pristine->buffer, r->data->buffer, bytes);
          for (auto& r : rigs) r->finish();
        };
        const int batch = std::max(1, static_cast<int>(200.0 / std::max(1.0, std::log2(double(n)))));
        for (int i = 0; i < cfg.warmup; ++i) comm.allreduce(spans, args).wait();
        restore();
        const int iters = cfg.iters ? cfg.iters : bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 40 : 10;
        std::vector<double> runs, cpus, relay_cpus;
        for (int rep = 0; rep < cfg.repeat; ++rep) {
        double seconds = 0, cpu = 0;
        const tpar::RelayStats relay0 = comm.relay_stats();
        for (int done = 0; done < iters;) {
          const int k = std::min(batch, iters - done);
          const double c0 = cpu_seconds();
          const auto t0 = Clock::now();
          tpar::Ticket last;
          for (int i = 0; i < k; ++i) {
            last = comm.allreduce(spans, timed);
            if ((i + 1) % cfg.defer == 0) comm.flush();
          }
          comm.flush();  // the rest of a group: counted as the calls' CPU, not as the wait's
          // The bench's own host wait is not tpar's work (some drivers spin in it).
          const double w0 = thread_cpu_seconds();
          last.wait();
          const double waited = thread_cpu_seconds() - w0;
          seconds += std::chrono::duration<double>(Clock::now() - t0).count();
          cpu += cpu_seconds() - c0 - waited;
          done += k;
          if (done < iters) restore();
        }
        runs.push_back(seconds);
        cpus.push_back(cpu);
        const tpar::RelayStats relay1 = comm.relay_stats();
        relay_cpus.push_back(relay1.calls > relay0.calls ? std::chrono::duration<double>(relay1.cpu - relay0.cpu).count() : -1.0);
        restore();
        }
        // Medians: a run disturbed by something else on the host moves neither figure.
        std::sort(runs.begin(), runs.end());
        std::sort(cpus.begin(), cpus.end());
        std::sort(relay_cpus.begin(), relay_cpus.end());
        const double seconds = runs[runs.size() / 2];
        const double cpu = cpus[cpus.size() / 2];
        const double relay_cpu = relay_cpus[relay_cpus.size() / 2];
        const auto info = comm.last_call();

        // Correctness: integers must be exact everywhere; random data within the bound.
        std::size_t wrong = 0;
        double max_err = 0;
        {
          std::vector<std::vector<float>> x(n, std::vector<float>(count));
          std::uniform_int_distribution<int> small(-8, 8);
          for (int pass = 0; pass < 2; ++pass) {
            std::uniform_real_distribution<float> big(-1.0f, 1.0f);
            for (std::size_t d = 0; d < n; ++d) {
              for (auto& v : x[d]) v = pass == 0 ? float(small(rng)) : big(rng);
              std::memcpy(rigs[d]->stage->mapped, x[d].data(), bytes);
              rigs[d]->copy(rigs[d]->stage->buffer, rigs[d]->data->buffer, bytes);
            }
            for (auto& r : rigs) r->finish();
            comm.allreduce(spans, args).wait();
            for (auto& r : rigs) r->copy(r->data->buffer, r->stage->buffer, bytes);
            for (auto& r : rigs) r->finish();
            const float* first = static_cast<const float*>(rigs[0]->stage->mapped);
            for (std::size_t i = 0; i < count; ++i) {
              double exact = 0, mag = 0;
              for (std::size_t d = 0; d < n; ++d) {
                exact += x[d][i];
                mag += std::fabs(x[d][i]);
              }
              for (std::uint32_t p = 0; p < cfg.relay_peers; ++p) {  // what the relay's thread contributes
                exact += tpar::relay_host_peer_value(p, i);
                mag += std::fabs(tpar::relay_host_peer_value(p, i));
              }
              for (std::size_t d = 0; d < n; ++d) {
                const float got = static_cast<const float*>(rigs[d]->stage->mapped)[i];
                if (pass == 0) wrong += got != static_cast<float>(exact);
                else {
                  if (std::memcmp(&got, &first[i], sizeof got)) ++wrong;  // devices must agree bit for bit
                  if (mag > 0) max_err = std::max(max_err, std::fabs(double(got) - exact) / mag);
                  if (!std::isfinite(got)) ++wrong;
                }
              }
            }
          }
        }
        all_ok &= wrong == 0;
        Row row;
        row.bytes = bytes;
        row.count = count;
        row.wire = std::string(to_string(info.wire));
        row.algo = std::string(info.algorithm);
        row.sync = sync_name;
        row.time_us = seconds / iters * 1e6;
        // One device moves nothing: no bandwidth to speak of (print_row shows "-"). With
        // host-played peers the relay reduces over n + peers.
        const std::size_t reduced = n + cfg.relay_peers;
        row.algbw = reduced > 1 ? double(bytes) / (seconds / iters) / 1e9 : -1;
        row.busbw = reduced > 1 ? row.algbw * 2.0 * double(reduced - 1) / double(reduced) : -1;
        row.max_err = max_err;
        row.wrong = wrong;
        row.cpu_us = cpu / iters * 1e6;
        row.relay_cpu_us = relay_cpu < 0 ? -1 : relay_cpu / iters * 1e6;
        row.eff = -1;
        if (link && n > 1) {
          auto rq = comm.schedule_request(count, wire);
          row.eff = bound_seconds(tpar::BySize::build(rq), *link) / (seconds / iters);
        }
        rows.push_back(row);
        if (text) print_row(row);
        if (text && info.algorithm == "relay") print_relay_breakdown(comm, spans, args, iters, restore);
        if (cfg.profile) {
          comm.allreduce(spans, args).wait();
          print_profile(comm.profile(), cfg, n, row);
        }
      }
    }
  }
  print_rows(rows, cfg, n, names, all_ok);
  return all_ok;
}

}  // namespace tpar_bench
