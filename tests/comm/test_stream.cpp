// tpar::Stream and StreamAllreduce: the host's work and AllReduces in one ordered stream
// per device, with no semaphore between the host's work and tpar's and no host wait. Each
// step, every device's host work copies what its span holds (the last sum, as the step
// sees it) into a history and writes the step's partial into the span; then the span is
// summed. Every step's history must hold the exact sum of the step before, on every
// device: tpar read each partial after the host wrote it, and the host read each sum
// after tpar wrote it, with nothing but queue order between them.
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>
#include <tpar/comm/stream.hpp>

#include "support/numerics.hpp"
#include "support/test_timeline.hpp"
#include "support/vk_env.hpp"

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

using namespace tpar;
using Protocol = tpar::detail::StreamProtocol;
using namespace tpar_test;

namespace {

// One device's side of the chain: its span, the history of what each step saw, and the
// command buffers of its host work.
struct Side {
  Device* dev;
  std::unique_ptr<TestBuffer> span, history, partials;
  vk::CommandPool pool;
  std::vector<vk::CommandBuffer> cbs;
  std::unique_ptr<Stream> stream;

  Side(Device& d, std::size_t count, std::size_t steps) : dev(&d) {
    span = std::make_unique<TestBuffer>(d, count * 4);
    history = std::make_unique<TestBuffer>(d, count * 4 * steps);
    partials = std::make_unique<TestBuffer>(d, count * 4 * steps);
    vk::CommandPoolCreateInfo info({}, d.compute_queue().family());
    REQUIRE(d.handle().createCommandPool(&info, nullptr, &pool) == vk::Result::eSuccess);
    // The host shares tpar's queue: its lock is tpar's (here, tpar's own Queue's).
    Queue& q = d.compute_queue();
    stream = std::make_unique<Stream>(d.handle(), q.handle(), q.family(), q.shared_lock());
  }
  ~Side() {
    stream.reset();
    dev->handle().destroyCommandPool(pool);
  }

  // Step k's host work: history[k] <- span; span <- partials[k]. `ride`: first, the
  // held call's kernel where the stream offers it (Stream::ride, recorded once).
  // `ordered`: the ride is told that nothing before it needs a barrier (Stream::ride), and
  // every step ends with a barrier over its copies' writes, as a host that says so must.
  vk::CommandBuffer record(std::size_t k, std::size_t count, bool ride = false, bool ordered = false) {
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
    REQUIRE(dev->handle().allocateCommandBuffers(&ai, &cb) == vk::Result::eSuccess);
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    REQUIRE(cb.begin(&bi) == vk::Result::eSuccess);
    if (ride && stream->ride_pending()) CHECK(stream->ride(cb, false, ordered) == 0);
    const std::size_t bytes = count * 4;
    const vk::BufferCopy save(0, k * bytes, bytes);
    cb.copyBuffer(span->handle(), history->handle(), 1, &save);
    const vk::MemoryBarrier war(vk::AccessFlagBits::eTransferRead, vk::AccessFlagBits::eTransferWrite);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer, {}, 1, &war, 0, nullptr, 0, nullptr);
    const vk::BufferCopy load(k * bytes, 0, bytes);
    cb.copyBuffer(partials->handle(), span->handle(), 1, &load);
    if (ordered) {
      using S = vk::PipelineStageFlagBits;
      using A = vk::AccessFlagBits;
      const vk::MemoryBarrier end(A::eShaderWrite | A::eTransferWrite, A::eShaderRead | A::eShaderWrite | A::eTransferRead | A::eTransferWrite);
      cb.pipelineBarrier(S::eComputeShader | S::eTransfer, S::eComputeShader | S::eTransfer, {}, 1, &end, 0, nullptr, 0, nullptr);
    }
    const vk::MemoryBarrier to_host(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {}, 1, &to_host, 0, nullptr, 0,
                       nullptr);
    REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb) == VK_SUCCESS);
    cbs.push_back(cb);
    return cb;
  }
};

struct Chain {
  std::size_t count, steps;
  std::vector<std::unique_ptr<Side>> sides;
  std::vector<std::vector<std::vector<float>>> inputs;  // [step][device]

