/* What the C ABI's test programs share (tests/c_api/): checks that count and report,
 * the validation layer's and tpar's messages counted, host-visible buffers and timeline
 * semaphores in plain Vulkan, integer-valued inputs whose sums are exact in f32. Static
 * definitions: each program includes it once. */
#ifndef TPAR_TEST_C_API_SUPPORT_H_
#define TPAR_TEST_C_API_SUPPORT_H_

#include <tpar/tpar.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vulkan/vulkan.h>


/* ---- Checks ------------------------------------------------------------------------ */

static int g_checks, g_failures, g_verbose;

static inline void check_(int ok, const char* expr, const char* file, int line) {
  ++g_checks;
  if (!ok) {
    ++g_failures;
    fprintf(stderr, "%s:%d: CHECK failed: %s\n", file, line, expr);
  }
}
#define CHECK(e) check_(!!(e), #e, __FILE__, __LINE__)

/* `call` must succeed and leave no error message behind. */
static inline int ok_(tpar_result r, const char* expr, const char* file, int line) {
  ++g_checks;
  if (r != TPAR_SUCCESS) {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s returned %s: %s\n", file, line, expr, tpar_result_string(r), tpar_last_error_message());
    return 0;
  }
  if (tpar_last_error_message()[0] != '\0') {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s succeeded but left the message \"%s\"\n", file, line, expr, tpar_last_error_message());
    return 0;
  }
  return 1;
}
#define OK(call) ok_((call), #call, __FILE__, __LINE__)

/* `call` must fail with `want`, and say why. */
static inline void fails_(tpar_result r, tpar_result want, const char* expr, const char* file, int line) {
  const char* message = tpar_last_error_message();
  ++g_checks;
  if (r != want) {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s returned %s (%d), expected %s (%d); message: %s\n", file, line, expr, tpar_result_string(r),
            (int)r, tpar_result_string(want), (int)want, message);
  } else if (message == NULL || message[0] == '\0') {
    ++g_failures;
    fprintf(stderr, "%s:%d: %s failed as expected but left no message\n", file, line, expr);
  } else if (g_verbose) {
    printf("  refused (%s): %s\n", tpar_result_string(r), message);
  }
}
#define FAILS(call, want) fails_((call), (want), #call, __FILE__, __LINE__)

#define REQUIRE(e)                                                     \
  do {                                                                 \
    if (!(e)) {                                                        \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #e); \
      return 0;                                                        \
    }                                                                  \
  } while (0)

static inline double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static inline void section(const char* name) {
  static int checks_before, failures_before;
  static const char* current;
  if (current)
    printf("  %-44s %3d checks, %d failed\n", current, g_checks - checks_before, g_failures - failures_before);
  current = name;
  checks_before = g_checks;
  failures_before = g_failures;
}

/* ---- Validation and log ------------------------------------------------------------ */

static pthread_mutex_t g_log_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_validation = 1; /* the validation layer on (TPAR_TEST_NO_VALIDATION unset) */
static int g_validation_errors, g_layer_self_reports, g_log_warnings, g_log_errors;
static uint32_t g_layer_version;

/* The layer's own state-tracking stall (UNASSIGNED-VkSemaphore-state-timeout, and the
 * -VkQueue- and -VkFence- reports of what waits behind it, before 1.3.296) is a report
 * about itself, not about tpar: counted, never an error (docs/testing.md). */
static inline int is_layer_state_timeout(const char* id) {
  return strcmp(id, "UNASSIGNED-VkSemaphore-state-timeout") == 0 || strcmp(id, "UNASSIGNED-VkQueue-state-timeout") == 0 ||
         strcmp(id, "UNASSIGNED-VkFence-state-timeout") == 0;
}
static inline void on_validation(void* user, VkDebugUtilsMessageSeverityFlagBitsEXT severity, const char* id, const char* text) {
  (void)user;
  if (!(severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)) return;
  pthread_mutex_lock(&g_log_mutex);
  if (is_layer_state_timeout(id) && g_layer_version < VK_MAKE_API_VERSION(0, 1, 3, 296)) {
    ++g_layer_self_reports;
  } else {
    ++g_validation_errors;
    fprintf(stderr, "validation error: %s: %s\n", id, text);
  }
  pthread_mutex_unlock(&g_log_mutex);
}

