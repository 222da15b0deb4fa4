// Trace — a stretch of a program's work on one timeline: what the host's threads were
// inside of (host spans), and when each command buffer submitted through a traced queue
// ran on its GPU (a timestamp before and after it), on the host's clock. Written as
// Chrome trace-event JSON (ui.perfetto.dev, chrome://tracing) and drawn by
// scripts/timeline.py. Off, and costing one relaxed load per submission, unless the
// environment names a file:
//
//   TPAR_TRACE=trace.json    where the window goes when it closes
//   TPAR_TRACE_SKIP=N        windows opened by a host (the ggml glue) skip its first N
//   TPAR_TRACE_SPAN=M        steps (synchronizes) and cover the next M (defaults 16, 2)
//   TPAR_TRACE_GPU=0         host spans only: no timestamps, so the host's figures are
//                            those of an untraced run (a span costs two clock reads)
//
// A host opens and closes the window (begin_window(), end_window(), at points where its
// GPUs are idle); only what happens inside is recorded. Timestamps cost a tiny command
// buffer before and after each traced one and are meant for looking, not for timing runs.
#pragma once

#include <tpar/core/log.hpp>
#include <tpar/detail/dispatch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tpar::inline v0 {

// What the trace needs to know of a queue to time work on it.
struct TraceQueue {
  vk::Device device;
  vk::Queue queue;
  std::uint32_t family = 0;
  // The family's timestampValidBits; 0: not timed. Only queues of a family with compute
  // (or graphics) are timed: on NVIDIA's driver (580) recording the timestamp command
  // buffers for a transfer-only family of ggml-vulkan's devices aborted the process.
  std::uint32_t timestamp_bits = 0;
  double period_ns = 1;              // timestampPeriod
  // vkGetCalibratedTimestampsEXT where the device enabled VK_EXT_calibrated_timestamps;
  // otherwise the clocks are related by one timestamp whose submission the host brackets.
  PFN_vkGetCalibratedTimestampsEXT calibrate = nullptr;
  std::string name;  // how the timeline names the device ("device 0", "Vulkan1")
  std::string work = "host";  // what command buffers tpar did not record are called
  // Submits under the queue's lock (the host's, for adopted queues), for that bracket.
  std::function<vk::Result(std::span<const vk::SubmitInfo>, vk::Fence)> submit;
};

class Trace {
 public:
  static Trace& instance() {
    static Trace t;
    return t;
  }

  // TPAR_TRACE was given.
  bool enabled() const { return !path_.empty(); }
  // Inside the window: spans, counts and GPU times are being recorded.
  bool on() const { return on_.load(std::memory_order_relaxed); }
  std::uint32_t skip() const { return skip_; }
  std::uint32_t span_steps() const { return span_; }
  const std::string& path() const { return path_; }

  // A queue work is submitted to. Where tracing is enabled, makes its timestamp command
  // buffers (once per VkQueue; later attaches count users). True when the queue is timed:
  // then detach() it before its device goes.
  bool attach(const TraceQueue& q) {
    if (!enabled() || !gpu_ || !q.timestamp_bits) return false;
    std::lock_guard lock(mutex_);
    for (auto& s : queues_)
      if (s->info.queue == q.queue) {
        ++s->users;
        return true;
      }
    auto s = std::make_unique<QueueState>();
    s->info = q;
    s->users = 1;
    log(LogLevel::debug, "TPAR_TRACE: will time " + q.name + ", queue family " + std::to_string(q.family));
    queues_.push_back(std::move(s));
    return true;
  }

  // The queue (or its device) is going away: its stamps go first (an open window closes
  // and is written now).
  void detach(vk::Queue queue) {
    if (!enabled()) return;
    if (on()) end_window("a queue of the trace went away");
    std::lock_guard lock(mutex_);
    for (auto it = queues_.begin(); it != queues_.end(); ++it)
      if ((*it)->info.queue == queue) {
        if (--(*it)->users <= 0) {
          destroy_stamps(**it);
          queues_.erase(it);
        }
        return;
      }
  }

