// tpar::Stream's state machine on the CPU alone, with fake handles: what it holds of the
// host's work (held), what it carries of tpar's last call (carried), and a relay call
// waiting for a ride (pending), recorded into a host's command buffer (taken) or gone
// out in tpar's own (fallen back). The Vulkan calls a Stream makes go to fakes installed
// in the default dispatcher, which record every vkQueueSubmit: the order of command
// buffers, waits and signals is checked exactly. Lavapipe offers no ride (its kernels
// cannot wait on host memory), so these are the ride paths' only run in CI.
#include <doctest/doctest.h>
#include <tpar/comm/stream.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

using namespace tpar;
using Protocol = tpar::detail::StreamProtocol;

namespace {

// ---- Fake Vulkan --------------------------------------------------------------------

struct Batch {
  std::vector<std::uintptr_t> cbs;
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> waits, signals;
};
struct Submission {
  std::vector<Batch> batches;
  bool fenced = false;
  // The command buffers of all its batches, in order.
  std::vector<std::uintptr_t> cbs() const {
    std::vector<std::uintptr_t> out;
    for (const auto& b : batches) out.insert(out.end(), b.cbs.begin(), b.cbs.end());
    return out;
  }
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> waits() const {
    std::vector<std::pair<std::uintptr_t, std::uint64_t>> out;
    for (const auto& b : batches) out.insert(out.end(), b.waits.begin(), b.waits.end());
    return out;
  }
  std::vector<std::pair<std::uintptr_t, std::uint64_t>> signals() const {
    std::vector<std::pair<std::uintptr_t, std::uint64_t>> out;
    for (const auto& b : batches) out.insert(out.end(), b.signals.begin(), b.signals.end());
    return out;
  }
};

struct FakeVulkan {
  std::mutex mutex;
  std::vector<Submission> submissions;
  std::map<std::uintptr_t, std::uint64_t> counters;  // semaphores made, and their values
  std::uintptr_t next_semaphore = 0x5000;
  VkResult submit_result = VK_SUCCESS;
};
FakeVulkan* fake = nullptr;

template <class H>
std::uintptr_t id(H h) {
  return reinterpret_cast<std::uintptr_t>(h);
}

VKAPI_ATTR VkResult VKAPI_CALL fake_submit(VkQueue, uint32_t count, const VkSubmitInfo* infos, VkFence fence) {
  std::lock_guard lock(fake->mutex);
  if (fake->submit_result != VK_SUCCESS) return fake->submit_result;
  Submission s;
  s.fenced = fence != VK_NULL_HANDLE;
  for (uint32_t i = 0; i < count; ++i) {
    const VkSubmitInfo& info = infos[i];
    const auto* ti = static_cast<const VkTimelineSemaphoreSubmitInfo*>(info.pNext);
    REQUIRE(ti);
    REQUIRE(ti->sType == VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO);
    Batch b;
    for (uint32_t k = 0; k < info.commandBufferCount; ++k) b.cbs.push_back(id(info.pCommandBuffers[k]));
    REQUIRE(ti->waitSemaphoreValueCount == info.waitSemaphoreCount);
    REQUIRE(ti->signalSemaphoreValueCount == info.signalSemaphoreCount);
    for (uint32_t k = 0; k < info.waitSemaphoreCount; ++k) b.waits.push_back({id(info.pWaitSemaphores[k]), ti->pWaitSemaphoreValues[k]});
    for (uint32_t k = 0; k < info.signalSemaphoreCount; ++k)
      b.signals.push_back({id(info.pSignalSemaphores[k]), ti->pSignalSemaphoreValues[k]});
    s.batches.push_back(std::move(b));
  }
  fake->submissions.push_back(std::move(s));
  return VK_SUCCESS;
}

VKAPI_ATTR VkResult VKAPI_CALL fake_create_semaphore(VkDevice, const VkSemaphoreCreateInfo*, const VkAllocationCallbacks*,
                                                     VkSemaphore* out) {
  std::lock_guard lock(fake->mutex);
  const std::uintptr_t s = fake->next_semaphore++;
  fake->counters[s] = 0;
  *out = reinterpret_cast<VkSemaphore>(s);
  return VK_SUCCESS;
}

VKAPI_ATTR void VKAPI_CALL fake_destroy_semaphore(VkDevice, VkSemaphore s, const VkAllocationCallbacks*) {
  std::lock_guard lock(fake->mutex);
  fake->counters.erase(id(s));
}

VKAPI_ATTR VkResult VKAPI_CALL fake_counter(VkDevice, VkSemaphore s, uint64_t* value) {
  std::lock_guard lock(fake->mutex);
  *value = fake->counters.at(id(s));
  return VK_SUCCESS;
}

// Installs the fakes in the default dispatcher for one test, and puts back what was there.
struct Fakes {
  FakeVulkan state;
  decltype(VULKAN_HPP_DEFAULT_DISPATCHER.vkQueueSubmit) submit;
  decltype(VULKAN_HPP_DEFAULT_DISPATCHER.vkCreateSemaphore) create;
  decltype(VULKAN_HPP_DEFAULT_DISPATCHER.vkDestroySemaphore) destroy;
  decltype(VULKAN_HPP_DEFAULT_DISPATCHER.vkGetSemaphoreCounterValue) counter;
  Fakes() {
    auto& d = VULKAN_HPP_DEFAULT_DISPATCHER;
    submit = d.vkQueueSubmit;
    create = d.vkCreateSemaphore;
    destroy = d.vkDestroySemaphore;
    counter = d.vkGetSemaphoreCounterValue;
    d.vkQueueSubmit = fake_submit;
    d.vkCreateSemaphore = fake_create_semaphore;
    d.vkDestroySemaphore = fake_destroy_semaphore;
    d.vkGetSemaphoreCounterValue = fake_counter;
    fake = &state;
  }
  ~Fakes() {
    auto& d = VULKAN_HPP_DEFAULT_DISPATCHER;
    d.vkQueueSubmit = submit;
    d.vkCreateSemaphore = create;
    d.vkDestroySemaphore = destroy;
    d.vkGetSemaphoreCounterValue = counter;
    fake = nullptr;
  }
  std::size_t submits() {
    std::lock_guard lock(state.mutex);
    return state.submissions.size();
  }
  Submission last() {
    std::lock_guard lock(state.mutex);
    REQUIRE_FALSE(state.submissions.empty());
    return state.submissions.back();
  }
};

const vk::Device fake_device(reinterpret_cast<VkDevice>(std::uintptr_t{0x2000}));
const vk::Queue fake_queue(reinterpret_cast<VkQueue>(std::uintptr_t{0x1000}));

vk::CommandBuffer cb(std::uintptr_t v) { return vk::CommandBuffer(reinterpret_cast<VkCommandBuffer>(v)); }
vk::Semaphore sem(std::uintptr_t v) { return vk::Semaphore(reinterpret_cast<VkSemaphore>(v)); }

// Batches as a host or tpar builds them: each one command buffer, its waits and signals
// (kept alive by the maker for as long as the VkSubmitInfos are used).
struct Maker {
  struct Storage {
    vk::CommandBuffer cb;
    std::vector<vk::Semaphore> waits, signals;
    std::vector<std::uint64_t> wait_values, signal_values;
    std::vector<vk::PipelineStageFlags> stages;
    vk::TimelineSemaphoreSubmitInfo ti;
  };
  std::deque<Storage> storage;
  vk::SubmitInfo make(std::uintptr_t command_buffer, std::vector<std::pair<std::uintptr_t, std::uint64_t>> waits = {},
                      std::vector<std::pair<std::uintptr_t, std::uint64_t>> signals = {}) {
    Storage& s = storage.emplace_back();
    s.cb = cb(command_buffer);
    for (auto [h, v] : waits) {
      s.waits.push_back(sem(h));
      s.wait_values.push_back(v);
      s.stages.push_back(vk::PipelineStageFlagBits::eAllCommands);
    }
    for (auto [h, v] : signals) {
      s.signals.push_back(sem(h));
      s.signal_values.push_back(v);
    }
    s.ti = vk::TimelineSemaphoreSubmitInfo(static_cast<std::uint32_t>(s.wait_values.size()), s.wait_values.data(),
                                           static_cast<std::uint32_t>(s.signal_values.size()), s.signal_values.data());
    return vk::SubmitInfo(static_cast<std::uint32_t>(s.waits.size()), s.waits.data(), s.stages.data(), 1, &s.cb,
                          static_cast<std::uint32_t>(s.signals.size()), s.signals.data(), &s.ti);
  }
  detail::BatchList list(std::initializer_list<vk::SubmitInfo> infos) {
    detail::BatchList l;
    l.append(std::span<const vk::SubmitInfo>(infos.begin(), infos.size()));
    return l;
  }
};

using Cbs = std::vector<std::uintptr_t>;
using Points = std::vector<std::pair<std::uintptr_t, std::uint64_t>>;

// A rider as StreamAllreduce makes one, recording what the stream asked of it.
struct FakeRider {
  std::uint64_t site = 7;      // what record() returns (nullopt where 0 and `none`)
  bool none = false;           // record(): no site free
  bool bind_ok = true;         // bind(): whether the site serves the call
  std::vector<std::uintptr_t> recorded_into;
  std::vector<std::uint64_t> bound, forgotten;
  Protocol::Rider rider() {
    return {[this](vk::CommandBuffer c, bool, bool, const RideBeside&) -> std::optional<std::uint64_t> {
              if (none) return std::nullopt;
              recorded_into.push_back(id(static_cast<VkCommandBuffer>(c)));
              return site;
            },
            [this](std::uint64_t s) {
              bound.push_back(s);
              return bind_ok;
            },
            [this](std::uint64_t s) { forgotten.push_back(s); }};
  }
};

}  // namespace

