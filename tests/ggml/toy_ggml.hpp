// A model of what ggml's meta backend drives, without ggml: opaque backend handles, each
// a "toy" Vulkan backend that owns its device and queue (created by the host, as
// ggml-vulkan creates its own), submits its own work on its own timeline and chains the
// done points tpar hands it; tensors with a type, shape, strides, flags and a place in a
// buffer; and the traits that describe them to tpar::ggml.
#pragma once

#include <doctest/doctest.h>
#include <tpar/comm/stream.hpp>
#include <tpar/integrations/ggml.hpp>

#include "support/vk_env.hpp"

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace toy {

using namespace std::chrono_literals;

inline void vk_ok(vk::Result r, const char* what) {
  if (r != vk::Result::eSuccess) FAIL(what << ": " << vk::to_string(r));
}

inline vk::Semaphore make_timeline(vk::Device device) {
  vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
  vk::SemaphoreCreateInfo info({}, &type);
  vk::Semaphore s;
  vk_ok(device.createSemaphore(&info, nullptr, &s), "vkCreateSemaphore");
  return s;
}

// A host-visible buffer on one device (what a ggml backend buffer would be).
struct Buffer {
  vk::Device device;
  vk::Buffer buffer;
  vk::DeviceMemory memory;
  std::size_t size = 0;
  char* mapped = nullptr;

  Buffer(vk::Device d, vk::PhysicalDevice physical, std::size_t bytes) : device(d), size(bytes) {
    vk::BufferCreateInfo info({}, bytes, vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                                             vk::BufferUsageFlagBits::eTransferDst);
    vk_ok(device.createBuffer(&info, nullptr, &buffer), "vkCreateBuffer");
    vk::MemoryRequirements req;
    device.getBufferMemoryRequirements(buffer, &req);
    const auto props = physical.getMemoryProperties();
    const auto want = vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
    std::uint32_t type = ~0u;
    for (std::uint32_t i = 0; i < props.memoryTypeCount && type == ~0u; ++i)
      if (((req.memoryTypeBits >> i) & 1u) && (props.memoryTypes[i].propertyFlags & want) == want) type = i;
    REQUIRE(type != ~0u);
    vk::MemoryAllocateInfo alloc(req.size, type);
    vk_ok(device.allocateMemory(&alloc, nullptr, &memory), "vkAllocateMemory");
    vk_ok(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(device, buffer, memory, 0)), "vkBindBufferMemory");
    void* p = nullptr;
    vk_ok(device.mapMemory(memory, 0, VK_WHOLE_SIZE, {}, &p), "vkMapMemory");
    mapped = static_cast<char*>(p);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    device.unmapMemory(memory);
    device.destroyBuffer(buffer);
    device.freeMemory(memory);
  }
  float* floats(std::size_t byte_offset) const { return reinterpret_cast<float*>(mapped + byte_offset); }
  std::vector<float> read(std::size_t byte_offset, std::size_t count) const {
    return std::vector<float>(floats(byte_offset), floats(byte_offset) + count);
  }
  void write(std::size_t byte_offset, const std::vector<float>& v) const { std::memcpy(mapped + byte_offset, v.data(), v.size() * 4); }
};

enum class Type { f32, f16 };
inline constexpr std::uint32_t flag_compute = 1;  // models GGML_TENSOR_FLAG_COMPUTE
inline constexpr std::uint32_t flag_poison = 2;   // makes PoisonTraits::view throw

inline std::size_t type_size(Type t) { return t == Type::f32 ? 4 : 2; }

// A tensor as ggml describes one: type, shape, byte strides, flags, and where it lies.
struct Tensor {
  Type type = Type::f32;
  std::int64_t ne[4] = {0, 1, 1, 1};
  std::size_t nb[4] = {0, 0, 0, 0};
  std::uint32_t flags = flag_compute;
  Buffer* buffer = nullptr;  // null: host memory, not a buffer of any device
  std::size_t offset = 0;

