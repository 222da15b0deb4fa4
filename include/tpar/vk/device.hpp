// Device — one logical Vulkan device as tpar uses it: its handles, its compute queue and
// (where the device has one) a transfer-only queue, each behind the owner's lock, what
// it supports and what its VkDevice enabled. tpar never destroys what it did not create.
#pragma once

#include <tpar/detail/dispatch.hpp>
#include <tpar/vk/capabilities.hpp>
#include <tpar/vk/kernels.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

namespace tpar::inline v0 {

// The host's lock for a queue it shares with tpar (Vulkan queues need external
// synchronisation). Empty functions: tpar uses a mutex of its own.
struct QueueLock {
  std::function<void()> lock;
  std::function<void()> unlock;
};

class Queue {
 public:
  Queue(vk::Queue queue, std::uint32_t family, std::uint32_t index, QueueLock lock = {})
      : queue_(queue), family_(family), index_(index), hooks_(std::move(lock)) {}
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  vk::Queue handle() const { return queue_; }
  std::uint32_t family() const { return family_; }
  std::uint32_t index() const { return index_; }

  // The queue's lock, for another submitter of the same VkQueue (a tpar::Stream over a
  // device tpar created): the host's hooks where it gave them, else tpar's own mutex.
  QueueLock shared_lock() {
    if (hooks_.lock) return hooks_;
    return {[this] { own_.lock(); }, [this] { own_.unlock(); }};
  }

  // Runs f() with the queue locked.
  template <class F>
  decltype(auto) locked(F&& f) {
    struct Guard {
      Queue& q;
      explicit Guard(Queue& queue) : q(queue) {
        if (q.hooks_.lock) q.hooks_.lock(); else q.own_.lock();
      }
      ~Guard() {
        if (q.hooks_.unlock) q.hooks_.unlock(); else q.own_.unlock();
      }
    } guard(*this);
    return f();
  }

  // The most batches one vkQueueSubmit carries. NVIDIA's driver (580) walks the batches
  // of a submission that wait on signals not yet submitted recursively, one level per
  // batch: 4,234 of them overflowed an 8 MiB stack inside vkQueueSubmit, 2,118 did not
  // (docs/design/submission-size.md). A vkQueueSubmit costs about 2 us plus 0.45 us per
  // batch there, so 64 per call costs nearly nothing where a list is longer.
  static constexpr std::size_t max_batches_per_submit = 64;

  // Submits `batches` in order, in vkQueueSubmit calls of at most max_batches_per_submit
  // under one hold of the queue's lock (the queue's order is that of `batches`), `fence`
  // with the last. On a failure, *reached (where given) is the number of batches that
  // reached the queue before the call that failed; on success, batches.size(). Inside a
  // trace window (vk/trace.hpp) every command buffer is timed.
  vk::Result submit(std::span<const vk::SubmitInfo> batches, vk::Fence fence = {}, std::size_t* reached = nullptr) {
    return locked([&] {
      auto span = Trace::instance().span("vkQueueSubmit", trace_device_);
      Trace::Storage stamped;
      const std::span<const vk::SubmitInfo> infos = Trace::instance().stamp(queue_, batches, stamped);
      std::size_t done = 0;
      vk::Result r = vk::Result::eSuccess;
      do {
        const std::size_t take = std::min(infos.size() - done, max_batches_per_submit);
        const bool last = done + take == infos.size();
        r = queue_.submit(static_cast<std::uint32_t>(take), infos.data() + done, last ? fence : vk::Fence{});
        if (r != vk::Result::eSuccess) break;
        std::uint64_t waits = 0;
        for (std::size_t i = done; i < done + take; ++i) waits += infos[i].waitSemaphoreCount;
        submits_.fetch_add(1, std::memory_order_relaxed);
        batches_.fetch_add(take, std::memory_order_relaxed);
        waits_.fetch_add(waits, std::memory_order_relaxed);
        done += take;
      } while (done < infos.size());
      if (reached) *reached = done;
      return r;
    });
  }