TEST_CASE("stream state: not holding, the host's work goes out at once, and holding, it is held until a flush, in one submission") {
  Fakes f;
  Maker m;
  Stream s(fake_device, fake_queue, 0);
  s.submit({m.make(0xA1)});
  REQUIRE(f.submits() == 1);
  CHECK(f.last().cbs() == Cbs{0xA1});
  s.set_holding(true);
  CHECK(s.holding());
  s.submit({m.make(0xA2)});
  s.submit({m.make(0xA3, {{0x77, 4}})});
  CHECK(f.submits() == 1);  // held
  CHECK(s.held() == 2);
  s.flush();
  REQUIRE(f.submits() == 2);
  CHECK(f.last().cbs() == Cbs{0xA2, 0xA3});
  CHECK(f.last().waits() == Points{{0x77, 4}});
  CHECK(s.held() == 0);
  // A fence: at once, with what was held before it, and the fence on the submission.
  s.submit({m.make(0xA4)});
  const vk::Fence fence(reinterpret_cast<VkFence>(std::uintptr_t{0x9000}));
  s.submit({m.make(0xA5)}, fence);
  REQUIRE(f.submits() == 3);
  CHECK(f.last().cbs() == Cbs{0xA4, 0xA5});
  CHECK(f.last().fenced);
  s.flush();  // nothing held: nothing submitted
  CHECK(f.submits() == 3);
  // Holding off submits what is held.
  s.submit({m.make(0xA6)});
  s.set_holding(false);
  CHECK(f.submits() == 4);
  CHECK(f.last().cbs() == Cbs{0xA6});
}