  Chain(DeviceGroup& group, std::size_t count_, std::size_t steps_, std::uint64_t seed) : count(count_), steps(steps_) {
    for (std::size_t d = 0; d < group.size(); ++d) sides.push_back(std::make_unique<Side>(group[d], count, steps + 1));
    for (std::size_t k = 0; k <= steps; ++k) {
      inputs.push_back(integer_inputs(group.size(), count, seed + k));
      for (std::size_t d = 0; d < group.size(); ++d) sides[d]->partials->write(k * count * 4, inputs[k][d]);
    }
  }
  std::vector<Stream*> streams() {
    std::vector<Stream*> s;
    for (auto& side : sides) s.push_back(side->stream.get());
    return s;
  }
  std::vector<BufferSpan> spans() const {
    std::vector<BufferSpan> s;
    for (auto& side : sides) s.push_back({side->span->handle(), 0, count, side->span->size()});
    return s;
  }
  // Host work of step k on device d, through its stream (`gate`: a first wait; `ride`:
  // as Side::record; `first`: a command buffer that goes before it, in the same batch).
  void host_step(std::size_t d, std::size_t k, const TestTimeline* gate = nullptr, bool ride = false,
                 vk::CommandBuffer first = {}, bool ordered = false) {
    const vk::CommandBuffer cbs[2] = {first, sides[d]->record(k, count, ride, ordered)};
    const std::uint64_t one = 1;
    const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
    vk::TimelineSemaphoreSubmitInfo ti(gate ? 1 : 0, &one, 0, nullptr);
    vk::SubmitInfo si(gate ? 1 : 0, gate ? &gate->semaphore : nullptr, &stage, first ? 2 : 1, first ? cbs : cbs + 1, 0, nullptr, &ti);
    sides[d]->stream->submit({si});
  }
  // Every step k >= 1 saw the exact sum of step k - 1, on every device.
  void check() {
    for (std::size_t k = 1; k <= steps; ++k) {
      CAPTURE(k);
      const auto expect = integer_sum(inputs[k - 1]);
      for (std::size_t d = 0; d < sides.size(); ++d) {
        CAPTURE(d);
        REQUIRE(bit_identical(sides[d]->history->read(k * count * 4, count), expect));
      }
    }
  }
};

Options test_opts() {
  Options o;
  o.timeout = test_timeout;
  return o;
}

// Runs `steps` steps and a last host step that saves the final sum.
void run_chain(Chain& chain, StreamAllreduce<AnyCommunicator>& ar, const TestTimeline* gate = nullptr) {
  const std::size_t n = chain.sides.size();
  const auto spans = chain.spans();
  Ticket last;
  for (std::size_t k = 0; k < chain.steps; ++k) {
    for (std::size_t d = 0; d < n; ++d) chain.host_step(d, k, k == 0 && d == 0 ? gate : nullptr);
    last = ar.allreduce(spans);
  }
  for (std::size_t d = 0; d < n; ++d) chain.host_step(d, chain.steps);
  if (gate) gate->signal(1);
  ar.flush();
  last.wait(test_timeout);
  // The final host step runs after the last sum: wait for the queues to drain.
  for (std::size_t d = 0; d < n; ++d) {
    const vk::Device vkd = chain.sides[d]->dev->handle();
    REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(vkd) == VK_SUCCESS);
  }
  chain.check();
}

