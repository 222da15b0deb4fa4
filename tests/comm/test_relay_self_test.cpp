// The relay's self-test (comm/detail/relay_self_test.hpp) and what a failing premise
// costs: a log line, never a hang.
//
// On lavapipe the relay runs with its queues waiting for the sum (lavapipe ends a
// shader's loops itself), so the self-test runs in that form there: every value checked
// both ways, the verdict cached. The premise it exists for (a running kernel sees the
// host's write) is made to fail through the seam detail::relay_withheld(), which
// withholds the host's writes as a device that does not see them would have it: the
// self-test's flag (the kernel never sees the write) or one word of its payload (a stale
// word in the kernel's copy), and, after a passing self-test, the flags of relay calls
// from a given call on (mid-run). The automatic choice is reached on two lavapipe
// devices adopted as two distinct GPUs of another driver (support/stand_in.hpp), whose
// kernels then wait for the host's write themselves.
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>
#include <tpar/comm/detail/relay_self_test.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/scoped_env.hpp"
#include "support/stand_in.hpp"

#include <chrono>
#include <mutex>

using namespace tpar;
using namespace tpar_test;
using namespace std::chrono_literals;

namespace {

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The seam, cleared before and after each use, with the verdicts cached so far.
struct Withheld {
  Withheld() { clear(); }
  ~Withheld() { clear(); }
  static void clear() {
    auto& w = detail::relay_withheld();
    w.self_test_flag = 0;
    w.self_test_word = 0;
    w.call_flag = 0;
    w.calls_from = 0;
    detail::relay_self_test_cache().clear();
  }
  detail::RelayWithheld& operator*() const { return detail::relay_withheld(); }
  detail::RelayWithheld* operator->() const { return &detail::relay_withheld(); }
};

struct Lines {
  std::mutex mutex;
  std::vector<std::pair<LogLevel, std::string>> lines;
  Lines() {
    set_log_sink([this](LogLevel level, std::string_view text) {
      std::lock_guard lock(mutex);
      lines.emplace_back(level, std::string(text));
    });
  }
  ~Lines() { set_log_sink(nullptr); }
  std::string find(LogLevel level, const std::string& a, const std::string& b = {}) {
    std::lock_guard lock(mutex);
    for (const auto& [l, t] : lines)
      if (l == level && has(t, a) && has(t, b)) return t;
    return {};
  }
};

// The plan a communicator on `group` runs with the relay asked for (timeout `bound`).
detail::RelaySelfTestPlan plan_for(const DeviceGroup& group, std::size_t count = 4096, std::chrono::milliseconds bound = 2s) {
  detail::RelaySelfTestPlan p;
  p.kernel_waits = ~group.relay_gate().queue_waits & ((1u << group.size()) - 1u);
  p.count = count;
  p.start_bound = bound;
  return p;
}

bool one_physical_device_opened_twice() {
  if (!use_real_gpus()) return true;
  MESSAGE("[skipped] needs one device opened twice (TPAR_TEST_DEVICES=gpus opens distinct GPUs)");
  return false;
}

}  // namespace

TEST_CASE("relay self-test: runs in the relay's own form, checks every value both ways, and is cached for the process") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  Withheld seam;
  const RelayGate gate = env.group().relay_gate();
  {  // The relay neither automatic nor asked for: nothing to test.
    Options o;
    o.timeout = test_timeout;
    auto comm = make_communicator(env.group(), o);
    CHECK(comm.relay_self_test().ran == gate.automatic);
  }
  Options o;
  o.algo = AlgoChoice::relay;
  o.timeout = test_timeout;
  const auto began = std::chrono::steady_clock::now();
  auto comm = make_communicator(env.group(), o);
  const auto created = std::chrono::steady_clock::now() - began;
  const RelaySelfTest& t = comm.relay_self_test();
  MESSAGE(t.reason);
  // For the record only (no timed check): what the self-test added to this creation.
  MESSAGE("self-test " << std::chrono::duration<double, std::milli>(t.took).count() << " ms of a creation of "
                       << std::chrono::duration<double, std::milli>(created).count() << " ms");
  CHECK(t.ran);
  CHECK(t.passed);
  CHECK(t.conclusive);
  REQUIRE(t.devices.size() == 2);
  for (std::size_t d = 0; d < 2; ++d) {
    CAPTURE(d);
    const auto& v = t.devices[d];
    MESSAGE("device " << d << ": " << v.reason << "; " << v.memory);
    CHECK(v.passed);
    CHECK_FALSE(v.cached);
    CHECK(v.kernel_waits == !((gate.queue_waits >> d) & 1u));
    CHECK(has(v.reason, "values right both ways"));
    CHECK(has(v.memory, "slots in memory type"));
    // Device-coherent memory only where the device enabled it (never on lavapipe).
    CHECK(has(v.memory, "DeviceCoherentAMD") == env.group()[d].enabled().device_coherent_memory);
  }
  // A second communicator on the same devices takes the verdicts from the cache.
  const auto began_again = std::chrono::steady_clock::now();
  auto again = make_communicator(env.group(), o);
  const auto created_again = std::chrono::steady_clock::now() - began_again;
  for (const auto& v : again.relay_self_test().devices) CHECK(v.cached);
  CHECK(again.relay_self_test().passed);
  // Tested anew (the cache cleared), the relay's pipelines now made: the test's own cost.
  detail::relay_self_test_cache().clear();
  auto anew = make_communicator(env.group(), o);
  CHECK(anew.relay_self_test().passed);
  MESSAGE("cached: a creation of " << std::chrono::duration<double, std::milli>(created_again).count()
                                   << " ms; tested anew with the pipelines made: the self-test "
                                   << std::chrono::duration<double, std::milli>(anew.relay_self_test().took).count() << " ms");
  // And the relay's calls come out right.
  Rig rig(env.group(), 3000);
  const auto x = integer_inputs(2, 3000, 7);
  rig.write(x);
  comm.allreduce(rig.spans()).wait();
  CHECK(comm.last_call().algorithm == "relay");
  for (const auto& r : rig.read()) CHECK(bit_identical(r, integer_sum(x)));
}

