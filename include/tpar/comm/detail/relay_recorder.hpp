// RelayRecorder — what the relay's host thread did, as tpar::RelayStats (comm/call.hpp)
// reports it: its counters and times, the devices' arrivals it saw, and the clock stamps
// the relay's kernels leave in their publish headers (shaders/relay.glsl). RelayHub holds
// one and tells it; RelayHub::stats() returns what it recorded.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/relay_protocol.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <time.h>
#endif

namespace tpar::inline v0::detail {

// CPU time `thread` has used so far (0 where the platform does not say).
inline std::chrono::nanoseconds thread_cpu_time([[maybe_unused]] std::thread& thread) {
#if defined(__unix__) && !defined(__APPLE__)
  clockid_t clock{};
  timespec t{};
  if (thread.joinable() && pthread_getcpuclockid(thread.native_handle(), &clock) == 0 && clock_gettime(clock, &t) == 0)
    return std::chrono::seconds(t.tv_sec) + std::chrono::nanoseconds(t.tv_nsec);
#endif
  return std::chrono::nanoseconds(0);
}

class RelayRecorder {
 public:
  explicit RelayRecorder(std::size_t n)
      : n_(n), first_seen_(n), last_by_device_(std::make_unique<std::atomic<std::uint64_t>[]>(n)), kernel_prev_(n) {}

