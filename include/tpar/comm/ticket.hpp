// Ticket — what allreduce returns: per device a "done" timeline point the caller's next
// submission can wait on (no host round trip), and a bounded host wait.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/core/timeline_point.hpp>
#include <tpar/sync/timeline.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
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

// A lock one thread may take several times over (recursive), with a bounded take
// (try_lock_until on the steady clock): the communicator's. Made of a mutex and a
// condition variable rather than std::recursive_timed_mutex, whose bounded take uses
// pthread_mutex_clocklock, which ThreadSanitizer does not see (it reported every release
// after one as the release of a lock not held).
class CallLock {
 public:
  void lock() {
    std::unique_lock guard(mutex_);
    const auto me = std::this_thread::get_id();
    free_.wait(guard, [&] { return depth_ == 0 || owner_ == me; });
    owner_ = me;
    ++depth_;
  }
  bool try_lock_until(std::chrono::steady_clock::time_point deadline) {
    std::unique_lock guard(mutex_);
    const auto me = std::this_thread::get_id();
    if (!free_.wait_until(guard, deadline, [&] { return depth_ == 0 || owner_ == me; })) return false;
    owner_ = me;
    ++depth_;
    return true;
  }
  void unlock() {
    std::lock_guard guard(mutex_);
    if (--depth_ == 0) {
      owner_ = {};
      free_.notify_all();  // (one woken waiter may be giving up at its deadline)
    }
  }

 private:
  std::mutex mutex_;
  std::condition_variable free_;
  std::thread::id owner_;
  std::uint32_t depth_ = 0;
};

// A communicator's calls and its tickets' waits on deferred calls, shared with the
// tickets: how many of its calls were handed to the queues, and the communicator's own
// lock, under which it makes its calls and a ticket's wait hands over the deferred ones
// (from any thread: tpar.h, THREADS). `owner`, guarded by the lock, is cleared when the
// communicator goes (having submitted what it could); `flush` runs with the lock held.
// Recursive: the communicator's entry points call each other, and tpar::StreamAllreduce
// holds it across the calls one AllReduce of its makes.
struct Deferral {
  std::atomic<std::uint64_t> submitted_calls{0};
  CallLock use;
  void* owner = nullptr;
  void (*flush)(void* owner) = nullptr;
};

// How a host wait on a device's timelines ended: every value reached (result eSuccess),
// the communicator aborted first (aborted), or the wait failed or timed out (result).
struct WaitOutcome {
  vk::Result result = vk::Result::eSuccess;
  bool aborted = false;
};

// Waits until every (semaphore, value) pair of one device is reached, at most `timeout`,
// or until `abort` (the communicator's: Communicator::abort signals it to 1) is
// signalled, whichever comes first. One semaphore at a time, each wait on it or the
// abort (VK_SEMAPHORE_WAIT_ANY_BIT): a host wait ends at once when another thread aborts.
// A null `abort`: as tpar::wait.
inline WaitOutcome wait_or_abort(vk::Device device, std::span<const vk::Semaphore> semaphores,
                                 std::span<const std::uint64_t> values, vk::Semaphore abort, std::chrono::nanoseconds timeout) {
  if (!abort) return {tpar::wait(device, semaphores, values, timeout), false};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t k = 0; k < semaphores.size(); ++k)
    for (;;) {
      std::uint64_t now = 0;
      vk::Result r = device.getSemaphoreCounterValue(semaphores[k], &now);
      if (r != vk::Result::eSuccess) return {r, false};
      if (now >= values[k]) break;
      r = device.getSemaphoreCounterValue(abort, &now);
      if (r != vk::Result::eSuccess) return {r, false};
      if (now) return {vk::Result::eSuccess, true};
      const vk::Semaphore either[2] = {semaphores[k], abort};
      const std::uint64_t at[2] = {values[k], 1};
      const vk::SemaphoreWaitInfo info(vk::SemaphoreWaitFlagBits::eAny, 2, either, at);
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now()).count();
      r = device.waitSemaphores(&info, left < 0 ? 0 : static_cast<std::uint64_t>(left));
      if (r != vk::Result::eSuccess) return {r, false};
    }
  return {};
}

}  // namespace detail