  std::int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  bool contiguous() const {
    std::size_t expect = type_size(type);
    for (int i = 0; i < 4; ++i) {
      if (ne[i] != 1 && nb[i] != expect) return false;
      expect *= static_cast<std::size_t>(ne[i]);
    }
    return true;
  }
  std::size_t nbytes() const { return static_cast<std::size_t>(nelements()) * type_size(type); }
};

// A contiguous tensor of ne0 x ne1 elements at `offset` of `buffer`.
inline Tensor tensor(Buffer* buffer, std::size_t offset, std::int64_t ne0, std::int64_t ne1 = 1, Type type = Type::f32) {
  Tensor t;
  t.type = type;
  t.ne[0] = ne0;
  t.ne[1] = ne1;
  t.nb[0] = type_size(type);
  t.nb[1] = t.nb[0] * static_cast<std::size_t>(ne0);
  t.nb[2] = t.nb[3] = t.nb[1] * static_cast<std::size_t>(ne1);
  t.buffer = buffer;
  t.offset = offset;
  return t;
}

// One toy backend: a device, its queue (locked by the backend's own mutex), a timeline
// its submissions signal, and the done point its next submission must wait for.
struct Backend {
  enum Kind { ours, foreign };
  Kind kind = ours;
  std::uint32_t index = 0;
  vk::Instance instance;
  vk::PhysicalDevice physical;
  vk::Device device;
  std::uint32_t family = 0;
  vk::Queue queue;
  std::mutex queue_mutex;
  std::atomic<int> queue_locks{0};  // how often tpar took the queue through the backend's hook
  std::vector<std::string> extensions;
  bool f16 = false, storage16 = false, update_after_bind = false;
  std::size_t storage_alignment = 4;

  vk::Semaphore timeline;
  std::uint64_t submitted = 0;
  tpar::TimelinePoint pending;  // what tpar handed over; the next submission waits for it
  int handed = 0;               // wait_for calls with a point
  int forgets = 0;              // wait_for calls with a null point
  vk::CommandPool pool;
  std::vector<std::pair<vk::CommandBuffer, std::uint64_t>> in_flight;
  std::vector<std::thread> workers;
  std::atomic<int> worker_errors{0};
  // Where the host runs with streams (HostOptions::streams): every submission goes through
  // it, and order against tpar's work is the queue's.
  std::unique_ptr<tpar::Stream> stream;

  Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;
  ~Backend() {
    join_workers();
    stream.reset();
    if (!device) return;
    (void)VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(device);
    for (auto& [cb, v] : in_flight) device.freeCommandBuffers(pool, 1, &cb);
    device.destroyCommandPool(pool);
    device.destroySemaphore(timeline);
    device.destroy();
  }

