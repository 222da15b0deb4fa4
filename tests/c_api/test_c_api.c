/* tpar's C ABI, used from C: devices a host adopts and devices tpar creates (lavapipe
 * virtual devices, validation layer on), buffers made with plain Vulkan calls,
 * AllReduce calls checked exactly (integer-valued f32), ready and done points, a
 * device that contributes nothing, count 0, a timeout that fails the communicator, and
 * bad input of every kind refused with a status and a message. Exit code 0 only when
 * every check passed and the validation layer reported no error.
 *
 * TPAR_C_API_VERBOSE=1 prints the message of every refusal. As in the rest of the suite,
 * TPAR_TEST_NO_VALIDATION=1 leaves the validation layer off (for GPU runs: see
 * docs/testing.md); the virtual devices are then those of the first GPU, if any. */
#define _POSIX_C_SOURCE 200809L

#include "support.h"

/* ---- Sections ---------------------------------------------------------------------- */

static void test_basics(void) {
  int major = -1, minor = -1, patch = -1;
  char version[64];
  tpar_group* group = (tpar_group*)&major; /* garbage that must be overwritten */
  tpar_group_options go;
  uint32_t count = 7;

  section("version, result strings, null pointers");
  tpar_version(&major, &minor, &patch);
  tpar_version(NULL, NULL, NULL);
  snprintf(version, sizeof version, "%d.%d.%d", major, minor, patch);
  CHECK(major >= 0 && minor >= 0 && patch >= 0);
  CHECK(strcmp(version, tpar_version_string()) == 0);
  CHECK(strcmp(tpar_result_string(TPAR_SUCCESS), "success") == 0);
  for (int r = TPAR_ERROR_NO_LOADER; r <= TPAR_ERROR_ABORTED; ++r) {
    CHECK(tpar_result_string((tpar_result)r)[0] != '\0');
    CHECK(strcmp(tpar_result_string((tpar_result)r), tpar_result_string((tpar_result)(r + 1))) != 0);
  }
  CHECK(strcmp(tpar_result_string(TPAR_ERROR_INTERNAL), "internal error") == 0);
  CHECK(tpar_result_string((tpar_result)4242)[0] != '\0');

  FAILS(tpar_group_create(NULL, NULL), TPAR_ERROR_INVALID_ARGUMENT);
  CHECK(tpar_last_error_vk_result() == VK_SUCCESS);
  FAILS(tpar_group_device_count(NULL, &count), TPAR_ERROR_INVALID_ARGUMENT);
  CHECK(count == 0);
  FAILS(tpar_comm_create(NULL, NULL, NULL), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_comm_status(NULL), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_allreduce(NULL, NULL, 0, NULL, NULL), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_ticket_wait(NULL, 0), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_ticket_ready(NULL, &count), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_ticket_device_count(NULL, &count), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_group_adopt(NULL, 2, &group), TPAR_ERROR_INVALID_ARGUMENT);
  CHECK(group == NULL);
  tpar_group_destroy(NULL);
  tpar_comm_destroy(NULL);
  tpar_ticket_free(NULL);

  memset(&go, 0, sizeof go);
  go.reserved[3] = 1;
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_INVALID_ARGUMENT);
  memset(&go, 0, sizeof go);
  go.index_count = 2; /* indices NULL */
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_INVALID_ARGUMENT);
  memset(&go, 0, sizeof go);
  go.required_extension_count = 1; /* list NULL */
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_INVALID_ARGUMENT);
  CHECK(group == NULL);
}

/* What a host's queue lock records. */
typedef struct host_queue {
  pthread_mutex_t mutex;
  int locks, unlocks;
} host_queue;

static void host_lock(void* user) {
  host_queue* q = user;
  pthread_mutex_lock(&q->mutex);
  ++q->locks;
}

static void host_unlock(void* user) {
  host_queue* q = user;
  ++q->unlocks;
  pthread_mutex_unlock(&q->mutex);
}

