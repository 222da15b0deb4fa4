// CrossDeviceSync — what a sync policy (NativeImport, ProxyBridge) provides: for a wait
// of device `dst` on device `src`'s upload timeline, a semaphore of `dst` carrying the
// same values; notice of the values such waits expect; a way to release waiters when a
// call failed; and failure reports. Constructed from the group, each device's source
// timeline, the communicator's timeout (what bounds any wait of the policy's own) and
// the handler its threads report failures to.
#pragma once

#include <tpar/vk/device_group.hpp>

#include <chrono>
#include <concepts>
#include <functional>
#include <span>

namespace tpar::inline v0 {

// Called by a sync policy's own threads when they meet an error (a lost device).
using FailureHandler = std::function<void(const Error&)>;

template <class S>
concept CrossDeviceSync =
    std::constructible_from<S, const DeviceGroup&, std::span<const vk::Semaphore>, std::chrono::nanoseconds, FailureHandler> &&
    requires(S& s, std::uint32_t dst, std::uint32_t src, std::uint64_t value) {
      { S::kind } -> std::convertible_to<SyncKind>;
      { s.wait_semaphore(dst, src) } -> std::same_as<vk::Semaphore>;
      s.expect(dst, src, value);
      s.release_waiters();
    };

}  // namespace tpar::inline v0
