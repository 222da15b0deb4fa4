// Mapped memory — a buffer with its own memory, mapped for its life, in the memory type
// a MemoryChoice picks, zero-filled: the one helper by which tpar maps memory.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/staging/host_import.hpp>
#include <tpar/vk/device.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

namespace tpar::inline v0::detail {

// A buffer with its own memory, mapped for its life (unmapped before OwnedBuffer frees it).
struct MappedBuffer : OwnedBuffer {
  void* data = nullptr;
  vk::DeviceSize size = 0;
  std::uint32_t memory_type = 0;     // the memory type it was allocated from
  vk::MemoryPropertyFlags flags;     // that type's properties
  ~MappedBuffer() {
    if (data) device.unmapMemory(memory);
  }
};

// Memory types with these flags may be allocated only where the device enabled
// VK_AMD_device_coherent_memory's deviceCoherentMemory (VUID-vkAllocateMemory-deviceCoherentMemory-02790).
inline constexpr vk::MemoryPropertyFlags device_coherent_flags =
    vk::MemoryPropertyFlagBits::eDeviceCoherentAMD | vk::MemoryPropertyFlagBits::eDeviceUncachedAMD;

// What a buffer's memory type must have (`need`), should have (`first`, then `then`, most
// flags of each winning) and should lack (`avoid`).
struct MemoryChoice {
  vk::MemoryPropertyFlags need, first, then, avoid;
};

// "type 3 { DeviceLocal | HostVisible | HostCoherent }"
inline std::string memory_type_text(const MappedBuffer& b) {
  return "type " + std::to_string(b.memory_type) + " " + vk::to_string(b.flags);
}

// A storage buffer of `size` bytes in the memory type `choice` picks (never a
// device-coherent one where the device did not enable it); zero-filled and mapped.
inline std::unique_ptr<MappedBuffer> map_buffer(Device& dev, vk::DeviceSize size, const MemoryChoice& choice, const char* what) {
  auto out = std::make_unique<MappedBuffer>();
  out->device = dev.handle();
  out->size = size;
  const vk::Device vkd = dev.handle();
  vk::BufferCreateInfo info({}, size, vk::BufferUsageFlagBits::eStorageBuffer);
  check(vkd.createBuffer(&info, nullptr, &out->buffer), std::string("vkCreateBuffer (") + what + ")");
  vk::MemoryRequirements req;
  vkd.getBufferMemoryRequirements(out->buffer, &req);
  const auto props = dev.physical().getMemoryProperties();
  const vk::MemoryPropertyFlags forbidden = dev.enabled().device_coherent_memory ? vk::MemoryPropertyFlags{} : device_coherent_flags;
  std::uint32_t best = ~0u;
  int best_score = -1;
  for (std::uint32_t i = 0; i < props.memoryTypeCount; ++i) {
    const auto flags = props.memoryTypes[i].propertyFlags;
    if (!((req.memoryTypeBits >> i) & 1u) || (flags & choice.need) != choice.need || (flags & forbidden)) continue;
    const auto count = [&](vk::MemoryPropertyFlags f) { return std::popcount(static_cast<std::uint32_t>(flags & f)); };
    const int score = 16 * count(choice.first) + 2 * count(choice.then) + !(flags & choice.avoid);
    if (score > best_score) {
      best = i;
      best_score = score;
    }
  }
  if (best == ~0u)
    throw Error(ErrorCode::unsupported, "device " + std::to_string(dev.index()) + " (" + dev.capabilities().name +
                                            ") offers no memory type for the relay's " + what);
  out->memory_type = best;
  out->flags = props.memoryTypes[best].propertyFlags;
  vk::MemoryAllocateInfo alloc(req.size, best);
  check(vkd.allocateMemory(&alloc, nullptr, &out->memory), std::string("vkAllocateMemory (") + what + ")");
  check(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(vkd, out->buffer, out->memory, 0), std::string("vkBindBufferMemory (") + what + ")");
  check(vkd.mapMemory(out->memory, 0, VK_WHOLE_SIZE, {}, &out->data), std::string("vkMapMemory (") + what + ")");
  std::memset(out->data, 0, size);
  return out;
}

}  // namespace tpar::inline v0::detail
