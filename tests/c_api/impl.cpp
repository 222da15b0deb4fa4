// The one C++ unit of the C test program: tpar's C functions, defined by the
// implementation header. Built twice: with Vulkan-Hpp's dynamic dispatcher (whose
// storage this unit defines) and with its static one.
#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
#include <vulkan/vulkan.hpp>
VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE
#endif
#include <tpar/c_api_impl.hpp>

#include "../support/keep_driver_loaded.hpp"
