// Sanitizer builds (scripts/sanitize.sh): keep the CPU driver and the validation layer
// loaded for the whole process. The Vulkan loader unloads them with the last instance,
// and a leak or race report from inside them would then name "<unknown module>", which
// no suppression in tests/sanitizers/ can match. Include in one unit per test program.
#pragma once

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <dlfcn.h>

namespace tpar_test {
inline const bool keep_driver_loaded = [] {
  for (const char* lib : {"libvulkan_lvp.so", "libVkLayer_khronos_validation.so"}) (void)::dlopen(lib, RTLD_NOW | RTLD_NODELETE);
  return true;
}();
}  // namespace tpar_test
#endif
