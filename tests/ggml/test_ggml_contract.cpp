// The hook's contract with ggml's meta backend, case by case: found by name; init null
// (and logged why) for fewer than two backends, a foreign backend, devices tpar cannot
// drive, a bad TPAR_* value, a traits call that throws; every declined call enqueues
// nothing; zero elements succeed; two calls in a row stay ordered; TPAR_* reach the
// communicator; after a failure every call declines without hanging; free waits for the
// work in flight and releases everything.
#include "layers.hpp"
#include <tpar/comm/detail/relay_hub.hpp>
#include "support/scoped_env.hpp"

#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <thread>

using namespace toy;
using tpar_test::ScopedEnv;
using namespace std::chrono_literals;

namespace {

// Traits whose device() fails, as a backend that cannot describe its device would.
struct NoDeviceTraits : Traits {
  static tpar::AdoptedDevice device(backend_t) { throw std::runtime_error("the backend has no device for you"); }
};

// Traits whose view() fails for tensors flagged flag_poison.
struct PoisonTraits : Traits {
  static tpar::ggml::TensorView view(backend_t b, tensor_t* t) {
    if (t->flags & flag_poison) throw std::runtime_error("cannot describe this tensor");
    return Traits::view(b, t);
  }
};

// Traits whose options ask for the ring at every size, with bf16 on the wire.
struct RingBf16Traits : Traits {
  static tpar::Options options() {
    tpar::Options o = Traits::options();
    o.oneshot_max_bytes = 0;
    o.wire = tpar::Wire::bf16;
    return o;
  }
};

// Traits with a short bound on every wait, for the failure case.
struct ShortTimeoutTraits : Traits {
  static tpar::Options options() {
    tpar::Options o;
    o.timeout = 1s;
    o.depth = 2;  // two calls in flight: the third waits for a slot set
    return o;
  }
};

// Streams, and a bound on every wait longer than the validation layer's own stalls (10 s,
// docs/testing.md) but short of the test's: the relay's thread gives up on a kernel that
// does not confirm its sum 15 s after writing it (a kernel that gave up, at once).
struct StreamShortTimeoutTraits : StreamTraits {
  static tpar::Options options() {
    tpar::Options o;
    o.timeout = 15s;
    return o;
  }
};

// Per device a 1 MiB buffer and a tensor of `count` f32 at offset 256 in it, holding
// device d's value `base + d` (written by the host before anything is submitted).
struct Simple {
  std::vector<std::unique_ptr<Buffer>> arena;
  std::vector<Tensor> tensors;
  explicit Simple(Host& host, std::size_t count = 4096, float base = 1.0f) {
    for (std::size_t d = 0; d < host.size(); ++d) {
      arena.push_back(std::make_unique<Buffer>(host[d].device, host[d].physical, 1 << 20));
      arena[d]->write(256, std::vector<float>(count, base + float(d)));
      tensors.push_back(tensor(arena[d].get(), 256, static_cast<std::int64_t>(count)));
    }
  }
  std::vector<Tensor*> ptrs() {
    std::vector<Tensor*> p;
    for (auto& t : tensors) p.push_back(&t);
    return p;
  }
  bool all_equal(std::size_t count, float value) const {
    for (const auto& a : arena) {
      const auto v = a->read(256, count);
      if (!std::all_of(v.begin(), v.end(), [&](float x) { return x == value; })) return false;
    }
    return true;
  }
};

}  // namespace

TEST_CASE("the hooks are found by ggml's names, and only by them") {
  using namespace tpar::ggml;
  CHECK(comm_proc_address<Traits>("ggml_backend_comm_init") == reinterpret_cast<void*>(&comm_init<Traits>));
  CHECK(comm_proc_address<Traits>("ggml_backend_comm_free") == reinterpret_cast<void*>(&comm_free<Traits>));
  CHECK(comm_proc_address<Traits>("ggml_backend_comm_allreduce_tensor") == reinterpret_cast<void*>(&comm_allreduce_tensor<Traits>));
  CHECK(comm_proc_address<Traits>("ggml_backend_allreduce_tensor") == nullptr);  // the old single function
  CHECK(comm_proc_address<Traits>("ggml_backend_comm_init ") == nullptr);
  CHECK(comm_proc_address<Traits>("") == nullptr);
  CHECK(comm_proc_address<Traits>(nullptr) == nullptr);
  comm_free<Traits>(nullptr);
  CHECK_FALSE(comm_allreduce_tensor<Traits>(nullptr, nullptr));
}

