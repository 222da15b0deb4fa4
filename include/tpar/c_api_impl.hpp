// tpar C ABI -- the definitions of the functions <tpar/tpar.h> declares, written with
// tpar's C++ API. Include this header in exactly ONE C++20 translation unit of a program
// (see the top of tpar.h); that unit's Vulkan-Hpp configuration (static or dynamic
// dispatch) is the one tpar uses, as for any other user of tpar.
//
// Every function catches everything: a tpar::Error becomes its code (same values as
// tpar_result) and its message, std::bad_alloc TPAR_ERROR_OUT_OF_MEMORY, anything else
// TPAR_ERROR_INTERNAL. Nothing is thrown across the C boundary.
#pragma once

#include <tpar/tpar.h>
#include <tpar/tpar.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <utility>
#include <vector>

// ---- The opaque handles ------------------------------------------------------------

struct tpar_group {
  tpar::DeviceGroup group;
};

struct tpar_comm {
  std::shared_ptr<tpar::AnyCommunicator> comm;  // tickets hold a weak reference
  std::string last_algorithm;                   // storage behind tpar_comm_info::last_algorithm
};

struct tpar_ticket {
  tpar::Ticket ticket;
  std::weak_ptr<tpar::AnyCommunicator> comm;  // expired: the communicator was destroyed
};

namespace tpar::inline v0::detail::c_api {

// tpar_result mirrors ErrorCode value for value.
static_assert(TPAR_ERROR_NO_LOADER == int(ErrorCode::no_loader));
static_assert(TPAR_ERROR_NO_DRIVER == int(ErrorCode::no_driver));
static_assert(TPAR_ERROR_NO_DEVICES == int(ErrorCode::no_devices));
static_assert(TPAR_ERROR_NO_MATCH == int(ErrorCode::no_match));
static_assert(TPAR_ERROR_MISSING_FEATURE == int(ErrorCode::missing_feature));
static_assert(TPAR_ERROR_INVALID_ARGUMENT == int(ErrorCode::invalid_argument));
static_assert(TPAR_ERROR_OUT_OF_MEMORY == int(ErrorCode::out_of_memory));
static_assert(TPAR_ERROR_DEVICE_LOST == int(ErrorCode::device_lost));
static_assert(TPAR_ERROR_TIMEOUT == int(ErrorCode::timeout));
static_assert(TPAR_ERROR_FAILED == int(ErrorCode::failed));
static_assert(TPAR_ERROR_UNSUPPORTED == int(ErrorCode::unsupported));
static_assert(TPAR_ERROR_VULKAN == int(ErrorCode::vulkan_error));
static_assert(TPAR_ERROR_ABORTED == int(ErrorCode::aborted));
static_assert(TPAR_LOG_DEBUG == int(LogLevel::debug) && TPAR_LOG_INFO == int(LogLevel::info) &&
              TPAR_LOG_WARNING == int(LogLevel::warning) && TPAR_LOG_ERROR == int(LogLevel::error));
static_assert(sizeof(tpar_buffer_span) == 32 && sizeof(tpar_timeline_point) == 16);

struct LastError {
  std::string message;
  const char* fallback = "";  // used when the message could not be stored
  VkResult vk = VK_SUCCESS;
};

inline LastError& last_error() noexcept {
  thread_local LastError error;
  return error;
}

inline const char* result_string(tpar_result r) noexcept {
  switch (r) {
    case TPAR_SUCCESS: return "success";
    case TPAR_ERROR_NO_LOADER: return "Vulkan loader not found";
    case TPAR_ERROR_NO_DRIVER: return "no Vulkan driver";
    case TPAR_ERROR_NO_DEVICES: return "no Vulkan devices";
    case TPAR_ERROR_NO_MATCH: return "device selection matched nothing";
    case TPAR_ERROR_MISSING_FEATURE: return "device lacks a required feature";
    case TPAR_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case TPAR_ERROR_OUT_OF_MEMORY: return "out of memory";
    case TPAR_ERROR_DEVICE_LOST: return "device lost";
    case TPAR_ERROR_TIMEOUT: return "timed out";
    case TPAR_ERROR_FAILED: return "communicator failed";
    case TPAR_ERROR_UNSUPPORTED: return "unsupported";
    case TPAR_ERROR_VULKAN: return "Vulkan error";
    case TPAR_ERROR_ABORTED: return "communicator aborted";
    case TPAR_ERROR_INTERNAL: return "internal error";
    default: return "unknown tpar result";
  }
}

inline tpar_result record(tpar_result r, const char* function, const char* what, VkResult vk = VK_SUCCESS) noexcept {
  LastError& e = last_error();
  e.fallback = result_string(r);
  e.vk = vk;
  try {
    e.message.assign(function).append(": ").append(what && *what ? what : result_string(r));
  } catch (...) {
    e.message.clear();
  }
  return r;
}

// Runs f (returning void) with every exception turned into a status and a message.
template <class F>
tpar_result guard(const char* function, F&& f) noexcept {
  LastError& e = last_error();
  e.message.clear();
  e.fallback = "";
  e.vk = VK_SUCCESS;
  try {
    f();
    return TPAR_SUCCESS;
  } catch (const Error& err) {
    const int code = static_cast<int>(err.code_value());
    const tpar_result r = code >= TPAR_ERROR_NO_LOADER && code <= TPAR_ERROR_ABORTED ? static_cast<tpar_result>(code)
                                                                                      : TPAR_ERROR_INTERNAL;
    return record(r, function, err.what(), static_cast<VkResult>(err.vk_result()));
  } catch (const std::bad_alloc&) {
    return record(TPAR_ERROR_OUT_OF_MEMORY, function, "out of host memory");
  } catch (const std::exception& ex) {
    return record(TPAR_ERROR_INTERNAL, function, ex.what());
  } catch (...) {
    return record(TPAR_ERROR_INTERNAL, function, "an unknown exception");
  }
}

[[noreturn]] inline void invalid(const std::string& what) { throw Error(ErrorCode::invalid_argument, what); }

template <class T>
void require(const T* p, const char* name) {
  if (!p) invalid(std::string(name) + " is NULL");
}

template <std::size_t N>
void require_zero(const std::uint64_t (&reserved)[N], const char* what) {
  for (auto v : reserved)
    if (v) invalid(std::string(what) + ".reserved must be zero");
}

// A host-given duration, bounded so that deadline arithmetic (now + timeout) cannot overflow.
inline std::chrono::nanoseconds duration(std::uint64_t ns) {
  constexpr std::uint64_t max = std::uint64_t{1} << 61;  // ~73 years
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(ns, max)));
}