  // One "graph": records `record` into a command buffer and submits it after the pending
  // done point (and `gate`, when given), signalling the backend's timeline.
  void compute(const std::function<void(vk::CommandBuffer)>& record, tpar::TimelinePoint gate = {}) {
    recycle();
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
    vk_ok(device.allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_ok(cb.begin(&bi), "vkBeginCommandBuffer");
    // Earlier work on this queue (an earlier graph, tpar's kernels) happens before.
    const vk::MemoryBarrier before(vk::AccessFlagBits::eMemoryWrite | vk::AccessFlagBits::eMemoryRead,
                                   vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eTransfer, {}, 1, &before, 0, nullptr, 0,
                       nullptr);
    record(cb);
    // For the host only: later GPU work (tpar's) is ordered after this graph by the
    // timeline point this submission signals, nothing else.
    const vk::MemoryBarrier after(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {}, 1, &after, 0, nullptr, 0, nullptr);
    vk_ok(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");

    std::vector<vk::Semaphore> waits;
    std::vector<std::uint64_t> wait_values;
    std::vector<vk::PipelineStageFlags> stages;
    // On a stream, tpar's done point is behind this work on the queue already.
    for (const auto& p : {stream ? tpar::TimelinePoint{} : pending, gate})
      if (p) {
        waits.push_back(p.semaphore);
        wait_values.push_back(p.value);
        stages.push_back(vk::PipelineStageFlagBits::eAllCommands);
      }
    const std::uint64_t signal_value = submitted + 1;
    vk::TimelineSemaphoreSubmitInfo ti(static_cast<std::uint32_t>(wait_values.size()), wait_values.data(), 1, &signal_value);
    vk::SubmitInfo si(static_cast<std::uint32_t>(waits.size()), waits.data(), stages.data(), 1, &cb, 1, &timeline, &ti);
    if (stream) {
      stream->submit({si});
    } else {
      std::lock_guard lock(queue_mutex);
      vk_ok(queue.submit(1, &si, vk::Fence{}), "vkQueueSubmit");
    }
    submitted = signal_value;
    pending = {};  // consumed: this submission waits for it
    in_flight.emplace_back(cb, signal_value);
  }

  // A subgraph that runs off this backend's queue (another engine; here a host thread):
  // once the pending done point is reached it hands the tensor's current contents (the
  // last sum) to `read`, then, after `delay`, writes `partial` at `offset` of `buffer` and
  // signals the backend's timeline. Its ready point exists before the work is done, so
  // only a GPU wait on that point orders tpar's read after the write.
  void compute_later(Buffer& buffer, std::size_t offset, std::vector<float> partial, std::chrono::milliseconds delay,
                     std::function<void(std::vector<float>)> read = {}) {
    const std::uint64_t value = ++submitted;
    const tpar::TimelinePoint after = pending;
    pending = {};
    workers.emplace_back([this, &buffer, offset, partial = std::move(partial), delay, read = std::move(read), after, value] {
      if (after) {
        const vk::Semaphore s = after.semaphore;
        if (tpar::wait(device, std::span(&s, 1), std::span(&after.value, 1), tpar_test::test_timeout) !=
            vk::Result::eSuccess)
          ++worker_errors;
      }
      if (read) read(buffer.read(offset, partial.size()));
      std::this_thread::sleep_for(delay);
      buffer.write(offset, partial);
      vk::SemaphoreSignalInfo si(timeline, value);
      if (device.signalSemaphore(&si) != vk::Result::eSuccess) ++worker_errors;
    });
  }

  void join_workers() {
    for (auto& w : workers) w.join();
    workers.clear();
  }

  // ggml's synchronize: everything this backend submitted, and the done point it still
  // holds, has finished (bounded).
  void synchronize() {
    join_workers();
    CHECK(worker_errors == 0);
    if (stream) stream->flush();
    std::vector<vk::Semaphore> sems{timeline};
    std::vector<std::uint64_t> values{submitted};
    if (pending) {
      sems.push_back(pending.semaphore);
      values.push_back(pending.value);
    }
    REQUIRE(tpar::wait(device, sems, values, tpar_test::test_timeout) == vk::Result::eSuccess);
    pending = {};
    recycle();
  }

  void recycle() {
    std::uint64_t now = 0;
    vk_ok(device.getSemaphoreCounterValue(timeline, &now), "vkGetSemaphoreCounterValue");
    std::erase_if(in_flight, [&](auto& e) {
      if (e.second > now) return false;
      device.freeCommandBuffers(pool, 1, &e.first);
      return true;
    });
  }
};

// Recording helpers for graphs.
inline void copy(vk::CommandBuffer cb, const Buffer& src, std::size_t src_off, const Buffer& dst, std::size_t dst_off, std::size_t bytes) {
  const vk::BufferCopy region(src_off, dst_off, bytes);
  cb.copyBuffer(src.buffer, dst.buffer, 1, &region);
}
inline void fill(vk::CommandBuffer cb, const Buffer& dst, std::size_t off, std::size_t bytes, std::uint32_t word) {
  cb.fillBuffer(dst.buffer, off, bytes, word);
}
inline void fill(vk::CommandBuffer cb, const Buffer& dst, std::size_t off, std::size_t bytes, float value) {
  std::uint32_t word;
  std::memcpy(&word, &value, 4);
  cb.fillBuffer(dst.buffer, off, bytes, word);
}
// Transfer writes/reads before, transfer writes/reads after (within one graph).
inline void transfer_barrier(vk::CommandBuffer cb) {
  const vk::MemoryBarrier b(vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eTransferRead,
                            vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eTransferRead);
  cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer, {}, 1, &b, 0, nullptr, 0, nullptr);
}

struct HostOptions {
  std::vector<Backend::Kind> kinds;        // per backend (default: all ours)
  bool list_external_memory_host = true;   // report VK_EXT_external_memory_host as enabled
  bool streams = false;                    // submit through a tpar::Stream (StreamTraits)
};

// What the application owns: one instance (validation with synchronization validation
// on), and the toy backends, each with a device of its own. On lavapipe one physical
// device is opened once per backend; with TPAR_TEST_DEVICES=gpus each backend gets a GPU.
class Host {
 public:
  explicit Host(std::uint32_t n, HostOptions options = {}) {
    tpar::detail::ensure_loader("");
    const bool validation = !std::getenv("TPAR_TEST_NO_VALIDATION");
    std::vector<const char*> layers, exts{VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    if (validation) {
      layers.push_back("VK_LAYER_KHRONOS_validation");
      exts.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    }
    vk::ApplicationInfo app("toy-ggml", 1, "toy-ggml", 1, VK_API_VERSION_1_2);
    vk::InstanceCreateInfo info({}, &app, layers, exts);
    const vk::ValidationFeatureEnableEXT enables[] = {vk::ValidationFeatureEnableEXT::eSynchronizationValidation};
    vk::ValidationFeaturesEXT features(enables, {});
    if (validation) info.pNext = &features;
    vk_ok(vk::createInstance(&info, nullptr, &instance_), "vkCreateInstance");
    tpar::detail::bind_dispatcher(instance_, true);

    auto create = tpar::detail::load_instance_fn<PFN_vkCreateDebugUtilsMessengerEXT>(instance_, "vkCreateDebugUtilsMessengerEXT");
    VkDebugUtilsMessengerCreateInfoEXT mi{};
    mi.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    mi.pfnUserCallback = [](VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
                            const VkDebugUtilsMessengerCallbackDataEXT* d, void* user) -> VkBool32 {
      static_cast<tpar_test::ValidationLog*>(user)->add({vk::DebugUtilsMessageSeverityFlagBitsEXT(severity),
                                                        d->pMessageIdName ? d->pMessageIdName : "", d->pMessage ? d->pMessage : ""});
      return VK_FALSE;
    };
    mi.pUserData = &log_;
    vk_ok(vk::Result(create(instance_, &mi, nullptr, &messenger_)), "vkCreateDebugUtilsMessengerEXT");

    auto physicals = tpar::detail::physical_devices(instance_);
    REQUIRE(!physicals.empty());
    std::vector<vk::PhysicalDevice> picked;
    if (tpar_test::use_real_gpus()) {
      const bool all = tpar_test::test_devices() == "all";  // GPUs and CPU devices, as listed
      for (auto p : physicals)
        if (all || tpar::query_capabilities(p).is_gpu()) picked.push_back(p);
      if (picked.size() < n) {
        MESSAGE("[skipped] " << n << " devices are needed, " << picked.size() << " found");
        return;
      }
    } else {
      picked.assign(n, physicals[0]);
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      const auto kind = i < options.kinds.size() ? options.kinds[i] : Backend::ours;
      backends_.push_back(open(picked[i], i, kind, options));
    }
  }
  Host(const Host&) = delete;
  Host& operator=(const Host&) = delete;
  ~Host() {
    backends_.clear();
    check_validation();
    auto destroy = tpar::detail::load_instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>(instance_, "vkDestroyDebugUtilsMessengerEXT");
    destroy(instance_, messenger_, nullptr);
    instance_.destroy();
  }

  bool ok() const { return !backends_.empty(); }
  std::size_t size() const { return backends_.size(); }
  Backend& operator[](std::size_t i) { return *backends_[i]; }
  // The handles ggml would pass to comm_init.
  std::vector<Backend*> handles() {
    std::vector<Backend*> h;
    for (auto& b : backends_) h.push_back(b.get());
    return h;
  }
  void synchronize() {
    for (auto& b : backends_) b->synchronize();
  }

  void check_validation() {
    std::lock_guard lock(log_.mutex);
    for (const auto& e : log_.errors) FAIL_CHECK("validation: " << e);
    log_.errors.clear();
    if (log_.layer_self_reports)
      MESSAGE("the validation layer (older than 1.3.296) reported its own state-tracking timeout " << log_.layer_self_reports
                                                                                                  << " time(s); see docs/testing.md");
    log_.layer_self_reports = 0;
  }

 private:
  std::unique_ptr<Backend> open(vk::PhysicalDevice physical, std::uint32_t index, Backend::Kind kind, const HostOptions& options) {
    auto b = std::make_unique<Backend>();
    const auto caps = tpar::query_capabilities(physical);
    b->kind = kind;
    b->index = index;
    b->instance = instance_;
    b->physical = physical;
    b->family = caps.compute_family;
    b->storage_alignment = std::max<std::size_t>(4, caps.min_storage_offset_alignment);
    std::vector<const char*> exts;
    if (caps.external_memory_host) {
      exts.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
      if (options.list_external_memory_host) b->extensions.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    }
    if (caps.external_semaphore_fd) {
      exts.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
      b->extensions.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
    }
    vk::PhysicalDeviceFeatures2 f2;
    vk::PhysicalDeviceVulkan11Features f11;
    vk::PhysicalDeviceVulkan12Features f12;
    f2.pNext = &f11;
    f11.pNext = &f12;
    f12.timelineSemaphore = VK_TRUE;
    f12.shaderFloat16 = caps.shader_float16;
    f11.storageBuffer16BitAccess = caps.storage_16bit;
    f12.descriptorBindingStorageBufferUpdateAfterBind = caps.update_after_bind;
    b->f16 = caps.shader_float16;
    b->storage16 = caps.storage_16bit;
    b->update_after_bind = caps.update_after_bind;
    const float prio = 1.0f;
    vk::DeviceQueueCreateInfo q({}, b->family, 1, &prio);
    vk::DeviceCreateInfo di({}, 1, &q, 0, nullptr, static_cast<std::uint32_t>(exts.size()), exts.data(), nullptr, &f2);
    vk_ok(physical.createDevice(&di, nullptr, &b->device), "vkCreateDevice");
    b->queue = b->device.getQueue(b->family, 0);
    b->timeline = make_timeline(b->device);
    vk::CommandPoolCreateInfo pi({}, b->family);
    vk_ok(b->device.createCommandPool(&pi, nullptr, &b->pool), "vkCreateCommandPool");
    if (options.streams) {
      Backend* raw = b.get();
      b->stream = std::make_unique<tpar::Stream>(b->device, b->queue, b->family,
                                                 tpar::QueueLock{[raw] { raw->queue_mutex.lock(); },
                                                                 [raw] { raw->queue_mutex.unlock(); }});
    }
    return b;
  }

  tpar_test::ValidationLog log_;
  vk::Instance instance_;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  std::vector<std::unique_ptr<Backend>> backends_;
};

// The traits a ggml Vulkan backend would write, for the toy backend.
struct Traits {
  using backend_t = Backend*;
  using tensor_t = Tensor;

