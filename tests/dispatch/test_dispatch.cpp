// A host application's way in, end to end, built twice: with Vulkan-Hpp's static
// dispatch (linking the loader) and with its dynamic dispatch (tpar loads it). The host
// owns its instance, devices and queues (tpar adopts them and locks the queues through
// the host's hooks) and chains its own GPU work on tpar's points, layer after layer:
// its "graph" signals a ready point, tpar's AllReduce waits on it, and its next graph
// waits on tpar's done point. The host never waits in between.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>

#include "support/host_app.hpp"

#include <atomic>
#include <bit>
#include <mutex>

#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE
constexpr const char* dispatch_kind = "dynamic";
#else
constexpr const char* dispatch_kind = "static";
#endif

using namespace tpar;
using namespace tpar_test;

TEST_CASE("a host chains 12 layers of its own work and tpar's AllReduce on its devices, with no host wait") {
  if (use_real_gpus()) return;
  MESSAGE("Vulkan-Hpp dispatch: " << dispatch_kind);
  constexpr std::uint32_t n = 2, layers = 12;
  constexpr std::size_t count = 65536;
  HostApp host(n);
  std::mutex queue_mutex[n];
  std::atomic<int> locked{0};
  std::vector<AdoptedDevice> adopted(n);
  for (std::uint32_t d = 0; d < n; ++d) {
    auto& a = adopted[d];
    a.instance = host.instance;
    a.physical = host.physical;
    a.device = host.devices[d];
    a.compute_queue = host.devices[d].getQueue(host.family, 0);
    a.compute_family = host.family;
    a.compute_lock = {[&, d] { queue_mutex[d].lock(); ++locked; }, [&, d] { queue_mutex[d].unlock(); }};
    a.enabled_extensions = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
  }
  {
    auto group = DeviceGroup::adopt(adopted);
    Options o;
    o.timeout = test_timeout;
    auto comm = make_communicator(group, o);
    struct HostDevice {
      std::unique_ptr<TestBuffer> tensor;
      vk::Semaphore graph;  // the host's own timeline: one value per layer
      vk::CommandPool pool;
      std::vector<vk::CommandBuffer> cbs;
    };
    std::vector<HostDevice> hd(n);
    std::vector<BufferSpan> spans;
    for (std::uint32_t d = 0; d < n; ++d) {
      const vk::Device dev = host.devices[d];
      hd[d].tensor = std::make_unique<TestBuffer>(group[d], count * 4);
      spans.push_back({hd[d].tensor->handle(), 0, count, count * 4});
      vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
      vk::SemaphoreCreateInfo si({}, &type);
      REQUIRE(dev.createSemaphore(&si, nullptr, &hd[d].graph) == vk::Result::eSuccess);
      vk::CommandPoolCreateInfo pi({}, host.family);
      REQUIRE(dev.createCommandPool(&pi, nullptr, &hd[d].pool) == vk::Result::eSuccess);
      hd[d].cbs.resize(layers);
      vk::CommandBufferAllocateInfo ai(hd[d].pool, vk::CommandBufferLevel::ePrimary, layers);
      REQUIRE(dev.allocateCommandBuffers(&ai, hd[d].cbs.data()) == vk::Result::eSuccess);
    }
    std::vector<TimelinePoint> done(n);  // tpar's done points of the previous layer
    for (std::uint32_t layer = 0; layer < layers; ++layer) {
      std::vector<TimelinePoint> ready(n);
      for (std::uint32_t d = 0; d < n; ++d) {
        // The host's "graph" for this layer: device d's partial result, (layer+1)(d+1)
        // everywhere, written after the previous AllReduce is done with the tensor.
        vk::CommandBuffer cb = hd[d].cbs[layer];
        vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
        REQUIRE(cb.begin(&bi) == vk::Result::eSuccess);
        const float value = float((layer + 1) * (d + 1));
        cb.fillBuffer(hd[d].tensor->handle(), 0, count * 4, std::bit_cast<std::uint32_t>(value));
        const vk::MemoryBarrier after(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite);
        cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &after, 0, nullptr, 0, nullptr);
        REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb) == VK_SUCCESS);
        const std::uint64_t signal = layer + 1;
        const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
        const bool first = layer == 0;
        const std::uint64_t wait_value = first ? 0 : done[d].value;
        const vk::Semaphore wait_sem = first ? hd[d].graph : done[d].semaphore;
        vk::TimelineSemaphoreSubmitInfo ti(1, &wait_value, 1, &signal);
        vk::SubmitInfo submit(1, &wait_sem, &stage, 1, &cb, 1, &hd[d].graph, &ti);
        REQUIRE(group[d].compute_queue().submit(std::span(&submit, 1)) == vk::Result::eSuccess);
        ready[d] = {hd[d].graph, signal};
      }
      Ticket t = comm.allreduce(spans, {.ready = ready});
      done = t.done();
    }
    // Only now does the host wait: for the last layer's sum.
    for (std::uint32_t d = 0; d < n; ++d) {
      const vk::Semaphore sem = done[d].semaphore;
      REQUIRE(tpar::wait(host.devices[d], std::span(&sem, 1), std::span(&done[d].value, 1), test_timeout) ==
              vk::Result::eSuccess);
    }
    const float expect = float(layers * (1 + 2));
    for (std::uint32_t d = 0; d < n; ++d)
      for (float v : hd[d].tensor->read(0, count)) REQUIRE(v == expect);
    comm = make_communicator(group, o);  // drops the first communicator (bounded drain)
    for (std::uint32_t d = 0; d < n; ++d) {
      host.devices[d].destroyCommandPool(hd[d].pool);
      host.devices[d].destroySemaphore(hd[d].graph);
    }
  }
  CHECK(locked > 0);
  for (const auto& e : host.log.errors) FAIL_CHECK("validation: " << e);
}
