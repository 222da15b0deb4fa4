// RelayHub — the host side of the relay (algo/relay.hpp), one per communicator, made on
// its first relay call: per device and slot set a publish area in host memory (the
// device's kernel writes its values there, each 4-byte value with the call's 4-byte stamp
// in one 8-byte word) and a slot in the device's own host-visible memory (the host writes
// the sum there, then the stamp into the slot's flag word); and the thread that turns the
// one into the other. docs/relay.md describes the protocol.
//
// The thread serves the submitted calls in call order. For each it waits until every
// device arrived (a contributing device's stamped values; the header stamp of one that
// contributes nothing), sums the values in device order 0..n-1 (then the host-played
// peers), chunk by chunk as they arrive, writes each chunk into every device's slot, and
// after the last one fences and writes the flags. A call of several grains (512 values) is
// cut into parts of whole grains served at once by up to Config::threads threads (the thread and
// its helpers), each summing its part the same way; the thread writes the flags once
// every helper has fenced its part's stores and said so. A device whose kernel cannot
// wait long (lavapipe) gets its queue released through a timeline semaphore instead. It spins only
// while a call is in flight, backs off (yield, then sleeps) while a call's values are
// long in coming, and blocks on a condition variable when nothing is in flight. A call
// not served within the timeout (counted from its submission, or from the end of the call
// before it) fails the communicator: every slot's abort word is set, so every kernel that
// waits or starts later gives up, and every queue wait is released.
//
// Beside it: relay_protocol.hpp (the words and store ordering shared with the kernel),
// relay_recorder.hpp (what feeds RelayStats), relay_setup.hpp (RelaySetup, made before the
// hub); its memory comes from staging/detail/mapped_memory.hpp.
#pragma once

#include <tpar/algo/relay.hpp>
#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/relay_protocol.hpp>
#include <tpar/comm/detail/relay_recorder.hpp>
#include <tpar/comm/detail/relay_sum.hpp>
#include <tpar/core/log.hpp>
#include <tpar/staging/detail/mapped_memory.hpp>
#include <tpar/staging/host_import.hpp>
#include <tpar/detail/align.hpp>
#include <tpar/detail/wire_codec.hpp>
#include <tpar/sync/concepts.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#endif

namespace tpar::inline v0::detail {

// The relay's slots: the device's own memory the host writes through a mapping (the
// BAR), which a running kernel polls; device-coherent where the device enabled it (AMD
// documents DEVICE_COHERENT for exactly this cross-agent visibility).
inline MemoryChoice relay_slot_memory(const Device& dev) {
  using F = vk::MemoryPropertyFlagBits;
  return {F::eDeviceLocal | F::eHostVisible | F::eHostCoherent, dev.enabled().device_coherent_memory ? device_coherent_flags : vk::MemoryPropertyFlags{},
          {}, {}};
}
// Its publish areas: host memory a running kernel writes and the host reads (cached for
// the host's reads where offered), device-coherent where the device enabled it.
inline MemoryChoice relay_publish_memory(const Device& dev) {
  using F = vk::MemoryPropertyFlagBits;
  return {F::eHostVisible | F::eHostCoherent, dev.enabled().device_coherent_memory ? device_coherent_flags : vk::MemoryPropertyFlags{},
          F::eHostCached, F::eDeviceLocal};
}

// A test seam (tests/comm/test_relay_self_test.cpp, tests/ggml/): host writes the
// relay's premise rests on, withheld, as a device that does not see them would have it.
// Process-wide; nothing in tpar sets it. Bit d: device d of a group (every group).
struct RelayWithheld {
  std::atomic<std::uint32_t> self_test_flag{0};  // the self-test's flag word: its kernel never sees the write
  std::atomic<std::uint32_t> self_test_word{0};  // one word of the self-test's payload: stale in the kernel's copy
  std::atomic<std::uint32_t> call_flag{0};       // relay calls' flag words, from call number calls_from on
  std::atomic<std::uint64_t> calls_from{0};
  bool call(std::size_t d, std::uint64_t sequence) const {
    return d < 32 && ((call_flag.load(std::memory_order_relaxed) >> d) & 1u) &&
           sequence >= calls_from.load(std::memory_order_relaxed);
  }
};
inline RelayWithheld& relay_withheld() {
  static RelayWithheld w;
  return w;
}

class RelayHub {
 public:
  struct Config {
    std::uint32_t depth = 2;               // slot sets: calls in flight
    std::size_t max_bytes = 64 << 10;      // the largest payload
    std::uint32_t host_peers = 0;          // Options::relay_host_peers
    std::chrono::nanoseconds timeout{std::chrono::seconds(10)};
    std::uint32_t queue_waits = 0;         // bit d: device d's queue waits on release(d)
    std::uint64_t first_sequence = 1;      // tests start near a stamp wrap
    bool scalar_sum = false;               // Options::relay_scalar_sum
    std::uint32_t threads = 1;             // Options::relay_threads: the thread and its helpers
    std::uint32_t sites = 0;               // ride sites a device (words after the slot sets)
    // The kernels confirm each sum they saw (publish header word SEEN, shaders/relay.glsl)
    // and the thread checks it: false only where a test plays the devices.
    bool confirm = true;
  };

