// ggml's tensor-parallel comm hook, answered by tpar. ggml's meta backend (llama.cpp
// `-sm tensor`) looks up three functions by name through the registry of its first
// backend; a Vulkan backend returns tpar's, instantiated for a small traits type that
// says how to see the backend's device, its tensors and its timeline. tpar includes no
// ggml header: everything ggml-specific is in the traits (docs/integrating-ggml.md).
//
//   void* my_reg_get_proc_address(ggml_backend_reg_t, const char* name) {
//     if (void* fn = tpar::ggml::comm_proc_address<MyTraits>(name)) return fn;
//     return nullptr;
//   }
//
// The three hooks never throw: init returns null (and logs why), allreduce returns false
// (declines, so ggml runs its own fallback, with nothing enqueued), free always frees.
#pragma once

#include <tpar/comm/any_communicator.hpp>
#include <tpar/comm/stream.hpp>
#include <tpar/core/log.hpp>
#include <tpar/vk/trace.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0::ggml {

// The names ggml looks the hooks up by.
inline constexpr const char* comm_init_name = "ggml_backend_comm_init";
inline constexpr const char* comm_free_name = "ggml_backend_comm_free";
inline constexpr const char* comm_allreduce_tensor_name = "ggml_backend_comm_allreduce_tensor";

// One tensor as the backend sees it: where its data lies and what it is.
struct TensorView {
  // The VkBuffer holding the tensor's data on this backend's device. Null when the data is
  // not in one VkBuffer of this device (a host buffer, another backend's buffer, a buffer
  // split across allocations): the call is declined.
  vk::Buffer buffer;
  // Byte offset of element 0 in `buffer` (ggml-vulkan: vk_tensor_offset(t) + t->view_offs).
  vk::DeviceSize offset = 0;
  // Size of `buffer` in bytes; a tensor running past it is declined. 0: tpar asks Vulkan
  // for the buffer's memory requirements instead (which may be larger than the buffer).
  vk::DeviceSize buffer_size = 0;
  // ggml_nelements(t).
  std::int64_t elements = 0;
  // t->type == GGML_TYPE_F32.
  bool is_f32 = false;
  // ggml_is_contiguous(t).
  bool is_contiguous = false;
  // t->flags & GGML_TENSOR_FLAG_COMPUTE: false means this device computed nothing for the
  // tensor, its buffer holds garbage, and it counts as zeros (it still gets the sum).
  bool computed = true;
};

// What a backend supplies (all static; see docs/integrating-ggml.md for each member as
// ggml-vulkan answers it):
//
//   using backend_t = ggml_backend_t;        // the handle ggml passes (a pointer)
//   using tensor_t  = ggml_tensor;           // the hook receives tensor_t**
//   static bool is_ours(backend_t);          // a backend of this kind? Must not touch a
//                                            // foreign backend's context (compare the guid).
//   static tpar::AdoptedDevice device(backend_t);
//                                            // instance, physical device, device, compute
//                                            // queue + family + index + lock hooks, optional
//                                            // transfer queue, enabled device extensions
//   static tpar::ggml::TensorView view(backend_t, tensor_t*);
//   static tpar::TimelinePoint ready(backend_t);
//                                            // what the backend's last submitted compute work
//                                            // signals (null semaphore: nothing to wait for)
//   static void wait_for(backend_t, const tpar::TimelinePoint&) noexcept;
//                                            // the backend's next submission (and its
//                                            // synchronize) must wait for this point; it
//                                            // replaces the previous one; a null point means
//                                            // "forget it" (comm_free, after tpar's work ended)
//   static tpar::Options options();          // optional: the communicator's options
//                                            // (TPAR_SYNC/TPAR_ALGO/TPAR_WIRE still apply)
//   static tpar::Stream* stream(backend_t);  // optional: the backend's compute queue as a
//                                            // tpar::Stream its own submissions go through;
//                                            // then ordering is the queues' (no ready
//                                            // point is asked for) and each AllReduce rides
//                                            // in the backend's submissions (comm/stream.hpp)
//   static void release(backend_t) noexcept; // optional: the comm context is gone (called
//                                            // last, once its work ended): the backend may
//                                            // take its own path again
template <class T>
concept BackendTraits = requires(typename T::backend_t backend, typename T::tensor_t* tensor, const TimelinePoint& point) {
  { T::is_ours(backend) } -> std::convertible_to<bool>;
  { T::device(backend) } -> std::convertible_to<AdoptedDevice>;
  { T::view(backend, tensor) } -> std::convertible_to<TensorView>;
  { T::ready(backend) } -> std::convertible_to<TimelinePoint>;
  { T::wait_for(backend, point) } noexcept;
};

