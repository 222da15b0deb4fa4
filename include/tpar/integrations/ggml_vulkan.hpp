// ggml-vulkan's side of the comm hook: the state ggml-vulkan keeps for tpar, so that the
// patch to ggml-vulkan (integrations/llama.cpp/patches/) only wires ggml-vulkan's
// structures to it. tpar includes no ggml header; the patch includes this one.
//
// Ordering, the one thing the patch must get right: tpar's AllReduce runs on the
// backend's own compute queue, after the subgraph that wrote the partial sums and before
// the one that reads the sum. Every submission ggml-vulkan makes goes through its queue's
// QueueLink. On the compute queue the link is a tpar::Stream: while -sm tensor runs, it
// holds ggml's work until the AllReduce, which submits it with tpar's first batches in
// one vkQueueSubmit, and puts the sum's batch in front of ggml's next submission, so
// that queue order alone orders them (docs/design/decode-boundary.md). A transfer queue's
// submissions wait for tpar's last done point. ggml-vulkan's synchronize hands over what
// the stream holds (its fence submission does) and waits for the last done point too.
//
//   // in ggml_vk_submit, instead of the queue handle's submit:
//   queue_handle.tpar.submit(submit_infos, fence);
//
// TPAR_GGML_STREAMS=0 wires the older way, for comparisons: every ggml submission
// signals the queue's timeline (the ready point), tpar submits its own batches after
// waiting on it, and ggml's next submission waits on tpar's done point.
#pragma once

#include <tpar/comm/stream.hpp>
#include <tpar/integrations/ggml.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0::ggml_vulkan {

