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
//
// On Windows, where drivers share semaphores as OPAQUE_WIN32 handles, the gate rules it
// out with that reason (detail::os::semaphore_sharing_blocker): ProxyBridge carries the
// group, and asking for NativeImport is an error that says why.
#pragma once

#include <tpar/core/log.hpp>
#include <tpar/sync/concepts.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

namespace tpar::inline v0 {

namespace detail {

// Exports `semaphore` of `from` as an OPAQUE_FD and imports it into a new timeline
// semaphore of `to`. The fd belongs to the driver once imported; on any failure it is
// closed here, so no path leaks one.
inline Timeline import_timeline(const Device& from, vk::Semaphore semaphore, const Device& to) {
  if (!os::semaphore_sharing_blocker.empty())
    throw Error(ErrorCode::unsupported, "NativeImport is not possible here: " + std::string(os::semaphore_sharing_blocker));
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
    os::close_descriptor(fd);
    throw;
  }
}

// What the self-test leaves on a queue that was still busy with earlier work when it
// ran (a host's queue behind a ready point that has not come yet): its semaphores live
// until that queue got past the check.
struct SelfTestLeftovers {
  std::vector<Timeline> sources;
  std::vector<std::vector<Timeline>> imports;  // [dst][src]
  std::vector<Timeline> marks, reached;        // per device: the queue reached the check; got past it
  std::vector<std::size_t> pending;            // devices whose queues had not got there yet
};

// Submits to `device`'s compute queue one vkQueueSubmit of three batches: the first
// signals the device's own exported `source` to `value` (from the GPU, as the AllReduce's
// uploads do), the second `mark` to 1 (the queue got here, past whatever was queued
// before), the third waits for every semaphore of `waits` (imports of the peers' sources)
// to reach `value`, then signals `reached` to 1. The source's signal comes first, so no
// queue's check waits on a signal queued behind another device's check.
inline void submit_check(Device& device, vk::Semaphore source, vk::Semaphore mark, std::span<const vk::Semaphore> waits,
                         std::uint64_t value, vk::Semaphore reached) {
  const std::uint64_t one = 1;
  const std::vector<std::uint64_t> values(waits.size(), value);
  const std::vector<vk::PipelineStageFlags> stages(waits.size(), vk::PipelineStageFlagBits::eAllCommands);
  const vk::TimelineSemaphoreSubmitInfo source_ti(0, nullptr, 1, &value);
  const vk::TimelineSemaphoreSubmitInfo mark_ti(0, nullptr, 1, &one);
  const vk::TimelineSemaphoreSubmitInfo wait_ti(static_cast<std::uint32_t>(values.size()), values.data(), 1, &one);
  const vk::SubmitInfo infos[] = {
      vk::SubmitInfo(0, nullptr, nullptr, 0, nullptr, 1, &source, &source_ti),
      vk::SubmitInfo(0, nullptr, nullptr, 0, nullptr, 1, &mark, &mark_ti),
      vk::SubmitInfo(static_cast<std::uint32_t>(waits.size()), waits.data(), stages.data(), 0, nullptr, 1, &reached, &wait_ti)};
  check(device.compute_queue().submit(std::span(infos)), "vkQueueSubmit (NativeImport self-test)");
}

// Whether `t` reaches `value` within `bound` (a lost device throws).
inline bool reaches(const Timeline& t, std::uint64_t value, std::chrono::nanoseconds bound) {
  const vk::Semaphore s = t.handle();
  const vk::Result r = tpar::wait(t.device(), std::span(&s, 1), std::span(&value, 1), bound);
  if (r == vk::Result::eTimeout) return false;
  check(r, "vkWaitSemaphores (NativeImport self-test)");
  return true;
}

// The self-test. Every device's exportable timeline is imported into every other device;
// (1) a value the host signals on each source must be visible through every import of
// it, and (2) each device's compute queue must get past a wait on all its imports,
// released by the peers' own queues signalling their sources. Busy queues are not
// judged: (1) needs no queue, and (2) judges a device only once its queue reached its
// check (a batch before the wait signals a mark) and every peer's queue signalled its
// source. A queue still busy with earlier work after the bound (a host's queue behind a
// ready point that has not come) leaves its check to finish there: returned, for the
// caller to keep until the queue got past it. Each bound is at most 2 s of `timeout`.
// Throws ErrorCode::unsupported where an import does not carry its source's values.
inline std::unique_ptr<SelfTestLeftovers> native_import_self_test(const DeviceGroup& group, std::chrono::nanoseconds timeout) {
  timeout = std::min<std::chrono::nanoseconds>(timeout, std::chrono::seconds(2));
  const std::size_t n = group.size();
  auto t = std::make_unique<SelfTestLeftovers>();
  for (std::size_t j = 0; j < n; ++j) t->sources.emplace_back(group[j].handle(), true);
  t->imports.resize(n);
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t j = 0; j < n; ++j)
      t->imports[d].push_back(j == d ? Timeline() : import_timeline(group[j], t->sources[j].handle(), group[d]));
  const auto waited_ms = std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count());

  // (1) A signal of every source, seen through every import of it.
  for (std::size_t j = 0; j < n; ++j) t->sources[j].signal(1);
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t j = 0; j < n; ++j)
      if (j != d && !reaches(t->imports[d][j], 1, timeout))
        throw Error(ErrorCode::unsupported, "NativeImport self-test: a signal of device " + std::to_string(j) + " to device " +
                                                std::to_string(d) + " was not visible through the import (after " + waited_ms +
                                                " ms device " + std::to_string(d) + " reads " +
                                                std::to_string(t->imports[d][j].value()) + ", expected 1)");

  // (2) Every queue signals its source, then waits on all its imports for their sources:
  // submitted in one piece (DeviceGroup::lock_submissions), as a communicator's calls are.
  auto order = group.lock_submissions();
  for (std::size_t d = 0; d < n; ++d) {
    t->marks.emplace_back(group[d].handle());
    t->reached.emplace_back(group[d].handle());
    std::vector<vk::Semaphore> waits;
    for (std::size_t j = 0; j < n; ++j)
      if (j != d) waits.push_back(t->imports[d][j].handle());
    submit_check(group[d], t->sources[d].handle(), t->marks[d].handle(), waits, 2, t->reached[d].handle());
  }
  order.unlock();
  // One bound for all devices: a busy queue delays its peers' checks too.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (std::size_t d = 0; d < n; ++d) {
    if (reaches(t->reached[d], 1, deadline - std::chrono::steady_clock::now())) continue;
    std::string busy;  // this queue before its check, or a peer's before signalling its source
    for (std::size_t j = 0; j < n; ++j)
      if (j == d ? t->marks[d].value() < 1 : t->sources[j].value() < 2) busy += (busy.empty() ? "" : ", ") + std::to_string(j);
    if (!busy.empty()) {
      // Behind earlier work there: no verdict on this queue yet, and (1) passed.
      log(LogLevel::info, "NativeImport self-test: the compute queue of device(s) " + busy +
                              " is busy with earlier work; device " + std::to_string(d) + "'s queue check completes behind it");
      t->pending.push_back(d);
      continue;
    }
    // The queue got there and its peers signalled: give it a whole bound of its own
    // (the shared deadline may have been spent on a queue before it).
    if (reaches(t->reached[d], 1, timeout)) continue;
    // The queue got there and did not get past the wait: the imports do not carry the
    // sources' signals to the GPU. Release every queue still on its check by signalling
    // the imports themselves, so the devices stay usable for ProxyBridge.
    bool released = true;
    for (std::size_t k = 0; k < n; ++k) {
      if (t->reached[k].value() >= 1) continue;
      for (std::size_t j = 0; j < n; ++j) {
        // Only where the source did signal (a signal still to come must stay the first).
        if (j == k || t->sources[j].value() < 2 || t->imports[k][j].value() >= 2) continue;
        try {
          t->imports[k][j].signal(2);
        } catch (const Error&) {
        }
      }
      if (!reaches(t->reached[k], 1, timeout)) {
        log(LogLevel::error, "NativeImport self-test: the compute queue of device " + std::to_string(k) +
                                 " stays blocked on its check; its semaphores are left allocated");
        released = false;
      }
    }
    if (!released) (void)t.release();  // still waited on: never destroy these semaphores
    throw Error(ErrorCode::unsupported, "NativeImport self-test: the compute queue of device " + std::to_string(d) +
                                            " did not get past a wait on its peers' timelines within " + waited_ms + " ms");
  }
  if (t->pending.empty()) return nullptr;
  return t;
}