// TPAR_GGML_SKIP_ALLREDUCE=1: for timing only. The hook accepts every call it would
// enqueue (checked as always) and sums nothing, so each device goes on with its own
// partial values and the results are wrong; a token then costs each device's own work
// and no boundary, the bound that any AllReduce can approach (docs/design/token-bound.md).
// Read when a context is made; the context says so at warn level.
inline bool skip_wanted() {
  const char* v = std::getenv("TPAR_GGML_SKIP_ALLREDUCE");
  return v && std::string(v) == "1";
}

namespace detail {

template <class T>
Options options_of() {
  if constexpr (requires {
                  { T::options() } -> std::convertible_to<Options>;
                })
    return T::options();
  else
    return Options{};
}

inline bool same_point(const TimelinePoint& a, const TimelinePoint& b) {
  return a.semaphore == b.semaphore && a.value == b.value;
}

template <class T>
Stream* stream_of(typename T::backend_t backend) {
  if constexpr (requires {
                  { T::stream(backend) } -> std::convertible_to<Stream*>;
                })
    return T::stream(backend);
  else
    return nullptr;
}

template <class T>
void release(typename T::backend_t backend) noexcept {
  if constexpr (requires { T::release(backend); }) T::release(backend);
}

}  // namespace detail

// The comm context behind ggml's void*: the backends' devices adopted into one group and
// a runtime-selected communicator over them. One thread uses it at a time (ggml's meta
// backend calls it from its graph_compute).
template <BackendTraits Traits>
class GgmlComm {
 public:
  using backend_t = typename Traits::backend_t;
  using tensor_t = typename Traits::tensor_t;

  // What the hook did with the calls it got.
  struct Stats {
    std::uint64_t reduced = 0;   // enqueued on the GPUs
    std::uint64_t empty = 0;     // zero elements: nothing to do, true
    std::uint64_t declined = 0;  // false: ggml's fallback ran, nothing was enqueued
    std::uint64_t max_elements = 0;  // the largest call enqueued, in values
    std::uint64_t partial = 0;       // calls enqueued where a device computed nothing (counted as zeros)
    std::uint64_t skipped = 0;       // accepted and not summed (TPAR_GGML_SKIP_ALLREDUCE=1)
  };

