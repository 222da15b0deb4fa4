// How tpar reaches Vulkan: core functions through the host's default dispatcher (static
// or dynamic), extension functions through small tables loaded per instance/device,
// since a statically linked loader exports no extension entry points.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/core/detail/platform.hpp>

#include <mutex>
#include <string>

namespace tpar::inline v0::detail {

#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
inline constexpr bool dynamic_dispatch = true;
#else
inline constexpr bool dynamic_dispatch = false;
#endif

// Dynamic dispatch: make the default dispatcher able to create an instance, loading the
// Vulkan loader (`library`, or the system's) unless the host already initialised it.
// Returns true when tpar (re)initialised the dispatcher and so may bind it to its own
// instance. Static dispatch: the loader is linked; nothing to do.
inline bool ensure_loader([[maybe_unused]] const std::string& library) {
#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  if (library.empty() && VULKAN_HPP_DEFAULT_DISPATCHER.vkGetInstanceProcAddr) return false;
  void* handle = nullptr;
  std::string tried = library;
  if (!library.empty()) {
    handle = os::open_library(library.c_str());
  } else {
    for (const char* n : os::loader_names) {
      if (handle) break;
      handle = os::open_library(n);
      tried += (tried.empty() ? "" : ", ") + std::string(n);
    }
  }
  auto gipa = handle ? os::library_function<PFN_vkGetInstanceProcAddr>(handle, "vkGetInstanceProcAddr") : nullptr;
  if (!gipa)
    throw Error(ErrorCode::no_loader, "cannot load the Vulkan loader (" + tried + "): " + std::string(os::loader_hint));
  // The handle stays open for the life of the process: function pointers from it live on
  // in the default dispatcher.
  VULKAN_HPP_DEFAULT_DISPATCHER.init(gipa);
  return true;
#else
  return false;
#endif
}

// Dynamic dispatch: bind the default dispatcher to `instance` when tpar owns the
// dispatcher or nobody bound it yet. Device functions are then reached through the
// loader's trampolines, which serve every device of every instance.
inline void bind_dispatcher([[maybe_unused]] vk::Instance instance, [[maybe_unused]] bool tpar_loaded) {
#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
  if (tpar_loaded || !VULKAN_HPP_DEFAULT_DISPATCHER.vkEnumeratePhysicalDevices)
    VULKAN_HPP_DEFAULT_DISPATCHER.init(instance);
#endif
}

template <class Fn>
Fn load_instance_fn(vk::Instance instance, const char* name) {
  return reinterpret_cast<Fn>(instance.getProcAddr(name));
}

template <class Fn>
Fn load_device_fn(vk::Device device, const char* name) {
  return reinterpret_cast<Fn>(device.getProcAddr(name));
}

// Extension entry points tpar calls on one device; null where not enabled.
struct DeviceExtensionFns {
  PFN_vkGetMemoryHostPointerPropertiesEXT get_memory_host_pointer_properties = nullptr;
  PFN_vkGetSemaphoreFdKHR get_semaphore_fd = nullptr;
  PFN_vkImportSemaphoreFdKHR import_semaphore_fd = nullptr;
  PFN_vkGetCalibratedTimestampsEXT get_calibrated_timestamps = nullptr;

  void load(vk::Device device, bool external_memory_host, bool external_semaphore_fd, bool calibrated_timestamps) {
    if (calibrated_timestamps)
      get_calibrated_timestamps = load_device_fn<PFN_vkGetCalibratedTimestampsEXT>(device, "vkGetCalibratedTimestampsEXT");
    if (external_memory_host)
      get_memory_host_pointer_properties =
          load_device_fn<PFN_vkGetMemoryHostPointerPropertiesEXT>(device, "vkGetMemoryHostPointerPropertiesEXT");
    if (external_semaphore_fd) {
      get_semaphore_fd = load_device_fn<PFN_vkGetSemaphoreFdKHR>(device, "vkGetSemaphoreFdKHR");
      import_semaphore_fd = load_device_fn<PFN_vkImportSemaphoreFdKHR>(device, "vkImportSemaphoreFdKHR");
    }
  }
};

}  // namespace tpar::inline v0::detail
