// The wrappers behind tests/fault/vulkan_faults.hpp. Core functions are resolved through
// the loader's vkGetInstanceProcAddr, whose device-level entry points are trampolines
// that serve every device of every instance; the extension functions tpar loads per
// device through vkGetDeviceProcAddr are kept per device.
#include "fault/vulkan_faults.hpp"

#include <vulkan/vulkan.hpp>

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace tpar_test::fault {

std::string_view to_string(Kind kind) {
  switch (kind) {
    case Kind::create: return "create";
    case Kind::bind: return "bind";
    case Kind::record: return "record";
    case Kind::submit: return "submit";
    case Kind::wait: return "wait";
    case Kind::query: return "query";
    case Kind::signal: return "signal";
    case Kind::external: return "external";
    case Kind::enumerate: return "enumerate";
  }
  return "?";
}

namespace {

PFN_vkGetInstanceProcAddr real_gipa = nullptr;
PFN_vkGetDeviceProcAddr real_gdpa = nullptr;

struct State {
  std::mutex mutex;
  bool armed = false;
  Kind kind = Kind::create;
  VkResult result = VK_SUCCESS;
  std::uint64_t k = 0, seen = 0;
  bool fired = false;
  std::string fired_in;
  std::map<std::string, std::set<std::uint64_t>> live;                      // by object type
  std::map<std::pair<std::string, VkDevice>, PFN_vkVoidFunction> per_device;  // extension functions
};

State& state() {
  static State s;
  return s;
}

std::atomic<std::uint64_t> submit_count{0};

// VK_SUCCESS, or the armed result where this is the armed call.
VkResult inject(Kind kind, const char* name) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  if (!s.armed || s.kind != kind || s.fired) return VK_SUCCESS;
  if (++s.seen != s.k) return VK_SUCCESS;
  s.fired = true;
  s.fired_in = name;
  return s.result;
}

template <class Handle>
std::uint64_t bits(Handle h) {
  if constexpr (std::is_pointer_v<Handle>) return reinterpret_cast<std::uintptr_t>(h);
  else return static_cast<std::uint64_t>(h);
}

template <class Handle>
void created(const char* type, Handle h) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.live[type].insert(bits(h));
}

template <class Handle>
void destroyed(const char* type, Handle h) {
  if (!h) return;
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.live[type].erase(bits(h));
}

// One slot per wrapped function: the real entry point, resolved on first request.
struct Entry {
  const char* name;
  PFN_vkVoidFunction hook;
  PFN_vkVoidFunction real = nullptr;
};

#define REAL(name) reinterpret_cast<PFN_##name>(real_of(#name))
PFN_vkVoidFunction real_of(const char* name);

// ---- Objects: created and destroyed, counted -----------------------------------------

