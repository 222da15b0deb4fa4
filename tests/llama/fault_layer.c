// VK_LAYER_TPAR_fault: a Vulkan layer for testing a whole program (llama.cpp) whose Vulkan
// calls tpar's own fault dispatcher (tests/fault/) cannot reach: ggml-vulkan loads its
// functions through a dispatcher of its own. Enabled with VK_LAYER_PATH naming the folder
// of its manifest and VK_INSTANCE_LAYERS=VK_LAYER_TPAR_fault; what it does is set by:
//
//   TPAR_FAULT_SUBMIT_LOST=N   from the N-th vkQueueSubmit of the process on (1-based),
//                              every vkQueueSubmit returns VK_ERROR_DEVICE_LOST without
//                              reaching the driver, as from a device that was lost
//   TPAR_FAULT_LOG_EXTENSIONS=1  each vkCreateDevice prints the device extensions it was
//                              asked for, one line on stderr ("tpar fault layer: device
//                              extensions: A B C")
//   TPAR_FAULT_LOG_SUBMITS=1   when the layer is unloaded (the last instance destroyed, or
//                              the process's end), how many vkQueueSubmit calls it saw
//                              ("tpar fault layer: N vkQueueSubmit calls")
//
// Nothing else is changed: every other call goes down the chain as it came.
#include <vulkan/vk_layer.h>
#include <vulkan/vulkan.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYER_NAME "VK_LAYER_TPAR_fault"
#define EXPORT __attribute__((visibility("default")))

// The next layer's entry points, by dispatch key (the loader's table pointer at the start
// of every dispatchable handle: a device and its queues share it; so do an instance and its
// physical devices).
typedef struct {
  void* key;
  PFN_vkGetInstanceProcAddr gipa;
  PFN_vkDestroyInstance destroy_instance;
} Instance;
typedef struct {
  void* key;
  PFN_vkGetDeviceProcAddr gdpa;
  PFN_vkDestroyDevice destroy_device;
  PFN_vkQueueSubmit queue_submit;
} Device;

enum { max_objects = 64 };
static Instance instances[max_objects];
static Device devices[max_objects];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_ullong submits;

static void* key_of(const void* handle) { return *(void* const*)handle; }

static Instance* find_instance(const void* handle) {
  void* key = key_of(handle);
  Instance* found = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < max_objects; ++i)
    if (instances[i].key == key) found = &instances[i];
  pthread_mutex_unlock(&lock);
  return found;
}
static Device* find_device(const void* handle) {
  void* key = key_of(handle);
  Device* found = NULL;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < max_objects; ++i)
    if (devices[i].key == key) found = &devices[i];
  pthread_mutex_unlock(&lock);
  return found;
}