// The same chain with a thread per device: the main thread makes every step's call
// (allreduce_split, submitting nothing), each device's thread submits its host work and
// then its part of the call (enqueue), as a meta backend with a thread per device does.
// The main thread runs ahead of the devices' threads by up to `lead` calls.
void run_chain_threads(Chain& chain, StreamAllreduce<AnyCommunicator>& ar, std::size_t lead) {
  const std::size_t n = chain.sides.size();
  const auto spans = chain.spans();
  std::atomic<std::size_t> made{0};
  std::vector<std::atomic<std::size_t>> done(n);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (std::size_t d = 0; d < n; ++d)
    threads.emplace_back([&, d] {
      try {
        for (std::size_t k = 0; k < chain.steps; ++k) {
          chain.host_step(d, k);
          while (made.load(std::memory_order_acquire) <= k) std::this_thread::yield();
          ar.enqueue(d);
          done[d].store(k + 1, std::memory_order_release);
        }
        chain.host_step(d, chain.steps);
      } catch (const std::exception& e) {
        ++failures;
        MESSAGE("device " << d << "'s thread: " << e.what());
      }
    });
  for (std::size_t k = 0; k < chain.steps; ++k) {
    // at most `lead` calls ahead of the slowest device's thread
    for (std::size_t d = 0; d < n; ++d)
      while (k >= lead && done[d].load(std::memory_order_acquire) + lead <= k && !failures) std::this_thread::yield();
    ar.allreduce_split(spans);
    made.store(k + 1, std::memory_order_release);
  }
  for (auto& t : threads) t.join();
  REQUIRE(failures == 0);
  CHECK(ar.outstanding() == 0);
  ar.flush();
  for (std::size_t d = 0; d < n; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(chain.sides[d]->dev->handle()) == VK_SUCCESS);
  chain.check();
}

}  // namespace

TEST_CASE("streams: a thread per device enqueues its part of each call, in any interleaving") {
  for (std::uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    VkEnv env(n, {.sync_validation = n == 2});
    if (!env.ok()) continue;
    // OneShot: on two to four distinct GPUs the automatic choice would take the relay for
    // these calls, which are then not split per device (the next case).
    Options o = test_opts();
    o.algo = AlgoChoice::oneshot;
    auto comm = make_communicator(env.group(), o);
    for (std::size_t lead : {std::size_t{1}, std::size_t{4}, std::size_t{64}}) {
      CAPTURE(lead);
      const std::size_t steps = 40;
      Chain chain(env.group(), 4096, steps, 300 * n + lead);
      StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
      run_chain_threads(chain, ar, lead);
      CHECK(comm.last_call().algorithm == "oneshot");
      MESSAGE("n " << n << ", lead " << lead << ": a device waited for a peer's part " << ar.gate_waits() << " times");
    }
    CHECK(!comm.failure());
  }
}

TEST_CASE("streams: a call that cannot be split per device is refused with nothing enqueued") {
  // The ring, whose steps wait on each other's across devices, and the relay, whose host
  // thread serves a call once all of it is on the queues.
  for (const AlgoChoice algo : {AlgoChoice::ring, AlgoChoice::relay}) {
    CAPTURE(to_string(algo));
    VkEnv env(2, {.sync_validation = false});
    if (!env.ok()) return;
    Options o = test_opts();
    o.algo = algo;
    auto comm = make_communicator(env.group(), o);
    Chain chain(env.group(), 4096, 1, 3);
    StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
    CHECK_FALSE(comm.port().per_device(4096));
    for (std::size_t d = 0; d < 2; ++d) chain.host_step(d, 0);
    const auto before = comm.group()[0].compute_queue().counts().submits + chain.sides[0]->stream->queue().counts().submits;
    CHECK(code_of([&] { ar.allreduce_split(chain.spans()); }) == ErrorCode::invalid_argument);
    CHECK(ar.outstanding() == 0);
    CHECK(comm.deferred() == 0);
    CHECK(comm.group()[0].compute_queue().counts().submits + chain.sides[0]->stream->queue().counts().submits == before);
    CHECK(code_of([&] { ar.enqueue(0); }) == ErrorCode::invalid_argument);  // no part waits
    CHECK(!comm.failure());
    // the same call through allreduce(), as a host without threads makes it
    Ticket t = ar.allreduce(chain.spans());
    t.wait(test_timeout);
    CHECK(comm.last_call().algorithm == (algo == AlgoChoice::ring ? "ring" : "relay"));
    const auto expect = integer_sum(chain.inputs[0]);
    for (auto& side : chain.sides) CHECK(bit_identical(side->span->read(0, 4096), expect));
  }
}