TEST_CASE("init returns null, and logs why, for fewer than two backends and for any foreign backend") {
  Host host(3, {.kinds = {Backend::ours, Backend::ours, Backend::foreign}});
  if (!host.ok()) return;
  LogCapture log;
  auto h = host.handles();
  CHECK(tpar::ggml::comm_init<Traits>(h.data(), 1) == nullptr);
  CHECK(log.has(tpar::LogLevel::info, "1 backend(s): nothing to reduce across"));
  CHECK(tpar::ggml::comm_init<Traits>(h.data(), 0) == nullptr);
  CHECK(tpar::ggml::comm_init<Traits>(nullptr, 2) == nullptr);
  CHECK(tpar::ggml::comm_init<Traits>(h.data(), 3) == nullptr);
  CHECK(log.has(tpar::LogLevel::info, "backend 2 is not one this hook serves"));
  Backend* foreign_first[] = {h[2], h[0]};
  CHECK(tpar::ggml::comm_init<Traits>(foreign_first, 2) == nullptr);
  CHECK(log.has(tpar::LogLevel::info, "backend 0 is not one this hook serves"));
  Backend* with_null[] = {h[0], nullptr};
  CHECK(tpar::ggml::comm_init<Traits>(with_null, 2) == nullptr);
  CHECK(log.has(tpar::LogLevel::info, "backend 1 is not one this hook serves"));
  CHECK(host[2].handed + host[2].forgets == 0);  // the foreign backend was never touched
  // The two backends of ours, alone, get a context.
  void* ctx = tpar::ggml::comm_init<Traits>(h.data(), 2);
  CHECK(ctx != nullptr);
  tpar::ggml::comm_free<Traits>(ctx);
}

TEST_CASE("init returns null, with tpar's reason, when tpar cannot drive the devices or a TPAR_* value is wrong") {
  SUBCASE("VK_EXT_external_memory_host not enabled") {
    Host host(2, {.list_external_memory_host = false});
    if (!host.ok()) return;
    LogCapture log;
    Meta<> meta(host);
    CHECK(meta.ctx == nullptr);
    CHECK(log.has(tpar::LogLevel::warning, "VK_EXT_external_memory_host"));
  }
  SUBCASE("TPAR_ALGO=bogus") {
    Host host(2);
    if (!host.ok()) return;
    ScopedEnv env("TPAR_ALGO", "bogus");
    LogCapture log;
    Meta<> meta(host);
    CHECK(meta.ctx == nullptr);
    CHECK(log.has(tpar::LogLevel::warning, "TPAR_ALGO=bogus is not valid"));
  }
  SUBCASE("the traits throw: the exception stays inside the hook") {
    Host host(2);
    if (!host.ok()) return;
    LogCapture log;
    Meta<NoDeviceTraits> meta(host);
    CHECK(meta.ctx == nullptr);
    CHECK(log.has(tpar::LogLevel::warning, "the backend has no device for you"));
  }
}

