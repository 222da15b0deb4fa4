// A group of two drivers, stood in for on one driver.
//
// A GPU beside llvmpipe in one group has run on a GPU machine (docs/devices/,
// docs/gpu-test-runs.md); CI has lavapipe alone, so these cases keep that path from
// rotting between such runs. What differs in a group of two drivers is what tpar decides
// from the devices' capabilities: their driverUUIDs differ, so no timeline semaphore can
// be shared (ProxyBridge carries the order); the relay, which needs none, is decided as
// for any group, by where each device waits for the sum: two GPUs whose kernels wait (a
// Radeon beside a GeForce) take it automatically once its self-test passed on both
// (docs/relay.md, "The self-test"); lavapipe's queues wait, so a group with it takes the
// relay only when asked for.
//
// 1. The decisions, from capabilities: the devices' own, with device 1 given another
//    driverUUID and deviceUUID, both marked able to share OPAQUE_FD timelines, as an
//    NVIDIA GPU can (only the drivers stand in NativeImport's way), and the driverIDs set
//    for each case, so that the verdicts are the same on lavapipe and on any GPU.
// 2. The path, end to end: two lavapipe devices adopted into a group while a wrapper of
//    vkGetPhysicalDeviceProperties2 gives the second another driverUUID and deviceUUID
//    (support/stand_in.hpp). Every algorithm the group chooses by itself and every wire,
//    then the relay asked for: sums bit-identical on both devices.
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/stand_in.hpp"
#include "support/tracked_bridge.hpp"

#include <algorithm>
#include <vector>

using namespace tpar;
using namespace tpar_test;

TEST_CASE("two drivers in one group: ProxyBridge, because their semaphores cannot be shared") {
  VkEnv env(2);
  if (!env.ok()) return;
  if (use_real_gpus()) {
    MESSAGE("[skipped] the stand-in needs one device opened twice; a real group of two drivers runs the other tests");
    return;
  }
  auto caps = env.group().capabilities();
  for (auto& c : caps) {  // as an NVIDIA GPU would: export and import OPAQUE_FD timelines
    c.external_semaphore_fd = true;
    c.timeline_fd_exportable = true;
    c.timeline_fd_importable = true;
  }
  const bool enabled[] = {true, true};
  // One driver: NativeImport may be tried.
  CHECK(sync_gate(caps, enabled).native_possible);
  // Two drivers: it may not, and the reason says why.
  stand_in_detail::make_other(caps[1].driver_uuid, caps[1].device_uuid, true);
  const SyncGate gate = sync_gate(caps, enabled);
  CHECK_FALSE(gate.native_possible);
  CHECK(gate.choice == SyncKind::proxy_bridge);
  MESSAGE(gate.reason);
  CHECK(gate.reason.find("device 1 (" + caps[1].name + ") has another driver than device 0 (driverUUID differs)") !=
        std::string::npos);
  CHECK(gate.reason.find("ProxyBridge") != std::string::npos);
  // The relay needs no shared semaphore: where each device waits for the sum decides.
  const bool clock[] = {true, true};
  const auto with_drivers = [&](vk::DriverId d0, vk::DriverId d1) {
    auto c = caps;
    c[0].driver_id = d0;
    c[1].driver_id = d1;
    return c;
  };
  const auto llvmpipe = vk::DriverId::eMesaLlvmpipe, radv = vk::DriverId::eMesaRadv, nvidia = vk::DriverId::eNvidiaProprietary;
  for (bool one_driver : {false, true}) {
    CAPTURE(one_driver);
    if (one_driver) caps[1].driver_uuid = caps[0].driver_uuid;  // one driver, two physical devices (deviceUUIDs differ)
    {  // two GPUs whose kernels wait (a Radeon and a GeForce; or two of one driver): automatic, once the self-test passes
      const RelayGate relay = relay_gate(with_drivers(radv, nvidia), clock);
      CHECK(relay.possible);
      CHECK(relay.automatic);
      CHECK(relay.queue_waits == 0);
      CHECK(relay.reason.find("once its self-test passes on every device") != std::string::npos);
    }
    {  // a GPU beside lavapipe, whose queue waits (its driver ends a shader's loops): when asked for
      const RelayGate relay = relay_gate(with_drivers(nvidia, llvmpipe), clock);
      CHECK(relay.possible);
      CHECK_FALSE(relay.automatic);
      CHECK(relay.queue_waits == 0b10);
      CHECK(relay.reason.find("one physical device") == std::string::npos);
    }
    {  // lavapipe twice (this machine's case): both queues wait
      const RelayGate relay = relay_gate(with_drivers(llvmpipe, llvmpipe), clock);
      CHECK(relay.possible);
      CHECK_FALSE(relay.automatic);
      CHECK(relay.queue_waits == 0b11);
    }
  }
}

