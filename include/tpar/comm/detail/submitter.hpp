// Submitter — one communicator's calls on the devices' queues: each device's timeline
// counters (what was given to batches, handed to the queues, seen reached), the calls
// deferred and not yet submitted, their submission (one vkQueueSubmit per device and
// queue), the waits for a slot set or a value to be reached, and what is left to do
// where a submission failed. It writes a call's timeline values into its plan's submit
// structures (WaitRule, resolve_wait) and makes its ticket.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/batch_list.hpp>
#include <tpar/comm/detail/comm_plan.hpp>
#include <tpar/comm/detail/comm_relay.hpp>
#include <tpar/comm/detail/diagnostics.hpp>
#include <tpar/comm/detail/merged_batches.hpp>
#include <tpar/comm/detail/plan_cache.hpp>
#include <tpar/comm/ticket.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/log.hpp>
#include <tpar/core/options.hpp>
#include <tpar/sync/schedule.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device_group.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tpar::inline v0::detail {

template <class Sync, class Generation>
class Submitter {
 public:
  using PlanType = Plan<Generation>;
  struct Pending {
    PlanType* plan;
    std::uint32_t slot_set;
    std::uint64_t relay;  // the relay's number for the call, or 0
  };

  // The communicator's group, options, health, deferral (shared with the tickets), sync
  // policy (made once the devices' timelines are), relay and plans, all of which outlive
  // this.
  Submitter(DeviceGroup& group, const Options& options, std::shared_ptr<Health> health, std::shared_ptr<Deferral> deferral,
            const std::unique_ptr<Sync>& sync, CommRelay& relay, const PlanCache<Generation>& cache)
      : group_(group),
        options_(options),
        health_(std::move(health)),
        deferral_(std::move(deferral)),
        sync_(sync),
        relay_(relay),
        cache_(cache) {}
  Submitter(const Submitter&) = delete;
  Submitter& operator=(const Submitter&) = delete;

  // Makes every device's timelines and command pools; returns what each device's peers
  // wait on for its uploads (`exportable`: the exported twin, NativeImport).
  std::vector<vk::Semaphore> init(bool exportable) {
    const std::size_t n = group_.size();
    ctx_.resize(n);
    std::vector<vk::Semaphore> sources(n);
    for (std::size_t d = 0; d < n; ++d) {
      auto& c = ctx_[d];
      c.device = &group_[d];
      const vk::Device vkd = c.device->handle();
      c.compute = Timeline(vkd);
      c.transfer = Timeline(vkd);
      c.download = Timeline(vkd);
      c.abort = Timeline(vkd);
      if (exportable) c.shared = Timeline(vkd, true);
      c.merged = &c.device->compute_queue() == &c.device->transfer_queue();
      (void)c.device->kernels();  // here, so a device that cannot bind them fails creation
      // Resettable: without update-after-bind, kernel batches are recorded again per call.
      vk::CommandPoolCreateInfo pool_info(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, c.device->compute_queue().family());
      check(vkd.createCommandPool(&pool_info, nullptr, &c.compute_pool), "vkCreateCommandPool");
      if (c.device->transfer_queue().family() == c.device->compute_queue().family()) {
        c.transfer_pool = c.compute_pool;
      } else {
        pool_info.queueFamilyIndex = c.device->transfer_queue().family();
        check(vkd.createCommandPool(&pool_info, nullptr, &c.transfer_pool), "vkCreateCommandPool");
      }
      sources[d] = exportable ? c.shared.handle() : c.transfer.handle();
    }
    gather_.resize(n);
    flushed_.resize(n);
    pending_.reserve(8);
    // By slot set, across generations: a set's index may be reused by a later generation
    // (whose memory is new) but the relay's slots are the same memory whatever the
    // generation, so a set waits for the last call of any generation that used its index.
    slot_done_.assign(options_.max_slot_sets(), std::vector<std::uint64_t>(role_count * n, 0));
    return sources;
  }