TEST_CASE("streams: host work and AllReduces ordered by the queues alone, one submission per device per step") {
  for (std::uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    VkEnv env(n, {.sync_validation = n == 2});
    if (!env.ok()) continue;
    // OneShot's order by the queues (on distinct GPUs the automatic choice would take the
    // relay, whose calls are held: "relay calls are held ..." below counts those).
    Options o = test_opts();
    o.algo = AlgoChoice::oneshot;
    auto comm = make_communicator(env.group(), o);
    const std::size_t steps = 24;
    Chain chain(env.group(), 4096, steps, 100 * n);
    // What reached each device's queue: through its stream (the host's work and tpar's
    // batches with it) and through tpar's own submissions (none expected).
    auto counts = [&](std::size_t d) {
      const auto a = chain.sides[d]->stream->queue().counts(), b = env.group()[d].compute_queue().counts();
      return Queue::Counts{a.submits + b.submits, a.batches + b.batches, a.waits + b.waits};
    };
    std::vector<Queue::Counts> before;
    for (std::size_t d = 0; d < n; ++d) before.push_back(counts(d));
    {
      StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
      run_chain(chain, ar);
    }
    CHECK(comm.last_call().algorithm == "oneshot");
    for (std::size_t d = 0; d < n; ++d) {
      CAPTURE(d);
      const auto c = counts(d);
      const auto submits = c.submits - before[d].submits, waits = c.waits - before[d].waits;
      MESSAGE("device " << d << ": " << submits << " vkQueueSubmit and " << waits << " semaphore waits for " << steps << " steps");
      // One per step, and at most two more: the last step's sums, and the final host step.
      CHECK(submits >= steps);
      CHECK(submits <= steps + 2);
      // The only waits: each device's sum on its peers' published values (and the first
      // call's on tpar's own timelines at 0, before it knows its queue's order).
      CHECK(waits >= steps * (n - 1));
      CHECK(waits <= steps * (n - 1) + 1);
    }
  }
}

TEST_CASE("streams: a whole chain is enqueued with no host wait, the GPUs held back until the end") {
  // The first host step waits on a gate the test opens only after enqueuing every step:
  // a host wait anywhere (a staging slot set still in use, say) would wait for it forever.
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  auto comm = make_communicator(env.group(), test_opts());
  const std::size_t steps = 100;  // more than a 32-layer model's 64 calls a token
  Chain chain(env.group(), 4096, steps, 7);
  TestTimeline gate(env.group()[0].handle());
  StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
  run_chain(chain, ar, &gate);
}

TEST_CASE("streams: calls on other queues (the ring), the relay and calls of changing size") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  for (AlgoChoice algo : {AlgoChoice::ring, AlgoChoice::relay, AlgoChoice::automatic}) {
    CAPTURE(to_string(algo));
    Options o = test_opts();
    o.algo = algo;
    auto comm = make_communicator(env.group(), o);
    const std::size_t count = algo == AlgoChoice::automatic ? 300000 : 4096;
    Chain chain(env.group(), count, 6, 31);
    StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
    run_chain(chain, ar);
    CHECK(comm.last_call().algorithm == (algo == AlgoChoice::ring ? "ring" : algo == AlgoChoice::relay ? "relay" : "oneshot"));
  }
}

TEST_CASE("streams: a ticket's wait submits what the streams hold") {
  VkEnv env(2);
  if (!env.ok()) return;
  // OneShot carries its sum's batches in front of the next submission; the relay (taken
  // automatically for such calls on two GPUs whose kernels wait) may release its call at
  // once where the GPUs are idle. Either way the wait must see the sum.
  for (AlgoChoice algo : {AlgoChoice::oneshot, AlgoChoice::relay}) {
    CAPTURE(to_string(algo));
    Options o = test_opts();
    o.algo = algo;
    auto comm = make_communicator(env.group(), o);
    Chain chain(env.group(), 1024, 1, 5);
    StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
    for (std::size_t d = 0; d < 2; ++d) chain.host_step(d, 0);
    Ticket t = ar.allreduce(chain.spans());
    // OneShot's sum batches are still held by the streams; the wait must hand them over first.
    if (algo == AlgoChoice::oneshot) CHECK(chain.sides[0]->stream->held() + chain.sides[1]->stream->held() > 0);
    t.wait(test_timeout);
    CHECK(comm.last_call().algorithm == to_string(algo));
    const auto expect = integer_sum(chain.inputs[0]);
    for (auto& side : chain.sides) CHECK(bit_identical(side->span->read(0, 1024), expect));
  }
}