TEST_CASE("declined calls enqueue nothing, zero elements succeed, and the context stays usable") {
  Host host(3);
  if (!host.ok()) return;
  Meta<> meta(host);
  REQUIRE(meta.ctx);
  const std::size_t count = 4096;
  Simple s(host, count);
  const std::size_t align = host[0].storage_alignment;
  std::vector<int> handed, locks;
  for (std::size_t d = 0; d < 3; ++d) {
    handed.push_back(host[d].handed);
    locks.push_back(host[d].queue_locks);
  }
  std::size_t declined = 0;
  auto declines = [&](std::vector<Tensor> t, const char* why) {
    CAPTURE(why);
    std::vector<Tensor*> p;
    for (auto& x : t) p.push_back(&x);
    CHECK_FALSE(meta.reduce(p));
    CHECK(meta.comm().last_decline().find(why) != std::string::npos);
    CHECK(meta.comm().stats().declined == ++declined);
  };
  auto copy = [&] { return s.tensors; };

  auto t = copy();
  t[1].type = Type::f16;
  declines(t, "tensor 1 is not f32");
  t = copy();
  t[0].ne[0] = 1024;
  t[0].ne[1] = 4;
  t[0].nb[1] = 2048 * 4;
  declines(t, "tensor 0 is not contiguous");
  t = copy();
  t[2].ne[0] = 4000;
  declines(t, "tensor 2 has 4000 elements, tensor 0 has 4096");
  if (align > 4) {
    t = copy();
    for (auto& x : t) x.offset += 4;
    declines(t, "is not a multiple of");
  }
  t = copy();
  t[1].buffer = nullptr;  // host memory
  declines(t, "tensor 1 is not in a VkBuffer");
  t = copy();
  t[1].buffer = s.arena[0].get();  // another device's buffer
  declines(t, "tensor 1 is not in a VkBuffer");
  t = copy();
  for (auto& x : t) x.offset = (1 << 20) - align;
  declines(t, "runs past the end of its buffer");
  {
    std::vector<Tensor*> p = s.ptrs();
    p[1] = nullptr;
    CHECK_FALSE(meta.reduce(p));
    CHECK(meta.comm().last_decline().find("tensor 1 is null") != std::string::npos);
    ++declined;
  }
  for (std::size_t d = 0; d < 3; ++d) {
    CHECK(host[d].handed == handed[d]);       // no done point handed over
    CHECK(host[d].queue_locks == locks[d]);  // nothing submitted on any queue
  }
  // Each device still holds its own value.
  for (std::size_t d = 0; d < 3; ++d) CHECK(s.arena[d]->read(256, count) == std::vector<float>(count, 1.0f + float(d)));

  // Zero elements: true, with nothing enqueued (whatever the type).
  t = copy();
  for (auto& x : t) x.ne[0] = 0;
  std::vector<Tensor*> p;
  for (auto& x : t) p.push_back(&x);
  CHECK(meta.reduce(p));
  t[0].type = Type::f16;
  CHECK(meta.reduce(p));
  CHECK(meta.comm().stats().empty == 2);
  for (std::size_t d = 0; d < 3; ++d) CHECK(host[d].queue_locks == locks[d]);

  // And the context still works.
  CHECK(meta.reduce(s.ptrs()));
  host.synchronize();
  CHECK(s.all_equal(count, 1.0f + 2.0f + 3.0f));
  CHECK(meta.comm().stats().reduced == 1);
  CHECK(meta.comm().stats().declined == declined);
  CHECK_FALSE(meta.comm().failure());
}

TEST_CASE("an exception from the traits declines that call only and never crosses the hook") {
  Host host(2);
  if (!host.ok()) return;
  Meta<PoisonTraits> meta(host);
  REQUIRE(meta.ctx);
  Simple s(host);
  s.tensors[1].flags |= flag_poison;
  CHECK_FALSE(meta.reduce(s.ptrs()));
  CHECK(meta.comm().last_decline().find("cannot describe this tensor") != std::string::npos);
  s.tensors[1].flags &= ~flag_poison;
  CHECK(meta.reduce(s.ptrs()));
  host.synchronize();
  CHECK(s.all_equal(4096, 3.0f));
}

TEST_CASE("TPAR_GGML_SKIP_ALLREDUCE=1 accepts a call and sums nothing, says so, and still declines a bad call") {
  Host host(2);
  if (!host.ok()) return;
  LogCapture log;
  std::optional<Meta<>> meta;
  {
    ScopedEnv skip("TPAR_GGML_SKIP_ALLREDUCE", "1");
    meta.emplace(host);
  }
  REQUIRE(meta->ctx);
  CHECK(log.has(tpar::LogLevel::warning, "the results are wrong"));
  Simple s(host);
  std::vector<int> handed, locks;
  for (std::size_t d = 0; d < 2; ++d) {
    handed.push_back(host[d].handed);
    locks.push_back(host[d].queue_locks);
  }
  CHECK(meta->reduce(s.ptrs()));
  CHECK(meta->reduce(s.ptrs()));
  CHECK(meta->comm().stats().skipped == 2);
  CHECK(meta->comm().stats().reduced == 0);
  CHECK(meta->comm().stats().max_elements == 0);  // the summary's largest call is of those summed
  auto bad = s.tensors;
  bad[1].type = Type::f16;
  std::vector<Tensor*> p{&bad[0], &bad[1]};
  CHECK_FALSE(meta->reduce(p));  // checked as always
  CHECK(meta->comm().stats().declined == 1);
  host.synchronize();
  for (std::size_t d = 0; d < 2; ++d) {
    CHECK(host[d].handed == handed[d]);       // no done point handed over
    CHECK(host[d].queue_locks == locks[d]);  // nothing submitted
    const auto v = s.arena[d]->read(256, 4096);
    CHECK(std::all_of(v.begin(), v.end(), [&](float x) { return x == 1.0f + float(d); }));  // each device's own values
  }
  meta.reset();
  CHECK(log.has(tpar::LogLevel::warning, "2 AllReduces skipped"));
}