/* A host that owns its instance (validation on) and devices; tpar adopts them. */
static int test_adopt(void) {
  enum { N = 2, COUNT = 1000 };
  const char* layers[] = {"VK_LAYER_KHRONOS_validation"};
  const char* instance_exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  const char* device_exts[] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
  VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO};
  VkInstanceCreateInfo ii = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  VkDebugUtilsMessengerCreateInfoEXT mi = {VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  VkInstance instance = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  PFN_vkCreateDebugUtilsMessengerEXT create_messenger;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger;
  VkPhysicalDevice physicals[8];
  uint32_t physical_count = 8, family_count = 16, family = UINT32_MAX, ext_count = 0;
  VkQueueFamilyProperties families[16];
  VkExtensionProperties* exts;
  int host_import = 0;
  VkPhysicalDeviceVulkan12Features f12 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qi = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  VkDeviceCreateInfo di = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  VkDevice devices[N] = {0};
  VkQueue queues[N] = {0};
  host_queue locks[N];
  tpar_adopted_device adopted[N];
  tpar_group* group = NULL;
  tpar_comm* comm = NULL;
  tpar_comm_options co;
  tpar_comm_info info;
  tpar_device_info dev_info;
  host_buffer bufs[N];
  tpar_buffer_span spans[N];
  uint32_t count = 0;

  section("adopt: devices the host owns");
  app.pApplicationName = "tpar C host";
  app.apiVersion = VK_API_VERSION_1_2;
  ii.pApplicationInfo = &app;
  ii.enabledLayerCount = g_validation ? 1 : 0;
  ii.ppEnabledLayerNames = layers;
  ii.enabledExtensionCount = 1;
  ii.ppEnabledExtensionNames = instance_exts;
  REQUIRE(vkCreateInstance(&ii, NULL, &instance) == VK_SUCCESS);
  create_messenger = (PFN_vkCreateDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkCreateDebugUtilsMessengerEXT");
  destroy_messenger = (PFN_vkDestroyDebugUtilsMessengerEXT)vkGetInstanceProcAddr(instance, "vkDestroyDebugUtilsMessengerEXT");
  REQUIRE(create_messenger && destroy_messenger);
  mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
  mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT;
  mi.pfnUserCallback = on_host_debug;
  REQUIRE(create_messenger(instance, &mi, NULL, &messenger) == VK_SUCCESS);

  REQUIRE(vkEnumeratePhysicalDevices(instance, &physical_count, physicals) >= VK_SUCCESS && physical_count > 0);
  vkGetPhysicalDeviceQueueFamilyProperties(physicals[0], &family_count, families);
  for (uint32_t f = 0; f < family_count && family == UINT32_MAX; ++f)
    if (families[f].queueFlags & VK_QUEUE_COMPUTE_BIT) family = f;
  REQUIRE(family != UINT32_MAX);
  vkEnumerateDeviceExtensionProperties(physicals[0], NULL, &ext_count, NULL);
  exts = calloc(ext_count ? ext_count : 1, sizeof *exts);
  REQUIRE(exts);
  vkEnumerateDeviceExtensionProperties(physicals[0], NULL, &ext_count, exts);
  for (uint32_t e = 0; e < ext_count; ++e) host_import |= strcmp(exts[e].extensionName, device_exts[0]) == 0;
  free(exts);

  f12.timelineSemaphore = VK_TRUE;
  qi.queueFamilyIndex = family;
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  di.pNext = &f12;
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  di.enabledExtensionCount = host_import ? 1 : 0;
  di.ppEnabledExtensionNames = device_exts;
  memset(adopted, 0, sizeof adopted);
  for (int d = 0; d < N; ++d) {
    REQUIRE(vkCreateDevice(physicals[0], &di, NULL, &devices[d]) == VK_SUCCESS);
    vkGetDeviceQueue(devices[d], family, 0, &queues[d]);
    pthread_mutex_init(&locks[d].mutex, NULL);
    locks[d].locks = locks[d].unlocks = 0;
    adopted[d].instance = instance;
    adopted[d].physical = physicals[0];
    adopted[d].device = devices[d];
    adopted[d].compute_queue = queues[d];
    adopted[d].compute_family = family;
    adopted[d].compute_lock.lock = host_lock;
    adopted[d].compute_lock.unlock = host_unlock;
    adopted[d].compute_lock.user = &locks[d];
    adopted[d].enabled_extensions = device_exts;
    adopted[d].enabled_extension_count = host_import ? 1 : 0;
    adopted[d].get_instance_proc_addr = vkGetInstanceProcAddr;
  }

  /* Bad input first: nothing is adopted. */
  FAILS(tpar_group_adopt(adopted, 0, &group), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_group_adopt(adopted, 33, &group), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_group_adopt(adopted, N, NULL), TPAR_ERROR_INVALID_ARGUMENT);
  {
    tpar_adopted_device bad[N];
    const char* null_name[] = {NULL};
    memcpy(bad, adopted, sizeof bad);
    bad[1].device = VK_NULL_HANDLE;
    FAILS(tpar_group_adopt(bad, N, &group), TPAR_ERROR_INVALID_ARGUMENT);
    memcpy(bad, adopted, sizeof bad);
    bad[0].compute_lock.unlock = NULL; /* a lock without its unlock */
    FAILS(tpar_group_adopt(bad, N, &group), TPAR_ERROR_INVALID_ARGUMENT);
    memcpy(bad, adopted, sizeof bad);
    bad[1].enabled_extensions = NULL;
    bad[1].enabled_extension_count = 1;
    FAILS(tpar_group_adopt(bad, N, &group), TPAR_ERROR_INVALID_ARGUMENT);
    bad[1].enabled_extensions = null_name;
    FAILS(tpar_group_adopt(bad, N, &group), TPAR_ERROR_INVALID_ARGUMENT);
    memcpy(bad, adopted, sizeof bad);
    bad[0].reserved[0] = 1;
    FAILS(tpar_group_adopt(bad, N, &group), TPAR_ERROR_INVALID_ARGUMENT);
    CHECK(group == NULL);
  }

  if (OK(tpar_group_adopt(adopted, N, &group))) {
    CHECK(OK(tpar_group_device_count(group, &count)) && count == N);
    CHECK(OK(tpar_group_device_info(group, 1, &dev_info)) && dev_info.device == devices[1] && !dev_info.owned &&
          dev_info.compute_queue == queues[1] && dev_info.external_memory_host == (uint32_t)host_import);
    memset(&co, 0, sizeof co);
    co.timeout_ns = test_timeout_ns;
    if (OK(tpar_comm_create(group, &co, &comm))) {
      tpar_group_destroy(group); /* the communicator keeps the group alive */
      group = NULL;
      for (int d = 0; d < N; ++d) {
        REQUIRE(buffer_create(&bufs[d], physicals[0], devices[d], (COUNT + TAIL) * sizeof(float)));
        fill(&bufs[d], d, 0, COUNT, 0);
      }
      make_spans(spans, bufs, N, 0, COUNT);
      CHECK(run(comm, spans, N, NULL));
      CHECK(check_sums(bufs, N, 0, COUNT, 0, NULL));
      CHECK(OK(tpar_comm_get_info(comm, &info)) && info.device_count == N && info.sync_reason[0] != '\0');
      tpar_comm_destroy(comm);
      for (int d = 0; d < N; ++d) buffer_destroy(&bufs[d]);
    }
    tpar_group_destroy(group);
  }
  /* tpar locked the host's queues through its hooks, in pairs, and destroyed nothing. */
  for (int d = 0; d < N; ++d) {
    VkSemaphore s = timeline_create(devices[d], 0);
    CHECK(locks[d].locks > 0 && locks[d].locks == locks[d].unlocks);
    CHECK(s != VK_NULL_HANDLE);
    if (s) vkDestroySemaphore(devices[d], s, NULL);
    CHECK(vkDeviceWaitIdle(devices[d]) == VK_SUCCESS);
    vkDestroyDevice(devices[d], NULL);
    pthread_mutex_destroy(&locks[d].mutex);
  }
  destroy_messenger(instance, messenger, NULL);
  vkDestroyInstance(instance, NULL);
  return 1;
}

static void test_selection_errors(void) {
  tpar_group_options go;
  tpar_group* group = NULL;
  const uint32_t index = 99;
  const char* fake_ext[] = {"VK_TPAR_no_such_extension"};

  section("device selection errors");
  memset(&go, 0, sizeof go);
  go.name = "no-such-device-anywhere";
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_NO_MATCH);
  memset(&go, 0, sizeof go);
  go.indices = &index;
  go.index_count = 1;
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_NO_MATCH);
  memset(&go, 0, sizeof go);
  go.virtual_count = 1000;
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_INVALID_ARGUMENT);
  memset(&go, 0, sizeof go);
  go.virtual_count = 1;
  go.required_extensions = fake_ext;
  go.required_extension_count = 1;
  FAILS(tpar_group_create(&go, &group), TPAR_ERROR_MISSING_FEATURE);
  CHECK(group == NULL);
}