TEST_CASE("streams: bad input is refused with nothing submitted") {
  VkEnv env(2);
  if (!env.ok()) return;
  auto comm = make_communicator(env.group(), test_opts());
  Chain chain(env.group(), 1024, 1, 5);
  StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
  for (std::size_t d = 0; d < 2; ++d) chain.host_step(d, 0);
  const auto before = chain.sides[0]->stream->queue().counts().submits + env.group()[0].compute_queue().counts().submits;
  auto spans = chain.spans();
  spans[1].count = 512;  // counts differ
  CHECK(code_of([&] { ar.allreduce(spans); }) == ErrorCode::invalid_argument);
  CHECK(chain.sides[0]->stream->queue().counts().submits + env.group()[0].compute_queue().counts().submits == before);
  CHECK(chain.sides[0]->stream->held() == 1);  // the host's work, still held
  // A stream per device, on tpar's compute queues.
  std::vector<Stream*> one{chain.sides[0]->stream.get()};
  CHECK(code_of([&] { StreamAllreduce<AnyCommunicator> bad(comm, one); }) == ErrorCode::invalid_argument);
  std::vector<Stream*> swapped{chain.sides[1]->stream.get(), chain.sides[0]->stream.get()};
  CHECK(code_of([&] { StreamAllreduce<AnyCommunicator> bad(comm, swapped); }) == ErrorCode::invalid_argument);
  ar.flush();
  for (std::size_t d = 0; d < 2; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
}

TEST_CASE("streams: a stream outside an AllReduce submits at once") {
  VkEnv env(2);
  if (!env.ok()) return;
  Chain chain(env.group(), 256, 1, 9);
  const auto before = chain.sides[0]->stream->queue().counts().submits;
  chain.host_step(0, 0);
  CHECK(chain.sides[0]->stream->held() == 0);
  CHECK(chain.sides[0]->stream->queue().counts().submits == before + 1);
  REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[0].handle()) == VK_SUCCESS);
}

TEST_CASE("streams: relay calls are held with the host's work on every device and released together") {
  // The relay's batches wait on no other device (on lavapipe its queues wait for the host
  // thread's sum), so the streams hold them with the host's work: a call goes out at once
  // while a device has no more than one earlier release to run, else every `hold` calls.
  // The gate keeps the GPUs from finishing anything until every step is enqueued, which
  // makes the releases' count exact.
  for (std::uint32_t n : {2u, 3u}) {
    VkEnv env(n, {.sync_validation = false});
    if (!env.ok()) continue;
    for (std::uint32_t hold : {1u, 4u, 16u}) {
      CAPTURE(n);
      CAPTURE(hold);
      Options o = test_opts();
      o.algo = AlgoChoice::relay;
      o.stream_hold = hold;
      auto comm = make_communicator(env.group(), o);
      const std::size_t steps = 40;
      Chain chain(env.group(), 4096, steps, 500 * n + hold);
      std::vector<std::uint64_t> before;
      for (std::size_t d = 0; d < n; ++d) before.push_back(chain.sides[d]->stream->queue().counts().submits);
      TestTimeline gate(env.group()[0].handle());
      StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
      run_chain(chain, ar, &gate);
      CHECK(comm.last_call().algorithm == "relay");
      if (hold == 1) {
        CHECK(ar.held_calls() == 0);
        continue;
      }
      CHECK(ar.held_calls() == steps);
      // two at once (the GPUs have nothing queued), then one release per `hold` calls, and
      // the last calls' at the flush
      const std::uint64_t expect = 2 + (steps - 2 + hold - 1) / hold;
      CHECK(ar.hold_releases() == expect);
      for (std::size_t d = 0; d < n; ++d) {
        CAPTURE(d);
        const auto submits = chain.sides[d]->stream->queue().counts().submits - before[d];
        MESSAGE("n " << n << ", hold " << hold << ": device " << d << " made " << submits << " vkQueueSubmit for " << steps
                     << " steps, " << ar.hold_releases() << " releases");
        CHECK(submits <= expect + 2);  // and the final host step's
      }
    }
  }
}

