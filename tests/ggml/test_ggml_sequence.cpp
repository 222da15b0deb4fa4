// The meta backend's pattern, layer after layer: every device runs its subgraph (which
// writes its partial sum of the layer's output), the hook sums the partials with no host
// wait, the next subgraph reads the sum. Decode- and prefill-sized tensors on 2 and 3
// devices, devices that compute nothing, sizes changing from call to call with declined
// calls between; every layer's sum, as the next subgraph saw it, checked against the host.
#include "layers.hpp"
#include "support/scoped_env.hpp"

#include <optional>

using namespace toy;

static_assert(tpar::ggml::BackendTraits<toy::Traits>);
// The hooks convert to ggml's function pointer types (here: with the toy's handle types).
static_assert(std::is_convertible_v<decltype(&tpar::ggml::comm_init<Traits>), comm_init_t>);
static_assert(std::is_convertible_v<decltype(&tpar::ggml::comm_free<Traits>), comm_free_t>);
static_assert(std::is_convertible_v<decltype(&tpar::ggml::comm_allreduce_tensor<Traits>), comm_allreduce_tensor_t>);

TEST_CASE("decode: 32 layers of graph, AllReduce, graph on 2 and 3 devices, ordered on the GPUs") {
  for (std::uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    Host host(n);
    if (!host.ok()) continue;
    Meta<> meta(host);
    REQUIRE(meta.ctx);
    MESSAGE("n=" << n << ": " << tpar::to_string(meta.comm().communicator().sync_kind()));
    Layers model(host, 32, {});
    run_layers(host, meta, model);
    const auto& stats = meta.comm().stats();
    CHECK(stats.reduced == 32);
    CHECK(stats.declined == 0);
    CHECK(meta.comm().communicator().last_call().algorithm == "oneshot");
    CHECK(meta.comm().communicator().last_call().wire == tpar::Wire::f32);
    for (std::size_t d = 0; d < n; ++d) {
      CHECK(host[d].handed == 32);
      CHECK(host[d].queue_locks > 0);  // tpar submitted through the backend's own lock
    }
    meta.close();
    for (std::size_t d = 0; d < n; ++d) {
      CHECK(host[d].forgets == 1);  // free told every backend to drop tpar's done point
      CHECK_FALSE(host[d].pending);
    }
  }
}

TEST_CASE("prefill: 512 x 4096 f32 per layer, the wire and algorithm chosen by size") {
  for (std::uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    Host host(n);
    if (!host.ok()) continue;
    Meta<> meta(host);
    REQUIRE(meta.ctx);
    Plan plan;
    plan.count = [](std::size_t) { return std::size_t{512 * 4096}; };
    plan.patterns = 2;
    MESSAGE("n=" << n << ": " << tpar::to_string(meta.comm().communicator().sync_kind()));
    Layers model(host, 3, plan);
    run_layers(host, meta, model);
    CHECK(meta.comm().stats().reduced == 3);
    // 8 MiB: bf16 on the wire (these integers stay exact); OneShot while 8 MiB x (n-1) <= 12 MiB.
    CHECK(meta.comm().communicator().last_call().wire == tpar::Wire::bf16);
    CHECK(meta.comm().communicator().last_call().algorithm == (n == 2 ? "oneshot" : "ring"));
  }
}

TEST_CASE("devices whose tensor lacks the COMPUTE flag count as zeros, whatever their buffer holds") {
  Host host(3);
  if (!host.ok()) return;
  Meta<> meta(host);
  REQUIRE(meta.ctx);
  Plan plan;
  plan.count = [](std::size_t) { return std::size_t{4096 * 3}; };
  // Layer by layer: one device idle, two idle, none computing, everyone computing.
  plan.contributes = [](std::size_t layer, std::size_t d) {
    switch (layer % 4) {
      case 0: return d != layer % 3;
      case 1: return d == layer % 3;
      case 2: return false;
      default: return true;
    }
  };
  Layers model(host, 8, plan);
  run_layers(host, meta, model);
  CHECK(meta.comm().stats().reduced == 8);
}