  // What went through submit() so far: vkQueueSubmit calls, batches (VkSubmitInfos) and
  // semaphore waits among them (for reports: what a call or a step costs the driver).
  struct Counts {
    std::uint64_t submits = 0, batches = 0, waits = 0;
  };
  Counts counts() const {
    return {submits_.load(std::memory_order_relaxed), batches_.load(std::memory_order_relaxed),
            waits_.load(std::memory_order_relaxed)};
  }

  // Times this queue's work inside trace windows, naming its device `info.name` there
  // (a no-op unless TPAR_TRACE is set). `device` numbers the host spans of its submissions.
  void trace_as(TraceQueue info, int device) {
    trace_device_ = device;
    info.queue = queue_;
    info.family = family_;
    if (!info.submit)
      info.submit = [this](std::span<const vk::SubmitInfo> b, vk::Fence f) {
        return locked([&] { return queue_.submit(static_cast<std::uint32_t>(b.size()), b.data(), f); });
      };
    traced_ = Trace::instance().attach(info);
  }
  // Before the device goes: its timestamps go first.
  void untrace() {
    if (traced_) Trace::instance().detach(queue_);
    traced_ = false;
  }

 private:
  vk::Queue queue_;
  std::uint32_t family_;
  std::uint32_t index_;
  QueueLock hooks_;
  std::mutex own_;
  int trace_device_ = -1;
  bool traced_ = false;
  std::atomic<std::uint64_t> submits_{0}, batches_{0}, waits_{0};
};

// What a VkDevice has enabled, as far as tpar cares.
struct EnabledFeatures {
  bool external_memory_host = false;
  bool external_semaphore_fd = false;
  bool shader_float16 = false;
  bool storage_16bit = false;
  bool calibrated_timestamps = false;
  // descriptorBindingStorageBufferUpdateAfterBind: a communicator points its recorded
  // command buffers at each call's buffers by a descriptor update alone (without it, it
  // re-records the command buffers that use them).
  bool update_after_bind = false;
  // VK_KHR_shader_clock's shaderDeviceClock: the relay's kernel bounds its wait by time.
  bool shader_device_clock = false;
  // VK_AMD_device_coherent_memory's deviceCoherentMemory: memory types with
  // DEVICE_COHERENT_AMD or DEVICE_UNCACHED_AMD may be allocated (the relay puts its words
  // there); without it tpar never allocates from them (Vulkan forbids it).
  bool device_coherent_memory = false;
};

class Device {
 public:
  struct Init {
    vk::Instance instance;
    vk::PhysicalDevice physical;
    vk::Device device;
    bool owned = false;
    std::uint32_t index = 0;
    std::uint32_t physical_index = 0;
    bool is_virtual = false;
    DeviceCapabilities caps;
    EnabledFeatures enabled;
    vk::Queue compute_queue;
    std::uint32_t compute_family = 0, compute_index = 0;
    QueueLock compute_lock;
    vk::Queue transfer_queue;  // null: the device has no transfer-only queue tpar uses
    std::uint32_t transfer_family = 0, transfer_index = 0;
    QueueLock transfer_lock;
    vk::Queue second_transfer_queue;  // null, or a second queue of the transfer family (index + 1)
  };

