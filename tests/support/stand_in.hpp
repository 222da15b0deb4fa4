// Distinct GPUs stood in for on one lavapipe: the test's devices adopted into a group
// while a wrapper of vkGetPhysicalDeviceProperties2 gives every device after the first
// another deviceUUID (and, where asked, another driverUUID) and, where asked, every device
// a GPU driver's driverID. tpar reads a device's capabilities once, as adopt wraps it, so
// the group then decides as it would for those GPUs; the work runs on lavapipe.
#pragma once

#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <optional>
#include <vector>

namespace tpar_test {

struct StandIn {
  bool other_driver = true;                 // device 1 on: another driverUUID too
  std::optional<vk::DriverId> driver_id;    // every device reports this driverID
  bool shader_clock = false;                // adopt with shaderDeviceClock enabled (where the device has it)
};

namespace stand_in_detail {

inline PFN_vkGetPhysicalDeviceProperties2 driver_properties = nullptr;
inline int properties_calls = 0;  // while the wrapper is installed
inline StandIn how;

// Another driver's and device's UUIDs (any value unlike lavapipe's).
inline void make_other(tpar::Uuid& driver, tpar::Uuid& device, bool other_driver) {
  for (std::size_t i = 0; i < driver.size(); ++i) {
    if (other_driver) driver[i] = static_cast<std::uint8_t>(driver[i] ^ 0x5a);
    device[i] = static_cast<std::uint8_t>(device[i] ^ 0xa5);
  }
}

// The first query (device 0) keeps its UUIDs; later ones (device 1 on) get the others.
inline VKAPI_ATTR void VKAPI_CALL properties(VkPhysicalDevice physical, VkPhysicalDeviceProperties2* out) {
  driver_properties(physical, out);
  const bool first = properties_calls++ == 0;
  for (auto* next = static_cast<VkBaseOutStructure*>(out->pNext); next; next = next->pNext) {
    if (next->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES && !first) {
      auto* id = reinterpret_cast<VkPhysicalDeviceIDProperties*>(next);
      tpar::Uuid driver, device;
      std::copy(std::begin(id->driverUUID), std::end(id->driverUUID), driver.begin());
      std::copy(std::begin(id->deviceUUID), std::end(id->deviceUUID), device.begin());
      make_other(driver, device, how.other_driver);
      std::copy(driver.begin(), driver.end(), std::begin(id->driverUUID));
      std::copy(device.begin(), device.end(), std::begin(id->deviceUUID));
    }
    if (next->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES && how.driver_id)
      reinterpret_cast<VkPhysicalDeviceDriverProperties*>(next)->driverID = static_cast<VkDriverId>(*how.driver_id);
  }
}

}  // namespace stand_in_detail

// `group`'s devices (tpar created them; they stay its) adopted as stand-ins.
inline tpar::DeviceGroup adopt_stand_in(tpar::DeviceGroup& group, StandIn how) {
  std::vector<tpar::AdoptedDevice> adopted(group.size());
  for (std::uint32_t i = 0; i < group.size(); ++i) {
    auto& d = group[i];
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
    if (how.shader_clock && d.enabled().shader_device_clock) {
      a.enabled_extensions.push_back(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
      a.shader_device_clock_enabled = true;
    }
  }
  auto& dispatcher = VULKAN_HPP_DEFAULT_DISPATCHER;
  stand_in_detail::driver_properties = dispatcher.vkGetPhysicalDeviceProperties2;
  stand_in_detail::properties_calls = 0;
  stand_in_detail::how = how;
  dispatcher.vkGetPhysicalDeviceProperties2 = stand_in_detail::properties;
  struct Restore {
    ~Restore() { VULKAN_HPP_DEFAULT_DISPATCHER.vkGetPhysicalDeviceProperties2 = stand_in_detail::driver_properties; }
  } restore;
  return tpar::DeviceGroup::adopt(adopted);
}

}  // namespace tpar_test