TEST_CASE("mixed: sizes change from call to call, declined calls and idle devices in between") {
  Host host(3);
  if (!host.ok()) return;
  Meta<> meta(host);
  REQUIRE(meta.ctx);
  Plan plan;
  const std::size_t sizes[] = {4096, 4096 * 7, 4096 * 256, 4096 * 2, 4096 * 64, 1024 * 3};
  plan.count = [&](std::size_t layer) { return sizes[layer % 6]; };
  plan.step = [](std::size_t layer) {
    return layer % 8 == 3 ? Step::f16 : layer % 8 == 6 ? Step::strided : Step::reduce;
  };
  plan.contributes = [](std::size_t layer, std::size_t d) { return layer % 5 != 1 || d != layer % 3; };
  Layers model(host, 16, plan);
  run_layers(host, meta, model);
  const auto& stats = meta.comm().stats();
  CHECK(stats.reduced == 12);
  CHECK(stats.declined == 4);
  for (std::size_t d = 0; d < 3; ++d) CHECK(host[d].handed == 12);
}

TEST_CASE("the sum waits for each backend's ready point and precedes its next work, even when that work runs off the queue") {
  // Each device's subgraph runs on another engine (a host thread) and finishes ~20 ms
  // after the hook was called: only the GPU's wait on the ready point keeps tpar from
  // reading the partial early, and only the backend's wait on the done point keeps its
  // next subgraph from reading the sum early.
  Host host(2);
  if (!host.ok()) return;
  Meta<> meta(host);
  REQUIRE(meta.ctx);
  const std::size_t n = host.size();
  for (std::size_t count : {std::size_t{300000}}) {
    CAPTURE(count);
    const std::size_t rounds = 4;
    std::vector<std::unique_ptr<Buffer>> arena;
    std::vector<Tensor> tensors;
    for (std::size_t d = 0; d < n; ++d) {
      arena.push_back(std::make_unique<Buffer>(host[d].device, host[d].physical, 256 + count * 4));
      arena[d]->write(256, std::vector<float>(count, std::nanf("")));  // stale: never a valid partial
      tensors.push_back(tensor(arena[d].get(), 256, static_cast<std::int64_t>(count)));
    }
    std::vector<Tensor*> ptrs;
    for (auto& t : tensors) ptrs.push_back(&t);
    std::vector<std::vector<std::vector<float>>> inputs, seen(n, std::vector<std::vector<float>>(rounds + 1));
    for (std::size_t r = 0; r <= rounds; ++r) {
      inputs.push_back(tpar_test::integer_inputs(n, count, 77 + r));
      for (std::size_t d = 0; d < n; ++d)
        host[d].compute_later(*arena[d], 256, inputs[r][d], 20ms, [&seen, d, r](std::vector<float> v) { seen[d][r] = std::move(v); });
      if (r < rounds) CHECK(meta.reduce(ptrs));
    }
    host.synchronize();
    for (std::size_t r = 1; r <= rounds; ++r) {
      const auto expect = tpar_test::integer_sum(inputs[r - 1]);
      for (std::size_t d = 0; d < n; ++d) {
        CAPTURE(r);
        CAPTURE(d);
        CHECK(tpar_test::bit_identical(seen[d][r], expect));
      }
    }
  }
}

