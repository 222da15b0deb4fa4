// NativeImport — cross-device sync with no host in the loop: each device's upload
// timeline is exported as an OPAQUE_FD and imported into a timeline semaphore on every
// peer, whose queues then wait on it directly.
//
// The Vulkan spec promises OPAQUE_FD sharing only between devices with matching
// driverUUID *and* deviceUUID; between two GPUs of one driver it often works but is not
// promised. So the gate (sync_gate) only asks for one driver and exportable + importable
// timelines, and the constructor then runs a self-test on semaphores of its own before
// trusting the path: a host signal must be seen through every import, and a queue of
// every peer must get past a wait on it. A failure throws Error(unsupported) with what
// failed; make_communicator then falls back to ProxyBridge and logs why.
#pragma once

#include <tpar/core/log.hpp>
#include <tpar/sync/concepts.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device_group.hpp>

#include <chrono>
#include <memory>
#include <vector>

#if !defined(_WIN32)
#include <unistd.h>
#endif

namespace tpar::inline v0 {

namespace detail {

// Exports `semaphore` of `from` as an OPAQUE_FD and imports it into a new timeline
// semaphore of `to`. The fd belongs to the driver once imported; on any failure it is
// closed here, so no path leaks one.
inline Timeline import_timeline(const Device& from, vk::Semaphore semaphore, const Device& to) {
#if defined(_WIN32)
  (void)from;
  (void)semaphore;
  (void)to;
  throw Error(ErrorCode::unsupported, "NativeImport uses OPAQUE_FD semaphores, which this platform lacks");
#else
  const auto opaque = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT;
  if (!from.extension_fns().get_semaphore_fd || !to.extension_fns().import_semaphore_fd)
    throw Error(ErrorCode::unsupported, "VK_KHR_external_semaphore_fd is not enabled on every device");
  VkSemaphoreGetFdInfoKHR get{VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR, nullptr, semaphore, opaque};
  int fd = -1;
  check(from.extension_fns().get_semaphore_fd(from.handle(), &get, &fd),
        "vkGetSemaphoreFdKHR (device " + std::to_string(from.index()) + ")");
  try {
    Timeline imported(to.handle());
    VkImportSemaphoreFdInfoKHR import{VK_STRUCTURE_TYPE_IMPORT_SEMAPHORE_FD_INFO_KHR, nullptr, imported.handle(), 0, opaque, fd};
    check(to.extension_fns().import_semaphore_fd(to.handle(), &import),
          "vkImportSemaphoreFdKHR (device " + std::to_string(from.index()) + " into device " + std::to_string(to.index()) + ")");
    return imported;  // the driver owns fd now
  } catch (...) {
    ::close(fd);
    throw;
  }
#endif
}

// Signals `timeline` of `device` to `value` from the device's compute queue: an empty
// batch, so the signal comes from the GPU side, as the AllReduce's own will.
inline void queue_signal(Device& device, vk::Semaphore timeline, std::uint64_t value) {
  vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &value);
  vk::SubmitInfo si(0, nullptr, nullptr, 0, nullptr, 1, &timeline, &ti);
  check(device.compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit (NativeImport self-test)");
}

// The self-test: for every ordered pair, a signal of the source's queue must be visible
// through the import on the host, and the destination's queue must get past a wait on it.
inline void native_import_self_test(const DeviceGroup& group, std::chrono::nanoseconds timeout) {
  const std::size_t n = group.size();
  std::vector<Timeline> sources;
  std::vector<std::uint64_t> values(n, 0);
  for (std::size_t j = 0; j < n; ++j) sources.emplace_back(group[j].handle(), true);
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t d = 0; d < n; ++d) {
      if (d == j) continue;
      const std::string pair = "device " + std::to_string(j) + " to device " + std::to_string(d);
      Timeline imported = import_timeline(group[j], sources[j].handle(), group[d]);
      Timeline reached(group[d].handle());
      // A queue signal on the source, seen on the host through the import.
      const vk::Semaphore seen = imported.handle();
      const std::uint64_t first = ++values[j];
      queue_signal(group[j], sources[j].handle(), first);
      if (wait_all(group[d].handle(), std::span(&seen, 1), std::span(&first, 1), timeout) != vk::Result::eSuccess)
        throw Error(ErrorCode::unsupported, "NativeImport self-test: a signal of " + pair + " was not visible through the import");
      // A queue wait through the import, released by the source's queue.
      const vk::Semaphore wait = imported.handle(), signal = reached.handle();
      const std::uint64_t wait_value = ++values[j], signal_value = 1;
      const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
      vk::TimelineSemaphoreSubmitInfo ti(1, &wait_value, 1, &signal_value);
      vk::SubmitInfo si(1, &wait, &stage, 0, nullptr, 1, &signal, &ti);
      check(group[d].compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit (NativeImport self-test)");
      queue_signal(group[j], sources[j].handle(), wait_value);
      const vk::Result r = wait_all(group[d].handle(), std::span(&signal, 1), std::span(&signal_value, 1), timeout);
      if (r != vk::Result::eSuccess) {
        // The import does not carry the source's signals. Release the waiting queue by
        // signalling the import itself, so the device stays usable for ProxyBridge.
        try {
          imported.signal(wait_value);
        } catch (const Error&) {
        }
        if (wait_all(group[d].handle(), std::span(&signal, 1), std::span(&signal_value, 1), timeout) != vk::Result::eSuccess) {
          log(LogLevel::error, "NativeImport self-test: the compute queue of device " + std::to_string(d) +
                                   " stays blocked on a wait the import never satisfies");
          (void)new Timeline(std::move(imported));  // still waited on: never destroy it
          (void)new Timeline(std::move(reached));
        }
        throw Error(ErrorCode::unsupported, "NativeImport self-test: the queue of device " + std::to_string(d) +
                                                " did not get past a wait on device " + std::to_string(j) + "'s timeline (" +
                                                vk::to_string(r) + ")");
      }
    }
  }
  // Everything the test submitted is done (each wait above covered it) before its
  // semaphores go.
  for (std::size_t j = 0; j < n; ++j) {
    const vk::Semaphore s = sources[j].handle();
    (void)wait_all(group[j].handle(), std::span(&s, 1), std::span(&values[j], 1), timeout);
  }
}

}  // namespace detail

