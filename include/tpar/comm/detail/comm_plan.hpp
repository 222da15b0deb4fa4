// A recorded plan: one schedule's batches as command buffers on every device, per slot
// set, with the submit structures prebuilt so a call only writes timeline
// values into them: no allocation and no recording on the hot path. A plan is not tied
// to the caller's buffers: each call writes its buffer into the slot set's descriptor set
// (a destroyed buffer's handle may come back as a new buffer, so no handle can key a
// plan). Where the device has update-after-bind, that write leaves the recorded command
// buffers valid; elsewhere the batches that bind the set are recorded again.
#pragma once

#include <tpar/core/buffer_span.hpp>
#include <tpar/core/timeline_point.hpp>
#include <tpar/sync/schedule.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <array>
#include <memory>
#include <utility>
#include <span>
#include <vector>

namespace tpar::inline v0::detail {

struct PlanKey {
  std::size_t count = 0;
  Wire wire = Wire::f32;
  std::uint32_t contributing = 0;
  bool relay_automatic = false;  // the automatic choice could take the relay (streamed calls)
  bool operator==(const PlanKey&) const = default;
};

// Per device: its compute, transfer and download timelines, its abort timeline, and its
// command pools.
struct DeviceContext {
  Device* device = nullptr;
  Timeline compute, transfer, download;
  // NativeImport: a twin of `transfer`, exported to the peers and signalled with the same
  // values by every upload. tpar itself never waits on it: once exported, a semaphore's
  // signals can come from anywhere, so tools (and readers) cannot follow it; the internal
  // timeline stays what retirement and host waits use.
  Timeline shared;
  // Signalled (to 1) by Communicator::abort alone: every host wait on the device's work
  // waits on it too, and ends when it is (detail::wait_or_abort).
  Timeline abort;
  vk::CommandPool compute_pool, transfer_pool;  // equal when both queues share a family
  bool merged = false;                          // one queue does every role
  std::uint64_t submitted[role_count] = {};     // last value given to a batch, by Role
  std::uint64_t queued[role_count] = {};        // last value handed to the queues (deferred calls aside)
  // The one queue every batch of the last call ran on (null: several, or no call yet,
  // when the waits are on value 0 and cost one call's worth): then a call whose batches
  // all run there too orders itself after it by submission order, with no wait on this
  // device's own timelines.
  const Queue* sole_queue = nullptr;
  std::uint64_t completed[role_count] = {};     // last value seen reached (a cache)

