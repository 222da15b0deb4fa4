// Vulkan pieces shared by tpar's example programs: a buffer with its own memory, and the
// error they throw when one of their own Vulkan calls fails (main() reports it).
#pragma once

#include <tpar/vk/device.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace tpar_example {

struct Failure : std::runtime_error {
  explicit Failure(const std::string& what, vk::Result r = vk::Result::eSuccess) : std::runtime_error(what), result(r) {}
  vk::Result result;  // the failing call's, where one failed
  bool out_of_memory() const {
    return result == vk::Result::eErrorOutOfDeviceMemory || result == vk::Result::eErrorOutOfHostMemory;
  }
};

inline void vk_check(vk::Result r, const char* what) {
  if (r != vk::Result::eSuccess) throw Failure(std::string(what) + " failed: " + vk::to_string(r), r);
}

inline std::string mib(std::size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return text;
}

// A storage + transfer buffer bound to memory of its own: device-local, or host-visible
// and coherent (then mapped). At least 16 bytes, so an empty share still has a buffer.
struct Buffer {
  vk::Device device;
  vk::Buffer buffer;
  vk::DeviceMemory memory;
  void* mapped = nullptr;
  std::size_t size = 0;

  Buffer(tpar::Device& dev, std::size_t bytes, bool host_visible) : device(dev.handle()), size(std::max<std::size_t>(bytes, 16)) {
    vk::BufferCreateInfo info({}, size,
                              vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                                  vk::BufferUsageFlagBits::eTransferDst);
    vk_check(device.createBuffer(&info, nullptr, &buffer), "vkCreateBuffer");
    vk::MemoryRequirements req;
    device.getBufferMemoryRequirements(buffer, &req);
    const auto props = dev.physical().getMemoryProperties();
    const vk::MemoryPropertyFlags want = host_visible
                                             ? vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent
                                             : vk::MemoryPropertyFlags(vk::MemoryPropertyFlagBits::eDeviceLocal);
    std::uint32_t type = ~0u;
    for (std::uint32_t i = 0; i < props.memoryTypeCount && type == ~0u; ++i)
      if (((req.memoryTypeBits >> i) & 1u) && (props.memoryTypes[i].propertyFlags & want) == want) type = i;
    if (type == ~0u) {
      device.destroyBuffer(buffer);
      throw Failure("no suitable memory type for a " + mib(size) + " buffer");
    }
    vk::MemoryAllocateInfo alloc(req.size, type);
    if (const auto r = device.allocateMemory(&alloc, nullptr, &memory); r != vk::Result::eSuccess) {
      device.destroyBuffer(buffer);
      throw Failure("allocating " + mib(size) + (host_visible ? " of host-visible" : " of device") + " memory failed (" +
                        vk::to_string(r) + ")",
                    r);
    }
    const auto bound = vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(device, buffer, memory, 0));
    const auto mapped_ok = bound == vk::Result::eSuccess && host_visible
                               ? device.mapMemory(memory, 0, VK_WHOLE_SIZE, {}, &mapped)
                               : bound;
    if (mapped_ok != vk::Result::eSuccess) {
      device.destroyBuffer(buffer);
      device.freeMemory(memory);
      vk_check(mapped_ok, bound != vk::Result::eSuccess ? "vkBindBufferMemory" : "vkMapMemory");
    }
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    if (mapped) device.unmapMemory(memory);
    device.destroyBuffer(buffer);
    device.freeMemory(memory);
  }
};

}  // namespace tpar_example
