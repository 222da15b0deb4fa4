// tpar — configuration shared by every header: version, the Vulkan-Hpp include, and
// the dispatcher tpar calls through.
#pragma once

#define TPAR_VERSION_MAJOR 0
#define TPAR_VERSION_MINOR 1
#define TPAR_VERSION_PATCH 0
#define TPAR_VERSION_STRING "0.1.0"

// tpar calls Vulkan through whatever default dispatcher the host configured
// (VULKAN_HPP_DISPATCH_LOADER_DYNAMIC or static), so it must see the host's
// Vulkan-Hpp configuration: include vulkan.hpp (or define its macros) before tpar.
#include <vulkan/vulkan.hpp>

// Before any tpar name: on Windows, <windows.h> without the macros that would rename them.
#include <tpar/core/detail/platform.hpp>

#include <cstdint>

#if VK_HEADER_VERSION < 239
#error "tpar needs Vulkan headers 1.3.239 or newer"
#endif

namespace tpar::inline v0 {

struct Version {
  int major, minor, patch;
};

inline constexpr Version version{TPAR_VERSION_MAJOR, TPAR_VERSION_MINOR, TPAR_VERSION_PATCH};

}  // namespace tpar::inline v0
