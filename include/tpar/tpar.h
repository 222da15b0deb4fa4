/* tpar.h -- the C ABI of tpar, the cross-device AllReduce for Vulkan.
 *
 * A pure C header (C99 and later, and C++): opaque handles, plain structs, functions that
 * return a status. It needs only <vulkan/vulkan.h>, <stdint.h> and <stddef.h>.
 *
 * IMPLEMENTATION (stb style). tpar is a C++20 header-only library; its C functions are
 * defined in <tpar/c_api_impl.hpp>, which exactly ONE C++ translation unit of the
 * program includes (two would define every function twice). That unit decides how
 * Vulkan-Hpp dispatches, like any other user of tpar:
 *
 *     // tpar_c_api.cpp -- compiled as C++20, linked into the C program
 *     // (a) Vulkan-Hpp's default static dispatch: link the Vulkan loader (-lvulkan)
 *     #include <tpar/c_api_impl.hpp>
 *
 *     // (b) or dynamic dispatch: tpar loads the Vulkan loader at run time. Compile the
 *     //     unit with -DVULKAN_HPP_DISPATCH_LOADER_DYNAMIC=1 and define the dispatcher's
 *     //     storage once in the program (here, unless another C++ unit already does):
 *     #include <vulkan/vulkan.hpp>
 *     VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE
 *     #include <tpar/c_api_impl.hpp>
 *
 * Every other file, C or C++, includes <tpar/tpar.h> only:
 *
 *     tpar_group* group = NULL;
 *     tpar_group_options go = {0};              // zero-initialised: every GPU
 *     if (tpar_group_create(&go, &group) != TPAR_SUCCESS)
 *       fprintf(stderr, "%s\n", tpar_last_error_message());
 *     tpar_comm* comm = NULL;
 *     tpar_comm_create(group, NULL, &comm);     // NULL options: defaults (+ TPAR_* env)
 *     tpar_buffer_span spans[N] = ...;          // per device: VkBuffer, offset, count, size
 *     tpar_ticket* t = NULL;
 *     tpar_allreduce(comm, spans, N, NULL, &t); // f32 sum, in place, on every device
 *     tpar_ticket_wait(t, TPAR_TIMEOUT_DEFAULT);
 *     tpar_ticket_free(t);
 *     tpar_comm_destroy(comm);
 *     tpar_group_destroy(group);
 *
 * ERRORS. Every function that can fail returns a tpar_result: TPAR_SUCCESS (0) or a
 * code mirroring tpar::ErrorCode. No C++ exception ever crosses this boundary; bad input
 * (null pointers, counts that disagree, unknown enum values, ...) is a status, with
 * nothing created, enqueued or changed. tpar_last_error_message() is the failure's
 * sentence, per thread. Output parameters are cleared (NULL, zero) when a call fails.
 * Destroy and free functions accept NULL and cannot fail.
 *
 * STRUCTS. Every options struct is "zero-initialised = defaults", and its reserved
 * fields must stay zero (they leave room to grow without changing the ABI).
 *
 * THREADS. Calls on one communicator (tpar_allreduce, tpar_comm_flush, tpar_comm_get_info,
 * destroy) must not run concurrently; tickets may be waited on or polled from any thread
 * while the communicator that returned them lives, deferred ones included (a wait submits
 * the calls deferred before it under the communicator's own lock, waiting for the thread
 * using it within the same bound); tpar_comm_abort and tpar_comm_status may be called from
 * any thread at any time while it lives. Group queries and tpar_group_queue_submit may be
 * called from any thread.
 */
#ifndef TPAR_TPAR_H_
#define TPAR_TPAR_H_

#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>