  // Adopts every backend's device and builds the communicator. Throws tpar::Error (fewer
  // than two backends, a foreign backend, devices tpar cannot drive, a bad TPAR_* value).
  explicit GgmlComm(std::span<const backend_t> backends)
      : backends_(backends.begin(), backends.end()), group_(adopt(backends_)) {
    const std::size_t n = backends_.size();
    for (std::size_t d = 0; d < n; ++d) {
      const auto& caps = group_[d].capabilities();
      align_.push_back(std::max<vk::DeviceSize>(caps.min_storage_offset_alignment, sizeof(float)));
      max_range_.push_back(caps.max_storage_buffer_range);
    }
    Options options = detail::options_of<Traits>();
    comm_.emplace(make_communicator(group_, options));
    try {
      std::vector<Stream*> streams;
      for (auto b : backends_) streams.push_back(detail::stream_of<Traits>(b));
      if (std::all_of(streams.begin(), streams.end(), [](Stream* s) { return s != nullptr; }))
        streamed_ = std::make_unique<StreamAllreduce<AnyCommunicator>>(*comm_, std::move(streams));
    } catch (...) {
      // the backends that handed over a stream take their own path again
      for (auto b : backends_) detail::release<Traits>(b);
      throw;
    }
    views_.resize(n);
    spans_.resize(n);
    ready_.resize(n);
    now_.resize(n);
    seen_ready_.resize(n);
    pending_.resize(n);
    computed_ = std::make_unique<bool[]>(n);
    const Options& o = comm_->options();
    const std::string wire = o.wire ? "wire " + std::string(to_string(*o.wire)) + " at every size"
                                    : "wire f32 below " + std::to_string(o.bf16_min_bytes) + " bytes, bf16 from there";
    log(LogLevel::info, "ggml comm: AllReduce over " + std::to_string(n) + " devices; " + wire + "; " + comm_->sync_reason() +
                            (streamed_ ? "; on the backends' compute queues in their own submissions (streams)"
                                       : "; ordered by timeline semaphores"));
    if (skip_)
      log(LogLevel::warning, "ggml comm: TPAR_GGML_SKIP_ALLREDUCE=1: every AllReduce is accepted and not summed; the results are "
                          "wrong (for timing a token without its boundaries only)");
  }

  GgmlComm(const GgmlComm&) = delete;
  GgmlComm& operator=(const GgmlComm&) = delete;

  // Waits (bounded by the communicator's timeout) for tpar's work in flight, frees it, and
  // tells every backend to forget the done points it was handed.
  ~GgmlComm() {
    try {
      log(LogLevel::info, "ggml comm: " + std::to_string(stats_.reduced) + " AllReduces on the GPUs (the largest " +
                              std::to_string(stats_.max_elements) + " values), " + std::to_string(stats_.partial) +
                              " with a device that computed nothing, " + std::to_string(stats_.empty) + " empty, " +
                              std::to_string(stats_.declined) + " declined to ggml's fallback");
      if (stats_.skipped)
        log(LogLevel::warning, "ggml comm: " + std::to_string(stats_.skipped) +
                                " AllReduces skipped (TPAR_GGML_SKIP_ALLREDUCE=1): the results were wrong");
      if (streamed_ && streamed_->held_calls())
        log(LogLevel::info, "ggml comm: " + std::to_string(streamed_->held_calls()) +
                                " AllReduces held with ggml's work (their batches wait on no other device), released in " +
                                std::to_string(streamed_->hold_releases()) + " submissions a device (TPAR_STREAM_HOLD=" +
                                std::to_string(comm_->options().stream_hold) + ")");
      if (streamed_) {
        const Stream::RideStats r = streamed_->ride_stats();
        if (r.recorded || r.again || r.fell_back)
          log(LogLevel::info, "ggml comm: relay calls' device parts recorded into ggml-vulkan's command buffers (TPAR_RELAY_RIDE): " +
                                  std::to_string(r.recorded) + " (" + std::to_string(r.sites) + " of them as sites of recordings for replay), " +
                                  std::to_string(r.again) + " served by a replayed site, " + std::to_string(r.fell_back) +
                                  " in tpar's own command buffer; " + std::to_string(r.refused) +
                                  " sites could not serve a call (the subgraph was recorded anew)");
      }
      if (const PlanStats p = comm_->plan_stats(); p.generations) {
        // a server whose calls change size: how often the staging was made anew, and the plans
        log(LogLevel::info, "ggml comm: host staging made " +
                                (p.generations == 1 ? std::string("once") : std::to_string(p.generations) + " times") +
                                " (the largest " +
                                std::to_string(p.largest_staging >> 10) + " KiB, all devices), " +
                                tpar::detail::mean_us(p.generation_time, p.generations) + " us each; " +
                                std::to_string(p.plans) + " plans made" +
                                (p.plans ? ", " + tpar::detail::mean_us(p.plan_time, p.plans) + " us each" : std::string()));
      }
      if (const RelayStats r = comm_->relay_stats(); r.calls) {
        // the host's side of a call: from every device's first values seen to the sum and
        // flag in every slot (reading the values as they come, summing, writing)
        log(LogLevel::info, "ggml comm: the relay served " + std::to_string(r.calls) + " AllReduces, " +
                                std::to_string(r.split_calls) + " of them in parts by several host threads (TPAR_RELAY_THREADS=" +
                                std::to_string(comm_->options().relay_threads) + "); a call took its threads " +
                                tpar::detail::mean_us(r.serving, r.calls) + " us from every device's first values to the sum in every slot");
        if (r.timed_arrivals) log(LogLevel::info, "ggml comm: " + relay_arrivals(r));
        log(LogLevel::info, "ggml comm: " + relay_wakeups(r));
        if (r.kernels) log(LogLevel::info, "ggml comm: the relay's kernels (device clock): " + relay_kernel_times(r));
      }
    } catch (...) {  // a summary is not worth a terminate
    }
    streamed_.reset();  // what the streams hold goes to the queues; they stop holding
    comm_.reset();
    for (auto b : backends_) Traits::wait_for(b, TimelinePoint{});
    for (auto b : backends_) detail::release<Traits>(b);
  }