TEST_CASE("streams: a fenced submission on one device releases the calls every device holds") {
  // A device's relay part waits for its peers': submitting one device's held work alone
  // and waiting for it (ggml's synchronize) would wait for a peer's part still held.
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  Options o = test_opts();
  o.algo = AlgoChoice::relay;
  o.stream_hold = 64;
  auto comm = make_communicator(env.group(), o);
  const std::size_t steps = 6;
  Chain chain(env.group(), 1024, steps, 77);
  TestTimeline gate(env.group()[0].handle());  // the GPUs finish nothing until it opens
  StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
  const auto spans = chain.spans();
  for (std::size_t k = 0; k < steps; ++k) {
    for (std::size_t d = 0; d < 2; ++d) chain.host_step(d, k, k == 0 && d == 0 ? &gate : nullptr);
    (void)ar.allreduce(spans);
  }
  // the first two went out at once; the rest is held on both devices
  CHECK(ar.held_calls() == steps);
  CHECK(ar.hold_releases() == 2);
  CHECK(Protocol::holds_call(*chain.sides[0]->stream));
  CHECK(Protocol::holds_call(*chain.sides[1]->stream));
  for (std::size_t d = 0; d < 2; ++d) chain.host_step(d, steps);
  gate.signal(1);
  vk::FenceCreateInfo fi;
  vk::Fence fence;
  REQUIRE(env.group()[1].handle().createFence(&fi, nullptr, &fence) == vk::Result::eSuccess);
  chain.sides[1]->stream->submit(std::span<const vk::SubmitInfo>{}, fence);
  CHECK_FALSE(Protocol::holds_call(*chain.sides[0]->stream));
  CHECK_FALSE(Protocol::holds_call(*chain.sides[1]->stream));
  const auto timeout_ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(test_timeout).count());
  CHECK(env.group()[1].handle().waitForFences(1, &fence, VK_TRUE, timeout_ns) == vk::Result::eSuccess);
  env.group()[1].handle().destroyFence(fence);
  ar.flush();
  for (std::size_t d = 0; d < 2; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
  chain.check();
}

namespace {

// Whether the relay's kernels wait for the sum on every device of `group` (GPUs): where
// they do not (lavapipe), calls cannot ride and none is offered.
bool kernels_wait(const DeviceGroup& group) { return group.relay_gate().possible && group.relay_gate().queue_waits == 0; }

}  // namespace