  std::vector<DeviceContext>& ctx() { return ctx_; }
  const std::vector<DeviceContext>& ctx() const { return ctx_; }
  const std::vector<Pending>& pending() const { return pending_; }
  std::uint64_t calls() const { return calls_; }
  std::vector<std::uint64_t> submitted_values() const { return detail::submitted_values(ctx_); }
  std::string progress() const { return detail::progress(ctx_, *sync_, cache_); }

  // What runs before tpar submits deferred calls itself or waits on the host for its own
  // work (StreamPort::set_before_wait).
  void set_before_wait(std::function<void()> f) { before_wait_ = std::move(f); }
  bool has_before_wait() const { return static_cast<bool>(before_wait_); }

  // Submits every deferred call, in call order: per device and queue, one vkQueueSubmit
  // for all of them (Communicator::flush).
  void flush() {
    if (aborted() && !pending_.empty()) {
      drop_deferred();
      throw health_->error().value_or(Error(ErrorCode::aborted, "the communicator was aborted"));
    }
    if (before_wait_) {
      before_wait_();  // what the host held of handed calls is on the queues now
      if (pending_.empty()) deferral_->submitted_calls.store(calls_, std::memory_order_release);
    }
    if (pending_.empty()) return;
    const std::size_t n = size();
    // Every device's share in one piece: another communicator of the group must not put
    // its batches between ours on one queue and behind ours on another.
    const auto order = group_.lock_submissions();
    for (auto& f : flushed_) f.clear();
    try {
      for (std::size_t d = 0; d < n; ++d) submit_pending(d);
    } catch (...) {
      drop_pending();  // the communicator failed; its tickets report that
      throw;
    }
    pending_on_queues();
    deferral_->submitted_calls.store(calls_, std::memory_order_release);
  }

  // Deferred calls that will never be submitted (after abort()).
  void drop_deferred() {
    if (pending_.empty()) return;
    pending_.clear();
    relay_.abort();
  }

  // abort() was called (from any thread).
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // The first abort(): every host wait on the devices' work ends (each device's abort
  // timeline signalled). False where it was aborted before.
  bool abort() noexcept {
    if (aborted_.exchange(true, std::memory_order_acq_rel)) return false;
    for (auto& c : ctx_) {
      if (!c.abort.handle()) continue;
      const vk::SemaphoreSignalInfo info(c.abort.handle(), 1);
      (void)c.device->handle().signalSemaphore(&info);
    }
    return true;
  }

  // The ticket of a call that does nothing: done where the device's work so far is.
  Ticket noop_ticket(const AllreduceArgs& args) {
    const std::size_t n = size();
    std::vector<TimelinePoint> done(n);
    std::vector<Ticket::DeviceWait> waits(n);
    for (std::size_t d = 0; d < n; ++d) {
      auto& c = ctx_[d];
      // (A ready point in the compute queue's order may be signalled by nothing: the host
      // signals it only for calls that need it. tpar's last point is as good there.)
      if (!args.ready.empty() && args.ready[d].semaphore && !args.ready_on_compute_queue) done[d] = args.ready[d];
      else done[d] = {c.compute.handle(), c.submitted[0]};
      waits[d] = {c.device->handle(), {c.compute.handle(), c.transfer.handle()}, {c.submitted[0], c.submitted[1]}, c.abort.handle()};
    }
    return Ticket(std::move(done), std::move(waits), health_, options_.timeout, deferral_, calls_);
  }