  // Sums tensors[j] (one per backend, in init order) in place across the devices, after
  // each backend's ready point and before its next submission, with no host wait. False
  // declines the call with nothing enqueued; after a failure every call is declined.
  bool allreduce(tensor_t* const* tensors) noexcept {
    auto span = Trace::instance().span("allreduce hook");
    try {
      try {
        return run(tensors);
      } catch (const std::exception& e) {
        // Only the traits' own calls (view, ready) get here, before anything is enqueued.
        return decline(std::string("the backend could not describe the call: ") + e.what());
      } catch (...) {
        return decline("the backend could not describe the call (unknown exception)");
      }
    } catch (...) {  // not even the memory to say why
      ++stats_.declined;
      return false;
    }
  }

  std::size_t size() const { return backends_.size(); }
  const Stats& stats() const { return stats_; }
  // Why the last declined call was declined.
  const std::string& last_decline() const { return last_decline_; }
  // The error that failed this context (after which it declines every call), if any.
  std::optional<Error> failure() const { return failure_; }
  // The communicator (its sync policy, the algorithm and wire of the last call).
  AnyCommunicator& communicator() { return *comm_; }
  // Whether the AllReduces ride in the backends' own submissions (Traits::stream).
  bool streamed() const { return streamed_ != nullptr; }
  const DeviceGroup& group() const { return group_; }

 private:
  static DeviceGroup adopt(const std::vector<backend_t>& backends) {
    const std::size_t n = backends.size();
    if (n < 2) throw Error(ErrorCode::invalid_argument, "the comm hook needs at least 2 backends, got " + std::to_string(n));
    if (n > max_group_devices)
      throw Error(ErrorCode::unsupported, std::to_string(n) + " backends: tpar spans at most " + std::to_string(max_group_devices));
    for (std::size_t j = 0; j < n; ++j) {
      if (!backends[j]) throw Error(ErrorCode::invalid_argument, "backend " + std::to_string(j) + " is null");
      if (!Traits::is_ours(backends[j]))
        throw Error(ErrorCode::unsupported, "backend " + std::to_string(j) + " is not a backend this hook serves");
    }
    std::vector<AdoptedDevice> devices;
    devices.reserve(n);
    for (auto b : backends) devices.push_back(Traits::device(b));
    return DeviceGroup::adopt(devices);
  }