static inline VKAPI_ATTR VkBool32 VKAPI_CALL on_host_debug(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                   VkDebugUtilsMessageTypeFlagsEXT types,
                                                   const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  (void)types;
  on_validation(user, severity, data->pMessageIdName ? data->pMessageIdName : "", data->pMessage ? data->pMessage : "");
  return VK_FALSE;
}

static inline void on_log(void* user, tpar_log_level level, const char* message) {
  (void)user;
  pthread_mutex_lock(&g_log_mutex);
  if (level >= TPAR_LOG_ERROR) ++g_log_errors;
  else if (level == TPAR_LOG_WARNING) ++g_log_warnings;
  /* Validation errors reach the log too; they are reported (or excused) by on_validation. */
  if (g_verbose || (level >= TPAR_LOG_ERROR && strncmp(message, "validation: ", 12) != 0))
    printf("  tpar log, %s: %s\n", level >= TPAR_LOG_ERROR ? "error" : level == TPAR_LOG_WARNING ? "warning" : "info", message);
  pthread_mutex_unlock(&g_log_mutex);
}

static inline uint32_t validation_layer_version(void) {
  uint32_t n = 0, version = 0;
  VkLayerProperties* layers;
  if (vkEnumerateInstanceLayerProperties(&n, NULL) != VK_SUCCESS || n == 0) return 0;
  layers = calloc(n, sizeof *layers);
  if (layers && vkEnumerateInstanceLayerProperties(&n, layers) == VK_SUCCESS)
    for (uint32_t i = 0; i < n; ++i)
      if (strcmp(layers[i].layerName, "VK_LAYER_KHRONOS_validation") == 0) version = layers[i].specVersion;
  free(layers);
  return version;
}

/* ---- Host-visible buffers and timelines, in plain Vulkan ----------------------------- */

typedef struct host_buffer {
  VkDevice device;
  VkBuffer buffer;
  VkDeviceMemory memory;
  float* data;
  VkDeviceSize size;
} host_buffer;

static inline int buffer_create(host_buffer* b, VkPhysicalDevice physical, VkDevice device, VkDeviceSize size) {
  VkBufferCreateInfo info = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  VkMemoryRequirements req;
  VkPhysicalDeviceMemoryProperties props;
  VkMemoryAllocateInfo alloc = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  uint32_t type = UINT32_MAX;
  void* mapped = NULL;

  memset(b, 0, sizeof *b);
  b->device = device;
  b->size = size;
  info.size = size;
  info.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  info.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  REQUIRE(vkCreateBuffer(device, &info, NULL, &b->buffer) == VK_SUCCESS);
  vkGetBufferMemoryRequirements(device, b->buffer, &req);
  vkGetPhysicalDeviceMemoryProperties(physical, &props);
  for (uint32_t i = 0; i < props.memoryTypeCount && type == UINT32_MAX; ++i)
    if (((req.memoryTypeBits >> i) & 1u) && (props.memoryTypes[i].propertyFlags & want) == want) type = i;
  REQUIRE(type != UINT32_MAX);
  alloc.allocationSize = req.size;
  alloc.memoryTypeIndex = type;
  REQUIRE(vkAllocateMemory(device, &alloc, NULL, &b->memory) == VK_SUCCESS);
  REQUIRE(vkBindBufferMemory(device, b->buffer, b->memory, 0) == VK_SUCCESS);
  REQUIRE(vkMapMemory(device, b->memory, 0, VK_WHOLE_SIZE, 0, &mapped) == VK_SUCCESS);
  b->data = mapped;
  return 1;
}

static inline void buffer_destroy(host_buffer* b) {
  if (b->memory) vkUnmapMemory(b->device, b->memory);
  if (b->buffer) vkDestroyBuffer(b->device, b->buffer, NULL);
  if (b->memory) vkFreeMemory(b->device, b->memory, NULL);
  memset(b, 0, sizeof *b);
}

static inline VkSemaphore timeline_create(VkDevice device, uint64_t initial) {
  VkSemaphoreTypeCreateInfo type = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
  VkSemaphoreCreateInfo info = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
  VkSemaphore s = VK_NULL_HANDLE;
  type.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  type.initialValue = initial;
  info.pNext = &type;
  if (vkCreateSemaphore(device, &info, NULL, &s) != VK_SUCCESS) return VK_NULL_HANDLE;
  return s;
}