  // A call's flags are about to be written: it is served (before any device can finish it).
  void note_served() { served_.fetch_add(1, std::memory_order_acq_rel); }
  // A call served by more than one thread.
  void note_split() { split_calls_.fetch_add(1, std::memory_order_relaxed); }
  // A call handed over at `handed` while the thread slept: how long it took to come to it.
  void note_wakeup(std::chrono::steady_clock::time_point handed) {
    wakeups_.fetch_add(1, std::memory_order_relaxed);
    wake_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - handed).count(),
                       std::memory_order_relaxed);
  }
  // A helper woken to serve its part.
  void note_helper_wakeup() { helper_wakeups_.fetch_add(1, std::memory_order_relaxed); }
  // A call served: handed over at `handed`, every device's first chunk in at `arrived`,
  // its flags written at `written`.
  void note_served_times(std::chrono::steady_clock::time_point handed, std::chrono::steady_clock::time_point arrived,
                         std::chrono::steady_clock::time_point written) {
    arriving_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(arrived - handed).count(),
                           std::memory_order_acq_rel);
    serving_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(written - arrived).count(),
                          std::memory_order_acq_rel);
  }
  // Device d's first value of a call came now (the thread's only).
  void note_first_seen(std::size_t d) { first_seen_[d] = std::chrono::steady_clock::now(); }

  // A call whose devices' arrivals the thread saw (serve_range): their spread, the last.
  void note_arrivals(std::uint32_t contributing) {
    std::chrono::steady_clock::time_point lo = std::chrono::steady_clock::time_point::max(), hi{};
    std::size_t last = 0;
    for (std::size_t d = 0; d < n_ && d < 32; ++d) {
      if (!((contributing >> d) & 1u)) continue;
      lo = std::min(lo, first_seen_[d]);
      if (first_seen_[d] >= hi) hi = first_seen_[d], last = d;
    }
    timed_arrivals_.fetch_add(1, std::memory_order_acq_rel);
    spread_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(hi - lo).count(), std::memory_order_acq_rel);
    last_by_device_[last].fetch_add(1, std::memory_order_acq_rel);
  }

  // The clock stamps device d's kernel wrote into publish header `h` for the call stamped
  // `prev`, the one that last used the header's slot set (shaders/relay.glsl).
  void note_kernel_times(std::size_t d, std::uint32_t prev, std::uint32_t* h) {
    const auto word = [&](std::size_t i) { return std::atomic_ref<std::uint32_t>(h[i]).load(std::memory_order_acquire); };
    if (word(relay_layout::clock_stamp_again) != prev || word(relay_layout::clock_stamp) != prev) return;
    const std::uint32_t start = word(relay_layout::clock_start), published = word(relay_layout::clock_published),
                        seen = word(relay_layout::clock_seen), end = word(relay_layout::clock_end);
    kernel_ns_[0].fetch_add(static_cast<std::uint32_t>(published - start), std::memory_order_acq_rel);
    kernel_ns_[1].fetch_add(static_cast<std::uint32_t>(seen - published), std::memory_order_acq_rel);
    kernel_ns_[2].fetch_add(static_cast<std::uint32_t>(end - seen), std::memory_order_acq_rel);
    kernel_count_.fetch_add(1, std::memory_order_acq_rel);
    KernelPrev& k = kernel_prev_[d];
    if (k.stamp && k.stamp + 1 == prev) {
      const std::uint32_t gap = start - k.end;
      kernel_ns_[3].fetch_add(gap, std::memory_order_acq_rel);
      gap_bins_[std::min<std::size_t>(gap / gap_bin_ns, gap_bins_.size() - 1)].fetch_add(1, std::memory_order_acq_rel);
      kernel_gaps_.fetch_add(1, std::memory_order_acq_rel);
    }
    k.stamp = prev;
    k.end = end;
  }

  // What was recorded so far; `cpu`: the CPU time of the thread and its helpers.
  RelayStats stats(std::chrono::nanoseconds cpu) const {
    RelayStats s{served_.load(std::memory_order_acquire), cpu, split_calls_.load(std::memory_order_acquire),
                 std::chrono::nanoseconds(arriving_ns_.load(std::memory_order_acquire)),
                 std::chrono::nanoseconds(serving_ns_.load(std::memory_order_acquire)),
                 timed_arrivals_.load(std::memory_order_acquire),
                 std::chrono::nanoseconds(spread_ns_.load(std::memory_order_acquire)),
                 {},
                 kernel_count_.load(std::memory_order_acquire),
                 std::chrono::nanoseconds(kernel_ns_[0].load(std::memory_order_acquire)),
                 std::chrono::nanoseconds(kernel_ns_[1].load(std::memory_order_acquire)),
                 std::chrono::nanoseconds(kernel_ns_[2].load(std::memory_order_acquire)),
                 kernel_gaps_.load(std::memory_order_acquire),
                 std::chrono::nanoseconds(kernel_ns_[3].load(std::memory_order_acquire)),
                 gap_median(),
                 wakeups_.load(std::memory_order_acquire),
                 std::chrono::nanoseconds(wake_ns_.load(std::memory_order_acquire)),
                 helper_wakeups_.load(std::memory_order_acquire)};
    for (std::size_t d = 0; d < n_; ++d) s.last.push_back(last_by_device_[d].load(std::memory_order_acquire));
    return s;
  }

 private:
  // The median of the gaps counted so far, to a bin (0 where none).
  std::chrono::nanoseconds gap_median() const {
    std::uint64_t total = 0;
    for (const auto& b : gap_bins_) total += b.load(std::memory_order_acquire);
    if (!total) return std::chrono::nanoseconds(0);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < gap_bins_.size(); ++i) {
      seen += gap_bins_[i].load(std::memory_order_acquire);
      if (2 * seen >= total)
        return std::chrono::nanoseconds(i + 1 == gap_bins_.size() ? i * gap_bin_ns + gap_bin_ns : i * gap_bin_ns + gap_bin_ns / 2);
    }
    return std::chrono::nanoseconds(gap_bins_.size() * gap_bin_ns);
  }

  const std::size_t n_;
  std::atomic<std::uint64_t> served_{0};
  std::atomic<std::int64_t> arriving_ns_{0}, serving_ns_{0};  // Stats
  std::vector<std::chrono::steady_clock::time_point> first_seen_;  // the thread's only, by device
  std::atomic<std::uint64_t> timed_arrivals_{0};
  std::atomic<std::int64_t> spread_ns_{0};
  std::unique_ptr<std::atomic<std::uint64_t>[]> last_by_device_;
  struct KernelPrev {
    std::uint32_t stamp = 0, end = 0;
  };
  std::vector<KernelPrev> kernel_prev_;  // the thread's only, by device: the last call's stamps read
  std::atomic<std::uint64_t> kernel_count_{0}, kernel_gaps_{0};
  std::atomic<std::int64_t> kernel_ns_[4] = {0, 0, 0, 0};  // publish, wait, copy, gap
  static constexpr std::uint32_t gap_bin_ns = 250;          // the gaps by 0.25 us, up to 1 ms
  std::array<std::atomic<std::uint64_t>, 4000> gap_bins_{};
  std::atomic<std::uint64_t> split_calls_{0};
  std::atomic<std::uint64_t> wakeups_{0}, helper_wakeups_{0};  // Stats
  std::atomic<std::int64_t> wake_ns_{0};
};

}  // namespace tpar::inline v0::detail