TEST_CASE("streams: a held relay call rides in the host's next command buffer, recorded once or as a site replayed") {
  // Each step's host work is one command buffer; a relay call held after it waits for a
  // ride, and the next step's host work records its kernel first (Stream::ride), or, as a
  // replay would, submits again a command buffer holding a site that now serves the call
  // (Stream::ride_again). Every step sees the exact sum of the step before; a call no
  // host takes (the last one before a flush) goes out in tpar's own command buffer.
  for (std::uint32_t n : {2u, 3u}) {
    VkEnv env(n, {.sync_validation = false});
    if (!env.ok()) continue;
    CAPTURE(n);
    const bool waits = kernels_wait(env.group());
    if (!waits)
      MESSAGE("the relay's kernels do not wait on the GPU here (" << env.group()[0].capabilities().name
                                                                  << "): no call is offered a ride; checked that every call goes out "
                                                                     "in tpar's command buffers, exact");
    Options o = test_opts();
    o.algo = AlgoChoice::relay;
    for (const bool ordered : {false, true})
    SUBCASE(ordered ? "recorded into each step's command buffer, ordered (no barrier before the kernel: each step ends with one)"
                    : "recorded into each step's command buffer") {
      auto comm = make_communicator(env.group(), o);
      const std::size_t steps = 24;
      Chain chain(env.group(), 4096, steps, 900 + n);
      StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
      const auto spans = chain.spans();
      Ticket last;
      for (std::size_t k = 0; k < steps; ++k) {
        for (std::size_t d = 0; d < n; ++d) chain.host_step(d, k, nullptr, true, {}, ordered);
        last = ar.allreduce(spans);
      }
      for (std::size_t d = 0; d < n; ++d) chain.host_step(d, steps, nullptr, true, {}, ordered);
      ar.flush();
      last.wait(test_timeout);
      for (std::size_t d = 0; d < n; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
      chain.check();
      const auto r = ar.ride_stats();
      MESSAGE("n " << n << ", rides recorded " << r.recorded << " (sites " << r.sites << "), again " << r.again << ", refused "
                   << r.refused << ", fell back " << r.fell_back);
      CHECK(r.recorded == (waits ? n * steps : 0));
      CHECK(r.sites == 0);
      CHECK(r.fell_back == 0);
      CHECK(ar.held_calls() == steps);
    }
    SUBCASE("a site replayed for later calls, after the GPUs went idle between rounds") {
      auto comm = make_communicator(env.group(), o);
      const std::size_t rounds = 3, per_round = 5, steps = rounds * per_round;
      Chain chain(env.group(), 4096, steps, 700 + n);
      StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
      const auto spans = chain.spans();
      // by device and step of a round: a command buffer holding only the ride, and its site
      std::vector<std::vector<vk::CommandBuffer>> kept(n, std::vector<vk::CommandBuffer>(per_round));
      std::vector<std::vector<std::uint64_t>> site(n, std::vector<std::uint64_t>(per_round, 0));
      std::size_t offered = 0;
      for (std::size_t k = 0; k < steps; ++k) {
        const std::size_t j = k % per_round;
        for (std::size_t d = 0; d < n; ++d) {
          Side& side = *chain.sides[d];
          vk::CommandBuffer first;
          if (side.stream->ride_pending()) {
            ++offered;
            if (kept[d][j] && side.stream->ride_again(site[d][j])) {
              first = kept[d][j];
            } else {
              REQUIRE_FALSE(kept[d][j]);  // the GPUs are idle at each round's start: a site is always free then
              vk::CommandBufferAllocateInfo ai(side.pool, vk::CommandBufferLevel::ePrimary, 1);
              REQUIRE(side.dev->handle().allocateCommandBuffers(&ai, &kept[d][j]) == vk::Result::eSuccess);
              vk::CommandBufferBeginInfo bi;
              REQUIRE(kept[d][j].begin(&bi) == vk::Result::eSuccess);
              site[d][j] = side.stream->ride(kept[d][j], true);
              CHECK(site[d][j] != 0);
              REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(kept[d][j]) == VK_SUCCESS);
              first = kept[d][j];
            }
          }
          chain.host_step(d, k, nullptr, false, first);
        }
        (void)ar.allreduce(spans);
        if (j + 1 == per_round) {
          // a token's end: the host synchronizes; the call it holds goes out in tpar's batch
          ar.flush();
          for (std::size_t d = 0; d < n; ++d)
            REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
        }
      }
      for (std::size_t d = 0; d < n; ++d) chain.host_step(d, steps);
      ar.flush();
      for (std::size_t d = 0; d < n; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
      chain.check();
      const auto r = ar.ride_stats();
      MESSAGE("n " << n << ", offered " << offered << ", rides recorded " << r.recorded << " (sites " << r.sites << "), again "
                   << r.again << ", refused " << r.refused << ", fell back " << r.fell_back);
      // a round's first step follows a flush: nothing waits for a ride there
      CHECK(offered == (waits ? n * rounds * (per_round - 1) : 0));
      CHECK(r.sites == (waits ? n * (per_round - 1) : 0));
      CHECK(r.recorded == r.sites);
      CHECK(r.again == (waits ? n * (rounds - 1) * (per_round - 1) : 0));
      CHECK(r.refused == 0);
      CHECK(r.fell_back == (waits ? n * rounds : 0));
      // a site serves nothing where no call waits: the host records anew then
      if (waits) {
        CHECK_FALSE(chain.sides[0]->stream->ride_pending());
        CHECK_FALSE(chain.sides[0]->stream->ride_again(site[0][1]));
        CHECK(chain.sides[0]->stream->ride_again(0));
      }
      for (std::size_t d = 0; d < n; ++d)
        for (std::size_t j = 0; j < per_round; ++j) chain.sides[d]->stream->ride_forget(site[d][j]);
      for (std::size_t d = 0; d < n; ++d) CHECK(comm.port().sites_in_use(d) == 0);
    }
    SUBCASE("TPAR_RELAY_RIDE=0 (Options::relay_ride false) offers no ride") {
      o.relay_ride = false;
      auto comm = make_communicator(env.group(), o);
      const std::size_t steps = 8;
      Chain chain(env.group(), 1024, steps, 300 + n);
      StreamAllreduce<AnyCommunicator> ar(comm, chain.streams());
      for (std::size_t k = 0; k < steps; ++k) {
        for (std::size_t d = 0; d < n; ++d) {
          CHECK_FALSE(chain.sides[d]->stream->ride_pending());
          chain.host_step(d, k, nullptr, true);
        }
        (void)ar.allreduce(chain.spans());
      }
      for (std::size_t d = 0; d < n; ++d) chain.host_step(d, steps);
      ar.flush();
      for (std::size_t d = 0; d < n; ++d) REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(env.group()[d].handle()) == VK_SUCCESS);
      chain.check();
      CHECK(ar.ride_stats().recorded == 0);
    }
  }
}