static inline VkResult timeline_signal(VkDevice device, VkSemaphore s, uint64_t value) {
  VkSemaphoreSignalInfo info = {VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO};
  info.semaphore = s;
  info.value = value;
  return vkSignalSemaphore(device, &info);
}

static inline VkResult timeline_wait(VkDevice device, VkSemaphore s, uint64_t value, uint64_t timeout_ns) {
  VkSemaphoreWaitInfo info = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
  info.semaphoreCount = 1;
  info.pSemaphores = &s;
  info.pValues = &value;
  return vkWaitSemaphores(device, &info, timeout_ns);
}

/* ---- Data ---------------------------------------------------------------------------- */

enum { MAX_DEV = 4, SMALL = 4096, BIG = 1 << 17, TAIL = 64 };
static const float sentinel = 12345.0f;
static const uint64_t test_timeout_ns = 60ull * 1000 * 1000 * 1000; /* room for the layer's stalls */

/* Integer-valued inputs: every sum is exact in f32 (and, for `small`, in bf16). */
static inline float value(int small, int device, size_t i) {
  if (small) return (float)((int)((i * 7 + (size_t)device * 13) % 41) - 20);
  return (float)((int)((i * 31 + (size_t)device * 17 + 5) % 2001) - 1000);
}

/* Device d's buffer: sentinels before `offset` (in floats) and after count, inputs between. */
static inline void fill(host_buffer* b, int device, size_t offset, size_t count, int small) {
  for (size_t i = 0; i < offset; ++i) b->data[i] = sentinel;
  for (size_t i = 0; i < count; ++i) b->data[offset + i] = value(small, device, i);
  for (size_t i = 0; i < TAIL && offset + count + i < b->size / sizeof(float); ++i) b->data[offset + count + i] = sentinel;
}

/* Every device holds sum over contributing devices, exactly; the sentinels are intact. */
static inline int check_sums(host_buffer* bufs, int n, size_t offset, size_t count, int small, const uint8_t* contributes) {
  int bad = 0;
  for (int d = 0; d < n; ++d) {
    for (size_t i = 0; i < offset; ++i) bad += bufs[d].data[i] != sentinel;
    for (size_t i = 0; i < count; ++i) {
      float want = 0.0f;
      for (int s = 0; s < n; ++s)
        if (!contributes || contributes[s]) want += value(small, s, i);
      if (bufs[d].data[offset + i] != want) {
        if (bad < 5)
          fprintf(stderr, "  device %d value %zu: %g, expected %g\n", d, i, (double)bufs[d].data[offset + i], (double)want);
        ++bad;
      }
    }
    for (size_t i = 0; i < TAIL && offset + count + i < bufs[d].size / sizeof(float); ++i)
      bad += bufs[d].data[offset + count + i] != sentinel;
  }
  return bad == 0;
}

/* Every device's buffer still holds its inputs and sentinels. */
static inline int inputs_intact(host_buffer* bufs, int n, size_t offset, size_t count, int small) {
  int bad = 0;
  for (int d = 0; d < n; ++d) {
    for (size_t i = 0; i < offset; ++i) bad += bufs[d].data[i] != sentinel;
    for (size_t i = 0; i < count; ++i) bad += bufs[d].data[offset + i] != value(small, d, i);
    for (size_t i = 0; i < TAIL && offset + count + i < bufs[d].size / sizeof(float); ++i)
      bad += bufs[d].data[offset + count + i] != sentinel;
  }
  return bad == 0;
}

static inline void make_spans(tpar_buffer_span* spans, host_buffer* bufs, int n, size_t offset_floats, size_t count) {
  for (int d = 0; d < n; ++d) {
    spans[d].buffer = bufs[d].buffer;
    spans[d].offset = offset_floats * sizeof(float);
    spans[d].count = count;
    spans[d].buffer_size = bufs[d].size;
  }
}

/* Runs one call and waits for it; 1 when both succeeded. */
static inline int run(tpar_comm* comm, const tpar_buffer_span* spans, int n, const tpar_allreduce_args* args) {
  tpar_ticket* t = NULL;
  int good = OK(tpar_allreduce(comm, spans, (uint32_t)n, args, &t));
  if (good) good = OK(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT));
  tpar_ticket_free(t);
  return good;
}

#endif /* TPAR_TEST_C_API_SUPPORT_H_ */