  // The batches StreamPort::take_pending handed out: `reached[d]` of device d's reached
  // its queue (every device's leading part at least; what is missing the host holds, to
  // submit with its next work).
  void handed(std::vector<BatchList>& out, std::span<const std::size_t> reached) {
    if (pending_.empty()) return;
    const std::size_t n = size();
    pending_on_queues();
    for (auto& c : ctx_) std::copy(std::begin(c.submitted), std::end(c.submitted), std::begin(c.queued));
    // Where the host still holds batches of these calls, a ticket's wait must have them
    // submitted first (flush() runs the host's hook): they count as submitted only then.
    bool all_out = true;
    for (std::size_t d = 0; d < n; ++d) all_out &= d < reached.size() && reached[d] == out[d].size();
    if (all_out) deferral_->submitted_calls.store(calls_, std::memory_order_release);
  }
  // A submission of them failed: the communicator fails, what reached a queue is released
  // (as after a failed flush).
  void hand_failed(std::vector<BatchList>& out, std::span<const std::size_t> reached) {
    if (pending_.empty()) return;
    const std::size_t n = size();
    for (auto& f : flushed_) f.clear();
    for (std::size_t d = 0; d < n; ++d) flushed_[d].push_back({out[d].infos(false), d < reached.size() ? reached[d] : 0});
    health_->fail(Error(ErrorCode::failed, "the host's submission carrying tpar's batches failed"));
    drop_pending();
  }

  // What the communicator leaves in detail::remains() where work on the queues still
  // uses it: the devices' contexts and settle()'s fences that had not signalled.
  std::vector<DeviceContext> take_ctx() {
    auto out = std::move(ctx_);
    ctx_.clear();
    return out;
  }
  std::vector<std::pair<vk::Device, vk::Fence>> take_unsettled() {
    auto out = std::move(unsettled_);
    unsettled_.clear();
    return out;
  }

  // Blocks (bounded) until every device finished the call that last used slot set `slot_set`.
  // Where that means blocking, it waits for the call that last used the set needed
  // depth/2 - 1 calls from now, so that the calls in between find theirs free: one
  // blocking wait (a sleep and a wake-up in the driver) per depth/2 calls rather than one
  // per call, with depth/2 calls or more still queued for the GPU.
  void wait_for_slot_set(std::uint32_t slot_set, std::uint32_t depth) {
    const std::size_t n = size();
    const auto& need = slot_done_[slot_set];
    auto reached = [&] {
      for (std::size_t d = 0; d < n; ++d)
        for (std::size_t r = 0; r < role_count; ++r)
          if (ctx_[d].completed[r] < need[r * n + d]) return false;
      return true;
    };
    if (reached()) return;
    // What the GPUs reached since the cache was last brought up to date (usually all of
    // it: the call that last used the set is long done), without waking anyone.
    for (std::size_t d = 0; d < n; ++d)
      for (std::size_t r = 0; r < role_count; ++r) (void)reached_now(d, static_cast<Role>(r), need[r * n + d]);
    if (reached()) return;
    const std::uint32_t ahead = std::max<std::uint32_t>(1, depth / 2) - 1;
    auto span = Trace::instance().span("tpar slot wait");
    wait_values(slot_done_[(slot_set + ahead) % depth], "the call that last used this staging slot set");
    // The set itself: reached already where sets went round in order, not always across
    // a change of generation (a set's index may have been used later than the one ahead).
    wait_values(slot_done_[slot_set], "the call that last used this staging slot set");
  }

  // Whether device d's timeline of role r reached `value`, asking the driver (without
  // waiting) only where the cache of what it reached says not yet.
  bool reached_now(std::size_t d, Role r, std::uint64_t value) {
    auto& c = ctx_[d];
    std::uint64_t& done = c.completed[static_cast<int>(r)];
    if (done >= value) return true;
    std::uint64_t now = 0;
    if (c.device->handle().getSemaphoreCounterValue(c.timeline(r).handle(), &now) == vk::Result::eSuccess)
      done = std::max(done, now);
    return done >= value;
  }

