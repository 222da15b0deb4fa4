// The relay (algo/relay.hpp, comm/detail/relay_hub.hpp): its kernel on a device, both
// variants, every mode and every way its wait ends; its host thread with the test
// playing the devices (sums, arrival, the stamp wrap, timeouts, CPU); and the
// communicator with the relay on lavapipe virtual devices (their queues wait for the sum,
// as lavapipe ends long shader loops itself), under the validation layer: exact and
// identical results for 1 to 8 devices and many sizes, host-played peers, devices that
// contribute nothing, deferred calls, failures that must not hang, destruction with calls
// in flight, and no CPU when idle. The thread also checks that every kernel confirmed the
// sum it wrote (the premise the relay's self-test proves at creation, which
// test_relay_self_test.cpp tests with the premise made to fail).
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>
#include <tpar/comm/detail/relay_hub.hpp>
#include <tpar/comm/detail/relay_protocol.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/scoped_env.hpp"
#include "support/test_timeline.hpp"
#include "support/thread_cpu.hpp"

#include <sys/resource.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

using namespace tpar;
using namespace tpar_test;
using namespace std::chrono_literals;
namespace layout = tpar::detail::relay_layout;

namespace {

Options relay_options(std::size_t max_bytes = std::size_t{256} << 10) {
  Options o;
  o.algo = AlgoChoice::relay;
  o.relay_max_bytes = max_bytes;
  o.timeout = test_timeout;
  return o;
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// The relay's sum: f32, device order, from the first contributing value, then the
// host-played peers; +0 when nothing contributes.
std::vector<float> relay_sum(const std::vector<std::vector<float>>& x, std::uint32_t contributing, std::uint32_t host_peers = 0) {
  const std::size_t count = x[0].size();
  std::vector<float> s(count, 0.0f);
  for (std::size_t i = 0; i < count; ++i) {
    bool first = true;
    float acc = 0.0f;
    for (std::size_t d = 0; d < x.size(); ++d) {
      if (!((contributing >> d) & 1u)) continue;
      acc = first ? x[d][i] : acc + x[d][i];
      first = false;
    }
    for (std::uint32_t p = 0; p < host_peers; ++p) {
      acc = first ? relay_host_peer_value(p, i) : acc + relay_host_peer_value(p, i);
      first = false;
    }
    s[i] = acc;
  }
  return s;
}

std::uint64_t unit(float v, std::uint32_t stamp) { return std::uint64_t{stamp} << 32 | std::bit_cast<std::uint32_t>(v); }

// Waits (bounded) until `ok()`.
template <class F>
bool eventually(F&& ok, std::chrono::milliseconds bound = 20s) {
  const auto until = std::chrono::steady_clock::now() + bound;
  while (!ok()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}

std::uint32_t load(const std::uint32_t* w) { return std::atomic_ref<std::uint32_t>(*const_cast<std::uint32_t*>(w)).load(); }

// ---------------------------------------------------------------------------------------
// The kernel, dispatched by hand on one device, with a hub's memory (its thread idle).

class KernelRig {
 public:
  static constexpr std::size_t max_count = 100000;
  static constexpr std::size_t guard = 64;  // floats before and after the user values

  KernelRig(tpar::Device& dev, KernelSet& kernels, detail::RelayHub& hub)
      : dev_(dev), kernels_(kernels), hub_(hub), user_(dev, (max_count + 2 * guard) * sizeof(float)) {
    const vk::Device vkd = dev.handle();
    vk::DescriptorPoolSize size(vk::DescriptorType::eStorageBuffer, kernel_storage_buffers);
    vk::DescriptorPoolCreateInfo pool_info({}, 1, 1, &size);
    if (kernels.update_after_bind()) pool_info.flags = vk::DescriptorPoolCreateFlagBits::eUpdateAfterBind;
    REQUIRE(vkd.createDescriptorPool(&pool_info, nullptr, &pool_) == vk::Result::eSuccess);
    const vk::DescriptorSetLayout layout = kernels.set_layout();
    vk::DescriptorSetAllocateInfo set_info(pool_, 1, &layout);
    REQUIRE(vkd.allocateDescriptorSets(&set_info, &set_) == vk::Result::eSuccess);
    const vk::DescriptorBufferInfo user(user_.handle(), guard * sizeof(float), max_count * sizeof(float));
    const vk::DescriptorBufferInfo slot = hub.slot(0, 0), publish = hub.publish(0, 0);
    std::array<vk::DescriptorBufferInfo, max_direct_peers> peers;
    peers.fill(publish);
    const std::array<vk::WriteDescriptorSet, 4> writes{
        vk::WriteDescriptorSet(set_, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &user),
        vk::WriteDescriptorSet(set_, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &slot),
        vk::WriteDescriptorSet(set_, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &publish),
        vk::WriteDescriptorSet(set_, 3, 0, max_direct_peers, vk::DescriptorType::eStorageBuffer, nullptr, peers.data())};
    vkd.updateDescriptorSets(static_cast<std::uint32_t>(writes.size()), writes.data(), 0, nullptr);
    vk::CommandPoolCreateInfo cp(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, dev.compute_queue().family());
    REQUIRE(vkd.createCommandPool(&cp, nullptr, &cmd_pool_) == vk::Result::eSuccess);
    vk::CommandBufferAllocateInfo ai(cmd_pool_, vk::CommandBufferLevel::ePrimary, 1);
    REQUIRE(vkd.allocateCommandBuffers(&ai, &cb_) == vk::Result::eSuccess);
    vk::FenceCreateInfo fi;
    REQUIRE(vkd.createFence(&fi, nullptr, &fence_) == vk::Result::eSuccess);
  }
  KernelRig(const KernelRig&) = delete;
  KernelRig& operator=(const KernelRig&) = delete;
  ~KernelRig() {
    const vk::Device vkd = dev_.handle();
    vkd.destroyFence(fence_);
    vkd.destroyCommandPool(cmd_pool_);
    vkd.destroyDescriptorPool(pool_);
  }

  float* user() { return user_.floats(guard * sizeof(float)); }
  float* all_user() { return user_.floats(); }

  // Dispatches the relay kernel (mode, count, spin bound) and submits it; wait() ends it.
  void start(std::uint32_t mode, std::size_t count, std::uint32_t spin_bound_ms) {
    const vk::Device vkd = dev_.handle();
    REQUIRE(vkd.resetFences(1, &fence_) == vk::Result::eSuccess);
    REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkResetCommandBuffer(cb_, 0) == VK_SUCCESS);
    vk::CommandBufferBeginInfo begin(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    REQUIRE(cb_.begin(&begin) == vk::Result::eSuccess);
    KernelArgs a;
    a.count = static_cast<std::uint32_t>(count);
    a.mode = mode;
    a.spin_bound = spin_bound_ms;
    // After the previous dispatch on these buffers (the fence wait orders only the host).
    const vk::MemoryBarrier after(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
    cb_.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {}, 1, &after, 0, nullptr,
                        0, nullptr);
    cb_.bindPipeline(vk::PipelineBindPoint::eCompute, kernels_.pipeline(Kernel::relay, Wire::f32));
    cb_.bindDescriptorSets(vk::PipelineBindPoint::eCompute, kernels_.layout(), 0, 1, &set_, 0, nullptr);
    cb_.pushConstants(kernels_.layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof(KernelArgs), &a);
    cb_.dispatch(kernel_groups(Kernel::relay, count, dev_.capabilities().max_workgroups_x), 1, 1);
    const vk::MemoryBarrier to_host(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eHostRead);
    cb_.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eHost, {}, 1, &to_host, 0, nullptr, 0,
                        nullptr);
    REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb_) == VK_SUCCESS);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb_);
    REQUIRE(dev_.compute_queue().submit(std::span(&si, 1), fence_) == vk::Result::eSuccess);
  }
  bool wait(std::chrono::seconds bound = 60s) {
    return dev_.handle().waitForFences(1, &fence_, VK_TRUE, std::chrono::nanoseconds(bound).count()) == vk::Result::eSuccess;
  }

 private:
  tpar::Device& dev_;
  KernelSet& kernels_;
  detail::RelayHub& hub_;
  TestBuffer user_;
  vk::DescriptorPool pool_;
  vk::DescriptorSet set_;
  vk::CommandPool cmd_pool_;
  vk::CommandBuffer cb_;
  vk::Fence fence_;
};

constexpr std::uint64_t sentinel_unit = 0xA5A5A5A5A5A5A5A5ull;
constexpr float sentinel_user = -12345.5f;

struct KernelCase {
  std::size_t count;
  std::vector<float> in, sum;
};

