// DeviceGroup on lavapipe: virtual groups of 1-8 devices, adoption of devices the test
// created (none destroyed by tpar), capabilities and the sync gate, and every error.
#include <doctest/doctest.h>
#include <tpar/comm/any_communicator.hpp>
#include <tpar/vk/device_group.hpp>

#include "support/host_app.hpp"
#include "support/numerics.hpp"
#include "support/scoped_env.hpp"
#include "support/vk_env.hpp"

#include <atomic>
#include <cstdlib>

using namespace tpar;
using namespace tpar_test;

namespace {

}  // namespace

TEST_CASE("virtual groups of 1, 2, 4 and 8 devices open one physical device that many times") {
  for (std::uint32_t n : {1u, 2u, 4u, 8u}) {
    CAPTURE(n);
    VkEnv env(n);
    if (!env.ok()) continue;
    auto& g = env.group();
    REQUIRE(g.size() == n);
    for (std::uint32_t i = 0; i < n; ++i) {
      auto& d = g[i];
      CHECK(d.index() == i);
      CHECK(d.owned());
      CHECK(d.handle());
      if (!use_real_gpus()) {
        CHECK(d.is_virtual());
        CHECK(d.physical() == g[0].physical());
        if (i) CHECK(d.handle() != g[0].handle());  // K logical devices, not one shared
      }
      CHECK(d.compute_queue().handle());
      CHECK(d.transfer_queue().handle());
      const auto& c = d.capabilities();
      CHECK(c.timeline_semaphores);
      CHECK(c.api_version >= VK_API_VERSION_1_2);
      CHECK(c.min_storage_offset_alignment > 0);
    }
    if (n > 1) {
      const auto gate = g.sync_gate();
      CHECK(!gate.reason.empty());
      MESSAGE("gate for " << n << ": " << to_string(gate.choice) << ": " << gate.reason);
    }
  }
}

TEST_CASE("lavapipe's capabilities: host import yes, exportable timelines no, so the gate says ProxyBridge and why") {
  if (use_real_gpus()) return;
  VkEnv env(3);
  auto& d = env.group()[0];
  const auto& c = d.capabilities();
  if (c.driver_id != vk::DriverId::eMesaLlvmpipe) {
    MESSAGE("[skipped] the first device is " << c.name << ", not lavapipe");
    return;
  }
  CHECK(c.driver_name.find("llvmpipe") != std::string::npos);
  CHECK(c.external_memory_host);
  CHECK(d.enabled().external_memory_host);
  CHECK(c.host_import_alignment == 4096);
  CHECK(c.shader_float16);
  CHECK_FALSE(c.native_import_capable());
  CHECK_FALSE(c.dedicated_transfer_queue());
  CHECK(&d.transfer_queue() == &d.compute_queue());
  CHECK(to_string(c.device_uuid).size() == 36);
  const auto gate = env.group().sync_gate();
  CHECK(gate.choice == SyncKind::proxy_bridge);
  CHECK_FALSE(gate.native_possible);
  CHECK(gate.reason.find("ProxyBridge") != std::string::npos);
  CHECK(gate.reason.find("device 0") != std::string::npos);
  // The cause alone, for errors where NativeImport was demanded: no talk of a fallback.
  CHECK(gate.blocker.find("device 0") != std::string::npos);
  CHECK(gate.blocker.find("VK_KHR_external_semaphore_fd") != std::string::npos);
  CHECK(gate.blocker.find("ProxyBridge") == std::string::npos);
}