  // Downloads run on the second transfer queue, or the transfer queue where the device
  // has none (then sharing its copy engine with the uploads).
  Queue& queue(Role r) {
    if (r == Role::compute) return device->compute_queue();
    if (r == Role::download && device->second_transfer_queue()) return *device->second_transfer_queue();
    return device->transfer_queue();
  }
  Timeline& timeline(Role r) { return r == Role::compute ? compute : r == Role::transfer ? transfer : download; }
  const Timeline& timeline(Role r) const { return r == Role::compute ? compute : r == Role::transfer ? transfer : download; }
  vk::CommandPool pool(Role r) const { return r == Role::compute ? compute_pool : transfer_pool; }
  // The distinct queues its batches were submitted to, into `out`: the compute queue and the
  // transfer queue, and the download queue where a download ran there; one where merged.
  std::span<Queue*> used_queues(Queue* (&out)[role_count]) {
    out[0] = &device->compute_queue();
    out[1] = &device->transfer_queue();
    out[2] = &queue(Role::download);
    return std::span(out, merged ? 1 : submitted[2] && out[2] != out[1] ? 3 : 2);
  }
};

struct WaitRule {
  // relay: the relay's host-signalled semaphore for this device, at the call's number.
  enum class Kind : std::uint8_t { ready, previous_call, previous_compute, batch, relay };
  Kind kind = Kind::batch;
  BatchRef ref;
  vk::Semaphore semaphore;  // all but `ready` (the caller's point, or the compute timeline)
  // On one of this device's own timelines: not needed where every batch involved runs on
  // the batch's own queue (submission order and the batch's leading barrier order it).
  bool own = false;
};

// Where one device's batches of a call stand, what its wait rules resolve against.
struct WaitSite {
  const DeviceContext& device;                   // the device's, as before this call
  const std::vector<DeviceContext>& devices;     // every device's (a batch rule names its device)
  const TimelinePoint* ready = nullptr;          // the caller's ready point on the device, if it gave one
  bool own_ordered = false;  // this call and the last run all their batches here on one queue, the same
  bool sole = false;         // this call runs all its batches here on one queue
  std::uint64_t relay_call = 0;  // the relay's number for this call (0: not a relay call)
};

// The semaphore and value `rule` waits on for this call; a value of 0 is no wait: the
// wait is ordered already, or a timeline starts at 0 and nothing is to wait for (a first
// call). `queue_ordered`: the caller's ready point is in the compute queue's order and
// the batch runs there.
inline std::pair<vk::Semaphore, std::uint64_t> resolve_wait(const WaitRule& rule, const WaitSite& at, bool queue_ordered) {
  const DeviceContext& c = at.device;
  switch (rule.kind) {
    case WaitRule::Kind::ready:
      if (queue_ordered) return {};
      if (at.ready) return {at.ready->semaphore, at.ready->value};
      if (at.own_ordered) return {};
      return {c.compute.handle(), c.submitted[0]};
    case WaitRule::Kind::previous_call:
      if (at.own_ordered) return {};
      return {rule.semaphore, c.submitted[1]};
    case WaitRule::Kind::previous_compute:
      if (at.own_ordered) return {};
      return {rule.semaphore, c.submitted[0]};
    case WaitRule::Kind::batch:
      if (rule.own && at.sole) return {};  // an earlier batch of this call, on the same queue
      return {rule.semaphore, at.devices[rule.ref.device].submitted[static_cast<int>(rule.ref.role)] + rule.ref.index + 1};
    case WaitRule::Kind::relay:
      return {rule.semaphore, at.relay_call};
  }
  return {};
}

// Everything one device submits for one plan and slot set.
struct DeviceSubmit {
  struct Group {
    Role role = Role::compute;  // the queue (merged: compute): ctx.queue(role)
    std::vector<vk::SubmitInfo> infos;
    std::vector<vk::TimelineSemaphoreSubmitInfo> timeline_infos;
  };
  std::vector<vk::CommandBuffer> command_buffers;  // by batch
  std::vector<Group> groups;
  std::vector<vk::Semaphore> wait_semaphores;
  std::vector<vk::PipelineStageFlags> wait_stages;
  std::vector<std::uint64_t> wait_values;
  std::vector<WaitRule> wait_rules;
  // Per batch: its rules, wait_rules[first, first + count), and the submit structures whose
  // wait counts each call sets (the waits a call needs are packed at the front).
  struct BatchWaits {
    std::uint32_t first = 0, count = 0;
    vk::SubmitInfo* info = nullptr;
    vk::TimelineSemaphoreSubmitInfo* timeline_info = nullptr;
  };
  std::vector<BatchWaits> batch_waits;
  std::vector<vk::Semaphore> signal_semaphores;
  std::vector<std::uint64_t> signal_values;
  std::vector<std::pair<Role, std::uint32_t>> signal_rules;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> expects;  // (source device, transfer index), in order
  std::uint64_t transfer_base = 0;  // the device's uploads timeline before this plan and slot set's latest call
  vk::QueryPool timestamps;  // profiling: start and end of every batch
  bool recorded = false;
};

template <class Generation>
struct Plan {
  PlanKey key;
  Schedule schedule;
  std::shared_ptr<Generation> generation;
  std::vector<vk::DescriptorPool> descriptor_pools;  // by device
  std::vector<std::vector<vk::DescriptorSet>> descriptor_sets;  // [device][slot_set]: binding 0 is the call's buffer
  std::vector<std::vector<DeviceSubmit>> submits;    // [device][slot_set]
  std::vector<std::uint32_t> final_compute;          // by device: index of its last compute batch (or ~0)
  std::vector<std::array<std::uint32_t, role_count>> role_counts;  // by device: its batches of each role
  std::vector<std::vector<std::uint32_t>> kernel_batches;  // by device: the batches that bind the descriptor set
  std::vector<const Queue*> sole_queue;  // by device: the one queue all its batches run on, or null
  // Every device's batches on its compute queue, and no device waiting on a peer's batch
  // that comes after that peer's first waiting batch: then each device's part can be
  // handed to a thread of its own (StreamAllreduce::allreduce_split), not the relay's.
  bool per_device = false;
  // No batch waits on another device's batch (the relay's wait on its host thread, or on
  // nothing): every device's part may be held back and submitted with the others' later
  // (StreamAllreduce, Options::stream_hold).
  bool waits_on_host_only = false;
  std::vector<std::uint64_t> last_use[role_count];   // by role, by device: values after its last call

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  void destroy(std::vector<DeviceContext>& ctx) {
    for (std::size_t d = 0; d < ctx.size(); ++d) {
      const vk::Device dev = ctx[d].device->handle();
      for (auto& sub : submits[d]) {
        if (sub.timestamps) dev.destroyQueryPool(sub.timestamps);
        if (sub.command_buffers.empty()) continue;
        const auto& batches = schedule.devices[d].batches;
        for (std::size_t b = 0; b < batches.size(); ++b)
          if (sub.command_buffers[b]) {
            Trace::instance().unlabel(sub.command_buffers[b]);
            dev.freeCommandBuffers(ctx[d].pool(queue_of(batches[b])), 1, &sub.command_buffers[b]);
          }
      }
      if (descriptor_pools[d]) dev.destroyDescriptorPool(descriptor_pools[d]);
    }
    submits.clear();
    descriptor_pools.clear();
  }
};

// Does `batch` run kernels, i.e. bind the descriptor set that holds the caller's buffer?
inline bool binds_caller_buffer(const Batch& batch) {
  return std::any_of(batch.commands.begin(), batch.commands.end(), [](const Command& c) { return c.type == Command::Type::kernel; });
}

// Records batch `b` of `plan` for device `d` and `slot_set` into its command buffer
// (allocated on first use, reset and recorded again after that).
template <class Generation>
void record_batch(Plan<Generation>& plan, std::size_t d, std::uint32_t slot_set, std::size_t b, std::vector<DeviceContext>& ctx) {
  DeviceContext& c = ctx[d];
  Device& dev = *c.device;
  const vk::Device vkd = dev.handle();
  const Generation& gen = *plan.generation;
  const Batch& batch = plan.schedule.devices[d].batches[b];
  DeviceSubmit& sub = plan.submits[d][slot_set];
  KernelSet& kernels = dev.kernels();
  const Wire wire = plan.schedule.wire;

  auto buffer_of = [&](const Region& r) -> std::pair<vk::Buffer, vk::DeviceSize> {
    if (r.kind == Region::Kind::scratch) return {gen.scratch(d), r.offset};
    return {gen.host_buffer(d, r.host_owner), gen.slot_offset(slot_set) + r.offset};
  };
  auto has_timestamps = [&](Role r) {
    return dev.capabilities().queue_families[c.queue(r).family()].timestampValidBits > 0;
  };

  const Role queue = queue_of(batch);
  if (!sub.command_buffers[b]) {
    vk::CommandBufferAllocateInfo ai(c.pool(queue), vk::CommandBufferLevel::ePrimary, 1);
    check(vkd.allocateCommandBuffers(&ai, &sub.command_buffers[b]), "vkAllocateCommandBuffers");
  } else {
    check(VULKAN_HPP_DEFAULT_DISPATCHER.vkResetCommandBuffer(sub.command_buffers[b], 0), "vkResetCommandBuffer");
  }
  vk::CommandBuffer cb = sub.command_buffers[b];
  vk::CommandBufferBeginInfo begin;
  check(cb.begin(&begin), "vkBeginCommandBuffer");
  const bool compute = queue == Role::compute;
  const vk::PipelineStageFlags stages =
      compute ? vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer
              : vk::PipelineStageFlags(vk::PipelineStageFlagBits::eTransfer);
  const vk::AccessFlags writes = compute ? vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite
                                         : vk::AccessFlags(vk::AccessFlagBits::eTransferWrite);
  const vk::AccessFlags all = writes | (compute ? vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eTransferRead
                                                : vk::AccessFlags(vk::AccessFlagBits::eTransferRead));
  // Whatever ran before on this queue (an earlier batch, an earlier call) is done with
  // the memory this batch touches.
  const vk::MemoryBarrier full(writes, all);
  const bool stamp = sub.timestamps && has_timestamps(queue);
  const auto q = static_cast<std::uint32_t>(2 * b);
  if (stamp) {
    cb.resetQueryPool(sub.timestamps, q, 2);
    cb.writeTimestamp(vk::PipelineStageFlagBits::eTopOfPipe, sub.timestamps, q);
  }
  cb.pipelineBarrier(stages, stages, {}, 1, &full, 0, nullptr, 0, nullptr);
  bool bound = false;
  for (const Command& cmd : batch.commands) {
    switch (cmd.type) {
      case Command::Type::copy: {
        if (!cmd.bytes) break;
        const auto [src, src_off] = buffer_of(cmd.src);
        const auto [dst, dst_off] = buffer_of(cmd.dst);
        const vk::BufferCopy region(src_off, dst_off, cmd.bytes);
        cb.copyBuffer(src, dst, 1, &region);
        break;
      }
      case Command::Type::barrier:
        cb.pipelineBarrier(stages, stages, {}, 1, &full, 0, nullptr, 0, nullptr);
        break;
      case Command::Type::host_barrier: {
        const vk::MemoryBarrier to_host(writes, vk::AccessFlagBits::eHostRead);
        cb.pipelineBarrier(stages, vk::PipelineStageFlagBits::eHost, {}, 1, &to_host, 0, nullptr, 0, nullptr);
        break;
      }
      case Command::Type::kernel: {
        cb.bindPipeline(vk::PipelineBindPoint::eCompute, kernels.pipeline(cmd.kernel, wire));
        if (!bound) {
          cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, kernels.layout(), 0, 1, &plan.descriptor_sets[d][slot_set], 0, nullptr);
          bound = true;
        }
        cb.pushConstants(kernels.layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof(KernelArgs), &cmd.args);
        cb.dispatch(kernel_groups(cmd.kernel, cmd.args.count, dev.capabilities().max_workgroups_x), 1, 1);
        break;
      }
    }
  }
  // The device's last batch on its compute queue makes the call's writes available to
  // whatever follows on that queue: a host that submits its next work there after the
  // call (tpar::Stream, AllreduceArgs::ready_on_compute_queue) needs no semaphore wait.
  const auto& device_batches = plan.schedule.devices[d].batches;
  const bool last_on_compute = (c.merged || queue == Role::compute) &&
                               std::none_of(device_batches.begin() + static_cast<std::ptrdiff_t>(b) + 1, device_batches.end(),
                                            [&](const Batch& later) { return c.merged || queue_of(later) == Role::compute; });
  if (last_on_compute) {
    const vk::MemoryBarrier release(writes, vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite);
    cb.pipelineBarrier(stages, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &release, 0, nullptr, 0, nullptr);
  }
  if (stamp) cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, sub.timestamps, q + 1);
  check(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb), "vkEndCommandBuffer");
  if (Trace::instance().enabled())
    Trace::instance().label(cb, "tpar " + std::string(plan.schedule.algorithm) + " " + std::string(to_string(batch.role)) +
                                    (batch.waits.empty() ? "" : " (waits on peers)"));
}

