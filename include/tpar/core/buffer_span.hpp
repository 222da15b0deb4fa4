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
  // The size `buffer` was created with (VkBufferCreateInfo::size), in bytes: a span that
  // runs past it is refused. Vulkan cannot be asked for a buffer's size, so the caller
  // states it. 0 means "not stated": the span is then checked against the size of the
  // buffer's memory requirements (vkGetBufferMemoryRequirements), which is at least the
  // buffer's and may be more (an H200 gave 112 bytes for a 100-byte buffer). A span that
  // ends in that padding, past the buffer's end, is then not caught; Vulkan calls such
  // a span invalid use, and a driver may reduce into the padding (the H200 did).
  vk::DeviceSize buffer_size = 0;

  vk::DeviceSize bytes() const { return static_cast<vk::DeviceSize>(count) * sizeof(float); }
};

}  // namespace tpar::inline v0