class NativeImport {
 public:
  static constexpr SyncKind kind = SyncKind::native_import;
  // The communicator creates its upload timelines exportable for us.
  static constexpr bool exports_sources = true;

  NativeImport(const DeviceGroup& group, std::span<const vk::Semaphore> sources, std::chrono::nanoseconds timeout,
               FailureHandler = {}) {
    const std::size_t n = group.size();
    if (n > 1) {
      const SyncGate gate = group.sync_gate();
      if (!gate.native_possible) throw Error(ErrorCode::unsupported, "NativeImport is not possible here: " + gate.reason);
      detail::native_import_self_test(group, std::min<std::chrono::nanoseconds>(timeout, std::chrono::seconds(2)));
    }
    imports_.resize(n);
    for (std::size_t d = 0; d < n; ++d) {
      imports_[d].resize(n);
      for (std::size_t j = 0; j < n; ++j)
        if (j != d) imports_[d][j] = detail::import_timeline(group[j], sources[j], group[d]);
    }
  }

  vk::Semaphore wait_semaphore(std::uint32_t dst, std::uint32_t src) const { return imports_[dst][src].handle(); }

  // Queues wait on their peers' timelines directly: nothing to forward.
  void expect(std::uint32_t, std::uint32_t, std::uint64_t) {}

  // Nothing to release: the waits are on the peers' own timelines, which only those
  // peers' queues may advance. A device that never progresses holds its peers too,
  // until the communicator's bounded waits report it.
  void release_waiters() {}

  std::string describe() const { return {}; }

 private:
  std::vector<std::vector<Timeline>> imports_;  // [dst][src]
};

static_assert(CrossDeviceSync<NativeImport>);

}  // namespace tpar::inline v0
