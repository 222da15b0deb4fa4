// A host application as a ggml backend is one: it creates its own instance (with the
// validation layer) and devices, and keeps owning them; tpar adopts them.
#pragma once

#include <cstdlib>

#include <doctest/doctest.h>
#include <tpar/vk/device_group.hpp>

#include "support/vk_env.hpp"

#include <vector>

namespace tpar_test {

using namespace tpar;

// What a host application owns: an instance and devices it created itself.
struct HostApp {
  ValidationLog log;
  vk::Instance instance;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  vk::PhysicalDevice physical;
  std::vector<vk::Device> devices;
  std::uint32_t family = 0;

  explicit HostApp(std::uint32_t n) {
    // Use tpar's own instance code path only for the loader; everything else by hand.
    detail::ensure_loader("");
    const char* layers[] = {"VK_LAYER_KHRONOS_validation"};
    const char* exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
    vk::ApplicationInfo app("host", 1, "host", 1, VK_API_VERSION_1_2);
    // TPAR_TEST_NO_VALIDATION (machines without the layer, such as the GPU machines): no
    // layer and no messenger, as for the tests' own groups.
    const std::uint32_t validate = std::getenv("TPAR_TEST_NO_VALIDATION") ? 0u : 1u;
    vk::InstanceCreateInfo info({}, &app, validate, layers, validate, exts);
    REQUIRE(vk::createInstance(&info, nullptr, &instance) == vk::Result::eSuccess);
    detail::bind_dispatcher(instance, true);
    if (!validate) {
      init_devices(n);
      return;
    }
    auto create = detail::load_instance_fn<PFN_vkCreateDebugUtilsMessengerEXT>(instance, "vkCreateDebugUtilsMessengerEXT");
    VkDebugUtilsMessengerCreateInfoEXT mi{};
    mi.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
    mi.pfnUserCallback = [](VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
                            const VkDebugUtilsMessengerCallbackDataEXT* d, void* user) -> VkBool32 {
      static_cast<ValidationLog*>(user)->add({vk::DebugUtilsMessageSeverityFlagBitsEXT(severity),
                                             d->pMessageIdName ? d->pMessageIdName : "", d->pMessage ? d->pMessage : ""});
      return VK_FALSE;
    };
    mi.pUserData = &log;
    REQUIRE(create(instance, &mi, nullptr, &messenger) == VK_SUCCESS);
    init_devices(n);
  }

  void init_devices(std::uint32_t n) {
    auto physicals = detail::physical_devices(instance);
    REQUIRE(!physicals.empty());
    physical = physicals[0];
    const auto caps = query_capabilities(physical);
    family = caps.compute_family;
    const float prio = 1.0f;
    vk::DeviceQueueCreateInfo q({}, family, 1, &prio);
    const char* dev_exts[] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
    vk::PhysicalDeviceVulkan12Features f12;
    f12.timelineSemaphore = VK_TRUE;
    vk::DeviceCreateInfo di({}, 1, &q, 0, nullptr, 1, dev_exts, nullptr, &f12);
    for (std::uint32_t i = 0; i < n; ++i) {
      vk::Device d;
      REQUIRE(physical.createDevice(&di, nullptr, &d) == vk::Result::eSuccess);
      devices.push_back(d);
    }
  }
  ~HostApp() {
    for (auto d : devices) d.destroy();
    if (messenger) {
      auto destroy = detail::load_instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>(instance, "vkDestroyDebugUtilsMessengerEXT");
      destroy(instance, messenger, nullptr);
    }
    instance.destroy();
  }
};


}  // namespace tpar_test
