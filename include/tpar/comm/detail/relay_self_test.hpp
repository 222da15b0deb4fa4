// The relay's self-test: what the relay rests on and Vulkan does not promise, proven on
// the user's own devices before a communicator uses it (docs/relay.md, "The self-test").
//
// The relay (comm/detail/relay_hub.hpp) needs of each device that
//   1. a running kernel sees the host's writes into the device's own host-visible memory
//      (its slot), without a new submission: observed on NVIDIA, not promised;
//   2. a running kernel's writes to host memory (its publish area) reach the host while
//      it runs, each 8-byte word whole;
//   3. the work groups of its largest dispatch (up to 32) run at once, and the devices of
//      the group run their kernels at once (each waits for the others' values).
// So, per device, the relay's own kernel runs one call the host plays: it publishes
// `count` stamped values; once every device's values are all in (2, 3), the host writes
// a payload into the slot and then its flag, after the kernel started (1); the kernel
// copies the payload into its buffer. Every value is checked both ways. Where the
// device's queue, not its kernel, waits for the sum (RelayGate::queue_waits: lavapipe,
// several devices of one GPU), the kernel is run as the relay runs it there: a second
// batch, released by the host after its write, collects; premise 1 is then not needed,
// and the rest is checked the same way.
//
// Bounds: every device's values must reach the host within `start_bound` of the
// submission (a queue busy with earlier work delays this: such a verdict is
// inconclusive, not cached, and the next communicator tries again), and a running kernel
// must confirm the host's write within `see_bound` (20 ms; a pass takes microseconds on
// a GPU). A kernel that does not see the write ends by itself at its spin bound (or on the
// abort word); until it has, its memory is kept (RelaySelfTestLeftovers).
//
// Verdicts are cached for the process by (driverID, driverVersion, deviceUUID, whether
// its kernel waits, the dispatch's work groups, whether device-coherent memory is
// enabled): a second communicator on the same devices pays nothing.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/comm/detail/relay_protocol.hpp>
#include <tpar/comm/detail/relay_setup.hpp>
#include <tpar/core/log.hpp>
#include <tpar/staging/detail/mapped_memory.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tpar::inline v0::detail {

// What the self-test runs (RelaySetup fills it from the gate and the options).
struct RelaySelfTestPlan {
  std::uint32_t kernel_waits = 0;                  // bit d: device d's kernel waits for the host's write; else its queue
  std::size_t count = 4096;                        // values: those of the relay's largest call
  std::chrono::milliseconds start_bound{500};      // every device's values at the host, from the submission
  std::chrono::milliseconds see_bound{20};         // a running kernel's confirmation, from the host's write
};

// The plan for a communicator whose relay setup is `setup`.
inline RelaySelfTestPlan relay_self_test_plan(const RelaySetup& setup) {
  RelaySelfTestPlan plan;
  plan.kernel_waits = setup.test_kernel_waits;
  plan.count = setup.test_count;
  plan.start_bound = setup.test_start_bound;
  return plan;
}

struct RelaySelfTestKey {
  vk::DriverId driver{};
  std::uint32_t driver_version = 0;
  Uuid device_uuid{};
  bool kernel_waits = false;
  std::uint32_t groups = 0;
  bool device_coherent = false;
  auto operator<=>(const RelaySelfTestKey&) const = default;
};

// The process's verdicts (tests clear it to run the test again).
struct RelaySelfTestCache {
  std::mutex mutex;
  std::map<RelaySelfTestKey, RelaySelfTest::Device> verdicts;
  void clear() {
    std::lock_guard lock(mutex);
    verdicts.clear();
  }
};
inline RelaySelfTestCache& relay_self_test_cache() {
  static RelaySelfTestCache cache;
  return cache;
}

// The values the self-test's kernel publishes and the payload the host writes back:
// small integers (exact), nonzero (an unwritten word reads 0), unlike each other.
inline float relay_probe_input(std::size_t i) { return static_cast<float>(1 + i % 251); }
inline float relay_probe_payload(std::size_t i) { return static_cast<float>(1000 + (i * 7) % 4093); }