  void wait_values(const std::vector<std::uint64_t>& need, const std::string& what) {
    const std::size_t n = size();
    if (before_wait_) before_wait_();
    // A value that only a deferred call signals: submit them first.
    for (std::size_t d = 0; d < n && !pending_.empty(); ++d)
      for (std::size_t r = 0; r < role_count; ++r)
        if (need[r * n + d] > ctx_[d].queued[r]) {
          flush();
          break;
        }
    for (std::size_t d = 0; d < n; ++d) {
      auto& c = ctx_[d];
      // Only the timelines not yet seen there (the download timeline of a plan without
      // downloads never is): a wait on fewer semaphores is cheaper for the driver.
      vk::Semaphore sems[role_count];
      std::uint64_t values[role_count];
      std::size_t m = 0;
      for (std::size_t r = 0; r < role_count; ++r)
        if (c.completed[r] < need[r * n + d]) {
          sems[m] = c.timeline(static_cast<Role>(r)).handle();
          values[m++] = need[r * n + d];
        }
      if (!m) continue;
      const WaitOutcome end =
          wait_or_abort(c.device->handle(), std::span(sems, m), std::span(values, m), c.abort.handle(), options_.timeout);
      if (end.aborted) throw health_->error().value_or(Error(ErrorCode::aborted, "the communicator was aborted"));
      const vk::Result r = end.result;
      if (r != vk::Result::eSuccess) {
        const Error e = not_finished(d, what, r, progress());
        health_->fail(e);
        sync_->release_waiters();
        relay_.abort();
        throw e;
      }
      for (std::size_t k = 0; k < role_count; ++k) c.completed[k] = std::max(c.completed[k], need[k * n + d]);
    }
  }

  // `relay_call`: the relay's number for this call (0: not a relay call), what its collect
  // batches wait for.
  Ticket submit(PlanType& plan, std::uint32_t slot_set, const AllreduceArgs& args, std::uint64_t relay_call) {
    const std::size_t n = size();
    for (std::size_t d = 0; d < n; ++d) {
      auto& sub = plan.submits[d][slot_set];
      auto& c = ctx_[d];
      // Waits on the device's own timelines are left out where this call and the last run
      // all their batches on one queue, the same: each batch starts with a full barrier,
      // which orders it after everything submitted to that queue before it. A driver's
      // vkQueueSubmit costs more per wait (docs/PERFORMANCE.md).
      const Queue* sole = plan.sole_queue[d];
      const bool has_ready = !args.ready.empty() && args.ready[d].semaphore;
      const WaitSite site{c, ctx_, has_ready ? &args.ready[d] : nullptr, sole && c.sole_queue == sole, sole != nullptr, relay_call};
      const auto& batches = plan.schedule.devices[d].batches;
      for (std::size_t b = 0; b < sub.batch_waits.size(); ++b) {
        auto& bw = sub.batch_waits[b];
        // The caller's ready point in queue order on the compute queue: a batch there
        // follows it (and tpar's previous call) by submission order and its leading barrier.
        const bool queue_ordered = args.ready_on_compute_queue && (c.merged || queue_of(batches[b]) == Role::compute);
        std::uint32_t k = bw.first;
        for (std::uint32_t w = bw.first; w < bw.first + bw.count; ++w) {
          const auto [semaphore, value] = resolve_wait(sub.wait_rules[w], site, queue_ordered);
          if (value == 0) continue;
          sub.wait_semaphores[k] = semaphore;
          sub.wait_values[k++] = value;
        }
        bw.info->waitSemaphoreCount = bw.timeline_info->waitSemaphoreValueCount = k - bw.first;
      }
      c.sole_queue = sole;
      for (std::size_t s = 0; s < sub.signal_rules.size(); ++s)
        if (sub.signal_semaphores[s])
          sub.signal_values[s] = c.submitted[static_cast<int>(sub.signal_rules[s].first)] + sub.signal_rules[s].second + 1;
    }
    for (std::size_t d = 0; d < n; ++d) plan.submits[d][slot_set].transfer_base = ctx_[d].submitted[1];
    pending_.push_back({&plan, slot_set, relay_call});
    std::vector<TimelinePoint> done(n);
    std::vector<Ticket::DeviceWait> waits(n);
    auto& slot = slot_done_[slot_set];
    for (std::size_t d = 0; d < n; ++d) {
      auto& c = ctx_[d];
      const std::uint64_t compute_base = c.submitted[0];
      for (std::size_t r = 0; r < role_count; ++r) c.submitted[r] += plan.role_counts[d][r];
      if (plan.final_compute[d] != ~0u) done[d] = {c.compute.handle(), compute_base + plan.final_compute[d] + 1};
      else if (!args.ready.empty() && args.ready[d].semaphore && !args.ready_on_compute_queue) done[d] = args.ready[d];
      else done[d] = {c.compute.handle(), compute_base};
      // Every download is followed by a compute batch that waits for it, so the ticket's
      // compute and upload points cover the downloads too.
      waits[d] = {c.device->handle(), {c.compute.handle(), c.transfer.handle()}, {c.submitted[0], c.submitted[1]}, c.abort.handle()};
      for (std::size_t r = 0; r < role_count; ++r) slot[r * n + d] = plan.last_use[r][d] = c.submitted[r];
    }
    ++calls_;
    Ticket ticket(std::move(done), std::move(waits), health_, options_.timeout, deferral_, calls_);
    if (!args.defer) flush();
    return ticket;
  }

