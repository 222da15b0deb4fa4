// TimelinePoint — "this timeline semaphore reached this value": how work on one queue is
// ordered after work on another without a host round trip.
#pragma once

#include <tpar/core/config.hpp>

#include <cstdint>

namespace tpar::inline v0 {

struct TimelinePoint {
  vk::Semaphore semaphore;  // a VK_SEMAPHORE_TYPE_TIMELINE semaphore of one device
  std::uint64_t value = 0;

  explicit operator bool() const { return static_cast<bool>(semaphore); }
};

}  // namespace tpar::inline v0