  // What the thread did so far: tpar::RelayStats (comm/call.hpp says what each field is).
  using Stats = RelayStats;

  RelayHub(const DeviceGroup& group, const Config& config, FailureHandler on_failure)
      : n_(group.size()), config_(config), on_failure_(std::move(on_failure)), next_sequence_(config.first_sequence),
        recorder_(n_), last_stamp_(config.depth, 0), served_sequence_(std::make_unique<std::atomic<std::uint64_t>[]>(config.depth)) {
    if (config_.max_bytes % sizeof(float) || !config_.max_bytes)
      throw Error(ErrorCode::invalid_argument, "the relay's largest payload must be a positive multiple of 4 bytes");
    const std::size_t max_count = config_.max_bytes / sizeof(float);
    vk::DeviceSize align = 256;
    for (std::size_t d = 0; d < n_; ++d) align = std::max(align, group[d].capabilities().min_storage_offset_alignment);
    slot_block_ = align_up(relay_layout::payload * 4 + config_.max_bytes, align);
    publish_block_ = align_up(relay_layout::header_bytes + 2 * config_.max_bytes, align);
    std::string memory;
    devices_.resize(n_);
    for (std::size_t d = 0; d < n_; ++d) {
      Device& dev = group[d];
      auto& s = devices_[d];
      s.slots = map_buffer(dev, slot_block_ * config_.depth + std::size_t{config_.sites} * 4, relay_slot_memory(dev),
                           "slots (device-local, host-visible memory)");
      s.publish = map_buffer(dev, publish_block_ * config_.depth, relay_publish_memory(dev), "publish areas (host memory)");
      memory += (d ? "; device " : "device ") + std::to_string(d) + ": slots in memory " + memory_type_text(*s.slots) +
                ", publish areas in " + memory_type_text(*s.publish);
      if ((config_.queue_waits >> d) & 1u) s.release = Timeline(dev.handle());
    }
    peers_.resize(config_.host_peers);
    for (std::uint32_t p = 0; p < config_.host_peers; ++p) {
      peers_[p].resize(max_count);
      for (std::size_t i = 0; i < max_count; ++i) peers_[p][i] = relay_host_peer_value(p, i);
    }
    check_threads(config_.threads);
    log(LogLevel::info, "relay memory: " + memory);
    log(LogLevel::info, std::string("relay: the host thread sums ") +
                            (config_.scalar_sum ? std::string("one value a step (TPAR_RELAY_SUM=scalar)")
                                                : std::string("with ") + relay_sum_path()) +
                            (config_.threads > 1 ? "; a call of " + std::to_string(2 * grain) + " values or more is served by up to " +
                                                       std::to_string(config_.threads) + " threads (TPAR_RELAY_THREADS)"
                                                 : std::string("; one thread a call (TPAR_RELAY_THREADS=1)")));
    helpers_.reserve(config_.threads - 1);
    for (std::uint32_t h = 0; h + 1 < config_.threads; ++h) helpers_.push_back(std::make_unique<Helper>());
    try {
      for (auto& h : helpers_) h->thread = std::thread([this, helper = h.get()] { help(*helper); });
      thread_ = std::thread([this] { run(); });
    } catch (...) {
      stop_helpers();
      throw;
    }
  }

  RelayHub(const RelayHub&) = delete;
  RelayHub& operator=(const RelayHub&) = delete;
  ~RelayHub() { stop(); }

  std::size_t max_count() const { return config_.max_bytes / sizeof(float); }

  // Throws Error(invalid_argument) for a thread count outside relay_threads_range.
  static void check_threads(std::uint32_t threads) {
    if (!relay_threads_range.holds(threads))
      throw Error(ErrorCode::invalid_argument, "relay_threads " + std::to_string(threads) +
                                                   " is out of range: use " + relay_threads_range.text());
  }

  // Device d's slot and publish area for slot set `slot_set`, as its kernel binds them.
  vk::DescriptorBufferInfo slot(std::size_t d, std::uint32_t slot_set) const {
    return {devices_[d].slots->buffer, slot_block_ * slot_set, slot_block_};
  }
  vk::DescriptorBufferInfo publish(std::size_t d, std::uint32_t slot_set) const {
    return {devices_[d].publish->buffer, publish_block_ * slot_set, publish_block_};
  }
  // For ride sites (kernels recorded once into a host's command buffers, shaders/relay.glsl
  // SITE): device d's slots and publish areas of every slot set as one binding each; a
  // slot set's size in slot words and in 8-byte publish units; site s's word, which names
  // the slot set of the call the site serves next (relay_layout::no_call: none), as an
  // index into the slots binding and as the host's pointer to it.
  vk::DescriptorBufferInfo all_slots(std::size_t d) const { return {devices_[d].slots->buffer, 0, VK_WHOLE_SIZE}; }
  vk::DescriptorBufferInfo all_publish(std::size_t d) const { return {devices_[d].publish->buffer, 0, VK_WHOLE_SIZE}; }
  std::uint32_t slot_set_words() const { return static_cast<std::uint32_t>(slot_block_ / 4); }
  std::uint32_t publish_set_units() const { return static_cast<std::uint32_t>(publish_block_ / 8); }
  std::uint32_t sites() const { return config_.sites; }
  std::uint32_t site_word_index(std::uint32_t s) const { return static_cast<std::uint32_t>(slot_block_ * config_.depth / 4) + s; }
  std::uint32_t* site_word(std::size_t d, std::uint32_t s) const {
    return static_cast<std::uint32_t*>(devices_[d].slots->data) + site_word_index(s);
  }

