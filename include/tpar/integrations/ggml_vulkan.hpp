// ggml-vulkan's side of the comm hook: the state ggml-vulkan keeps for tpar, so that the
// patch to ggml-vulkan (integrations/llama.cpp/patches/) only wires ggml-vulkan's
// structures to it. tpar includes no ggml header; the patch includes this one.
//
// Who is touched. tpar serves a backend context (ggml_backend_vk_context) only while a
// -sm tensor comm context adopted it (ContextLink::attach, from the hook's traits). Only
// that context's own submissions go through tpar: its compute queue's through a
// tpar::Stream, which holds the work until the AllReduce and submits it with tpar's first
// batches in one vkQueueSubmit, so that queue order alone orders them
// (docs/design/decode-boundary.md); its transfer queue's after the last AllReduce's done
// point. Every other submission — another context on the same GPU (a draft model, a
// -sm none or -sm layer model), the device's own copies, any process with no -sm tensor
// context or with GGML_VK_DISABLE_TPAR=1 — takes ggml-vulkan's own path (its queue
// handle's submit and device-lost handler); where a served context's stream holds work on
// the same VkQueue, the device's own copies go after it (QueueLink::before_submit).
//
//   // ggml_vk_submit, for a command pool of a served context:
//   if (pool.tpar.serving()) pool.tpar.submit(infos, fence, upstream_submit);
//   else { queue_handle.tpar.before_submit(); queue_handle.submit(infos, fence); }
#pragma once

#include <tpar/comm/stream.hpp>
#include <tpar/core/log.hpp>
#include <tpar/integrations/ggml.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0::ggml_vulkan {

// Whether tpar is on in this process: GGML_VK_DISABLE_TPAR (any value) turns it off, and
// then ggml-vulkan requests no extension for tpar, offers no comm hook, and every
// submission takes its own path.
inline bool enabled() {
  static const bool on = std::getenv("GGML_VK_DISABLE_TPAR") == nullptr;
  return on;
}

// tpar's messages through the host's logger: `sink` gets those at or above TPAR_LOG's
// threshold (warning by default), so that a host's log callback (ggml_log_set) sees what
// tpar's own stderr sink would have printed, and no more.
inline void log_through(void (*sink)(LogLevel, const char* text)) {
  const LogLevel threshold = log_threshold();  // (the sink runs under the log's lock: read it now)
  set_log_sink([sink, threshold](LogLevel level, std::string_view message) {
    if (level < threshold) return;
    const std::string text(message);
    sink(level, text.c_str());
  });
}

// What ggml-vulkan enabled on a VkDevice, as tpar needs to know it (ggml-vulkan does not
// keep its extension list).
struct DeviceRecord {
  std::vector<std::string> enabled_extensions;
  bool shader_float16 = false;
  bool storage_16bit = false;
  bool update_after_bind = false;
  bool shader_device_clock = false;
  bool device_coherent_memory = false;

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

// tpar's error as ggml-vulkan's own kind (vk::SystemError, the VkResult kept: a lost
// device stays eErrorDeviceLost), with tpar's message.
[[noreturn]] inline void rethrow_for_ggml(const Error& e) {
  const vk::Result r = e.vk_result() == vk::Result::eSuccess ? vk::Result::eErrorUnknown : e.vk_result();
  throw vk::SystemError(vk::make_error_code(r), e.what());
}

// What one VkQueue of ggml-vulkan (its vk_queue_handle, shared where ggml-vulkan aliases
// one queue as compute and transfer queue) keeps for tpar: the streams of served contexts
// on it, so that a submission of ggml-vulkan's own on that queue goes after what they hold.
class QueueLink {
 public:
  QueueLink() = default;
  QueueLink(const QueueLink&) = delete;
  QueueLink& operator=(const QueueLink&) = delete;