TEST_CASE("the sync gate where the platform shares no semaphores (Windows): ProxyBridge, the platform the reason") {
  std::vector<DeviceCapabilities> caps(2);
  for (auto& c : caps) {  // as an NVIDIA GPU on Linux: export and import OPAQUE_FD timelines
    c.name = "GPU";
    c.timeline_semaphores = c.external_semaphore_fd = c.timeline_fd_exportable = c.timeline_fd_importable = true;
  }
  const bool enabled[] = {true, true};
  CHECK(sync_gate(caps, enabled, "").native_possible);
  // This build's own platform: Linux shares them, Windows does not.
  CHECK(sync_gate(caps, enabled).native_possible == !detail::os::windows);
  const std::string_view windows = detail::os::windows_semaphore_blocker;
  const SyncGate gate = sync_gate(caps, enabled, windows);
  CHECK_FALSE(gate.native_possible);
  CHECK(gate.choice == SyncKind::proxy_bridge);
  CHECK(gate.blocker == windows);
  CHECK(gate.reason == std::string(windows) + ", so ProxyBridge forwards progress on a host thread");
  CHECK(gate.blocker.find("OPAQUE_WIN32") != std::string::npos);
  // The platform's reason comes before any device's.
  caps[1].external_semaphore_fd = false;
  CHECK(sync_gate(caps, enabled, windows).blocker == windows);
  CHECK(sync_gate(caps, enabled, "").blocker.find("device 1 (GPU) does not support VK_KHR_external_semaphore_fd") !=
        std::string::npos);
  // One device needs no cross-device sync on any platform.
  CHECK(sync_gate(std::span(caps).first(1), std::span(enabled).first(1), windows).reason ==
        "a single device needs no cross-device sync");
}

TEST_CASE("selection by index, name and UUID") {
  if (use_real_gpus()) return;
  ValidationLog log;
  if (const auto first = DeviceGroup::create(test_options(log, 1)); first[0].capabilities().driver_id != vk::DriverId::eMesaLlvmpipe) {
    MESSAGE("[skipped] the selection is checked against lavapipe; the first device is " << first[0].capabilities().name);
    return;
  }
  GroupOptions o = test_options(log, 1);
  o.select = {};
  o.select.with_name("LLVMPIPE");  // case-insensitive substring
  auto by_name = DeviceGroup::create(o);
  REQUIRE(by_name.size() == 1);
  const Uuid uuid = by_name[0].capabilities().device_uuid;
  o.select = {};
  o.select.with_uuid(uuid);
  auto by_uuid = DeviceGroup::create(o);
  CHECK(by_uuid[0].capabilities().device_uuid == uuid);
  o.select = {};
  o.select.with_indices({by_name[0].physical_index()}).virtual_devices(2);
  auto two = DeviceGroup::create(o);
  CHECK(two.size() == 2);
  // No GPU here: the default selection falls back to the CPU device.
  auto fallback = DeviceGroup::create(test_options(log, 1));
  CHECK(fallback[0].capabilities().type == vk::PhysicalDeviceType::eCpu);
  CHECK(log.errors.empty());
}

TEST_CASE("errors: no loader, no driver, no device, no match, missing feature, bad virtual count") {
  GroupOptions bare;
  bare.loader = "/nonexistent/libvulkan.so.1";
  CHECK(code_of([&] { DeviceGroup::create(bare); }) == ErrorCode::no_loader);
  if (detail::dynamic_dispatch) {  // the library named, and what to install
    try {
      DeviceGroup::create(bare);
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK(what.find("cannot load the Vulkan loader (/nonexistent/libvulkan.so.1)") != std::string::npos);
      CHECK(what.find(detail::os::loader_hint) != std::string::npos);
    }
  }

  {
    ScopedEnv a("VK_DRIVER_FILES", "/nonexistent/icd.json"), b("VK_ICD_FILENAMES", "/nonexistent/icd.json");
    CHECK(code_of([] { DeviceGroup::create(); }) == ErrorCode::no_driver);
  }
  if (!use_real_gpus()) {
    // A driver that finds none of its hardware (RADV on a machine without an AMD GPU).
    const char* radv = "/usr/share/vulkan/icd.d/radeon_icd.x86_64.json";
    if (std::FILE* f = std::fopen(radv, "r")) {
      std::fclose(f);
      ScopedEnv a("VK_DRIVER_FILES", radv), b("VK_ICD_FILENAMES", radv);
      CHECK(code_of([] { DeviceGroup::create(); }) == ErrorCode::no_devices);
    } else {
      MESSAGE("no-device case not run: " << radv << " is missing");
    }
  }

  ValidationLog log;
  GroupOptions o = test_options(log, 1);
  o.select = {};
  o.select.with_name("no-such-gpu");
  CHECK(code_of([&] { DeviceGroup::create(o); }) == ErrorCode::no_match);
  o.select = {};
  o.select.with_indices({99});
  CHECK(code_of([&] { DeviceGroup::create(o); }) == ErrorCode::no_match);
  o.select = {};
  o.select.with_uuid(Uuid{});
  CHECK(code_of([&] { DeviceGroup::create(o); }) == ErrorCode::no_match);
  o.select = {};
  o.select.first(64);
  CHECK(code_of([&] { DeviceGroup::create(o); }) == ErrorCode::no_match);

  o = test_options(log, 1);
  o.required_extensions = {"VK_TPAR_not_an_extension"};
  try {
    DeviceGroup::create(o);
    FAIL("a missing extension was not reported");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::missing_feature);
    CHECK(std::string(e.what()).find("VK_TPAR_not_an_extension") != std::string::npos);
  }

  for (std::uint32_t k : {0u, 33u}) {
    o = test_options(log, 1);
    o.select.virtual_devices(k);
    CHECK(code_of([&] { DeviceGroup::create(o); }) == ErrorCode::invalid_argument);
  }
  CHECK(log.errors.empty());
}