// Fills the user values, the slot's sum and the publish area's sentinels for one call.
KernelCase prepare(KernelRig& rig, detail::RelayHub& hub, std::size_t count, std::uint64_t seed) {
  KernelCase k{count, std::vector<float>(count), std::vector<float>(count)};
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (auto& v : k.in) v = dist(rng);
  if (count > 3) k.in[3] = -0.0f;
  for (auto& v : k.sum) v = dist(rng);
  std::fill_n(rig.all_user(), KernelRig::max_count + 2 * KernelRig::guard, sentinel_user);
  std::copy(k.in.begin(), k.in.end(), rig.user());
  std::fill_n(hub.publish_units(0, 0), KernelRig::max_count + 1, sentinel_unit);
  std::fill_n(hub.publish_header(0, 0), 64, 0u);
  std::memcpy(hub.slot_words(0, 0) + layout::payload, k.sum.data(), count * sizeof(float));
  return k;
}

bool user_is(KernelRig& rig, const std::vector<float>& v) {
  for (std::size_t i = 0; i < KernelRig::guard; ++i)
    if (rig.all_user()[i] != sentinel_user || rig.user()[v.size() + i] != sentinel_user) return false;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (std::bit_cast<std::uint32_t>(rig.user()[i]) != std::bit_cast<std::uint32_t>(v[i])) {
      MESSAGE("user value " << i << " is " << rig.user()[i] << ", not " << v[i]);
      return false;
    }
  return true;
}

bool published(detail::RelayHub& hub, const KernelCase& k, std::uint32_t stamp) {
  const std::uint64_t* u = hub.publish_units(0, 0);
  for (std::size_t i = 0; i < k.count; ++i)
    if (u[i] != unit(k.in[i], stamp)) return false;
  return u[k.count] == sentinel_unit;
}

bool untouched(detail::RelayHub& hub, std::size_t count) {
  const std::uint64_t* u = hub.publish_units(0, 0);
  for (std::size_t i = 0; i <= count; ++i)
    if (u[i] != sentinel_unit) return false;
  return true;
}

struct KernelEnv {
  VkEnv env{1};
  std::unique_ptr<detail::RelayHub> hub;
  std::unique_ptr<KernelSet> counted;  // the variant bounded by a count of polls
  explicit KernelEnv() {
    if (!env.ok()) return;
    detail::RelayHub::Config c;
    c.depth = 1;
    c.max_bytes = (KernelRig::max_count + 512) * sizeof(float);  // room for the sentinel past the last value
    hub = std::make_unique<detail::RelayHub>(env.group(), c, FailureHandler{});
    Device& dev = env.group()[0];
    counted = std::make_unique<KernelSet>(dev.handle(), dev.enabled().update_after_bind, false);
  }
  ~KernelEnv() {
    if (env.ok()) (void)VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[0].handle());
  }
  // The kernel sets to run: the device's own (the clock variant where it enabled
  // shaderDeviceClock) and the count variant.
  std::vector<std::pair<std::string, KernelSet*>> variants() {
    Device& dev = env.group()[0];
    std::vector<std::pair<std::string, KernelSet*>> v;
    if (dev.kernels().device_clock()) v.emplace_back("clock", &dev.kernels());
    v.emplace_back("count", counted.get());
    return v;
  }
};

}  // namespace

TEST_CASE("relay kernel: publishes stamped values, then copies the sum once the slot holds the call's stamp") {
  KernelEnv k;
  if (!k.env.ok()) return;
  Device& dev = k.env.group()[0];
  MESSAGE("device clock (VK_KHR_shader_clock): " << std::string(dev.kernels().device_clock() ? "yes" : "no"));
  for (auto [variant, kernels] : k.variants()) {
    KernelRig rig(dev, *kernels, *k.hub);
    for (std::size_t count : {std::size_t{1}, std::size_t{511}, std::size_t{512}, std::size_t{513}, std::size_t{4103},
                              KernelRig::max_count}) {
      CAPTURE(variant);
      CAPTURE(count);
      const std::uint64_t seq = k.hub->record(0, count, 1);
      const auto stamp = static_cast<std::uint32_t>(seq);
      const KernelCase c = prepare(rig, *k.hub, count, seq);
      k.hub->slot_words(0, 0)[layout::flag] = stamp;  // the sum is there before the kernel runs
      rig.start(relay_mode::contribute | relay_mode::arrive | relay_mode::collect, count, 60000);
      REQUIRE(rig.wait());
      CHECK(published(*k.hub, c, stamp));
      CHECK(k.hub->publish_header(0, 0)[layout::arrived] == stamp);
      CHECK(k.hub->publish_header(0, 0)[layout::gave_up] == 0);
      CHECK(user_is(rig, c.sum));
    }
  }
}

TEST_CASE("relay kernel: each mode does its part only") {
  KernelEnv k;
  if (!k.env.ok()) return;
  Device& dev = k.env.group()[0];
  KernelRig rig(dev, dev.kernels(), *k.hub);
  const std::size_t count = 3000;
  {
    // A device that contributes nothing: arrives and collects.
    const auto stamp = static_cast<std::uint32_t>(k.hub->record(0, count, 0));
    const KernelCase c = prepare(rig, *k.hub, count, 1);
    k.hub->slot_words(0, 0)[layout::flag] = stamp;
    rig.start(relay_mode::arrive | relay_mode::collect, count, 60000);
    REQUIRE(rig.wait());
    CHECK(untouched(*k.hub, count));
    CHECK(k.hub->publish_header(0, 0)[layout::arrived] == stamp);
    CHECK(user_is(rig, c.sum));
  }
  {
    // The first half of a queue-waiting device's call: publish, touch nothing else.
    const auto stamp = static_cast<std::uint32_t>(k.hub->record(0, count, 1));
    const KernelCase c = prepare(rig, *k.hub, count, 2);
    k.hub->slot_words(0, 0)[layout::flag] = stamp;
    rig.start(relay_mode::contribute | relay_mode::arrive, count, 60000);
    REQUIRE(rig.wait());
    CHECK(published(*k.hub, c, stamp));
    CHECK(k.hub->publish_header(0, 0)[layout::arrived] == stamp);
    CHECK(user_is(rig, c.in));
    // ... and its second: collect only.
    std::fill_n(k.hub->publish_header(0, 0), 64, 0u);
    rig.start(relay_mode::collect, count, 60000);
    REQUIRE(rig.wait());
    CHECK(published(*k.hub, c, stamp));
    CHECK(k.hub->publish_header(0, 0)[layout::arrived] == 0);
    CHECK(user_is(rig, c.sum));
  }
}

TEST_CASE("relay kernel: an aborted call touches nothing") {
  KernelEnv k;
  if (!k.env.ok()) return;
  Device& dev = k.env.group()[0];
  for (auto [variant, kernels] : k.variants()) {
    CAPTURE(variant);
    KernelRig rig(dev, *kernels, *k.hub);
    const std::size_t count = 5000;
    const auto stamp = static_cast<std::uint32_t>(k.hub->record(0, count, 1));
    const KernelCase c = prepare(rig, *k.hub, count, 3);
    k.hub->slot_words(0, 0)[layout::flag] = stamp;
    k.hub->slot_words(0, 0)[layout::abort] = 1;
    rig.start(relay_mode::contribute | relay_mode::arrive | relay_mode::collect, count, 60000);
    REQUIRE(rig.wait());
    CHECK(untouched(*k.hub, count));
    CHECK(k.hub->publish_header(0, 0)[layout::arrived] == 0);
    CHECK(user_is(rig, c.in));
    k.hub->slot_words(0, 0)[layout::abort] = 0;
  }
}

TEST_CASE("relay kernel: a wait that never sees its stamp ends at the spin bound, the user's values untouched") {
  KernelEnv k;
  if (!k.env.ok()) return;
  Device& dev = k.env.group()[0];
  const bool loops_bounded = dev.capabilities().shader_loops_bounded();
  for (auto [variant, kernels] : k.variants()) {
    CAPTURE(variant);
    const bool clock = kernels->device_clock();
    if (!clock && !loops_bounded) {
      // 2^32 polls take minutes on a GPU; the abort ends such a wait (next test).
      MESSAGE("count variant: its bound (2^32 polls) is not waited for here");
      continue;
    }
    KernelRig rig(dev, *kernels, *k.hub);
    const std::size_t count = 700;
    const auto stamp = static_cast<std::uint32_t>(k.hub->record(0, count, 1));
    const KernelCase c = prepare(rig, *k.hub, count, 4);
    k.hub->slot_words(0, 0)[layout::flag] = stamp - 1;  // the previous call's sum: stale
    const auto t0 = std::chrono::steady_clock::now();
    rig.start(relay_mode::contribute | relay_mode::arrive | relay_mode::collect, count, 300);
    REQUIRE(rig.wait());
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE(variant << ": the wait ended after " << waited * 1e3 << " ms" << std::string(loops_bounded ? " (the driver ends long loops)" : ""));
    if (clock && !loops_bounded) CHECK(waited >= 0.29);
    CHECK(published(*k.hub, c, stamp));
    CHECK(k.hub->publish_header(0, 0)[layout::gave_up] == stamp);
    CHECK(user_is(rig, c.in));
  }
}