TEST_CASE("stream state: a call's leading batches go with the held work, the rest is carried in front of the next submission") {
  Fakes f;
  Maker m;
  Stream s(fake_device, fake_queue, 0);
  s.set_holding(true);
  s.submit({m.make(0xB1)});
  detail::BatchList call = m.list({m.make(0xC0, {}, {{0x60, 1}}), m.make(0xC1, {{0x61, 3}}, {{0x60, 2}})});
  REQUIRE(Protocol::submit_with(s, call, 1));
  REQUIRE(f.submits() == 1);
  CHECK(f.last().cbs() == Cbs{0xB1, 0xC0});  // held work first, then the call's leading batch
  CHECK(f.last().signals() == Points{{0x60, 1}});
  CHECK(s.held() == 1);  // carried: the batch that waits on the peer
  const auto carried = Protocol::carried_waits(s);
  REQUIRE(carried.size() == 1);
  CHECK(carried[0].semaphore == sem(0x61));
  CHECK(carried[0].value == 3);
  s.submit({m.make(0xB2)});  // held behind the carried batch
  CHECK(f.submits() == 1);
  s.flush();
  REQUIRE(f.submits() == 2);
  CHECK(f.last().cbs() == Cbs{0xC1, 0xB2});  // the carried batch in front
  CHECK(f.last().waits() == Points{{0x61, 3}});
  // flush_carried(): the carried batch alone, the host's held work stays.
  REQUIRE(Protocol::submit_with(s, call, 1));
  s.submit({m.make(0xB3)});
  REQUIRE(Protocol::flush_carried(s));
  CHECK(f.last().cbs() == Cbs{0xC1});
  CHECK(s.held() == 1);
  s.flush();
  CHECK(f.last().cbs() == Cbs{0xB3});
  // drop_carried(): after a failure of tpar's, nothing of the call goes out.
  REQUIRE(Protocol::submit_with(s, call, 1));
  Protocol::drop_carried(s);
  const std::size_t before = f.submits();
  s.flush();
  CHECK(f.submits() == before);
}

