// tpar-bench's host-staging probe (--link, --link-only): the copy bandwidth between each
// device and imported host memory over every path a device offers, each device alone and
// all at once, and the bound that bandwidth sets on a call of a given schedule.
#pragma once

#include "bench.hpp"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

namespace tpar_bench {

// Host-staging bandwidth. The paths a device can move data between its memory and host
// memory imported into it: copy engines (vkCmdCopyBuffer) on the transfer queue, the
// compute queue, or a second transfer queue; or compute shaders that write to / read from
// the host memory directly over PCIe.
enum class Path { ce_d2h, ce_h2d_compute, ce_h2d_transfer2, sm_d2h, sm_h2d };

// `transfer`: what the devices' transfer queue is (on a device without a transfer-only
// queue family, tpar's transfer queue is its compute queue).
inline std::string path_name(Path p, const std::string& transfer) {
  switch (p) {
    case Path::ce_d2h: return "copy d2h (" + transfer + ")";
    case Path::ce_h2d_compute: return "copy h2d (compute queue)";
    case Path::ce_h2d_transfer2: return "copy h2d (2nd transfer queue)";
    case Path::sm_d2h: return "shader d2h (compute queue)";
    case Path::sm_h2d: return "shader h2d (compute queue)";
  }
  return "?";
}

struct LinkCombo {
  std::vector<Path> paths;
  std::vector<double> alone;  // GB/s per device, each device alone (all paths' bytes)
  double all = 0;             // GB/s per device, every device at once
};

struct LinkFigures {
  std::vector<LinkCombo> combos;
  std::string transfer_queue;  // "transfer queue", or the compute queue standing in for it
  // The data path the communicator uses (copy d2h on the transfer queue, copy h2d on the
  // compute queue), every device at once, GB/s per device: the bound rows are judged by.
  double d2h_all = 0, h2d_all = 0, duplex_all = 0;
  // The same with the copy h2d on the second transfer queue (0 where a device has none):
  // the bound of ring calls whose downloads run there.
  double h2d2_all = 0, duplex2_all = 0;
};

// `window` (0: all of `bytes`): device->host copies cycle through that much host memory
// per device, to see how the host's cache takes a small footprint (docs/PERFORMANCE.md).
inline LinkFigures measure_link(tpar::DeviceGroup& group, std::size_t bytes, std::size_t window, bool quiet) {
  const std::size_t n = group.size();
  tpar::HostImport::check_support(group);
  if (!quiet) std::fprintf(stderr, "%s: measuring host-staging bandwidth (%s per copy)\n", program.c_str(), human_bytes(bytes).c_str());
  // Host memory: the first half receives device->host traffic, the second half feeds
  // host->device, so concurrent directions never touch the same bytes.
  tpar::HostImport::Generation staging(group, 2 * bytes, 1, bytes);
  const std::uint32_t words = static_cast<std::uint32_t>(bytes / 4);
  struct Dev {
    std::unique_ptr<Buffer> second;
    vk::CommandPool compute_pool, transfer_pool;
    vk::DescriptorPool descriptors;
    vk::DescriptorSet to_host, from_host;
    std::vector<tpar::Timeline> timelines;  // compute, transfer, second transfer
    std::uint64_t values[3] = {0, 0, 0};
  };
  std::vector<Dev> devs(n);
  for (std::size_t d = 0; d < n; ++d) {
    auto& dev = group[d];
    auto& x = devs[d];
    const vk::Device vkd = dev.handle();
    x.second = std::make_unique<Buffer>(dev, bytes, false);
    vk::CommandPoolCreateInfo cp(vk::CommandPoolCreateFlagBits::eTransient, dev.compute_queue().family());
    vk_check(vkd.createCommandPool(&cp, nullptr, &x.compute_pool), "vkCreateCommandPool");
    cp.queueFamilyIndex = dev.transfer_queue().family();
    vk_check(vkd.createCommandPool(&cp, nullptr, &x.transfer_pool), "vkCreateCommandPool");
    for (int q = 0; q < 3; ++q) x.timelines.emplace_back(vkd);
    vk::DescriptorPoolSize size(vk::DescriptorType::eStorageBuffer, 6);
    vk::DescriptorPoolCreateInfo dp({}, 2, 1, &size);
    if (dev.kernels().update_after_bind()) dp.flags = vk::DescriptorPoolCreateFlagBits::eUpdateAfterBind;
    vk_check(vkd.createDescriptorPool(&dp, nullptr, &x.descriptors), "vkCreateDescriptorPool");
    const vk::DescriptorSetLayout layouts[2] = {dev.kernels().set_layout(), dev.kernels().set_layout()};
    vk::DescriptorSet sets[2];
    vk::DescriptorSetAllocateInfo ai(x.descriptors, 2, layouts);
    vk_check(vkd.allocateDescriptorSets(&ai, sets), "vkAllocateDescriptorSets");
    x.to_host = sets[0];
    x.from_host = sets[1];
    const vk::DescriptorBufferInfo scratch(staging.scratch(d), 0, bytes), second(x.second->buffer, 0, bytes),
        host_out(staging.host_buffer(d, d), 0, bytes), host_in(staging.host_buffer(d, d), bytes, bytes);
    // Binding 2 (a kernel's own host staging) is not used here, but must hold a buffer.
    const vk::WriteDescriptorSet w[6] = {
        vk::WriteDescriptorSet(x.to_host, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &scratch),
        vk::WriteDescriptorSet(x.to_host, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_out),
        vk::WriteDescriptorSet(x.to_host, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_out),
        vk::WriteDescriptorSet(x.from_host, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &second),
        vk::WriteDescriptorSet(x.from_host, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_in),
        vk::WriteDescriptorSet(x.from_host, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_in)};
    vkd.updateDescriptorSets(6, w, 0, nullptr);
  }
  const int reps = 4;
  // Submits one path on one device; returns the (queue slot, command buffer) to free.
  auto submit = [&](std::size_t d, Path path) {
    auto& dev = group[d];
    auto& x = devs[d];
    const int slot = path == Path::ce_d2h ? 1 : path == Path::ce_h2d_transfer2 ? 2 : 0;
    tpar::Queue* queue = slot == 0 ? &dev.compute_queue() : slot == 1 ? &dev.transfer_queue() : dev.second_transfer_queue();
    const vk::CommandPool pool = slot == 0 ? x.compute_pool : x.transfer_pool;
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(dev.handle().allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const bool shader = path == Path::sm_d2h || path == Path::sm_h2d;
    const vk::PipelineStageFlags stage = shader ? vk::PipelineStageFlags(vk::PipelineStageFlagBits::eComputeShader)
                                                : vk::PipelineStageFlags(vk::PipelineStageFlagBits::eTransfer);
    const vk::MemoryBarrier m(vk::AccessFlagBits::eMemoryWrite, vk::AccessFlagBits::eMemoryWrite | vk::AccessFlagBits::eMemoryRead);
    for (int r = 0; r < reps; ++r) {
      if (shader) {
        auto& k = dev.kernels();
        tpar::KernelArgs args;
        args.count = words;
        const bool out = path == Path::sm_d2h;
        args.mode = static_cast<std::uint32_t>(out ? tpar::PackMode::encode : tpar::PackMode::zeros);
        if (!out) args.mode = static_cast<std::uint32_t>(tpar::CombineMode::unpack);
        cb.bindPipeline(vk::PipelineBindPoint::eCompute, k.pipeline(out ? tpar::Kernel::pack : tpar::Kernel::combine, tpar::Wire::f32));
        cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, k.layout(), 0, 1, out ? &x.to_host : &x.from_host, 0, nullptr);
        cb.pushConstants(k.layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof args, &args);
        cb.dispatch(tpar::kernel_groups(words, dev.capabilities().max_workgroups_x), 1, 1);
      } else {
        const vk::Buffer host = staging.host_buffer(d, d);
        const vk::BufferCopy to_host(0, 0, bytes), from_host(bytes, 0, bytes);
        if (path == Path::ce_d2h && window && window < bytes) {
          for (std::size_t off = 0; off < bytes; off += window) {  // each part over the window's start
            const vk::BufferCopy part(off, 0, std::min(window, bytes - off));
            cb.copyBuffer(staging.scratch(d), host, 1, &part);
          }
        } else if (path == Path::ce_d2h) cb.copyBuffer(staging.scratch(d), host, 1, &to_host);
        else cb.copyBuffer(host, x.second->buffer, 1, &from_host);
      }
      cb.pipelineBarrier(stage, stage, {}, 1, &m, 0, nullptr, 0, nullptr);
    }
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    const vk::Semaphore sem = x.timelines[slot].handle();
    const std::uint64_t signal = ++x.values[slot];
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &signal);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    vk_check(queue->submit(std::span(&si, 1)), "vkQueueSubmit");
    return std::make_pair(pool, cb);
  };
  // GB/s per device for `paths` run concurrently on each of `devices`.
  auto run = [&](const std::vector<std::size_t>& devices, const std::vector<Path>& paths) {
    std::vector<std::pair<std::size_t, std::pair<vk::CommandPool, vk::CommandBuffer>>> cbs;
    const auto t0 = Clock::now();
    for (auto d : devices)
      for (Path p : paths) cbs.push_back({d, submit(d, p)});
    for (auto d : devices)
      for (int q = 0; q < 3; ++q) {
        const vk::Semaphore sem = devs[d].timelines[q].handle();
        vk_check(tpar::wait(group[d].handle(), sem, devs[d].values[q],
                                        std::chrono::seconds(120)),
                 "waiting for link copies");
      }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& [d, c] : cbs) group[d].handle().freeCommandBuffers(c.first, 1, &c.second);
    return double(bytes) * reps * double(paths.size()) / seconds / 1e9;
  };
  const bool two = [&] {
    for (std::size_t d = 0; d < n; ++d)
      if (!group[d].second_transfer_queue()) return false;
    return true;
  }();
  std::vector<std::vector<Path>> combos = {{Path::ce_d2h}, {Path::ce_h2d_compute}, {Path::sm_d2h}, {Path::sm_h2d},
                                           {Path::ce_d2h, Path::ce_h2d_compute}, {Path::ce_d2h, Path::sm_h2d},
                                           {Path::sm_d2h, Path::ce_h2d_compute}};
  if (two) {
    combos.insert(combos.begin() + 2, {Path::ce_h2d_transfer2});
    combos.push_back({Path::ce_d2h, Path::ce_h2d_transfer2});
    combos.push_back({Path::sm_d2h, Path::ce_h2d_transfer2});
  }
  std::vector<std::size_t> all(n);
  for (std::size_t d = 0; d < n; ++d) all[d] = d;
  LinkFigures f;
  std::size_t with_transfer = 0;
  for (std::size_t d = 0; d < n; ++d) with_transfer += group[d].has_transfer_queue();
  f.transfer_queue = with_transfer == n ? "transfer queue"
                     : with_transfer == 0 ? "compute queue: no transfer queue"
                                          : "transfer queue, compute queue where none";
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up (pins pages, wakes links)
    f.combos.clear();
    for (const auto& paths : combos) {
      LinkCombo c;
      c.paths = paths;
      for (std::size_t d = 0; d < n; ++d) c.alone.push_back(run({d}, paths));
      c.all = run(all, paths);
      f.combos.push_back(c);
    }
  }
  for (const auto& c : f.combos) {
    if (c.paths == std::vector<Path>{Path::ce_d2h}) f.d2h_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_h2d_compute}) f.h2d_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_d2h, Path::ce_h2d_compute}) f.duplex_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_h2d_transfer2}) f.h2d2_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_d2h, Path::ce_h2d_transfer2}) f.duplex2_all = c.all;
  }
  for (std::size_t d = 0; d < n; ++d) {
    const vk::Device vkd = group[d].handle();
    vkd.destroyDescriptorPool(devs[d].descriptors);
    vkd.destroyCommandPool(devs[d].compute_pool);
    vkd.destroyCommandPool(devs[d].transfer_pool);
  }
  return f;
}

// The best time the host-staging links allow for one call of this schedule.
inline double bound_seconds(const tpar::Schedule& s, const LinkFigures& link) {
  double worst = 0;
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    double up = 0, down = 0;
    const bool second_engine = s.devices[d].count(tpar::Role::download) > 0 && link.duplex2_all > 0;
    const double h2d = second_engine ? link.h2d2_all : link.h2d_all;
    const double duplex = second_engine ? link.duplex2_all : link.duplex_all;
    for (const auto& b : s.devices[d].batches)
      for (const auto& c : b.commands) {
        const tpar::HostTraffic k = tpar::kernel_host_traffic(s.wire, c);  // kernels' own host traffic
        up += double(k.to_host);
        down += double(k.from_host);
        if (c.type != tpar::Command::Type::copy) continue;
        if (c.dst.kind == tpar::Region::Kind::host) up += double(c.bytes);
        if (c.src.kind == tpar::Region::Kind::host) down += double(c.bytes);
      }
    const double t = std::max({up / (link.d2h_all * 1e9), down / (h2d * 1e9), (up + down) / (duplex * 1e9)});
    worst = std::max(worst, t);
  }
  return worst;
}

}  // namespace tpar_bench
