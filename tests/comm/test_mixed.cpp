// A group of two drivers, stood in for on one driver.
//
// A GPU beside llvmpipe in one group has run on a GPU machine (docs/devices/,
// docs/gpu-test-runs.md); CI has lavapipe alone, so these cases keep that path from
// rotting between such runs. What differs in a group of two drivers is what tpar decides
// from the devices' capabilities: their driverUUIDs differ, so no timeline semaphore can
// be shared (ProxyBridge carries the order); the relay, which needs none, runs when asked
// for, not by itself.
//
// 1. The decisions, from capabilities: lavapipe's own, with device 1 given another
//    driverUUID and deviceUUID, and both marked able to share OPAQUE_FD timelines, as an
//    NVIDIA GPU can: only the drivers stand in NativeImport's way.
// 2. The path, end to end: two lavapipe devices adopted into a group while a wrapper of
//    vkGetPhysicalDeviceProperties2 gives the second another driverUUID and deviceUUID
//    (tpar reads a device's capabilities once, as adopt wraps it). Every algorithm the
//    group chooses by itself and every wire, then the relay asked for: sums bit-identical
//    on both devices.
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>

#include "support/numerics.hpp"
#include "support/rig.hpp"
#include "support/tracked_bridge.hpp"

#include <algorithm>
#include <vector>

using namespace tpar;
using namespace tpar_test;

namespace {

// Another driver's and device's UUIDs for device 1 (any value unlike lavapipe's).
void make_other(Uuid& driver, Uuid& device) {
  for (std::size_t i = 0; i < driver.size(); ++i) {
    driver[i] = static_cast<std::uint8_t>(driver[i] ^ 0x5a);
    device[i] = static_cast<std::uint8_t>(device[i] ^ 0xa5);
  }
}

PFN_vkGetPhysicalDeviceProperties2 driver_properties = nullptr;
int properties_calls = 0;  // while the wrapper is installed

// The first query (device 0) answers as the driver does; later ones (device 1) with the
// other UUIDs.
VKAPI_ATTR void VKAPI_CALL other_driver_properties(VkPhysicalDevice physical, VkPhysicalDeviceProperties2* out) {
  driver_properties(physical, out);
  if (properties_calls++ == 0) return;
  for (auto* next = static_cast<VkBaseOutStructure*>(out->pNext); next; next = next->pNext)
    if (next->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES) {
      auto* id = reinterpret_cast<VkPhysicalDeviceIDProperties*>(next);
      Uuid driver, device;
      std::copy(std::begin(id->driverUUID), std::end(id->driverUUID), driver.begin());
      std::copy(std::begin(id->deviceUUID), std::end(id->deviceUUID), device.begin());
      make_other(driver, device);
      std::copy(driver.begin(), driver.end(), std::begin(id->driverUUID));
      std::copy(device.begin(), device.end(), std::begin(id->deviceUUID));
    }
}

}  // namespace

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
  make_other(caps[1].driver_uuid, caps[1].device_uuid);
  const SyncGate gate = sync_gate(caps, enabled);
  CHECK_FALSE(gate.native_possible);
  CHECK(gate.choice == SyncKind::proxy_bridge);
  MESSAGE(gate.reason);
  CHECK(gate.reason.find("device 1 (" + caps[1].name + ") has another driver than device 0 (driverUUID differs)") !=
        std::string::npos);
  CHECK(gate.reason.find("ProxyBridge") != std::string::npos);
  // The relay needs no shared semaphore: two drivers may run it, when asked for.
  const bool clock[] = {true, true};
  const RelayGate relay = relay_gate(caps, clock);
  CHECK(relay.possible);
  CHECK_FALSE(relay.automatic);
  // One driver, two physical devices (deviceUUIDs differ): offered, when asked for.
  caps[1].driver_uuid = caps[0].driver_uuid;
  const RelayGate one_driver = relay_gate(caps, clock);
  CHECK(one_driver.possible);
  CHECK_FALSE(one_driver.automatic);
  // A device whose driver ends a shader's loops itself (lavapipe) waits in its queue;
  // one with the device clock enabled waits in its kernel (the group runs on GPUs too).
  std::uint32_t queue_waits = 0;
  for (std::uint32_t d = 0; d < 2; ++d) queue_waits |= (caps[d].shader_loops_bounded() ? 1u : 0u) << d;
  CHECK(one_driver.queue_waits == queue_waits);
  CHECK(one_driver.reason.find("one physical device") == std::string::npos);
}

TEST_CASE("two drivers in one group, end to end: every algorithm and wire, sums bit-identical on both devices") {
  VkEnv env(2, {.sync_validation = false});
  if (!env.ok()) return;
  if (use_real_gpus()) {
    MESSAGE("[skipped] the stand-in needs one device opened twice; a real group of two drivers runs the other tests");
    return;
  }
  std::vector<AdoptedDevice> adopted(2);
  for (std::uint32_t i = 0; i < 2; ++i) {
    auto& d = env.group()[i];
    auto& a = adopted[i];
    a.instance = d.instance();
    a.physical = d.physical();
    a.device = d.handle();
    a.compute_queue = d.compute_queue().handle();
    a.compute_family = d.compute_queue().family();
    a.enabled_extensions = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
    a.update_after_bind_enabled = d.enabled().update_after_bind;
    a.shader_float16_enabled = d.enabled().shader_float16;
    a.storage_16bit_enabled = d.enabled().storage_16bit;
  }
  auto& dispatcher = VULKAN_HPP_DEFAULT_DISPATCHER;
  driver_properties = dispatcher.vkGetPhysicalDeviceProperties2;
  REQUIRE(static_cast<bool>(driver_properties));
  properties_calls = 0;
  dispatcher.vkGetPhysicalDeviceProperties2 = other_driver_properties;
  std::optional<DeviceGroup> group;
  try {
    group = DeviceGroup::adopt(adopted);
  } catch (...) {
    dispatcher.vkGetPhysicalDeviceProperties2 = driver_properties;
    throw;
  }
  dispatcher.vkGetPhysicalDeviceProperties2 = driver_properties;

  const auto caps = group->capabilities();
  REQUIRE(caps[0].driver_uuid != caps[1].driver_uuid);  // the stand-in took
  REQUIRE(caps[0].device_uuid != caps[1].device_uuid);
  CHECK(group->sync_gate().choice == SyncKind::proxy_bridge);
  const RelayGate relay = group->relay_gate();
  MESSAGE("relay: " << relay.reason);
  CHECK(relay.possible);  // when asked for (below)
  CHECK_FALSE(relay.automatic);

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