  // Before a submission to this queue that is not a served context's own (the device's
  // copies, another context's work): what served contexts' streams hold here goes first,
  // keeping the order in which the host submitted. Nothing is done (one relaxed load)
  // where no stream is on the queue. Throws vk::SystemError, as ggml-vulkan's own.
  void before_submit() {
    if (streams_count_.load(std::memory_order_acquire) == 0) return;
    std::lock_guard lock(mutex_);
    try {
      for (Stream* s : streams_) s->flush();
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }

  // For ContextLink: a served context's stream on this queue.
  void enlist(Stream* s) {
    std::lock_guard lock(mutex_);
    streams_.push_back(s);
    streams_count_.store(streams_.size(), std::memory_order_release);
  }
  void delist(Stream* s) {
    std::lock_guard lock(mutex_);
    std::erase(streams_, s);
    streams_count_.store(streams_.size(), std::memory_order_release);
  }

 private:
  std::mutex mutex_;
  std::vector<Stream*> streams_;
  std::atomic<std::size_t> streams_count_{0};
};

// One ggml-vulkan backend context (ggml_backend_vk_context) as tpar sees it. It costs
// nothing until a -sm tensor comm context attaches it; then the context's submissions go
// through submit() until detach().
class ContextLink {
 public:
  // What a submission of the host's own path looks like (ggml-vulkan's queue handle's
  // submit: its locks and its device-lost handler).
  using HostSubmit = std::function<void(std::span<const vk::SubmitInfo>, vk::Fence)>;

  ContextLink() = default;
  ContextLink(const ContextLink&) = delete;
  ContextLink& operator=(const ContextLink&) = delete;
  ~ContextLink() {
    detach();
    std::lock_guard guard(leader_mutex());
    if (leader() == this) leader() = nullptr;
  }

  // Call once the context knows its device (ggml_vk_init): nothing is made here.
  // `lock`: what ggml-vulkan holds around a submission to the compute queue; `compute`:
  // that queue's link. `name` (ggml's device name, "Vulkan0") names it in traces, and
  // `trace_device` (ggml's device index) numbers its host spans there.
  void init(vk::PhysicalDevice physical, vk::Device device, vk::Queue compute_queue, std::uint32_t compute_family,
            QueueLock lock, QueueLink& compute, std::string name, int trace_device = -1) {
    trace_device_ = trace_device;
    physical_ = physical;
    device_ = device;
    queue_ = compute_queue;
    family_ = compute_family;
    lock_ = std::move(lock);
    compute_link_ = &compute;
    name_ = std::move(name);
  }

  // Whether tpar serves this context now (a -sm tensor comm context attached it).
  bool serving() const { return serving_.load(std::memory_order_acquire); }
  // Whether this context's compute work waits for the next AllReduce to go out: then one
  // submission a subgraph is as good as several, and a subgraph may be replayed.
  bool holding() const { return serving() && stream_->holding(); }

  // For the hook's traits: this context's compute queue as a stream (made here, the first
  // time), and this context served from now on. Throws tpar::Error where init() was not
  // called.
  Stream* attach() {
    if (!device_) throw Error(ErrorCode::invalid_argument, "ggml-vulkan: a backend context tpar was not told about (ContextLink::init)");
    if (!stream_) {
      TraceQueue trace;
      trace.name = name_;
      trace.work = "ggml";
      const auto families = physical_.getQueueFamilyProperties();
      trace.timestamp_bits = family_ < families.size() ? families[family_].timestampValidBits : 0;
      trace.period_ns = physical_.getProperties().limits.timestampPeriod;
      stream_ = std::make_unique<Stream>(device_, queue_, family_, lock_, std::move(trace));
    }
    if (!serving()) {
      compute_link_->enlist(stream_.get());
      serving_.store(true, std::memory_order_release);
    }
    log(LogLevel::debug, "ggml-vulkan " + name_ + ": this context's submissions go through tpar (-sm tensor)");
    return stream_.get();
  }

  // For the hook's traits, once the comm context is gone: what the stream holds goes to
  // the queue, and the context takes ggml-vulkan's own path again.
  void detach() noexcept {
    if (!serving()) return;
    try {
      stream_->flush();
    } catch (const std::exception& e) {
      log(LogLevel::error, "ggml-vulkan " + name_ + ": submitting held work: " + e.what());
    }
    serving_.store(false, std::memory_order_release);
    compute_link_->delist(stream_.get());
    last_done_ = {};
    transfer_wait_ = {};
    ends_ordered_ = false;
  }