  // A command buffer tpar recorded: what the timeline calls it (others are the host's).
  void label(vk::CommandBuffer cb, std::string name) {
    if (!enabled()) return;
    std::lock_guard lock(mutex_);
    labels_[static_cast<VkCommandBuffer>(cb)] = std::move(name);
  }
  // The command buffer is freed (its handle may come back as someone else's).
  void unlabel(vk::CommandBuffer cb) {
    if (!enabled()) return;
    std::lock_guard lock(mutex_);
    labels_.erase(static_cast<VkCommandBuffer>(cb));
  }

  // Opens the window: makes every attached queue's timestamp command buffers (they exist
  // only while a window is open).
  void begin_window() {
    if (!enabled() || on()) return;
    std::lock_guard lock(mutex_);
    events_.clear();
    stamps_.clear();
    counts_.clear();
    steps_ = 0;
    for (auto& q : queues_) {
      q->next = 0;
      if (q->pool) continue;
      log(LogLevel::debug, "TPAR_TRACE: " + std::to_string(capacity_) + " timestamps for " + q->info.name + ", queue family " +
                               std::to_string(q->info.family));
      try {
        make_stamps(*q);
      } catch (const std::exception& e) {
        log(LogLevel::warning, std::string("TPAR_TRACE: cannot time ") + q->info.name + ": " + e.what());
        destroy_stamps(*q);
      }
    }
    origin_ = now_ns();
    on_.store(true, std::memory_order_relaxed);
    log(LogLevel::debug, "TPAR_TRACE: window opened");
  }

  // A step of the host's (a token) ended inside the window.
  void step() {
    if (on()) steps_.fetch_add(1, std::memory_order_relaxed);
  }

  // Closes the window: reads the GPU times (every traced submission must have finished;
  // the read is bounded) and writes the file.
  void end_window(const std::string& why = {}) {
    if (!on()) return;
    on_.store(false, std::memory_order_relaxed);
    log(LogLevel::debug, "TPAR_TRACE: window closing (" + why + ")");
    std::lock_guard lock(mutex_);
    write(why);
    for (auto& q : queues_) destroy_stamps(*q);
  }

  // RAII: a host span on the calling thread, recorded when it ends inside the window.
  class Span {
   public:
    Span() = default;
    Span(Trace* t, const char* name, int device) : t_(t), name_(name), device_(device), begin_(now_ns()) {}
    Span(Span&& o) noexcept : t_(std::exchange(o.t_, nullptr)), name_(o.name_), device_(o.device_), begin_(o.begin_) {}
    Span& operator=(Span&&) = delete;
    ~Span() {
      if (t_ && t_->on()) t_->host_event(name_, device_, begin_, now_ns());
    }

   private:
    Trace* t_ = nullptr;
    const char* name_ = nullptr;
    int device_ = -1;
    std::int64_t begin_ = 0;
  };
  // `name` must outlive the window (a string literal).
  Span span(const char* name, int device = -1) { return on() ? Span(this, name, device) : Span(); }

  // Adds to a counter of the window ("submissions", "semaphore waits" on a device).
  void count(const std::string& what, const std::string& device, std::uint64_t n = 1) {
    if (!on()) return;
    std::lock_guard lock(mutex_);
    counts_[device + "|" + what] += n;
  }

  // The batches to submit in place of `infos` on `queue`: each command buffer between two
  // timestamps. `keep` holds what the returned infos point to until they are submitted.
  struct Storage {
    std::vector<vk::SubmitInfo> infos;
    std::vector<std::vector<vk::CommandBuffer>> buffers;
  };
  std::span<const vk::SubmitInfo> stamp(vk::Queue queue, std::span<const vk::SubmitInfo> infos, Storage& keep) {
    if (!on()) return infos;
    std::lock_guard lock(mutex_);
    QueueState* q = find(queue);
    if (!q) return infos;
    keep.infos.assign(infos.begin(), infos.end());
    keep.buffers.assign(infos.size(), {});
    const std::int64_t host = now_ns();
    for (std::size_t i = 0; i < infos.size(); ++i) {
      auto& cbs = keep.buffers[i];
      for (std::uint32_t k = 0; k < infos[i].commandBufferCount; ++k) {
        const vk::CommandBuffer cb = infos[i].pCommandBuffers[k];
        if (q->next + 2 > q->capacity) {
          truncated_ = true;
          cbs.push_back(cb);
          continue;
        }
        const auto it = labels_.find(static_cast<VkCommandBuffer>(cb));
        stamps_.push_back({q, q->next, it == labels_.end() ? q->info.work : it->second, host,
                           k == 0 ? infos[i].waitSemaphoreCount : 0u});
        cbs.push_back(q->stamps[q->next++]);
        cbs.push_back(cb);
        cbs.push_back(q->stamps[q->next++]);
      }
      keep.infos[i].commandBufferCount = static_cast<std::uint32_t>(cbs.size());
      keep.infos[i].pCommandBuffers = cbs.data();
    }
    return keep.infos;
  }