inline std::string hex32(std::uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

// "device 1 (Radeon RX 7900 XTX, driver radv Mesa 24.0.5, driverVersion 0x06000005)"
inline std::string device_words(const Device& dev) {
  const auto& c = dev.capabilities();
  return "device " + std::to_string(dev.index()) + " (" + c.name + ", driver " + c.driver_name +
         (c.driver_info.empty() ? std::string() : " " + c.driver_info) + ", driverVersion " + hex32(c.driver_version) + ")";
}

// One device's part: the relay's kernel, its own slot, publish area and buffer.
class RelayProbe {
 public:
  // `spin_bound_ms`: how long a kernel that waits for the host's write spins at most (its
  // device clock's ms); `collect_bound_ms`, one that starts after it (the queue waits).
  RelayProbe(Device& dev, std::size_t count, bool kernel_waits, std::uint32_t stamp, std::uint32_t spin_bound_ms,
             std::uint32_t collect_bound_ms)
      : dev_(dev), count_(count), kernel_waits_(kernel_waits), stamp_(stamp) {
    try {
      make(spin_bound_ms, collect_bound_ms);
    } catch (...) {
      destroy();  // what the members do not own themselves
      throw;
    }
  }
  RelayProbe(const RelayProbe&) = delete;
  RelayProbe& operator=(const RelayProbe&) = delete;
  ~RelayProbe() { destroy(); }

 private:
  void make(std::uint32_t spin_bound_ms, std::uint32_t collect_bound_ms) {
    Device& dev = dev_;
    const vk::Device vkd = dev.handle();
    using F = vk::MemoryPropertyFlagBits;
    const std::size_t count = count_;
    slot_ = map_buffer(dev, relay_layout::payload * 4 + count * 4, relay_slot_memory(dev), "self-test slot (device-local, host-visible memory)");
    publish_ = map_buffer(dev, relay_layout::header_bytes + count * 8, relay_publish_memory(dev), "self-test publish area (host memory)");
    user_ = map_buffer(dev, count * 4, {F::eHostVisible | F::eHostCoherent, {}, F::eHostCached, {}}, "self-test values");
    done_ = Timeline(vkd);
    KernelSet& kernels = dev.kernels();
    vk::DescriptorPoolSize size(vk::DescriptorType::eStorageBuffer, kernel_storage_buffers);
    vk::DescriptorPoolCreateInfo pool_info({}, 1, 1, &size);
    if (kernels.update_after_bind()) pool_info.flags = vk::DescriptorPoolCreateFlagBits::eUpdateAfterBind;
    check(vkd.createDescriptorPool(&pool_info, nullptr, &descriptor_pool_), "vkCreateDescriptorPool (relay self-test)");
    const vk::DescriptorSetLayout layout = kernels.set_layout();
    vk::DescriptorSetAllocateInfo set_info(descriptor_pool_, 1, &layout);
    check(vkd.allocateDescriptorSets(&set_info, &set_), "vkAllocateDescriptorSets (relay self-test)");
    const vk::DescriptorBufferInfo user(user_->buffer, 0, VK_WHOLE_SIZE), slot(slot_->buffer, 0, VK_WHOLE_SIZE),
        publish(publish_->buffer, 0, VK_WHOLE_SIZE);
    std::array<vk::DescriptorBufferInfo, max_direct_peers> peers;
    peers.fill(publish);
    const std::array<vk::WriteDescriptorSet, 4> writes{
        vk::WriteDescriptorSet(set_, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &user),
        vk::WriteDescriptorSet(set_, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &slot),
        vk::WriteDescriptorSet(set_, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &publish),
        vk::WriteDescriptorSet(set_, 3, 0, max_direct_peers, vk::DescriptorType::eStorageBuffer, nullptr, peers.data())};
    vkd.updateDescriptorSets(static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
    vk::CommandPoolCreateInfo cp({}, dev.compute_queue().family());
    check(vkd.createCommandPool(&cp, nullptr, &command_pool_), "vkCreateCommandPool (relay self-test)");
    vk::CommandBufferAllocateInfo ai(command_pool_, vk::CommandBufferLevel::ePrimary, kernel_waits_ ? 1 : 2);
    check(vkd.allocateCommandBuffers(&ai, command_buffers_.data()), "vkAllocateCommandBuffers (relay self-test)");
    const std::uint32_t publish_mode = relay_mode::contribute | relay_mode::arrive;
    if (kernel_waits_) {
      record(command_buffers_[0], kernels, publish_mode | relay_mode::collect, spin_bound_ms);
    } else {
      record(command_buffers_[0], kernels, publish_mode, spin_bound_ms);
      record(command_buffers_[1], kernels, relay_mode::collect, collect_bound_ms);
    }
    // The call as the relay stages it: the caller's values, the stamp in the slot.
    float* values = static_cast<float*>(user_->data);
    for (std::size_t i = 0; i < count_; ++i) values[i] = relay_probe_input(i);
    relay_store_word(&slot_words()[relay_layout::seq], stamp_);
    relay_store_fence();
  }
  void destroy() noexcept {
    const vk::Device vkd = dev_.handle();
    if (command_pool_) vkd.destroyCommandPool(command_pool_);
    if (descriptor_pool_) vkd.destroyDescriptorPool(descriptor_pool_);
    command_pool_ = nullptr;
    descriptor_pool_ = nullptr;
  }

 public:
  Device& device() const { return dev_; }
  bool kernel_waits() const { return kernel_waits_; }
  std::uint32_t stamp() const { return stamp_; }
  bool submitted() const { return submitted_ > 0; }
  std::string memory() const {
    return "slots in memory " + memory_type_text(*slot_) + ", publish areas in " + memory_type_text(*publish_);
  }

  // The kernel (where the queue waits: its publishing half; the collecting half is
  // submitted by the host's write, after it, as the relay's release lets it run).
  void submit() { submit_batch(0); }

  // Whether every value the kernel published is at the host, stamped and right (false
  // while some are still to come); `why` is set where one came wrong.
  bool published(std::string& why) {
    const auto* units = reinterpret_cast<const std::uint64_t*>(static_cast<const char*>(publish_->data) + relay_layout::header_bytes);
    for (; seen_units_ < count_; ++seen_units_) {
      const std::uint64_t u = relay_load_unit(units + seen_units_);
      const auto stamp = static_cast<std::uint32_t>(u >> 32), bits = static_cast<std::uint32_t>(u);
      const std::uint32_t want = std::bit_cast<std::uint32_t>(relay_probe_input(seen_units_));
      if (stamp != stamp_) {
        if (bits == want && !why_stamp_) {
          why_stamp_ = true;
          stale_stamp_ = stamp;
        }
        return false;
      }
      if (bits != want) {
        why = "value " + std::to_string(seen_units_) + " of " + std::to_string(count_) + " its kernel published reached the host as " +
              hex32(bits) + ", not " + hex32(want);
        return false;
      }
    }
    return header(relay_layout::arrived) == stamp_;
  }
  std::size_t units_seen() const { return seen_units_; }
  // Values that came stamped other than the host wrote into the slot (it read another stamp).
  bool stale_stamp(std::uint32_t& stamp) const {
    stamp = stale_stamp_;
    return why_stamp_;
  }

  // The host's write, after the kernel started: the payload, a fence, the flag (what the
  // test seam withholds is left out); then, where the queue waits, its release.
  void write(std::size_t index) {
    const RelayWithheld& withheld = relay_withheld();
    const bool skip_flag = index < 32 && ((withheld.self_test_flag.load() >> index) & 1u);
    const bool skip_word = index < 32 && ((withheld.self_test_word.load() >> index) & 1u);
    std::uint32_t* payload = slot_words() + relay_layout::payload;
    for (std::size_t i = 0; i < count_; ++i)
      if (!(skip_word && i == count_ / 2)) payload[i] = std::bit_cast<std::uint32_t>(relay_probe_payload(i));
    relay_store_fence();
    if (!skip_flag) relay_store_word(&slot_words()[relay_layout::flag], stamp_);
    relay_store_fence();
    written_ = std::chrono::steady_clock::now();
    release();
  }
  std::chrono::steady_clock::time_point written() const { return written_; }

  // Gives the call up: the abort word (a kernel that sees it ends), and the queue's release.
  void give_up() {
    relay_store_word(&slot_words()[relay_layout::abort], 1);
    relay_store_fence();
    release();
  }

  bool seen() const { return header(relay_layout::seen) == stamp_; }
  bool gave_up() const { return header(relay_layout::gave_up) == stamp_; }

  // Whether the kernel's batches finished, waiting at most `bound`; a failed wait (a lost
  // device) throws.
  bool finished(std::chrono::nanoseconds bound) const {
    if (!submitted_) return true;
    const vk::Semaphore s = done_.handle();
    const auto value = static_cast<std::uint64_t>(submitted_);  // the last batch that reached the queue signals it
    const vk::Result r = tpar::wait(dev_.handle(), std::span(&s, 1), std::span(&value, 1), bound);
    if (r == vk::Result::eTimeout) return false;
    check(r, "vkWaitSemaphores (relay self-test)");
    return true;
  }
  // The same where nothing may throw: a failed wait counts as not finished (kept).
  bool finished_or_kept(std::chrono::nanoseconds bound) const noexcept {
    try {
      return finished(bound);
    } catch (...) {
      return false;
    }
  }

  // Empty where every value of the kernel's buffer is the payload the host wrote; else
  // the first that is not.
  std::string check_copy() const {
    const auto* values = static_cast<const std::uint32_t*>(user_->data);
    for (std::size_t i = 0; i < count_; ++i) {
      const std::uint32_t got = std::atomic_ref<const std::uint32_t>(values[i]).load(std::memory_order_acquire);
      const std::uint32_t want = std::bit_cast<std::uint32_t>(relay_probe_payload(i));
      if (got != want)
        return "value " + std::to_string(i) + " of " + std::to_string(count_) + " its kernel copied from the host's write was " +
               hex32(got) + ", not " + hex32(want) + " (the host's write was not all visible to the kernel)";
    }
    return {};
  }

 private:
  void record(vk::CommandBuffer cb, KernelSet& kernels, std::uint32_t mode, std::uint32_t spin_bound_ms) {
    vk::CommandBufferBeginInfo begin(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    check(cb.begin(&begin), "vkBeginCommandBuffer (relay self-test)");
    KernelArgs a;
    a.count = static_cast<std::uint32_t>(count_);
    a.mode = mode;
    a.spin_bound = spin_bound_ms;
    if (mode == relay_mode::collect) {  // after the publishing half, which reads the buffer this half writes
      const vk::MemoryBarrier after(vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite,
                                    vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
      cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {}, 1, &after, 0,
                         nullptr, 0, nullptr);
    }
    cb.bindPipeline(vk::PipelineBindPoint::eCompute, kernels.pipeline(Kernel::relay, Wire::f32));
    cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, kernels.layout(), 0, 1, &set_, 0, nullptr);
    cb.pushConstants(kernels.layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof(KernelArgs), &a);
    cb.dispatch(kernel_groups(Kernel::relay, count_, dev_.capabilities().max_workgroups_x), 1, 1);
    const vk::MemoryBarrier to_host(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eHost, {}, 1, &to_host, 0, nullptr, 0,
                       nullptr);
    check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer (relay self-test)");
  }
  // Batch `b` (0: the kernel, or its publishing half; 1: the collecting half), signalling
  // b + 1 on the done timeline.
  void submit_batch(std::uint32_t b) {
    const std::uint64_t value = b + 1;
    const vk::Semaphore done = done_.handle();
    const vk::TimelineSemaphoreSubmitInfo values(0, nullptr, 1, &value);
    const vk::SubmitInfo batch(0, nullptr, nullptr, 1, &command_buffers_[b], 1, &done, &values);
    std::size_t reached = 0;
    const vk::Result r = dev_.compute_queue().submit(std::span(&batch, 1), {}, &reached);
    if (reached) submitted_ = static_cast<int>(b) + 1;
    check(r, "vkQueueSubmit (relay self-test)");
  }
  void release() {
    if (kernel_waits_ || submitted_ != 1) return;
    submit_batch(1);
  }
  std::uint32_t* slot_words() const { return static_cast<std::uint32_t*>(slot_->data); }
  std::uint32_t header(std::size_t word) const {
    return std::atomic_ref<std::uint32_t>(static_cast<std::uint32_t*>(publish_->data)[word]).load(std::memory_order_acquire);
  }

  Device& dev_;
  std::size_t count_;
  bool kernel_waits_;
  std::uint32_t stamp_;
  std::unique_ptr<MappedBuffer> slot_, publish_, user_;
  Timeline done_;
  vk::DescriptorPool descriptor_pool_;
  vk::DescriptorSet set_;
  vk::CommandPool command_pool_;
  std::array<vk::CommandBuffer, 2> command_buffers_{};
  int submitted_ = 0;  // batches that reached the queue
  std::size_t seen_units_ = 0;
  bool why_stamp_ = false;
  std::uint32_t stale_stamp_ = 0;
  std::chrono::steady_clock::time_point written_;
};

// Probes whose kernels had not finished when the self-test returned (a kernel that did
// not see the host's write ends at its spin bound): kept until they have.
struct RelaySelfTestLeftovers {
  std::vector<std::unique_ptr<RelayProbe>> probes;
  // Whether every kernel finished, each waited on at most `bound`.
  bool finished(std::chrono::nanoseconds bound) const noexcept {
    return std::all_of(probes.begin(), probes.end(), [&](const auto& p) { return p->finished_or_kept(bound); });
  }
};

namespace relay_self_test_detail {

inline void pause_briefly(std::chrono::steady_clock::time_point since) {
  const auto waited = std::chrono::steady_clock::now() - since;
  if (waited < std::chrono::microseconds(200)) relay_cpu_relax();
  else if (waited < std::chrono::milliseconds(2)) std::this_thread::yield();
  else std::this_thread::sleep_for(std::chrono::microseconds(50));
}

inline std::string ms_text(std::chrono::nanoseconds t) {
  return std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(t).count()) + " ms";
}

inline std::string us_text(std::chrono::nanoseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f us", std::chrono::duration<double, std::micro>(t).count());
  return text;
}

}  // namespace relay_self_test_detail

// Runs the self-test on every device of `group` whose verdict is not cached; fills
// `leftovers` with the probes whose kernels are still running. Throws tpar::Error where a
// Vulkan call fails (nothing is left running then, or it is kept in `leftovers`).
inline RelaySelfTest relay_self_test(const DeviceGroup& group, const RelaySelfTestPlan& plan,
                                     std::unique_ptr<RelaySelfTestLeftovers>& leftovers) {
  using namespace relay_self_test_detail;
  using clock = std::chrono::steady_clock;
  const auto began = clock::now();
  const std::size_t n = group.size();
  RelaySelfTest out;
  out.ran = true;
  out.devices.resize(n);
  std::vector<RelaySelfTestKey> keys(n);
  std::vector<std::size_t> fresh;  // devices tested now
  {
    auto& cache = relay_self_test_cache();
    std::lock_guard lock(cache.mutex);
    for (std::size_t d = 0; d < n; ++d) {
      const Device& dev = group[d];
      const auto& c = dev.capabilities();
      const bool waits = d < 32 && ((plan.kernel_waits >> d) & 1u);
      keys[d] = {c.driver_id, c.driver_version, c.device_uuid, waits,
                 kernel_groups(Kernel::relay, plan.count, c.max_workgroups_x), dev.enabled().device_coherent_memory};
      if (const auto it = cache.verdicts.find(keys[d]); it != cache.verdicts.end()) {
        out.devices[d] = it->second;
        out.devices[d].cached = true;
      } else {
        fresh.push_back(d);
      }
    }
  }

  std::vector<std::unique_ptr<RelayProbe>> probes(n);
  if (!fresh.empty()) {
    static std::atomic<std::uint32_t> next_stamp{0x5e1f0001u};
    // A kernel that waits spins until the host writes, after every device published; one
    // that collects after the write needs the see bound only.
    const auto spin_bound = plan.start_bound + plan.see_bound + std::chrono::milliseconds(50);
    const auto collect_bound = plan.see_bound + std::chrono::milliseconds(50);
    // Whatever ends the test early, a kernel already submitted is given up and kept until
    // it finished (or kept for good).
    const auto keep_running = [&] {
      if (!leftovers) leftovers = std::make_unique<RelaySelfTestLeftovers>();
      for (auto& p : probes) {
        if (!p) continue;
        if (p->submitted()) {
          try {
            p->give_up();
          } catch (...) {
          }
          if (!p->finished_or_kept(spin_bound)) {
            leftovers->probes.push_back(std::move(p));
            continue;
          }
        }
        p.reset();
      }
    };
    try {
      for (std::size_t d : fresh) {
        std::uint32_t stamp = next_stamp.fetch_add(1);
        if (!stamp) stamp = next_stamp.fetch_add(1);
        probes[d] = std::make_unique<RelayProbe>(group[d], plan.count, keys[d].kernel_waits, stamp,
                                                 static_cast<std::uint32_t>(spin_bound.count()),
                                                 static_cast<std::uint32_t>(collect_bound.count()));
      }
      for (std::size_t d : fresh) probes[d]->submit();
      const auto submitted = clock::now();

      // Every device's values at the host (premises 2 and 3: its writes reach the host while
      // it runs, all its work groups ran, and the devices' kernels run at once).
      std::vector<std::string> wrong(n);
      std::vector<bool> in(n, false);
      for (;;) {
        bool all = true;
        for (std::size_t d : fresh) {
          if (in[d] || !wrong[d].empty()) continue;
          in[d] = probes[d]->published(wrong[d]);
          all &= in[d] || !wrong[d].empty();
        }
        if (all || clock::now() - submitted > plan.start_bound) break;
        pause_briefly(submitted);
      }
      // The host's write, into every device whose values came (premise 1 from here).
      const auto all_in = clock::now();
      for (std::size_t d : fresh) {
        if (in[d]) probes[d]->write(d);
        else probes[d]->give_up();
      }
      const bool host_late = clock::now() - all_in > plan.see_bound / 2;
      // Each running kernel's confirmation; where the queue waits, its collect batch.
      std::vector<bool> saw(n, false), collected(n, false);
      for (std::size_t d : fresh) {
        if (!in[d]) continue;
        RelayProbe& p = *probes[d];
        if (p.kernel_waits()) {
          while (!(saw[d] = p.seen()) && !p.gave_up() && clock::now() - p.written() < plan.see_bound) pause_briefly(p.written());
          if (saw[d]) out.devices[d].seen = clock::now() - p.written();
        } else {
          collected[d] = p.finished(plan.start_bound);
          saw[d] = collected[d] && p.seen();
          out.devices[d].seen = clock::now() - p.written();
        }
      }

      for (std::size_t d : fresh) {
        RelayProbe& p = *probes[d];
        auto& v = out.devices[d];
        v.kernel_waits = p.kernel_waits();
        v.memory = p.memory();
        v.conclusive = true;
        const std::string bound = ms_text(plan.see_bound);
        if (!wrong[d].empty()) {
          v.reason = wrong[d];
        } else if (!in[d]) {
          std::uint32_t stale = 0;
          if (p.stale_stamp(stale)) {
            v.reason = "its kernel published its values stamped " + hex32(stale) + ", not " + hex32(p.stamp()) +
                       ", which the host had written into its memory before the submission: the host's writes to its memory "
                       "do not reach it";
          } else if (p.units_seen() == 0) {
            v.reason = "none of its kernel's values reached the host within " + ms_text(plan.start_bound) +
                       " of the submission (its queue busy with earlier work, or its writes to host memory not reaching the host "
                       "while it runs)";
            v.conclusive = false;
          } else {
            v.reason = "only " + std::to_string(p.units_seen()) + " of its kernel's " + std::to_string(plan.count) +
                       " values reached the host within " + ms_text(plan.start_bound) +
                       " (its work groups do not all run at once, or its writes to host memory do not all reach the host while "
                       "it runs)";
          }
        } else if (!saw[d]) {
          if (p.kernel_waits())
            v.reason = p.gave_up() ? "its running kernel ended its wait without seeing the host's write into its memory"
                                   : "its running kernel did not see the host's write into its memory within " + bound;
          else
            v.reason = collected[d] ? "its collect kernel, submitted after the host's write into its memory, did not see it"
                                    : "its collect kernel, submitted after the host's write into its memory, did not finish within " +
                                          ms_text(plan.start_bound);
          // A host that was itself held up (descheduled) before writing proves nothing.
          if (p.kernel_waits() && host_late) {
            v.reason += " (the host wrote late: not a verdict)";
            v.conclusive = false;
          }
        } else if (!p.finished(std::chrono::seconds(1))) {
          v.reason = "its kernel saw the host's write but did not finish within 1 s";
        } else if (std::string bad = p.check_copy(); !bad.empty()) {
          v.reason = bad;
        } else {
          v.passed = true;
          v.reason = p.kernel_waits() ? "its running kernel saw the host's write in " + us_text(v.seen) + "; all " +
                                            std::to_string(plan.count) + " values right both ways"
                                      : "all " + std::to_string(plan.count) +
                                            " values right both ways (no kernel needs to see a write while it runs here)";
        }
      }
    } catch (...) {
      keep_running();
      throw;
    }
    // Kernels still running are given up and kept; the rest freed.
    for (std::size_t d : fresh)
      if (!out.devices[d].passed) {
        try {
          probes[d]->give_up();
        } catch (const Error&) {  // its collecting half not submitted: the publishing half is waited for
        }
      }
    if (!leftovers) leftovers = std::make_unique<RelaySelfTestLeftovers>();
    for (std::size_t d : fresh) {
      if (!probes[d]->finished_or_kept(out.devices[d].passed ? std::chrono::seconds(1) : std::chrono::milliseconds(0)))
        leftovers->probes.push_back(std::move(probes[d]));
      probes[d].reset();
    }
    if (leftovers->probes.empty()) leftovers.reset();

    auto& cache = relay_self_test_cache();
    std::lock_guard lock(cache.mutex);
    for (std::size_t d : fresh)
      if (out.devices[d].conclusive) cache.verdicts[keys[d]] = out.devices[d];
  }

  out.passed = true;
  for (std::size_t d = 0; d < n; ++d) {
    const auto& v = out.devices[d];
    out.passed &= v.passed;
    out.conclusive &= v.conclusive || v.passed;
    const std::string line = "relay self-test: " + device_words(group[d]) + ": " + (v.passed ? "passed" : "failed") +
                             (v.cached ? " (an earlier test's verdict)" : "") + ": " + v.reason + "; " + v.memory;
    log(LogLevel::info, line);
  }
  if (out.passed) {
    out.reason = "the relay's self-test passed on every device";
  } else {
    for (std::size_t d = 0; d < n && out.reason.empty(); ++d)
      if (!out.devices[d].passed) out.reason = "the relay's self-test failed on " + device_words(group[d]) + ": " + out.devices[d].reason;
  }
  out.took = clock::now() - began;
  return out;
}

}  // namespace tpar::inline v0::detail
