// One device's buffers for tpar-bench and a way to run copies on it, outside any timing.
#pragma once

#include "bench.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace tpar_bench {

// One device's buffers and a way to run copies on it, outside any timing.
struct DeviceRig {
  tpar::Device* dev;
  std::unique_ptr<Buffer> data, pristine, stage;
  vk::CommandPool pool;
  tpar::Timeline timeline;
  std::uint64_t value = 0;

  // `pristine`: a second device buffer to restore `data` from (the table's timed inputs).
  DeviceRig(tpar::Device& d, std::size_t bytes, bool with_pristine = true) : dev(&d), timeline(d.handle()) {
    data = std::make_unique<Buffer>(d, bytes, false);
    if (with_pristine) pristine = std::make_unique<Buffer>(d, bytes, false);
    stage = std::make_unique<Buffer>(d, bytes, true);
    vk::CommandPoolCreateInfo info(vk::CommandPoolCreateFlagBits::eTransient, d.compute_queue().family());
    vk_check(d.handle().createCommandPool(&info, nullptr, &pool), "vkCreateCommandPool");
  }
  ~DeviceRig() { dev->handle().destroyCommandPool(pool); }

  // Records `record` into a fresh command buffer, submits it after everything queued so
  // far, and returns the value it signals.
  template <class F>
  std::uint64_t run(F&& record) {
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(dev->handle().allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const vk::MemoryBarrier all(vk::AccessFlagBits::eMemoryWrite, vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &all, 0, nullptr, 0, nullptr);
    record(cb);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands | vk::PipelineStageFlagBits::eHost,
                       {}, 1, &all, 0, nullptr, 0, nullptr);
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    const vk::Semaphore sem = timeline.handle();
    const std::uint64_t signal = ++value;
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &signal);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    vk_check(dev->compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit");
    pending.push_back({cb, signal});
    return signal;
  }
  void finish() {
    const vk::Semaphore sem = timeline.handle();
    vk_check(tpar::wait(dev->handle(), sem, value, std::chrono::seconds(60)), "waiting for a copy");
    for (auto& p : pending) dev->handle().freeCommandBuffers(pool, 1, &p.first);
    pending.clear();
  }
  std::vector<std::pair<vk::CommandBuffer, std::uint64_t>> pending;

  void copy(vk::Buffer from, vk::Buffer to, std::size_t bytes) {
    run([&](vk::CommandBuffer cb) {
      const vk::BufferCopy region(0, 0, bytes);
      cb.copyBuffer(from, to, 1, &region);
    });
  }
};

}  // namespace tpar_bench
