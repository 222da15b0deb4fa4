// ProxyBridge — cross-device sync for devices that cannot share semaphores. For every
// source device a host thread blocks in vkWaitSemaphores on the source's upload
// timeline and, as it advances, signals a "mirror" timeline on each destination that
// waits for it; destination queues wait on their mirrors. A mirror takes the source's
// values, so a wait on it means the same as a wait on the source. It is signalled with
// exactly the values queues wait for, in order, never past them: a larger host signal
// would also satisfy a wait, but the Khronos validation layer before 1.3.296 (Debian 12
// ships 1.3.239) mistakes the pending wait for a pending signal and reports it.
//
// The threads never spin: with nothing to forward they sleep on a condition variable;
// while forwarding they sleep in vkWaitSemaphores on the one source timeline, woken by
// the GPU. Values a source is awaited at arrive in increasing order, so reaching the
// current target also reaches any target that was added meanwhile. Every GPU wait is
// bounded by a time slice, and a lost device is reported, never waited on forever.
// (Waiting on the source and a host-rung "doorbell" at once, with WAIT_ANY, would wake
// faster for a lower target, but validation layers before 1.3.296 record a WAIT_ANY as
// if every semaphore in it had been reached.)
//
// With synchronization validation on, that layer also stalls for its internal 10 s
// timeout when a host wait on a device overlaps a host signal into the same device
// (docs/testing.md, "The validation layer"): after a successful vkWaitSemaphores it
// holds a device-wide lock while its queue bookkeeping catches up with the value seen,
// and that waits until the host signals the queue's work waited on are recorded, which
// needs the same lock. wait_forwarded lets a host wait begin after those signals. (The
// threads' own waits on their sources stay exposed: the one wait the layer does not
// follow with that bookkeeping, WAIT_ANY with a second timeline, spins in lavapipe.)
#pragma once

#include <tpar/sync/concepts.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device_group.hpp>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <string>
#include <thread>

namespace tpar::inline v0 {

class ProxyBridge {
 public:
  static constexpr SyncKind kind = SyncKind::proxy_bridge;

  // `sources[j]`: device j's upload timeline. `timeout`: the communicator's bound on a
  // wait; a forwarding thread's single GPU wait lasts at most 1 s of it (a thread stuck
  // on a source that never advances wakes this often, and only then).
  ProxyBridge(const DeviceGroup& group, std::span<const vk::Semaphore> sources, std::chrono::nanoseconds timeout,
              FailureHandler on_failure = {})
      : slice_(std::min<std::chrono::nanoseconds>(timeout, std::chrono::seconds(1))), on_failure_(std::move(on_failure)) {
    const std::size_t n = group.size();
    sources_.reserve(n);
    for (std::size_t j = 0; j < n; ++j) {
      auto s = std::make_unique<Source>();
      s->index = static_cast<std::uint32_t>(j);
      s->device = group[j].handle();
      s->timeline = sources[j];
      s->awaited.resize(n);
      s->signaled.assign(n, 0);
      s->mirrors.resize(n);
      for (std::size_t d = 0; d < n; ++d)
        if (d != j) s->mirrors[d] = Timeline(group[d].handle());
      sources_.push_back(std::move(s));
    }
    if (n > 1)
      for (auto& s : sources_)
        s->thread = std::thread([this, src = s.get()] {
          name_this_thread(src->index);
          run(*src);
        });
  }
  ProxyBridge(const ProxyBridge&) = delete;
  ProxyBridge& operator=(const ProxyBridge&) = delete;
  ~ProxyBridge() {
    for (auto& s : sources_) {
      std::lock_guard lock(s->mutex);
      s->stop = true;
      s->cv.notify_all();
    }
    for (auto& s : sources_)
      if (s->thread.joinable()) s->thread.join();
  }

  // What a queue of `dst` waits on to follow `src`'s upload timeline.
  vk::Semaphore wait_semaphore(std::uint32_t dst, std::uint32_t src) const { return sources_[src]->mirrors[dst].handle(); }

  // `dst` has submitted work waiting for `src`'s upload timeline to reach `value`.
  // Values for one (dst, src) pair come in increasing order.
  void expect(std::uint32_t dst, std::uint32_t src, std::uint64_t value) {
    Source& s = *sources_[src];
    std::lock_guard lock(s.mutex);
    auto& q = s.awaited[dst];
    if (value <= (q.empty() ? s.signaled[dst] : q.back())) return;
    q.push_back(value);
    if (!s.waiting) s.cv.notify_one();
  }

  // Blocks until every value expected so far of `src`'s upload timeline up to `value` has
  // been forwarded to `dst` (its signal made and returned; or given up, the bridge having
  // failed), at most `timeout`; false if it ran out. Work of `dst` that waits through this
  // bridge cannot finish before that, so a host wait on it may as well begin after.
  bool wait_forwarded(std::uint32_t dst, std::uint32_t src, std::uint64_t value, std::chrono::nanoseconds timeout) const {
    const Source& s = *sources_[src];
    std::unique_lock lock(s.mutex);
    return s.forwarded.wait_for(lock, timeout, [&] {
      const auto& q = s.awaited[dst];
      return q.empty() || q.front() > value;
    });
  }

