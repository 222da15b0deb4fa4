// Timeline — a timeline semaphore tpar owns on one device.
#pragma once

#include <tpar/vk/device.hpp>

#include <chrono>
#include <cstdint>
#include <span>
#include <utility>

namespace tpar::inline v0 {

class Timeline {
 public:
  Timeline() = default;
  // `exportable`: may be exported as an OPAQUE_FD (NativeImport).
  explicit Timeline(vk::Device device, bool exportable = false, std::uint64_t initial = 0) : device_(device) {
    vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, initial);
    vk::ExportSemaphoreCreateInfo export_info(vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd);
    if (exportable) type.pNext = &export_info;
    vk::SemaphoreCreateInfo info({}, &type);
    detail::check(device_.createSemaphore(&info, nullptr, &semaphore_), "vkCreateSemaphore (timeline)");
  }
  Timeline(Timeline&& o) noexcept : device_(o.device_), semaphore_(std::exchange(o.semaphore_, {})) {}
  Timeline& operator=(Timeline&& o) noexcept {
    if (this != &o) {
      reset();
      device_ = o.device_;
      semaphore_ = std::exchange(o.semaphore_, {});
    }
    return *this;
  }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;
  ~Timeline() { reset(); }

  vk::Semaphore handle() const { return semaphore_; }
  vk::Device device() const { return device_; }

  // Current counter value. Device loss throws.
  std::uint64_t value() const {
    std::uint64_t v = 0;
    detail::check(device_.getSemaphoreCounterValue(semaphore_, &v), "vkGetSemaphoreCounterValue");
    return v;
  }

  void signal(std::uint64_t value) const {
    vk::SemaphoreSignalInfo info(semaphore_, value);
    detail::check(device_.signalSemaphore(&info), "vkSignalSemaphore");
  }

 private:
  void reset() {
    if (semaphore_) device_.destroySemaphore(semaphore_);
    semaphore_ = nullptr;
  }
  vk::Device device_;
  vk::Semaphore semaphore_;
};

// Waits on the host until every (semaphore, value) pair of one device is reached, at
// most `timeout` (negative: 0): vk::Result::eSuccess, eTimeout, or the driver's error
// (device loss). For a host's own timelines beside tpar's (its ready and done points,
// tpar::TimelinePoint): a Ticket waits its own call.
inline vk::Result wait(vk::Device device, std::span<const vk::Semaphore> semaphores, std::span<const std::uint64_t> values,
                       std::chrono::nanoseconds timeout) {
  vk::SemaphoreWaitInfo info({}, static_cast<std::uint32_t>(semaphores.size()), semaphores.data(), values.data());
  const auto ns = timeout.count() < 0 ? 0 : static_cast<std::uint64_t>(timeout.count());
  return device.waitSemaphores(&info, ns);
}
// One point: `semaphore` reaching `value`.
inline vk::Result wait(vk::Device device, vk::Semaphore semaphore, std::uint64_t value, std::chrono::nanoseconds timeout) {
  return wait(device, std::span(&semaphore, 1), std::span(&value, 1), timeout);
}

}  // namespace tpar::inline v0