#define DEVICE_OBJECT(Type, CreateFn, DestroyFn, Info)                                                              \
  VKAPI_ATTR VkResult VKAPI_CALL hook_##CreateFn(VkDevice d, const Info* i, const VkAllocationCallbacks* a, Vk##Type* out) { \
    if (const VkResult r = inject(Kind::create, #CreateFn)) return r;                                               \
    const VkResult r = REAL(CreateFn)(d, i, a, out);                                                                \
    if (r == VK_SUCCESS) created(#Type, *out);                                                                      \
    return r;                                                                                                       \
  }                                                                                                                 \
  VKAPI_ATTR void VKAPI_CALL hook_##DestroyFn(VkDevice d, Vk##Type h, const VkAllocationCallbacks* a) {              \
    destroyed(#Type, h);                                                                                            \
    REAL(DestroyFn)(d, h, a);                                                                                       \
  }

DEVICE_OBJECT(Buffer, vkCreateBuffer, vkDestroyBuffer, VkBufferCreateInfo)
DEVICE_OBJECT(DeviceMemory, vkAllocateMemory, vkFreeMemory, VkMemoryAllocateInfo)
DEVICE_OBJECT(Semaphore, vkCreateSemaphore, vkDestroySemaphore, VkSemaphoreCreateInfo)
DEVICE_OBJECT(Fence, vkCreateFence, vkDestroyFence, VkFenceCreateInfo)
DEVICE_OBJECT(CommandPool, vkCreateCommandPool, vkDestroyCommandPool, VkCommandPoolCreateInfo)
DEVICE_OBJECT(DescriptorPool, vkCreateDescriptorPool, vkDestroyDescriptorPool, VkDescriptorPoolCreateInfo)
DEVICE_OBJECT(DescriptorSetLayout, vkCreateDescriptorSetLayout, vkDestroyDescriptorSetLayout, VkDescriptorSetLayoutCreateInfo)
DEVICE_OBJECT(PipelineLayout, vkCreatePipelineLayout, vkDestroyPipelineLayout, VkPipelineLayoutCreateInfo)
DEVICE_OBJECT(ShaderModule, vkCreateShaderModule, vkDestroyShaderModule, VkShaderModuleCreateInfo)
DEVICE_OBJECT(QueryPool, vkCreateQueryPool, vkDestroyQueryPool, VkQueryPoolCreateInfo)
#undef DEVICE_OBJECT

VKAPI_ATTR VkResult VKAPI_CALL hook_vkCreateComputePipelines(VkDevice d, VkPipelineCache cache, uint32_t n,
                                                             const VkComputePipelineCreateInfo* infos,
                                                             const VkAllocationCallbacks* a, VkPipeline* out) {
  if (const VkResult r = inject(Kind::create, "vkCreateComputePipelines")) {
    for (uint32_t i = 0; i < n; ++i) out[i] = VK_NULL_HANDLE;
    return r;
  }
  const VkResult r = REAL(vkCreateComputePipelines)(d, cache, n, infos, a, out);
  for (uint32_t i = 0; i < n; ++i)
    if (out[i]) created("Pipeline", out[i]);
  return r;
}
VKAPI_ATTR void VKAPI_CALL hook_vkDestroyPipeline(VkDevice d, VkPipeline p, const VkAllocationCallbacks* a) {
  destroyed("Pipeline", p);
  REAL(vkDestroyPipeline)(d, p, a);
}

VKAPI_ATTR VkResult VKAPI_CALL hook_vkCreateInstance(const VkInstanceCreateInfo* i, const VkAllocationCallbacks* a, VkInstance* out) {
  if (const VkResult r = inject(Kind::create, "vkCreateInstance")) return r;
  const VkResult r = REAL(vkCreateInstance)(i, a, out);
  if (r == VK_SUCCESS) created("Instance", *out);
  return r;
}
VKAPI_ATTR void VKAPI_CALL hook_vkDestroyInstance(VkInstance instance, const VkAllocationCallbacks* a) {
  destroyed("Instance", instance);
  REAL(vkDestroyInstance)(instance, a);
}

VKAPI_ATTR VkResult VKAPI_CALL hook_vkCreateDevice(VkPhysicalDevice p, const VkDeviceCreateInfo* i, const VkAllocationCallbacks* a,
                                                   VkDevice* out) {
  if (const VkResult r = inject(Kind::create, "vkCreateDevice")) return r;
  const VkResult r = REAL(vkCreateDevice)(p, i, a, out);
  if (r == VK_SUCCESS) created("Device", *out);
  return r;
}
VKAPI_ATTR void VKAPI_CALL hook_vkDestroyDevice(VkDevice d, const VkAllocationCallbacks* a) {
  destroyed("Device", d);
  REAL(vkDestroyDevice)(d, a);
}

VKAPI_ATTR VkResult VKAPI_CALL hook_vkCreateDebugUtilsMessengerEXT(VkInstance instance, const VkDebugUtilsMessengerCreateInfoEXT* i,
                                                                   const VkAllocationCallbacks* a, VkDebugUtilsMessengerEXT* out) {
  if (const VkResult r = inject(Kind::create, "vkCreateDebugUtilsMessengerEXT")) return r;
  const VkResult r = REAL(vkCreateDebugUtilsMessengerEXT)(instance, i, a, out);
  if (r == VK_SUCCESS) created("DebugUtilsMessenger", *out);
  return r;
}
VKAPI_ATTR void VKAPI_CALL hook_vkDestroyDebugUtilsMessengerEXT(VkInstance instance, VkDebugUtilsMessengerEXT m,
                                                                const VkAllocationCallbacks* a) {
  destroyed("DebugUtilsMessenger", m);
  REAL(vkDestroyDebugUtilsMessengerEXT)(instance, m, a);
}

// Freed with their pools: failures injected, not counted.
VKAPI_ATTR VkResult VKAPI_CALL hook_vkAllocateCommandBuffers(VkDevice d, const VkCommandBufferAllocateInfo* i, VkCommandBuffer* out) {
  if (const VkResult r = inject(Kind::create, "vkAllocateCommandBuffers")) return r;
  return REAL(vkAllocateCommandBuffers)(d, i, out);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkAllocateDescriptorSets(VkDevice d, const VkDescriptorSetAllocateInfo* i, VkDescriptorSet* out) {
  if (const VkResult r = inject(Kind::create, "vkAllocateDescriptorSets")) return r;
  return REAL(vkAllocateDescriptorSets)(d, i, out);
}

// ---- Everything else that can fail ------------------------------------------------

VKAPI_ATTR VkResult VKAPI_CALL hook_vkBindBufferMemory(VkDevice d, VkBuffer b, VkDeviceMemory m, VkDeviceSize off) {
  if (const VkResult r = inject(Kind::bind, "vkBindBufferMemory")) return r;
  return REAL(vkBindBufferMemory)(d, b, m, off);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkBeginCommandBuffer(VkCommandBuffer cb, const VkCommandBufferBeginInfo* i) {
  if (const VkResult r = inject(Kind::record, "vkBeginCommandBuffer")) return r;
  return REAL(vkBeginCommandBuffer)(cb, i);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkEndCommandBuffer(VkCommandBuffer cb) {
  if (const VkResult r = inject(Kind::record, "vkEndCommandBuffer")) return r;
  return REAL(vkEndCommandBuffer)(cb);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkResetCommandBuffer(VkCommandBuffer cb, VkCommandBufferResetFlags f) {
  if (const VkResult r = inject(Kind::record, "vkResetCommandBuffer")) return r;
  return REAL(vkResetCommandBuffer)(cb, f);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkQueueSubmit(VkQueue q, uint32_t n, const VkSubmitInfo* s, VkFence f) {
  if (const VkResult r = inject(Kind::submit, "vkQueueSubmit")) return r;
  const VkResult r = REAL(vkQueueSubmit)(q, n, s, f);
  if (r == VK_SUCCESS) ++submit_count;
  return r;
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkWaitSemaphores(VkDevice d, const VkSemaphoreWaitInfo* i, uint64_t timeout) {
  if (const VkResult r = inject(Kind::wait, "vkWaitSemaphores")) return r;
  return REAL(vkWaitSemaphores)(d, i, timeout);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkWaitForFences(VkDevice d, uint32_t n, const VkFence* f, VkBool32 all, uint64_t timeout) {
  if (const VkResult r = inject(Kind::wait, "vkWaitForFences")) return r;
  return REAL(vkWaitForFences)(d, n, f, all, timeout);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkGetSemaphoreCounterValue(VkDevice d, VkSemaphore s, uint64_t* v) {
  if (const VkResult r = inject(Kind::query, "vkGetSemaphoreCounterValue")) return r;
  return REAL(vkGetSemaphoreCounterValue)(d, s, v);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkGetQueryPoolResults(VkDevice d, VkQueryPool p, uint32_t first, uint32_t count, size_t size,
                                                          void* data, VkDeviceSize stride, VkQueryResultFlags flags) {
  if (const VkResult r = inject(Kind::query, "vkGetQueryPoolResults")) return r;
  return REAL(vkGetQueryPoolResults)(d, p, first, count, size, data, stride, flags);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkSignalSemaphore(VkDevice d, const VkSemaphoreSignalInfo* i) {
  if (const VkResult r = inject(Kind::signal, "vkSignalSemaphore")) return r;
  return REAL(vkSignalSemaphore)(d, i);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkEnumeratePhysicalDevices(VkInstance instance, uint32_t* n, VkPhysicalDevice* out) {
  if (const VkResult r = inject(Kind::enumerate, "vkEnumeratePhysicalDevices")) return r;
  return REAL(vkEnumeratePhysicalDevices)(instance, n, out);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkEnumerateDeviceExtensionProperties(VkPhysicalDevice p, const char* layer, uint32_t* n,
                                                                         VkExtensionProperties* out) {
  if (const VkResult r = inject(Kind::enumerate, "vkEnumerateDeviceExtensionProperties")) return r;
  return REAL(vkEnumerateDeviceExtensionProperties)(p, layer, n, out);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkEnumerateInstanceExtensionProperties(const char* layer, uint32_t* n, VkExtensionProperties* out) {
  if (const VkResult r = inject(Kind::enumerate, "vkEnumerateInstanceExtensionProperties")) return r;
  return REAL(vkEnumerateInstanceExtensionProperties)(layer, n, out);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkEnumerateInstanceLayerProperties(uint32_t* n, VkLayerProperties* out) {
  if (const VkResult r = inject(Kind::enumerate, "vkEnumerateInstanceLayerProperties")) return r;
  return REAL(vkEnumerateInstanceLayerProperties)(n, out);
}

// Device extension functions: the real entry point is the device's own.
template <class Fn>
Fn per_device(const char* name, VkDevice d) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  auto it = s.per_device.find({name, d});
  return it == s.per_device.end() ? nullptr : reinterpret_cast<Fn>(it->second);
}

VKAPI_ATTR VkResult VKAPI_CALL hook_vkGetMemoryHostPointerPropertiesEXT(VkDevice d, VkExternalMemoryHandleTypeFlagBits type,
                                                                        const void* p, VkMemoryHostPointerPropertiesEXT* props) {
  if (const VkResult r = inject(Kind::external, "vkGetMemoryHostPointerPropertiesEXT")) return r;
  return per_device<PFN_vkGetMemoryHostPointerPropertiesEXT>("vkGetMemoryHostPointerPropertiesEXT", d)(d, type, p, props);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkGetSemaphoreFdKHR(VkDevice d, const VkSemaphoreGetFdInfoKHR* i, int* fd) {
  if (const VkResult r = inject(Kind::external, "vkGetSemaphoreFdKHR")) return r;
  return per_device<PFN_vkGetSemaphoreFdKHR>("vkGetSemaphoreFdKHR", d)(d, i, fd);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkImportSemaphoreFdKHR(VkDevice d, const VkImportSemaphoreFdInfoKHR* i) {
  if (const VkResult r = inject(Kind::external, "vkImportSemaphoreFdKHR")) return r;
  return per_device<PFN_vkImportSemaphoreFdKHR>("vkImportSemaphoreFdKHR", d)(d, i);
}
VKAPI_ATTR VkResult VKAPI_CALL hook_vkGetCalibratedTimestampsEXT(VkDevice d, uint32_t n, const VkCalibratedTimestampInfoEXT* i,
                                                                 uint64_t* ts, uint64_t* deviation) {
  if (const VkResult r = inject(Kind::query, "vkGetCalibratedTimestampsEXT")) return r;
  return per_device<PFN_vkGetCalibratedTimestampsEXT>("vkGetCalibratedTimestampsEXT", d)(d, n, i, ts, deviation);
}

#define ENTRY(name) Entry{#name, reinterpret_cast<PFN_vkVoidFunction>(&hook_##name)}
Entry entries[] = {
    ENTRY(vkCreateBuffer), ENTRY(vkDestroyBuffer), ENTRY(vkAllocateMemory), ENTRY(vkFreeMemory),
    ENTRY(vkCreateSemaphore), ENTRY(vkDestroySemaphore), ENTRY(vkCreateFence), ENTRY(vkDestroyFence),
    ENTRY(vkCreateCommandPool), ENTRY(vkDestroyCommandPool), ENTRY(vkCreateDescriptorPool), ENTRY(vkDestroyDescriptorPool),
    ENTRY(vkCreateDescriptorSetLayout), ENTRY(vkDestroyDescriptorSetLayout), ENTRY(vkCreatePipelineLayout),
    ENTRY(vkDestroyPipelineLayout), ENTRY(vkCreateShaderModule), ENTRY(vkDestroyShaderModule), ENTRY(vkCreateQueryPool),
    ENTRY(vkDestroyQueryPool), ENTRY(vkCreateComputePipelines), ENTRY(vkDestroyPipeline), ENTRY(vkCreateInstance),
    ENTRY(vkDestroyInstance), ENTRY(vkCreateDevice), ENTRY(vkDestroyDevice), ENTRY(vkCreateDebugUtilsMessengerEXT),
    ENTRY(vkDestroyDebugUtilsMessengerEXT), ENTRY(vkAllocateCommandBuffers), ENTRY(vkAllocateDescriptorSets),
    ENTRY(vkBindBufferMemory), ENTRY(vkBeginCommandBuffer), ENTRY(vkEndCommandBuffer), ENTRY(vkResetCommandBuffer),
    ENTRY(vkQueueSubmit), ENTRY(vkWaitSemaphores), ENTRY(vkWaitForFences), ENTRY(vkGetSemaphoreCounterValue),
    ENTRY(vkGetQueryPoolResults), ENTRY(vkSignalSemaphore), ENTRY(vkEnumeratePhysicalDevices),
    ENTRY(vkEnumerateDeviceExtensionProperties), ENTRY(vkEnumerateInstanceExtensionProperties),
    ENTRY(vkEnumerateInstanceLayerProperties),
};
#undef ENTRY

// Extension functions tpar loads per device (detail::DeviceExtensionFns).
#define DEVICE_ENTRY(name) Entry{#name, reinterpret_cast<PFN_vkVoidFunction>(&hook_##name)}
Entry device_entries[] = {
    DEVICE_ENTRY(vkGetMemoryHostPointerPropertiesEXT),
    DEVICE_ENTRY(vkGetSemaphoreFdKHR),
    DEVICE_ENTRY(vkImportSemaphoreFdKHR),
    DEVICE_ENTRY(vkGetCalibratedTimestampsEXT),
};
#undef DEVICE_ENTRY

Entry* find(Entry* begin, Entry* end, const char* name) {
  for (Entry* e = begin; e != end; ++e)
    if (!std::strcmp(e->name, name)) return e;
  return nullptr;
}

PFN_vkVoidFunction real_of(const char* name) {
  Entry* e = find(std::begin(entries), std::end(entries), name);
  return e ? e->real : nullptr;
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL hook_gdpa(VkDevice device, const char* name);

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL hook_gipa(VkInstance instance, const char* name) {
  if (!std::strcmp(name, "vkGetInstanceProcAddr")) return reinterpret_cast<PFN_vkVoidFunction>(&hook_gipa);
  if (!std::strcmp(name, "vkGetDeviceProcAddr")) {
    if (!real_gdpa) real_gdpa = reinterpret_cast<PFN_vkGetDeviceProcAddr>(real_gipa(instance, name));
    return real_gdpa ? reinterpret_cast<PFN_vkVoidFunction>(&hook_gdpa) : nullptr;
  }
  if (Entry* e = find(std::begin(entries), std::end(entries), name)) {
    // Global functions (vkCreateInstance, vkEnumerateInstance*) come with no instance;
    // the others are trampolines of the loader, the same for every instance.
    if (!e->real) e->real = real_gipa(instance, name);
    return e->real ? e->hook : nullptr;
  }
  return real_gipa(instance, name);
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL hook_gdpa(VkDevice device, const char* name) {
  if (!std::strcmp(name, "vkGetDeviceProcAddr")) return reinterpret_cast<PFN_vkVoidFunction>(&hook_gdpa);
  if (Entry* e = find(std::begin(device_entries), std::end(device_entries), name)) {
    const PFN_vkVoidFunction real = real_gdpa(device, name);
    if (!real) return nullptr;
    auto& s = state();
    std::lock_guard lock(s.mutex);
    s.per_device[{name, device}] = real;
    return e->hook;
  }
  if (Entry* e = find(std::begin(entries), std::end(entries), name); e && e->real) return e->hook;
  return real_gdpa(device, name);
}

}  // namespace

bool install(std::string* why) {
  static std::once_flag once;
  static bool ok = false;
  static std::string reason;
  std::call_once(once, [] {
    void* lib = ::dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = ::dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      reason = "cannot load the Vulkan loader (libvulkan.so.1)";
      return;
    }
    real_gipa = reinterpret_cast<PFN_vkGetInstanceProcAddr>(::dlsym(lib, "vkGetInstanceProcAddr"));
    if (!real_gipa) {
      reason = "the Vulkan loader exports no vkGetInstanceProcAddr";
      return;
    }
    VULKAN_HPP_DEFAULT_DISPATCHER.init(&hook_gipa);
    ok = true;
  });
  if (why) *why = reason;
  return ok;
}

void arm(Kind kind, VkResult result, std::uint64_t k) {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.armed = true;
  s.kind = kind;
  s.result = result;
  s.k = k;
  s.seen = 0;
  s.fired = false;
  s.fired_in.clear();
}

void disarm() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  s.armed = false;
}

bool fired() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  return s.fired;
}

std::string fired_in() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  return s.fired_in;
}

std::uint64_t submits() { return submit_count.load(); }

std::string live_objects() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  std::string out;
  for (const auto& [type, handles] : s.live)
    if (!handles.empty()) out += (out.empty() ? "" : ", ") + type + ": " + std::to_string(handles.size());
  return out;
}

std::size_t live_count() {
  auto& s = state();
  std::lock_guard lock(s.mutex);
  std::size_t n = 0;
  for (const auto& [type, handles] : s.live) n += handles.size();
  return n;
}

}  // namespace tpar_test::fault