 private:
  // Hands device d's share of the deferred calls to its queues: one vkQueueSubmit per
  // queue, the batches in call order (a queue takes its batches in submission order, so a
  // later call's batch must never go ahead of an earlier one's on the same queue), those
  // that wait on nothing folded into the one before (MergedBatches).
  void submit_pending(std::size_t d) {
    auto& c = ctx_[d];
    auto submit_to = [&](Queue& q, std::span<const vk::SubmitInfo> infos) {
      if (infos.empty()) return;
      std::size_t reached = 0;
      const vk::Result r = q.submit(infos, {}, &reached);
      flushed_[d].push_back({infos, reached});
      if (r != vk::Result::eSuccess) {
        const Error e(code_for(r), "vkQueueSubmit on device " + std::to_string(d) + ": " + vk::to_string(r), r);
        health_->fail(e);
        throw e;
      }
    };
    if (pending_.size() == 1) {
      for (const auto& g : pending_[0].plan->submits[d][pending_[0].slot_set].groups) submit_to(c.queue(g.role), g.infos);
    } else {
      Queue* queues[role_count] = {};
      std::size_t used = 0;
      for (auto& batches : gather_[d]) batches.clear();
      for (const auto& p : pending_)
        for (const auto& g : p.plan->submits[d][p.slot_set].groups) {
          Queue* q = &c.queue(g.role);
          std::size_t k = 0;
          while (k < used && queues[k] != q) ++k;
          if (k == used) queues[used++] = q;
          for (const auto& info : g.infos) gather_[d][k].add(info);
        }
      for (std::size_t k = 0; k < used; ++k) submit_to(*queues[k], gather_[d][k].build());
    }
    std::copy(std::begin(c.submitted), std::end(c.submitted), std::begin(c.queued));
  }

  // The pending calls' batches reached the queues (flush(), or the host's submission
  // that carried them): only now tell the sync policy what the queues wait for, so that
  // no value is signalled to a device before its wait on that value was submitted; and
  // the relay's thread serves a call only once its batches are on the queues.
  void pending_on_queues() {
    const std::size_t n = size();
    for (const auto& p : pending_)
      for (std::size_t d = 0; d < n; ++d)
        for (const auto& [src, index] : p.plan->submits[d][p.slot_set].expects)
          sync_->expect(static_cast<std::uint32_t>(d), src, p.plan->submits[src][p.slot_set].transfer_base + index + 1);
    std::uint64_t relay_calls = 0;
    for (const auto& p : pending_) relay_calls = std::max(relay_calls, p.relay);
    if (relay_calls) relay_.hub()->submitted(relay_calls);
    pending_.clear();
  }

  // They never will: release what they hold, and end the relay's calls.
  void drop_pending() {
    abandon_pending();
    pending_.clear();
    relay_.abort();
  }