inline std::optional<Wire> to_wire(tpar_wire w, const char* what) {
  switch (w) {
    case TPAR_WIRE_AUTO: return std::nullopt;
    case TPAR_WIRE_F32: return Wire::f32;
    case TPAR_WIRE_BF16: return Wire::bf16;
    case TPAR_WIRE_F16: return Wire::f16;
    default: invalid(std::string(what) + " = " + std::to_string(int(w)) + " is not a tpar_wire (TPAR_WIRE_AUTO, _F32, _BF16, _F16)");
  }
}

inline tpar_wire from_wire(Wire w) {
  switch (w) {
    case Wire::f32: return TPAR_WIRE_F32;
    case Wire::bf16: return TPAR_WIRE_BF16;
    case Wire::f16: return TPAR_WIRE_F16;
  }
  return TPAR_WIRE_AUTO;
}

inline std::vector<std::string> strings(const char* const* list, std::uint32_t count, const char* what) {
  if (count && !list) invalid(std::string(what) + " is NULL but its count is " + std::to_string(count));
  std::vector<std::string> v;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (!list[i]) invalid(std::string(what) + "[" + std::to_string(i) + "] is NULL");
    v.emplace_back(list[i]);
  }
  return v;
}

inline QueueLock queue_lock(const tpar_queue_lock& l, const std::string& what) {
  if (!l.lock != !l.unlock) invalid(what + " has a lock function without an unlock function, or the reverse");
  if (!l.lock) return {};
  return {[fn = l.lock, user = l.user] { fn(user); }, [fn = l.unlock, user = l.user] { fn(user); }};
}

// Dynamic dispatch: adopted devices come with no instance of tpar's, so make sure the
// default dispatcher can reach Vulkan (the host's loader entry point, or the system's
// loader) and is bound to an instance. Static dispatch: the loader is linked.
inline void prepare_dispatch([[maybe_unused]] const tpar_adopted_device& first) {
#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  auto& d = VULKAN_HPP_DEFAULT_DISPATCHER;
  if (!d.vkGetInstanceProcAddr) {
    if (first.get_instance_proc_addr) d.init(first.get_instance_proc_addr);
    else ensure_loader("");
  }
  if (!d.vkEnumeratePhysicalDevices) d.init(vk::Instance(first.instance));
#endif
}

