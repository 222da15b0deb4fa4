// The policies are real: every documented Communicator<Sync, Algo, Staging> compiles here
// and does what its type says (the sync it names, the algorithm it names whatever size
// the call, exact sums); a runtime option that contradicts the type is an error naming
// both; and each concept (CrossDeviceSync, Algorithm, StagingPolicy) rejects a malformed
// type where it is named (the static_asserts below; tests/CMakeLists.txt, test
// policies/bad_staging_error, compiles one and counts its errors).
#include <doctest/doctest.h>
#include <tpar/comm/communicator.hpp>
#include <tpar/sync/native_import.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/vk_env.hpp"

#include <string>

using namespace tpar;
using namespace tpar_test;

namespace {

// ---- Concepts at the boundary ---------------------------------------------------------

// A Generation with only the constructor (the type that used to satisfy StagingPolicy
// and then failed with seven errors inside the communicator).
struct OnlyConstructed {
  struct Generation {
    Generation(const DeviceGroup&, std::uint64_t, std::uint32_t, std::uint64_t) {}
  };
  static constexpr std::string_view name = "OnlyConstructed";
  static void check_support(const DeviceGroup&) {}
};
// Everything but the support check.
struct NoSupportCheck {
  using Generation = HostImport::Generation;
  static constexpr std::string_view name = "NoSupportCheck";
};
// No Generation at all.
struct NoGeneration {
  static constexpr std::string_view name = "NoGeneration";
  static void check_support(const DeviceGroup&) {}
};
// A Generation whose buffers are not buffers.
struct WrongBufferType {
  struct Generation : HostImport::Generation {
    using HostImport::Generation::Generation;
    int scratch(std::size_t) const { return 0; }
  };
  static constexpr std::string_view name = "WrongBufferType";
  static void check_support(const DeviceGroup&) {}
};
// A staging policy of one's own, made of HostImport's parts: accepted.
struct OwnStaging {
  using Generation = HostImport::Generation;
  static constexpr std::string_view name = "OwnStaging";
  static void check_support(const DeviceGroup& g) { HostImport::check_support(g); }
};

static_assert(StagingPolicy<HostImport>);
static_assert(StagingPolicy<OwnStaging>);
static_assert(!StagingPolicy<OnlyConstructed>);
static_assert(!StagingPolicy<NoSupportCheck>);
static_assert(!StagingPolicy<NoGeneration>);
static_assert(!StagingPolicy<WrongBufferType>);
static_assert(!StagingPolicy<int>);

struct NoBuild {
  static constexpr std::string_view name = "no build";
};
struct BuildsSomethingElse {
  static constexpr std::string_view name = "something else";
  static int build(const ScheduleRequest&) { return 0; }
};
// An algorithm of one's own: ChunkedRing's schedule under another name, with no
// Options::algo value naming it.
struct OwnRing {
  static constexpr std::string_view name = "own ring";
  static Schedule build(const ScheduleRequest& rq) { return ChunkedRing::build(rq); }
};

static_assert(Algorithm<BySize> && Algorithm<ChunkedRing> && Algorithm<OneShot> && Algorithm<Relay> && Algorithm<OwnRing>);
static_assert(!Algorithm<NoBuild>);
static_assert(!Algorithm<BuildsSomethingElse>);
static_assert(detail::reads_algo_option<BySize>() && !detail::reads_algo_option<ChunkedRing>() &&
              !detail::reads_algo_option<OwnRing>());

struct NoKind {
  NoKind(const DeviceGroup&, std::span<const vk::Semaphore>, std::chrono::nanoseconds, FailureHandler) {}
  vk::Semaphore wait_semaphore(std::uint32_t, std::uint32_t) const { return {}; }
  void expect(std::uint32_t, std::uint32_t, std::uint64_t) {}
  void release_waiters() {}
};
static_assert(CrossDeviceSync<ProxyBridge> && CrossDeviceSync<NativeImport>);
static_assert(!CrossDeviceSync<NoKind>);

// ---- What each combination does ------------------------------------------------------

Options quick() {
  Options o;
  o.timeout = test_timeout;
  // BySize would take the ring from 2 values on: every fixed algorithm below is asked to
  // run calls it would not have been given by size.
  o.oneshot_max_bytes = 4;
  return o;
}

// One call of `count` values through Communicator<Sync, Algo>: the algorithm its type
// names ran, on the sync its type names, and every device holds the exact sum.
template <class Sync, class Algo, class Staging = HostImport>
void check_runs(VkEnv& env, std::size_t count, std::string_view expect, Options o = quick()) {
  CAPTURE(std::string(to_string(Sync::kind)));
  CAPTURE(std::string(detail::algorithm_type_name<Algo>()));
  CAPTURE(count);
  Communicator<Sync, Algo, Staging> comm(env.group(), o);
  CHECK(comm.sync_kind() == Sync::kind);
  if constexpr (requires { Algo::choice; })
    if (Algo::choice != AlgoChoice::automatic) CHECK(comm.options().algo == Algo::choice);  // the options name the type
  Rig rig(env.group(), count);
  const auto x = integer_inputs(env.group().size(), count, 40 + count);
  rig.write(x);
  comm.allreduce(rig.spans()).wait();
  CHECK(comm.last_call().algorithm == expect);
  for (const auto& r : rig.read()) CHECK(bit_identical(r, integer_sum(x)));
}

template <class Sync>
void check_every_algorithm(VkEnv& env) {
  check_runs<Sync, BySize>(env, 4096, "ring");  // by size, with the bound above
  Options asked = quick();
  asked.algo = AlgoChoice::oneshot;
  check_runs<Sync, BySize>(env, 4096, "oneshot", asked);  // BySize reads Options::algo
  check_runs<Sync, ChunkedRing>(env, 1000, "ring");       // small: BySize's default would take OneShot
  check_runs<Sync, OneShot>(env, 40000, "oneshot");       // over the bound: BySize would take the ring
  Options relay = quick();
  relay.relay_max_bytes = 64 << 10;
  check_runs<Sync, Relay>(env, 3000, "relay", relay);  // never automatic on virtual devices of one GPU
  check_runs<Sync, OwnRing>(env, 1000, "ring");        // an algorithm of one's own (its schedules are the ring's)
  check_runs<Sync, BySize, OwnStaging>(env, 1000, "ring");  // a staging policy of one's own
}

}  // namespace