  // After a vkQueueSubmit failed part-way through flush(): the batches that reached a
  // queue may wait on values that only the batches that did not would have signalled
  // (a peer's uploads, this device's other queue). The sync policy releases its waiters,
  // and those values are signalled from the host, each once the GPU reached the value
  // before it (a host signal may not pass a signal still pending on the GPU), so that
  // every queue drains, bounded by the timeout. The communicator is failed already; the
  // calls' buffers hold undefined values.
  void abandon_pending() noexcept {
    try {
      const std::size_t n = size();
      for (const auto& p : pending_)
        for (std::size_t d = 0; d < n; ++d)
          for (const auto& [src, index] : p.plan->submits[d][p.slot_set].expects)
            sync_->expect(static_cast<std::uint32_t>(d), src, p.plan->submits[src][p.slot_set].transfer_base + index + 1);
      sync_->release_waiters();
      struct Owed {
        vk::Device device;
        vk::Semaphore semaphore;
        std::vector<std::uint64_t> values;  // signalled by no batch that reached a queue
      };
      std::vector<Owed> owed;
      for (std::size_t d = 0; d < n; ++d) {
        auto& c = ctx_[d];
        // Each semaphore the batches that reached this device's queues signal, with the
        // highest value (a queue's values rise in its order): those the GPU signals.
        std::vector<std::pair<vk::Semaphore, std::uint64_t>> on_gpu;
        for (const auto& f : flushed_[d])
          for (const auto& info : f.infos.first(f.reached)) {
            const auto& ti = *static_cast<const vk::TimelineSemaphoreSubmitInfo*>(info.pNext);
            for (std::uint32_t k = 0; k < info.signalSemaphoreCount; ++k) {
              auto it = std::find_if(on_gpu.begin(), on_gpu.end(), [&](const auto& e) { return e.first == info.pSignalSemaphores[k]; });
              if (it == on_gpu.end()) on_gpu.emplace_back(info.pSignalSemaphores[k], ti.pSignalSemaphoreValues[k]);
              else it->second = std::max(it->second, ti.pSignalSemaphoreValues[k]);
            }
          }
        for (const auto& p : pending_)
          for (const auto& g : p.plan->submits[d][p.slot_set].groups)
            for (std::size_t k = 0; k < g.infos.size(); ++k)
              for (std::uint32_t i = 0; i < g.infos[k].signalSemaphoreCount; ++i) {
                const vk::Semaphore sem = g.infos[k].pSignalSemaphores[i];
                const std::uint64_t value = g.timeline_infos[k].pSignalSemaphoreValues[i];
                const auto gpu = std::find_if(on_gpu.begin(), on_gpu.end(), [&](const auto& e) { return e.first == sem; });
                if (gpu != on_gpu.end() && value <= gpu->second) continue;  // a batch on a queue signals it
                auto it = std::find_if(owed.begin(), owed.end(), [&](const Owed& o) { return o.semaphore == sem; });
                if (it == owed.end()) it = owed.insert(owed.end(), {c.device->handle(), sem, {}});
                it->values.push_back(value);
              }
      }
      for (auto& o : owed) std::sort(o.values.begin(), o.values.end());
      const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
      bool left = !owed.empty();
      while (left && std::chrono::steady_clock::now() < deadline) {
        left = false;
        bool advanced = false;
        for (auto& o : owed) {
          if (o.values.empty()) continue;
          std::uint64_t now = 0;
          if (o.device.getSemaphoreCounterValue(o.semaphore, &now) != vk::Result::eSuccess) {
            o.values.clear();  // the device is lost: nothing waits on it any more
            continue;
          }
          if (now + 1 < o.values.front()) {
            left = true;  // the GPU has not reached the value before it yet
            continue;
          }
          std::size_t last = 0;  // the run of owed values that follows
          while (last + 1 < o.values.size() && o.values[last + 1] == o.values[last] + 1) ++last;
          const vk::SemaphoreSignalInfo info(o.semaphore, o.values[last]);
          if (o.values[last] > now && o.device.signalSemaphore(&info) != vk::Result::eSuccess) {
            o.values.clear();
            continue;
          }
          o.values.erase(o.values.begin(), o.values.begin() + static_cast<std::ptrdiff_t>(last) + 1);
          left |= !o.values.empty();
          advanced = true;
        }
        if (left && !advanced) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      if (left)
        log(LogLevel::error, "a failed submission left batches on the GPU that did not drain within the timeout: " + progress());
      for (auto& c : ctx_) std::copy(std::begin(c.submitted), std::end(c.submitted), std::begin(c.queued));
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("releasing the batches of a failed submission: ") + e.what());
    }
  }

