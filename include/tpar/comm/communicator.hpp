// Communicator<Sync, Algo, Staging> — an AllReduce over a DeviceGroup with exactly the
// policies a host instantiates. One thread uses a communicator at a time; its tickets may
// be waited on, and the communicator aborted, from any thread.
//
//   tpar::Communicator<tpar::ProxyBridge> comm(group);
//   tpar::Ticket t = comm.allreduce(spans, {.ready = ready_points});
//   // queue work that waits on t.done(i) on device i, or: t.wait();
#pragma once

#include <tpar/algo/by_size.hpp>
#include <tpar/comm/call.hpp>
#include <tpar/comm/profile.hpp>
#include <tpar/comm/relay_self_test.hpp>
#include <tpar/comm/ticket.hpp>
#include <tpar/core/buffer_span.hpp>
#include <tpar/core/options.hpp>
#include <tpar/comm/detail/comm_plan.hpp>
#include <tpar/comm/detail/comm_relay.hpp>
#include <tpar/comm/detail/communicator_interface.hpp>
#include <tpar/comm/detail/held.hpp>
#include <tpar/comm/detail/plan_cache.hpp>
#include <tpar/comm/detail/plan_maker.hpp>
#include <tpar/comm/detail/policy_options.hpp>
#include <tpar/comm/detail/profile_reader.hpp>
#include <tpar/comm/detail/relay_self_test.hpp>
#include <tpar/comm/detail/remains.hpp>
#include <tpar/comm/detail/stream_port.hpp>
#include <tpar/comm/detail/submitter.hpp>
#include <tpar/comm/detail/validate.hpp>
#include <tpar/staging/capacity.hpp>
#include <tpar/staging/host_import.hpp>
#include <tpar/sync/concepts.hpp>
#include <tpar/sync/proxy_bridge.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

namespace tpar::inline v0 {

template <CrossDeviceSync Sync, Algorithm Algo = BySize, StagingPolicy Staging = HostImport>
class Communicator final : public detail::CommunicatorInterface {
  template <class>
  friend class detail::CommunicatorPort;

 public:
  using Generation = typename Staging::Generation;
  using PlanType = detail::Plan<Generation>;
  static constexpr std::size_t max_plans = detail::PlanCache<Generation>::max_plans;

  explicit Communicator(DeviceGroup group, Options options = {})
      : group_(std::move(group)),
        options_(options),
        health_(std::make_shared<detail::Health>()),
        deferral_(std::make_shared<detail::Deferral>()) {
    detail::remains().reap();
    options_.validate_enums();
    detail::apply_policy_types<Sync, Algo>(options_);
    detail::validate_options(options_);
    relay_.set_up(group_, options_);
    if (group_.size() > 1) Staging::check_support(group_);
    if constexpr (requires { Sync::check_support(group_); }) Sync::check_support(group_);  // before anything is made for it
    try {
      init();
      relay_.test(group_);
    } catch (...) {
      release_all();
      throw;
    }
  }

  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // Waits (bounded by the timeout) for the work in flight, then frees everything. Work
  // that never finishes (a ready point never signalled) keeps its resources: they are
  // kept, and logged, rather than freed under the GPU, and freed once that work is done
  // (detail::remains()). After abort(), it does not wait out the timeout.
  ~Communicator() override {
    const bool aborted = submitter_.aborted();
    {
      const auto lock = use();
      if (aborted) {
        submitter_.drop_deferred();  // never submitted: nothing of theirs is on a queue
      } else {
        // Deferred work still runs: GPU submissions of the host may wait on its done points.
        try {
          flush();
        } catch (const std::exception& e) {
          log(LogLevel::error, std::string("submitting deferred calls on destruction: ") + e.what());
        }
      }
      deferral_->owner = nullptr;  // a ticket's wait submits nothing more
    }
    // After an abort, what is not held on a queue by a point that never comes finishes
    // at once (its waiters were released); the rest is left to the remains.
    const auto first = aborted ? std::chrono::nanoseconds(std::chrono::milliseconds(200)) : options_.timeout;
    const bool drained = submitter_.drain(first);
    if (drained && submitter_.settle(first)) {
      release_all();
      detail::remains().reap();
      return;
    }
    if (!drained && !aborted) {
      try {
        log(LogLevel::error, "communicator destroyed while its work did not finish within the timeout (" + submitter_.progress() +
                                 "): its cross-device waits are released, so the buffers of the calls in flight hold undefined values");
      } catch (...) {
      }
      sync_->release_waiters();
      relay_.abort();
    }
    if (!aborted && submitter_.drain(std::chrono::seconds(1)) && submitter_.settle(std::chrono::seconds(1))) {
      release_all();
      return;
    }
    log(aborted ? LogLevel::info : LogLevel::error,
        std::string(aborted ? "aborted communicator destroyed" : "communicator destroyed") +
            " while its work is still pending on the GPU (a ready point that is never signalled?): its Vulkan objects are "
            "kept until that work is done, rather than freed under the GPU");
    detail::remains().add(take_held());
    detail::remains().reap();
  }