/* Devices tpar creates: n virtual devices (lavapipe without a GPU), validation on. */
static int test_created(int n) {
  tpar_group_options go;
  tpar_group* group = NULL;
  tpar_device_info infos[MAX_DEV];
  host_buffer bufs[MAX_DEV];
  tpar_buffer_span spans[MAX_DEV + 1];
  tpar_comm_options co;
  tpar_comm *comm = NULL, *ring = NULL;
  tpar_comm_info info;
  tpar_allreduce_args args;
  tpar_ticket* t = NULL;
  uint32_t count = 0, ready = 7;
  size_t off = 0; /* span offset, in floats */

  section("create: virtual devices");
  memset(&go, 0, sizeof go);
  go.virtual_count = (uint32_t)n;
  go.validation = g_validation;
  /* The layer's core checks alone: synchronization validation checks the command buffers
   * tpar records, whose shapes the C++ suite records under it (allreduce/every batch
   * shape...); here its layer before 1.3.296 would stall for 10 s at a time when
   * ProxyBridge's host signals meet this program's waits (docs/testing.md). */
  go.no_sync_validation = 1;
  go.on_validation = on_validation;
  go.application_name = "tpar C test";
  REQUIRE(OK(tpar_group_create(&go, &group)));
  REQUIRE(OK(tpar_group_device_count(group, &count)) && count == (uint32_t)n);
  for (int d = 0; d < n; ++d) {
    REQUIRE(OK(tpar_group_device_info(group, (uint32_t)d, &infos[d])));
    CHECK(infos[d].index == (uint32_t)d && infos[d].device && infos[d].physical && infos[d].compute_queue);
    CHECK(infos[d].owned && infos[d].is_virtual && infos[d].name[0] != '\0');
    CHECK(infos[d].min_storage_buffer_offset_alignment > 0 && infos[d].min_storage_buffer_offset_alignment <= 256);
  }
  {
    tpar_device_info scratch;
    FAILS(tpar_group_device_info(group, (uint32_t)n, &scratch), TPAR_ERROR_INVALID_ARGUMENT);
    CHECK(scratch.device == VK_NULL_HANDLE); /* outputs are cleared on failure */
  }
  FAILS(tpar_group_device_info(group, 0, NULL), TPAR_ERROR_INVALID_ARGUMENT);
  /* An offset that is a multiple of the alignment and of 4: the span starts mid-buffer. */
  off = (size_t)infos[0].min_storage_buffer_offset_alignment;
  for (int d = 0; d < n; ++d)
    REQUIRE(buffer_create(&bufs[d], infos[d].physical, infos[d].device, (off + BIG + TAIL) * sizeof(float)));

  memset(&co, 0, sizeof co);
  co.timeout_ns = test_timeout_ns;
  REQUIRE(OK(tpar_comm_create(group, &co, &comm)));
  CHECK(OK(tpar_comm_get_info(comm, &info)) && info.device_count == (uint32_t)n &&
        (info.sync == TPAR_SYNC_NATIVE || info.sync == TPAR_SYNC_PROXY) && info.sync_reason[0] != '\0' &&
        strcmp(info.last_algorithm, "") == 0 && info.last_wire == TPAR_WIRE_AUTO);
  printf("  %d x %s; sync %s: %s\n", n, infos[0].name, info.sync == TPAR_SYNC_NATIVE ? "NativeImport" : "ProxyBridge",
         info.sync_reason);

  section("allreduce: sums, done points, ready");
  for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
  make_spans(spans, bufs, n, off, SMALL);
  if (OK(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t))) {
    CHECK(OK(tpar_ticket_device_count(t, &count)) && count == (uint32_t)n);
    for (int d = 0; d < n; ++d) {
      tpar_timeline_point p = {VK_NULL_HANDLE, 0};
      CHECK(OK(tpar_ticket_done(t, (uint32_t)d, &p)) && p.semaphore != VK_NULL_HANDLE && p.value > 0);
    }
    FAILS(tpar_ticket_done(t, (uint32_t)n, &(tpar_timeline_point){0}), TPAR_ERROR_INVALID_ARGUMENT);
    FAILS(tpar_ticket_done(t, 0, NULL), TPAR_ERROR_INVALID_ARGUMENT);
    FAILS(tpar_ticket_ready(t, NULL), TPAR_ERROR_INVALID_ARGUMENT);
    CHECK(OK(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT)));
    CHECK(OK(tpar_ticket_ready(t, &ready)) && ready == 1);
    CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));
    CHECK(OK(tpar_comm_get_info(comm, &info)) && strcmp(info.last_algorithm, "oneshot") == 0 &&
          info.last_wire == TPAR_WIRE_F32 && info.staging_bytes > 0);
  }
  tpar_ticket_free(t);
  t = NULL;

  /* A device that contributes nothing: its buffer (garbage here) counts as zeros. */
  {
    uint8_t contributes[MAX_DEV];
    for (int d = 0; d < n; ++d) {
      contributes[d] = d != 1;
      fill(&bufs[d], d, off, SMALL, 0);
    }
    for (size_t i = 0; i < SMALL; ++i) bufs[1].data[off + i] = 1e30f;
    memset(&args, 0, sizeof args);
    args.contributes = contributes;
    args.contributes_count = (uint32_t)n;
    CHECK(run(comm, spans, n, &args));
    CHECK(check_sums(bufs, n, off, SMALL, 0, contributes));
  }

  /* Count 0: a no-op that still returns a ticket; nothing is touched. */
  for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
  make_spans(spans, bufs, n, off, 0);
  CHECK(run(comm, spans, n, NULL));
  CHECK(OK(tpar_comm_get_info(comm, &info)) && strcmp(info.last_algorithm, "none") == 0);
  CHECK(inputs_intact(bufs, n, off, SMALL, 0));

  /* A per-call wire: bf16 carries small integers exactly. */
  for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 1);
  make_spans(spans, bufs, n, off, SMALL);
  memset(&args, 0, sizeof args);
  args.wire = TPAR_WIRE_BF16;
  CHECK(run(comm, spans, n, &args));
  CHECK(check_sums(bufs, n, off, SMALL, 1, NULL));
  CHECK(OK(tpar_comm_get_info(comm, &info)) && info.last_wire == TPAR_WIRE_BF16);

  /* Ready points reached by the host's own GPU work (vkCmdFillBuffer with 2.0f, submitted
   * through tpar's queue lock); the host then waits on the done points with Vulkan. */
  {
    VkSemaphore sems[MAX_DEV] = {0};
    VkCommandPool pools[MAX_DEV] = {0};
    tpar_timeline_point points[MAX_DEV];
    int setup = 1;
    for (int d = 0; d < n && setup; ++d) {
      VkCommandPoolCreateInfo pi = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
      VkCommandBufferAllocateInfo ai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
      VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
      VkTimelineSemaphoreSubmitInfo ts = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
      VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO};
      VkCommandBuffer cb = VK_NULL_HANDLE;
      const uint64_t one = 1;
      const uint32_t two_f32 = 0x40000000u; /* 2.0f */
      fill(&bufs[d], d, off, SMALL, 0);
      sems[d] = timeline_create(infos[d].device, 0);
      pi.queueFamilyIndex = infos[d].compute_family;
      setup = sems[d] && vkCreateCommandPool(infos[d].device, &pi, NULL, &pools[d]) == VK_SUCCESS;
      ai.commandPool = pools[d];
      ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
      ai.commandBufferCount = 1;
      bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
      setup = setup && vkAllocateCommandBuffers(infos[d].device, &ai, &cb) == VK_SUCCESS &&
              vkBeginCommandBuffer(cb, &bi) == VK_SUCCESS;
      if (!setup) break;
      vkCmdFillBuffer(cb, bufs[d].buffer, off * sizeof(float), SMALL * sizeof(float), two_f32);
      setup = vkEndCommandBuffer(cb) == VK_SUCCESS;
      ts.signalSemaphoreValueCount = 1;
      ts.pSignalSemaphoreValues = &one;
      si.pNext = &ts;
      si.commandBufferCount = 1;
      si.pCommandBuffers = &cb;
      si.signalSemaphoreCount = 1;
      si.pSignalSemaphores = &sems[d];
      setup = setup && OK(tpar_group_queue_submit(group, (uint32_t)d, 1, &si, VK_NULL_HANDLE));
      points[d].semaphore = sems[d];
      points[d].value = 1;
    }
    CHECK(setup);
    FAILS(tpar_group_queue_submit(group, (uint32_t)n, 0, NULL, VK_NULL_HANDLE), TPAR_ERROR_INVALID_ARGUMENT);
    FAILS(tpar_group_queue_submit(group, 0, 1, NULL, VK_NULL_HANDLE), TPAR_ERROR_INVALID_ARGUMENT);
    memset(&args, 0, sizeof args);
    args.ready = points;
    args.ready_count = (uint32_t)n;
    if (setup && OK(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t))) {
      int all = 1;
      for (int d = 0; d < n; ++d) {
        tpar_timeline_point p = {VK_NULL_HANDLE, 0};
        all &= OK(tpar_ticket_done(t, (uint32_t)d, &p)) && timeline_wait(infos[d].device, p.semaphore, p.value, test_timeout_ns) == VK_SUCCESS;
      }
      CHECK(all);
      for (int d = 0; d < n; ++d)
        for (size_t i = 0; i < SMALL; ++i)
          if (bufs[d].data[off + i] != 2.0f * (float)n) {
            CHECK(bufs[d].data[off + i] == 2.0f * (float)n);
            break;
          }
      CHECK(OK(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT)));
    }
    tpar_ticket_free(t);
    t = NULL;

    /* A ready point the host signals later: nothing finishes before it. */
    for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
    for (int d = 0; d < n; ++d) points[d].semaphore = VK_NULL_HANDLE;
    points[0].semaphore = sems[0];
    points[0].value = 2;
    if (setup && OK(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t))) {
      CHECK(OK(tpar_ticket_ready(t, &ready)) && ready == 0);
      CHECK(timeline_signal(infos[0].device, sems[0], 2) == VK_SUCCESS);
      CHECK(OK(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT)));
      CHECK(OK(tpar_ticket_ready(t, &ready)) && ready == 1);
      CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));
    }
    tpar_ticket_free(t);
    t = NULL;
    for (int d = 0; d < n; ++d) {
      if (pools[d]) vkDestroyCommandPool(infos[d].device, pools[d], NULL);
      if (sems[d]) vkDestroySemaphore(infos[d].device, sems[d], NULL);
    }
  }

  section("allreduce: ChunkedRing, 512 KiB");
  memset(&co, 0, sizeof co);
  co.timeout_ns = test_timeout_ns;
  co.algo = TPAR_ALGO_RING;
  co.wire = TPAR_WIRE_F32;
  if (OK(tpar_comm_create(group, &co, &ring))) {
    for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, BIG, 0);
    make_spans(spans, bufs, n, off, BIG);
    CHECK(run(ring, spans, n, NULL));
    CHECK(check_sums(bufs, n, off, BIG, 0, NULL));
    CHECK(OK(tpar_comm_get_info(ring, &info)) && strcmp(info.last_algorithm, "ring") == 0 && info.last_wire == TPAR_WIRE_F32);
  }

  section("allreduce: the relay (TPAR_ALGO_RELAY)");
  {
    tpar_comm* relay = NULL;
    memset(&co, 0, sizeof co);
    co.timeout_ns = test_timeout_ns;
    co.algo = TPAR_ALGO_RELAY;
    co.relay_max_bytes = 128 * 1024;
    if (OK(tpar_comm_create(group, &co, &relay))) {
      for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
      make_spans(spans, bufs, n, off, SMALL);
      CHECK(run(relay, spans, n, NULL));
      CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));
      CHECK(OK(tpar_comm_get_info(relay, &info)) && strcmp(info.last_algorithm, "relay") == 0 &&
            info.last_wire == TPAR_WIRE_F32);
      tpar_comm_destroy(relay);
    }
  }

  section("allreduce: deferred calls, submitted by a flush or by a wait");
  for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
  make_spans(spans, bufs, n, off, SMALL);
  memset(&args, 0, sizeof args);
  args.flags = TPAR_ALLREDUCE_DEFER;
  if (OK(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t))) {
    CHECK(OK(tpar_ticket_ready(t, &ready)) && ready == 0);
    CHECK(inputs_intact(bufs, n, off, SMALL, 0)); /* held back: nothing ran */
    CHECK(OK(tpar_comm_flush(comm)));
    CHECK(OK(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT)));
    CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));
  }
  tpar_ticket_free(t);
  t = NULL;
  for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
  if (OK(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t))) {
    CHECK(OK(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT))); /* submits it */
    CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));
  }
  tpar_ticket_free(t);
  t = NULL;
  CHECK(OK(tpar_comm_flush(comm))); /* nothing deferred: a no-op */
  FAILS(tpar_comm_flush(NULL), TPAR_ERROR_INVALID_ARGUMENT);
  args.flags = 0x2u;
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
  CHECK(t == NULL);
  args.flags = 0;
  args.reserved32 = 1;
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);

  section("bad input: refused, nothing changed");
  for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
  make_spans(spans, bufs, n, off, SMALL);
  spans[n] = spans[0];
  t = (tpar_ticket*)&count; /* garbage that a refusal must reset */
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n - 1, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT); /* too few spans */
  CHECK(t == NULL);
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n + 1, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT); /* too many */
  FAILS(tpar_allreduce(comm, spans, 0, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_allreduce(comm, NULL, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, NULL), TPAR_ERROR_INVALID_ARGUMENT);
  FAILS(tpar_allreduce(NULL, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  spans[1].count = SMALL - 1; /* counts differ */
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  spans[1].count = SMALL;
  spans[n - 1].offset = 2; /* not a multiple of 4, nor of the alignment */
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  if (infos[0].min_storage_buffer_offset_alignment > 4) {
    spans[n - 1].offset = 4;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  }
  spans[n - 1].offset = off * sizeof(float);
  spans[0].buffer_size = off * sizeof(float) + SMALL * sizeof(float) - 4; /* ends past the buffer */
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  spans[0].buffer_size = bufs[0].size;
  spans[0].offset = UINT64_MAX - 15; /* 2^64 - 16: aligned, and offset + bytes wraps past 2^64 */
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  spans[0].buffer_size = 0; /* the same, checked against the memory requirements' size */
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  spans[0].offset = off * sizeof(float);
  spans[0].buffer_size = bufs[0].size;
  spans[0].buffer = VK_NULL_HANDLE;
  FAILS(tpar_allreduce(comm, spans, (uint32_t)n, NULL, &t), TPAR_ERROR_INVALID_ARGUMENT);
  spans[0].buffer = bufs[0].buffer;
  {
    tpar_timeline_point points[MAX_DEV] = {{0}};
    uint8_t contributes[MAX_DEV] = {1, 1, 1, 1};
    memset(&args, 0, sizeof args);
    args.ready = points;
    args.ready_count = (uint32_t)n - 1;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
    args.ready = NULL;
    args.ready_count = (uint32_t)n;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
    memset(&args, 0, sizeof args);
    args.contributes = contributes;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
    args.contributes_count = (uint32_t)n + 1;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
    memset(&args, 0, sizeof args);
    args.wire = (tpar_wire)42;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
    memset(&args, 0, sizeof args);
    args.reserved[1] = 5;
    FAILS(tpar_allreduce(comm, spans, (uint32_t)n, &args, &t), TPAR_ERROR_INVALID_ARGUMENT);
  }
  {
    tpar_comm* other = (tpar_comm*)&count;
    memset(&co, 0, sizeof co);
    co.sync = (tpar_sync)7;
    FAILS(tpar_comm_create(group, &co, &other), TPAR_ERROR_INVALID_ARGUMENT);
    CHECK(other == NULL);
    memset(&co, 0, sizeof co);
    co.algo = (tpar_algo)9;
    FAILS(tpar_comm_create(group, &co, &other), TPAR_ERROR_INVALID_ARGUMENT);
    memset(&co, 0, sizeof co);
    co.wire = (tpar_wire)5;
    FAILS(tpar_comm_create(group, &co, &other), TPAR_ERROR_INVALID_ARGUMENT);
    memset(&co, 0, sizeof co);
    co.reserved[6] = 1;
    FAILS(tpar_comm_create(group, &co, &other), TPAR_ERROR_INVALID_ARGUMENT);
    FAILS(tpar_comm_create(group, NULL, NULL), TPAR_ERROR_INVALID_ARGUMENT);
    FAILS(tpar_comm_get_info(comm, NULL), TPAR_ERROR_INVALID_ARGUMENT);
    FAILS(tpar_comm_get_info(NULL, &info), TPAR_ERROR_INVALID_ARGUMENT);
  }
  /* Nothing was enqueued or changed: the buffers hold their inputs, and the
   * communicator still works. */
  CHECK(inputs_intact(bufs, n, off, SMALL, 0));
  CHECK(OK(tpar_comm_status(comm)));
  CHECK(run(comm, spans, n, NULL));
  CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));

  section("a ready point that never comes: timeout");
  {
    tpar_comm* slow = NULL;
    VkSemaphore never = timeline_create(infos[0].device, 0);
    tpar_timeline_point points[MAX_DEV] = {{0}};
    memset(&co, 0, sizeof co);
    co.timeout_ns = 300ull * 1000 * 1000;
    co.sync = TPAR_SYNC_PROXY;
    points[0].semaphore = never;
    points[0].value = 1;
    memset(&args, 0, sizeof args);
    args.ready = points;
    args.ready_count = (uint32_t)n;
    for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
    make_spans(spans, bufs, n, off, SMALL);
    if (never && OK(tpar_comm_create(group, &co, &slow)) && OK(tpar_allreduce(slow, spans, (uint32_t)n, &args, &t))) {
      double t0, waited;
      CHECK(OK(tpar_ticket_ready(t, &ready)) && ready == 0);
      t0 = now_s();
      FAILS(tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT), TPAR_ERROR_TIMEOUT);
      waited = now_s() - t0;
      printf("  timed out after %.2f s: %s\n", waited, tpar_last_error_message());
      CHECK(waited >= 0.29 && waited < 5.0);
      FAILS(tpar_comm_status(slow), TPAR_ERROR_TIMEOUT);
      FAILS(tpar_ticket_ready(t, &ready), TPAR_ERROR_TIMEOUT);
      {
        tpar_ticket* refused = (tpar_ticket*)&count;
        FAILS(tpar_allreduce(slow, spans, (uint32_t)n, NULL, &refused), TPAR_ERROR_FAILED);
        CHECK(refused == NULL);
      }
      /* The ready point arrives after all: tpar's queued work completes, and destroying
       * the communicator frees everything cleanly (validation watches). */
      CHECK(timeline_signal(infos[0].device, never, 1) == VK_SUCCESS);
    }
    tpar_ticket_free(t);
    t = NULL;
    tpar_comm_destroy(slow);
    if (never) vkDestroySemaphore(infos[0].device, never, NULL);
  }

  section("lifetimes: group, communicator, ticket");
  /* The group handle can go first: communicators keep the devices alive. */
  tpar_group_destroy(group);
  group = NULL;
  if (ring) {
    tpar_ticket* late = NULL;
    for (int d = 0; d < n; ++d) fill(&bufs[d], d, off, SMALL, 0);
    make_spans(spans, bufs, n, off, SMALL);
    CHECK(run(ring, spans, n, NULL));
    CHECK(check_sums(bufs, n, off, SMALL, 0, NULL));
    /* A ticket outliving its communicator can be freed, not waited on. */
    if (OK(tpar_allreduce(ring, spans, (uint32_t)n, NULL, &late))) {
      tpar_timeline_point p;
      tpar_comm_destroy(ring); /* drains the call */
      ring = NULL;
      FAILS(tpar_ticket_wait(late, TPAR_TIMEOUT_DEFAULT), TPAR_ERROR_INVALID_ARGUMENT);
      FAILS(tpar_ticket_ready(late, &ready), TPAR_ERROR_INVALID_ARGUMENT);
      FAILS(tpar_ticket_done(late, 0, &p), TPAR_ERROR_INVALID_ARGUMENT);
      CHECK(OK(tpar_ticket_device_count(late, &count)) && count == (uint32_t)n);
      tpar_ticket_free(late);
    }
    tpar_comm_destroy(ring);
  }
  /* Buffers go before the last communicator: it holds the last reference to the devices. */
  for (int d = 0; d < n; ++d) buffer_destroy(&bufs[d]);
  tpar_comm_destroy(comm);
  return 1;
}