inline tpar_comm* comm_of(tpar_comm* comm) {
  require(comm, "comm");
  if (!comm->comm) invalid("comm has been destroyed");
  return comm;
}

inline std::shared_ptr<AnyCommunicator> comm_of(const tpar_ticket* ticket) {
  require(ticket, "ticket");
  auto comm = ticket->comm.lock();
  if (!comm) invalid("the communicator that returned this ticket was destroyed; its done points are gone");
  return comm;
}

}  // namespace tpar::inline v0::detail::c_api

extern "C" {

// ---- Status, version, logging ------------------------------------------------------

const char* tpar_result_string(tpar_result result) noexcept { return tpar::detail::c_api::result_string(result); }

const char* tpar_last_error_message(void) noexcept {
  const auto& e = tpar::detail::c_api::last_error();
  return e.message.empty() ? e.fallback : e.message.c_str();
}

VkResult tpar_last_error_vk_result(void) noexcept { return tpar::detail::c_api::last_error().vk; }

void tpar_version(int* major, int* minor, int* patch) noexcept {
  if (major) *major = tpar::version.major;
  if (minor) *minor = tpar::version.minor;
  if (patch) *patch = tpar::version.patch;
}

const char* tpar_version_string(void) noexcept { return TPAR_VERSION_STRING; }

tpar_result tpar_set_log_callback(tpar_log_fn fn, void* user) noexcept {
  return tpar::detail::c_api::guard(__func__, [&] {
    if (!fn) {
      tpar::set_log_sink(nullptr);
      return;
    }
    tpar::set_log_sink([fn, user](tpar::LogLevel level, std::string_view text) noexcept {
      try {
        const std::string s(text);
        fn(user, static_cast<tpar_log_level>(level), s.c_str());
      } catch (...) {
        fn(user, static_cast<tpar_log_level>(level), "(a tpar message that could not be copied)");
      }
    });
  });
}

// ---- Device groups -----------------------------------------------------------------

tpar_result tpar_group_create(const tpar_group_options* options, tpar_group** out_group) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_group, "out_group");
    *out_group = nullptr;
    tpar::GroupOptions g;
    if (options) {
      const tpar_group_options& o = *options;
      require_zero(o.reserved, "options");
      if (o.index_count && !o.indices) invalid("options.indices is NULL but index_count is " + std::to_string(o.index_count));
      if (o.indices) g.select.indices.assign(o.indices, o.indices + o.index_count);
      if (o.name) g.select.name = o.name;
      if (o.device_uuid) {
        tpar::Uuid uuid{};
        std::memcpy(uuid.data(), o.device_uuid, uuid.size());
        g.select.uuid = uuid;
      }
      if (o.first) g.select.count = o.first;
      if (o.virtual_count) g.select.virtual_count = o.virtual_count;
      g.validation = o.validation != 0;
      g.sync_validation = o.no_sync_validation == 0;
      if (o.on_validation)
        g.on_validation = [fn = o.on_validation, user = o.validation_user](const tpar::ValidationMessage& m) {
          fn(user, static_cast<VkDebugUtilsMessageSeverityFlagBitsEXT>(m.severity), m.id.c_str(), m.text.c_str());
        };
      g.required_extensions = strings(o.required_extensions, o.required_extension_count, "options.required_extensions");
      g.require_f16 = o.require_f16 != 0;
      if (o.loader) g.loader = o.loader;
      if (o.application_name) g.application_name = o.application_name;
    }
    auto handle = std::make_unique<tpar_group>(tpar_group{tpar::DeviceGroup::create(g)});
    *out_group = handle.release();
  });
}