// Whether every queue the self-test left a check on got past it (each waited on at most
// `bound`; a lost device counts as not).
inline bool self_test_done(const SelfTestLeftovers& t, std::chrono::nanoseconds bound) noexcept {
  try {
    return std::all_of(t.pending.begin(), t.pending.end(), [&](std::size_t d) { return reaches(t.reached[d], 1, bound); });
  } catch (const Error&) {
    return false;
  }
}

}  // namespace detail

class NativeImport {
 public:
  static constexpr SyncKind kind = SyncKind::native_import;
  // The communicator creates its upload timelines exportable for us.
  static constexpr bool exports_sources = true;

  // Throws Error(unsupported), saying why, where the group cannot use NativeImport. The
  // communicator asks before it makes anything for it: its exportable timelines would
  // otherwise fail first, with the driver's VK_ERROR_INVALID_EXTERNAL_HANDLE (lavapipe).
  static void check_support(const DeviceGroup& group) {
    if (group.size() < 2) return;
    const SyncGate gate = group.sync_gate();
    if (!gate.native_possible) throw Error(ErrorCode::unsupported, "NativeImport is not possible here: " + gate.blocker);
  }

  NativeImport(const DeviceGroup& group, std::span<const vk::Semaphore> sources, std::chrono::nanoseconds timeout,
               FailureHandler = {}) {
    const std::size_t n = group.size();
    if (n > 1) {
      check_support(group);
      leftovers_ = detail::native_import_self_test(group, timeout);
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

  NativeImport(const NativeImport&) = delete;
  NativeImport& operator=(const NativeImport&) = delete;
  // A self-test check still queued behind work that never ran keeps its semaphores.
  ~NativeImport() {
    if (leftovers_ && !detail::self_test_done(*leftovers_, std::chrono::seconds(1))) (void)leftovers_.release();
  }

 private:
  std::vector<std::vector<Timeline>> imports_;  // [dst][src]
  std::unique_ptr<detail::SelfTestLeftovers> leftovers_;  // checks left on busy queues, or null
};

static_assert(CrossDeviceSync<NativeImport>);

}  // namespace tpar::inline v0