  std::size_t size() const override { return group_.size(); }
  const DeviceGroup& group() const override { return group_; }
  const Options& options() const override { return options_; }
  static constexpr SyncKind sync_kind() { return Sync::kind; }

  // The error that failed this communicator, if any. A failed communicator refuses new
  // calls; build a new one. After a ready point that never came, a new one on the same
  // group queues behind that point too, until it is signalled (docs/api.md).
  std::optional<Error> failure() const override { return health_->error(); }

  // Ends every call of this communicator now, from any thread, while it lives: waits on
  // its tickets and the using thread's own waits (a slot set still in use) end at once
  // with Error(aborted); deferred calls are never submitted (their tickets report the
  // abort); the sync policy's waiters and the relay's kernels are released, so that what
  // is on the queues drains where it can. From then on the communicator is failed
  // (failure() is the abort, calls are refused) and its destruction does not wait out the
  // timeout. Work on a queue behind a ready point that never comes stays there (Vulkan
  // cannot take it back): what it uses is kept until it is done, then freed
  // (detail::remains()). Idempotent; never throws.
  void abort() noexcept override {
    try {
      health_->fail(Error(ErrorCode::aborted, "the communicator was aborted (Communicator::abort): its calls end unfinished"));
    } catch (...) {
    }
    if (!submitter_.abort()) return;  // aborted before
    try {
      if (sync_) sync_->release_waiters();
    } catch (...) {
    }
  }

  // Host staging this communicator holds now, in bytes (all devices).
  std::uint64_t staging_bytes() const override {
    const auto lock = use();
    return cache_.generation() ? cache_.generation()->host_bytes_total() : 0;
  }
  // Calls that may be in flight now: the current staging's slot sets (Options::depth).
  std::uint32_t in_flight() const override {
    const auto lock = use();
    return cache_.generation() ? cache_.generation()->depth() : 0;
  }

  // What the last call chose.
  const CallInfo& last_call() const override { return last_call_; }

  // What the relay's self-test found at creation (ran is false where the relay is
  // neither chosen automatically nor asked for); docs/relay.md, "The self-test".
  const RelaySelfTest& relay_self_test() const override { return relay_.self_test(); }
  // Whether calls through a tpar::StreamAllreduce may take the relay by themselves: the
  // gate allows it (RelayGate::automatic), its self-test passed, its memory was made.
  bool relay_automatic() const override { return relay_.automatic(); }

  // The relay's host threads: calls served, CPU time (tpar-bench reports it per call).
  RelayStats relay_stats() const override {
    const auto lock = use();
    if (!relay_.hub()) return {};
    return relay_.hub()->stats();
  }

  // Staging generations and plans built so far, and the host time they took.
  PlanStats plan_stats() const override {
    const auto lock = use();
    return cache_.stats();
  }

  // Where the last call spent its time, batch by batch (needs Options::profile). Waits
  // (bounded) for the call to finish. Call it right after the call it describes.
  CallProfile profile() override {
    const auto lock = use();
    if (!options_.profile) throw Error(ErrorCode::unsupported, "profile() needs Options::profile");
    CallProfile out;
    out.devices.resize(size());
    if (!last_plan_) return out;
    flush();
    if (!submitter_.drain(options_.timeout)) throw Error(ErrorCode::timeout, "profile(): the last call did not finish within the timeout");
    return detail::read_profile(group_, *last_plan_, last_slot_set_);
  }