  explicit Device(Init init)
      : instance_(init.instance),
        physical_(init.physical),
        device_(init.device),
        owned_(init.owned),
        index_(init.index),
        physical_index_(init.physical_index),
        virtual_(init.is_virtual),
        caps_(std::move(init.caps)),
        enabled_(init.enabled) {
    compute_ = std::make_unique<Queue>(init.compute_queue, init.compute_family, init.compute_index,
                                       std::move(init.compute_lock));
    if (init.transfer_queue)
      transfer_ = std::make_unique<Queue>(init.transfer_queue, init.transfer_family, init.transfer_index,
                                          std::move(init.transfer_lock));
    if (init.transfer_queue && init.second_transfer_queue)
      second_transfer_ = std::make_unique<Queue>(init.second_transfer_queue, init.transfer_family, init.transfer_index + 1);
    fns_.load(device_, enabled_.external_memory_host, enabled_.external_semaphore_fd, enabled_.calibrated_timestamps);
    if (Trace::instance().enabled()) {
      auto traced = [&](Queue& q) {
        TraceQueue t;
        t.device = device_;
        const auto& families = caps_.queue_families;
        const bool computes = q.family() < families.size() &&
                              (families[q.family()].queueFlags & (vk::QueueFlagBits::eCompute | vk::QueueFlagBits::eGraphics));
        t.timestamp_bits = computes ? families[q.family()].timestampValidBits : 0;  // (see TraceQueue)
        t.period_ns = caps_.timestamp_period_ns;
        t.calibrate = fns_.get_calibrated_timestamps;
        t.name = "device " + std::to_string(index_);
        q.trace_as(std::move(t), static_cast<int>(index_));
      };
      traced(*compute_);
      if (transfer_) traced(*transfer_);
      if (second_transfer_) traced(*second_transfer_);
    }
  }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  ~Device() {
    for (Queue* q : {compute_.get(), transfer_.get(), second_transfer_.get()})
      if (q) q->untrace();
    kernels_.reset();
    // Everything tpar submitted was retired by the communicators that submitted it (or
    // deliberately leaked with this device); an owned device is idle here.
    if (owned_) device_.destroy();
  }

  std::uint32_t index() const { return index_; }
  // Index of the physical device in the instance's enumeration order.
  std::uint32_t physical_index() const { return physical_index_; }
  bool is_virtual() const { return virtual_; }
  bool owned() const { return owned_; }
  vk::Instance instance() const { return instance_; }
  vk::PhysicalDevice physical() const { return physical_; }
  vk::Device handle() const { return device_; }
  const DeviceCapabilities& capabilities() const { return caps_; }
  const EnabledFeatures& enabled() const { return enabled_; }

  Queue& compute_queue() { return *compute_; }
  const Queue& compute_queue() const { return *compute_; }
  // The transfer-only queue, or the compute queue where the device has none.
  Queue& transfer_queue() { return transfer_ ? *transfer_ : *compute_; }
  const Queue& transfer_queue() const { return transfer_ ? *transfer_ : *compute_; }
  bool has_transfer_queue() const { return transfer_ != nullptr; }
  // A second queue of the transfer family, where the device has one (and tpar created
  // the device): copies in the other direction can run on it concurrently.
  Queue* second_transfer_queue() { return second_transfer_.get(); }

  const detail::DeviceExtensionFns& extension_fns() const { return fns_; }

  KernelSet& kernels() {
    std::call_once(kernels_once_, [&] {
      if (capabilities().max_storage_buffers_per_stage < kernel_storage_buffers)
        throw Error(ErrorCode::unsupported, "device " + std::to_string(index()) + " (" + capabilities().name + ") lets a shader bind " +
                                                std::to_string(capabilities().max_storage_buffers_per_stage) +
                                                " storage buffers; tpar's kernels need " + std::to_string(kernel_storage_buffers));
      kernels_ = std::make_unique<KernelSet>(device_, enabled_.update_after_bind, enabled_.shader_device_clock);
    });
    return *kernels_;
  }

 private:
  vk::Instance instance_;
  vk::PhysicalDevice physical_;
  vk::Device device_;
  bool owned_;
  std::uint32_t index_;
  std::uint32_t physical_index_;
  bool virtual_;
  DeviceCapabilities caps_;
  EnabledFeatures enabled_;
  std::unique_ptr<Queue> compute_;
  std::unique_ptr<Queue> transfer_;
  std::unique_ptr<Queue> second_transfer_;
  detail::DeviceExtensionFns fns_;
  std::once_flag kernels_once_;
  std::unique_ptr<KernelSet> kernels_;
};

}  // namespace tpar::inline v0
