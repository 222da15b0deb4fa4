// Ticket — what allreduce returns: per device a "done" timeline point the caller's next
// submission can wait on (no host round trip), and a bounded host wait.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/core/timeline_point.hpp>
#include <tpar/sync/timeline.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace tpar::inline v0 {

namespace detail {

// A communicator's health, shared with its tickets and its sync policy's threads: the
// first failure, after which the communicator refuses new calls until rebuilt.
class Health {
 public:
  // The first failure is kept; the hook (set_hook) then runs once. It runs under a lock of
  // its own, so that it cannot run after set_hook({}) returns, and outside the error's
  // lock, so that a failure it meets itself (a signal that fails while the relay gives
  // up) returns at once instead of waiting on this thread's own lock.
  void fail(const Error& e) {
    {
      std::lock_guard lock(mutex_);
      if (error_) return;
      error_ = e;
    }
    std::lock_guard hook_lock(hook_mutex_);
    if (hook_) hook_();
  }
  std::optional<Error> error() const {
    std::lock_guard lock(mutex_);
    return error_;
  }
  // What the communicator does at once when it fails (the relay gives up its calls).
  void set_hook(std::function<void()> hook) {
    std::lock_guard lock(hook_mutex_);
    hook_ = std::move(hook);
  }
  // What a host wait checks once the GPUs finished a call, before it returns it as done
  // (the relay: that no kernel gave up on a sum the host wrote); it fails the
  // communicator where it finds a call that did not complete. Cleared like the hook.
  void set_verify(std::function<void()> verify) {
    std::lock_guard lock(verify_mutex_);
    verify_ = std::move(verify);
  }
  void verify() {
    std::lock_guard lock(verify_mutex_);
    if (verify_) verify_();
  }

 private:
  mutable std::mutex mutex_;
  std::optional<Error> error_;
  std::mutex hook_mutex_;
  std::function<void()> hook_;
  std::mutex verify_mutex_;
  std::function<void()> verify_;
};

// A communicator's deferred calls (AllreduceArgs::defer), shared with its tickets: how
// many of its calls were handed to the queues, and how to hand over the rest before a
// host waits on them. `owner` is cleared when the communicator goes (having submitted
// what it could).
struct Deferral {
  std::atomic<std::uint64_t> submitted_calls{0};
  void* owner = nullptr;
  void (*flush)(void* owner) = nullptr;
};

}  // namespace detail

class Ticket {
 public:
  struct DeviceWait {
    vk::Device device;
    vk::Semaphore semaphores[2];  // compute, transfer timelines
    std::uint64_t values[2] = {0, 0};
  };

  Ticket() = default;
  Ticket(std::vector<TimelinePoint> done, std::vector<DeviceWait> waits, std::shared_ptr<detail::Health> health,
         std::chrono::nanoseconds default_timeout, std::shared_ptr<detail::Deferral> deferral = nullptr, std::uint64_t call = 0)
      : done_(std::move(done)),
        waits_(std::move(waits)),
        health_(std::move(health)),
        deferral_(std::move(deferral)),
        call_(call),
        timeout_(default_timeout) {}

  // Per device: the result is in its buffer once this point is reached. Valid while the
  // communicator that returned the ticket lives. A deferred call's points are reached
  // only after the communicator's flush(): submit work that waits on them after that, as
  // a batch queued ahead of tpar's on the same queue would wait forever (a queue starts its
  // batches in submission order).
  const std::vector<TimelinePoint>& done() const { return done_; }
  const TimelinePoint& done(std::size_t device) const { return done_.at(device); }

  // False while the call is deferred (not yet submitted).
  bool submitted() const { return !deferral_ || deferral_->submitted_calls.load(std::memory_order_acquire) >= call_; }

  // True when every device finished this call (and everything tpar queued before it).
  bool ready() const {
    if (!submitted()) return false;
    for (const auto& w : waits_)
      for (int i = 0; i < 2; ++i) {
        std::uint64_t v = 0;
        if (w.device.getSemaphoreCounterValue(w.semaphores[i], &v) != vk::Result::eSuccess || v < w.values[i])
          return false;
      }
    return true;
  }

  // Blocks until the call finished on every device, at most `timeout` (default: the
  // communicator's). Throws Error(timeout) or Error(device_lost); either leaves the
  // communicator failed. A deferred call is submitted first (with every call deferred
  // before it): that is a use of the communicator, so from the thread that uses it.
  void wait(std::optional<std::chrono::nanoseconds> timeout = std::nullopt) const {
    if (!submitted()) {
      if (deferral_->owner) deferral_->flush(deferral_->owner);
      if (!submitted()) {
        if (health_)
          if (auto e = health_->error()) throw *e;
        throw Error(ErrorCode::failed, "this deferred allreduce was never submitted (its communicator is gone)");
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(timeout_);
    for (std::size_t d = 0; d < waits_.size(); ++d) {
      const auto& w = waits_[d];
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      const vk::Result r = detail::wait_all(w.device, w.semaphores, w.values, left);
      if (r == vk::Result::eSuccess) continue;
      // A failure met first elsewhere (a sync thread, an earlier call) is the cause.
      if (health_)
        if (auto e = health_->error()) throw *e;
      const Error e = r == vk::Result::eTimeout
                          ? Error(ErrorCode::timeout,
                                  "allreduce did not finish on device " + std::to_string(d) + " within " +
                                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                         timeout.value_or(timeout_)).count()) +
                                      " ms: a ready point was not signalled, or a device stalled",
                                  r)
                          : Error(detail::code_for(r), "waiting for allreduce on device " + std::to_string(d) + ": " + vk::to_string(r), r);
      if (health_) health_->fail(e);
      throw e;
    }
    if (health_) {
      health_->verify();
      if (auto e = health_->error()) throw *e;
    }
  }

 private:
  std::vector<TimelinePoint> done_;
  std::vector<DeviceWait> waits_;
  std::shared_ptr<detail::Health> health_;
  std::shared_ptr<detail::Deferral> deferral_;
  std::uint64_t call_ = 0;  // the communicator's call count after this call
  std::chrono::nanoseconds timeout_{std::chrono::seconds(10)};
};

}  // namespace tpar::inline v0