  // What device d's collect batch waits on (the call's number), where its queue waits.
  vk::Semaphore release(std::size_t d) const { return devices_[d].release.handle(); }

  // The mapped memory, for tests that play the devices.
  std::uint32_t* slot_words(std::size_t d, std::uint32_t slot_set) const {
    return reinterpret_cast<std::uint32_t*>(static_cast<char*>(devices_[d].slots->data) + slot_block_ * slot_set);
  }
  std::uint32_t* publish_header(std::size_t d, std::uint32_t slot_set) const {
    return reinterpret_cast<std::uint32_t*>(static_cast<char*>(devices_[d].publish->data) + publish_block_ * slot_set);
  }
  std::uint64_t* publish_units(std::size_t d, std::uint32_t slot_set) const {
    return reinterpret_cast<std::uint64_t*>(static_cast<char*>(devices_[d].publish->data) + publish_block_ * slot_set +
                                            relay_layout::header_bytes);
  }

  // A relay call of `count` values on slot set `slot_set` (whose previous call has finished
  // on every device) is being recorded: its number, which is also the value its collect
  // batches wait for. Its stamp, the number's low 32 bits (never 0), goes into every
  // device's slot, where the kernel reads it. `contributing`: bit d, device d contributes.
  std::uint64_t record(std::uint32_t slot_set, std::size_t count, std::uint32_t contributing) {
    if (count > max_count() || slot_set >= config_.depth)
      throw Error(ErrorCode::invalid_argument, "a relay call of " + std::to_string(count) + " values on slot set " +
                                                   std::to_string(slot_set) + " does not fit the relay's slots");
    std::uint64_t sequence = next_sequence_++;
    if (static_cast<std::uint32_t>(sequence) == 0) sequence = next_sequence_++;  // stamp 0 means "never written"
    const auto stamp = static_cast<std::uint32_t>(sequence);
    for (std::size_t d = 0; d < n_; ++d) relay_store_word(&slot_words(d, slot_set)[relay_layout::seq], stamp);
    relay_store_fence();
    std::lock_guard lock(mutex_);
    recorded_.push_back({sequence, stamp, slot_set, count, contributing, {}});
    return sequence;
  }

  // The recorded calls up to number `sequence` were submitted: the thread serves them.
  void submitted(std::uint64_t sequence) {
    std::vector<std::uint64_t> release_now;
    {
      std::lock_guard lock(mutex_);
      const auto now = std::chrono::steady_clock::now();
      while (!recorded_.empty() && recorded_.front().sequence <= sequence) {
        Call c = recorded_.front();
        recorded_.pop_front();
        if (failed_) {
          release_now.push_back(c.sequence);
          continue;
        }
        c.handed = now;
        ready_.push_back(c);
      }
      in_flight_.store(ready_.size(), std::memory_order_release);
    }
    for (auto s : release_now) release_queues(s);
    cv_.notify_one();
  }

  // Gives up on every call not yet served, submitted or only recorded (whose batches
  // may have reached some queues when a submission failed): every slot's abort word is
  // set, so every kernel waiting, or starting later, gives up; every queue waiting for a
  // sum is released, in call order. Calls submitted afterwards are released at once.
  // Permanent.
  void abort() {
    std::vector<std::uint64_t> release_now;
    {
      std::lock_guard lock(mutex_);
      failed_ = true;
      quit_.store(true, std::memory_order_release);
      for (const auto& c : ready_) release_now.push_back(c.sequence);
      for (const auto& c : recorded_) release_now.push_back(c.sequence);
      ready_.clear();
      recorded_.clear();
      in_flight_.store(0, std::memory_order_release);
    }
    for (std::size_t d = 0; d < n_; ++d)
      for (std::uint32_t p = 0; p < config_.depth; ++p)
        relay_store_word(&slot_words(d, p)[relay_layout::abort], 1);
    relay_store_fence();
    for (auto s : release_now) release_queues(s);
  }

  bool failed() const {
    std::lock_guard lock(mutex_);
    return failed_;
  }