// Records `plan`'s batches of device `d` for `slot_set` into command buffers and builds
// their submit structures. `peer_semaphore(src)`: what device d waits on for src's uploads;
// `relay`: what it waits on for the relay's sum (batches with wait_relay).
template <class Generation, class PeerSemaphore>
void record_device(Plan<Generation>& plan, std::size_t d, std::uint32_t slot_set, std::vector<DeviceContext>& ctx,
                   bool profile, PeerSemaphore&& peer_semaphore, vk::Semaphore relay = {}) {
  DeviceContext& c = ctx[d];
  const vk::Device vkd = c.device->handle();
  const auto& batches = plan.schedule.devices[d].batches;
  DeviceSubmit& sub = plan.submits[d][slot_set];

  sub.command_buffers.assign(batches.size(), nullptr);
  if (profile && !batches.empty()) {
    vk::QueryPoolCreateInfo qi({}, vk::QueryType::eTimestamp, static_cast<std::uint32_t>(2 * batches.size()));
    check(vkd.createQueryPool(&qi, nullptr, &sub.timestamps), "vkCreateQueryPool");
  }
  for (std::size_t b = 0; b < batches.size(); ++b) record_batch(plan, d, slot_set, b, ctx);

  // Submit structures: count first, so the vectors never reallocate under the pointers.
  std::size_t waits = 0;
  for (const Batch& b : batches)
    waits += b.waits.size() + b.wait_ready + b.wait_previous_call + b.wait_previous_compute + b.wait_relay;
  sub.wait_semaphores.assign(waits, nullptr);
  sub.wait_stages.assign(waits, vk::PipelineStageFlagBits::eAllCommands);
  sub.wait_values.assign(waits, 0);
  sub.wait_rules.assign(waits, {});
  // Two signal slots per batch: its timeline, and for uploads the exported twin.
  sub.signal_semaphores.assign(2 * batches.size(), nullptr);
  sub.signal_values.assign(2 * batches.size(), 0);
  sub.signal_rules.assign(2 * batches.size(), {});
  // One group (one vkQueueSubmit) per queue the batches use, in schedule order within it.
  sub.groups.clear();
  std::vector<std::size_t> group_of(batches.size());
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const Role r = c.merged ? Role::compute : queue_of(batches[b]);
    std::size_t g = 0;
    while (g < sub.groups.size() && &c.queue(sub.groups[g].role) != &c.queue(r)) ++g;
    if (g == sub.groups.size()) sub.groups.emplace_back().role = r;
    group_of[b] = g;
  }
  for (std::size_t g = 0; g < sub.groups.size(); ++g) {
    const auto k = static_cast<std::size_t>(std::count(group_of.begin(), group_of.end(), g));
    sub.groups[g].infos.resize(k);
    sub.groups[g].timeline_infos.resize(k);
  }
  sub.expects.clear();
  sub.batch_waits.assign(batches.size(), {});
  std::uint32_t role_index[role_count] = {};
  std::size_t w = 0;
  std::vector<std::size_t> next_in_group(sub.groups.size(), 0);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const Batch& batch = batches[b];
    const std::size_t first_wait = w;
    if (batch.wait_ready) sub.wait_rules[w++] = {WaitRule::Kind::ready, {}, nullptr, true};
    if (batch.wait_previous_call) sub.wait_rules[w++] = {WaitRule::Kind::previous_call, {}, c.transfer.handle(), true};
    if (batch.wait_previous_compute) sub.wait_rules[w++] = {WaitRule::Kind::previous_compute, {}, c.compute.handle(), true};
    if (batch.wait_relay) {
      if (!relay) throw Error(ErrorCode::failed, "a relay batch was recorded without the relay's semaphore");
      sub.wait_rules[w++] = {WaitRule::Kind::relay, {}, relay, false};
    }
    for (const BatchRef& ref : batch.waits) {
      if (ref.device == d) {
        sub.wait_rules[w++] = {WaitRule::Kind::batch, ref, c.timeline(ref.role).handle(), true};
      } else {
        sub.wait_rules[w++] = {WaitRule::Kind::batch, ref, peer_semaphore(ref.device), false};
        sub.expects.emplace_back(ref.device, ref.index);
      }
    }
    for (std::size_t k = first_wait; k < w; ++k) sub.wait_semaphores[k] = sub.wait_rules[k].semaphore;
    const int r = static_cast<int>(batch.role);
    const bool twin = batch.role == Role::transfer && c.shared.handle();
    sub.signal_semaphores[2 * b] = c.timeline(batch.role).handle();
    sub.signal_rules[2 * b] = {batch.role, role_index[r]};
    if (twin) {
      sub.signal_semaphores[2 * b + 1] = c.shared.handle();
      sub.signal_rules[2 * b + 1] = {batch.role, role_index[r]};
    }
    ++role_index[r];
    const std::size_t gi = group_of[b];
    auto& group = sub.groups[gi];
    const std::size_t k = next_in_group[gi]++;
    auto& ti = group.timeline_infos[k];
    ti.waitSemaphoreValueCount = static_cast<std::uint32_t>(w - first_wait);
    ti.pWaitSemaphoreValues = sub.wait_values.data() + first_wait;
    ti.signalSemaphoreValueCount = twin ? 2 : 1;
    ti.pSignalSemaphoreValues = &sub.signal_values[2 * b];
    auto& info = group.infos[k];
    info.pNext = &ti;
    info.waitSemaphoreCount = static_cast<std::uint32_t>(w - first_wait);
    info.pWaitSemaphores = sub.wait_semaphores.data() + first_wait;
    info.pWaitDstStageMask = sub.wait_stages.data() + first_wait;
    info.commandBufferCount = 1;
    info.pCommandBuffers = &sub.command_buffers[b];
    info.signalSemaphoreCount = twin ? 2 : 1;
    info.pSignalSemaphores = &sub.signal_semaphores[2 * b];
    sub.batch_waits[b] = {static_cast<std::uint32_t>(first_wait), static_cast<std::uint32_t>(w - first_wait), &info, &ti};
  }
  sub.recorded = true;
}

// Device d's part of a call in slot set `slot_set` of `plan`: the call's buffer into the
// set, then (re)record what that needs: the descriptor update comes first, as without
// update-after-bind it invalidates the command buffers that bound the set. (The rest as
// record_device.)
template <class Generation, class PeerSemaphore>
void prepare_call(Plan<Generation>& plan, std::size_t d, std::uint32_t slot_set, const BufferSpan& span,
                  std::vector<DeviceContext>& ctx, bool profile, PeerSemaphore&& peer_semaphore, vk::Semaphore relay) {
  Device& dev = *ctx[d].device;
  const vk::DescriptorBufferInfo user(span.buffer, span.offset, span.bytes());
  const vk::WriteDescriptorSet write(plan.descriptor_sets[d][slot_set], 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &user);
  dev.handle().updateDescriptorSets(1, &write, 0, nullptr);
  if (!plan.submits[d][slot_set].recorded) {
    record_device(plan, d, slot_set, ctx, profile, std::forward<PeerSemaphore>(peer_semaphore), relay);
  } else if (!dev.kernels().update_after_bind()) {
    for (const std::uint32_t b : plan.kernel_batches[d]) record_batch(plan, d, slot_set, b, ctx);
  }
}

}  // namespace tpar::inline v0::detail