  static bool is_ours(backend_t b) { return b->kind == Backend::ours; }

  static tpar::AdoptedDevice device(backend_t b) {
    tpar::AdoptedDevice a;
    a.instance = b->instance;
    a.physical = b->physical;
    a.device = b->device;
    a.compute_queue = b->queue;
    a.compute_family = b->family;
    a.compute_index = 0;
    a.compute_lock = {[b] {
                        b->queue_mutex.lock();
                        ++b->queue_locks;
                      },
                      [b] { b->queue_mutex.unlock(); }};
    a.enabled_extensions = b->extensions;
    a.shader_float16_enabled = b->f16;
    a.storage_16bit_enabled = b->storage16;
    a.update_after_bind_enabled = b->update_after_bind;
    return a;
  }

  static tpar::ggml::TensorView view(backend_t b, tensor_t* t) {
    tpar::ggml::TensorView v;
    v.elements = t->nelements();
    v.is_f32 = t->type == Type::f32;
    v.is_contiguous = t->contiguous();
    v.computed = (t->flags & flag_compute) != 0;
    if (t->buffer && t->buffer->device == b->device) {
      v.buffer = t->buffer->buffer;
      v.offset = t->offset;
      v.buffer_size = t->buffer->size;
    }
    return v;
  }

  static tpar::TimelinePoint ready(backend_t b) { return {b->timeline, b->submitted}; }

