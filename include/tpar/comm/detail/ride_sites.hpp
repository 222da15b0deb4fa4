// Riding: a relay call's kernel recorded into a command buffer of the host's (the one the
// host submits next on the device's compute queue), so that the call ends no command
// buffer of its own (docs/design/relay-ride.md). A command buffer recorded once and
// submitted again for later calls (ggml-vulkan's replay) cannot carry a call's slot set:
// it holds a *site*, a descriptor set that binds the caller's buffer and every slot set's
// slot and publish area at once, and a word in the device's slot memory from which the
// kernel reads the slot set of the call it serves (shaders/relay.glsl, mode SITE). Before
// each submission of the host's command buffer the host side writes that word: the slot
// set of the call, once the site's previous call finished on the device.
#pragma once

#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/comm/detail/relay_protocol.hpp>
#include <tpar/core/buffer_span.hpp>
#include <tpar/core/error.hpp>
#include <tpar/vk/device.hpp>
#include <tpar/vk/kernels.hpp>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <vector>

namespace tpar::inline v0::detail {

// Device d's part of a relay call as a ride records it: one kernel.
struct RideCall {
  vk::Pipeline pipeline;
  vk::DescriptorSet set;  // the call's slot set's descriptor set (a ride recorded once)
  KernelArgs args;
  std::uint32_t groups = 0;
  BufferSpan span;              // the caller's span on this device
  std::uint32_t slot_set = 0;   // the call's slot set
  std::uint64_t done = 0;       // the device's compute timeline value once the call is done
};

// Barrier, the kernel, barrier: ordered after whatever the queue ran before (the partial
// sums the host wrote) and before the compute and transfer commands the host records
// after it (reading the sum). The second barrier names those stages and accesses only:
// on NVIDIA's driver (580) one to ALL_COMMANDS with MEMORY_READ | MEMORY_WRITE access
// cost the GPU about 4 us more after the kernel, at every boundary of a decode token
// (docs/design/boundary-parts.md section 5). A host that reads the sum otherwise (on the
// CPU, say) orders that itself, as it would after any of its own compute work.
// `ordered`: the host vouches that everything before this point is already ordered before
// it (its command buffer has nothing recorded yet, and the queue's previous command buffer
// ended with a barrier over compute and transfer writes), so the first barrier is left
// out: on NVIDIA's driver a barrier before a command buffer's first dispatch costs the
// GPU about 3 us more than one at the end of the command buffer before
// (docs/design/barrier-at-the-end.md).
// `beside`: where given, the host's own commands recorded between the kernel and the
// second barrier, so they run while the kernel waits for the sum (RideBeside).
inline void record_ride_commands(vk::CommandBuffer cb, vk::PipelineLayout layout, vk::Pipeline pipeline,
                                 vk::DescriptorSet set, const KernelArgs& args, std::uint32_t groups, bool ordered = false,
                                 const RideBeside& beside = {}) {
  using S = vk::PipelineStageFlagBits;
  using A = vk::AccessFlagBits;
  const vk::PipelineStageFlags stages = S::eComputeShader | S::eTransfer;
  const vk::MemoryBarrier before(A::eShaderWrite | A::eTransferWrite,
                                 A::eShaderRead | A::eShaderWrite | A::eTransferRead | A::eTransferWrite);
  if (!ordered) cb.pipelineBarrier(stages, stages, {}, 1, &before, 0, nullptr, 0, nullptr);
  cb.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline);
  cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, layout, 0, 1, &set, 0, nullptr);
  cb.pushConstants(layout, vk::ShaderStageFlagBits::eCompute, 0, sizeof(KernelArgs), &args);
  cb.dispatch(groups, 1, 1);
  if (beside) beside(cb);
  const vk::MemoryBarrier after(A::eShaderWrite, A::eShaderRead | A::eShaderWrite | A::eTransferRead | A::eTransferWrite);
  cb.pipelineBarrier(S::eComputeShader, stages, {}, 1, &after, 0, nullptr, 0, nullptr);
}

// One device's sites. `reached(value)`: whether the device's compute timeline reached
// `value` (never blocks: a ride is on the host's path while it records, and the work a
// wait would need may be in the host's hands; a site not yet free is not used).
class RideSites {
 public:
  using Reached = std::function<bool(std::uint64_t)>;

  RideSites(Device& device, const RelayHub& hub, std::size_t d, Reached reached)
      : device_(device), hub_(hub), d_(d), reached_(std::move(reached)) {
    const std::uint32_t capacity = hub_.sites();
    const KernelSet& kernels = device_.kernels();
    // bindings 0-2 are written; binding 3 (peers) is not in the relay's shader
    vk::DescriptorPoolSize size(vk::DescriptorType::eStorageBuffer, kernel_storage_buffers * capacity);
    vk::DescriptorPoolCreateInfo info({}, capacity, 1, &size);
    if (kernels.update_after_bind()) info.flags = vk::DescriptorPoolCreateFlagBits::eUpdateAfterBind;
    check(device_.handle().createDescriptorPool(&info, nullptr, &pool_), "vkCreateDescriptorPool");
    sites_.resize(capacity);
    for (std::uint32_t s = capacity; s-- > 0;) free_.push_back(s);
  }
  RideSites(const RideSites&) = delete;
  RideSites& operator=(const RideSites&) = delete;
  ~RideSites() {
    if (pool_) device_.handle().destroyDescriptorPool(pool_);
  }