  // Sums `spans` (one per device, f32, in place) across the group. Bad input throws
  // Error(invalid_argument) with nothing enqueued and nothing changed.
  Ticket allreduce(std::span<const BufferSpan> spans, const AllreduceArgs& args = {}) override {
    const auto lock = use();
    if (auto e = health_->error())
      throw Error(ErrorCode::failed, std::string("this communicator failed earlier (") + e->what() + "); create a new one");
    detail::validate_call(group_, spans, args);
    const std::size_t n = size(), count = spans[0].count;
    std::uint32_t mask = 0;
    for (std::size_t d = 0; d < n; ++d)
      if (args.contributes.empty() || args.contributes[d]) mask |= 1u << d;
    const bool host_peers = options_.relay_host_peers && count * sizeof(float) <= options_.relay_max_bytes;
    if (count == 0 || (n == 1 && (mask & 1u) && !host_peers)) {
      last_call_ = {"none", args.wire.value_or(options_.wire_for(count * sizeof(float)))};
      return submitter_.noop_ticket(args);
    }

    const ScheduleRequest rq = schedule_request(count, args.wire, mask);
    cache_.free_finished(submitter_.ctx());
    PlanType& plan = plan_for(rq);
    if (args.ready_on_compute_queue)
      for (std::size_t d = 0; d < n; ++d)
        if (!plan.schedule.devices[d].batches.empty() && plan.sole_queue[d] != &group_[d].compute_queue() &&
            (args.ready.empty() || !args.ready[d].semaphore))
          throw Error(ErrorCode::invalid_argument,
                      std::string(plan.schedule.algorithm) + " runs batches on other queues than device " + std::to_string(d) +
                          "'s compute queue: with ready_on_compute_queue, they need its ready point");
    // A relay call and calls of the other algorithms are never in flight together: at a
    // change from one to the other, the calls before it finish first. The relay's kernels
    // wait for each other on the GPUs, and beside other calls in flight they stalled (two
    // H100s, 2026-11-26, docs/relay.md "Calls in flight beside the relay"); relay calls
    // alone, or one call at a time, ran clean.
    const bool relay_call_now = takes_relay(plan.schedule);
    if (submitter_.calls() > 0 && relay_call_now != last_was_relay_) {
      auto span = Trace::instance().span("tpar relay switch wait");
      submitter_.wait_values(submitter_.submitted_values(), relay_call_now ? "the calls before a relay call" : "the relay call before this one");
    }
    last_was_relay_ = relay_call_now;
    const std::uint32_t depth = relay_.slot_sets(plan.schedule, plan.generation->depth(), options_);
    const auto slot_set = static_cast<std::uint32_t>(submitter_.calls() % depth);
    submitter_.wait_for_slot_set(slot_set, depth);
    for (std::size_t d = 0; d < n; ++d)
      detail::prepare_call(
          plan, d, slot_set, spans[d], submitter_.ctx(), options_.profile,
          [&](std::uint32_t src) { return sync_->wait_semaphore(static_cast<std::uint32_t>(d), src); },
          relay_.hub() ? relay_.hub()->release(d) : vk::Semaphore{});
    last_call_ = {plan.schedule.algorithm, plan.schedule.wire};
    last_plan_ = &plan;
    last_slot_set_ = slot_set;
    last_spans_.assign(spans.begin(), spans.end());
    const std::uint64_t relay_call = relay_call_now ? relay_.hub()->record(slot_set, count, rq.contributing) : 0;
    return submitter_.submit(plan, slot_set, args, relay_call);
  }

  Ticket allreduce(std::initializer_list<BufferSpan> spans, const AllreduceArgs& args = {}) {
    return allreduce(std::span<const BufferSpan>(spans.begin(), spans.size()), args);
  }

  // Submits every deferred call, in call order: per device and queue, one vkQueueSubmit
  // for all of them. A no-op when none waits. After abort(), the deferred calls are
  // dropped instead, and the abort is thrown.
  void flush() override {
    const auto lock = use();
    submitter_.flush();
  }

  // Calls deferred and not yet submitted.
  std::size_t deferred() const override {
    const auto lock = use();
    return submitter_.pending().size();
  }

  // What tpar::StreamAllreduce asks of the communicator (detail::StreamPort): a host
  // uses StreamAllreduce rather than this.
  detail::StreamPort& port() override { return port_; }

  // The request a call of `count` values (wire override, contributing mask) schedules:
  // Algo::build(schedule_request(...)) is exactly the schedule it runs.
  ScheduleRequest schedule_request(std::size_t count, std::optional<Wire> wire = std::nullopt,
                                   std::uint32_t contributing = ~0u) const override {
    const auto lock = use();
    ScheduleRequest rq = detail::queue_request(group_, options_, count, wire, contributing);
    relay_.fill(rq, options_);
    // The relay wins automatically only where its calls ride in the host's submissions
    // (tpar::StreamAllreduce, which holds them together); called one at a time, each in a
    // submission of its own, it was slower than OneShot (docs/design/relay-two-gpus.md).
    rq.relay.automatic = rq.relay.automatic && submitter_.has_before_wait();
    return rq;
  }

