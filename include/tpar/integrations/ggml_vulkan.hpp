// ggml-vulkan's side of the comm hook: the state ggml-vulkan keeps for tpar, so that the
// patch to ggml-vulkan (examples/llama.cpp/) only wires ggml-vulkan's structures to it.
// tpar includes no ggml header; the patch includes this one.
//
// Ordering, the one thing the patch must get right: tpar's AllReduce runs on the
// backend's own compute queue, after a "ready" point and before a "done" point.
//   - ready: every submission ggml-vulkan makes to a queue signals that queue's timeline
//     (QueueLink::begin_submit().signal()); the last value is what tpar waits for.
//   - done: the first submission after the AllReduce, on every queue of the device, waits
//     for tpar's done point (begin_submit().wait()); later submissions on that queue follow
//     it by submission order (a semaphore wait covers everything later on its queue).
//   - the host: ggml-vulkan's synchronize waits for the last done point too
//     (QueueLink::wait_host), since a subgraph with nothing to compute on a device
//     submits nothing that could carry the wait.
//
//   // in ggml_vk_submit, around the vkQueueSubmit:
//   auto scope = queue_handle.tpar.begin_submit();
//   if (scope.wait()) first_submission.waits.push_back(scope.wait());
//   last_submission.signals.push_back(scope.signal());
//   queue_handle.submit(...);   // throws on failure: the scope then gives its values back
//   scope.commit();
#pragma once

#include <tpar/integrations/ggml.hpp>
#include <tpar/sync/timeline.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0::ggml_vulkan {

// What one VkQueue of ggml-vulkan keeps for tpar. ggml-vulkan aliases one queue as both
// compute and transfer queue on devices with a single queue: keep the link with the
// VkQueue (ggml-vulkan's vk_queue_handle), not with the role, so the alias shares it.
class QueueLink {
 public:
  QueueLink() = default;
  QueueLink(const QueueLink&) = delete;
  QueueLink& operator=(const QueueLink&) = delete;

  // Creates the queue's timeline. Call once, after the VkDevice exists; without it the
  // link does nothing (a submission neither waits nor signals).
  void init(vk::Device device) {
    std::lock_guard lock(mutex_);
    if (!timeline_.handle()) timeline_ = Timeline(device);
  }

  // One submission to the queue, between begin_submit() and commit(): holds the link so
  // that the signal values reach the queue in increasing order whoever submits.
  class SubmitScope {
   public:
    explicit SubmitScope(QueueLink& link) : link_(link), lock_(link.mutex_) {
      if (!link_.timeline_.handle()) return;
      wait_ = link_.pending_;
      signal_ = {link_.timeline_.handle(), link_.signalled_ + 1};
    }
    SubmitScope(const SubmitScope&) = delete;
    SubmitScope& operator=(const SubmitScope&) = delete;

    // The done point the submission must wait for (null: none).
    const TimelinePoint& wait() const { return wait_; }
    // What the submission must signal when its last batch ends (null: nothing; the link
    // was not initialised).
    const TimelinePoint& signal() const { return signal_; }

    // The submission reached the queue: its signal is the new ready point, its wait is
    // done with. Without commit (the submission failed), nothing changes.
    void commit() {
      if (!signal_) return;
      link_.signalled_ = signal_.value;
      if (wait_ && wait_.semaphore == link_.pending_.semaphore && wait_.value == link_.pending_.value) link_.pending_ = {};
    }

   private:
    QueueLink& link_;
    std::unique_lock<std::mutex> lock_;
    TimelinePoint wait_, signal_;
  };

  SubmitScope begin_submit() { return SubmitScope(*this); }

  // For tpar's ready(): what the last submission to this queue signals.
  TimelinePoint ready() const {
    std::lock_guard lock(mutex_);
    if (!timeline_.handle()) return {};
    return {timeline_.handle(), signalled_};
  }

  // For tpar's wait_for(): the next submission to this queue, and synchronize, wait for
  // `done` (which implies every earlier one). A null point forgets it.
  void wait_for(const TimelinePoint& done) noexcept {
    std::lock_guard lock(mutex_);
    pending_ = done;
    last_done_ = done;
  }

  // For synchronize: waits on the host until the last done point handed to this queue is
  // reached, at most `timeout`. True when reached (or there is none).
  bool wait_host(vk::Device device, std::chrono::nanoseconds timeout) {
    TimelinePoint done;
    {
      std::lock_guard lock(mutex_);
      done = last_done_;
    }
    if (!done) return true;
    const vk::Result r = detail::wait_all(device, std::span(&done.semaphore, 1), std::span(&done.value, 1), timeout);
    if (r != vk::Result::eSuccess) return false;
    std::lock_guard lock(mutex_);
    if (last_done_.semaphore == done.semaphore && last_done_.value == done.value) last_done_ = {};
    return true;
  }