TEST_CASE("relay self-test: one device passes and one fails (its write withheld, or a word of it stale), and asked for, the relay is refused with the reason") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  Withheld seam;
  std::unique_ptr<detail::RelaySelfTestLeftovers> left;
  {  // Device 1's flag withheld: its kernel never sees the write.
    seam->self_test_flag = 0b10;
    const RelaySelfTest t = detail::relay_self_test(env.group(), plan_for(env.group()), left);
    MESSAGE(t.reason);
    CHECK(t.ran);
    CHECK_FALSE(t.passed);
    CHECK(t.devices[0].passed);
    CHECK_FALSE(t.devices[1].passed);
    CHECK(t.devices[1].conclusive);
    CHECK((has(t.devices[1].reason, "did not see") || has(t.devices[1].reason, "without seeing")));
    CHECK(has(t.reason, "failed on device 1 (" + env.group()[1].capabilities().name));
    CHECK(has(t.reason, "driverVersion"));
    if (left) CHECK(left->finished(10s));  // a kernel that did not see it ends by itself
    left.reset();
    // The verdicts are cached, the failure too: the same devices are not tested again.
    seam->self_test_flag = 0;
    const RelaySelfTest cached = detail::relay_self_test(env.group(), plan_for(env.group()), left);
    CHECK(cached.devices[1].cached);
    CHECK_FALSE(cached.passed);
  }
  Withheld::clear();
  {  // One word of device 0's payload stale: the copy check names it.
    seam->self_test_word = 0b01;
    const RelaySelfTest t = detail::relay_self_test(env.group(), plan_for(env.group()), left);
    MESSAGE(t.reason);
    CHECK_FALSE(t.passed);
    CHECK_FALSE(t.devices[0].passed);
    CHECK(t.devices[1].passed);
    CHECK(has(t.devices[0].reason, "value 2048 of 4096 its kernel copied from the host's write was 0x00000000"));
    CHECK(has(t.devices[0].reason, "not all visible to the kernel"));
    if (left) CHECK(left->finished(10s));
    left.reset();
  }
  Withheld::clear();
  {  // Asked for, the relay is refused at creation, with the self-test's reason.
    seam->self_test_flag = 0b10;
    Options o;
    o.algo = AlgoChoice::relay;
    o.timeout = test_timeout;
    std::string what;
    const ErrorCode code = code_of([&] {
      try {
        auto comm = make_communicator(env.group(), o);
      } catch (const Error& e) {
        what = e.what();
        throw;
      }
    });
    CHECK(code == ErrorCode::unsupported);
    CHECK(has(what, "the relay was asked for (TPAR_ALGO=relay) but the relay's self-test failed on device 1"));
  }
}