TEST_CASE("relay kernel: the abort word ends a wait in progress") {
  KernelEnv k;
  if (!k.env.ok()) return;
  Device& dev = k.env.group()[0];
  for (auto [variant, kernels] : k.variants()) {
    CAPTURE(variant);
    if (!kernels->device_clock() && !dev.capabilities().shader_loops_bounded()) {
      // Its wait is not a bound of time (on an H200 it gave up before the abort came, 200
      // ms in), so calls never make it wait: such devices' queues wait for the sum.
      MESSAGE("count variant: not waited on here (docs/relay.md)");
      continue;
    }
    KernelRig rig(dev, *kernels, *k.hub);
    const std::size_t count = 700;
    const auto stamp = static_cast<std::uint32_t>(k.hub->record(0, count, 1));
    const KernelCase c = prepare(rig, *k.hub, count, 5);
    std::uint32_t* slot = k.hub->slot_words(0, 0);
    slot[layout::flag] = stamp - 1;
    rig.start(relay_mode::contribute | relay_mode::arrive | relay_mode::collect, count, 60000);
    std::this_thread::sleep_for(200ms);
    std::atomic_ref<std::uint32_t>(slot[layout::abort]).store(1);
    detail::relay_store_fence();
    REQUIRE(rig.wait(20s));
    CHECK(user_is(rig, c.in));
    // Where the driver ends long loops the wait may have ended on its own first.
    if (!dev.capabilities().shader_loops_bounded()) CHECK(k.hub->publish_header(0, 0)[layout::gave_up] == 0);
    slot[layout::abort] = 0;
  }
}

// ---------------------------------------------------------------------------------------
// The host thread, with the test playing the devices.