TEST_CASE("stream state: a ride pending is taken into the host's command buffer, which then carries the call's signals") {
  Fakes f;
  Maker m;
  FakeRider r;
  Stream s(fake_device, fake_queue, 0);
  s.set_holding(true);
  Protocol::set_rider(s, r.rider());
  CHECK_FALSE(s.ride_pending());
  CHECK(s.ride(cb(0xD0), true) == 0);  // nothing waits: nothing recorded
  CHECK(r.recorded_into.empty());
  s.submit({m.make(0xB1)});
  detail::BatchList call = m.list({m.make(0xE0, {}, {{0x60, 5}})});
  Protocol::hold_ride(s, call);
  CHECK(s.ride_pending());
  CHECK(Protocol::holds_call(s));
  CHECK(s.held() == 2);  // the host's work and the waiting call
  CHECK(f.submits() == 0);
  CHECK(s.ride(cb(0xD1), true) == 7);  // pending -> taken
  CHECK(r.recorded_into == Cbs{0xD1});
  CHECK_FALSE(s.ride_pending());
  // Another call cannot be held before the host submitted the buffer that took the ride.
  detail::BatchList next = m.list({m.make(0xE1, {}, {{0x60, 6}})});
  CHECK_THROWS_AS(Protocol::hold_ride(s, next), Error);
  s.submit({m.make(0xD1)});  // the host's buffer with the call's kernel in it
  s.flush();
  REQUIRE(f.submits() == 1);
  CHECK(f.last().cbs() == Cbs{0xB1, 0xD1});          // tpar's command buffer is not submitted
  CHECK(f.last().signals() == Points{{0x60, 5}});     // but its signals are, after the host's buffer
  const auto st = s.ride_stats();
  CHECK(st.recorded == 1);
  CHECK(st.sites == 1);
  CHECK(st.fell_back == 0);
  s.ride_forget(7);
  CHECK(r.forgotten == std::vector<std::uint64_t>{7});
  s.ride_forget(0);  // no site: nothing to forget
  CHECK(r.forgotten.size() == 1);
}

