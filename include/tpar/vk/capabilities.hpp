// Capabilities — what one device offers tpar, and the gate that says which cross-device
// sync a group of them can use, and why, in words a user can read.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/core/detail/platform.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpar::inline v0 {

using Uuid = std::array<std::uint8_t, VK_UUID_SIZE>;

inline std::string to_string(const Uuid& uuid) {
  std::string s;
  char buf[3];
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    std::snprintf(buf, sizeof buf, "%02x", uuid[i]);
    s += buf;
  }
  return s;
}

struct DeviceCapabilities {
  std::string name;
  std::string driver_name;
  std::string driver_info;
  vk::DriverId driver_id = {};
  vk::PhysicalDeviceType type = vk::PhysicalDeviceType::eOther;
  std::uint32_t vendor_id = 0;
  std::uint32_t device_id = 0;
  std::uint32_t api_version = 0;
  std::uint32_t driver_version = 0;
  Uuid driver_uuid{};
  Uuid device_uuid{};

  // Queue families tpar uses: compute (required) and a transfer-only family, if any.
  std::uint32_t compute_family = 0;
  std::optional<std::uint32_t> transfer_family;
  std::vector<vk::QueueFamilyProperties> queue_families;

  bool timeline_semaphores = false;
  std::uint64_t max_timeline_difference = 0;
  bool external_memory_host = false;      // VK_EXT_external_memory_host
  vk::DeviceSize host_import_alignment = 0;
  bool external_semaphore_fd = false;     // VK_KHR_external_semaphore_fd
  bool timeline_fd_exportable = false;    // OPAQUE_FD timeline semaphores
  bool timeline_fd_importable = false;
  bool shader_float16 = false;
  bool storage_16bit = false;             // storageBuffer16BitAccess
  bool update_after_bind = false;         // descriptorBindingStorageBufferUpdateAfterBind
  bool shader_device_clock = false;       // VK_KHR_shader_clock with shaderDeviceClock
  // VK_AMD_device_coherent_memory with deviceCoherentMemory: memory types (DEVICE_COHERENT_AMD,
  // DEVICE_UNCACHED_AMD) whose device accesses stay coherent with the host's while a
  // kernel runs, which AMD documents for this cross-agent visibility; the relay puts its
  // words there where the device enabled it.
  bool device_coherent_memory = false;
  // The largest heap with a DEVICE_LOCAL | HOST_VISIBLE | HOST_COHERENT memory type (the
  // BAR: device memory the host writes through a mapping), in bytes; 0: none.
  vk::DeviceSize host_visible_device_local_heap = 0;

  bool calibrated_timestamps = false;     // VK_EXT_calibrated_timestamps
  double timestamp_period_ns = 0;         // nanoseconds per timestamp tick

  vk::DeviceSize min_storage_offset_alignment = 0;
  vk::DeviceSize max_storage_buffer_range = 0;
  std::uint32_t max_storage_buffers_per_stage = 0;  // maxPerStageDescriptorStorageBuffers
  std::uint32_t max_workgroups_x = 0;

  bool is_gpu() const {
    return type == vk::PhysicalDeviceType::eDiscreteGpu || type == vk::PhysicalDeviceType::eIntegratedGpu ||
           type == vk::PhysicalDeviceType::eVirtualGpu;
  }
  bool dedicated_transfer_queue() const { return transfer_family.has_value(); }
  bool native_import_capable() const {
    return external_semaphore_fd && timeline_fd_exportable && timeline_fd_importable;
  }
  // The driver ends a shader's loops after a fixed number of iterations in all (lavapipe:
  // 65535), so a kernel cannot wait long for the host: the relay waits at the queue.
  bool shader_loops_bounded() const { return driver_id == vk::DriverId::eMesaLlvmpipe; }
};

inline std::string api_version_string(std::uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) + "." +
         std::to_string(VK_API_VERSION_PATCH(v));
}

