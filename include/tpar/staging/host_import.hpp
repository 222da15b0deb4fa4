// HostImport — the staging policy for devices with VK_EXT_external_memory_host: one
// aligned host allocation per source device, imported into every device, so a device's
// upload lands where every peer can download it, with no host copy in between. Each
// allocation holds `depth` slot sets (one per call in flight); the communicator makes
// sure a set is reused only after every device finished the call that used it.
#pragma once

#include <tpar/detail/align.hpp>
#include <tpar/core/detail/platform.hpp>
#include <tpar/staging/concepts.hpp>
#include <tpar/vk/device_group.hpp>

#include <memory>
#include <string_view>
#include <vector>

namespace tpar::inline v0 {

namespace detail {

// Page-aligned host memory that no allocator reuses behind our back while a device
// holds an import of it.
class HostAllocation {
 public:
  explicit HostAllocation(std::size_t bytes) : ptr_(os::map_pages(bytes)), bytes_(bytes) {
    if (!ptr_) throw Error(ErrorCode::out_of_memory, "cannot map " + std::to_string(bytes) + " bytes of host staging");
  }
  HostAllocation(const HostAllocation&) = delete;
  HostAllocation& operator=(const HostAllocation&) = delete;
  ~HostAllocation() { os::unmap_pages(ptr_, bytes_); }
  void* data() const { return ptr_; }
  std::size_t size() const { return bytes_; }

 private:
  void* ptr_;
  std::size_t bytes_;
};

inline std::uint32_t pick_memory_type(vk::PhysicalDevice physical, std::uint32_t allowed, vk::MemoryPropertyFlags want) {
  const auto props = physical.getMemoryProperties();
  std::uint32_t fallback = ~0u;
  for (std::uint32_t i = 0; i < props.memoryTypeCount; ++i) {
    if (!((allowed >> i) & 1u)) continue;
    if ((props.memoryTypes[i].propertyFlags & want) == want) return i;
    if (fallback == ~0u) fallback = i;
  }
  return fallback;
}

// A buffer with its own memory, destroyed with it.
struct OwnedBuffer {
  vk::Device device;
  vk::Buffer buffer;
  vk::DeviceMemory memory;
  OwnedBuffer() = default;
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  ~OwnedBuffer() {
    if (buffer) device.destroyBuffer(buffer);
    if (memory) device.freeMemory(memory);
  }
};

inline vk::BufferCreateInfo staging_buffer_info(Device& dev, vk::DeviceSize size, std::uint32_t (&families)[2]) {
  vk::BufferCreateInfo info({}, size,
                            vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                                vk::BufferUsageFlagBits::eTransferDst);
  families[0] = dev.compute_queue().family();
  families[1] = dev.transfer_queue().family();
  if (families[0] != families[1]) {
    info.sharingMode = vk::SharingMode::eConcurrent;
    info.queueFamilyIndexCount = 2;
    info.pQueueFamilyIndices = families;
  }
  return info;
}

}  // namespace detail

struct HostImport {
  static constexpr std::string_view name = "HostImport";

  // Throws unless every device can import host memory.
  static void check_support(const DeviceGroup& group) {
    for (std::size_t i = 0; i < group.size(); ++i) {
      const auto& d = group[i];
      if (!d.enabled().external_memory_host)
        throw Error(ErrorCode::missing_feature,
                    "device " + std::to_string(i) + " (" + d.capabilities().name +
                        ") has no VK_EXT_external_memory_host " + (d.capabilities().external_memory_host ? "enabled" : "support") +
                        ", which HostImport staging needs to share host memory between devices");
    }
  }

  // One generation of staging memory; replaced as a whole when capacity changes.
  class Generation {
   public:
    Generation(const DeviceGroup& group, std::uint64_t set_bytes, std::uint32_t depth, std::uint64_t scratch_bytes)
        : set_bytes_(set_bytes), depth_(depth), scratch_bytes_(scratch_bytes) {
      const std::size_t n = group.size();
      vk::DeviceSize align = 4096;
      for (std::size_t i = 0; i < n; ++i) align = std::max(align, group[i].capabilities().host_import_alignment);
      const std::uint64_t host_size = detail::align_up(std::max<std::uint64_t>(set_bytes * depth, 1), align);
      host_.reserve(n);
      imports_.resize(n);
      scratch_.resize(n);
      if (n > 1)
        for (std::size_t j = 0; j < n; ++j) host_.push_back(std::make_unique<detail::HostAllocation>(host_size));
      for (std::size_t d = 0; d < n; ++d) {
        Device& dev = group[d];
        if (n > 1)
          for (std::size_t j = 0; j < n; ++j) imports_[d].push_back(import(dev, *host_[j]));
        scratch_[d] = make_scratch(dev, std::max<std::uint64_t>(scratch_bytes, 256));
      }
    }