int main(int argc, char** argv) {
  const char* verbose = getenv("TPAR_C_API_VERBOSE");
  int n = 3;
  setvbuf(stdout, NULL, _IOLBF, 0); /* the summary in order with stderr's reports */
  g_verbose = verbose && *verbose && strcmp(verbose, "0") != 0;
  if (argc > 1) n = atoi(argv[1]);
  if (n < 2 || n > MAX_DEV) {
    fprintf(stderr, "usage: %s [devices: 2 to %d]\n", argv[0], MAX_DEV);
    return 2;
  }
  g_validation = getenv("TPAR_TEST_NO_VALIDATION") == NULL;
  if (g_validation) {
    g_layer_version = validation_layer_version();
    if (g_layer_version == 0) {
      fprintf(stderr, "the Khronos validation layer is not installed (apt-get install vulkan-validationlayers)\n");
      return 1;
    }
    printf("tpar %s C API: %d virtual devices, validation layer %u.%u.%u\n", tpar_version_string(), n,
           VK_API_VERSION_MAJOR(g_layer_version), VK_API_VERSION_MINOR(g_layer_version), VK_API_VERSION_PATCH(g_layer_version));
  } else {
    printf("tpar %s C API: %d virtual devices, validation layer off (TPAR_TEST_NO_VALIDATION)\n", tpar_version_string(), n);
  }
  if (!OK(tpar_set_log_callback(on_log, NULL))) return 1;

  test_basics();
  if (!test_adopt()) ++g_failures;
  test_selection_errors();
  if (!test_created(n)) ++g_failures;
  section(NULL);
  CHECK(OK(tpar_set_log_callback(NULL, NULL)));

  pthread_mutex_lock(&g_log_mutex);
  printf("validation errors: %d; tpar log: %d warnings, %d errors (validation messages included)\n", g_validation_errors,
         g_log_warnings, g_log_errors);
  if (g_layer_self_reports)
    printf("note: the validation layer (older than 1.3.296) reported its own state-tracking timeout %d time(s); "
           "see docs/testing.md\n",
           g_layer_self_reports);
  if (g_validation_errors) ++g_failures;
  pthread_mutex_unlock(&g_log_mutex);
  printf("%s: %d checks, %d failed\n", g_failures ? "FAILED" : "PASSED", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