  // From any thread, once a call's work finished on the GPUs (Ticket::wait): fails the
  // communicator where a kernel gave up waiting for the last sum the thread wrote into
  // its slot set (it did not see the host's write, and left its buffer as it was), so
  // that no host wait returns such a call as done.
  void verify() {
    if (!config_.confirm) return;
    for (std::uint32_t p = 0; p < config_.depth; ++p) {
      const std::uint64_t sequence = served_sequence_[p].load(std::memory_order_acquire);
      if (!sequence) continue;
      for (std::size_t d = 0; d < n_; ++d)
        if (kernel_outcome(d, p, static_cast<std::uint32_t>(sequence)) == Outcome::gave_up) {
          report_unseen(gave_up_why(d, sequence));
          return;
        }
    }
  }

  // Submitted calls not yet served.
  std::size_t in_flight() const { return in_flight_.load(std::memory_order_acquire); }

  Stats stats() {
    auto cpu = thread_cpu_time(thread_);
    for (auto& h : helpers_) cpu += thread_cpu_time(h->thread);
    return recorder_.stats(cpu);
  }

  // The threads that serve a call of `count` values together: one a grain at most (1 for a
  // call of under two grains).
  std::size_t parts_for(std::size_t count) const {
    return std::max<std::size_t>(1, std::min<std::size_t>(config_.threads, count / grain));
  }

  // Ends the thread (a call it is serving is left where it is: abort() first if the GPU
  // may still wait for one). Idempotent.
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      quit_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    stop_helpers();
  }

 private:
  // Values a step of the thread's loop takes from each device.
  static constexpr std::size_t chunk = 2048;
  // A call is cut into parts of whole grains, so that the threads share a 16 KiB call
  // (4096 values) eight ways: a thread reads a grain of two devices' units (8 KiB) in about
  // 1 us on an H200 host, a helper's hand-over costs a few hundred ns.
  static constexpr std::size_t grain = 512;
  struct Call {
    std::uint64_t sequence = 0;
    std::uint32_t stamp = 0;
    std::uint32_t slot_set = 0;
    std::size_t count = 0;
    std::uint32_t contributing = 0;
    std::chrono::steady_clock::time_point handed;
  };

  struct DeviceMemory {
    std::unique_ptr<MappedBuffer> slots, publish;
    Timeline release;  // queue-waiting devices only
  };

  // Waiting for a device's values: spin (pause) while they come soon, then yield, then
  // sleep a little, so that a call waiting behind long GPU work costs little CPU.
  class Backoff {
   public:
    void progress() { spins_ = 0; }
    // False once `deadline` passed or the hub stops.
    bool step(std::chrono::steady_clock::time_point deadline, const std::atomic<bool>& stop) {
      using namespace std::chrono_literals;
      if ((++spins_ & 63u) != 0) {
        relay_cpu_relax();
        return true;
      }
      const auto now = std::chrono::steady_clock::now();
      if (spins_ == 64) since_ = now;
      if (now > deadline || stop.load(std::memory_order_acquire)) return false;
      const auto idle = now - since_;
      if (idle < 200us) relay_cpu_relax();
      else if (idle < 2ms) std::this_thread::yield();
      else std::this_thread::sleep_for(idle < 20ms ? 50us : 500us);
      return true;
    }

   private:
    std::uint32_t spins_ = 0;
    std::chrono::steady_clock::time_point since_;
  };

  // A helper thread and the part of a call it is given. The thread writes `job` and then
  // `posted` (a new generation); the helper serves the part, fences its stores, writes
  // `failed`/`why`, then `done` (the generation).
  struct alignas(64) Helper {
    Call job;
    std::size_t begin = 0, end = 0;
    std::chrono::steady_clock::time_point deadline;
    std::atomic<std::uint64_t> posted{0};
    alignas(64) std::atomic<std::uint64_t> done{0};
    bool failed = false;
    std::string why;
    std::atomic<bool> asleep{false};
    std::mutex mutex;
    std::condition_variable cv;
    std::thread thread;
  };

  void help(Helper& me) {
#if defined(__linux__)
    (void)::pthread_setname_np(::pthread_self(), "tpar-relay-h");
#endif
    using namespace std::chrono_literals;
    std::uint64_t seen = 0;
    auto idle_since = std::chrono::steady_clock::now();
    for (;;) {
      const std::uint64_t gen = me.posted.load(std::memory_order_acquire);
      if (gen != seen) {
        seen = gen;
        std::string why;
        const bool ok = serve_range(me.job, me.begin, me.end, me.deadline, why, nullptr);
        relay_store_fence();  // this part's stores into the slots, before the thread writes the flags
        me.failed = !ok;
        me.why = std::move(why);
        me.done.store(gen, std::memory_order_release);
        idle_since = std::chrono::steady_clock::now();
        continue;
      }
      if (helpers_stop_.load(std::memory_order_acquire)) return;
      // Idle: spin a little (200 us while relay calls are in flight, 50 after), then sleep
      // until the thread posts a part. A part is posted when its call is handed to the
      // thread, usually well before the devices' values come, so waking costs little.
      const auto idle = std::chrono::steady_clock::now() - idle_since;
      if (idle < (in_flight_.load(std::memory_order_acquire) != 0 ? 200us : 50us)) {
        for (int i = 0; i < 16; ++i) relay_cpu_relax();
        continue;
      }
      std::unique_lock lock(me.mutex);
      me.asleep.store(true, std::memory_order_seq_cst);
      me.cv.wait(lock, [&] {
        return me.posted.load(std::memory_order_seq_cst) != seen || helpers_stop_.load(std::memory_order_seq_cst);
      });
      me.asleep.store(false, std::memory_order_relaxed);
      idle_since = std::chrono::steady_clock::now();
    }
  }

