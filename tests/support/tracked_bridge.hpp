// ProxyBridge as the tests use it: the same policy (a Communicator<TrackedProxyBridge>
// runs exactly what a Communicator<ProxyBridge> runs), which also notes the highest value
// each destination was told to expect from each source, so that a test can let the
// bridges finish their signals before it waits on the host. With the validation layer
// before 1.3.296 and synchronization validation on, a host wait on a device that overlaps
// a bridge's signal into that device stalls for the layer's 10 s timeout
// (docs/testing.md, "The validation layer"); the work waited for cannot finish before
// those signals anyway, so waiting for them first changes nothing else.
#pragma once

#include <tpar/sync/proxy_bridge.hpp>

#include "support/vk_env.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

namespace tpar_test {

class TrackedProxyBridge : public tpar::ProxyBridge {
 public:
  TrackedProxyBridge(const tpar::DeviceGroup& group, std::span<const vk::Semaphore> sources, std::chrono::nanoseconds timeout,
                     tpar::FailureHandler on_failure = {})
      : ProxyBridge(group, sources, timeout, std::move(on_failure)) {
    std::lock_guard lock(registry_mutex());
    registry().push_back(this);
  }
  ~TrackedProxyBridge() {
    std::lock_guard lock(registry_mutex());
    std::erase(registry(), this);
  }

  // Hides ProxyBridge::expect: the communicator calls it on its policy type.
  void expect(std::uint32_t dst, std::uint32_t src, std::uint64_t value) {
    {
      std::lock_guard lock(mutex_);
      auto& v = expected_[{dst, src}];
      v = std::max(v, value);
    }
    ProxyBridge::expect(dst, src, value);
  }

  // Waits until every live TrackedProxyBridge has forwarded everything it was told to
  // expect so far, at most `timeout` in all; false if that ran out.
  static bool settle_all(std::chrono::nanoseconds timeout = test_timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::lock_guard lock(registry_mutex());
    for (const TrackedProxyBridge* b : registry())
      if (!b->settle(deadline)) return false;
    return true;
  }

 private:
  bool settle(std::chrono::steady_clock::time_point deadline) const {
    std::vector<std::pair<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t>> expected;
    {
      std::lock_guard lock(mutex_);
      expected.assign(expected_.begin(), expected_.end());
    }
    for (const auto& [pair, value] : expected) {
      const auto left = std::max(deadline - std::chrono::steady_clock::now(), std::chrono::steady_clock::duration::zero());
      if (!wait_forwarded(pair.first, pair.second, value, left)) return false;
    }
    return true;
  }

  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<const TrackedProxyBridge*>& registry() {
    static std::vector<const TrackedProxyBridge*> r;
    return r;
  }

  mutable std::mutex mutex_;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::uint64_t> expected_;  // (dst, src) -> highest value
};

static_assert(tpar::CrossDeviceSync<TrackedProxyBridge>);

// Waits for the bridges' signals (see above), then on the ticket: what the tests do where
// they would call t.wait(). Bridges that never forward (a call that cannot finish) are
// waited for at most test_timeout; the ticket's wait then says what went wrong. A
// deferred call's ticket is left to submit it in its own wait, as a caller's would.
inline void settled_wait(const tpar::Ticket& t) {
  if (t.submitted()) (void)TrackedProxyBridge::settle_all();
  t.wait();
}

}  // namespace tpar_test