// The same layers with the backends' compute queues as tpar::Streams (what ggml-vulkan's
// glue gives): the AllReduces ride in the backends' own submissions, ordered by the
// queues alone, one submission per device per layer.
TEST_CASE("streams: decode, ordered by the queues alone, one submission per device per layer") {
  for (std::uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    HostOptions options;
    options.streams = true;
    Host host(n, options);
    if (!host.ok()) continue;
    Meta<StreamTraits> meta(host);
    REQUIRE(meta.ctx);
    CHECK(meta.comm().streamed());
    std::vector<tpar::Queue::Counts> before;
    std::vector<int> locks_before;  // (NativeImport's self-test locked the queues at init)
    for (std::size_t d = 0; d < n; ++d) {
      before.push_back(host[d].stream->queue().counts());
      locks_before.push_back(host[d].queue_locks);
    }
    Layers model(host, 32, {});
    run_layers(host, meta, model);
    CHECK(meta.comm().stats().reduced == 32);
    for (std::size_t d = 0; d < n; ++d) {
      const auto c = host[d].stream->queue().counts();
      // A layer's graph and the AllReduce in one submission (and the last graph, and the
      // synchronize's hand-over of the last sum: at most two more).
      CHECK(c.submits - before[d].submits <= 32 + 2);
      CHECK(c.submits - before[d].submits >= 32);
      CHECK(host[d].queue_locks - locks_before[d] == 0);  // tpar submitted nothing itself
    }
  }
}

TEST_CASE("streams: TPAR_GGML_SKIP_ALLREDUCE=1 submits the host's work as held calls would, with nothing of tpar's") {
  HostOptions options;
  options.streams = true;
  Host host(2, options);
  if (!host.ok()) return;
  std::optional<Meta<StreamTraits>> meta;
  {
    tpar_test::ScopedEnv skip("TPAR_GGML_SKIP_ALLREDUCE", "1");
    meta.emplace(host);
  }
  REQUIRE(meta->ctx);
  std::vector<tpar::Queue::Counts> before;
  for (std::size_t d = 0; d < 2; ++d) before.push_back(host[d].stream->queue().counts());
  Layers model(host, 32, {});
  // The first subgraph waits for a gate opened only at the end, so the GPUs hold every
  // release: two go out at once (a GPU with at most one release unfinished may run dry),
  // then one every 16 calls (TPAR_STREAM_HOLD's default), as for held relay calls.
  Gates gates(host);
  for (std::size_t layer = 0; layer < model.size(); ++layer) {
    model.graph(layer, layer == 0 ? gates.points() : std::vector<tpar::TimelinePoint>{});
    model.reduce(*meta, layer);
  }
  CHECK(meta->comm().stats().skipped == 32);
  CHECK(meta->comm().stats().reduced == 0);
  for (std::size_t d = 0; d < 2; ++d) {
    const auto c = host[d].stream->queue().counts();
    CAPTURE(d);
    CHECK(c.submits - before[d].submits >= 2);  // not all held until a synchronize
    CHECK(c.submits - before[d].submits <= 4);  // and not one submission a call
  }
  gates.open();
  host.synchronize();
}

TEST_CASE("streams: prefill (the ring's copies on other queues on 3 devices), idle devices and declined calls") {
  for (std::uint32_t n : {2u, 3u}) {
    CAPTURE(n);
    HostOptions options;
    options.streams = true;
    {
      Host host(n, options);
      if (!host.ok()) continue;
      Meta<StreamTraits> meta(host);
      Plan plan;
      plan.count = [](std::size_t) { return std::size_t{512 * 4096}; };
      plan.patterns = 2;
      Layers model(host, 3, plan);
      run_layers(host, meta, model);
      CHECK(meta.comm().communicator().last_call().algorithm == (n == 2 ? "oneshot" : "ring"));
    }
    {
      Host host(n, options);
      Meta<StreamTraits> meta(host);
      Plan plan;
      const std::size_t sizes[] = {4096, 4096 * 7, 4096 * 256, 4096 * 2, 4096 * 64, 1024 * 3};
      plan.count = [&](std::size_t layer) { return sizes[layer % 6]; };
      plan.step = [](std::size_t layer) { return layer % 8 == 3 ? Step::f16 : layer % 8 == 6 ? Step::strided : Step::reduce; };
      plan.contributes = [n](std::size_t layer, std::size_t d) { return layer % 5 != 1 || d != layer % n; };
      Layers model(host, 16, plan);
      run_layers(host, meta, model);
      CHECK(meta.comm().stats().reduced == 12);
      CHECK(meta.comm().stats().declined == 4);
    }
  }
}