  void stop_helpers() {
    helpers_stop_.store(true, std::memory_order_seq_cst);
    for (auto& h : helpers_) {
      { std::lock_guard lock(h->mutex); }
      h->cv.notify_one();
    }
    for (auto& h : helpers_)
      if (h->thread.joinable()) h->thread.join();
  }

  void run() {
#if defined(__linux__)
    // "tpar-relay", so that tools (top -H, tpar-idle-cpu) tell it from the driver's threads.
    (void)::pthread_setname_np(::pthread_self(), "tpar-relay");
#endif
    using namespace std::chrono_literals;
    std::unique_lock lock(mutex_);
    bool slept = false;
    for (;;) {
      if (ready_.empty() && !stop_) {
        lock.unlock();
        linger();
        check_confirmed();
        lock.lock();
        // Calls served whose kernels have not all confirmed their sum yet (they usually
        // have by now): looked at every millisecond until they have, or the timeout
        // since their flags were written fails the communicator; then the thread blocks.
        while (!stop_ && !failed_ && ready_.empty() && !unconfirmed_.empty()) {
          cv_.wait_for(lock, 1ms, [&] { return stop_ || !ready_.empty(); });
          lock.unlock();
          check_confirmed();
          lock.lock();
        }
        slept = ready_.empty() && !stop_;
        cv_.wait(lock, [&] { return stop_ || !ready_.empty(); });
      }
      if (stop_) return;
      const Call c = ready_.front();
      if (slept) {  // handed over while the thread slept: how long it took to come to it
        slept = false;
        recorder_.note_wakeup(c.handed);
      }
      const auto deadline = std::max(c.handed, last_end_) + config_.timeout;
      lock.unlock();
      std::string why;
      bool unseen = false;  // a kernel did not see a sum (why says which): no timeout of this call's
      const bool ok = check_confirmed() && serve(c, deadline, why, unseen);
      if (!ok && !quit_.load(std::memory_order_acquire)) {
        if (unseen) {
          report_unseen(why);
          unconfirmed_.clear();
        } else {
          // This call (still first in line) and every one after it: released by abort().
          const Error e(ErrorCode::timeout, "relay call " + std::to_string(c.sequence) + " was not served within the timeout: " +
                                                why + unconfirmed_hint());
          unconfirmed_.clear();
          if (on_failure_) on_failure_(e);
          abort();
        }
      }
      lock.lock();
      last_end_ = std::chrono::steady_clock::now();
      if (!ready_.empty() && ready_.front().sequence == c.sequence) ready_.pop_front();
      in_flight_.store(ready_.size(), std::memory_order_release);
    }
  }

  // A next call handed over soon after the last one is served without a wake-up.
  void linger() {
    using namespace std::chrono_literals;
    const auto until = std::chrono::steady_clock::now() + 50us;
    while (in_flight_.load(std::memory_order_acquire) == 0 && !quit_.load(std::memory_order_acquire)) {
      for (int i = 0; i < 64; ++i) relay_cpu_relax();
      if (std::chrono::steady_clock::now() > until) return;
    }
  }