namespace detail {

inline bool has_extension(const std::vector<vk::ExtensionProperties>& exts, const char* name) {
  for (const auto& e : exts)
    if (std::string_view(e.extensionName.data()) == name) return true;
  return false;
}

inline std::vector<vk::ExtensionProperties> device_extensions(vk::PhysicalDevice physical) {
  std::uint32_t n = 0;
  check(physical.enumerateDeviceExtensionProperties(nullptr, &n, nullptr), "vkEnumerateDeviceExtensionProperties");
  std::vector<vk::ExtensionProperties> exts(n);
  check(physical.enumerateDeviceExtensionProperties(nullptr, &n, exts.data()), "vkEnumerateDeviceExtensionProperties");
  exts.resize(n);
  return exts;
}

}  // namespace detail

// What `physical` supports (not what a VkDevice enabled: see Device::enabled()).
inline DeviceCapabilities query_capabilities(vk::PhysicalDevice physical) {
  DeviceCapabilities caps;
  const auto exts = detail::device_extensions(physical);
  caps.external_memory_host = detail::has_extension(exts, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
  caps.external_semaphore_fd = detail::has_extension(exts, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
  caps.calibrated_timestamps = detail::has_extension(exts, VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
  const bool shader_clock = detail::has_extension(exts, VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
  const bool coherent_memory = detail::has_extension(exts, VK_AMD_DEVICE_COHERENT_MEMORY_EXTENSION_NAME);

  vk::PhysicalDeviceProperties2 props2;
  vk::PhysicalDeviceIDProperties id;
  vk::PhysicalDeviceDriverProperties driver;
  vk::PhysicalDeviceTimelineSemaphoreProperties timeline;
  vk::PhysicalDeviceExternalMemoryHostPropertiesEXT host;
  props2.pNext = &id;
  id.pNext = &driver;
  driver.pNext = &timeline;
  if (caps.external_memory_host) timeline.pNext = &host;
  physical.getProperties2(&props2);
  const auto& p = props2.properties;
  caps.name = p.deviceName.data();
  caps.type = p.deviceType;
  caps.vendor_id = p.vendorID;
  caps.device_id = p.deviceID;
  caps.api_version = p.apiVersion;
  caps.driver_version = p.driverVersion;
  caps.driver_name = driver.driverName.data();
  caps.driver_info = driver.driverInfo.data();
  caps.driver_id = driver.driverID;
  std::copy(id.driverUUID.begin(), id.driverUUID.end(), caps.driver_uuid.begin());
  std::copy(id.deviceUUID.begin(), id.deviceUUID.end(), caps.device_uuid.begin());
  caps.max_timeline_difference = timeline.maxTimelineSemaphoreValueDifference;
  caps.host_import_alignment = caps.external_memory_host ? host.minImportedHostPointerAlignment : 0;
  caps.min_storage_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
  caps.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  caps.max_storage_buffers_per_stage = p.limits.maxPerStageDescriptorStorageBuffers;
  caps.max_workgroups_x = p.limits.maxComputeWorkGroupCount[0];
  caps.timestamp_period_ns = p.limits.timestampPeriod;

  if (VK_API_VERSION_MINOR(p.apiVersion) >= 2 || VK_API_VERSION_MAJOR(p.apiVersion) > 1) {
    vk::PhysicalDeviceFeatures2 f2;
    vk::PhysicalDeviceVulkan11Features f11;
    vk::PhysicalDeviceVulkan12Features f12;
    vk::PhysicalDeviceShaderClockFeaturesKHR clock;
    vk::PhysicalDeviceCoherentMemoryFeaturesAMD coherent;
    f2.pNext = &f11;
    f11.pNext = &f12;
    void** tail = &f12.pNext;
    if (shader_clock) {
      *tail = &clock;
      tail = &clock.pNext;
    }
    if (coherent_memory) *tail = &coherent;
    physical.getFeatures2(&f2);
    caps.timeline_semaphores = f12.timelineSemaphore;
    caps.shader_float16 = f12.shaderFloat16;
    caps.storage_16bit = f11.storageBuffer16BitAccess;
    caps.update_after_bind = f12.descriptorBindingStorageBufferUpdateAfterBind;
    caps.shader_device_clock = shader_clock && clock.shaderDeviceClock;
    caps.device_coherent_memory = coherent_memory && coherent.deviceCoherentMemory;
  }

  const auto memory = physical.getMemoryProperties();
  const vk::MemoryPropertyFlags bar =
      vk::MemoryPropertyFlagBits::eDeviceLocal | vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
  for (std::uint32_t i = 0; i < memory.memoryTypeCount; ++i)
    if ((memory.memoryTypes[i].propertyFlags & bar) == bar)
      caps.host_visible_device_local_heap =
          std::max(caps.host_visible_device_local_heap, memory.memoryHeaps[memory.memoryTypes[i].heapIndex].size);

  if (caps.external_semaphore_fd && caps.timeline_semaphores) {
    vk::SemaphoreTypeCreateInfo type_info(vk::SemaphoreType::eTimeline, 0);
    vk::PhysicalDeviceExternalSemaphoreInfo info(vk::ExternalSemaphoreHandleTypeFlagBits::eOpaqueFd, &type_info);
    vk::ExternalSemaphoreProperties props;
    physical.getExternalSemaphoreProperties(&info, &props);
    caps.timeline_fd_exportable =
        bool(props.externalSemaphoreFeatures & vk::ExternalSemaphoreFeatureFlagBits::eExportable);
    caps.timeline_fd_importable =
        bool(props.externalSemaphoreFeatures & vk::ExternalSemaphoreFeatureFlagBits::eImportable);
  }

  std::uint32_t nf = 0;
  physical.getQueueFamilyProperties(&nf, nullptr);
  caps.queue_families.resize(nf);
  physical.getQueueFamilyProperties(&nf, caps.queue_families.data());
  bool have_compute = false;
  for (std::uint32_t f = 0; f < nf; ++f) {
    const auto flags = caps.queue_families[f].queueFlags;
    if (!have_compute && (flags & vk::QueueFlagBits::eCompute)) {
      caps.compute_family = f;
      have_compute = true;
    }
    const bool transfer_only = (flags & vk::QueueFlagBits::eTransfer) && !(flags & vk::QueueFlagBits::eCompute) &&
                               !(flags & vk::QueueFlagBits::eGraphics);
    if (transfer_only && !caps.transfer_family) caps.transfer_family = f;
  }
  if (!have_compute) caps.compute_family = ~0u;
  return caps;
}

// Which cross-device sync a group can use.
enum class SyncKind { native_import, proxy_bridge };

constexpr std::string_view to_string(SyncKind s) {
  return s == SyncKind::native_import ? "NativeImport" : "ProxyBridge";
}

struct SyncGate {
  SyncKind choice = SyncKind::proxy_bridge;
  bool native_possible = false;  // NativeImport may be tried (a self-test still decides)
  std::string reason;            // one sentence a user can read
  std::string blocker;           // what rules NativeImport out (empty where it is possible)
};

// `enabled_fd[i]` says whether device i's VkDevice has VK_KHR_external_semaphore_fd enabled.
// `platform_blocker`: why this platform shares no semaphores (Windows), empty where it does.
inline SyncGate sync_gate(std::span<const DeviceCapabilities> caps, std::span<const bool> enabled_fd,
                          std::string_view platform_blocker = detail::os::semaphore_sharing_blocker) {
  SyncGate gate;
  // NativeImport is ruled out by `why`; ProxyBridge carries the group instead.
  auto proxy = [&](std::string why, const char* joint) {
    gate.reason = why + joint + "ProxyBridge forwards progress on a host thread";
    gate.blocker = std::move(why);
    return gate;
  };
  if (caps.size() < 2) {
    gate.reason = "a single device needs no cross-device sync";
    gate.blocker = gate.reason;
    return gate;
  }
  if (!platform_blocker.empty()) return proxy(std::string(platform_blocker), ", so ");
  for (std::size_t i = 0; i < caps.size(); ++i) {
    const auto& c = caps[i];
    const std::string who = "device " + std::to_string(i) + " (" + c.name + ")";
    if (!c.external_semaphore_fd) return proxy(who + " does not support VK_KHR_external_semaphore_fd", ", so ");
    if (i < enabled_fd.size() && !enabled_fd[i])
      return proxy(who + " was created without VK_KHR_external_semaphore_fd enabled", ", so ");
    if (!c.timeline_fd_exportable || !c.timeline_fd_importable)
      return proxy(who + " cannot " + (c.timeline_fd_exportable ? "import" : "export") + " timeline semaphores as OPAQUE_FD",
                   ", so ");
    if (c.driver_uuid != caps[0].driver_uuid)
      return proxy(who + " has another driver than device 0 (driverUUID differs), so their semaphores cannot be shared",
                   " and ");
  }
  gate.native_possible = true;
  gate.choice = SyncKind::native_import;
  gate.reason = "all " + std::to_string(caps.size()) +
                " devices share one driver and export and import OPAQUE_FD timeline semaphores, so queues wait on "
                "each other directly (NativeImport, confirmed by a self-test when a communicator is created)";
  return gate;
}

// Whether a group can use the relay (algo/relay.hpp), and whether the automatic choice may.
struct RelayGate {
  bool possible = false;   // every device has the memory the relay needs: TPAR_ALGO=relay runs it
  // And the automatic choice takes it by size, for calls that ride in the host's
  // submissions (tpar::StreamAllreduce): on two to four distinct GPUs whose kernels wait,
  // for calls up to automatic_max_bytes (where it was measured faster than OneShot),
  // once a communicator's self-test of the relay passed on every device (docs/relay.md).
  bool automatic = false;
  std::size_t automatic_max_bytes = 0;
  std::string reason;      // one sentence a user can read
  // Bit d: device d's queue waits for the sum, not its kernel (see relay_gate).
  std::uint32_t queue_waits = 0;
  // Some such device is a GPU: correct (tested on one H200 opened as several devices),
  // but not chosen automatically: its queue's wait is one more hop than a kernel's poll,
  // and it has not been measured against OneShot on distinct GPUs.
  bool gpu_queue_waits = false;
};

// The least host-visible device-local memory a device needs for the relay: its slots
// take a small part of it (Options::relay_max_bytes per call in flight), and a device
// that maps no more than this to the host (a small BAR) needs it for other things.
inline constexpr vk::DeviceSize relay_min_heap = vk::DeviceSize{16} << 20;

// `clock_enabled[d]`: device d enabled VK_KHR_shader_clock's shaderDeviceClock. Devices
// of different drivers are served like any others: the relay needs no shared semaphore,
// and what it does need of each device (its running kernel sees the host's writes, its
// writes reach the host while it runs, its work groups run at once), which Vulkan does
// not promise, the relay's self-test proves on every device before a communicator lets
// the automatic choice take it (comm/detail/relay_self_test.hpp): a group of a Radeon and
// a GeForce is as safe as two GeForces once both pass. (The relay was withheld from
// groups of two drivers after two stalls on an H200 beside llvmpipe; the probe of
// 2026-11-26 found the same stall on two H100s of one driver, relay calls in flight beside
// other calls, which the communicator no longer lets happen: docs/relay.md.)
inline RelayGate relay_gate(std::span<const DeviceCapabilities> caps, std::span<const bool> clock_enabled) {
  RelayGate gate;
  for (std::size_t i = 0; i < caps.size(); ++i) {
    const auto& c = caps[i];
    if (c.host_visible_device_local_heap >= relay_min_heap) continue;
    const std::string who = "device " + std::to_string(i) + " (" + c.name + ")";
    gate.reason = who +
                  (c.host_visible_device_local_heap ? " maps only " + std::to_string(c.host_visible_device_local_heap >> 20) +
                                                          " MiB of its memory to the host"
                                                    : std::string(" has no device-local memory the host can map")) +
                  ", which the relay needs for its slots, so calls keep to OneShot and ChunkedRing";
    return gate;
  }
  gate.possible = true;
  // A kernel waits for the sum only where it can wait long (not on lavapipe, which ends a
  // shader's loops itself), bounds its wait by the device clock (a count of polls is no
  // bound of time: on an H200 a wait bounded by 2^32 polls ended within 200 ms), and runs
  // alongside its peers' kernels (several devices of one physical device are contexts the
  // GPU need not run at once: an H200 ran one context's waiting kernel until it ended).
  // Elsewhere the queue waits for the sum.
  std::string shared_why, clock_why;
  for (std::size_t i = 0; i < caps.size(); ++i) {
    bool shared = false;
    for (std::size_t j = 0; j < caps.size(); ++j)
      if (j != i && caps[i].device_uuid == caps[j].device_uuid) {
        shared = true;
        if (shared_why.empty())
          shared_why = "devices " + std::to_string(std::min(i, j)) + " and " + std::to_string(std::max(i, j)) +
                       " are one physical device (one deviceUUID), whose kernels need not run at the same time";
      }
    const bool clock = i < clock_enabled.size() && clock_enabled[i];
    if (!clock && clock_why.empty()) clock_why = "device " + std::to_string(i) + " did not enable shaderDeviceClock";
    if (!caps[i].shader_loops_bounded() && !shared && clock) continue;
    gate.queue_waits |= 1u << i;
    gate.gpu_queue_waits |= !caps[i].shader_loops_bounded();
  }
  if (!shared_why.empty()) {
    gate.reason = shared_why + ", so the relay runs only when asked for (TPAR_ALGO=relay), its queues waiting for the sum";
    return gate;
  }
  if (caps.size() < 2) {
    gate.reason = "a single device needs no relay";
    return gate;
  }
  if (gate.gpu_queue_waits) {
    gate.reason = clock_why + ", so its wait for the sum would be the queue's, which is not measured against OneShot; "
                              "the relay runs only when asked for (TPAR_ALGO=relay)";
    return gate;
  }
  // Where it can wait in its kernels on distinct GPUs, measurement decides. One call per
  // submission it was slower than OneShot on two H200s (2026-11-24,
  // docs/design/relay-two-gpus.md). Held with the host's work in few submissions
  // (tpar::StreamAllreduce) and summed by two host threads, it was faster on two and on
  // four H200s (2026-11-27, docs/design/relay-threads.md): the chain's step against
  // OneShot's level up to 64 KiB on two and up to 32 KiB on four, where llama.cpp's 8B
  // decode ran 226.5 t/s against OneShot's 192.2. Three GPUs lie between (not measured);
  // more than four are not measured and take it only when asked for.
  if (caps.size() >= 2 && caps.size() <= 4 && !gate.queue_waits) {
    gate.automatic = true;
    gate.automatic_max_bytes = caps.size() == 2 ? std::size_t{64} << 10 : std::size_t{32} << 10;
    gate.reason = "the devices are " + std::to_string(caps.size()) +
                  " distinct GPUs whose kernels wait for the sum, so calls up to " +
                  std::to_string(gate.automatic_max_bytes >> 10) +
                  " KiB (and relay_max_bytes) that ride in the host's submissions (tpar::StreamAllreduce, as under "
                  "llama.cpp) take the relay, once its self-test passes on every device";
    return gate;
  }
  gate.reason = "every device maps device-local memory to the host and the devices are distinct physical devices, so the "
                "relay can run (TPAR_ALGO=relay); it is chosen by itself only on two to four devices, where it was measured";
  return gate;
}

}  // namespace tpar::inline v0