TEST_CASE("every algorithm policy with ProxyBridge runs what its type names, exactly") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  check_every_algorithm<ProxyBridge>(env);
}

TEST_CASE("every algorithm policy with NativeImport runs what its type names, exactly") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  const SyncGate gate = env.group().sync_gate();
  if (!gate.native_possible) {
    // The docs' example, Communicator<NativeImport, ChunkedRing, HostImport>, is compiled
    // here either way; where NativeImport cannot run it refuses to be made, saying why.
    try {
      Communicator<NativeImport, ChunkedRing, HostImport> comm(env.group(), quick());
      FAIL("NativeImport was made where the gate says it is not possible: " << gate.blocker);
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK(std::string(e.what()).find("NativeImport") != std::string::npos);
    }
    MESSAGE("[skipped] NativeImport needs exportable timeline semaphores: " << gate.blocker);
    return;
  }
  check_every_algorithm<NativeImport>(env);
}

TEST_CASE("an option that contradicts the communicator's type is an error naming both, with nothing built") {
  VkEnv env(2);
  if (!env.ok()) return;
  auto message = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::invalid_argument);
      return e.what();
    }
    FAIL("no error");
    return {};
  };
  Options o = quick();
  o.algo = AlgoChoice::oneshot;
  std::string m = message([&] { Communicator<ProxyBridge, ChunkedRing> c(env.group(), o); });
  MESSAGE(m);
  CHECK(m.find("Options::algo = oneshot") != std::string::npos);
  CHECK(m.find("ChunkedRing") != std::string::npos);
  o.algo = AlgoChoice::relay;
  m = message([&] { Communicator<ProxyBridge, OneShot> c(env.group(), o); });
  CHECK(m.find("Options::algo = relay") != std::string::npos);
  CHECK(m.find("OneShot") != std::string::npos);
  o.algo = AlgoChoice::ring;
  m = message([&] { Communicator<ProxyBridge, OwnRing> c(env.group(), o); });  // no option value names it
  CHECK(m.find("own ring") != std::string::npos);
  o = quick();
  o.sync = SyncChoice::native;
  m = message([&] { Communicator<ProxyBridge> c(env.group(), o); });
  MESSAGE(m);
  CHECK(m.find("Options::sync = native") != std::string::npos);
  CHECK(m.find("ProxyBridge") != std::string::npos);
  o.sync = SyncChoice::proxy;
  m = message([&] { Communicator<NativeImport, Relay> c(env.group(), o); });  // refused before NativeImport is tried
  CHECK(m.find("Options::sync = proxy") != std::string::npos);
  CHECK(m.find("NativeImport") != std::string::npos);
  // What agrees: auto, or the type's own value.
  o = quick();
  o.sync = SyncChoice::proxy;
  o.algo = AlgoChoice::ring;
  Communicator<ProxyBridge, ChunkedRing> agreed(env.group(), o);
  CHECK(agreed.options().algo == AlgoChoice::ring);
}