// Whether ggml's compute queues are streams (the default) or the older semaphore wiring
// (TPAR_GGML_STREAMS=0).
inline bool streams_wanted() {
  static const bool on = [] {
    const char* v = std::getenv("TPAR_GGML_STREAMS");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

class QueueLink;

// What ggml-vulkan enabled on a VkDevice, as tpar needs to know it (ggml-vulkan does not
// keep its extension list), and the device's compute queue link.
struct DeviceRecord {
  std::vector<std::string> enabled_extensions;
  bool shader_float16 = false;
  bool storage_16bit = false;
  bool update_after_bind = false;
  bool shader_device_clock = false;
  bool device_coherent_memory = false;
  QueueLink* compute = nullptr;  // set by the compute queue's QueueLink::init

  // `extensions`: the names passed to vkCreateDevice; the feature structs as passed there.
  // `shader_clock`: VK_KHR_shader_clock's features as passed there, where chained (the
  // relay's kernels then wait for the sum in the kernel, bounded by the device clock;
  // without it their queues wait, a host-signalled semaphore on the token's path).
  // `coherent`: VK_AMD_device_coherent_memory's features as passed there, where chained
  // (the relay then puts its words in a device-coherent memory type; the pinned
  // ggml-vulkan does not enable the extension, so under it the relay uses the plain
  // device-local host-visible type, and its log line says which type it used).
  void record(std::span<const char* const> extensions, const VkPhysicalDeviceVulkan11Features& vk11,
              const VkPhysicalDeviceVulkan12Features& vk12, const VkPhysicalDeviceShaderClockFeaturesKHR* shader_clock = nullptr,
              const VkPhysicalDeviceCoherentMemoryFeaturesAMD* coherent = nullptr) {
    enabled_extensions.assign(extensions.begin(), extensions.end());
    storage_16bit = vk11.storageBuffer16BitAccess == VK_TRUE;
    shader_float16 = vk12.shaderFloat16 == VK_TRUE;
    update_after_bind = vk12.descriptorBindingStorageBufferUpdateAfterBind == VK_TRUE;
    shader_device_clock = shader_clock && shader_clock->shaderDeviceClock == VK_TRUE && has(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
    device_coherent_memory =
        coherent && coherent->deviceCoherentMemory == VK_TRUE && has(VK_AMD_DEVICE_COHERENT_MEMORY_EXTENSION_NAME);
  }
  bool has(const char* extension) const {
    return std::find(enabled_extensions.begin(), enabled_extensions.end(), extension) != enabled_extensions.end();
  }
};

// What one VkQueue of ggml-vulkan keeps for tpar: every submission of ggml-vulkan's to the
// queue goes through submit(). ggml-vulkan aliases one queue as both compute and
// transfer queue on devices with a single queue: keep the link with the VkQueue
// (ggml-vulkan's vk_queue_handle), not with the role, so the alias shares it.
class QueueLink {
 public:
  QueueLink() = default;
  QueueLink(const QueueLink&) = delete;
  QueueLink& operator=(const QueueLink&) = delete;
  ~QueueLink() {
    if (leader() == this) leader() = nullptr;
  }

  // Call once, after the VkDevice exists. `lock`: ggml-vulkan's lock of the queue.
  // `compute`: the device's compute queue (its link becomes a tpar::Stream). `name`
  // (ggml's device name, "Vulkan0") names it in traces.
  void init(DeviceRecord& record, vk::PhysicalDevice physical, vk::Device device, vk::Queue queue, std::uint32_t family,
            QueueLock lock, const std::string& name, bool compute) {
    std::lock_guard guard(mutex_);
    if (queue_) return;
    record_ = &record;
    device_ = device;
    TraceQueue trace;
    trace.name = name;
    trace.work = "ggml";
    const auto families = physical.getQueueFamilyProperties();
    const bool computes = family < families.size() &&
                          (families[family].queueFlags & (vk::QueueFlagBits::eCompute | vk::QueueFlagBits::eGraphics));
    trace.timestamp_bits = computes ? families[family].timestampValidBits : 0;
    trace.period_ns = physical.getProperties().limits.timestampPeriod;
    if (record.has(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME))
      trace.calibrate =
          reinterpret_cast<PFN_vkGetCalibratedTimestampsEXT>(device.getProcAddr("vkGetCalibratedTimestampsEXT"));
    log(LogLevel::debug, "ggml-vulkan queue link: " + name + (compute ? " compute" : " transfer") + " queue, family " +
                             std::to_string(family));
    if (compute) {
      stream_ = std::make_unique<Stream>(device, queue, family, std::move(lock), std::move(trace));
      record.compute = this;
      if (!leader()) leader() = this;
    } else {
      queue_ = std::make_unique<Queue>(queue, family, 0, std::move(lock));
      queue_->trace_as(std::move(trace), -1);
    }
    timeline_ = Timeline(device);
  }

  // ggml-vulkan's submission to this queue (the stream holds it while -sm tensor runs,
  // unless `fence` is given). Throws vk::SystemError on failure, as ggml-vulkan's own.
  void submit(vk::ArrayProxy<const vk::SubmitInfo> batches, vk::Fence fence) {
    const std::span<const vk::SubmitInfo> infos(batches.data(), batches.size());
    auto span = Trace::instance().span("ggml submit");
    std::lock_guard guard(mutex_);
    try {
      if (stream_ && streams_wanted()) {
        stream_->submit(infos, fence);
        return;
      }
      // The older wiring (and a transfer queue): wait for tpar's pending done point,
      // signal this queue's timeline.
      extra_.clear();
      extra_.append(infos);
      if (pending_) {
        // Its signal may still be in the compute stream's hands.
        if (record_ && record_->compute && record_->compute != this) record_->compute->flush();
        wait_first(pending_);
      }
      extra_.add_signal(timeline_.handle(), signalled_ + 1);
      Queue& q = stream_ ? stream_->queue() : *queue_;
      const vk::Result r = q.submit(extra_.infos(true), fence);
      if (r != vk::Result::eSuccess) throw vk::SystemError(vk::make_error_code(r), "ggml_vulkan: vkQueueSubmit (tpar link)");
      ++signalled_;
      pending_ = {};
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }

  // What this queue's stream holds, to the queue.
  void flush() {
    if (stream_) stream_->flush();
  }

  // The compute queue's stream (null for a transfer queue, or with TPAR_GGML_STREAMS=0).
  Stream* stream() const { return stream_ && streams_wanted() ? stream_.get() : nullptr; }
  // Whether ggml's work here waits for the next AllReduce to go out (-sm tensor with
  // tpar): then one submission a subgraph is as good as several.
  bool holding() const {
    const Stream* s = stream();
    return s && s->holding();
  }

  // Riding (tpar::Stream::ride, docs/design/relay-ride.md): tpar's AllReduce held for
  // the subgraph ggml-vulkan records next on this device, its kernel recorded first into
  // that subgraph's command buffer. ride_pending(): whether a call waits for it; ride():
  // records it into `cb` (`keep`: a recording for replay; the site it returns, 0 for
  // none, is what ride_again() names before each replay and ride_forget() once the
  // recording is freed; `ordered`: `cb` has nothing recorded yet and ggml-vulkan ends
  // every command buffer on this queue with a barrier, so the kernel needs none before
  // it, Stream::ride; `beside`: ggml-vulkan's commands to run while the kernel waits,
  // RideBeside); ride_again(): false where a recording with that site cannot be
  // replayed now (record it anew). Errors throw vk::SystemError, as ggml-vulkan's own.
  bool ride_pending() const {
    const Stream* s = stream();
    return s && s->ride_pending();
  }
  std::uint64_t ride(vk::CommandBuffer cb, bool keep, bool ordered = false, const RideBeside& beside = {}) {
    Stream* s = stream();
    if (!s) return 0;
    try {
      return s->ride(cb, keep, ordered, beside);
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }
  bool ride_again(std::uint64_t site) {
    Stream* s = stream();
    if (!s) return site == 0;
    try {
      return s->ride_again(site);
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }
  void ride_forget(std::uint64_t site) noexcept {
    if (Stream* s = stream()) s->ride_forget(site);
  }

  // For tpar's ready() (the older wiring): what the last submission to this queue signals.
  TimelinePoint ready() const {
    std::lock_guard lock(mutex_);
    if (!timeline_.handle() || stream()) return {};
    return {timeline_.handle(), signalled_};
  }

  // For tpar's wait_for(): the device's later work, and synchronize, follow `done`
  // (which implies every earlier call). On a stream queue order does it; elsewhere the
  // next submission waits on it. A null point forgets it.
  void wait_for(const TimelinePoint& done) noexcept {
    std::lock_guard lock(mutex_);
    if (!stream()) pending_ = done;
    last_done_ = done;
  }

  // For synchronize: hands over what the stream holds, then waits on the host until the
  // last done point is reached, at most `timeout`. True when reached (or there is none).
  bool wait_host(vk::Device device, std::chrono::nanoseconds timeout) {
    TimelinePoint done;
    {
      std::lock_guard lock(mutex_);
      if (stream_) stream_->flush();
      done = last_done_;
    }
    if (!done) return true;
    const vk::Result r = detail::wait_all(device, std::span(&done.semaphore, 1), std::span(&done.value, 1), timeout);
    if (r != vk::Result::eSuccess) return false;
    std::lock_guard lock(mutex_);
    if (last_done_.semaphore == done.semaphore && last_done_.value == done.value) last_done_ = {};
    return true;
  }

  // For the trace: ggml-vulkan's synchronize on this queue ended (the GPU is idle). The
  // first compute queue ggml made counts the steps (tokens: a synchronize after work was
  // submitted to it) that open and close a window.
  void synchronized() {
    Trace& t = Trace::instance();
    if (!t.enabled() || leader() != this) return;
    const auto submits = stream_ ? stream_->queue().counts().submits : 0;
    if (submits == submits_at_step_) return;  // nothing ran since the last step
    submits_at_step_ = submits;
    t.step();
    ++steps_;
    if (steps_ == t.skip()) t.begin_window();
    if (steps_ == t.skip() + t.span_steps()) t.end_window("TPAR_TRACE_SPAN steps");
  }

 private:
  // tpar's error as ggml-vulkan's own kind (vk::SystemError), with tpar's message.
  [[noreturn]] static void rethrow_for_ggml(const Error& e) {
    const vk::Result r = e.vk_result() == vk::Result::eSuccess ? vk::Result::eErrorUnknown : e.vk_result();
    throw vk::SystemError(vk::make_error_code(r), e.what());
  }
  static QueueLink*& leader() {
    static QueueLink* l = nullptr;
    return l;
  }

  void wait_first(const TimelinePoint& p) {
    // A batch of its own in front: waits are per batch, and the first of ggml's may fold.
    detail::BatchList first;
    const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
    const vk::TimelineSemaphoreSubmitInfo ti(1, &p.value, 0, nullptr);
    const vk::SubmitInfo si(1, &p.semaphore, &stage, 0, nullptr, 0, nullptr, &ti);
    first.append(std::span(&si, 1));
    first.append(extra_);
    extra_.clear();
    extra_.append(first);
  }

  mutable std::mutex mutex_;
  DeviceRecord* record_ = nullptr;
  vk::Device device_;
  std::unique_ptr<Stream> stream_;  // the compute queue
  std::unique_ptr<Queue> queue_;    // a transfer queue
  Timeline timeline_;
  std::uint64_t signalled_ = 0;  // the value the last submission signalled (older wiring)
  TimelinePoint pending_;        // the done point the next submission waits for (older wiring, transfer queue)
  TimelinePoint last_done_;      // the done point synchronize waits for
  detail::BatchList extra_;
  std::uint32_t steps_ = 0;
  std::uint64_t submits_at_step_ = 0;
};

// Whether the physical device offers the device extension `name`.
inline bool offers(vk::PhysicalDevice physical, const char* name) {
  std::uint32_t count = 0;
  std::vector<vk::ExtensionProperties> offered;
  if (physical.enumerateDeviceExtensionProperties(nullptr, &count, nullptr) == vk::Result::eSuccess) {
    offered.resize(count);
    if (physical.enumerateDeviceExtensionProperties(nullptr, &count, offered.data()) != vk::Result::eSuccess) offered.clear();
    offered.resize(std::min<std::size_t>(offered.size(), count));
  }
  return std::any_of(offered.begin(), offered.end(), [&](const auto& e) { return !std::strcmp(e.extensionName, name); });
}

// Whether ggml-vulkan should chain VkPhysicalDeviceShaderClockFeaturesKHR and enable
// VK_KHR_shader_clock for tpar (its relay's kernels bound their wait by the device
// clock): where offered, unless TPAR_GGML_SHADER_CLOCK=0.
inline bool wants_shader_clock(vk::PhysicalDevice physical) {
  const char* v = std::getenv("TPAR_GGML_SHADER_CLOCK");
  if (v && std::string(v) == "0") return false;
  return offers(physical, VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
}

// Device extensions tpar uses that ggml-vulkan does not enable itself, among those the
// physical device offers and `enabled` lacks: append them to vkCreateDevice's list.
// (VK_KHR_external_semaphore_fd lets NativeImport share timelines between devices;
// VK_EXT_calibrated_timestamps, asked for only with TPAR_TRACE, puts a trace's GPU
// times on the host's clock.)
inline std::vector<const char*> extra_device_extensions(vk::PhysicalDevice physical, std::span<const char* const> enabled) {
  std::vector<const char*> wanted{VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME};
  const char* calibrate = std::getenv("TPAR_TRACE_CALIBRATE");
  if (Trace::instance().enabled() && !(calibrate && std::string(calibrate) == "0"))
    wanted.push_back(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  std::vector<const char*> out;
  for (const char* name : wanted) {
    const bool has = offers(physical, name);
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
  a.shader_device_clock_enabled = record.shader_device_clock;
  a.device_coherent_memory_enabled = record.device_coherent_memory;
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