TEST_CASE("streams: a call waiting for a ride goes out at any flush or submission, even with nothing else held") {
  // Stream::hold_ride as StreamAllreduce calls it (here a batch with no command buffer that
  // signals a timeline); whatever submits next without taking the ride sends it as it is.
  VkEnv env(1, {.sync_validation = false});
  if (!env.ok()) return;
  Device& dev = env.group()[0];
  Queue& q = dev.compute_queue();
  const auto reached = [&](const TestTimeline& t, std::uint64_t v) {
    return tpar::wait(dev.handle(), std::span(&t.semaphore, 1), std::span(&v, 1), test_timeout) == vk::Result::eSuccess;
  };
  auto held_call = [](const TestTimeline& t, std::uint64_t v) {
    detail::BatchList calls;
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &v);
    vk::SubmitInfo si(0, nullptr, nullptr, 0, nullptr, 1, &t.semaphore, &ti);
    calls.append(std::span(&si, 1));
    return calls;
  };
  for (int how = 0; how < 3; ++how) {
    CAPTURE(how);
    Stream s(dev.handle(), q.handle(), q.family(), q.shared_lock());
    s.set_holding(true);
    TestTimeline t(dev.handle());
    auto calls = held_call(t, 1);
    Protocol::hold_ride(s, calls);  // nothing else held
    CHECK(s.ride_pending());
    CHECK(s.held() == 1);
    if (how == 0) s.flush();
    if (how == 1) CHECK(Protocol::flush_held(s));
    if (how == 2) s.submit(std::span<const vk::SubmitInfo>{});  // the host's next work, no ride taken
    if (how == 2) s.flush();
    CHECK_FALSE(s.ride_pending());
    CHECK(s.ride_stats().fell_back == 1);
    CHECK(reached(t, 1));
  }
  // A ride taken by a host command buffer must be submitted before the next call is held.
  Stream s(dev.handle(), q.handle(), q.family(), q.shared_lock());
  s.set_holding(true);
  TestTimeline t(dev.handle());
  // (the rider records nothing; it calls what the host gives to record beside the kernel,
  // with the host's command buffer, as StreamPort::record_ride does)
  Protocol::set_rider(s, {[](vk::CommandBuffer cb, bool, bool, const tpar::RideBeside& beside) {
                 if (beside) beside(cb);
                 return std::optional<std::uint64_t>(0);
               },
               {},
               {}});
  auto first = held_call(t, 1), second = held_call(t, 2);
  Protocol::hold_ride(s, first);
  int besides = 0;
  const tpar::RideBeside count = [&](vk::CommandBuffer) { ++besides; };
  CHECK(s.ride(vk::CommandBuffer{}, false, false, count) == 0);  // taken
  CHECK(besides == 1);
  CHECK_FALSE(s.ride_pending());
  CHECK_THROWS_AS(Protocol::hold_ride(s, second), Error);
  s.submit(std::span<const vk::SubmitInfo>{});  // the host's work that took it: its signals end it
  Protocol::hold_ride(s, second);
  s.flush();
  CHECK(s.ride(vk::CommandBuffer{}, false, false, count) == 0);  // no call waits: nothing recorded, nothing beside
  CHECK(besides == 1);
  CHECK(s.ride_stats().recorded == 1);
  CHECK(s.ride_stats().fell_back == 1);
  CHECK(reached(t, 2));
  Protocol::set_rider(s, {});
}