  // One call: false (and why) when its values did not all come in time, or (`unseen`)
  // where a kernel had given up on the sum of this slot set's previous call.
  bool serve(const Call& c, std::chrono::steady_clock::time_point deadline, std::string& why, bool& unseen) {
    note_kernel_times(c.slot_set);
    Backoff backoff;
    auto arrived = c.handed;  // every device's first chunk seen (set below; a call of no values has none)
    const auto contributes = [&](std::size_t d) { return d < 32 && ((c.contributing >> d) & 1u); };
    // Devices that contribute nothing announce their arrival in the header.
    for (std::size_t d = 0; d < n_; ++d) {
      if (contributes(d)) continue;
      std::atomic_ref<std::uint32_t> arrived(publish_header(d, c.slot_set)[relay_layout::arrived]);
      while (arrived.load(std::memory_order_acquire) != c.stamp)
        if (!backoff.step(deadline, quit_)) {
          why = "device " + std::to_string(d) + " did not start the call (a ready point not signalled, or a device stalled)";
          return false;
        }
      backoff.progress();
    }
    // Parts of whole grains: part p takes grains [p G / P, (p + 1) G / P); part 0 is this
    // thread's, part p the helper p - 1's.
    const std::size_t parts = parts_for(c.count);
    const std::size_t grains = (c.count + grain - 1) / grain;
    const auto part_begin = [&](std::size_t p) { return std::min(c.count, p * grains / parts * grain); };
    for (std::size_t p = 1; p < parts; ++p) {
      Helper& h = *helpers_[p - 1];
      h.job = c;
      h.begin = part_begin(p);
      h.end = part_begin(p + 1);
      h.deadline = deadline;
      h.posted.store(++generation_, std::memory_order_seq_cst);
      if (h.asleep.load(std::memory_order_seq_cst)) {
        recorder_.note_helper_wakeup();
        std::lock_guard lock(h.mutex);
        h.cv.notify_one();
      }
    }
    bool ok = serve_range(c, 0, part_begin(1), deadline, why, &arrived);
    // Every helper's part, whatever became of this one: a helper gives up by the same
    // deadline (or when the hub stops), so this wait ends; none may still be at work when
    // the next call is posted.
    for (std::size_t p = 1; p < parts; ++p) {
      Helper& h = *helpers_[p - 1];
      const std::uint64_t gen = h.posted.load(std::memory_order_relaxed);
      // The parts come from the same kernels, so a helper is rarely far behind; where its
      // device stalled it is, until the deadline: then this wait sleeps between looks.
      std::chrono::steady_clock::time_point since{};
      for (std::uint32_t spins = 0; h.done.load(std::memory_order_acquire) != gen; ++spins) {
        if (spins < 4096) {
          relay_cpu_relax();
          continue;
        }
        const auto now = std::chrono::steady_clock::now();
        if (since == std::chrono::steady_clock::time_point{}) since = now;
        if (now - since < std::chrono::milliseconds(2)) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (h.failed && ok) {
        ok = false;
        why = h.why;
      }
    }
    if (!ok) return false;
    if (parts > 1) recorder_.note_split();
    // Every device arrived, so each finished the previous call of this slot set: whether
    // its kernel saw that call's sum is settled (a kernel that gave up left its buffer as
    // it was). At the stamp wrap, before the scrub clears the words that say so, every
    // earlier call of every set; else after this call's flags, off its path.
    const std::uint32_t settled = c.stamp == 0xFFFFFFFFu ? ~0u : c.slot_set;
    if (settled == ~0u && !settle(settled, why)) {
      unseen = true;
      return false;
    }
    // Every device has published this call and none can publish again before it has the
    // sum: the moment to clear stale stamps before they repeat (once per 2^32 calls).
    if (c.stamp == 0xFFFFFFFFu) scrub();
    last_stamp_[c.slot_set] = c.stamp;
    recorder_.note_served();  // before any device can finish the call
    const RelayWithheld& withheld = relay_withheld();
    relay_store_fence();
    for (std::size_t d = 0; d < n_; ++d)
      if (!withheld.call(d, c.sequence)) relay_store_word(&slot_words(d, c.slot_set)[relay_layout::flag], c.stamp);
    relay_store_fence();
    const auto written = std::chrono::steady_clock::now();
    served_sequence_[c.slot_set].store(c.sequence, std::memory_order_release);
    if (settled != ~0u && !settle(settled, why)) {  // (this call is not among them yet)
      unseen = true;
      return false;
    }
    if (config_.confirm) unconfirmed_.push_back({c.sequence, c.stamp, c.slot_set, written});
    recorder_.note_served_times(c.handed, arrived, written);
    release_queues(c.sequence);
    return true;
  }

  // What device d's kernel of the call stamped `stamp` on slot set `slot_set` left in its
  // publish header: nothing yet, the sum seen (or a later call's of the set), or its wait
  // given up.
  enum class Outcome { pending, seen, gave_up };
  Outcome kernel_outcome(std::size_t d, std::uint32_t slot_set, std::uint32_t stamp) const {
    std::uint32_t* h = publish_header(d, slot_set);
    const auto word = [&](std::size_t i) { return std::atomic_ref<std::uint32_t>(h[i]).load(std::memory_order_acquire); };
    if (word(relay_layout::gave_up) == stamp) return Outcome::gave_up;
    const std::uint32_t seen = word(relay_layout::seen);
    return seen && static_cast<std::int32_t>(seen - stamp) >= 0 ? Outcome::seen : Outcome::pending;
  }

  std::string gave_up_why(std::size_t d, std::uint64_t sequence) const {
    return "device " + std::to_string(d) + "'s relay kernel gave up waiting for the sum of relay call " + std::to_string(sequence) +
           ", which the host had written into its memory: it did not see the host's write while it ran (what the relay's "
           "self-test checked at creation), and left its buffer as it was";
  }

  // The served calls whose kernels have not all confirmed their sum: those now confirmed
  // are dropped; false (the communicator failed) where a kernel gave up on one, or did
  // not confirm it within the timeout of its flags being written. The thread's only.
  bool check_confirmed() {
    if (unconfirmed_.empty() || quit_.load(std::memory_order_acquire)) return true;
    const auto now = std::chrono::steady_clock::now();
    for (auto it = unconfirmed_.begin(); it != unconfirmed_.end();) {
      bool all = true;
      for (std::size_t d = 0; d < n_; ++d) {
        const Outcome o = kernel_outcome(d, it->slot_set, it->stamp);
        if (o == Outcome::gave_up) {
          report_unseen(gave_up_why(d, it->sequence));
          unconfirmed_.clear();
          return false;
        }
        if (o == Outcome::pending) {
          all = false;
          if (now - it->written > config_.timeout) {
            report_unseen("device " + std::to_string(d) + "'s relay kernel did not confirm the sum of relay call " +
                          std::to_string(it->sequence) + " within the timeout (" +
                          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(config_.timeout).count()) +
                          " ms) after the host wrote it into its memory: it does not see the host's writes while it runs "
                          "(what the relay's self-test checked at creation), or the device stalled");
            unconfirmed_.clear();
            return false;
          }
        }
      }
      it = all ? unconfirmed_.erase(it) : std::next(it);
    }
    return true;
  }