TEST_CASE("two drivers in one group, end to end: every algorithm and wire, sums bit-identical on both devices") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  if (use_real_gpus()) {
    MESSAGE("[skipped] the stand-in needs one device opened twice; a real group of two drivers runs the other tests");
    return;
  }
  std::optional<DeviceGroup> group = adopt_stand_in(env.group(), {.other_driver = true});
  const auto caps = group->capabilities();
  REQUIRE(caps[0].driver_uuid != caps[1].driver_uuid);  // the stand-in took
  REQUIRE(caps[0].device_uuid != caps[1].device_uuid);
  CHECK(group->sync_gate().choice == SyncKind::proxy_bridge);
  const RelayGate relay = group->relay_gate();
  MESSAGE("relay: " << relay.reason);
  CHECK(relay.possible);  // when asked for (below)
  CHECK_FALSE(relay.automatic);  // adopted without shaderDeviceClock: their queues wait, on lavapipe and on a GPU

  for (AlgoChoice algo : {AlgoChoice::automatic, AlgoChoice::oneshot, AlgoChoice::ring}) {
    for (Wire wire : all_wires) {
      Options o;
      o.algo = algo;
      o.wire = wire;
      o.timeout = test_timeout;
      auto comm = make_communicator(*group, o);
      CHECK(comm.sync_kind() == SyncKind::proxy_bridge);
      for (std::size_t count : {std::size_t{1}, std::size_t{4096}, (std::size_t{1} << 20) + 13}) {
        CAPTURE(to_string(algo));
        CAPTURE(to_string(wire));
        CAPTURE(count);
        Rig rig(*group, count);
        const auto xi = integer_inputs(2, count, 3 * count + 1);
        rig.write(xi);
        settled_wait(comm.allreduce(rig.spans()));
        for (const auto& r : rig.read()) REQUIRE(bit_identical(r, integer_sum(xi)));
        const auto xr = random_inputs(2, count, 5 * count + 2);
        rig.write(xr);
        settled_wait(comm.allreduce(rig.spans()));
        const auto got = rig.read();
        REQUIRE(bit_identical(got[0], got[1]));
        const auto b = check_bound(wire, xr, got[0]);
        CHECK_MESSAGE(b.violations == 0, b.first);
      }
    }
  }

  // Asked for, the relay serves the pair (each device's queue waits for the sum on
  // lavapipe): exact and identical on both.
  Options o;
  o.algo = AlgoChoice::relay;
  o.timeout = test_timeout;
  auto comm = make_communicator(*group, o);
  for (std::size_t count : {std::size_t{1}, std::size_t{4096}}) {
    CAPTURE(count);
    Rig rig(*group, count);
    const auto xi = integer_inputs(2, count, 7 * count + 3);
    rig.write(xi);
    auto ticket = comm.allreduce(rig.spans());
    CHECK(comm.last_call().algorithm == "relay");
    settled_wait(ticket);
    for (const auto& r : rig.read()) REQUIRE(bit_identical(r, integer_sum(xi)));
  }
}