static unsigned long long lost_from(void) {
  const char* v = getenv("TPAR_FAULT_SUBMIT_LOST");
  return v && *v ? strtoull(v, NULL, 10) : 0;
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateInstance(const VkInstanceCreateInfo* info, const VkAllocationCallbacks* alloc,
                                                           VkInstance* out) {
  VkLayerInstanceCreateInfo* chain = (VkLayerInstanceCreateInfo*)info->pNext;
  while (chain && !(chain->sType == VK_STRUCTURE_TYPE_LOADER_INSTANCE_CREATE_INFO && chain->function == VK_LAYER_LINK_INFO))
    chain = (VkLayerInstanceCreateInfo*)chain->pNext;
  if (!chain) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  chain->u.pLayerInfo = chain->u.pLayerInfo->pNext;
  PFN_vkCreateInstance create = (PFN_vkCreateInstance)gipa(VK_NULL_HANDLE, "vkCreateInstance");
  VkResult r = create(info, alloc, out);
  if (r != VK_SUCCESS) return r;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < max_objects; ++i)
    if (!instances[i].key) {
      instances[i].key = key_of(*out);
      instances[i].gipa = gipa;
      instances[i].destroy_instance = (PFN_vkDestroyInstance)gipa(*out, "vkDestroyInstance");
      break;
    }
  pthread_mutex_unlock(&lock);
  return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyInstance(VkInstance instance, const VkAllocationCallbacks* alloc) {
  Instance* in = find_instance(instance);
  if (!in) return;
  PFN_vkDestroyInstance destroy = in->destroy_instance;
  pthread_mutex_lock(&lock);
  in->key = NULL;
  pthread_mutex_unlock(&lock);
  destroy(instance, alloc);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_CreateDevice(VkPhysicalDevice physical, const VkDeviceCreateInfo* info,
                                                         const VkAllocationCallbacks* alloc, VkDevice* out) {
  VkLayerDeviceCreateInfo* chain = (VkLayerDeviceCreateInfo*)info->pNext;
  while (chain && !(chain->sType == VK_STRUCTURE_TYPE_LOADER_DEVICE_CREATE_INFO && chain->function == VK_LAYER_LINK_INFO))
    chain = (VkLayerDeviceCreateInfo*)chain->pNext;
  if (!chain) return VK_ERROR_INITIALIZATION_FAILED;
  PFN_vkGetInstanceProcAddr gipa = chain->u.pLayerInfo->pfnNextGetInstanceProcAddr;
  PFN_vkGetDeviceProcAddr gdpa = chain->u.pLayerInfo->pfnNextGetDeviceProcAddr;
  chain->u.pLayerInfo = chain->u.pLayerInfo->pNext;
  PFN_vkCreateDevice create = (PFN_vkCreateDevice)gipa(VK_NULL_HANDLE, "vkCreateDevice");
  if (getenv("TPAR_FAULT_LOG_EXTENSIONS")) {
    fprintf(stderr, "tpar fault layer: device extensions:");
    for (uint32_t i = 0; i < info->enabledExtensionCount; ++i) fprintf(stderr, " %s", info->ppEnabledExtensionNames[i]);
    fprintf(stderr, "\n");
  }
  VkResult r = create(physical, info, alloc, out);
  if (r != VK_SUCCESS) return r;
  pthread_mutex_lock(&lock);
  for (int i = 0; i < max_objects; ++i)
    if (!devices[i].key) {
      devices[i].key = key_of(*out);
      devices[i].gdpa = gdpa;
      devices[i].destroy_device = (PFN_vkDestroyDevice)gdpa(*out, "vkDestroyDevice");
      devices[i].queue_submit = (PFN_vkQueueSubmit)gdpa(*out, "vkQueueSubmit");
      break;
    }
  pthread_mutex_unlock(&lock);
  return VK_SUCCESS;
}

static VKAPI_ATTR void VKAPI_CALL layer_DestroyDevice(VkDevice device, const VkAllocationCallbacks* alloc) {
  Device* d = find_device(device);
  if (!d) return;
  PFN_vkDestroyDevice destroy = d->destroy_device;
  pthread_mutex_lock(&lock);
  d->key = NULL;
  pthread_mutex_unlock(&lock);
  destroy(device, alloc);
}

static VKAPI_ATTR VkResult VKAPI_CALL layer_QueueSubmit(VkQueue queue, uint32_t count, const VkSubmitInfo* submits_info,
                                                        VkFence fence) {
  const unsigned long long n = atomic_fetch_add(&submits, 1) + 1;
  const unsigned long long from = lost_from();
  if (from && n >= from) {
    if (n == from) fprintf(stderr, "tpar fault layer: vkQueueSubmit %llu and every later one return VK_ERROR_DEVICE_LOST\n", n);
    return VK_ERROR_DEVICE_LOST;
  }
  Device* d = find_device(queue);
  return d ? d->queue_submit(queue, count, submits_info, fence) : VK_ERROR_DEVICE_LOST;
}

__attribute__((destructor)) static void report(void) {
  if (getenv("TPAR_FAULT_LOG_SUBMITS"))
    fprintf(stderr, "tpar fault layer: %llu vkQueueSubmit calls\n", (unsigned long long)atomic_load(&submits));
}

static PFN_vkVoidFunction intercepted(const char* name) {
  if (!strcmp(name, "vkCreateInstance")) return (PFN_vkVoidFunction)layer_CreateInstance;
  if (!strcmp(name, "vkDestroyInstance")) return (PFN_vkVoidFunction)layer_DestroyInstance;
  if (!strcmp(name, "vkCreateDevice")) return (PFN_vkVoidFunction)layer_CreateDevice;
  if (!strcmp(name, "vkDestroyDevice")) return (PFN_vkVoidFunction)layer_DestroyDevice;
  if (!strcmp(name, "vkQueueSubmit")) return (PFN_vkVoidFunction)layer_QueueSubmit;
  return NULL;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL tpar_fault_GetDeviceProcAddr(VkDevice device, const char* name) {
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)tpar_fault_GetDeviceProcAddr;
  if (!strcmp(name, "vkDestroyDevice") || !strcmp(name, "vkQueueSubmit")) return intercepted(name);
  Device* d = find_device(device);
  return d ? d->gdpa(device, name) : NULL;
}

EXPORT VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL tpar_fault_GetInstanceProcAddr(VkInstance instance, const char* name) {
  if (!strcmp(name, "vkGetInstanceProcAddr")) return (PFN_vkVoidFunction)tpar_fault_GetInstanceProcAddr;
  if (!strcmp(name, "vkGetDeviceProcAddr")) return (PFN_vkVoidFunction)tpar_fault_GetDeviceProcAddr;
  PFN_vkVoidFunction f = intercepted(name);
  if (f) return f;
  if (!instance) return NULL;
  Instance* in = find_instance(instance);
  return in ? in->gipa(instance, name) : NULL;
}