  // Every device arrived at a call of slot set `slot_set` (~0u: of every set), so each
  // finished the set's earlier calls: those whose kernel did not give up are settled.
  bool settle(std::uint32_t slot_set, std::string& why) {
    for (auto it = unconfirmed_.begin(); it != unconfirmed_.end();) {
      if (slot_set != ~0u && it->slot_set != slot_set) {
        ++it;
        continue;
      }
      for (std::size_t d = 0; d < n_; ++d)
        if (kernel_outcome(d, it->slot_set, it->stamp) == Outcome::gave_up) {
          why = gave_up_why(d, it->sequence);
          return false;
        }
      it = unconfirmed_.erase(it);
    }
    return true;
  }

  // For a call that timed out: a device whose kernel had not confirmed an earlier sum.
  std::string unconfirmed_hint() const {
    for (const auto& u : unconfirmed_)
      for (std::size_t d = 0; d < n_; ++d)
        if (kernel_outcome(d, u.slot_set, u.stamp) == Outcome::pending)
          return "; device " + std::to_string(d) + "'s kernel had not confirmed the sum of relay call " + std::to_string(u.sequence) +
                 " either: it may not see the host's writes into its memory while it runs (what the relay's self-test checked at "
                 "creation)";
    return {};
  }

  // A kernel did not see a sum the host wrote: the communicator fails (logged: the
  // premise the relay rests on stopped holding) and every call in flight is given up.
  void report_unseen(const std::string& why) {
    {
      std::lock_guard lock(mutex_);
      if (failed_) return;
    }
    log(LogLevel::error, "relay: " + why);
    const Error e(ErrorCode::timeout, "relay: " + why);
    if (on_failure_) on_failure_(e);
    abort();
  }

  // Values [begin, end) of call c (whole grains from `begin`): read from every contributing
  // device as they arrive, summed in device order (then the host-played peers), written
  // into every device's slot. False (and why) when a device's values did not come by
  // `deadline` or the hub stops. `arrived`: set when the first chunk's values are all in.
  bool serve_range(const Call& c, std::size_t begin, std::size_t end, std::chrono::steady_clock::time_point deadline,
                   std::string& why, std::chrono::steady_clock::time_point* arrived) {
    alignas(64) float acc[chunk];
    Backoff backoff;
    const auto contributes = [&](std::size_t d) { return d < 32 && ((c.contributing >> d) & 1u); };
    // Part 0's first chunk: when each contributing device's value `begin` came (RelayStats::spread).
    std::uint32_t unseen = 0;
    const auto look = [&] {
      for (std::uint32_t left = unseen; left; left &= left - 1) {
        const auto d = static_cast<std::size_t>(std::countr_zero(left));
        if (static_cast<std::uint32_t>(relay_load_unit(publish_units(d, c.slot_set) + begin) >> 32) == c.stamp) {
          recorder_.note_first_seen(d);
          unseen &= ~(1u << d);
        }
      }
    };
    bool timed = false;
    if (arrived && begin < end) {
      for (std::size_t d = 0; d < n_; ++d)
        if (contributes(d)) unseen |= 1u << d;
      const std::uint32_t all = unseen;
      look();
      timed = unseen == all && std::popcount(all) >= 2;  // waiting before any came
      if (!timed) unseen = 0;
    }
    // The contributing devices' units, in device order.
    std::array<const std::uint64_t*, 32> units{};
    std::array<std::size_t, 32> device{};
    std::size_t k = 0;
    for (std::size_t d = 0; d < n_; ++d)
      if (contributes(d)) device[k++] = d;
    for (std::size_t base = begin; base < end; base += chunk) {
      const std::size_t m = std::min(chunk, end - base);
      bool first = k == 0;
      for (std::size_t j = 0; j < k; ++j) units[j] = publish_units(device[j], c.slot_set) + base;
      // One pass over every device's units; at the first value some device has not
      // stamped yet, wait for it and go on from there (a value a device wrote stays until
      // its next call, which needs this one's sum). relay_sum.hpp says why the loads need
      // no other ordering.
      for (std::size_t i = 0; k > 0;) {
        const std::size_t at = relay_sum(units.data(), k, i, m, end - base, c.stamp, acc, config_.scalar_sum);
        if (at > i) backoff.progress();
        if ((i = at) == m) break;
        std::size_t late = 0;  // a device whose value i is not in yet
        while (late < k && static_cast<std::uint32_t>(relay_load_unit(units[late] + i) >> 32) == c.stamp) ++late;
        if (late == k) continue;  // it came meanwhile
        if (unseen) look();
        if (!backoff.step(deadline, quit_)) {
          why = "device " + std::to_string(device[late]) + " did not publish value " + std::to_string(base + i) + " of " +
                std::to_string(c.count) + " (a ready point not signalled, or a device stalled)";
          return false;
        }
      }
      if (unseen) look();
      // The host-played peers (tpar-bench, tests): one contribution each, flushed as the
      // kernels flush subnormals (wire_codec.hpp).
      const auto add = [&](const float* x) {
        for (std::size_t i = 0; i < m; ++i) acc[i] = first ? flush_subnormal(x[i]) : add_flushed(acc[i], x[i]);
        first = false;
      };
      for (const auto& peer : peers_) add(peer.data() + base);
      if (first) std::fill_n(acc, m, 0.0f);
      if (arrived && base == begin) {
        *arrived = std::chrono::steady_clock::now();
        if (timed) recorder_.note_arrivals(c.contributing);
      }
      for (std::size_t d = 0; d < n_; ++d)
        std::memcpy(slot_words(d, c.slot_set) + relay_layout::payload + base, acc, m * sizeof(float));
    }
    return true;
  }