TEST_CASE("the relay's calls are summed, and the context's summary says how long its threads took a call") {
  HostOptions options;
  options.streams = true;
  Host host(2, options);
  if (!host.ok()) return;
  LogCapture log;
  std::optional<Meta<StreamTraits>> meta;
  {
    ScopedEnv algo("TPAR_ALGO", "relay");
    meta.emplace(host);
  }
  REQUIRE(meta->ctx);
  Simple s(host, 4096);
  CHECK(meta->reduce(s.ptrs()));
  host.synchronize();
  CHECK(meta->comm().communicator().last_call().algorithm == "relay");
  CHECK(s.all_equal(4096, 3.0f));
  meta.reset();
  CHECK(log.has(tpar::LogLevel::info, "the relay served 1 AllReduces"));
  CHECK(log.has(tpar::LogLevel::info, "us from every device's first values to the sum in every slot"));
}

TEST_CASE("a relay whose device stops seeing the host's writes mid-run: the hook answers with the error and declines, never hangs") {
  HostOptions options;
  options.streams = true;
  Host host(2, options);
  if (!host.ok()) return;
  std::optional<Meta<StreamShortTimeoutTraits>> meta;
  {
    ScopedEnv algo("TPAR_ALGO", "relay");
    meta.emplace(host);
  }
  REQUIRE(meta->ctx);
  CHECK(meta->comm().communicator().relay_self_test().passed);
  Simple s(host, 4096);
  CHECK(meta->reduce(s.ptrs()));
  host.synchronize();
  CHECK(s.all_equal(4096, 3.0f));
  // From relay call 2 on, device 1's kernel sees none of the host's writes of the sum's
  // flag (the seam stands in for a device whose premise stopped holding).
  auto& withheld = tpar::detail::relay_withheld();
  struct Restore {
    ~Restore() {
      tpar::detail::relay_withheld().call_flag = 0;
      tpar::detail::relay_withheld().calls_from = 0;
    }
  } restore;
  withheld.calls_from = 2;
  withheld.call_flag = 0b10;
  LogCapture log;
  // Enqueued without a host wait, as ggml's calls are: its failure shows once the GPUs ran it.
  CHECK(meta->reduce(s.ptrs()));
  host.synchronize();  // bounded: the kernel gives up, or the relay's thread aborts it at its timeout
  const auto t0 = std::chrono::steady_clock::now();
  while (!meta->comm().communicator().failure() && std::chrono::steady_clock::now() - t0 < 40s) std::this_thread::sleep_for(1ms);
  REQUIRE(meta->comm().communicator().failure());
  MESSAGE(std::string(meta->comm().communicator().failure()->what()));
  // The next call: declined with the relay's error, at once.
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_FALSE(meta->reduce(s.ptrs()));
  CHECK(std::chrono::steady_clock::now() - t1 < 5s);
  REQUIRE(meta->comm().failure());
  const std::string what = meta->comm().failure()->what();
  CHECK((what.find("device 1's relay kernel gave up waiting for the sum of relay call 2") != std::string::npos ||
         what.find("device 1's relay kernel did not confirm the sum of relay call 2") != std::string::npos));
  CHECK(log.has(tpar::LogLevel::error, "ggml comm: the AllReduce failed"));
  CHECK(meta->comm().stats().declined == 1);
  meta.reset();  // free still releases everything
}

TEST_CASE("two calls in a row on one tensor, with no subgraph between, stay ordered") {
  Host host(3);
  if (!host.ok()) return;
  Meta<> meta(host);
  REQUIRE(meta.ctx);
  for (std::size_t count : {std::size_t{4096}, std::size_t{200000}}) {
    CAPTURE(count);
    Simple s(host, count);
    CHECK(meta.reduce(s.ptrs()));  // 1 + 2 + 3 = 6 everywhere
    CHECK(meta.reduce(s.ptrs()));  // 6 x 3 = 18, if the second followed the first
    CHECK(meta.reduce(s.ptrs()));  // 54
    host.synchronize();
    CHECK(s.all_equal(count, 54.0f));
  }
}