namespace {

struct HubRig {
  VkEnv env;
  std::mutex mutex;
  std::vector<Error> failures;
  std::unique_ptr<detail::RelayHub> hub;
  HubRig(std::uint32_t n, detail::RelayHub::Config c) : env(n) {
    if (!env.ok()) return;
    c.confirm = false;  // no kernel runs: the test plays the devices (a test below plays their confirmations)
    hub = std::make_unique<detail::RelayHub>(env.group(), c, [this](const Error& e) {
      std::lock_guard lock(mutex);
      failures.push_back(e);
    });
  }
  std::size_t failed() {
    std::lock_guard lock(mutex);
    return failures.size();
  }
  // Device d publishes values [from, to) of `x` for the call with `stamp` on `slot_set`.
  void publish(std::size_t d, std::uint32_t slot_set, const std::vector<float>& x, std::uint32_t stamp, std::size_t from = 0,
               std::size_t to = ~std::size_t{0}) {
    std::uint64_t* u = hub->publish_units(d, slot_set);
    for (std::size_t i = from; i < std::min(to, x.size()); ++i) std::atomic_ref<std::uint64_t>(u[i]).store(unit(x[i], stamp));
  }
  void arrive(std::size_t d, std::uint32_t slot_set, std::uint32_t stamp) {
    std::atomic_ref<std::uint32_t>(hub->publish_header(d, slot_set)[layout::arrived]).store(stamp);
  }
  bool served(std::uint32_t slot_set, std::uint32_t stamp, std::chrono::milliseconds bound = 20s) {
    return eventually(
        [&] {
          for (std::size_t d = 0; d < env.group().size(); ++d)
            if (load(hub->slot_words(d, slot_set) + layout::flag) != stamp) return false;
          return true;
        },
        bound);
  }
  bool sum_is(std::uint32_t slot_set, const std::vector<float>& s) {
    for (std::size_t d = 0; d < env.group().size(); ++d)
      if (std::memcmp(hub->slot_words(d, slot_set) + layout::payload, s.data(), s.size() * sizeof(float)) != 0) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("relay sum: the vector loops equal the one-value loop bit for bit over 1 to 4 devices, and stop at the first value not yet stamped") {
  // (Every path writes 0x7FC00000 for a NaN sum: which payload an addition keeps is the
  // compiler's and the instruction's choice; the SSE2 loop and the one-value loop once kept
  // different ones.)
  // Values of every kind the flush and the add treat apart: zeros of both signs,
  // subnormals, the smallest normals, sums that fall below them, infinities, NaN.
  const std::uint32_t specials[] = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x80800000u,
                                    0x00800001u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x3F800000u, 0xBF800000u};
  std::mt19937 rng(11);
  const std::uint32_t stamp = 0xA5A5A5A5u;
  const auto bits = [](float x) { return std::bit_cast<std::uint32_t>(x); };
  INFO("path: ", detail::relay_sum_path());
  for (std::size_t m : {std::size_t{1}, std::size_t{3}, std::size_t{4}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                        std::size_t{31}, std::size_t{2048}}) {
    CAPTURE(m);
    // Four devices' units, each value random bits or a special, with room past m (what the
    // loops may prefetch, and a unit past the end that must not be read as a value).
    std::vector<std::vector<std::uint64_t>> units(4);
    for (auto& u : units) {
      u.assign(m + 8, (std::uint64_t{stamp - 1} << 32) | 0x3F800000u);
      for (std::size_t i = 0; i < m; ++i) {
        const std::uint32_t b = rng() % 3 == 0 ? specials[rng() % std::size(specials)] : static_cast<std::uint32_t>(rng());
        u[i] = (std::uint64_t{stamp} << 32) | b;
      }
    }
    const std::uint64_t* p[4] = {units[0].data(), units[1].data(), units[2].data(), units[3].data()};
    for (std::size_t n = 1; n <= 4; ++n) {
      CAPTURE(n);
      // What the sum must be: the first device's value flushed, then each next one added
      // (flushed, added in f32, the result flushed; a NaN result the one quiet NaN).
      std::vector<float> expect(m);
      for (std::size_t i = 0; i < m; ++i) {
        float sum = detail::flush_subnormal(std::bit_cast<float>(static_cast<std::uint32_t>(units[0][i])));
        for (std::size_t d = 1; d < n; ++d) {
          const float r =
              detail::add_flushed(sum, std::bit_cast<float>(static_cast<std::uint32_t>(units[d][i])));
          sum = r != r ? std::bit_cast<float>(detail::relay_quiet_nan) : r;
        }
        expect[i] = sum;
      }
      std::vector<float> vec(m), one(m), sse(m);
      CHECK(detail::relay_sum(p, n, 0, m, m + 8, stamp, vec.data()) == m);
      CHECK(detail::relay_sum(p, n, 0, m, m + 8, stamp, one.data(), true) == m);
#ifdef TPAR_RELAY_SUM_SSE2
      // The SSE2 loop too, which a CPU with AVX2 never takes by itself.
      CHECK(detail::relay_sum_sse2(p, n, 0, m, m + 8, stamp, sse.data()) == m);
#else
      sse = one;
#endif
      for (std::size_t i = 0; i < m; ++i) {
        CAPTURE(i);
        REQUIRE(bits(one[i]) == bits(expect[i]));
        REQUIRE(bits(vec[i]) == bits(one[i]));
        REQUIRE(bits(sse[i]) == bits(one[i]));
      }
      // From the middle: the values before `from` are left as they were.
      const std::size_t from = m / 2;
      std::vector<float> part(m, -7.0f);
      CHECK(detail::relay_sum(p, n, from, m, m + 8, stamp, part.data()) == m);
      for (std::size_t i = 0; i < m; ++i) REQUIRE(bits(part[i]) == bits(i < from ? -7.0f : expect[i]));
    }
    // A NaN sum is the one quiet NaN on every path, whatever payloads went in.
    {
      std::vector<std::uint64_t> a(m + 8, (std::uint64_t{stamp} << 32) | 0x7FADA935u),  // a signalling NaN
          b(m + 8, (std::uint64_t{stamp} << 32) | 0xFFC01234u);                         // a quiet one, another payload
      const std::uint64_t* ab[2] = {a.data(), b.data()};
      for (const bool scalar : {false, true}) {
        std::vector<float> acc(m);
        CHECK(detail::relay_sum(ab, 2, 0, m, m + 8, stamp, acc.data(), scalar) == m);
        for (std::size_t i = 0; i < m; ++i) REQUIRE(bits(acc[i]) == detail::relay_quiet_nan);
      }
    }
    // A unit with an older stamp on one device: every value before it is summed, nothing
    // from it on is touched, on whichever device it lies.
    for (std::size_t late : {std::size_t{0}, m / 2, m - 1})
      for (std::size_t on = 0; on < 3; ++on) {
        CAPTURE(late);
        CAPTURE(on);
        auto u = units;
        u[on][late] = (std::uint64_t{stamp - 1} << 32) | 0x3F800000u;
        const std::uint64_t* q[3] = {u[0].data(), u[1].data(), u[2].data()};
        std::vector<float> full(m);
        CHECK(detail::relay_sum(p, 3, 0, m, m + 8, stamp, full.data()) == m);
        for (const bool scalar : {false, true}) {
          std::vector<float> acc(m, -7.0f);
          CHECK(detail::relay_sum(q, 3, 0, m, m + 8, stamp, acc.data(), scalar) == late);
          for (std::size_t i = 0; i < m; ++i) CHECK(bits(acc[i]) == bits(i < late ? full[i] : -7.0f));
        }
#ifdef TPAR_RELAY_SUM_SSE2
        std::vector<float> acc2(m, -7.0f);
        CHECK(detail::relay_sum_sse2(q, 3, 0, m, m + 8, stamp, acc2.data()) == late);
        for (std::size_t i = 0; i < m; ++i) CHECK(bits(acc2[i]) == bits(i < late ? full[i] : -7.0f));
#endif
      }
  }
}

TEST_CASE("relay hub: sums in device order as values arrive, for every contribution pattern, and releases queues") {
  detail::RelayHub::Config c;
  c.depth = 2;
  c.max_bytes = 64 << 10;
  c.queue_waits = 0b010;  // device 1 waits at its queue
  // One thread summing one value a step, one with the vector loop, and helpers: a call of
  // several grains (512 values) is cut into parts of whole grains, one a thread.
  struct Way {
    bool scalar;
    std::uint32_t threads;
  };
  for (const Way way : {Way{true, 1}, Way{false, 1}, Way{false, 2}, Way{false, 4}}) {
    CAPTURE(way.scalar);
    CAPTURE(way.threads);
    c.scalar_sum = way.scalar;
    c.threads = way.threads;
    HubRig r(3, c);
    if (!r.env.ok()) return;
    const vk::Semaphore release = r.hub->release(1);
    REQUIRE(release);
    CHECK_FALSE(r.hub->release(0));
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> dist(-1000.0f, 1000.0f);
    int call = 0;
    std::uint64_t split = 0;
    for (std::uint32_t contributing : {0b111u, 0b101u, 0b010u, 0u})
      for (std::size_t count : {std::size_t{1}, std::size_t{2049}, std::size_t{6000}, std::size_t{16384}}) {
        CAPTURE(contributing);
        CAPTURE(count);
        const auto slot_set = static_cast<std::uint32_t>(call++ % 2);
        std::vector<std::vector<float>> x(3, std::vector<float>(count));
        for (auto& v : x)
          for (auto& e : v) e = dist(rng);
        const std::uint64_t seq = r.hub->record(slot_set, count, contributing);
        const auto stamp = static_cast<std::uint32_t>(seq);
        for (std::size_t d = 0; d < 3; ++d) CHECK(r.hub->slot_words(d, slot_set)[layout::seq] == stamp);
        r.hub->submitted(seq);
        const std::size_t parts = std::min<std::size_t>(way.threads, std::max<std::size_t>(1, count / 512));
        CHECK(r.hub->parts_for(count) == parts);
        split += parts > 1;
        // The devices arrive one after another, in pieces, while the threads wait.
        std::thread devices([&] {
          for (std::size_t d : {2, 0, 1}) {
            if ((contributing >> d) & 1u) {
              r.publish(d, slot_set, x[d], stamp, count / 2);
              std::this_thread::sleep_for(2ms);
              r.publish(d, slot_set, x[d], stamp, 0, count / 2);
            } else {
              r.arrive(d, slot_set, stamp);
            }
          }
        });
        REQUIRE(r.served(slot_set, stamp));
        devices.join();
        CHECK(r.sum_is(slot_set, relay_sum(x, contributing)));
        // The queue is released after the flags are written: soon after.
        std::uint64_t released = 0;
        CHECK(eventually([&] {
          return r.env.group()[1].handle().getSemaphoreCounterValue(release, &released) == vk::Result::eSuccess && released >= seq;
        }));
        CHECK(released == seq);
      }
    CHECK(eventually([&] { return r.hub->stats().calls == 16; }));
    CHECK(r.hub->stats().split_calls == split);
    CHECK(split == (way.threads > 1 ? 12u : 0u));  // 2049, 6000 and 16384 values, in each pattern
    CHECK(r.failed() == 0);
  }
}

TEST_CASE("relay hub: host-played peers join the sum after the devices") {
  detail::RelayHub::Config c;
  c.depth = 1;
  c.max_bytes = 16 << 10;
  c.host_peers = 3;
  HubRig r(1, c);
  if (!r.env.ok()) return;
  const std::size_t count = 4000;
  const auto x = integer_inputs(1, count, 3);
  for (std::uint32_t contributing : {1u, 0u}) {
    const std::uint64_t seq = r.hub->record(0, count, contributing);
    const auto stamp = static_cast<std::uint32_t>(seq);
    r.hub->submitted(seq);
    if (contributing) r.publish(0, 0, x[0], stamp);
    else r.arrive(0, 0, stamp);
    REQUIRE(r.served(0, stamp));
    CHECK(r.sum_is(0, relay_sum(x, contributing, 3)));
  }
}

TEST_CASE("relay hub: stamps skip 0 at the wrap, and values stamped before it never pass for new ones") {
  detail::RelayHub::Config c;
  c.depth = 2;
  c.max_bytes = 16 << 10;
  c.first_sequence = 0xFFFFFFFEull;
  HubRig r(2, c);
  if (!r.env.ok()) return;
  const auto x = integer_inputs(2, 1000, 11), y = integer_inputs(2, 1000, 12);
  // Call A (stamp FFFFFFFE, slot set 0) publishes 100 values; the rest of set 0 holds
  // values stamped 1, as if by a call 2^32 calls earlier.
  const std::uint64_t a = r.hub->record(0, 100, 0b11);
  CHECK(static_cast<std::uint32_t>(a) == 0xFFFFFFFEu);
  for (std::size_t d = 0; d < 2; ++d) r.publish(d, 0, y[d], 1, 100, 1000);
  r.hub->submitted(a);
  for (std::size_t d = 0; d < 2; ++d) r.publish(d, 0, x[d], 0xFFFFFFFEu, 0, 100);
  REQUIRE(r.served(0, 0xFFFFFFFEu));
  // Call B (stamp FFFFFFFF, set 1): served, then the publish areas are cleared.
  const std::uint64_t b = r.hub->record(1, 10, 0b11);
  CHECK(static_cast<std::uint32_t>(b) == 0xFFFFFFFFu);
  r.hub->submitted(b);
  for (std::size_t d = 0; d < 2; ++d) r.publish(d, 1, x[d], 0xFFFFFFFFu, 0, 10);
  REQUIRE(r.served(1, 0xFFFFFFFFu));
  // Call C: number 2^32 + 1, stamp 1 (not 0), set 0. Its devices publish the first 100
  // values only: the thread must wait for the other 900, not take the stale ones.
  const std::uint64_t cseq = r.hub->record(0, 1000, 0b11);
  CHECK(cseq == 0x100000001ull);
  r.hub->submitted(cseq);
  for (std::size_t d = 0; d < 2; ++d) r.publish(d, 0, x[d], 1, 0, 100);
  CHECK_FALSE(r.served(0, 1, 300ms));
  for (std::size_t d = 0; d < 2; ++d) r.publish(d, 0, x[d], 1, 100, 1000);
  REQUIRE(r.served(0, 1));
  CHECK(r.sum_is(0, relay_sum(x, 0b11)));
}

TEST_CASE("relay hub: a device that never publishes fails the call at the timeout: abort words set, queues released") {
  detail::RelayHub::Config c;
  c.depth = 2;
  c.max_bytes = 16 << 10;
  c.timeout = 300ms;
  c.queue_waits = 0b01;
  HubRig r(2, c);
  if (!r.env.ok()) return;
  const auto x = integer_inputs(2, 1000, 13);
  const std::uint64_t first = r.hub->record(0, 1000, 0b11);
  const std::uint64_t second = r.hub->record(1, 1000, 0b11);
  r.hub->submitted(second);
  const auto t0 = std::chrono::steady_clock::now();
  r.publish(0, 0, x[0], static_cast<std::uint32_t>(first));  // device 1 never does
  REQUIRE(eventually([&] { return r.failed() > 0; }));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("failed after " << waited * 1e3 << " ms: " << std::string(r.failures.front().what()));
  CHECK(waited >= 0.29);
  CHECK(waited < 5.0);
  CHECK(r.failures.front().code() == ErrorCode::timeout);
  // The failure is reported first (a ticket then sees it once its kernels end), then
  // every slot gets its abort word and both calls' queue waits are released, in order.
  std::uint64_t released = 0;
  const vk::Device dev0 = r.env.group()[0].handle();
  REQUIRE(eventually([&] {
    return dev0.getSemaphoreCounterValue(r.hub->release(0), &released) == vk::Result::eSuccess && released >= second;
  }));
  CHECK(released == second);
  CHECK(r.hub->failed());
  for (std::size_t d = 0; d < 2; ++d)
    for (std::uint32_t p = 0; p < 2; ++p) CHECK(load(r.hub->slot_words(d, p) + layout::abort) != 0);
  // A call submitted later is released at once.
  const std::uint64_t third = r.hub->record(0, 10, 0b11);
  r.hub->submitted(third);
  REQUIRE(dev0.getSemaphoreCounterValue(r.hub->release(0), &released) == vk::Result::eSuccess);
  CHECK(released == third);
  CHECK(r.hub->in_flight() == 0);
  CHECK(r.failed() == 1);
}

TEST_CASE("relay hub: a part a helper serves that never comes fails the call at the timeout, and the next call is not served") {
  // Four threads, a call of four chunks: device 1 publishes all but the last chunk (a
  // helper's part), then nothing. The call fails at the timeout with the missing value
  // named, no flag is written, and every helper is done with it before the failure ends.
  detail::RelayHub::Config c;
  c.depth = 2;
  c.max_bytes = 64 << 10;
  c.timeout = 300ms;
  c.threads = 4;
  HubRig r(2, c);
  if (!r.env.ok()) return;
  const std::size_t count = 4 * 2048;
  const auto x = integer_inputs(2, count, 15);
  const std::uint64_t first = r.hub->record(0, count, 0b11);
  const std::uint64_t second = r.hub->record(1, count, 0b11);
  const auto cpu0 = r.hub->stats().cpu;
  r.hub->submitted(second);
  const auto t0 = std::chrono::steady_clock::now();
  r.publish(0, 0, x[0], static_cast<std::uint32_t>(first));
  r.publish(1, 0, x[1], static_cast<std::uint32_t>(first), 0, 3 * 2048);
  REQUIRE(eventually([&] { return r.failed() > 0; }));
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The thread, done with its own part, waits for the helper's until the deadline: it
  // backs off as the helper does, so the hub's four threads cost little CPU meanwhile.
  const double cpu = std::chrono::duration<double>(r.hub->stats().cpu - cpu0).count();
  MESSAGE("relay threads' CPU over the " << waited * 1e3 << " ms wait: " << cpu * 1e3 << " ms");
  if (cpu0.count() != 0 || cpu != 0) CHECK(cpu < 0.1);
  const std::string what = [&] {
    std::lock_guard lock(r.mutex);
    return std::string(r.failures.front().what());
  }();
  MESSAGE("failed after " << waited * 1e3 << " ms: " << what);
  CHECK(waited >= 0.29);
  CHECK(waited < 5.0);
  CHECK(what.find("device 1 did not publish value 6144 of 8192") != std::string::npos);
  // The failure is reported before the abort words are stored (see the case above): wait
  // for them, within the bound, rather than read them the moment the report lands.
  REQUIRE(eventually([&] {
    for (std::size_t d = 0; d < 2; ++d)
      for (std::uint32_t p = 0; p < 2; ++p)
        if (load(r.hub->slot_words(d, p) + layout::abort) == 0) return false;
    return true;
  }));
  for (std::size_t d = 0; d < 2; ++d) {
    CHECK(load(r.hub->slot_words(d, 0) + layout::flag) != static_cast<std::uint32_t>(first));
    CHECK(load(r.hub->slot_words(d, 1) + layout::flag) != static_cast<std::uint32_t>(second));
  }
  CHECK(r.hub->stats().calls == 0);
  CHECK(r.failed() == 1);
}

namespace {
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("relay hub: a kernel that does not confirm its sum fails the communicator at the timeout, one that gave up at once") {
  VkEnv env(1, {.sync_validation = false});
  if (!env.ok()) return;
  for (bool gave_up : {false, true}) {
    CAPTURE(gave_up);
    std::mutex mutex;
    std::vector<std::string> failures;
    detail::RelayHub::Config c;
    c.depth = 1;
    c.timeout = gave_up ? std::chrono::milliseconds(20s) : 300ms;  // a give-up is reported long before the timeout
    detail::RelayHub hub(env.group(), c, [&](const Error& e) {
      std::lock_guard lock(mutex);
      failures.push_back(e.what());
    });
    // Two calls the test plays the device of: the first confirmed, the second not.
    for (int call = 0; call < 2; ++call) {
      const std::uint64_t seq = hub.record(0, 4, 1);
      const auto stamp = static_cast<std::uint32_t>(seq);
      std::uint64_t* u = hub.publish_units(0, 0);
      for (int i = 0; i < 4; ++i)
        std::atomic_ref<std::uint64_t>(u[i]).store(std::uint64_t{stamp} << 32 | std::bit_cast<std::uint32_t>(float(i)));
      const auto began = std::chrono::steady_clock::now();
      hub.submitted(seq);
      std::uint32_t* flag = hub.slot_words(0, 0) + layout::flag;
      while (std::atomic_ref<std::uint32_t>(*flag).load() != stamp && std::chrono::steady_clock::now() - began < 10s) {
      }
      REQUIRE(std::atomic_ref<std::uint32_t>(*flag).load() == stamp);
      std::uint32_t* header = hub.publish_header(0, 0);
      if (call == 0) {
        std::atomic_ref<std::uint32_t>(header[layout::seen]).store(stamp);
        std::this_thread::sleep_for(gave_up ? 50ms : 600ms);  // (past the short timeout: confirmed, so no failure)
        std::lock_guard lock(mutex);
        CHECK(failures.empty());
        continue;
      }
      if (gave_up) std::atomic_ref<std::uint32_t>(header[layout::gave_up]).store(stamp);
      while (!hub.failed() && std::chrono::steady_clock::now() - began < 10s) std::this_thread::sleep_for(1ms);
      const auto took = std::chrono::steady_clock::now() - began;
      REQUIRE(hub.failed());
      std::lock_guard lock(mutex);
      REQUIRE(failures.size() == 1);
      MESSAGE(failures[0]);
      if (gave_up) {
        CHECK(contains(failures[0], "device 0's relay kernel gave up waiting for the sum of relay call 2"));
        CHECK(took < 10s);  // not at the timeout: the thread looks every millisecond
      } else {
        CHECK(contains(failures[0], "did not confirm the sum of relay call 2 within the timeout (300 ms)"));
        CHECK(took >= 300ms);
      }
      CHECK(hub.slot_words(0, 0)[layout::abort] == 1);
    }
    hub.stop();
  }
}

TEST_CASE("relay hub: backs off while a call's values are long in coming, and costs nothing idle") {
  // Three threads (the thread and two helpers) and a call of three chunks, one a thread:
  // the CPU figures cover the helpers too.
  detail::RelayHub::Config c;
  c.depth = 1;
  c.max_bytes = 32 << 10;
  c.threads = 3;
  HubRig r(1, c);
  if (!r.env.ok()) return;
  const std::size_t count = 3 * 2048;
  const auto x = integer_inputs(1, count, 14);
  const auto cpu0 = r.hub->stats().cpu;
  const std::uint64_t seq = r.hub->record(0, count, 1);
  r.hub->submitted(seq);
  std::this_thread::sleep_for(500ms);  // the GPU would be busy with earlier work
  r.publish(0, 0, x[0], static_cast<std::uint32_t>(seq));
  REQUIRE(r.served(0, static_cast<std::uint32_t>(seq)));
  CHECK(r.sum_is(0, x[0]));
  CHECK(r.hub->stats().split_calls == 1);
  const auto cpu1 = r.hub->stats().cpu;
  std::this_thread::sleep_for(500ms);
  const auto cpu2 = r.hub->stats().cpu;
  const double waiting = std::chrono::duration<double>(cpu1 - cpu0).count(), idle = std::chrono::duration<double>(cpu2 - cpu1).count();
  MESSAGE("relay thread CPU: " << waiting * 1e3 << " ms over a 500 ms wait, " << idle * 1e3 << " ms over 500 ms idle");
  if (cpu0.count() == 0 && cpu1.count() == 0) {
    MESSAGE("[skipped] this platform does not report a thread's CPU time");
    return;
  }
  CHECK(waiting < 0.1);
  CHECK(idle < 0.002);
}

// ---------------------------------------------------------------------------------------
// The communicator.

namespace {

// Synchronization validation for the communicator tests: on GPUs, where kernels wait;
// off on lavapipe, where queues wait on the relay thread's host signals, because the
// layer before 1.3.296 stalls 10 s whenever such a signal overlaps a host wait
// (docs/testing.md). One test below keeps it on there too.
bool relay_sync_validation() { return use_real_gpus() || validation_layer_version() >= VK_MAKE_API_VERSION(0, 1, 3, 296); }

// `calls` calls of `count` values on n devices, checked exactly (integers) and, for
// random values, against the relay's f32 sum on every device.
void check_relay(VkEnv& env, Communicator<ProxyBridge>& comm, std::size_t count, std::uint32_t contributing, std::uint64_t seed,
                 std::uint32_t host_peers = 0) {
  const std::size_t n = env.group().size();
  CAPTURE(n);
  CAPTURE(count);
  CAPTURE(contributing);
  Rig rig(env.group(), count);
  std::vector<bool> flags(n);
  for (std::size_t d = 0; d < n; ++d) flags[d] = (contributing >> d) & 1u;
  bool contributes[32];
  std::copy(flags.begin(), flags.end(), contributes);
  const AllreduceArgs args{.contributes = std::span<const bool>(contributes, n)};
  auto xi = integer_inputs(n, count, seed);
  const auto expect_i = relay_sum(xi, contributing, host_peers);
  for (std::size_t d = 0; d < n; ++d)
    if (!flags[d]) std::fill(xi[d].begin(), xi[d].end(), std::nanf(""));  // garbage stays out
  rig.write(xi);
  comm.allreduce(rig.spans(), args).wait();
  CHECK(comm.last_call().algorithm == "relay");
  for (const auto& r : rig.read()) REQUIRE(bit_identical(r, expect_i));
  const auto xr = random_inputs(n, count, seed + 1);
  rig.write(xr);
  comm.allreduce(rig.spans(), {.contributes = args.contributes, .wire = Wire::bf16}).wait();
  CHECK(comm.last_call().wire == Wire::f32);  // the relay carries f32 whatever was asked
  const auto expect_r = relay_sum(xr, contributing, host_peers);
  for (const auto& r : rig.read()) REQUIRE(bit_identical(r, expect_r));
}

}  // namespace

TEST_CASE("relay on 1 to 8 devices: exact, identical, the f32 sum in device order, for many sizes") {
  // The default threads (2), and one and five on two and three devices: a call is served
  // in parts of whole grains (512 values), the sums bit-identical whatever the parts.
  struct Case {
    std::uint32_t n, threads;
  };
  for (const Case k : {Case{2, 2}, Case{3, 2}, Case{4, 2}, Case{5, 2}, Case{8, 2}, Case{2, 1}, Case{2, 5}, Case{3, 5}}) {
    CAPTURE(k.threads);
    VkEnv env(k.n, {.sync_validation = relay_sync_validation()});
    if (!env.ok()) return;
    Options o = relay_options();
    o.relay_threads = k.threads;
    Communicator<ProxyBridge> comm(env.group(), o);
    const std::uint32_t all = (1u << k.n) - 1;
    std::uint64_t split = 0;
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{511}, std::size_t{513}, std::size_t{4096},
                              std::size_t{10000}, std::size_t{16384}, std::size_t{65536}}) {
      check_relay(env, comm, count, all, 100 + count + k.n);
      split += 2 * (k.threads > 1 && count >= 1024);
    }
    check_relay(env, comm, 3000, all & ~1u, 7);
    check_relay(env, comm, 3000, 1u << (k.n - 1), 8);
    check_relay(env, comm, 3000, 0, 9);
    split += 3 * 2 * (k.threads > 1);  // 3000 values: five grains
    CHECK(comm.relay_stats().calls == 2 * (8 + 3));
    CHECK(comm.relay_stats().split_calls == split);
  }
}

TEST_CASE("relay with host-played peers: one device forms a relay of 1 + k") {
  VkEnv env(1, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  for (std::uint32_t peers : {1u, 3u}) {
    CAPTURE(peers);
    Options o = relay_options();
    o.algo = AlgoChoice::automatic;
    o.relay_host_peers = peers;
    Communicator<ProxyBridge> comm(env.group(), o);
    for (std::size_t count : {std::size_t{1}, std::size_t{4096}, std::size_t{65536}}) check_relay(env, comm, count, 1, 20 + count, peers);
    check_relay(env, comm, 4096, 0, 21, peers);
    // Above relay_max_bytes a single device's call is what it always was: nothing to do.
    Rig big(env.group(), (256 << 10) / 4 + 1);
    comm.allreduce(big.spans()).wait();
    CHECK(comm.last_call().algorithm == "none");
  }
}

TEST_CASE("relay: calls above relay_max_bytes go to OneShot or the ring, and calls in flight or deferred come out right") {
  VkEnv env(3, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Options o = relay_options(16 << 10);
  o.depth = 4;
  Communicator<ProxyBridge> comm(env.group(), o);
  {
    Rig rig(env.group(), 4097);
    const auto x = integer_inputs(3, 4097, 30);
    rig.write(x);
    comm.allreduce(rig.spans()).wait();
    CHECK(comm.last_call().algorithm == "oneshot");
    for (const auto& r : rig.read()) REQUIRE(bit_identical(r, integer_sum(x)));
  }
  // Relay calls and OneShot calls mixed, up to depth in flight, some deferred; each call
  // on its own buffers; then back to back in place on one buffer.
  for (bool defer : {false, true}) {
    CAPTURE(defer);
    std::vector<std::unique_ptr<Rig>> rigs;
    std::vector<std::vector<std::vector<float>>> inputs;
    std::vector<Ticket> tickets;
    std::string previous;
    int switches = 0;
    for (int k = 0; k < 12; ++k) {
      const std::size_t count = k % 4 == 3 ? 5000 : 1000 + std::size_t(k) * 97;
      rigs.push_back(std::make_unique<Rig>(env.group(), count));
      inputs.push_back(integer_inputs(3, count, 40 + k));
      rigs.back()->write(inputs.back());
      tickets.push_back(comm.allreduce(rigs.back()->spans(), {.defer = defer}));
      CHECK(comm.deferred() <= o.depth);
      // At a change to or from the relay every call before it has finished (submitted
      // first where deferred): the relay is never in flight beside another algorithm.
      const std::string now(comm.last_call().algorithm);
      if (k > 0 && (now == "relay") != (previous == "relay")) {
        ++switches;
        for (int j = 0; j < k; ++j) CHECK_MESSAGE(tickets[j].ready(), "call " << j << " before the switch at call " << k);
      }
      previous = now;
    }
    CHECK(switches >= 4);
    comm.flush();
    for (std::size_t k = 0; k < tickets.size(); ++k) {
      tickets[k].wait();
      for (const auto& r : rigs[k]->read()) REQUIRE(bit_identical(r, integer_sum(inputs[k])));
    }
  }
  Rig a(env.group(), 2000);
  const auto xa = integer_inputs(3, 2000, 50);
  a.write(xa);
  for (int k = 0; k < 3; ++k) (void)comm.allreduce(a.spans(), {.defer = true});
  comm.flush();
  comm.allreduce(a.spans()).wait();
  auto expect = integer_sum(xa);
  for (float& v : expect) v *= 27.0f;  // each call sums three copies of the last result
  for (const auto& r : a.read()) REQUIRE(bit_identical(r, expect));
}

TEST_CASE("relay: its calls take the relay's own slot sets, and neither grow nor shrink the host staging") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  Communicator<ProxyBridge> comm(env.group(), relay_options(16 << 10));  // depth 0: sized by bytes
  // A prefill-sized call (not the relay's): the staging grows to a few large slot sets.
  Rig big(env.group(), std::size_t{1} << 20);
  const auto xb = integer_inputs(2, std::size_t{1} << 20, 7);
  big.write(xb);
  comm.allreduce(big.spans()).wait();
  REQUIRE(comm.last_call().algorithm != "relay");
  for (const auto& r : big.read()) REQUIRE(bit_identical(r, integer_sum(xb)));
  const std::uint64_t staging = comm.staging_bytes();
  const std::uint64_t made = comm.plan_stats().generations;
  const std::uint32_t large_sets = comm.in_flight();
  REQUIRE(large_sets < comm.options().max_slot_sets());
  // Decode-sized relay calls: more of them deferred than the large staging has slot sets,
  // and none is submitted for want of a set (a set needed again would submit them).
  Rig small(env.group(), 1024);
  const auto xs = integer_inputs(2, 1024, 8);
  small.write(xs);
  const int held = 2 * static_cast<int>(large_sets) + 4;
  for (int k = 0; k < held; ++k) {
    (void)comm.allreduce(small.spans(), {.defer = true});
    REQUIRE(comm.last_call().algorithm == "relay");
    CHECK(comm.deferred() == static_cast<std::size_t>(k + 1));
  }
  comm.flush();
  comm.allreduce(small.spans()).wait();
  auto expect = integer_sum(xs);
  for (float& v : expect) v = std::ldexp(v, held);  // each call after the first doubles the sum
  for (const auto& r : small.read()) REQUIRE(bit_identical(r, expect));
  // Many relay calls after the large one: the staging stays as the large call left it (a
  // server's next prompt finds it there), made no more times.
  for (int k = 0; k < 400; ++k) (void)comm.allreduce(small.spans(), {.defer = k % 16 != 15});
  comm.flush();
  comm.allreduce(small.spans()).wait();
  CHECK(comm.staging_bytes() == staging);
  CHECK(comm.plan_stats().generations == made);
  CHECK(comm.in_flight() == large_sets);
}

TEST_CASE("relay: a ready point that never comes fails the ticket and the communicator, and nothing hangs") {
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Options o = relay_options();
  o.timeout = 300ms;
  TestTimeline never(env.group()[1].handle());
  Rig rig(env.group(), 5000);
  const auto x = integer_inputs(2, 5000, 60);
  rig.write(x);
  {
    Communicator<ProxyBridge> comm(env.group(), o);
    // Device 1 never starts (never publishes); device 0 runs and waits for the sum.
    const TimelinePoint ready[2] = {{}, {never.semaphore, 1}};
    Ticket t = comm.allreduce(rig.spans(), {.ready = ready});
    const auto t0 = std::chrono::steady_clock::now();
    CHECK(code_of([&] { t.wait(); }) == ErrorCode::timeout);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(waited < 5.0);
    REQUIRE(comm.failure());
    CHECK(code_of([&] { comm.allreduce(rig.spans()); }) == ErrorCode::failed);
    // Device 0 gave up without touching its buffer; device 1 runs when its point comes
    // and gives up at once (the abort word): its buffer too is as it was.
    never.signal(1);
  }
  const auto got = rig.read();
  for (std::size_t d = 0; d < 2; ++d) CHECK(bit_identical(got[d], x[d]));
  env.check_validation();
}

TEST_CASE("relay: destroying the communicator with calls in flight finishes them first") {
  VkEnv env(4, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  std::vector<std::unique_ptr<Rig>> rigs;
  std::vector<std::vector<std::vector<float>>> inputs;
  {
    Options o = relay_options();
    o.depth = 4;
    Communicator<ProxyBridge> comm(env.group(), o);
    for (int k = 0; k < 6; ++k) {
      rigs.push_back(std::make_unique<Rig>(env.group(), 3000 + std::size_t(k)));
      inputs.push_back(integer_inputs(4, 3000 + std::size_t(k), 70 + k));
      rigs.back()->write(inputs.back());
      (void)comm.allreduce(rigs.back()->spans(), {.defer = k >= 4});
    }
  }
  for (std::size_t k = 0; k < rigs.size(); ++k)
    for (const auto& r : rigs[k]->read()) REQUIRE(bit_identical(r, integer_sum(inputs[k])));
}

TEST_CASE("relay: a communicator destroyed while a call waits on a ready point forever returns, bounded") {
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Options o = relay_options();
  o.timeout = 300ms;
  TestTimeline never(env.group()[0].handle());
  Rig rig(env.group(), 1000);
  rig.write(integer_inputs(2, 1000, 80));
  const auto t0 = std::chrono::steady_clock::now();
  {
    Communicator<ProxyBridge> comm(env.group(), o);
    const TimelinePoint ready[2] = {{never.semaphore, 1}, {}};
    (void)comm.allreduce(rig.spans(), {.ready = ready});
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("destroyed after " << took * 1e3 << " ms (its objects left allocated, as logged)");
  CHECK(took < 10.0);
  // The stuck kernel runs now, finds the abort word, and ends; the memory it uses was left
  // allocated for it.
  never.signal(1);
  for (std::size_t d = 0; d < 2; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
}

TEST_CASE("relay: an idle communicator costs no CPU after relay calls") {
  // Measured on tpar's own threads (three bridges, the relay's thread), per thread, so
  // neither the machine's load nor the driver's threads weigh in (the process's CPU time
  // is printed beside it).
  VkEnv env(3, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Communicator<ProxyBridge> comm(env.group(), relay_options());
  Rig rig(env.group(), 4096);
  rig.write(integer_inputs(3, 4096, 90));
  for (int i = 0; i < 20; ++i) comm.allreduce(rig.spans()).wait();
  const RelayStats s = comm.relay_stats();
  const ThreadsCpu before = tpar_threads_cpu();
  const double process_before = process_cpu_seconds();
  std::this_thread::sleep_for(1s);
  const ThreadsCpu after = tpar_threads_cpu();
  const double process = process_cpu_seconds() - process_before;
  const double ms = std::chrono::duration<double, std::milli>(after.cpu - before.cpu).count();
  const auto relay_idle = comm.relay_stats().cpu - s.cpu;
  MESSAGE("one idle second: tpar's " << after.threads << " threads used " << ms << " ms of CPU (the relay's "
                                     << std::chrono::duration<double, std::milli>(relay_idle).count() << " ms), the process "
                                     << process * 1e3 << " ms; the relay thread used " << s.cpu.count() / 1e3 / double(s.calls)
                                     << " us per call over " << s.calls << " calls");
  CHECK(s.calls == 20);
  CHECK(after.threads >= 4);
  CHECK(ms < 10.0);
  CHECK(relay_idle < 10ms);
  // Every call was waited for before the next: its values came after it was handed over,
  // and the sum took time to form.
  CHECK(s.arriving.count() > 0);
  CHECK(s.serving.count() > 0);
}

// Timing (ctest label `timing`, run alone after the rest: scripts/test.sh): the gap it
// checks is made by the test's own sleep, and a loaded machine may run device 0's part
// late enough to narrow it.
TEST_CASE("relay: the thread sees how far apart the devices' values came and which came last" * doctest::test_suite("timing")) {
  // Each device's part starts at its ready point: device 0's opens at once, device 1's
  // 100 ms later, so the thread waits for both and sees device 0's values first and
  // device 1's well after. The check leaves half the gap for device 0's own part to come
  // late: on a loaded machine lavapipe runs it whenever its threads get a core (CI saw
  // it 6 ms late on a 30 ms gap).
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Communicator<ProxyBridge> comm(env.group(), relay_options());
  Rig rig(env.group(), 4096);
  rig.write(integer_inputs(2, 4096, 91));
  const int rounds = 3;
  for (int i = 0; i < rounds; ++i) {
    TestTimeline first(env.group()[0].handle()), second(env.group()[1].handle());
    const TimelinePoint ready[2] = {{first.semaphore, 1}, {second.semaphore, 1}};
    Ticket t = comm.allreduce(rig.spans(), {.ready = ready});
    REQUIRE(comm.last_call().algorithm == "relay");
    std::this_thread::sleep_for(5ms);  // the thread is waiting before any device's values come
    first.signal(1);
    std::this_thread::sleep_for(100ms);
    second.signal(1);
    t.wait(test_timeout);
  }
  const RelayStats s = comm.relay_stats();
  MESSAGE(relay_arrivals(s));
  CHECK(s.calls == rounds);
  CHECK(s.timed_arrivals == rounds);
  REQUIRE(s.last.size() == 2);
  CHECK(s.last[0] == 0);
  CHECK(s.last[1] == rounds);
  CHECK(s.spread >= rounds * 50ms);
  CHECK(relay_arrivals(s).find("device 1 in 100%") != std::string::npos);
}

// Timing (label `timing`, as above): whether a thread is asleep when a call comes depends
// on the scheduler keeping the 50 ms gaps.
TEST_CASE("relay: calls far apart find the thread and its helper asleep and the wake-up is timed" * doctest::test_suite("timing")) {
  // The thread lingers 50 us after its last call and a helper 50 us (nothing in flight),
  // then both block; calls 50 ms apart therefore each wake them (the first may find the
  // thread just made and still lingering, and on a loaded machine a thread kept off a core
  // through a whole gap may meet the next call before it blocks). Calls of two chunks take
  // the helper.
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Options o = relay_options();
  o.relay_threads = 2;
  Communicator<ProxyBridge> comm(env.group(), o);
  Rig rig(env.group(), 4096);
  rig.write(integer_inputs(2, 4096, 17));
  const std::uint64_t rounds = 5;
  for (std::uint64_t i = 0; i < rounds; ++i) {
    std::this_thread::sleep_for(50ms);
    Ticket t = comm.allreduce(rig.spans());
    REQUIRE(comm.last_call().algorithm == "relay");
    t.wait(test_timeout);
  }
  const RelayStats s = comm.relay_stats();
  MESSAGE(relay_wakeups(s));
  CHECK(s.calls == rounds);
  CHECK(s.wakeups >= rounds - 2);
  CHECK(s.wakeups <= rounds);
  CHECK(s.wake.count() > 0);
  CHECK(s.helper_wakeups >= rounds - 2);
  CHECK(s.helper_wakeups <= rounds);
  CHECK(relay_wakeups(s).find(" of 5 calls after sleeping, ") != std::string::npos);
}

TEST_CASE("relay: kernels that read the device clock report their parts' times, read back by the thread") {
  // Each call's kernels stamp their start, their values published, the sum seen and the
  // copy done; the thread reads a call's stamps when it serves the next call of the same
  // slot set. Calls one at a time: every call but the last `depth` ones is read back, on
  // every device, and a kernel's wait lies within the call's whole time.
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  Options o = relay_options();
  o.depth = 4;  // four slot sets: a call's stamps are read four calls later
  Communicator<ProxyBridge> comm(env.group(), o);
  Rig rig(env.group(), 4096);
  rig.write(integer_inputs(2, 4096, 92));
  const int calls = 12;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) comm.allreduce(rig.spans()).wait();
  const auto took = std::chrono::steady_clock::now() - t0;
  const RelayStats s = comm.relay_stats();
  if (!env.group()[0].enabled().shader_device_clock || !env.group()[1].enabled().shader_device_clock) {
    MESSAGE("no device clock in shaders here: the kernels stamp nothing");
    CHECK(s.kernels == 0);
    return;
  }
  MESSAGE(relay_kernel_times(s));
  const int depth = 4;
  CHECK(s.kernels == 2 * (calls - depth));
  CHECK(s.kernel_gaps == 2 * (calls - depth - 1));
  CHECK(s.kernel_wait > 0ns);
  CHECK(s.kernel_gap_median > 0ns);
  CHECK(s.kernel_gap_median <= 1ms);
  CHECK(s.kernel_publish + s.kernel_wait + s.kernel_copy < took * 2);
  CHECK(relay_kernel_times(s).find("a kernel took") == 0);
}

TEST_CASE("relay gate: where kernels wait, where queues wait, and where the automatic choice takes it") {
  // Capabilities as the drivers report them, without devices: two GPUs, lavapipe.
  auto gpu = [](std::uint8_t id) {
    DeviceCapabilities c;
    c.name = "GPU " + std::to_string(id);
    c.driver_id = vk::DriverId::eNvidiaProprietary;
    c.device_uuid[0] = id;
    c.host_visible_device_local_heap = std::uint64_t{1} << 30;
    return c;
  };
  DeviceCapabilities cpu = gpu(9);
  cpu.driver_id = vk::DriverId::eMesaLlvmpipe;
  const bool both[2] = {true, true}, first_only[2] = {true, false};
  {  // two distinct GPUs with the device clock: kernels wait; taken automatically (for
     // calls that ride in the host's submissions: the communicator's part), and the
     // reason says so
    const DeviceCapabilities caps[2] = {gpu(1), gpu(2)};
    const RelayGate g = relay_gate(caps, both);
    CHECK(g.possible);
    CHECK(g.automatic);
    CHECK(g.automatic_max_bytes == 64 << 10);
    CHECK(g.reason.find("ride in the host's submissions") != std::string::npos);
    CHECK(g.reason.find("calls up to 64 KiB") != std::string::npos);
    CHECK(g.queue_waits == 0);
    CHECK_FALSE(g.gpu_queue_waits);
  }
  {  // three and four: automatic up to 32 KiB (measured on four); five: asked for only
    const DeviceCapabilities caps[5] = {gpu(1), gpu(2), gpu(3), gpu(4), gpu(5)};
    const bool all[5] = {true, true, true, true, true};
    for (std::size_t n : {3u, 4u}) {
      CAPTURE(n);
      const RelayGate g = relay_gate(std::span(caps, n), std::span(all, n));
      CHECK(g.possible);
      CHECK(g.automatic);
      CHECK(g.automatic_max_bytes == 32 << 10);
      CHECK(g.reason.find("calls up to 32 KiB") != std::string::npos);
    }
    const RelayGate g = relay_gate(caps, all);
    CHECK(g.possible);
    CHECK_FALSE(g.automatic);
    CHECK(g.reason.find("only on two to four devices") != std::string::npos);
  }
  {  // one without the clock: its queue waits, so not automatic, and why
    const DeviceCapabilities caps[2] = {gpu(1), gpu(2)};
    const RelayGate g = relay_gate(caps, first_only);
    CHECK(g.possible);
    CHECK_FALSE(g.automatic);
    CHECK(g.queue_waits == 0b10);
    CHECK(g.gpu_queue_waits);
    CHECK(g.reason.find("device 1 did not enable shaderDeviceClock") != std::string::npos);
  }
  {  // one GPU opened twice: both queues wait
    const DeviceCapabilities caps[2] = {gpu(1), gpu(1)};
    const RelayGate g = relay_gate(caps, both);
    CHECK_FALSE(g.automatic);
    CHECK(g.queue_waits == 0b11);
    CHECK(g.gpu_queue_waits);
    CHECK(g.reason.find("one physical device") != std::string::npos);
  }
  {  // lavapipe: queues wait, which is not the GPU case; not automatic
    const DeviceCapabilities caps[2] = {cpu, gpu(2)};
    const RelayGate g = relay_gate(caps, both);
    CHECK(g.queue_waits == 0b01);
    CHECK_FALSE(g.gpu_queue_waits);
    CHECK(g.possible);
    CHECK_FALSE(g.automatic);
  }
  {  // a device without the memory: not possible at all
    DeviceCapabilities small = gpu(2);
    small.host_visible_device_local_heap = 256 << 10;
    const DeviceCapabilities caps[2] = {gpu(1), small};
    CHECK_FALSE(relay_gate(caps, both).possible);
  }
}

TEST_CASE("relay: chosen by TPAR_ALGO=relay, never automatically for virtual devices of one physical device") {
  if (use_real_gpus()) {
    MESSAGE("[skipped] needs one physical device opened twice (TPAR_TEST_DEVICES=gpus opens distinct GPUs)");
    return;
  }
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  const RelayGate gate = env.group().relay_gate();
  MESSAGE("relay gate: " << gate.reason);
  CHECK(gate.possible);  // lavapipe's memory is all host-visible
  CHECK_FALSE(gate.automatic);
  CHECK(gate.reason.find("one physical device") != std::string::npos);
  Rig rig(env.group(), 3000);
  const auto x = integer_inputs(2, 3000, 91);
  {
    Options o;
    o.timeout = test_timeout;
    auto comm = make_communicator(env.group(), o);
    rig.write(x);
    comm.allreduce(rig.spans()).wait();
    CHECK(comm.last_call().algorithm == "oneshot");
  }
  {
    ScopedEnv algo("TPAR_ALGO", "relay");
    Options o;
    o.timeout = test_timeout;
    auto comm = make_communicator(env.group(), o);
    rig.write(x);
    comm.allreduce(rig.spans()).wait();
    CHECK(comm.last_call().algorithm == "relay");
    for (const auto& r : rig.read()) CHECK(bit_identical(r, integer_sum(x)));
    CHECK(comm.relay_stats().calls == 1);
  }
}

TEST_CASE("relay: bad relay options are refused") {
  VkEnv env(2, {.sync_validation = relay_sync_validation()});
  if (!env.ok()) return;
  for (std::size_t bad : {std::size_t{0}, std::size_t{6}, std::size_t{65} << 20}) {
    Options o = relay_options(bad);
    CHECK(code_of([&] { Communicator<ProxyBridge> comm(env.group(), o); }) == ErrorCode::invalid_argument);
  }
  Options o = relay_options();
  o.relay_host_peers = 31;
  CHECK(code_of([&] { Communicator<ProxyBridge> comm(env.group(), o); }) == ErrorCode::invalid_argument);
  for (std::uint32_t bad : {0u, 17u}) {
    CAPTURE(bad);
    Options t = relay_options();
    t.relay_threads = bad;
    CHECK(code_of([&] { Communicator<ProxyBridge> comm(env.group(), t); }) == ErrorCode::invalid_argument);
  }
}

TEST_CASE("relay under synchronization validation: a few calls, deferred and not") {
  VkEnv env(2);
  if (!env.ok()) return;
  Options o = relay_options();
  o.depth = 2;
  Communicator<ProxyBridge> comm(env.group(), o);
  Rig a(env.group(), 5000), b(env.group(), 700);
  const auto xa = integer_inputs(2, 5000, 95), xb = integer_inputs(2, 700, 96);
  a.write(xa);
  b.write(xb);
  Ticket ta = comm.allreduce(a.spans(), {.defer = true});
  Ticket tb = comm.allreduce(b.spans(), {.defer = true});
  comm.flush();
  ta.wait();
  tb.wait();
  for (const auto& r : a.read()) REQUIRE(bit_identical(r, integer_sum(xa)));
  for (const auto& r : b.read()) REQUIRE(bit_identical(r, integer_sum(xb)));
  comm.allreduce(a.spans()).wait();
  auto twice = integer_sum(xa);
  for (float& v : twice) v *= 2.0f;
  for (const auto& r : a.read()) REQUIRE(bit_identical(r, twice));
}