  static void wait_for(backend_t b, const tpar::TimelinePoint& done) noexcept {
    b->pending = done;
    if (done) ++b->handed;
    else ++b->forgets;
  }

  static tpar::Options options() {
    tpar::Options o;
    o.timeout = tpar_test::test_timeout;
    return o;
  }
};

// The same backend with its compute queue a tpar::Stream (Host built with streams).
struct StreamTraits : Traits {
  static tpar::Stream* stream(backend_t b) { return b->stream.get(); }
};

// The hooks as ggml's meta backend sees them: looked up by name, called through C
// function pointers of ggml's signatures.
using comm_init_t = void* (*)(Backend** backends, std::size_t n_backends);
using comm_free_t = void (*)(void* comm_ctx);
using comm_allreduce_tensor_t = bool (*)(void* comm_ctx, Tensor** tensors);

template <class T = Traits>
struct Meta {
  comm_init_t init = reinterpret_cast<comm_init_t>(tpar::ggml::comm_proc_address<T>("ggml_backend_comm_init"));
  comm_free_t free = reinterpret_cast<comm_free_t>(tpar::ggml::comm_proc_address<T>("ggml_backend_comm_free"));
  comm_allreduce_tensor_t allreduce =
      reinterpret_cast<comm_allreduce_tensor_t>(tpar::ggml::comm_proc_address<T>("ggml_backend_comm_allreduce_tensor"));
  void* ctx = nullptr;