    std::uint64_t set_bytes() const { return set_bytes_; }
    std::uint32_t depth() const { return depth_; }
    std::uint64_t scratch_bytes() const { return scratch_bytes_; }
    // Source j's host staging as a buffer of device d.
    vk::Buffer host_buffer(std::size_t d, std::size_t j) const { return imports_[d][j]->buffer; }
    vk::Buffer scratch(std::size_t d) const { return scratch_[d]->buffer; }
    std::uint64_t slot_offset(std::uint32_t slot_set) const { return std::uint64_t(slot_set) * set_bytes_; }
    std::uint64_t host_bytes_total() const { return host_.empty() ? 0 : host_.size() * host_[0]->size(); }

   private:
    static std::unique_ptr<detail::OwnedBuffer> import(Device& dev, const detail::HostAllocation& host) {
      auto out = std::make_unique<detail::OwnedBuffer>();
      out->device = dev.handle();
      const vk::Device vkd = dev.handle();
      const auto host_type = vk::ExternalMemoryHandleTypeFlagBits::eHostAllocationEXT;
      VkMemoryHostPointerPropertiesEXT props{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT, nullptr, 0};
      detail::check(dev.extension_fns().get_memory_host_pointer_properties(
                        vkd, static_cast<VkExternalMemoryHandleTypeFlagBits>(host_type), host.data(), &props),
                    "vkGetMemoryHostPointerPropertiesEXT");
      std::uint32_t families[2];
      auto info = detail::staging_buffer_info(dev, host.size(), families);
      vk::ExternalMemoryBufferCreateInfo external(host_type);
      info.pNext = &external;
      detail::check(vkd.createBuffer(&info, nullptr, &out->buffer), "vkCreateBuffer (host staging)");
      vk::MemoryRequirements req;
      vkd.getBufferMemoryRequirements(out->buffer, &req);
      const std::uint32_t type = detail::pick_memory_type(dev.physical(), req.memoryTypeBits & props.memoryTypeBits,
                                                          vk::MemoryPropertyFlagBits::eHostCoherent);
      if (type == ~0u)
        throw Error(ErrorCode::unsupported, "device " + std::to_string(dev.index()) +
                                                " offers no memory type for importing host staging");
      vk::ImportMemoryHostPointerInfoEXT import_info(host_type, host.data());
      vk::MemoryAllocateInfo alloc(host.size(), type, &import_info);
      detail::check(vkd.allocateMemory(&alloc, nullptr, &out->memory), "vkAllocateMemory (import host staging)");
      detail::check(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(vkd, out->buffer, out->memory, 0), "vkBindBufferMemory (host staging)");
      return out;
    }

    static std::unique_ptr<detail::OwnedBuffer> make_scratch(Device& dev, std::uint64_t bytes) {
      auto out = std::make_unique<detail::OwnedBuffer>();
      out->device = dev.handle();
      const vk::Device vkd = dev.handle();
      std::uint32_t families[2];
      auto info = detail::staging_buffer_info(dev, bytes, families);
      detail::check(vkd.createBuffer(&info, nullptr, &out->buffer), "vkCreateBuffer (scratch)");
      vk::MemoryRequirements req;
      vkd.getBufferMemoryRequirements(out->buffer, &req);
      const std::uint32_t type =
          detail::pick_memory_type(dev.physical(), req.memoryTypeBits, vk::MemoryPropertyFlagBits::eDeviceLocal);
      vk::MemoryAllocateInfo alloc(req.size, type);
      detail::check(vkd.allocateMemory(&alloc, nullptr, &out->memory), "vkAllocateMemory (scratch)");
      detail::check(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(vkd, out->buffer, out->memory, 0), "vkBindBufferMemory (scratch)");
      return out;
    }

    std::uint64_t set_bytes_;
    std::uint32_t depth_;
    std::uint64_t scratch_bytes_;
    std::vector<std::unique_ptr<detail::HostAllocation>> host_;
    // Declared after host_: imports go before the host memory they map.
    std::vector<std::vector<std::unique_ptr<detail::OwnedBuffer>>> imports_;
    std::vector<std::unique_ptr<detail::OwnedBuffer>> scratch_;
  };
};

static_assert(StagingPolicy<HostImport>);

}  // namespace tpar::inline v0
