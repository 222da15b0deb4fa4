// tpar-bench's single-device probes (--wake, --submit-cost): what a host thread pays to
// learn of a GPU signal, and what vkQueueSubmit costs the host per call and per batch.
#pragma once

#include "bench.hpp"

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace tpar_bench {

// How late a host thread blocked in vkWaitSemaphores wakes after a queue's signal: the
// GPU copies for ~100 us, stamps the end, then signals; the host, already waiting, notes
// when it woke. Needs calibrated timestamps to relate the two clocks.
inline void measure_wake(tpar::DeviceGroup& group, int trials) {
  auto& dev = group[0];
  const auto& fns = dev.extension_fns();
  if (!fns.get_calibrated_timestamps) die("--wake needs VK_EXT_calibrated_timestamps on device 0");
  const std::size_t bytes = std::size_t{256} << 20;
  Buffer a(dev, bytes, false), b(dev, bytes, false);
  const vk::Device vkd = dev.handle();
  vk::CommandPool pool;
  vk::CommandPoolCreateInfo pi({}, dev.compute_queue().family());
  vk_check(vkd.createCommandPool(&pi, nullptr, &pool), "vkCreateCommandPool");
  vk::QueryPool queries;
  vk::QueryPoolCreateInfo qi({}, vk::QueryType::eTimestamp, 1);
  vk_check(vkd.createQueryPool(&qi, nullptr, &queries), "vkCreateQueryPool");
  vk::CommandBuffer cb;
  vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
  vk_check(vkd.allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
  vk::CommandBufferBeginInfo bi;
  vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
  cb.resetQueryPool(queries, 0, 1);
  const vk::BufferCopy region(0, 0, bytes / 4);
  cb.copyBuffer(a.buffer, b.buffer, 1, &region);
  cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, queries, 0);
  vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
  tpar::Timeline timeline(vkd);
  const double period = dev.capabilities().timestamp_period_ns;
  std::vector<double> late;
  for (int t = 0; t < trials; ++t) {
    const vk::Semaphore sem = timeline.handle();
    const std::uint64_t value = std::uint64_t(t) + 1;
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &value);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    vk_check(dev.compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit");
    vk_check(tpar::wait(vkd, sem, value, std::chrono::seconds(10)), "vkWaitSemaphores");
    timespec woke{};
    clock_gettime(CLOCK_MONOTONIC, &woke);
    std::uint64_t stamp = 0;
    vk_check(vkd.getQueryPoolResults(queries, 0, 1, sizeof stamp, &stamp, sizeof stamp, vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait),
             "vkGetQueryPoolResults");
    const VkCalibratedTimestampInfoEXT infos[2] = {{VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_DEVICE_EXT},
                                                  {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
    std::uint64_t ts[2] = {0, 0}, deviation = 0;
    vk_check(vk::Result(fns.get_calibrated_timestamps(vkd, 2, infos, ts, &deviation)), "vkGetCalibratedTimestampsEXT");
    const double gpu_end_ns = double(ts[1]) + (double(stamp) - double(ts[0])) * period;
    const double woke_ns = double(woke.tv_sec) * 1e9 + double(woke.tv_nsec);
    late.push_back((woke_ns - gpu_end_ns) / 1e3);
  }
  std::sort(late.begin(), late.end());
  auto at = [&](double q) { return late[std::min(late.size() - 1, std::size_t(q * double(late.size())))]; };
  std::printf("# vkWaitSemaphores wake-up after a GPU signal, device 0 (%s), %d trials, microseconds\n",
              dev.capabilities().name.c_str(), trials);
  std::printf("  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  max %.1f\n", late.front(), at(0.5), at(0.9), at(0.99), late.back());
  vkd.destroyQueryPool(queries);
  vkd.destroyCommandPool(pool);
}

// Host CPU of vkQueueSubmit on device 0's compute queue, by batches per submission: each
// batch one tiny command buffer that waits on a timeline (already signalled) and signals
// another, as tpar's batches do. Says how much of a submission's cost is per call of
// vkQueueSubmit and how much per batch, i.e. what several calls per submission would save.
inline void measure_submit(tpar::DeviceGroup& group, int batches_total) {
  auto& dev = group[0];
  const vk::Device vkd = dev.handle();
  vk::CommandPool pool;
  vk::CommandPoolCreateInfo pi({}, dev.compute_queue().family());
  vk_check(vkd.createCommandPool(&pi, nullptr, &pool), "vkCreateCommandPool");
  vk::CommandBuffer cb;
  vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
  vk_check(vkd.allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
  vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eSimultaneousUse);
  vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
  const vk::MemoryBarrier full(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eShaderRead);
  cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {}, 1, &full, 0, nullptr, 0,
                     nullptr);
  vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
  tpar::Timeline ready(vkd), done(vkd);
  const vk::SemaphoreSignalInfo go(ready.handle(), 1);
  vk_check(vkd.signalSemaphore(&go), "vkSignalSemaphore");
  const vk::Semaphore ready_sem = ready.handle(), done_sem = done.handle();
  const std::uint64_t one = 1;
  const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
  std::uint64_t value = 0;
  std::printf("# vkQueueSubmit host CPU, device 0 (%s), compute queue, %d batches per row;\n"
              "# a batch = one command buffer, one timeline wait, one timeline signal\n",
              dev.capabilities().name.c_str(), batches_total);
  std::printf("# %8s %14s %12s\n", "batches", "us per submit", "us per batch");
  for (int per : {1, 2, 4, 8, 16}) {
    std::vector<std::uint64_t> values(per);
    std::vector<vk::TimelineSemaphoreSubmitInfo> tis(per);
    std::vector<vk::SubmitInfo> infos(per);
    double cpu_ns = 0;
    int submits = 0;
    for (int done_batches = 0; done_batches < batches_total; done_batches += per) {
      for (int k = 0; k < per; ++k) {
        values[k] = ++value;
        tis[k] = vk::TimelineSemaphoreSubmitInfo(1, &one, 1, &values[k]);
        infos[k] = vk::SubmitInfo(1, &ready_sem, &stage, 1, &cb, 1, &done_sem, &tis[k]);
      }
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      vk_check(dev.compute_queue().submit(infos), "vkQueueSubmit");
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      cpu_ns += double(t1.tv_sec - t0.tv_sec) * 1e9 + double(t1.tv_nsec - t0.tv_nsec);
      ++submits;
      if (submits % 16 == 0)  // keep the queue short; not timed
        vk_check(tpar::wait(vkd, done_sem, value, std::chrono::seconds(10)), "vkWaitSemaphores");
    }
    vk_check(tpar::wait(vkd, done_sem, value, std::chrono::seconds(10)), "vkWaitSemaphores");
    std::printf("  %8d %14.2f %12.2f\n", per, cpu_ns / 1e3 / submits, cpu_ns / 1e3 / (double(submits) * per));
  }
  vkd.destroyCommandPool(pool);
}

}  // namespace tpar_bench