  bool run(tensor_t* const* tensors) {
    const std::size_t n = size();
    if (failure_) return decline(std::string("an earlier failure: ") + failure_->what());
    if (auto e = comm_->failure()) return fail(*e);
    if (!tensors) return decline("no tensor array");

    bool all_empty = true;
    for (std::size_t j = 0; j < n; ++j) {
      if (!tensors[j]) return decline("tensor " + std::to_string(j) + " is null");
      views_[j] = Traits::view(backends_[j], tensors[j]);
      all_empty &= views_[j].elements == 0;
    }
    if (all_empty) {
      ++stats_.empty;
      return true;
    }
    for (std::size_t j = 0; j < n; ++j) {
      const TensorView& v = views_[j];
      if (!v.is_f32) return decline("tensor " + std::to_string(j) + " is not f32 (tpar sums f32)");
      if (!v.is_contiguous) return decline("tensor " + std::to_string(j) + " is not contiguous");
      if (v.elements != views_[0].elements)
        return decline("tensor " + std::to_string(j) + " has " + std::to_string(v.elements) + " elements, tensor 0 has " +
                       std::to_string(views_[0].elements));
    }
    const std::int64_t elements = views_[0].elements;
    if (elements < 0) return decline("a negative element count");
    if (static_cast<std::uint64_t>(elements) > 0xFFFFFFFFull) return decline("more than 2^32-1 elements");
    const auto count = static_cast<std::size_t>(elements);
    const vk::DeviceSize bytes = static_cast<vk::DeviceSize>(count) * sizeof(float);
    for (std::size_t j = 0; j < n; ++j) {
      const TensorView& v = views_[j];
      const std::string who = "tensor " + std::to_string(j);
      if (!v.buffer) return decline(who + " is not in a VkBuffer of its backend's device");
      if (v.offset % align_[j])
        return decline(who + "'s offset " + std::to_string(v.offset) + " is not a multiple of " + std::to_string(align_[j]) +
                       " (minStorageBufferOffsetAlignment)");
      if (bytes > max_range_[j]) return decline(who + " is larger than maxStorageBufferRange");
      if (v.buffer_size && v.offset + bytes > v.buffer_size) return decline(who + " runs past the end of its buffer");
      spans_[j] = BufferSpan{v.buffer, v.offset, count, v.buffer_size};
      computed_[j] = v.computed;
    }
    if (skip_) {
      if (streamed_) streamed_->skip_call();  // the host's work submitted as around a held call
      ++stats_.skipped;  // not in `reduced` nor in its largest call: nothing was summed
      return true;
    }
    // A backend that submitted nothing since the last call still has its old ready point;
    // then the call follows the previous call's done point instead, so two calls in a row
    // on one tensor stay ordered. (With streams, the queues' order does all of this.)
    if (!streamed_)
      for (std::size_t j = 0; j < n; ++j) {
        now_[j] = Traits::ready(backends_[j]);
        ready_[j] = pending_[j] && detail::same_point(now_[j], seen_ready_[j]) ? pending_[j] : now_[j];
      }

    Ticket ticket;
    try {
      AllreduceArgs args;
      args.contributes = std::span<const bool>(computed_.get(), n);
      auto span = Trace::instance().span("tpar call");
      if (streamed_) {
        ticket = streamed_->allreduce(spans_, args);
      } else {
        args.ready = ready_;
        ticket = comm_->allreduce(spans_, args);
      }
    } catch (const Error& e) {
      if (auto failed = comm_->failure()) return fail(*failed);
      const auto code = e.code_value();
      if (code == ErrorCode::invalid_argument || code == ErrorCode::unsupported || code == ErrorCode::out_of_memory)
        return decline(e.what());
      return fail(e);
    } catch (const std::bad_alloc&) {
      if (auto failed = comm_->failure()) return fail(*failed);
      return decline("out of host memory");
    } catch (const std::exception& e) {
      return fail(Error(ErrorCode::failed, e.what()));
    }
    for (std::size_t j = 0; j < n; ++j) {
      seen_ready_[j] = now_[j];
      pending_[j] = ticket.done(j);
      Traits::wait_for(backends_[j], pending_[j]);
    }
    ++stats_.reduced;
    stats_.max_elements = std::max<std::uint64_t>(stats_.max_elements, count);
    if (!std::all_of(computed_.get(), computed_.get() + n, [](bool c) { return c; })) ++stats_.partial;
    return true;
  }