  // The clock stamps of the call that last used slot set `slot_set` (done: a call got the
  // slot set after it), by device where its kernel wrote them (shaders/relay.glsl).
  void note_kernel_times(std::uint32_t slot_set) {
    const std::uint32_t prev = last_stamp_[slot_set];
    if (!prev) return;
    for (std::size_t d = 0; d < n_; ++d) recorder_.note_kernel_times(d, prev, publish_header(d, slot_set));
  }

  // Every publish area back to zero (no stamp), when stamps are about to repeat.
  // Word by word, as atomics: the host touches a device's words only through atomic
  // accesses, so that a host thread standing in for a device (the tests) shares them
  // race-free too. Once per 2^32 calls; its cost does not matter.
  void scrub() {
    for (auto& s : devices_) {
      auto* w = static_cast<std::uint64_t*>(s.publish->data);
      for (vk::DeviceSize i = 0; i < s.publish->size / sizeof(std::uint64_t); ++i)
        std::atomic_ref<std::uint64_t>(w[i]).store(0, std::memory_order_relaxed);
    }
  }

  // Lets the collect batches of call `sequence` go, on devices that wait at the queue.
  // Values go up one call at a time, never past one a queue waits for.
  void release_queues(std::uint64_t sequence) {
    std::optional<Error> failed;
    {
      std::lock_guard lock(release_mutex_);
      if (sequence <= released_) return;
      released_ = sequence;
      for (std::size_t d = 0; d < n_; ++d) {
        if (!devices_[d].release.handle()) continue;
        try {
          devices_[d].release.signal(sequence);
        } catch (const Error& e) {
          if (!failed) failed = e;
        }
      }
    }
    // Outside the lock: the failure handler may abort the relay, which releases queues.
    if (failed && on_failure_) on_failure_(*failed);
  }

  const std::size_t n_;
  const Config config_;
  FailureHandler on_failure_;
  vk::DeviceSize slot_block_ = 0, publish_block_ = 0;
  std::vector<DeviceMemory> devices_;
  std::vector<std::vector<float>> peers_;
  std::uint64_t next_sequence_;  // the communicator's thread only

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Call> recorded_, ready_;
  bool stop_ = false, failed_ = false;
  std::atomic<bool> quit_{false};  // stop_ or failed_: a wait in progress ends
  std::atomic<std::size_t> in_flight_{0};
  std::chrono::steady_clock::time_point last_end_;  // the thread's only
  RelayRecorder recorder_;  // Stats
  std::vector<std::uint32_t> last_stamp_;  // the thread's only, by slot set: its last call served
  // By slot set: the number of its last call whose flags were written (Ticket::wait's verify).
  std::unique_ptr<std::atomic<std::uint64_t>[]> served_sequence_;
  struct Unconfirmed {
    std::uint64_t sequence = 0;
    std::uint32_t stamp = 0, slot_set = 0;
    std::chrono::steady_clock::time_point written;
  };
  std::deque<Unconfirmed> unconfirmed_;  // the thread's only: calls served, not yet confirmed by every kernel

  std::mutex release_mutex_;
  std::uint64_t released_ = 0;

  std::vector<std::unique_ptr<Helper>> helpers_;
  std::atomic<bool> helpers_stop_{false};
  std::uint64_t generation_ = 0;  // the thread's only: the last part posted to a helper

  std::thread thread_;  // last: started once everything above exists
};

}  // namespace tpar::inline v0::detail