 private:
  mutable std::mutex mutex_;
  Timeline timeline_;
  std::uint64_t signalled_ = 0;  // the value the last committed submission signals
  TimelinePoint pending_;        // the done point the next submission waits for
  TimelinePoint last_done_;      // the done point synchronize waits for
};

// What ggml-vulkan enabled on a VkDevice, as tpar needs to know it (ggml-vulkan does not
// keep its extension list).
struct DeviceRecord {
  std::vector<std::string> enabled_extensions;
  bool shader_float16 = false;
  bool storage_16bit = false;
  bool update_after_bind = false;

  // `extensions`: the names passed to vkCreateDevice; the feature structs as passed there.
  void record(std::span<const char* const> extensions, const VkPhysicalDeviceVulkan11Features& vk11,
              const VkPhysicalDeviceVulkan12Features& vk12) {
    enabled_extensions.assign(extensions.begin(), extensions.end());
    storage_16bit = vk11.storageBuffer16BitAccess == VK_TRUE;
    shader_float16 = vk12.shaderFloat16 == VK_TRUE;
    update_after_bind = vk12.descriptorBindingStorageBufferUpdateAfterBind == VK_TRUE;
  }
};

// Device extensions tpar uses that ggml-vulkan does not enable itself, among those the
// physical device offers and `enabled` lacks: append them to vkCreateDevice's list.
// (VK_KHR_external_semaphore_fd lets NativeImport share timelines between devices.)
inline std::vector<const char*> extra_device_extensions(vk::PhysicalDevice physical, std::span<const char* const> enabled) {
  static constexpr const char* wanted[] = {VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME};
  std::uint32_t count = 0;
  std::vector<vk::ExtensionProperties> offered;
  if (physical.enumerateDeviceExtensionProperties(nullptr, &count, nullptr) == vk::Result::eSuccess) {
    offered.resize(count);
    if (physical.enumerateDeviceExtensionProperties(nullptr, &count, offered.data()) != vk::Result::eSuccess) offered.clear();
    offered.resize(std::min<std::size_t>(offered.size(), count));
  }
  std::vector<const char*> out;
  for (const char* name : wanted) {
    const bool has = std::any_of(offered.begin(), offered.end(), [&](const auto& e) { return !std::strcmp(e.extensionName, name); });
    const bool already = std::any_of(enabled.begin(), enabled.end(), [&](const char* e) { return !std::strcmp(e, name); });
    if (has && !already) out.push_back(name);
  }
  return out;
}

// One of ggml-vulkan's queues, as AdoptedDevice needs it.
struct QueueRef {
  vk::Queue queue;
  std::uint32_t family = 0;
  std::uint32_t index = 0;
  QueueLock lock;
};

// The AdoptedDevice for a ggml-vulkan device: its compute queue, and its transfer queue
// where that is a different VkQueue (ggml-vulkan aliases them on single-queue devices).
inline AdoptedDevice adopted_device(vk::Instance instance, vk::PhysicalDevice physical, vk::Device device, QueueRef compute,
                                    std::optional<QueueRef> transfer, const DeviceRecord& record) {
  AdoptedDevice a;
  a.instance = instance;
  a.physical = physical;
  a.device = device;
  a.compute_queue = compute.queue;
  a.compute_family = compute.family;
  a.compute_index = compute.index;
  a.compute_lock = std::move(compute.lock);
  if (transfer && transfer->queue && transfer->queue != compute.queue) {
    a.transfer_queue = transfer->queue;
    a.transfer_family = transfer->family;
    a.transfer_index = transfer->index;
    a.transfer_lock = std::move(transfer->lock);
  }
  a.enabled_extensions = record.enabled_extensions;
  a.shader_float16_enabled = record.shader_float16;
  a.storage_16bit_enabled = record.storage_16bit;
  a.update_after_bind_enabled = record.update_after_bind;
  return a;
}

// The bound on every wait the ggml adapter makes: ggml's subgraphs come before tpar's
// waits, and a prefill subgraph of a large model on a slow device takes seconds.
inline constexpr std::chrono::seconds wait_bound{60};

// The communicator's options under ggml-vulkan (TPAR_SYNC, TPAR_ALGO and TPAR_WIRE still
// override them): tpar's defaults, as ggml's CUDA backend does it: f32 on the wire below
// 1 MiB (every decode-sized call; bit for bit what ggml's own fallback gives at two
// devices), bf16 from there (prefill). TPAR_WIRE=f32 makes every call f32 (measured in
// docs/integrating-ggml.md, "The wire"). Waits bounded by wait_bound.
inline Options options() {
  Options o;
  o.timeout = wait_bound;
  return o;
}

}  // namespace tpar::inline v0::ggml_vulkan