tpar_result tpar_group_adopt(const tpar_adopted_device* devices, uint32_t count, tpar_group** out_group) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_group, "out_group");
    *out_group = nullptr;
    require(devices, "devices");
    if (count == 0) invalid("adopt needs at least one device (count is 0)");
    if (count > tpar::max_group_devices)
      invalid("a group spans at most " + std::to_string(tpar::max_group_devices) + " devices, not " + std::to_string(count));
    std::vector<tpar::AdoptedDevice> adopted(count);
    for (std::uint32_t i = 0; i < count; ++i) {
      const tpar_adopted_device& c = devices[i];
      const std::string who = "devices[" + std::to_string(i) + "]";
      require_zero(c.reserved, who.c_str());
      if (c.reserved32) invalid(who + ".reserved32 must be zero");
      if (!c.instance || !c.physical || !c.device || !c.compute_queue)
        invalid(who + " lacks an instance, physical device, device or compute queue");
      tpar::AdoptedDevice& a = adopted[i];
      a.instance = vk::Instance(c.instance);
      a.physical = vk::PhysicalDevice(c.physical);
      a.device = vk::Device(c.device);
      a.compute_queue = vk::Queue(c.compute_queue);
      a.compute_family = c.compute_family;
      a.compute_index = c.compute_index;
      a.compute_lock = queue_lock(c.compute_lock, who + ".compute_lock");
      a.transfer_queue = vk::Queue(c.transfer_queue);
      a.transfer_family = c.transfer_family;
      a.transfer_index = c.transfer_index;
      a.transfer_lock = queue_lock(c.transfer_lock, who + ".transfer_lock");
      a.enabled_extensions = strings(c.enabled_extensions, c.enabled_extension_count, (who + ".enabled_extensions").c_str());
      a.shader_float16_enabled = c.shader_float16_enabled != 0;
      a.storage_16bit_enabled = c.storage_16bit_enabled != 0;
      a.update_after_bind_enabled = c.update_after_bind_enabled != 0;
    }
    prepare_dispatch(devices[0]);
    auto handle = std::make_unique<tpar_group>(tpar_group{tpar::DeviceGroup::adopt(adopted)});
    *out_group = handle.release();
  });
}

void tpar_group_destroy(tpar_group* group) noexcept { delete group; }

tpar_result tpar_group_device_count(const tpar_group* group, uint32_t* out_count) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_count, "out_count");
    *out_count = 0;
    require(group, "group");
    *out_count = static_cast<std::uint32_t>(group->group.size());
  });
}

tpar_result tpar_group_device_info(const tpar_group* group, uint32_t device, tpar_device_info* out_info) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_info, "out_info");
    std::memset(out_info, 0, sizeof *out_info);
    require(group, "group");
    if (device >= group->group.size())
      invalid("device " + std::to_string(device) + " is out of range: the group has " + std::to_string(group->group.size()));
    const tpar::Device& d = group->group[device];
    const tpar::DeviceCapabilities& c = d.capabilities();
    tpar_device_info& info = *out_info;
    info.index = d.index();
    info.physical_index = d.physical_index();
    info.is_virtual = d.is_virtual();
    info.owned = d.owned();
    info.instance = static_cast<VkInstance>(d.instance());
    info.physical = static_cast<VkPhysicalDevice>(d.physical());
    info.device = static_cast<VkDevice>(d.handle());
    info.compute_queue = static_cast<VkQueue>(d.compute_queue().handle());
    info.compute_family = d.compute_queue().family();
    if (d.has_transfer_queue()) {
      info.transfer_queue = static_cast<VkQueue>(d.transfer_queue().handle());
      info.transfer_family = d.transfer_queue().family();
    }
    info.vendor_id = c.vendor_id;
    info.device_id = c.device_id;
    info.api_version = c.api_version;
    info.min_storage_buffer_offset_alignment = c.min_storage_offset_alignment;
    info.max_storage_buffer_range = c.max_storage_buffer_range;
    info.external_memory_host = d.enabled().external_memory_host;
    info.external_semaphore_fd = d.enabled().external_semaphore_fd;
    const std::size_t n = std::min(c.name.size(), sizeof info.name - 1);
    std::memcpy(info.name, c.name.data(), n);
    info.name[n] = '\0';
  });
}

tpar_result tpar_group_queue_submit(const tpar_group* group, uint32_t device, uint32_t submit_count,
                                           const VkSubmitInfo* submits, VkFence fence) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(group, "group");
    if (submit_count && !submits) invalid("submits is NULL but submit_count is " + std::to_string(submit_count));
    if (device >= group->group.size())
      invalid("device " + std::to_string(device) + " is out of range: the group has " + std::to_string(group->group.size()));
    tpar::Queue& queue = group->group[device].compute_queue();
    const vk::Result r = queue.locked([&] {
      return queue.handle().submit(submit_count, reinterpret_cast<const vk::SubmitInfo*>(submits), vk::Fence(fence));
    });
    tpar::detail::check(r, "vkQueueSubmit on device " + std::to_string(device));
  });
}

// ---- Communicators -----------------------------------------------------------------