  explicit Meta(Host& host) {
    auto h = host.handles();
    ctx = init(h.data(), h.size());
  }
  Meta(const Meta&) = delete;
  Meta& operator=(const Meta&) = delete;
  ~Meta() { close(); }
  void close() {
    free(ctx);
    ctx = nullptr;
  }
  tpar::ggml::GgmlComm<T>& comm() { return *static_cast<tpar::ggml::GgmlComm<T>*>(ctx); }
  bool reduce(std::vector<Tensor*> tensors) { return allreduce(ctx, tensors.data()); }
};

// Collects what tpar logs while it lives.
struct LogCapture {
  std::mutex mutex;
  std::vector<std::pair<tpar::LogLevel, std::string>> lines;
  LogCapture() {
    tpar::set_log_sink([this](tpar::LogLevel level, std::string_view text) {
      std::lock_guard lock(mutex);
      lines.emplace_back(level, std::string(text));
    });
  }
  ~LogCapture() { tpar::set_log_sink(nullptr); }
  bool has(tpar::LogLevel level, const std::string& part) {
    std::lock_guard lock(mutex);
    for (const auto& [l, t] : lines)
      if (l == level && t.find(part) != std::string::npos) return true;
    return false;
  }
  std::string all() {
    std::lock_guard lock(mutex);
    std::string s;
    for (const auto& [l, t] : lines) s += std::string(tpar::to_string(l)) + ": " + t + "\n";
    return s;
  }
};

}  // namespace toy
