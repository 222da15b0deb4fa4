// Making a plan: the request a call schedules, the schedule checked against what the
// devices can bind, then its descriptor sets (one per slot set: the call's buffer, the
// device's slot and publish area or its host staging, the peers' host staging) and the
// per-device facts a call reads (its last compute batch, the batches that bind the set,
// the one queue it runs on, whether its parts split per device or wait on the host
// alone). Command buffers are recorded by the first call of each slot set (record_device).
#pragma once

#include <tpar/algo/request.hpp>
#include <tpar/comm/detail/comm_plan.hpp>
#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/core/detail/known_enum.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/options.hpp>
#include <tpar/sync/schedule.hpp>
#include <tpar/sync/schedule_split.hpp>
#include <tpar/vk/device_group.hpp>
#include <tpar/vk/kernels.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tpar::inline v0::detail {

// The request a call of `count` values (wire override, contributing mask) schedules on
// `group` with `options`, but for the relay's part (CommRelay::fill).
inline ScheduleRequest queue_request(const DeviceGroup& group, const Options& options, std::size_t count,
                                     std::optional<Wire> wire, std::uint32_t contributing) {
  if (wire) require_known(*wire, all_wires, "the wire asked for");
  const std::size_t n = group.size();
  ScheduleRequest rq;
  rq.devices = static_cast<std::uint32_t>(n);
  rq.count = count;
  rq.wire = wire.value_or(options.wire_for(count * sizeof(float)));
  rq.contributing = n >= 32 ? contributing : contributing & ((1u << n) - 1u);
  rq.ring.piece_elems = options.piece_bytes ? std::max(wire_block, options.piece_bytes / sizeof(float) / wire_block * wire_block) : 0;
  rq.ring.min_piece_wire_bytes = options.min_piece_wire_bytes;
  rq.ring.max_pieces = options.max_pieces;
  rq.ring.lanes = options.lanes;
  for (std::size_t d = 0; d < n; ++d) {
    const std::uint64_t range = group[d].capabilities().max_storage_buffer_range;
    rq.max_scratch_bytes = d ? std::min(rq.max_scratch_bytes, range) : range;
  }
  rq.ring.separate_downloads = options.downloads == DownloadQueue::separate;
  rq.by_size.choice = n == 1 ? AlgoChoice::oneshot : options.algo;
  rq.by_size.oneshot_max_bytes = options.oneshot_max_bytes;
  return rq;
}

// Throws Error(unsupported) where `schedule` needs a binding larger than a device
// allows (maxStorageBufferRange), with what would help.
inline void check_bindable(const DeviceGroup& group, const Schedule& built) {
  std::uint64_t scratch_need = 0;
  for (auto x : built.scratch_bytes) scratch_need = std::max(scratch_need, x);
  for (std::size_t d = 0; d < group.size(); ++d) {
    if (kernel_host_traffic(built.wire, built.devices[d]).to_host &&
        built.host_bytes[d] > group[d].capabilities().max_storage_buffer_range)
      throw Error(ErrorCode::unsupported,
                  std::string(built.algorithm) + " publishes " + std::to_string(built.host_bytes[d]) +
                      " bytes of host staging from a kernel, more than device " + std::to_string(d) +
                      " can bind (maxStorageBufferRange); use ChunkedRing (TPAR_ALGO=ring) for tensors this large");
    // Every other algorithm's scratch grows with the tensor, the ring's with its pieces
    // only; and the ring already took the most pieces and the fewest lanes that fit
    // (max_scratch_bytes), so only a smaller call helps it.
    if (scratch_need > group[d].capabilities().max_storage_buffer_range)
      throw Error(ErrorCode::unsupported,
                  std::string(built.algorithm) + " needs " + std::to_string(scratch_need) +
                      " bytes of scratch for this call, more than device " + std::to_string(d) +
                      " can bind (maxStorageBufferRange)" +
                      (built.scratch_per_piece ? " even with " + std::to_string(max_pieces_per_chunk) +
                                                     " pieces a chunk on one lane; reduce the tensor in smaller calls"
                                               : "; use ChunkedRing (TPAR_ALGO=ring) for tensors this large"));
  }
}

// Whether every batch of `plan` runs on its device's compute queue.
template <class Generation>
bool on_compute_queues(const DeviceGroup& group, const Plan<Generation>& plan) {
  for (std::size_t d = 0; d < group.size(); ++d)
    if (!plan.schedule.devices[d].batches.empty() && plan.sole_queue[d] != &group[d].compute_queue()) return false;
  return true;
}