class Ticket {
 public:
  struct DeviceWait {
    vk::Device device;
    vk::Semaphore semaphores[2];  // compute, transfer timelines
    std::uint64_t values[2] = {0, 0};
    vk::Semaphore abort;          // the communicator's abort timeline on the device (may be null)
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
  // communicator failed. From any thread: a deferred call is submitted first (with every
  // call deferred before it), under the communicator's lock, taken from the thread that
  // uses the communicator within the same bound. Ends at once, with Error(aborted), when
  // the communicator is aborted (Communicator::abort) meanwhile.
  void wait(std::optional<std::chrono::nanoseconds> timeout = std::nullopt) const {
    const auto bound = timeout.value_or(timeout_);
    const auto deadline = std::chrono::steady_clock::now() + bound;
    if (!submitted()) hand_over(deadline, bound);
    for (std::size_t d = 0; d < waits_.size(); ++d) {
      const auto& w = waits_[d];
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      const detail::WaitOutcome end = detail::wait_or_abort(w.device, w.semaphores, w.values, w.abort, left);
      if (end.aborted) throw_failure();
      if (end.result == vk::Result::eSuccess) continue;
      // A failure met first elsewhere (a sync thread, an earlier call) is the cause.
      if (health_)
        if (auto e = health_->error()) throw *e;
      const Error e = end.result == vk::Result::eTimeout ? timed_out(bound, "allreduce did not finish on device " + std::to_string(d),
                                                                     "a ready point was not signalled, or a device stalled")
                                                         : Error(detail::code_for(end.result),
                                                                 "waiting for allreduce on device " + std::to_string(d) + ": " +
                                                                     vk::to_string(end.result),
                                                                 end.result);
      if (health_) health_->fail(e);
      throw e;
    }
    if (health_) {
      health_->verify();
      if (auto e = health_->error()) throw *e;
    }
  }

 private:
  // A deferred call to the queues: the communicator's flush, under its lock. A failed or
  // aborted communicator submits nothing more: its failure is the ticket's.
  void hand_over(std::chrono::steady_clock::time_point deadline, std::chrono::nanoseconds bound) const {
    if (health_)
      if (auto e = health_->error()) throw *e;
    std::unique_lock lock(deferral_->use, std::defer_lock);
    if (!lock.try_lock_until(deadline)) {
      const Error e = timed_out(bound, "a deferred allreduce was not submitted",
                                "the thread using its communicator held it all that time, waiting itself");
      if (health_) health_->fail(e);
      throw e;
    }
    if (!submitted() && deferral_->owner) deferral_->flush(deferral_->owner);
    if (submitted()) return;
    if (health_)
      if (auto e = health_->error()) throw *e;
    throw Error(ErrorCode::failed, "this deferred allreduce was never submitted (its communicator is gone)");
  }

  [[noreturn]] void throw_failure() const {
    if (health_)
      if (auto e = health_->error()) throw *e;
    throw Error(ErrorCode::aborted, "the communicator was aborted");
  }

  static Error timed_out(std::chrono::nanoseconds bound, const std::string& what, const std::string& why) {
    return Error(ErrorCode::timeout,
                 what + " within " + std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(bound).count()) +
                     " ms: " + why,
                 vk::Result::eTimeout);
  }

  std::vector<TimelinePoint> done_;
  std::vector<DeviceWait> waits_;
  std::shared_ptr<detail::Health> health_;
  std::shared_ptr<detail::Deferral> deferral_;
  std::uint64_t call_ = 0;  // the communicator's call count after this call
  std::chrono::nanoseconds timeout_{std::chrono::seconds(10)};
};

}  // namespace tpar::inline v0