#ifdef __cplusplus
#define TPAR_NOEXCEPT noexcept
extern "C" {
#else
#define TPAR_NOEXCEPT
#endif

/* Version of this C ABI (changes when a declaration here changes incompatibly). The
 * library's own version comes from tpar_version(). */
#define TPAR_C_API_VERSION 1

/* ---------------------------------------------------------------------------------- */
/* Status                                                                             */

typedef enum tpar_result {
  TPAR_SUCCESS = 0,
  /* Same values as tpar::ErrorCode. */
  TPAR_ERROR_NO_LOADER = 1,        /* the Vulkan loader library could not be loaded */
  TPAR_ERROR_NO_DRIVER = 2,        /* the loader found no usable Vulkan driver */
  TPAR_ERROR_NO_DEVICES = 3,       /* Vulkan works but reports no physical device */
  TPAR_ERROR_NO_MATCH = 4,         /* a device selection matched nothing */
  TPAR_ERROR_MISSING_FEATURE = 5,  /* a device lacks a feature or extension tpar needs */
  TPAR_ERROR_INVALID_ARGUMENT = 6, /* bad input: nothing was created, enqueued or changed */
  TPAR_ERROR_OUT_OF_MEMORY = 7,    /* host or device memory exhausted */
  TPAR_ERROR_DEVICE_LOST = 8,      /* a device was lost during an operation */
  TPAR_ERROR_TIMEOUT = 9,          /* a bounded wait expired (the communicator is now failed) */
  TPAR_ERROR_FAILED = 10,          /* the communicator failed earlier: destroy it, create a new one */
  TPAR_ERROR_UNSUPPORTED = 11,     /* valid, but this policy or device cannot do it */
  TPAR_ERROR_VULKAN = 12,          /* any other Vulkan failure */
  TPAR_ERROR_ABORTED = 13,         /* the communicator was aborted (tpar_comm_abort): the call ended unfinished */
  /* Not a tpar::ErrorCode: an unexpected C++ exception, caught at the boundary. */
  TPAR_ERROR_INTERNAL = 1000,
  TPAR_RESULT_MAX_ENUM = 0x7FFFFFFF
} tpar_result;

/* A short fixed text for `result` ("success", "invalid argument", ...); never NULL. */
const char* tpar_result_string(tpar_result result) TPAR_NOEXCEPT;

/* The message of the last failure on the calling thread: a sentence to act on. Every
 * function returning a tpar_result clears it on entry, so after a success it is "".
 * Never NULL; valid until the next tpar call on this thread. */
const char* tpar_last_error_message(void) TPAR_NOEXCEPT;

/* The VkResult behind the last failure on this thread, or VK_SUCCESS when it did not
 * come from Vulkan. Same lifetime rules as tpar_last_error_message(). */
VkResult tpar_last_error_vk_result(void) TPAR_NOEXCEPT;

/* The library's version; any pointer may be NULL. */
void tpar_version(int* major, int* minor, int* patch) TPAR_NOEXCEPT;
/* "major.minor.patch"; static storage. */
const char* tpar_version_string(void) TPAR_NOEXCEPT;

/* ---------------------------------------------------------------------------------- */
/* Logging                                                                            */

typedef enum tpar_log_level {
  TPAR_LOG_DEBUG = 0,
  TPAR_LOG_INFO = 1,
  TPAR_LOG_WARNING = 2,
  TPAR_LOG_ERROR = 3,
  TPAR_LOG_LEVEL_MAX_ENUM = 0x7FFFFFFF
} tpar_log_level;

/* Receives every message tpar logs (all levels), from any thread, one at a time. */
typedef void (*tpar_log_fn)(void* user, tpar_log_level level, const char* message);

/* Replaces the process-wide log sink; fn NULL restores the default (warnings and errors
 * to stderr; TPAR_LOG=debug|info|warning|error sets its threshold). */
tpar_result tpar_set_log_callback(tpar_log_fn fn, void* user) TPAR_NOEXCEPT;

/* ---------------------------------------------------------------------------------- */
/* Device groups                                                                      */

typedef struct tpar_group tpar_group;

/* A validation-layer message (only with tpar_group_options.validation or a callback
 * set). Called from the thread that made the Vulkan call. */
typedef void (*tpar_validation_fn)(void* user, VkDebugUtilsMessageSeverityFlagBitsEXT severity, const char* id,
                                   const char* text);

/* Which devices tpar opens, on an instance it creates. Criteria combine (a device must
 * meet all that are set); with none set: every GPU, or the CPU devices (lavapipe) when
 * there is no GPU. */
typedef struct tpar_group_options {
  const uint32_t* indices;       /* physical device indices (enumeration order), or NULL */
  uint32_t index_count;          /* entries in `indices`; 0 with NULL */
  const char* name;              /* case-insensitive substring of the device name; NULL/"" any */
  const uint8_t* device_uuid;    /* VK_UUID_SIZE bytes (deviceUUID), or NULL */
  uint32_t first;                /* keep only the first N of the devices matched; 0 = all */
  uint32_t virtual_count;        /* nonzero: open the first match this many times as separate
                                    logical devices (1 to 32) */
  uint32_t validation;           /* nonzero: the Khronos validation layer on tpar's instance,
                                    with synchronization validation */
  uint32_t no_sync_validation;   /* nonzero: validation without synchronization validation */
  tpar_validation_fn on_validation; /* validation messages (warnings and errors), or NULL:
                                       errors then go to the log only */
  void* validation_user;         /* passed to on_validation; must outlive the group and every
                                    communicator built on it */
  const char* const* required_extensions; /* device extensions the host needs as well */
  uint32_t required_extension_count;
  uint32_t require_f16;          /* nonzero: shaderFloat16 + storageBuffer16BitAccess required */
  const char* loader;            /* dynamic dispatch only: the loader library; NULL = system's */
  const char* application_name;  /* VkApplicationInfo; NULL = "tpar" */
  uint64_t reserved[8];          /* zero */
} tpar_group_options;

/* Opens the devices `options` selects (NULL: defaults). *out_group receives the group
 * (NULL on failure). The first create also makes an instance of tpar's own, with no
 * layers and no devices, and keeps it until the process exits: the Vulkan loader would
 * otherwise load and unload the drivers with every group, which NVIDIA's driver does not
 * survive for long (C++: GroupOptions::keep_drivers_loaded). */
tpar_result tpar_group_create(const tpar_group_options* options, tpar_group** out_group) TPAR_NOEXCEPT;

/* A host's lock for a queue it shares with tpar (Vulkan queues need external
 * synchronisation): both functions or neither (then tpar uses a mutex of its own).
 * They may be called from tpar's threads. */
typedef struct tpar_queue_lock {
  void (*lock)(void* user);
  void (*unlock)(void* user);
  void* user;
} tpar_queue_lock;

/* A device the host created and keeps owning (and its instance): it must outlive the
 * group and every communicator built on it. tpar destroys none of these handles. */
typedef struct tpar_adopted_device {
  VkInstance instance;
  VkPhysicalDevice physical;
  VkDevice device;               /* Vulkan 1.2 with timelineSemaphore enabled */
  VkQueue compute_queue;         /* required */
  uint32_t compute_family;
  uint32_t compute_index;
  tpar_queue_lock compute_lock;
  VkQueue transfer_queue;        /* optional: VK_NULL_HANDLE, or a queue tpar may use for uploads */
  uint32_t transfer_family;
  uint32_t transfer_index;
  tpar_queue_lock transfer_lock;
  /* Device extensions the host enabled: tpar uses VK_EXT_external_memory_host and
   * VK_KHR_external_semaphore_fd (and VK_EXT_calibrated_timestamps) where listed. */
  const char* const* enabled_extensions;
  uint32_t enabled_extension_count;
  uint32_t shader_float16_enabled;   /* nonzero if the host enabled shaderFloat16 */
  uint32_t storage_16bit_enabled;    /* nonzero if it enabled storageBuffer16BitAccess */
  /* Dynamic dispatch only, read from the first device: the host's vkGetInstanceProcAddr,
   * used when tpar's dispatcher is not initialised yet. NULL: tpar loads the system's
   * loader. Ignored with static dispatch. */
  PFN_vkGetInstanceProcAddr get_instance_proc_addr;
  /* Nonzero if the host enabled descriptorBindingStorageBufferUpdateAfterBind: then a
   * call costs tpar a descriptor update per device and no command buffer recording. */
  uint32_t update_after_bind_enabled;
  uint32_t reserved32;               /* zero */
  uint64_t reserved[3];              /* zero */
} tpar_adopted_device;

/* Wraps `count` (1 to 32) devices the host owns, in that order. */
tpar_result tpar_group_adopt(const tpar_adopted_device* devices, uint32_t count, tpar_group** out_group) TPAR_NOEXCEPT;

/* Releases the handle. Communicators created from the group keep its devices alive
 * until they are destroyed; a group tpar created destroys its devices and instance
 * after the last of them. NULL is a no-op. */
void tpar_group_destroy(tpar_group* group) TPAR_NOEXCEPT;

tpar_result tpar_group_device_count(const tpar_group* group, uint32_t* out_count) TPAR_NOEXCEPT;

/* One device of a group, as the host needs it to create buffers and semaphores. */
typedef struct tpar_device_info {
  uint32_t index;                /* position in the group */
  uint32_t physical_index;       /* enumeration index on the instance (created groups) */
  uint32_t is_virtual;           /* nonzero: one of several logical devices of one physical device */
  uint32_t owned;                /* nonzero: tpar created it (and will destroy it) */
  VkInstance instance;
  VkPhysicalDevice physical;
  VkDevice device;
  /* The queues tpar submits to. On a group tpar created, submit to them only through
   * tpar_group_queue_submit (tpar holds their locks); on an adopted one, through the
   * host's own locks. transfer_queue is VK_NULL_HANDLE where tpar uses none. */
  VkQueue compute_queue;
  uint32_t compute_family;
  VkQueue transfer_queue;
  uint32_t transfer_family;
  uint32_t vendor_id;
  uint32_t device_id;
  uint32_t api_version;
  VkDeviceSize min_storage_buffer_offset_alignment; /* span offsets: a multiple of this and of 4 */
  VkDeviceSize max_storage_buffer_range;            /* the largest span, in bytes */
  uint32_t external_memory_host;  /* VK_EXT_external_memory_host enabled */
  uint32_t external_semaphore_fd; /* VK_KHR_external_semaphore_fd enabled */
  char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
  uint64_t reserved[4];
} tpar_device_info;

tpar_result tpar_group_device_info(const tpar_group* group, uint32_t device, tpar_device_info* out_info) TPAR_NOEXCEPT;

/* vkQueueSubmit on device `device`'s compute queue, under the lock tpar uses for it:
 * how a host submits its own work (say, the work a ready point waits for) to a device
 * tpar created. A Vulkan failure is returned as a status (TPAR_ERROR_VULKAN, ...). */
tpar_result tpar_group_queue_submit(const tpar_group* group, uint32_t device, uint32_t submit_count,
                                    const VkSubmitInfo* submits, VkFence fence) TPAR_NOEXCEPT;

/* ---------------------------------------------------------------------------------- */
/* Communicators                                                                      */

typedef struct tpar_comm tpar_comm;

typedef enum tpar_sync {
  TPAR_SYNC_AUTO = 0,   /* what the group's capabilities allow */
  TPAR_SYNC_NATIVE = 1, /* NativeImport: queues wait on peers' imported timelines */
  TPAR_SYNC_PROXY = 2,  /* ProxyBridge: host threads forward progress */
  TPAR_SYNC_MAX_ENUM = 0x7FFFFFFF
} tpar_sync;

typedef enum tpar_algo {
  TPAR_ALGO_AUTO = 0,    /* the relay up to relay_max_bytes where the group allows it, then
                            OneShot while payload x (n - 1) <= oneshot_max_bytes, else ring */
  TPAR_ALGO_RING = 1,    /* ChunkedRing */
  TPAR_ALGO_ONESHOT = 2, /* OneShot */
  TPAR_ALGO_RELAY = 3,   /* the relay for calls up to relay_max_bytes, larger ones as AUTO */
  TPAR_ALGO_MAX_ENUM = 0x7FFFFFFF
} tpar_algo;

/* How partial sums travel between devices (accumulation is always f32). Note: these
 * values are not tpar::Wire's; 0 here means "not fixed". */
typedef enum tpar_wire {
  TPAR_WIRE_AUTO = 0, /* the communicator's choice: f32 below bf16_min_bytes, bf16 from it */
  TPAR_WIRE_F32 = 1,  /* exact up to f32 summation order */
  TPAR_WIRE_BF16 = 2, /* f32's range, 8-bit significand */
  TPAR_WIRE_F16 = 3,  /* 11-bit significand, a power-of-two scale per 512 values */
  TPAR_WIRE_MAX_ENUM = 0x7FFFFFFF
} tpar_wire;

/* Zero-initialised = tpar's defaults. TPAR_SYNC, TPAR_ALGO and TPAR_WIRE in the
 * environment override sync, algo and wire (an unknown value makes tpar_comm_create
 * fail with TPAR_ERROR_INVALID_ARGUMENT and a message listing the valid ones). */
typedef struct tpar_comm_options {
  tpar_sync sync;
  tpar_algo algo;
  tpar_wire wire;
  uint32_t depth;             /* calls in flight at once; 0 = sized by staging (2 to 128, docs/api.md) */
  uint64_t timeout_ns;        /* bound on every wait tpar makes; 0 = default (10 s) */
  uint64_t oneshot_max_bytes; /* 0 = default (12 MiB) */
  uint64_t bf16_min_bytes;    /* payload from which the automatic wire is bf16; 0 = default (1 MiB) */
  uint64_t relay_max_bytes;   /* the largest payload the relay takes; 0 = default (64 KiB) */
  uint64_t reserved[7];       /* zero */
} tpar_comm_options;

/* Builds the communicator (sync policy, algorithm and wire chosen at run time) over
 * every device of `group`; options NULL = defaults. It keeps the group's devices alive:
 * the group handle may be destroyed before it. */
tpar_result tpar_comm_create(const tpar_group* group, const tpar_comm_options* options, tpar_comm** out_comm) TPAR_NOEXCEPT;

/* Drains the communicator's work on the GPU (bounded by its timeout) and frees it.
 * Tickets it returned stay to be freed, but can no longer be waited on. NULL: no-op. */
void tpar_comm_destroy(tpar_comm* comm) TPAR_NOEXCEPT;

typedef struct tpar_comm_info {
  uint32_t device_count;
  tpar_sync sync;             /* the policy in use: TPAR_SYNC_NATIVE or TPAR_SYNC_PROXY */
  const char* sync_reason;    /* why, in a sentence */
  const char* last_algorithm; /* the last call's algorithm: "ring", "oneshot", "relay", "none"
                                 (count 0), "" before any call */
  tpar_wire last_wire;        /* the last call's wire (TPAR_WIRE_AUTO before any call) */
  uint64_t staging_bytes;     /* host staging memory held */
  uint64_t reserved[4];
} tpar_comm_info;

/* The strings stay valid until the next tpar_comm_get_info call on this communicator or its
 * destruction. */
tpar_result tpar_comm_get_info(tpar_comm* comm, tpar_comm_info* out_info) TPAR_NOEXCEPT;

/* TPAR_SUCCESS while the communicator is healthy; otherwise the code of the failure
 * (timeout, device loss, abort) that failed it, with its message. */
tpar_result tpar_comm_status(const tpar_comm* comm) TPAR_NOEXCEPT;

/* Ends every call of the communicator now, from any thread (for a host whose ready point
 * will never come): waits on its tickets, and a tpar_allreduce blocked on another thread
 * for a slot set still in use, return TPAR_ERROR_ABORTED at once; deferred calls are
 * never submitted. The communicator is failed from then on (tpar_comm_status returns
 * TPAR_ERROR_ABORTED, tpar_allreduce TPAR_ERROR_FAILED), and tpar_comm_destroy does not
 * wait out its timeout. Work already on a queue behind a ready point that never comes
 * stays there (Vulkan cannot take it back): what it uses is freed once it is done, after
 * the communicator is destroyed. Until the point is signalled that device never idles,
 * and a driver may wait for it at process exit (NVIDIA's does): signal the point once the
 * host has given up on it. Calling it again does nothing. */
tpar_result tpar_comm_abort(const tpar_comm* comm) TPAR_NOEXCEPT;

/* ---------------------------------------------------------------------------------- */
/* AllReduce                                                                          */

/* `count` f32 values starting `offset` bytes into `buffer`, reduced in place. The buffer
 * needs VK_BUFFER_USAGE_STORAGE_BUFFER_BIT; `offset` must be a multiple of the device's
 * minStorageBufferOffsetAlignment (and of 4). `buffer_size` is the size the buffer was
 * created with (VkBufferCreateInfo::size, bytes): a span that runs past it is refused.
 * 0 means "not stated": the span is checked against vkGetBufferMemoryRequirements' size
 * instead, which is at least the buffer's and may be more (112 bytes for a 100-byte
 * buffer on an H200), so a span that ends in that padding, past the buffer's end, is not
 * caught. Vulkan calls such a span invalid use; state the size to have it refused. */
typedef struct tpar_buffer_span {
  VkBuffer buffer;
  VkDeviceSize offset;
  uint64_t count;
  VkDeviceSize buffer_size;
} tpar_buffer_span;

/* "This timeline semaphore of one device reached this value". */
typedef struct tpar_timeline_point {
  VkSemaphore semaphore; /* VK_SEMAPHORE_TYPE_TIMELINE; VK_NULL_HANDLE = no point */
  uint64_t value;
} tpar_timeline_point;

/* Per-call arguments; NULL or zero-initialised = none. Arrays, where given, hold one
 * entry per device of the communicator, and their counts must say so. */
typedef struct tpar_allreduce_args {
  const tpar_timeline_point* ready; /* device d starts once ready[d] is reached (a null
                                       semaphore: no wait for that device) */
  uint32_t ready_count;             /* 0 with ready NULL */
  const uint8_t* contributes;       /* 0 = device d computed nothing: its buffer counts as
                                       zeros (whatever it holds) and still gets the result */
  uint32_t contributes_count;       /* 0 with contributes NULL */
  tpar_wire wire;                   /* TPAR_WIRE_AUTO: the communicator's choice */
  uint32_t flags;                   /* TPAR_ALLREDUCE_* bits; 0 = none */
  uint32_t reserved32;              /* zero */
  uint64_t reserved[3];             /* zero */
} tpar_allreduce_args;

/* Hold the call's work back until tpar_comm_flush (or until tpar must submit it: a later
 * call without the flag, a wait on its ticket, more calls deferred than the depth,
 * destruction), so that back-to-back calls reach each queue in one vkQueueSubmit -- the
 * driver's cost per submission is most of a small call's host CPU. Submit work that waits
 * on the ticket's done points after the flush: queued ahead of tpar's batches on the same
 * queue, it would wait forever. */
#define TPAR_ALLREDUCE_DEFER 0x1u

typedef struct tpar_ticket tpar_ticket;

/* Submits every deferred call (TPAR_ALLREDUCE_DEFER), in call order. No deferred call:
 * a no-op. */
tpar_result tpar_comm_flush(tpar_comm* comm) TPAR_NOEXCEPT;

/* Sums the spans (one per device, in group order, the same count everywhere) into every
 * span. Returns once the work is enqueued; *out_ticket (free it with tpar_ticket_free)
 * says when it is done. A count of 0 is a no-op that still returns a ticket. Bad input
 * returns TPAR_ERROR_INVALID_ARGUMENT with nothing enqueued; a failed communicator
 * returns TPAR_ERROR_FAILED. *out_ticket is NULL on failure. */
tpar_result tpar_allreduce(tpar_comm* comm, const tpar_buffer_span* spans, uint32_t span_count,
                           const tpar_allreduce_args* args, tpar_ticket** out_ticket) TPAR_NOEXCEPT;

/* Why a ticket is a handle rather than a struct by value: it holds, per device, two
 * timeline waits and a share of the communicator's health (to report a failure that
 * happened on a helper thread) -- C++ state with no fixed size and no C layout. */

tpar_result tpar_ticket_device_count(const tpar_ticket* ticket, uint32_t* out_count) TPAR_NOEXCEPT;

/* Device `device`'s result is in its buffer once this point is reached: its next
 * submission can wait on it (no host round trip). Valid while the communicator lives. */
tpar_result tpar_ticket_done(const tpar_ticket* ticket, uint32_t device, tpar_timeline_point* out_point) TPAR_NOEXCEPT;

/* Non-blocking: *out_ready = 1 when every device finished the call, else 0. Returns the
 * communicator's failure, if it has one and the call is not finished. */
tpar_result tpar_ticket_ready(const tpar_ticket* ticket, uint32_t* out_ready) TPAR_NOEXCEPT;

/* TPAR_TIMEOUT_DEFAULT: wait at most the communicator's timeout. */
#define TPAR_TIMEOUT_DEFAULT 0u

/* Blocks until the call finished on every device, at most `timeout_ns` (0 = the
 * communicator's timeout). TPAR_ERROR_TIMEOUT or TPAR_ERROR_DEVICE_LOST leave the
 * communicator failed -- to poll, use tpar_ticket_ready. A communicator that failed
 * meanwhile reports its failure here too. */
tpar_result tpar_ticket_wait(const tpar_ticket* ticket, uint64_t timeout_ns) TPAR_NOEXCEPT;

/* Frees the ticket (not the work: that goes on). NULL: no-op. */
void tpar_ticket_free(tpar_ticket* ticket) TPAR_NOEXCEPT;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* TPAR_TPAR_H_ */
