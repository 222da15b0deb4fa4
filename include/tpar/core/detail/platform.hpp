// What tpar asks of the operating system, one small path per platform: the Vulkan
// loader's library, page-aligned host memory for the staging every device imports, a
// thread's name, and whether semaphores can be shared as file descriptors (NativeImport).
// Linux (POSIX) is what has run; the Windows paths have only been compiled (mingw-w64).
//
// On Windows this is the only tpar header that includes <windows.h>. It asks for NOMINMAX
// unless the host defined it, and removes two macros of <windows.h> that would rename
// tpar's and Vulkan-Hpp's own names: MemoryBarrier (vk::MemoryBarrier; Vulkan-Hpp removes
// it too where <windows.h> came first) and the GDI's DeviceCapabilities
// (tpar::DeviceCapabilities; call DeviceCapabilitiesA/W by name where it is wanted).
#pragma once

#include <cstddef>
#include <string_view>

#if defined(_WIN32)
#if !defined(NOMINMAX)
#define NOMINMAX
#endif
#include <io.h>
#include <windows.h>
#if defined(MemoryBarrier)
#undef MemoryBarrier
#endif
#if defined(DeviceCapabilities)
#undef DeviceCapabilities
#endif
#else
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>
#if defined(__linux__)
#include <pthread.h>
#endif
#endif

namespace tpar::inline v0::detail::os {

#if defined(_WIN32)
inline constexpr bool windows = true;
#else
inline constexpr bool windows = false;
#endif

// The Vulkan loader's names, tried in order when the host names none.
#if defined(_WIN32)
inline constexpr const char* loader_names[] = {"vulkan-1.dll"};
inline constexpr std::string_view loader_hint = "install your GPU's driver (it brings vulkan-1.dll) or point to the loader";
#else
inline constexpr const char* loader_names[] = {"libvulkan.so.1", "libvulkan.so"};
inline constexpr std::string_view loader_hint =
    "install it (Debian/Ubuntu: apt-get install libvulkan1; Fedora: dnf install vulkan-loader; "
    "Arch: pacman -S vulkan-icd-loader) or point to it";
#endif

// A shared library by name or path, or null. It stays loaded for the life of the process.
inline void* open_library(const char* name) {
#if defined(_WIN32)
  return reinterpret_cast<void*>(::LoadLibraryA(name));
#else
  return ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
#endif
}

// A function of a library open_library returned, or null.
template <class Fn>
Fn library_function(void* library, const char* name) {
#if defined(_WIN32)
  // Through a function type of no parameters: FARPROC to any other function type is not
  // a cast -Wcast-function-type accepts directly.
  return reinterpret_cast<Fn>(reinterpret_cast<void (*)()>(::GetProcAddress(static_cast<HMODULE>(library), name)));
#else
  return reinterpret_cast<Fn>(::dlsym(library, name));
#endif
}

// `bytes` of zeroed, page-aligned host memory that no allocator hands out again while it
// is mapped (a device's import of it outlives any free we do not call), or null.
inline void* map_pages(std::size_t bytes) {
#if defined(_WIN32)
  return ::VirtualAlloc(nullptr, bytes, MEM_COMMIT | MEM_RESERVE, PAGE_READWRITE);
#else
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
#endif
}

inline void unmap_pages(void* p, [[maybe_unused]] std::size_t bytes) {
  if (!p) return;
#if defined(_WIN32)
  ::VirtualFree(p, 0, MEM_RELEASE);
#else
  ::munmap(p, bytes);
#endif
}

// Names the calling thread (at most 15 characters are kept, Linux's limit), so that tools
// (top -H, tpar-idle-cpu; a debugger or profiler on Windows) tell tpar's threads from the
// driver's and the host's. Where the platform cannot, nothing happens.
inline void name_this_thread([[maybe_unused]] std::string_view name) {
  char buf[16] = {};
  const std::size_t n = name.size() < 15 ? name.size() : 15;
  for (std::size_t i = 0; i < n; ++i) buf[i] = name[i];
#if defined(__linux__)
  (void)::pthread_setname_np(::pthread_self(), buf);
#elif defined(_WIN32)
  // SetThreadDescription exists from Windows 10 1607 on: looked up, so that an older
  // system still loads the program.
  using SetDescription = HRESULT(WINAPI*)(HANDLE, PCWSTR);
  const HMODULE kernel = ::GetModuleHandleW(L"kernel32.dll");
  const auto set = kernel ? library_function<SetDescription>(kernel, "SetThreadDescription") : nullptr;
  if (!set) return;
  wchar_t wide[16] = {};
  for (std::size_t i = 0; i < n; ++i) wide[i] = static_cast<unsigned char>(buf[i]);
  (void)set(::GetCurrentThread(), wide);
#endif
}

// Closes a file descriptor (one a driver exported and tpar did not hand on).
inline void close_descriptor(int fd) {
#if defined(_WIN32)
  (void)::_close(fd);
#else
  (void)::close(fd);
#endif
}

// Why cross-device semaphores cannot be shared here; empty where they can. NativeImport
// shares timeline semaphores as OPAQUE_FD file descriptors (VK_KHR_external_semaphore_fd).
// Windows drivers share them as OPAQUE_WIN32 handles instead, which tpar does not
// implement: it has never run on Windows, so ProxyBridge (a host thread, no sharing)
// carries every group there.
inline constexpr std::string_view windows_semaphore_blocker =
    "on Windows, semaphores are shared as OPAQUE_WIN32 handles, which tpar's NativeImport does not implement "
    "(it shares OPAQUE_FD file descriptors, a Linux path)";
inline constexpr std::string_view semaphore_sharing_blocker = windows ? windows_semaphore_blocker : "";

}  // namespace tpar::inline v0::detail::os
