// SubmitGate — which AllReduce each device's stream has published, where different
// threads submit to the devices' streams (StreamAllreduce::allreduce_split). A device's
// part of a call is its leading batches (they publish its contribution) and the rest
// (they wait on every peer's leading batches). A stream lets the rest of call k go to its
// queue only once every device published k, so that no queue is handed a wait on a
// signal not yet submitted: Vulkan allows that, but NVIDIA's driver (580) serves it by
// blocking the submitting thread inside vkQueueSubmit until the signal is submitted,
// where no one can see or bound the wait.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__)
#include <immintrin.h>
#define TPAR_GATE_X86 1
#endif

namespace tpar::inline v0::detail {

class SubmitGate {
 public:
  explicit SubmitGate(std::size_t devices) : published_(devices) {}
  SubmitGate(const SubmitGate&) = delete;
  SubmitGate& operator=(const SubmitGate&) = delete;

  std::size_t size() const { return published_.size(); }

  // Device `d` submitted its leading batches of call `call` (calls are numbered from 1,
  // in order).
  void publish(std::size_t d, std::uint64_t call) noexcept { published_[d].store(call, std::memory_order_release); }
  std::uint64_t published(std::size_t d) const noexcept { return published_[d].load(std::memory_order_acquire); }

  bool reached(std::uint64_t call) const noexcept {
    return std::all_of(published_.begin(), published_.end(),
                       [&](const auto& p) { return p.load(std::memory_order_acquire) >= call; });
  }

  // Until every device published `call`: spins a few microseconds (a peer's thread is
  // usually one submission behind), then yields, then sleeps in 50 us steps. False once
  // `timeout` passed without it.
  bool wait(std::uint64_t call, std::chrono::nanoseconds timeout) noexcept {
    if (reached(call)) return true;
    const auto start = std::chrono::steady_clock::now();
    bool ok = false;
    for (int i = 0; i < 256 && !ok; ++i) {
      relax();
      ok = reached(call);
    }
    for (auto now = std::chrono::steady_clock::now(); !ok && now - start < timeout; now = std::chrono::steady_clock::now()) {
      if (now - start < std::chrono::microseconds(200)) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(50));
      ok = reached(call);
    }
    waits_.fetch_add(1, std::memory_order_relaxed);
    waited_ns_.fetch_add(static_cast<std::uint64_t>((std::chrono::steady_clock::now() - start).count()), std::memory_order_relaxed);
    return ok;
  }

  // Waits that found a peer not yet published, and their time in all.
  std::uint64_t waits() const noexcept { return waits_.load(std::memory_order_relaxed); }
  std::chrono::nanoseconds waited() const noexcept {
    return std::chrono::nanoseconds(waited_ns_.load(std::memory_order_relaxed));
  }

 private:
  static void relax() noexcept {
#ifdef TPAR_GATE_X86
    _mm_pause();
#else
    std::this_thread::yield();
#endif
  }

  std::vector<std::atomic<std::uint64_t>> published_;
  std::atomic<std::uint64_t> waits_{0}, waited_ns_{0};
};

}  // namespace tpar::inline v0::detail
