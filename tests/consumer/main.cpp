// Sums 1000 values across two virtual devices through an installed tpar.
#include <tpar/tpar.hpp>

#include <cstdio>
#include <cstring>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

int main() {
  try {
    tpar::GroupOptions options;
    options.select.virtual_devices(2);
    auto group = tpar::DeviceGroup::create(options);
    auto comm = tpar::make_communicator(group);
    const std::size_t count = 1000;
    std::vector<vk::Buffer> buffers(2);
    std::vector<vk::DeviceMemory> memory(2);
    std::vector<float*> data(2);
    std::vector<tpar::BufferSpan> spans;
    for (int d = 0; d < 2; ++d) {
      const vk::Device dev = group[d].handle();
      vk::BufferCreateInfo info({}, count * 4, vk::BufferUsageFlagBits::eStorageBuffer);
      if (dev.createBuffer(&info, nullptr, &buffers[d]) != vk::Result::eSuccess) return 1;
      vk::MemoryRequirements req;
      dev.getBufferMemoryRequirements(buffers[d], &req);
      const auto props = group[d].physical().getMemoryProperties();
      std::uint32_t type = 0;
      const auto want = vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
      while ((props.memoryTypes[type].propertyFlags & want) != want || !((req.memoryTypeBits >> type) & 1u)) ++type;
      vk::MemoryAllocateInfo alloc(req.size, type);
      if (dev.allocateMemory(&alloc, nullptr, &memory[d]) != vk::Result::eSuccess) return 1;
      VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(dev, buffers[d], memory[d], 0);
      void* p = nullptr;
      if (dev.mapMemory(memory[d], 0, VK_WHOLE_SIZE, {}, &p) != vk::Result::eSuccess) return 1;
      data[d] = static_cast<float*>(p);
      for (std::size_t i = 0; i < count; ++i) data[d][i] = float(i) * float(d + 1);
      spans.push_back({buffers[d], 0, count, count * 4});
    }
    comm.allreduce(spans).wait();
    int bad = 0;
    for (int d = 0; d < 2; ++d)
      for (std::size_t i = 0; i < count; ++i) bad += data[d][i] != float(3 * i);
    for (int d = 0; d < 2; ++d) {
      group[d].handle().destroyBuffer(buffers[d]);
      group[d].handle().freeMemory(memory[d]);
    }
    std::printf("consumer: tpar %s, allreduce over %zu devices: %s\n", TPAR_VERSION_STRING, group.size(), bad ? "WRONG" : "correct");
    return bad ? 1 : 0;
  } catch (const tpar::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