  // Where forwarding stands, for error messages: per source its timeline's value, and
  // per destination the value forwarded and the next one awaited.
  std::string describe() const {
    std::string out;
    for (const auto& sp : sources_) {
      const Source& s = *sp;
      std::lock_guard lock(s.mutex);
      std::uint64_t now = 0;
      (void)s.device.getSemaphoreCounterValue(s.timeline, &now);
      out += "; bridge " + std::to_string(s.index) + " (uploads at " + std::to_string(now) + (s.waiting ? ", waiting" : "") + ")";
      for (std::size_t d = 0; d < s.awaited.size(); ++d)
        if (d != s.index)
          out += " ->" + std::to_string(d) + " forwarded " + std::to_string(s.signaled[d]) +
                 (s.awaited[d].empty() ? "" : " awaits " + std::to_string(s.awaited[d].front()) + "(+" +
                                                  std::to_string(s.awaited[d].size() - 1) + ")");
    }
    return out;
  }

  // Lets every queue waiting through this bridge go on (their peers' data is then
  // garbage): used when a call failed, so devices drain instead of blocking forever.
  void release_waiters() {
    for (auto& s : sources_) {
      std::lock_guard lock(s->mutex);
      release(*s);
    }
  }

 private:
  struct Source {
    std::uint32_t index = 0;
    vk::Device device;
    vk::Semaphore timeline;
    std::vector<Timeline> mirrors;                     // by destination
    std::vector<std::deque<std::uint64_t>> awaited;    // by destination: values its queue waits for
    std::vector<std::uint64_t> signaled;               // by destination: mirror's value
    mutable std::mutex mutex;
    std::condition_variable cv;                        // wakes the thread: values to forward, or stop
    mutable std::condition_variable forwarded;         // wakes wait_forwarded
    bool stop = false;
    bool waiting = false;  // in vkWaitSemaphores
    std::thread thread;
  };

  // "tpar-bridge-J", so that tools (top -H, tpar-idle-cpu) tell tpar's threads from the
  // driver's and the host's.
  static void name_this_thread(std::uint32_t source) {
    detail::os::name_this_thread("tpar-bridge-" + std::to_string(source));
  }

  // Signals every awaited value of `dst` up to `now`, in order. A value whose signal
  // failed stays awaited, for release() to try again.
  static void forward(Source& s, std::size_t dst, std::uint64_t now) {
    auto& q = s.awaited[dst];
    while (!q.empty() && q.front() <= now) {
      const std::uint64_t v = q.front();
      if (v > s.signaled[dst]) {
        s.mirrors[dst].signal(v);
        s.signaled[dst] = v;
      }
      q.pop_front();
    }
  }

  static void release(Source& s) {
    for (std::size_t d = 0; d < s.mirrors.size(); ++d) {
      try {
        forward(s, d, ~std::uint64_t{0});
      } catch (const Error&) {
        s.awaited[d].clear();  // the destination is lost too; nothing waits there any more
      }
    }
    s.forwarded.notify_all();
  }

  void fail(Source& s, const Error& e) {
    log(LogLevel::error, "ProxyBridge: device " + std::to_string(s.index) + ": " + e.what());
    if (on_failure_) on_failure_(e);
  }

  void run(Source& s) {
    std::unique_lock lock(s.mutex);
    while (!s.stop) {
      std::uint64_t target = ~std::uint64_t{0};
      for (const auto& q : s.awaited)
        if (!q.empty()) target = std::min(target, q.front());
      if (target == ~std::uint64_t{0}) {
        s.cv.wait(lock);
        continue;
      }
      s.waiting = true;
      lock.unlock();
      vk::SemaphoreWaitInfo info({}, 1, &s.timeline, &target);
      vk::Result r = s.device.waitSemaphores(&info, static_cast<std::uint64_t>(slice_.count()));
      std::uint64_t now = 0;
      if (r == vk::Result::eSuccess || r == vk::Result::eTimeout) r = s.device.getSemaphoreCounterValue(s.timeline, &now);
      lock.lock();
      s.waiting = false;
      if (r != vk::Result::eSuccess) {
        fail(s, Error(detail::code_for(r), "waiting for device " + std::to_string(s.index) + "'s uploads: " + vk::to_string(r), r));
        release(s);
        break;
      }
      for (std::size_t d = 0; d < s.awaited.size(); ++d) {
        try {
          forward(s, d, now);
        } catch (const Error& e) {
          // The communicator is failed now: let every queue waiting through this bridge
          // go on at once (release() gives up on a destination whose signal fails again),
          // rather than leave it blocked until someone's wait times out.
          fail(s, e);
          release(s);
          break;
        }
      }
      s.forwarded.notify_all();
    }
  }

  std::chrono::nanoseconds slice_;
  FailureHandler on_failure_;
  std::vector<std::unique_ptr<Source>> sources_;
};

static_assert(CrossDeviceSync<ProxyBridge>);

}  // namespace tpar::inline v0
