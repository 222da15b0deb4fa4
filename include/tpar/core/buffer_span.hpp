// BufferSpan — the part of a caller's VkBuffer an AllReduce works on, in place.
#pragma once

#include <tpar/core/config.hpp>

#include <cstddef>

namespace tpar::inline v0 {

// `count` f32 elements starting `offset` bytes into `buffer`. The buffer must have been
// created with VK_BUFFER_USAGE_STORAGE_BUFFER_BIT; the offset must be a multiple of the
// device's minStorageBufferOffsetAlignment.
struct BufferSpan {
  vk::Buffer buffer;
  vk::DeviceSize offset = 0;
  std::size_t count = 0;
  // Size of `buffer` in bytes, used to reject a span that runs past its end. Vulkan
  // cannot be asked for a buffer's size, so the caller states it.
  vk::DeviceSize buffer_size = 0;

  vk::DeviceSize bytes() const { return static_cast<vk::DeviceSize>(count) * sizeof(float); }
};

}  // namespace tpar::inline v0