TEST_CASE("relay self-test: the automatic choice on two GPUs stood in for falls back to OneShot where one fails, every result exact, the reason logged") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok() || !one_physical_device_opened_twice()) return;
  if (!env.group()[0].enabled().shader_device_clock) {
    MESSAGE("[skipped] the stand-in's kernels wait only where the device enabled shaderDeviceClock");
    return;
  }
  // Two distinct GPUs of AMD's driver with the device clock: their kernels wait for the
  // host's write, so the gate takes the relay automatically, subject to the self-test.
  // (On a GPU opened twice the two contexts' kernels do not run at once, which the test
  // finds too: device 1's values do not come while device 0's kernel waits.)
  const bool lavapipe = env.group()[0].capabilities().shader_loops_bounded();
  DeviceGroup group = adopt_stand_in(env.group(), {.other_driver = false, .driver_id = vk::DriverId::eMesaRadv, .shader_clock = true});
  const RelayGate gate = group.relay_gate();
  REQUIRE(gate.automatic);
  REQUIRE(gate.queue_waits == 0);
  Withheld seam;
  seam->self_test_flag = 0b10;  // device 1 never sees the host's write
  Lines log;
  Options o;
  o.timeout = test_timeout;
  // One work group a call (lavapipe ends a waiting shader's loops after 65535 polls, so a
  // kernel there waits only milliseconds; one group is what it runs at once for sure).
  o.relay_max_bytes = 2048;
  auto comm = make_communicator(group, o);
  const RelaySelfTest& t = comm.relay_self_test();
  MESSAGE(t.reason);
  CHECK(t.ran);
  CHECK_FALSE(t.passed);
  CHECK_FALSE(t.devices[1].passed);
  CHECK(t.devices[1].kernel_waits);
  if (lavapipe)
    CHECK((has(t.devices[1].reason, "did not see the host's write") || has(t.devices[1].reason, "without seeing the host's write")));
  CHECK_FALSE(comm.relay_automatic());
  // The reason, at info: the device, its driver and what was not seen; then the fallback.
  const std::string line = log.find(LogLevel::info, "relay self-test: device 1 (", "failed");
  MESSAGE(line);
  CHECK(has(line, "driver " + env.group()[1].capabilities().driver_name));
  CHECK(has(line, "driverVersion 0x"));
  CHECK(has(line, "slots in memory type"));
  // (Device 0's kernel may fail too on lavapipe, where its wait ends after milliseconds
  // whatever it sees: the first device that failed is named.)
  const std::string fallback = log.find(LogLevel::info, "the relay's self-test failed on device", "calls that would take the relay take OneShot");
  MESSAGE(fallback);
  CHECK_FALSE(fallback.empty());
  // Calls as a stream makes them (the only ones the automatic choice gives the relay):
  // OneShot, exact.
  comm.port().set_before_wait([] {});
  for (std::size_t count : {std::size_t{1}, std::size_t{256}, std::size_t{512}}) {
    CAPTURE(count);
    Rig rig(group, count);
    const auto x = integer_inputs(2, count, count + 5);
    rig.write(x);
    comm.allreduce(rig.spans()).wait();
    CHECK(comm.last_call().algorithm == "oneshot");
    for (const auto& r : rig.read()) CHECK(bit_identical(r, integer_sum(x)));
  }
}

TEST_CASE("relay: a device that stops seeing the host's writes mid-run fails the call within the bound, and no buffer holds a wrong value") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  Withheld seam;
  Options o;
  o.algo = AlgoChoice::relay;
  o.timeout = 5s;
  o.depth = 2;
  Communicator<ProxyBridge> comm(env.group(), o);
  REQUIRE(comm.relay_self_test().passed);
  Rig rig(env.group(), 3000);
  for (int i = 0; i < 3; ++i) {  // relay calls 1 to 3: right
    const auto x = integer_inputs(2, 3000, 40 + i);
    rig.write(x);
    comm.allreduce(rig.spans()).wait();
    for (const auto& r : rig.read()) REQUIRE(bit_identical(r, integer_sum(x)));
  }
  // From call 4 on, device 1's kernel sees none of the host's writes of the sum's flag.
  seam->calls_from = 4;
  seam->call_flag = 0b10;
  const auto x = integer_inputs(2, 3000, 50);
  rig.write(x);
  const auto began = std::chrono::steady_clock::now();
  Ticket t = comm.allreduce(rig.spans());
  std::string what;
  const ErrorCode code = code_of([&] {
    try {
      // Longer than the timeout: where the kernel waits on (a GPU's clock), the relay's
      // thread gives up on it at the timeout, and the wait returns its reason.
      t.wait(o.timeout + 10s);
    } catch (const Error& e) {
      what = e.what();
      throw;
    }
  });
  const auto waited = std::chrono::steady_clock::now() - began;
  MESSAGE(what);
  CHECK(code == ErrorCode::timeout);
  CHECK(waited < o.timeout + 2s);  // within the bound: the wait, or the thread's check of the kernels
  CHECK((has(what, "device 1's relay kernel gave up waiting for the sum") || has(what, "device 1's relay kernel did not confirm")));
  REQUIRE(comm.failure());
  // Nothing corrupted: each buffer holds the exact sum or its own values, untouched.
  const auto sum = integer_sum(x);
  const auto got = rig.read();
  for (std::size_t d = 0; d < 2; ++d) {
    CAPTURE(d);
    CHECK((bit_identical(got[d], sum) || bit_identical(got[d], x[d])));
  }
  CHECK(bit_identical(got[1], x[1]));  // device 1 never saw the sum
  // The communicator refuses further calls at once.
  CHECK(code_of([&] { (void)comm.allreduce(rig.spans()); }) == ErrorCode::failed);
}