tpar_result tpar_comm_create(const tpar_group* group, const tpar_comm_options* options, tpar_comm** out_comm) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_comm, "out_comm");
    *out_comm = nullptr;
    require(group, "group");
    tpar::Options o;
    if (options) {
      const tpar_comm_options& c = *options;
      require_zero(c.reserved, "options");
      switch (c.sync) {
        case TPAR_SYNC_AUTO: o.sync = tpar::SyncChoice::automatic; break;
        case TPAR_SYNC_NATIVE: o.sync = tpar::SyncChoice::native; break;
        case TPAR_SYNC_PROXY: o.sync = tpar::SyncChoice::proxy; break;
        default: invalid("options.sync = " + std::to_string(int(c.sync)) + " is not a tpar_sync (TPAR_SYNC_AUTO, _NATIVE, _PROXY)");
      }
      switch (c.algo) {
        case TPAR_ALGO_AUTO: o.algo = tpar::AlgoChoice::automatic; break;
        case TPAR_ALGO_RING: o.algo = tpar::AlgoChoice::ring; break;
        case TPAR_ALGO_ONESHOT: o.algo = tpar::AlgoChoice::oneshot; break;
        case TPAR_ALGO_RELAY: o.algo = tpar::AlgoChoice::relay; break;
        default:
          invalid("options.algo = " + std::to_string(int(c.algo)) + " is not a tpar_algo (TPAR_ALGO_AUTO, _RING, _ONESHOT, _RELAY)");
      }
      o.wire = to_wire(c.wire, "options.wire");
      if (c.depth) o.depth = c.depth;
      if (c.timeout_ns) o.timeout = duration(c.timeout_ns);
      if (c.oneshot_max_bytes) o.oneshot_max_bytes = static_cast<std::size_t>(c.oneshot_max_bytes);
      if (c.bf16_min_bytes) o.bf16_min_bytes = static_cast<std::size_t>(c.bf16_min_bytes);
      if (c.relay_max_bytes) o.relay_max_bytes = static_cast<std::size_t>(c.relay_max_bytes);
    }
    auto handle = std::make_unique<tpar_comm>();
    handle->comm = std::make_shared<tpar::AnyCommunicator>(tpar::make_communicator(group->group, o));
    *out_comm = handle.release();
  });
}

void tpar_comm_destroy(tpar_comm* comm) noexcept { delete comm; }

tpar_result tpar_comm_get_info(tpar_comm* comm, tpar_comm_info* out_info) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_info, "out_info");
    std::memset(out_info, 0, sizeof *out_info);
    comm_of(comm);
    const tpar::AnyCommunicator& c = *comm->comm;
    const tpar::CallInfo& last = c.last_call();
    comm->last_algorithm.assign(last.algorithm.data(), last.algorithm.size());
    out_info->device_count = static_cast<std::uint32_t>(c.size());
    out_info->sync = c.sync_kind() == tpar::SyncKind::native_import ? TPAR_SYNC_NATIVE : TPAR_SYNC_PROXY;
    out_info->sync_reason = c.sync_reason().c_str();
    out_info->last_algorithm = comm->last_algorithm.c_str();
    out_info->last_wire = last.algorithm.empty() ? TPAR_WIRE_AUTO : from_wire(last.wire);
    out_info->staging_bytes = c.staging_bytes();
  });
}

tpar_result tpar_comm_status(const tpar_comm* comm) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(comm, "comm");
    if (!comm->comm) invalid("comm has been destroyed");
    if (auto e = comm->comm->failure()) throw *e;
  });
}

tpar_result tpar_comm_abort(const tpar_comm* comm) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(comm, "comm");
    if (!comm->comm) invalid("comm has been destroyed");
    comm->comm->abort();
  });
}

// ---- AllReduce and tickets ---------------------------------------------------------

tpar_result tpar_comm_flush(tpar_comm* comm) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    comm_of(comm);
    comm->comm->flush();
  });
}