TEST_CASE("adopt: tpar works on devices the host owns, locks through the host's hooks, and destroys none of them") {
  if (use_real_gpus()) return;
  HostApp host(2);
  std::atomic<int> locks{0}, unlocks{0};
  std::mutex host_queue_mutex[2];
  std::vector<AdoptedDevice> adopted(2);
  for (int i = 0; i < 2; ++i) {
    auto& a = adopted[i];
    a.instance = host.instance;
    a.physical = host.physical;
    a.device = host.devices[i];
    a.compute_queue = host.devices[i].getQueue(host.family, 0);
    a.compute_family = host.family;
    a.compute_lock = {[&, i] { host_queue_mutex[i].lock(); ++locks; }, [&, i] { ++unlocks; host_queue_mutex[i].unlock(); }};
    a.enabled_extensions = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
  }
  {
    auto group = DeviceGroup::adopt(adopted);
    REQUIRE(group.size() == 2);
    CHECK_FALSE(group.owns_instance());
    CHECK_FALSE(group[0].owned());
    CHECK(group[0].enabled().external_memory_host);
    CHECK_FALSE(group[0].enabled().external_semaphore_fd);
    auto comm = make_communicator(group);
    std::vector<std::unique_ptr<TestBuffer>> bufs;
    std::vector<BufferSpan> spans;
    const auto x = integer_inputs(2, 1000, 3);
    for (int i = 0; i < 2; ++i) {
      bufs.push_back(std::make_unique<TestBuffer>(group[i], 4000));
      bufs[i]->write(0, x[i]);
      spans.push_back({bufs[i]->handle(), 0, 1000, 4000});
    }
    comm.allreduce(spans).wait();
    for (int i = 0; i < 2; ++i) CHECK(bit_identical(bufs[i]->read(0, 1000), integer_sum(x)));
  }
  CHECK(locks > 0);
  CHECK(locks == unlocks);
  // Every handle is still alive and usable: tpar destroyed none of them.
  for (auto d : host.devices) {
    vk::Semaphore s;
    vk::SemaphoreCreateInfo si;
    CHECK(d.createSemaphore(&si, nullptr, &s) == vk::Result::eSuccess);
    d.destroySemaphore(s);
    CHECK(VULKAN_HPP_DEFAULT_DISPATCHER.vkDeviceWaitIdle(d) == VK_SUCCESS);
  }
  CHECK(host.log.errors.empty());
  for (const auto& e : host.log.errors) MESSAGE(e);
}

TEST_CASE("adopt: bad input is rejected") {
  std::vector<AdoptedDevice> none;
  CHECK(code_of([&] { DeviceGroup::adopt(none); }) == ErrorCode::invalid_argument);
  std::vector<AdoptedDevice> blank(1);
  CHECK(code_of([&] { DeviceGroup::adopt(blank); }) == ErrorCode::invalid_argument);
}