 private:
  // The communicator's lock (detail::Deferral::use), taken by every entry point.
  std::unique_lock<detail::CallLock> use() const { return std::unique_lock(deferral_->use); }

  // What the communicator holds, moved out of it (the hooks that point into it cleared).
  std::unique_ptr<detail::Held<Sync, Generation>> take_held() {
    health_->set_hook({});  // tickets may outlive the relay
    health_->set_verify({});
    port_.drop_sites();
    if (relay_.hub()) relay_.hub()->stop();
    auto held = std::make_unique<detail::Held<Sync, Generation>>(group_);
    held->ctx = submitter_.take_ctx();
    held->sync = std::move(sync_);
    held->relay = relay_.take_hub();
    held->relay_leftovers = relay_.take_leftovers();
    held->cache = std::move(cache_);
    cache_ = {};
    held->fences = submitter_.take_unsettled();
    return held;
  }

  void init() {
    const auto sources = submitter_.init(exportable_sources());
    deferral_->owner = this;
    deferral_->flush = [](void* self) { static_cast<Communicator*>(self)->flush(); };
    sync_ = std::make_unique<Sync>(group_, std::span<const vk::Semaphore>(sources), options_.timeout,
                                   [h = health_](const Error& e) { h->fail(e); });
  }

  static constexpr bool exportable_sources() {
    if constexpr (requires { Sync::exports_sources; }) return Sync::exports_sources;
    else return false;
  }

  // The plan for a call of `rq`: the cache's, or built once (Algo::build) and made for
  // the current staging, which is made anew first where the capacities change.
  PlanType& plan_for(const ScheduleRequest& rq) {
    detail::PlanKey key = detail::PlanCache<Generation>::key_for(rq);
    PlanType* found = cache_.find(key);
    std::optional<Schedule> built;
    if (!found) {
      built = Algo::build(rq);
      if (takes_relay(*built) && !relay_.ensure(group_, rq.count, options_, health_)) {
        ScheduleRequest without = rq;
        without.relay.automatic = false;
        built = Algo::build(without);
      }
      detail::check_bindable(group_, *built);
    }
    if (cache_.needs_generation(found ? found->schedule : *built)) {
      if (found) built = found->schedule;  // the plans retire, their schedules stand: not built again
      found = nullptr;
      const auto began = std::chrono::steady_clock::now();
      auto fresh = std::make_shared<Generation>(group_, cache_.host_capacity(), options_.depth_for(cache_.host_capacity()),
                                                cache_.scratch_capacity());
      cache_.renew(std::move(fresh), submitter_.submitted_values(), std::chrono::steady_clock::now() - began);
      last_plan_ = nullptr;  // it retired with the others
    }
    if (found) return *found;
    const auto began = std::chrono::steady_clock::now();
    const std::uint32_t sets = relay_.slot_sets(*built, cache_.generation()->depth(), options_);
    auto made = detail::make_plan(group_, submitter_.ctx(), cache_.generation(), std::move(key), std::move(*built), sets, relay_.hub());
    const auto inserted = cache_.insert(std::move(made), std::chrono::steady_clock::now() - began);
    if (inserted.retired && inserted.retired == last_plan_) last_plan_ = nullptr;
    return inserted.plan;
  }

  void release_all() { take_held().reset(); }

  DeviceGroup group_;
  Options options_;
  std::shared_ptr<detail::Health> health_;
  std::shared_ptr<detail::Deferral> deferral_;  // shared with the tickets
  std::unique_ptr<Sync> sync_;
  detail::CommRelay relay_;  // its setup and self-test; its host side, made by the first relay call
  bool last_was_relay_ = false;               // whether the last call took the relay
  detail::PlanCache<Generation> cache_;  // plans, the staging generation, its capacities
  detail::Submitter<Sync, Generation> submitter_{group_, options_, health_, deferral_, sync_, relay_, cache_};
  CallInfo last_call_;
  PlanType* last_plan_ = nullptr;  // the plan of the last call (for profile())
  std::uint32_t last_slot_set_ = 0;
  std::vector<BufferSpan> last_spans_;                         // the last call's spans (for a ride)
  detail::CommunicatorPort<Communicator> port_{*this};
};

}  // namespace tpar::inline v0