 public:
  // Waits up to `timeout` for everything submitted to finish.
  bool drain(std::chrono::nanoseconds timeout) {
    if (before_wait_) {
      try {
        before_wait_();
      } catch (const std::exception& e) {
        log(LogLevel::error, std::string("submitting what the host held of tpar's calls: ") + e.what());
      }
    }
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& c : ctx_) {
      const vk::Semaphore sems[role_count] = {c.compute.handle(), c.transfer.handle(), c.download.handle()};
      const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      if (tpar::wait(c.device->handle(), sems, c.queued, left) != vk::Result::eSuccess) return false;
    }
    return true;
  }

  // Waits up to `timeout` until the driver is through with every batch submitted so far
  // to the queues tpar uses: an empty submission with a fence on each, waited for. That a
  // batch signalled is not enough before destroying the semaphores it waited on: Mesa's
  // common queue code (lavapipe, and drivers that emulate timelines with it) releases the
  // timeline points a batch waited on after the batch signalled, on its submit thread,
  // writing into the semaphore; destroyed meanwhile, that was heap corruption (a SIGSEGV
  // at the end of a test under load). Each queue's submissions are taken in order, so
  // once the fence signals, the earlier batches (ours, and the host's that waited on our
  // done points) are through.
  bool settle(std::chrono::nanoseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (auto& c : ctx_) {
      const vk::Device vkd = c.device->handle();
      Queue* queues[role_count];
      for (Queue* q : c.used_queues(queues)) {
        vk::Fence fence;
        const vk::FenceCreateInfo info;
        if (vkd.createFence(&info, nullptr, &fence) != vk::Result::eSuccess) return false;
        if (q->submit({}, fence) != vk::Result::eSuccess) {
          vkd.destroyFence(fence);
          return false;
        }
        const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
        if (vkd.waitForFences(1, &fence, VK_TRUE, static_cast<std::uint64_t>(std::max<std::int64_t>(left.count(), 0))) !=
            vk::Result::eSuccess) {
          unsettled_.push_back({vkd, fence});  // still queued: destroyed once a later fence on the queue signals
          return false;
        }
        vkd.destroyFence(fence);
      }
    }
    // Every queue is through, so the fences of an earlier attempt signalled too.
    for (auto [vkd, fence] : unsettled_) vkd.destroyFence(fence);
    unsettled_.clear();
    return true;
  }


 private:
  std::size_t size() const { return ctx_.size(); }

  DeviceGroup& group_;
  const Options& options_;
  std::shared_ptr<Health> health_;
  std::shared_ptr<Deferral> deferral_;
  const std::unique_ptr<Sync>& sync_;
  CommRelay& relay_;
  const PlanCache<Generation>& cache_;
  std::vector<DeviceContext> ctx_;
  std::vector<Pending> pending_;  // deferred calls, in call order (distinct slot sets: at most depth)
  std::vector<std::array<MergedBatches, role_count>> gather_;  // by device, queue: flush()'s batches
  // By device: the batches this flush() handed each queue, and how many of them reached
  // it (all, or those before a vkQueueSubmit that failed), for abandon_pending(). The
  // batches are the plan's or gather_'s, valid until the flush returns.
  struct Flushed {
    std::span<const vk::SubmitInfo> infos;
    std::size_t reached = 0;
  };
  std::vector<std::vector<Flushed>> flushed_;
  std::vector<std::pair<vk::Device, vk::Fence>> unsettled_;  // settle()'s fences that had not signalled
  std::vector<std::vector<std::uint64_t>> slot_done_;  // [slot_set][role * n + device]
  std::uint64_t calls_ = 0;
  std::function<void()> before_wait_;  // tpar::Stream's: submit what it holds of tpar's calls
  std::atomic<bool> aborted_{false};   // abort() was called (from any thread)
};

}  // namespace tpar::inline v0::detail