template <class Generation>
std::unique_ptr<Plan<Generation>> make_plan(const DeviceGroup& group, std::vector<DeviceContext>& ctx,
                                            const std::shared_ptr<Generation>& generation, PlanKey key, Schedule schedule,
                                            std::uint32_t sets, RelayHub* relay_hub) {
  const std::size_t n = group.size();
  auto plan = std::make_unique<Plan<Generation>>();
  plan->key = std::move(key);
  plan->schedule = std::move(schedule);
  plan->generation = generation;
  plan->descriptor_pools.assign(n, nullptr);
  plan->descriptor_sets.assign(n, std::vector<vk::DescriptorSet>(sets));
  plan->submits.resize(n);
  for (auto& s : plan->submits) s.resize(sets);
  for (auto& use : plan->last_use) use.assign(n, 0);
  try {
    for (std::size_t d = 0; d < n; ++d) {
      const vk::Device vkd = group[d].handle();
      // One descriptor set per slot set: binding 0 (the call's buffer) is written by every call, and
      // a slot set's descriptor set is never in use then (its last call finished: wait_for_slot_set).
      const KernelSet& kernels = group[d].kernels();
      const std::uint32_t depth = sets;
      vk::DescriptorPoolSize pool_size(vk::DescriptorType::eStorageBuffer, kernel_storage_buffers * depth);
      vk::DescriptorPoolCreateInfo pool_info({}, depth, 1, &pool_size);
      if (kernels.update_after_bind()) pool_info.flags = vk::DescriptorPoolCreateFlagBits::eUpdateAfterBind;
      check(vkd.createDescriptorPool(&pool_info, nullptr, &plan->descriptor_pools[d]), "vkCreateDescriptorPool");
      const std::vector<vk::DescriptorSetLayout> layouts(depth, kernels.set_layout());
      vk::DescriptorSetAllocateInfo set_info(plan->descriptor_pools[d], depth, layouts.data());
      check(vkd.allocateDescriptorSets(&set_info, plan->descriptor_sets[d].data()), "vkAllocateDescriptorSets");
      // Binding 2: this device's own host staging for the slot set's call, where kernels
      // that publish write; plans that do not publish from a kernel get the scratch
      // there, as every binding must hold a valid buffer.
      // The scratch may have grown past what any plan addresses (Capacity's headroom),
      // beyond what one binding may span: bind at most maxStorageBufferRange of it.
      const vk::DeviceSize range_limit = group[d].capabilities().max_storage_buffer_range;
      const vk::DescriptorBufferInfo scratch(generation->scratch(d), 0,
                                             generation->scratch_bytes() > range_limit ? range_limit : VK_WHOLE_SIZE);
      const bool relay = takes_relay(plan->schedule);  // bindings 1 and 2: the device's slot and publish area
      const HostTraffic traffic = kernel_host_traffic(plan->schedule.wire, plan->schedule.devices[d]);
      const bool publishes = traffic.to_host > 0 && n > 1;
      const std::uint64_t host_range = std::max<std::uint64_t>(plan->schedule.host_bytes[d], 4);
      const bool reads_peers = traffic.from_host > 0;
      for (std::uint32_t slot_set = 0; slot_set < depth; ++slot_set) {
        const vk::DescriptorBufferInfo host =
            relay       ? relay_hub->publish(d, slot_set)
            : publishes ? vk::DescriptorBufferInfo(generation->host_buffer(d, d), generation->slot_offset(slot_set), host_range)
                        : scratch;
        const vk::DescriptorBufferInfo second = relay ? relay_hub->slot(d, slot_set) : scratch;
        // Binding 3: the peers' host staging for this slot set, for kernels that read it in
        // place (OneShot's direct sum); the scratch stands in for every other entry.
        std::array<vk::DescriptorBufferInfo, max_direct_peers> peers;
        for (std::uint32_t j = 0; j < max_direct_peers; ++j) {
          const bool peer = reads_peers && j < n && j != d && plan->schedule.host_bytes[j] > 0;
          peers[j] = peer ? vk::DescriptorBufferInfo(generation->host_buffer(d, j), generation->slot_offset(slot_set),
                                                     plan->schedule.host_bytes[j])
                          : scratch;
        }
        const std::array<vk::WriteDescriptorSet, 3> writes{
            vk::WriteDescriptorSet(plan->descriptor_sets[d][slot_set], 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &second),
            vk::WriteDescriptorSet(plan->descriptor_sets[d][slot_set], 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host),
            vk::WriteDescriptorSet(plan->descriptor_sets[d][slot_set], 3, 0, max_direct_peers, vk::DescriptorType::eStorageBuffer,
                                   nullptr, peers.data())};
        vkd.updateDescriptorSets(static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
      }
    }
  } catch (...) {
    plan->destroy(ctx);
    throw;
  }
  plan->final_compute.assign(n, ~0u);
  plan->kernel_batches.assign(n, {});
  plan->sole_queue.assign(n, nullptr);
  plan->role_counts.assign(n, {});
  for (std::size_t d = 0; d < n; ++d) {
    const auto& batches = plan->schedule.devices[d].batches;
    for (std::size_t r = 0; r < role_count; ++r) plan->role_counts[d][r] = plan->schedule.devices[d].count(static_cast<Role>(r));
    auto& c = ctx[d];
    auto queue_for = [&](const Batch& b) -> const Queue* { return &c.queue(c.merged ? Role::compute : queue_of(b)); };
    if (!batches.empty() && std::all_of(batches.begin(), batches.end(), [&](const Batch& b) { return queue_for(b) == queue_for(batches[0]); }))
      plan->sole_queue[d] = queue_for(batches[0]);
    std::uint32_t k = 0;
    for (std::size_t b = 0; b < batches.size(); ++b) {
      if (batches[b].role == Role::compute) plan->final_compute[d] = k++;
      if (binds_caller_buffer(batches[b])) plan->kernel_batches[d].push_back(static_cast<std::uint32_t>(b));
    }
  }
  // The relay's thread serves a call once all of it is on the queues: never split.
  plan->per_device = !takes_relay(plan->schedule) && on_compute_queues(group, *plan) && splits_per_device(plan->schedule);
  plan->waits_on_host_only = waits_on_host_only(plan->schedule);
  return plan;
}

}  // namespace tpar::inline v0::detail