  // A submission of this context while served: `transfer` for its transfer queue's
  // command pool. The compute queue's goes to the stream (held while -sm tensor runs,
  // unless `fence` is given); the transfer queue's waits for the last AllReduce's done
  // point and goes through `host` (ggml-vulkan's own submit). Throws vk::SystemError, as
  // ggml-vulkan's own.
  void submit(bool transfer, std::span<const vk::SubmitInfo> batches, vk::Fence fence, const HostSubmit& host) {
    auto span = Trace::instance().span("ggml submit");
    try {
      if (!transfer) {
        stream_->submit(batches, fence);
        return;
      }
      if (!transfer_wait_) {
        host(batches, fence);
        return;
      }
      // The done point's signal may still be held by the compute stream: to the queue first.
      stream_->flush();
      detail::BatchList list;
      const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
      const vk::TimelineSemaphoreSubmitInfo ti(1, &transfer_wait_.value, 0, nullptr);
      const vk::SubmitInfo wait(1, &transfer_wait_.semaphore, &stage, 0, nullptr, 0, nullptr, &ti);
      list.append(std::span(&wait, 1));
      list.append(batches);
      host(list.infos(true), fence);
      transfer_wait_ = {};  // later submissions to the queue follow this one
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }

  // What the stream holds, to the queue (an event's signal, a host wait to come).
  void flush() {
    if (!serving()) return;
    try {
      stream_->flush();
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }

  // For the hook's traits (wait_for): the context's later work and its synchronize follow
  // `done`. On the compute queue the stream's order does it; the transfer queue's next
  // submission waits on it. A null point forgets it.
  void wait_for(const TimelinePoint& done) noexcept {
    last_done_ = done;
    transfer_wait_ = done;
  }

  // For ggml-vulkan's synchronize, after its own fence wait: waits on the host until the
  // last AllReduce's done point is reached (a subgraph with nothing to compute on a device
  // submits nothing that could carry the wait), at most `timeout`. eSuccess when reached
  // or there is none; else the wait's result (eTimeout, eErrorDeviceLost). Inside a trace
  // window (TPAR_TRACE), a step ends here: the GPU is idle.
  vk::Result synchronized(std::chrono::nanoseconds timeout) {
    if (!serving()) {
      trace_step();
      return vk::Result::eSuccess;
    }
    const TimelinePoint done = last_done_;
    if (done) {
      flush();
      const vk::Result r = tpar::wait(device_, std::span(&done.semaphore, 1), std::span(&done.value, 1), timeout);
      if (r != vk::Result::eSuccess) return r;
      last_done_ = {};
    }
    trace_step();
    return vk::Result::eSuccess;
  }

  // A host span of a trace (TPAR_TRACE) around ggml-vulkan's own work on this context
  // ("graph_compute", "synchronize": scripts/timeline.py cuts a token by them), served or
  // not (a -sm none run traced for comparison); nothing where no trace is taken.
  Trace::Span trace_span(const char* name) {
    if (!device_) return Trace::Span();  // tpar is off (GGML_VK_DISABLE_TPAR): init never came
    Trace& t = Trace::instance();
    if (!t.enabled()) return Trace::Span();
    if (!std::strcmp(name, "graph_compute")) ++graphs_;
    return t.span(name, trace_device_);
  }

  // For a host that ends its compute command buffers with a barrier over their writes
  // while held: note whether the one it ended (or submitted again) last did, so that the
  // next may start with none, and say so to ride() (`ordered`).
  void note_end(bool ordered) noexcept { ends_ordered_ = ordered; }
  bool last_end_ordered() const noexcept { return ends_ordered_; }

  // Riding (tpar::Stream::ride, docs/design/relay-ride.md): tpar's AllReduce held for
  // the subgraph ggml-vulkan records next on this context, its kernel recorded first into
  // that subgraph's command buffer. ride_pending(): whether a call waits for it; ride():
  // records it into `cb` (`keep`: a recording for replay; the site it returns, 0 for
  // none, is what ride_again() names before each replay and ride_forget() once the
  // recording is freed; `ordered`: `cb` has nothing recorded yet and ggml-vulkan ends
  // every command buffer of this context with a barrier, so the kernel needs none before
  // it, Stream::ride); ride_again(): false where a recording with that site cannot be
  // replayed now (record it anew). Errors throw vk::SystemError, as ggml-vulkan's own.
  bool ride_pending() const { return serving() && stream_->ride_pending(); }
  std::uint64_t ride(vk::CommandBuffer cb, bool keep, bool ordered = false) {
    if (!serving()) return 0;
    try {
      return stream_->ride(cb, keep, ordered);
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }
  bool ride_again(std::uint64_t site) {
    if (!serving()) return site == 0;
    try {
      return stream_->ride_again(site);
    } catch (const Error& e) {
      rethrow_for_ggml(e);
    }
  }
  void ride_forget(std::uint64_t site) noexcept {
    if (stream_) stream_->ride_forget(site);
  }

 private:
  // The first context to synchronize under a trace counts the steps (a synchronize after a
  // graph_compute of its own) that open and close the trace's window.
  void trace_step() {
    if (!device_) return;
    Trace& t = Trace::instance();
    if (!t.enabled()) return;
    {
      std::lock_guard guard(leader_mutex());
      if (!leader()) leader() = this;
      if (leader() != this) return;
    }
    if (graphs_ == graphs_at_step_) return;  // nothing ran since the last step
    graphs_at_step_ = graphs_;
    t.step();
    ++steps_;
    if (steps_ == t.skip()) t.begin_window();
    if (steps_ == t.skip() + t.span_steps()) t.end_window("TPAR_TRACE_SPAN steps");
  }
  static ContextLink*& leader() {
    static ContextLink* l = nullptr;
    return l;
  }
  static std::mutex& leader_mutex() {
    static std::mutex m;
    return m;
  }

  vk::PhysicalDevice physical_;
  vk::Device device_;
  vk::Queue queue_;
  std::uint32_t family_ = 0;
  QueueLock lock_;
  QueueLink* compute_link_ = nullptr;
  std::string name_;
  int trace_device_ = -1;
  std::unique_ptr<Stream> stream_;
  std::atomic<bool> serving_{false};
  TimelinePoint last_done_;      // what synchronize waits for
  TimelinePoint transfer_wait_;  // what the transfer queue's next submission waits for
  bool ends_ordered_ = false;
  std::uint32_t steps_ = 0;
  std::uint64_t graphs_ = 0, graphs_at_step_ = 0;  // graph_compute spans, for the trace's steps
};

// A ggml-vulkan command pool's tie to its context's link: set on a served context's
// compute and transfer pools (and on a pool that stands in for the compute pool while a
// subgraph is recorded for replay). Null: ggml-vulkan's own path.
struct PoolLink {
  ContextLink* context = nullptr;
  bool transfer = false;
  bool serving() const { return context && context->serving(); }
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
// clock): where offered, unless tpar is off or TPAR_GGML_SHADER_CLOCK=0.
inline bool wants_shader_clock(vk::PhysicalDevice physical) {
  if (!enabled()) return false;
  const char* v = std::getenv("TPAR_GGML_SHADER_CLOCK");
  if (v && std::string(v) == "0") return false;
  return offers(physical, VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
}

// Device extensions tpar uses that ggml-vulkan does not enable itself, among those the
// physical device offers and `enabled` lacks: append them to vkCreateDevice's list (none
// where tpar is off). (VK_KHR_external_semaphore_fd lets NativeImport share timelines
// between devices; VK_EXT_calibrated_timestamps, asked for only with TPAR_TRACE, puts a
// trace's GPU times on the host's clock.)
inline std::vector<const char*> extra_device_extensions(vk::PhysicalDevice physical, std::span<const char* const> enabled_now) {
  if (!enabled()) return {};
  std::vector<const char*> wanted{VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME};
  const char* calibrate = std::getenv("TPAR_TRACE_CALIBRATE");
  if (Trace::instance().enabled() && !(calibrate && std::string(calibrate) == "0"))
    wanted.push_back(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  std::vector<const char*> out;
  for (const char* name : wanted) {
    const bool has = offers(physical, name);
    const bool already = std::any_of(enabled_now.begin(), enabled_now.end(), [&](const char* e) { return !std::strcmp(e, name); });
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