  static std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }

  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

 private:
  struct QueueState {
    TraceQueue info;
    int users = 0;
    vk::CommandPool pool;
    vk::QueryPool queries;
    std::vector<vk::CommandBuffer> stamps;  // stamps[i] resets and writes query i
    std::uint32_t capacity = 0;             // stamps for submissions; one more for the clock anchor
    std::uint32_t next = 0;
  };
  struct Stamp {
    QueueState* queue;
    std::uint32_t first;  // queries first (before) and first + 1 (after)
    std::string label;
    std::int64_t submitted_ns;
    std::uint32_t waits;
  };
  struct HostEvent {
    const char* name;
    int device;
    std::uint32_t thread;
    std::int64_t begin, end;
  };

  Trace() {
    const char* p = std::getenv("TPAR_TRACE");
    if (p && *p) path_ = p;
    skip_ = env_number("TPAR_TRACE_SKIP", 16);
    span_ = std::max<std::uint32_t>(1, env_number("TPAR_TRACE_SPAN", 2));
    capacity_ = std::max<std::uint32_t>(64, env_number("TPAR_TRACE_STAMPS", 8192));
    gpu_ = env_number("TPAR_TRACE_GPU", 1) != 0;
  }
  ~Trace() {
    // Devices are gone by now (or leaked with their stamps): nothing Vulkan is touched.
    if (on()) {
      on_.store(false);
      std::lock_guard lock(mutex_);
      write("the program ended with the window open");
    }
  }

  static std::uint32_t env_number(const char* name, std::uint32_t fallback) {
    const char* v = std::getenv(name);
    if (!v || !*v) return fallback;
    char* end = nullptr;
    const unsigned long n = std::strtoul(v, &end, 10);
    if (*end || n > 1000000) {
      log(LogLevel::warning, std::string(name) + "=" + v + " is not a count; " + std::to_string(fallback) + " is used");
      return fallback;
    }
    return static_cast<std::uint32_t>(n);
  }

  QueueState* find(vk::Queue queue) {
    for (auto& q : queues_)
      if (q->info.queue == queue) return q->pool ? q.get() : nullptr;
    return nullptr;
  }

  void make_stamps(QueueState& s) {
    const vk::Device d = s.info.device;
    vk::CommandPoolCreateInfo pool_info({}, s.info.family);
    detail::check(d.createCommandPool(&pool_info, nullptr, &s.pool), "vkCreateCommandPool (trace)");
    s.capacity = capacity_;
    vk::QueryPoolCreateInfo qi({}, vk::QueryType::eTimestamp, s.capacity + 1);
    detail::check(d.createQueryPool(&qi, nullptr, &s.queries), "vkCreateQueryPool (trace)");
    s.stamps.resize(s.capacity + 1);
    vk::CommandBufferAllocateInfo ai(s.pool, vk::CommandBufferLevel::ePrimary, s.capacity + 1);
    detail::check(d.allocateCommandBuffers(&ai, s.stamps.data()), "vkAllocateCommandBuffers (trace)");
    for (std::uint32_t i = 0; i <= s.capacity; ++i) {
      const vk::CommandBuffer cb = s.stamps[i];
      vk::CommandBufferBeginInfo begin;
      detail::check(cb.begin(&begin), "vkBeginCommandBuffer (trace)");
      cb.resetQueryPool(s.queries, i, 1);
      cb.writeTimestamp(vk::PipelineStageFlagBits::eAllCommands, s.queries, i);
      detail::check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer (trace)");
    }
  }

  static void destroy_stamps(QueueState& s) {
    const vk::Device d = s.info.device;
    if (s.queries) d.destroyQueryPool(s.queries);
    if (s.pool) d.destroyCommandPool(s.pool);  // frees its command buffers
    s.queries = nullptr;
    s.pool = nullptr;
    s.stamps.clear();
    s.capacity = 0;
  }

  void host_event(const char* name, int device, std::int64_t begin, std::int64_t end) {
    std::lock_guard lock(mutex_);
    const auto id = std::this_thread::get_id();
    auto it = threads_.find(id);
    if (it == threads_.end()) it = threads_.emplace(id, static_cast<std::uint32_t>(threads_.size())).first;
    events_.push_back({name, device, it->second, begin, end});
  }

  // Host ns minus device ns for queue q, and how far off that may be (ns).
  std::pair<double, double> clock_offset(QueueState& q) {
    const auto& info = q.info;
    if (info.calibrate) {
      const VkCalibratedTimestampInfoEXT which[2] = {
          {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_DEVICE_EXT},
          {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
      std::uint64_t ts[2] = {0, 0}, deviation = 0;
      if (info.calibrate(info.device, 2, which, ts, &deviation) == VK_SUCCESS)
        return {double(ts[1]) - double(ts[0]) * info.period_ns, double(deviation)};
    }
    // One timestamp, its submission and the host's sight of its end bracketing it.
    if (!info.submit) return {0, -1};
    vk::Fence fence;
    const vk::FenceCreateInfo fi;
    if (info.device.createFence(&fi, nullptr, &fence) != vk::Result::eSuccess) return {0, -1};
    const vk::SubmitInfo si(0, nullptr, nullptr, 1, &q.stamps[q.capacity]);
    const std::int64_t t0 = now_ns();
    double offset = 0, error = -1;
    if (info.submit(std::span(&si, 1), fence) == vk::Result::eSuccess &&
        info.device.waitForFences(1, &fence, VK_TRUE, 1'000'000'000) == vk::Result::eSuccess) {
      const std::int64_t t1 = now_ns();
      std::uint64_t v[2] = {0, 0};
      if (info.device.getQueryPoolResults(q.queries, q.capacity, 1, sizeof v, v, sizeof v,
                                          vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWithAvailability) ==
              vk::Result::eSuccess &&
          v[1]) {
        offset = 0.5 * double(t0 + t1) - double(v[0]) * info.period_ns;
        error = 0.5 * double(t1 - t0);
      }
    }
    info.device.destroyFence(fence);
    return {offset, error};
  }

  static std::string escape(std::string_view s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\') out += '\\';
      if (static_cast<unsigned char>(c) >= 0x20) out += c;
    }
    return out;
  }

  void write(const std::string& why) {
    // GPU times: every stamp's pair of queries, polled until available (bounded).
    struct Gpu {
      std::uint64_t begin = 0, end = 0;
      bool ok = false;
    };
    std::vector<Gpu> gpu(stamps_.size());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    std::map<QueueState*, std::pair<double, double>> offsets;
    for (auto& q : queues_)
      if (q->next) {
        log(LogLevel::debug, "TPAR_TRACE: relating " + q->info.name + "'s clock to the host's" +
                                 (q->info.calibrate ? " (calibrated timestamps)" : " (a bracketed timestamp)"));
        offsets[q.get()] = clock_offset(*q);
      }
    bool missing = true;
    while (missing) {
      missing = false;
      for (std::size_t i = 0; i < stamps_.size(); ++i) {
        if (gpu[i].ok) continue;
        const Stamp& s = stamps_[i];
        std::uint64_t v[4] = {0, 0, 0, 0};
        (void)s.queue->info.device.getQueryPoolResults(s.queue->queries, s.first, 2, sizeof v, v, 2 * sizeof(std::uint64_t),
                                                       vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWithAvailability);
        if (v[1] && v[3]) gpu[i] = {v[0], v[2], true};
        else missing = true;
      }
      if (missing && std::chrono::steady_clock::now() > deadline) break;
      if (missing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::FILE* f = std::fopen(path_.c_str(), "w");
    if (!f) {
      log(LogLevel::warning, "TPAR_TRACE: cannot write " + path_);
      return;
    }
    auto us = [&](double ns) { return (ns - double(origin_)) / 1e3; };
    std::fprintf(f, "{\"traceEvents\":[\n");
    bool first = true;
    auto sep = [&] {
      if (!first) std::fprintf(f, ",\n");
      first = false;
    };
    // Processes: 0 the host, 1.. the traced queues' devices (by name, in attach order).
    std::vector<std::string> devices;
    auto device_pid = [&](const std::string& name) {
      auto it = std::find(devices.begin(), devices.end(), name);
      if (it == devices.end()) {
        devices.push_back(name);
        return static_cast<int>(devices.size());
      }
      return static_cast<int>(it - devices.begin()) + 1;
    };
    sep();
    std::fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{\"name\":\"host\"}}");
    for (auto& q : queues_) {
      const int pid = device_pid(q->info.name);
      sep();
      std::fprintf(f, "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"%s (GPU)\"}}", pid,
                   escape(q->info.name).c_str());
    }
    for (const auto& e : events_) {
      sep();
      std::fprintf(f, "{\"ph\":\"X\",\"pid\":0,\"tid\":%u,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"device\":%d}}",
                   e.thread, escape(e.name).c_str(), us(double(e.begin)), double(e.end - e.begin) / 1e3, e.device);
    }
    std::size_t lost = 0;
    for (std::size_t i = 0; i < stamps_.size(); ++i) {
      if (!gpu[i].ok) {
        ++lost;
        continue;
      }
      const Stamp& s = stamps_[i];
      const auto [offset, error] = offsets[s.queue];
      const double p = s.queue->info.period_ns;
      const double b = double(gpu[i].begin) * p + offset, e = double(gpu[i].end) * p + offset;
      sep();
      std::fprintf(f,
                   "{\"ph\":\"X\",\"pid\":%d,\"tid\":%u,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,"
                   "\"args\":{\"submitted\":%.3f,\"waits\":%u}}",
                   device_pid(s.queue->info.name), s.queue->info.family, escape(s.label).c_str(), us(b), (e - b) / 1e3,
                   us(double(s.submitted_ns)), s.waits);
    }
    std::fprintf(f, "\n],\n\"tpar\":{\"steps\":%u,\"truncated\":%s,\"lost_stamps\":%zu,", steps_.load(),
                 truncated_ ? "true" : "false", lost);
    std::fprintf(f, "\"why_closed\":\"%s\",\"clocks\":{", escape(why).c_str());
    bool first_clock = true;
    for (auto& [q, o] : offsets) {
      std::fprintf(f, "%s\"%s\":{\"calibrated\":%s,\"error_us\":%.3f}", first_clock ? "" : ",", escape(q->info.name).c_str(),
                   q->info.calibrate ? "true" : "false", o.second / 1e3);
      first_clock = false;
    }
    std::fprintf(f, "},\"counts\":{");
    bool first_count = true;
    for (const auto& [k, v] : counts_) {
      std::fprintf(f, "%s\"%s\":%llu", first_count ? "" : ",", escape(k).c_str(), static_cast<unsigned long long>(v));
      first_count = false;
    }
    std::fprintf(f, "}}}\n");
    std::fclose(f);
    log(LogLevel::info, "TPAR_TRACE: " + std::to_string(steps_.load()) + " steps, " + std::to_string(events_.size()) +
                            " host spans and " + std::to_string(stamps_.size() - lost) + " GPU spans written to " + path_ +
                            (truncated_ ? " (stamps ran out: raise TPAR_TRACE_STAMPS)" : ""));
  }

  std::string path_;
  std::uint32_t skip_ = 16, span_ = 2, capacity_ = 8192;
  bool gpu_ = true;  // TPAR_TRACE_GPU
  std::atomic<bool> on_{false};
  std::atomic<std::uint32_t> steps_{0};
  bool truncated_ = false;
  std::int64_t origin_ = 0;
  std::mutex mutex_;
  std::vector<std::unique_ptr<QueueState>> queues_;
  std::unordered_map<VkCommandBuffer, std::string> labels_;
  std::vector<Stamp> stamps_;
  std::vector<HostEvent> events_;
  std::map<std::string, std::uint64_t> counts_;
  std::map<std::thread::id, std::uint32_t> threads_;
};

}  // namespace tpar::inline v0
