// ggml-vulkan's side of the hook (tpar/integrations/ggml_vulkan.hpp) on a real device,
// without ggml: a backend context's link serves nothing until attached, holds its compute
// queue's work while its stream holds, lets the queue's other submissions go after what it
// holds, makes the transfer queue's next submission wait for the last AllReduce, and goes
// back to nothing when detached; tpar's log reaches a host's sink at TPAR_LOG's level.
#include "../support/vk_env.hpp"

#include <tpar/integrations/ggml_vulkan.hpp>
#include <tpar/sync/timeline.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using tpar::ggml_vulkan::ContextLink;
using tpar::ggml_vulkan::QueueLink;

// One lavapipe device (or the first GPU), and a link of a context on its compute queue.
struct Rig {
  tpar_test::ValidationLog log;
  tpar::DeviceGroup group{tpar::DeviceGroup::create(tpar_test::test_options(log, 1))};
  tpar::Device& dev = group[0];
  QueueLink queue_link;
  ContextLink link;
  Rig() {
    link.init(dev.physical(), dev.handle(), dev.compute_queue().handle(), dev.compute_queue().family(),
              dev.compute_queue().shared_lock(), queue_link, "Vulkan0", 0);
  }
  ~Rig() { CHECK(log.errors.empty()); }
};

// A batch with no command buffer that signals `value` on `t`.
struct SignalBatch {
  vk::Semaphore semaphore;
  std::uint64_t value;
  vk::TimelineSemaphoreSubmitInfo ti;
  vk::SubmitInfo si;
  SignalBatch(const tpar::Timeline& t, std::uint64_t v) : semaphore(t.handle()), value(v) {
    ti = vk::TimelineSemaphoreSubmitInfo(0, nullptr, 1, &value);
    si = vk::SubmitInfo(0, nullptr, nullptr, 0, nullptr, 1, &semaphore, &ti);
  }
};

bool reached(vk::Device device, const tpar::Timeline& t, std::uint64_t v, std::chrono::nanoseconds within) {
  const vk::Semaphore s = t.handle();
  return tpar::wait(device, std::span(&s, 1), std::span(&v, 1), within) == vk::Result::eSuccess;
}

}  // namespace

TEST_CASE("a context link serves nothing until attached, and costs nothing then") {
  Rig r;
  CHECK_FALSE(r.link.serving());
  CHECK_FALSE(r.link.holding());
  CHECK_FALSE(r.link.ride_pending());
  CHECK(r.link.ride(vk::CommandBuffer{}, false) == 0);
  CHECK(r.link.ride_again(0));      // a recording with no ride in it may be submitted again
  CHECK_FALSE(r.link.ride_again(7));  // one that held a ride may not: nothing serves it
  CHECK(r.link.synchronized(1s) == vk::Result::eSuccess);
  r.link.flush();
  r.queue_link.before_submit();  // no stream on the queue: nothing to do
  auto span = r.link.trace_span("graph_compute");  // no trace is taken here: an empty span
}

TEST_CASE("a context link needs init before attach") {
  ContextLink link;
  CHECK(tpar_test::code_of([&] { link.attach(); }) == tpar::ErrorCode::invalid_argument);
  CHECK_FALSE(link.serving());
}

TEST_CASE("attached and holding, the compute queue's work waits in the stream, and the queue's other submissions go after it") {
  Rig r;
  tpar::Stream* stream = r.link.attach();
  REQUIRE(stream != nullptr);
  CHECK(r.link.serving());
  CHECK(r.link.attach() == stream);  // attached again: the same stream
  stream->set_holding(true);
  CHECK(r.link.holding());

  const tpar::Timeline t(r.dev.handle());
  const SignalBatch b(t, 1);
  r.link.submit(false, std::span(&b.si, 1), {}, [](std::span<const vk::SubmitInfo>, vk::Fence) { FAIL("the host's own path"); });
  CHECK(stream->held() == 1);
  CHECK_FALSE(reached(r.dev.handle(), t, 1, 50ms));  // held: not on the queue

  // the device's own submission on this queue (ggml-vulkan's buffer copies) goes after it
  r.queue_link.before_submit();
  CHECK(stream->held() == 0);
  CHECK(reached(r.dev.handle(), t, 1, tpar_test::test_timeout));

  // held work goes out at the context's own flush (an event's signal, synchronize) too
  const SignalBatch b2(t, 2);
  r.link.submit(false, std::span(&b2.si, 1), {}, {});
  CHECK(stream->held() == 1);
  r.link.flush();
  CHECK(stream->held() == 0);
  CHECK(reached(r.dev.handle(), t, 2, tpar_test::test_timeout));

  stream->set_holding(false);
  r.link.detach();
  CHECK_FALSE(r.link.serving());
  CHECK_FALSE(r.link.holding());
  r.queue_link.before_submit();  // the stream is off the queue's list
}

TEST_CASE("the transfer queue's next submission waits for the last AllReduce's done point, once") {
  Rig r;
  r.link.attach();
  const tpar::Timeline done(r.dev.handle());
  r.link.wait_for({done.handle(), 5});

  std::vector<std::vector<std::pair<vk::Semaphore, std::uint64_t>>> seen;  // each submission's first batch's waits
  const auto host = [&](std::span<const vk::SubmitInfo> infos, vk::Fence) {
    std::vector<std::pair<vk::Semaphore, std::uint64_t>> waits;
    if (!infos.empty() && infos[0].waitSemaphoreCount) {
      const auto* ti = static_cast<const vk::TimelineSemaphoreSubmitInfo*>(infos[0].pNext);
      for (std::uint32_t k = 0; k < infos[0].waitSemaphoreCount; ++k) waits.emplace_back(infos[0].pWaitSemaphores[k], ti->pWaitSemaphoreValues[k]);
    }
    seen.push_back(waits);
  };
  const tpar::Timeline t(r.dev.handle());
  const SignalBatch b(t, 1);
  r.link.submit(true, std::span(&b.si, 1), {}, host);
  r.link.submit(true, std::span(&b.si, 1), {}, host);
  REQUIRE(seen.size() == 2);
  REQUIRE(seen[0].size() == 1);
  CHECK(seen[0][0].first == done.handle());
  CHECK(seen[0][0].second == 5);  // the wait in front of the host's work
  CHECK(seen[1].empty());          // later ones follow it in queue order

  // synchronize waits for the done point on the host, bounded
  CHECK(r.link.synchronized(20ms) == vk::Result::eTimeout);
  const vk::SemaphoreSignalInfo signal(done.handle(), 5);
  REQUIRE(r.dev.handle().signalSemaphore(&signal) == vk::Result::eSuccess);
  CHECK(r.link.synchronized(tpar_test::test_timeout) == vk::Result::eSuccess);
  r.link.detach();
}

TEST_CASE("tpar's log through a host's sink, at TPAR_LOG's level") {
  static std::vector<std::string> got;
  got.clear();
  tpar::ggml_vulkan::log_through([](tpar::LogLevel level, const char* text) {
    got.push_back(std::string(tpar::to_string(level)) + ": " + text);
  });
  const tpar::LogLevel threshold = tpar::log_threshold();
  tpar::log(tpar::LogLevel::debug, "below any threshold but debug");
  tpar::log(tpar::LogLevel::error, "an error");
  tpar::set_log_sink(nullptr);
  const std::size_t want = threshold == tpar::LogLevel::debug ? 2 : 1;
  REQUIRE(got.size() == want);
  CHECK(got.back() == "error: an error");
}