TEST_CASE("TPAR_SYNC, TPAR_ALGO and TPAR_WIRE reach the communicator behind the hook, over the traits' options") {
  Host host(2);
  if (!host.ok()) return;
  // The traits ask for the ring at every size and bf16; the environment says otherwise.
  ScopedEnv sync("TPAR_SYNC", "proxy"), algo("TPAR_ALGO", "oneshot"), wire("TPAR_WIRE", "f16");
  Meta<RingBf16Traits> meta(host);
  REQUIRE(meta.ctx);
  CHECK(meta.comm().communicator().sync_kind() == tpar::SyncKind::proxy_bridge);
  CHECK(meta.comm().communicator().options().oneshot_max_bytes == 0);  // the traits' options are used...
  Layers model(host, 4, {});
  run_layers(host, meta, model);
  CHECK(meta.comm().communicator().last_call().algorithm == "oneshot");  // ...under the environment's
  CHECK(meta.comm().communicator().last_call().wire == tpar::Wire::f16);
}

TEST_CASE("after a timeout every call is declined at once, never hangs, and free still releases everything") {
  Host host(2);
  if (!host.ok()) return;
  Gates gates(host);  // the subgraphs wait for a gate that stays shut: a ready point that does not come
  Simple s(host);
  for (std::size_t d = 0; d < 2; ++d)
    host[d].compute([&](vk::CommandBuffer cb) { fill(cb, *s.arena[d], 256, 4096 * 4, 5.0f); }, gates.points()[d]);
  LogCapture log;
  Meta<ShortTimeoutTraits> meta(host);
  REQUIRE(meta.ctx);
  // Two calls fit in flight (Options::depth): both enqueue behind the shut gate at once.
  CHECK(meta.reduce(s.ptrs()));
  CHECK(meta.reduce(s.ptrs()));
  // The third needs the first one's staging: it waits, at most the 1 s timeout, and declines.
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(meta.reduce(s.ptrs()));
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 900ms);
  CHECK(waited < 30s);
  REQUIRE(meta.comm().failure());
  CHECK(meta.comm().failure()->code() == tpar::ErrorCode::timeout);
  CHECK(log.has(tpar::LogLevel::error, "ggml comm: the AllReduce failed"));
  // From now on: declined at once.
  t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) CHECK_FALSE(meta.reduce(s.ptrs()));
  CHECK(std::chrono::steady_clock::now() - t0 < 500ms);
  CHECK(meta.comm().last_decline().find("an earlier failure") != std::string::npos);
  CHECK(meta.comm().stats().reduced == 2);
  CHECK(meta.comm().stats().declined == 11);
  // The gate opens at last; free drains what was queued and releases it all (the layer
  // would report any object left behind when the devices are destroyed).
  gates.open();
  meta.close();
  host.synchronize();
  for (std::size_t d = 0; d < 2; ++d) CHECK(host[d].forgets == 1);
}

TEST_CASE("free waits for the work in flight, then releases it and tells the backends") {
  Host host(3);
  if (!host.ok()) return;
  Gates gates(host);
  Simple s(host);
  for (std::size_t d = 0; d < 3; ++d)
    host[d].compute([&](vk::CommandBuffer cb) { fill(cb, *s.arena[d], 256, 4096 * 4, float(d + 1)); }, gates.points()[d]);
  Meta<> meta(host);
  REQUIRE(meta.ctx);
  CHECK(meta.reduce(s.ptrs()));
  std::atomic<bool> opened{false};
  std::thread opener([&] {
    std::this_thread::sleep_for(300ms);
    opened = true;
    for (std::size_t d = 0; d < 3; ++d) {
      vk::SemaphoreSignalInfo si(gates.semaphores[d], 1);
      (void)host[d].device.signalSemaphore(&si);
    }
  });
  meta.close();  // returns only once the sum behind the gate is done
  CHECK(opened);
  opener.join();
  for (std::size_t d = 0; d < 3; ++d) {
    CHECK(host[d].forgets == 1);
    CHECK_FALSE(host[d].pending);
  }
  // The result was complete when free returned: read it without waiting on anything of tpar's.
  host.synchronize();
  CHECK(s.all_equal(4096, 6.0f));
}