  bool decline(std::string why) {
    ++stats_.declined;
    log(LogLevel::debug, "ggml comm: declined, ggml's fallback runs: " + why);
    last_decline_ = std::move(why);
    return false;
  }

  bool fail(const Error& e) {
    if (!failure_) {
      failure_ = e;
      log(LogLevel::error, std::string("ggml comm: the AllReduce failed (") + e.what() +
                               "); every later call is declined, so ggml's fallback runs. Recreate the context to retry.");
    }
    return decline(std::string("failed: ") + e.what());
  }

  std::vector<backend_t> backends_;
  DeviceGroup group_;
  std::vector<vk::DeviceSize> align_, max_range_;
  std::optional<AnyCommunicator> comm_;
  std::unique_ptr<StreamAllreduce<AnyCommunicator>> streamed_;  // where the traits give streams
  std::vector<TensorView> views_;
  std::vector<BufferSpan> spans_;
  std::vector<TimelinePoint> ready_, now_, seen_ready_, pending_;
  std::unique_ptr<bool[]> computed_;
  std::optional<Error> failure_;
  Stats stats_;
  const bool skip_ = skip_wanted();
  std::string last_decline_;
};

// ggml_backend_comm_init: a context for these backends, or null (logged why) when they
// are fewer than two, not all of this kind, or tpar cannot drive their devices.
template <BackendTraits Traits>
void* comm_init(typename Traits::backend_t* backends, std::size_t n_backends) noexcept {
  try {
    try {
      if (!backends || n_backends < 2) {
        log(LogLevel::info, "ggml comm: " + std::to_string(backends ? n_backends : 0) +
                                " backend(s): nothing to reduce across, no accelerated AllReduce");
        return nullptr;
      }
      for (std::size_t j = 0; j < n_backends; ++j)
        if (!backends[j] || !Traits::is_ours(backends[j])) {
          log(LogLevel::info, "ggml comm: backend " + std::to_string(j) +
                                  " is not one this hook serves; no accelerated AllReduce (ggml's fallback runs)");
          return nullptr;
        }
      return new GgmlComm<Traits>(std::span<const typename Traits::backend_t>(backends, n_backends));
    } catch (const std::exception& e) {
      log(LogLevel::warning, std::string("ggml comm: no accelerated AllReduce (ggml's fallback runs): ") + e.what());
    } catch (...) {
      log(LogLevel::warning, "ggml comm: no accelerated AllReduce (ggml's fallback runs): unknown exception");
    }
  } catch (...) {  // the log itself failed: still null, still nothing thrown
  }
  return nullptr;
}

// ggml_backend_comm_free: waits (bounded) for the context's work in flight, then frees it.
template <BackendTraits Traits>
void comm_free(void* comm_ctx) noexcept {
  delete static_cast<GgmlComm<Traits>*>(comm_ctx);
}

// ggml_backend_comm_allreduce_tensor: tensors[j] belongs to backend j of comm_init.
template <BackendTraits Traits>
bool comm_allreduce_tensor(void* comm_ctx, typename Traits::tensor_t** tensors) noexcept {
  if (!comm_ctx) return false;
  return static_cast<GgmlComm<Traits>*>(comm_ctx)->allreduce(tensors);
}

// For the registry's get_proc_address: the hook of that name, or null for any other name.
template <BackendTraits Traits>
void* comm_proc_address(const char* name) noexcept {
  if (!name) return nullptr;
  if (!std::strcmp(name, comm_init_name)) return reinterpret_cast<void*>(&comm_init<Traits>);
  if (!std::strcmp(name, comm_free_name)) return reinterpret_cast<void*>(&comm_free<Traits>);
  if (!std::strcmp(name, comm_allreduce_tensor_name)) return reinterpret_cast<void*>(&comm_allreduce_tensor<Traits>);
  return nullptr;
}

}  // namespace tpar::inline v0::ggml