tpar_result tpar_allreduce(tpar_comm* comm, const tpar_buffer_span* spans, uint32_t span_count,
                                  const tpar_allreduce_args* args, tpar_ticket** out_ticket) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_ticket, "out_ticket");
    *out_ticket = nullptr;
    comm_of(comm);
    if (span_count && !spans) invalid("spans is NULL but span_count is " + std::to_string(span_count));
    const std::size_t n = comm->comm->size();
    if (span_count != n)
      invalid("allreduce got " + std::to_string(span_count) + " spans for a group of " + std::to_string(n) + " devices");

    std::vector<tpar::BufferSpan> s(span_count);
    for (std::uint32_t d = 0; d < span_count; ++d) {
      if (spans[d].count > SIZE_MAX) invalid("span " + std::to_string(d) + "'s count does not fit in size_t");
      s[d] = {vk::Buffer(spans[d].buffer), spans[d].offset, static_cast<std::size_t>(spans[d].count), spans[d].buffer_size};
    }
    tpar::AllreduceArgs a;
    std::vector<tpar::TimelinePoint> ready;
    std::unique_ptr<bool[]> contributes;
    if (args) {
      require_zero(args->reserved, "args");
      if (args->reserved32) invalid("args->reserved32 must be 0");
      if (args->flags & ~std::uint32_t{TPAR_ALLREDUCE_DEFER})
        invalid("args->flags has unknown bits set (" + std::to_string(args->flags & ~std::uint32_t{TPAR_ALLREDUCE_DEFER}) +
                "); the known flag is TPAR_ALLREDUCE_DEFER");
      a.defer = (args->flags & TPAR_ALLREDUCE_DEFER) != 0;
      if (!args->ready != !args->ready_count)
        invalid(args->ready ? "args->ready is set but args->ready_count is 0"
                            : "args->ready is NULL but args->ready_count is " + std::to_string(args->ready_count));
      if (!args->contributes != !args->contributes_count)
        invalid(args->contributes ? "args->contributes is set but args->contributes_count is 0"
                                  : "args->contributes is NULL but args->contributes_count is " +
                                        std::to_string(args->contributes_count));
      if (args->ready_count && args->ready_count != n)
        invalid("allreduce got " + std::to_string(args->ready_count) + " ready points for " + std::to_string(n) + " devices");
      if (args->contributes_count && args->contributes_count != n)
        invalid("allreduce got " + std::to_string(args->contributes_count) + " contribution flags for " + std::to_string(n) +
                " devices");
      for (std::uint32_t d = 0; d < args->ready_count; ++d) ready.push_back({vk::Semaphore(args->ready[d].semaphore), args->ready[d].value});
      if (args->contributes_count) {
        contributes.reset(new bool[n]);
        for (std::size_t d = 0; d < n; ++d) contributes[d] = args->contributes[d] != 0;
      }
      a.ready = ready;
      if (contributes) a.contributes = std::span<const bool>(contributes.get(), n);
      a.wire = to_wire(args->wire, "args->wire");
    }
    // Allocated before the call, so that nothing fails once the work is enqueued.
    auto ticket = std::make_unique<tpar_ticket>();
    ticket->comm = comm->comm;
    ticket->ticket = comm->comm->allreduce(s, a);
    *out_ticket = ticket.release();
  });
}

tpar_result tpar_ticket_device_count(const tpar_ticket* ticket, uint32_t* out_count) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_count, "out_count");
    *out_count = 0;
    require(ticket, "ticket");
    *out_count = static_cast<std::uint32_t>(ticket->ticket.done().size());
  });
}

tpar_result tpar_ticket_done(const tpar_ticket* ticket, uint32_t device, tpar_timeline_point* out_point) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_point, "out_point");
    *out_point = {VK_NULL_HANDLE, 0};
    const auto comm = comm_of(ticket);
    const auto& done = ticket->ticket.done();
    if (device >= done.size())
      invalid("device " + std::to_string(device) + " is out of range: the ticket spans " + std::to_string(done.size()));
    *out_point = {static_cast<VkSemaphore>(done[device].semaphore), done[device].value};
  });
}

tpar_result tpar_ticket_ready(const tpar_ticket* ticket, uint32_t* out_ready) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    require(out_ready, "out_ready");
    *out_ready = 0;
    const auto comm = comm_of(ticket);
    const bool ready = ticket->ticket.ready();
    *out_ready = ready;
    if (!ready)
      if (auto e = comm->failure()) throw *e;
  });
}

tpar_result tpar_ticket_wait(const tpar_ticket* ticket, uint64_t timeout_ns) noexcept {
  using namespace tpar::detail::c_api;
  return guard(__func__, [&] {
    const auto comm = comm_of(ticket);  // keeps the communicator alive through the wait
    ticket->ticket.wait(timeout_ns ? std::optional(duration(timeout_ns)) : std::nullopt);
  });
}

void tpar_ticket_free(tpar_ticket* ticket) noexcept { delete ticket; }

}  // extern "C"