  std::size_t in_use() const { return sites_.size() - free_.size(); }

  // A new site for `call`, recorded into `cb` and serving the call: its id, or 0 where
  // no site is free (nothing recorded then). A forgotten site is free once the last call
  // it served is done (the host frees its command buffers at an idle GPU; this makes sure).
  std::uint64_t make(vk::CommandBuffer cb, const RideCall& call, bool ordered = false, const RideBeside& beside = {}) {
    std::size_t k = free_.size();
    while (k > 0 && sites_[free_[k - 1]].done && !reached_(sites_[free_[k - 1]].done)) --k;
    if (k == 0) return 0;
    std::swap(free_[k - 1], free_.back());
    const std::uint32_t s = free_.back();
    Site& site = sites_[s];
    if (!site.set) {
      const vk::DescriptorSetLayout layout = device_.kernels().set_layout();
      vk::DescriptorSetAllocateInfo ai(pool_, 1, &layout);
      check(device_.handle().allocateDescriptorSets(&ai, &site.set), "vkAllocateDescriptorSets");
    }
    const vk::DescriptorBufferInfo user(call.span.buffer, call.span.offset, call.span.bytes());
    const vk::DescriptorBufferInfo slots = hub_.all_slots(d_), publish = hub_.all_publish(d_);
    const std::array<vk::WriteDescriptorSet, 3> writes{
        vk::WriteDescriptorSet(site.set, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &user),
        vk::WriteDescriptorSet(site.set, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &slots),
        vk::WriteDescriptorSet(site.set, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &publish)};
    device_.handle().updateDescriptorSets(static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
    KernelArgs args = call.args;
    args.mode |= relay_mode::site;
    args.in_off = hub_.site_word_index(s);
    args.seg_words = hub_.slot_set_words();
    args.out_off = hub_.publish_set_units();
    record_ride_commands(cb, device_.kernels().layout(), call.pipeline, site.set, args, call.groups, ordered, beside);
    free_.pop_back();
    site.id = ((serial_.fetch_add(1, std::memory_order_relaxed) + 1) << 16) | s;
    site.buffer = call.span.buffer;
    site.offset = call.span.offset;
    site.count = call.span.count;
    site.mode = call.args.mode;
    point(site, s, call);
    return site.id;
  }

  // The site `id` to serve `call` in a command buffer submitted again: false (nothing
  // changed) where this device has no such site, it was made for another buffer, size or
  // mode, or the call it served last is not done yet.
  bool bind(std::uint64_t id, const RideCall& call) {
    Site* site = find(id);
    // (the pipeline and the dispatch's size follow from the device and the count)
    if (!site || site->buffer != call.span.buffer || site->offset != call.span.offset || site->count != call.span.count ||
        site->mode != call.args.mode)
      return false;
    if (site->done && !reached_(site->done)) return false;
    point(*site, static_cast<std::uint32_t>(id & 0xFFFF), call);
    return true;
  }

  // The host freed the command buffers that held site `id` (unknown ids are ignored).
  void forget(std::uint64_t id) {
    Site* site = find(id);
    if (!site) return;
    site->id = 0;
    free_.push_back(static_cast<std::uint32_t>(id & 0xFFFF));
  }

 private:
  struct Site {
    std::uint64_t id = 0;  // 0: free
    vk::DescriptorSet set;
    vk::Buffer buffer;
    vk::DeviceSize offset = 0;
    std::size_t count = 0;
    std::uint32_t mode = 0;
    std::uint64_t done = 0;  // the compute timeline value once its last call is done
  };

  Site* find(std::uint64_t id) {
    const std::size_t s = id & 0xFFFF;
    return id && s < sites_.size() && sites_[s].id == id ? &sites_[s] : nullptr;
  }

  // The site's word names the call's slot set (the kernel that read it last is done).
  void point(Site& site, std::uint32_t s, const RideCall& call) {
    relay_store_word(hub_.site_word(d_, s), call.slot_set);
    relay_store_fence();
    site.done = call.done;
  }

  Device& device_;
  const RelayHub& hub_;
  std::size_t d_;
  Reached reached_;
  vk::DescriptorPool pool_;
  std::vector<Site> sites_;
  std::vector<std::uint32_t> free_;
  // Process-wide, so that a command buffer recorded with another communicator's site (or
  // one since destroyed) never matches a site of this one.
  static inline std::atomic<std::uint64_t> serial_{0};
};

}  // namespace tpar::inline v0::detail
