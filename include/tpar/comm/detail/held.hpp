// Held — what a communicator holds on the devices, moved out of it as it goes, and how
// to tell that no work on a queue uses it any more.
#pragma once

#include <tpar/comm/detail/comm_plan.hpp>
#include <tpar/comm/detail/plan_cache.hpp>
#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/comm/detail/relay_self_test.hpp>
#include <tpar/comm/detail/remains.hpp>
#include <tpar/sync/schedule.hpp>
#include <tpar/vk/device_group.hpp>

#include <chrono>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace tpar::inline v0::detail {

// Everything the communicator holds on the devices: freed by release_all(), or, where
// work on a queue still uses it when the communicator goes, kept in remains()
// until that work is done.
template <class Sync, class Generation>
struct Held final : Remains {
  explicit Held(DeviceGroup g) : group(std::move(g)) {}
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;
  DeviceGroup group;  // first: the devices outlive everything else held
  std::vector<DeviceContext> ctx;
  std::unique_ptr<Sync> sync;
  std::unique_ptr<RelayHub> relay;
  std::unique_ptr<RelaySelfTestLeftovers> relay_leftovers;
  PlanCache<Generation> cache;
  std::vector<std::pair<vk::Device, vk::Fence>> fences;  // behind the work on each queue (Submitter::settle())
  bool fenced = false;

  // Every timeline reached what was handed to the queues; then a fence on every queue
  // behind it signalled (see Submitter::settle(): the driver may still write into a
  // semaphore a batch waited on after the batch signalled).
  bool finished() override {
    for (auto& c : ctx)
      for (std::size_t r = 0; r < role_count; ++r) {
        std::uint64_t v = 0;
        const vk::Result res = c.device->handle().getSemaphoreCounterValue(c.timeline(static_cast<Role>(r)).handle(), &v);
        if (res == vk::Result::eSuccess && v < c.queued[r]) return false;  // (a lost device runs nothing more)
      }
    if (relay_leftovers && !relay_leftovers->finished(std::chrono::nanoseconds(0))) return false;
    if (!fenced) {
      fenced = true;
      for (auto& c : ctx) {
        const vk::Device vkd = c.device->handle();
        Queue* queues[role_count];
        for (Queue* q : c.used_queues(queues)) {
          vk::Fence fence;
          const vk::FenceCreateInfo info;
          if (vkd.createFence(&info, nullptr, &fence) != vk::Result::eSuccess) continue;
          if (q->submit({}, fence) != vk::Result::eSuccess) {
            vkd.destroyFence(fence);
            continue;
          }
          fences.emplace_back(vkd, fence);
        }
      }
    }
    for (auto [vkd, fence] : fences)
      if (vkd.getFenceStatus(fence) == vk::Result::eNotReady) return false;
    return true;
  }

  ~Held() override {
    cache.destroy(ctx);
    sync.reset();
    relay.reset();
    // A self-test kernel that did not see the host's write ends at its spin bound.
    if (relay_leftovers && !relay_leftovers->finished(std::chrono::seconds(2))) (void)relay_leftovers.release();
    relay_leftovers.reset();
    for (auto& c : ctx) {
      if (!c.device) continue;  // creation failed before this device was reached
      const vk::Device vkd = c.device->handle();
      if (c.transfer_pool && c.transfer_pool != c.compute_pool) vkd.destroyCommandPool(c.transfer_pool);
      if (c.compute_pool) vkd.destroyCommandPool(c.compute_pool);
    }
    ctx.clear();
    for (auto [vkd, fence] : fences) vkd.destroyFence(fence);
  }
};

}  // namespace tpar::inline v0::detail