TEST_CASE("stream state: a ride no host takes falls back: the call goes out in tpar's command buffer before the host's next work") {
  Fakes f;
  Maker m;
  FakeRider r;
  Stream s(fake_device, fake_queue, 0);
  s.set_holding(true);
  Protocol::set_rider(s, r.rider());
  detail::BatchList call = m.list({m.make(0xE0, {}, {{0x60, 5}})});
  Protocol::hold_ride(s, call);
  s.submit({m.make(0xB1)});  // the host submitted without taking it
  CHECK_FALSE(s.ride_pending());
  s.flush();
  REQUIRE(f.submits() == 1);
  CHECK(f.last().cbs() == Cbs{0xE0, 0xB1});
  CHECK(s.ride_stats().fell_back == 1);
  // No site free: the host's recording gets nothing, and the call falls back.
  r.none = true;
  Protocol::hold_ride(s, call);
  CHECK(s.ride(cb(0xD2), true) == 0);
  CHECK(s.ride_pending());
  // flush_held() (StreamAllreduce's release of held calls) sends a pending call too, with
  // the stream's hold timeline signalled at the end.
  REQUIRE(Protocol::flush_held(s));
  REQUIRE(f.submits() == 2);
  CHECK(f.last().cbs() == Cbs{0xE0});
  const Points sig = f.last().signals();
  REQUIRE(sig.size() == 2);
  CHECK(sig[0] == std::pair<std::uintptr_t, std::uint64_t>{0x60, 5});
  CHECK(sig[1].second == 1);  // the hold timeline's first value
  CHECK(Protocol::flushes(s) == 1);
  CHECK(Protocol::flushes_done(s) == 0);
  {
    std::lock_guard lock(f.state.mutex);
    f.state.counters[sig[1].first] = 1;  // the GPU ran it
  }
  CHECK(Protocol::flushes_done(s) == 1);
  CHECK(s.ride_stats().fell_back == 2);
}

TEST_CASE("stream state: ride_again binds a site to the waiting call, or refuses and leaves the call waiting") {
  Fakes f;
  Maker m;
  FakeRider r;
  Stream s(fake_device, fake_queue, 0);
  s.set_holding(true);
  Protocol::set_rider(s, r.rider());
  CHECK(s.ride_again(0));        // a buffer with no ride in it may always go again
  CHECK_FALSE(s.ride_again(7));  // no call waits
  CHECK(r.bound.empty());
  detail::BatchList call = m.list({m.make(0xE0, {}, {{0x60, 5}})});
  Protocol::hold_ride(s, call);
  r.bind_ok = false;
  CHECK_FALSE(s.ride_again(7));
  CHECK(s.ride_pending());
  r.bind_ok = true;
  CHECK(s.ride_again(7));
  CHECK_FALSE(s.ride_pending());
  CHECK(r.bound == std::vector<std::uint64_t>{7, 7});
  const auto st = s.ride_stats();
  CHECK(st.again == 1);
  CHECK(st.refused == 1);
  s.submit({m.make(0xD1)});
  s.flush();
  CHECK(f.last().cbs() == Cbs{0xD1});
  CHECK(f.last().signals() == Points{{0x60, 5}});
}

TEST_CASE("stream state: a failed submission throws the driver's error and keeps nothing of what it held") {
  Fakes f;
  Maker m;
  Stream s(fake_device, fake_queue, 0);
  s.set_holding(true);
  s.submit({m.make(0xA1)});
  f.state.submit_result = VK_ERROR_DEVICE_LOST;
  try {
    s.flush();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::device_lost);
  }
  CHECK(s.held() == 0);
  f.state.submit_result = VK_SUCCESS;
  detail::BatchList call = m.list({m.make(0xC0)});
  f.state.submit_result = VK_ERROR_OUT_OF_HOST_MEMORY;
  CHECK_FALSE(Protocol::submit_with(s, call, 1));  // StreamAllreduce's path reports it as false
  f.state.submit_result = VK_SUCCESS;
  s.flush();
  CHECK(f.submits() == 0);
}

TEST_CASE("stream state: a batch with a pNext other than timeline values is refused with nothing held") {
  Fakes f;
  Stream s(fake_device, fake_queue, 0);
  s.set_holding(true);
  vk::ProtectedSubmitInfo other;
  vk::SubmitInfo bad;
  bad.pNext = &other;
  CHECK_THROWS_AS(s.submit({bad}), Error);
  CHECK(s.held() == 0);
  CHECK(f.submits() == 0);
}
