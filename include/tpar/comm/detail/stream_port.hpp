// StreamPort — what tpar::StreamAllreduce asks of a communicator, kept off its public
// surface: handing the deferred calls to the host's own submissions, riding in the host's
// command buffers, and running the host's hook before tpar waits. A host uses
// StreamAllreduce rather than this; `comm.port()` reaches it (Communicator and
// AnyCommunicator alike). Every member takes the communicator's lock, as its entry
// points do.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/batch_list.hpp>
#include <tpar/comm/detail/ride_sites.hpp>
#include <tpar/comm/ticket.hpp>
#include <tpar/core/error.hpp>
#include <tpar/sync/schedule_split.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

namespace tpar::inline v0::detail {

// What take_pending() did.
struct Handoff {
  // The deferred calls were handed out. False: a batch of theirs runs on another queue
  // than its device's compute queue, and nothing changed (flush() submits them).
  bool taken = false;
  // Whether the rest may wait for the host's next submission on its device: true where
  // no device waits on another's rest (OneShot's sum, the relay's collect), so that
  // holding one device's rest back cannot hold up another; false (ChunkedRing's steps
  // wait on each other's) means every device's rest goes out at once, after every
  // device's leading part.
  bool rest_may_wait = true;
};

class StreamPort {
 public:
  // The communicator's lock, for a caller that makes several of its calls as one (what
  // tpar::StreamAllreduce does for each AllReduce): a ticket's wait on another thread
  // (which may submit deferred calls) waits for it.
  virtual std::unique_lock<CallLock> exclusive() const = 0;

  // Hands the deferred calls to the host's own submissions instead of submitting them
  // (what tpar::Stream does at each AllReduce). Possible where every batch of every
  // pending call runs on its device's compute queue (OneShot and the relay; not
  // ChunkedRing's copies on a device with a transfer queue): then `out[d]` gets device
  // d's batches, in order, `leading[d]` how many of them come before the first that
  // waits on another device (or the relay's host thread). (Both are the caller's, kept
  // from call to call so that a call allocates nothing.) The host must then submit, on
  // every device's compute queue, ahead of anything it submits there later, first the
  // leading batches of every device (so no queue waits on a signal not yet submitted),
  // then the rest (Handoff::rest_may_wait says when); and call handed() once every device's
  // leading part reached its queue.
  virtual Handoff take_pending(std::vector<BatchList>& out, std::vector<std::size_t>& leading) = 0;

  // The batches take_pending() handed out: `reached[d]` of device d's reached its queue
  // (every device's leading part at least; what is missing the host holds, to submit
  // with its next work).
  virtual void handed(std::vector<BatchList>& out, std::span<const std::size_t> reached) = 0;
  // A submission of them failed, and the communicator fails: what reached a queue
  // (`reached[d]` of device d's) is released (as after a failed flush), and the host
  // must drop the rest.
  virtual void hand_failed(std::vector<BatchList>& out, std::span<const std::size_t> reached) = 0;

  // Whether no batch of the deferred calls waits on another device's batch: only on its
  // own device's work or on the relay's host thread (OneShot's sum waits on its peers; the
  // relay does not). Such calls may be held back on every device and submitted together
  // later (tpar::StreamAllreduce, Options::stream_hold): no queue then waits on a
  // submission of another's that is not yet made.
  virtual bool pending_waits_on_host_only() const = 0;

  // Riding (docs/design/relay-ride.md): device d's part of the last call recorded into a
  // command buffer of the host's instead of tpar's own, for tpar::StreamAllreduce.
  //
  // Whether it can ride: a relay call whose kernels wait for the sum on the GPU (one
  // compute batch of one kernel on the device), Options::relay_ride on, no profiling.
  virtual bool last_call_rides(std::size_t d) const = 0;
  // Records device d's part of the last call (last_call_rides(d)) into `cb`: its kernel
  // between two barriers (`ordered`: the first left out, as the host vouches that nothing
  // before needs it: detail::record_ride_commands). `keep`: the host submits `cb` again
  // for later calls, so the kernel is recorded as a site (its id returned, for bind_site() before each later
  // submission, forget_site() once the host frees `cb`); nullopt, with nothing recorded,
  // where every site is in use. Otherwise (0) the call's own descriptor set is bound, and
  // `cb` must be submitted once, before the next call.
  virtual std::optional<std::uint64_t> record_ride(std::size_t d, vk::CommandBuffer cb, bool keep, bool ordered = false,
                                                   const RideBeside& beside = {}) = 0;
  // Site `id` of device d to serve device d's part of the last call (last_call_rides(d))
  // in a command buffer the host submits again. False (nothing changed) where it cannot:
  // not a site of this communicator's device d, made for another buffer, size or mode, or
  // its previous call not yet done on the device (never blocks).
  virtual bool bind_site(std::size_t d, std::uint64_t id) = 0;
  // The host freed the command buffers that held site `id` of device d.
  virtual void forget_site(std::size_t d, std::uint64_t id) = 0;
  // Sites in use on device d.
  virtual std::size_t sites_in_use(std::size_t d) const = 0;

  // Whether a call of `count` values (`contributing`: as AllreduceArgs::contributes) runs
  // so that each device's part of it can be handed to a thread of its own
  // (StreamAllreduce::allreduce_split): every batch on the devices' compute queues, and no device
  // waiting on what a peer submits after its own first wait (OneShot; not the ring's
  // steps, nor the relay). Chooses (and makes) the plan the call would take; enqueues
  // nothing.
  virtual bool per_device(std::size_t count, std::uint32_t contributing = ~0u) = 0;

  // What runs before tpar submits deferred calls itself or waits on the host for its own
  // work (a ticket's wait, a slot set still in use, destruction): tpar::Stream submits
  // what it holds of earlier calls, so that nothing tpar waits for is still in its hands.
  virtual void set_before_wait(std::function<void()> f) = 0;

 protected:
  StreamPort() = default;
  StreamPort(const StreamPort&) = delete;
  StreamPort& operator=(const StreamPort&) = delete;
  ~StreamPort() = default;
};

// The port of a Communicator<...> (`Comm`), of which it is a friend: it reaches the
// communicator's deferred calls, last call and relay directly.
template <class Comm>
class CommunicatorPort final : public StreamPort {
 public:
  explicit CommunicatorPort(Comm& comm) : comm_(comm) {}

  std::unique_lock<CallLock> exclusive() const override { return comm_.use(); }

  Handoff take_pending(std::vector<BatchList>& out, std::vector<std::size_t>& leading) override {
    const auto lock = comm_.use();
    const auto& pending = comm_.submitter_.pending();
    const std::size_t n = comm_.size();
    out.resize(n);
    leading.assign(n, 0);
    for (auto& l : out) l.clear();
    if (pending.empty()) return {true, true};
    for (const auto& p : pending)
      for (std::size_t d = 0; d < n; ++d)
        for (const auto& g : p.plan->submits[d][p.slot_set].groups)
          if (&comm_.submitter_.ctx()[d].queue(g.role) != &comm_.group_[d].compute_queue()) return {false, true};
    for (std::size_t d = 0; d < n; ++d) {
      const auto& c = comm_.submitter_.ctx()[d];
      const vk::Semaphore own[] = {c.compute.handle(), c.transfer.handle(), c.download.handle()};
      bool waiting = false;
      for (const auto& p : pending)
        for (const auto& g : p.plan->submits[d][p.slot_set].groups) {
          out[d].append(g.infos);
          for (const auto& info : g.infos) {
            // A wait on the device's own timelines is on a value already submitted.
            for (std::uint32_t k = 0; k < info.waitSemaphoreCount && !waiting; ++k)
              waiting = std::find(std::begin(own), std::end(own), info.pWaitSemaphores[k]) == std::end(own);
            if (!waiting) ++leading[d];
          }
        }
    }
    // One call (one queue a device, so its batches in schedule order): the rest may wait
    // where no batch of a device's rest is what another device waits on.
    return {true, pending.size() == 1 && peer_waits_within(pending[0].plan->schedule, leading)};
  }

  void handed(std::vector<BatchList>& out, std::span<const std::size_t> reached) override {
    const auto lock = comm_.use();
    comm_.submitter_.handed(out, reached);
  }

  void hand_failed(std::vector<BatchList>& out, std::span<const std::size_t> reached) override {
    const auto lock = comm_.use();
    comm_.submitter_.hand_failed(out, reached);
  }

  bool pending_waits_on_host_only() const override {
    const auto lock = comm_.use();
    const auto& pending = comm_.submitter_.pending();
    return !pending.empty() && std::all_of(pending.begin(), pending.end(), [](const auto& p) { return p.plan->waits_on_host_only; });
  }

  bool last_call_rides(std::size_t d) const override {
    const auto lock = comm_.use();
    const auto& o = comm_.options_;
    if (!o.relay_ride || o.profile || !comm_.relay_.hub() || !comm_.relay_.hub()->sites() || !comm_.last_plan_ ||
        !takes_relay(comm_.last_plan_->schedule) || d >= comm_.size())
      return false;
    const auto& batches = comm_.last_plan_->schedule.devices[d].batches;
    return batches.size() == 1 && batches[0].commands.size() == 1 && batches[0].commands[0].type == Command::Type::kernel &&
           !batches[0].wait_relay;
  }

  std::optional<std::uint64_t> record_ride(std::size_t d, vk::CommandBuffer cb, bool keep, bool ordered,
                                           const RideBeside& beside) override {
    const auto lock = comm_.use();
    const RideCall call = ride_call(d);
    if (!keep) {
      record_ride_commands(cb, comm_.group_[d].kernels().layout(), call.pipeline, call.set, call.args, call.groups, ordered,
                           beside);
      return 0;
    }
    const std::uint64_t id = sites(d).make(cb, call, ordered, beside);
    if (!id) return std::nullopt;
    return id;
  }

  bool bind_site(std::size_t d, std::uint64_t id) override {
    const auto lock = comm_.use();
    if (!sites_.size() || !sites_[d]) return false;
    return sites_[d]->bind(id, ride_call(d));
  }

  void forget_site(std::size_t d, std::uint64_t id) override {
    const auto lock = comm_.use();
    if (d < sites_.size() && sites_[d]) sites_[d]->forget(id);
  }

  std::size_t sites_in_use(std::size_t d) const override {
    const auto lock = comm_.use();
    return d < sites_.size() && sites_[d] ? sites_[d]->in_use() : 0;
  }

  bool per_device(std::size_t count, std::uint32_t contributing) override {
    const auto lock = comm_.use();
    if (count == 0) return true;
    const ScheduleRequest rq = comm_.schedule_request(count, std::nullopt, contributing);
    return comm_.plan_for(rq).per_device;
  }

  void set_before_wait(std::function<void()> f) override {
    const auto lock = comm_.use();
    comm_.submitter_.set_before_wait(std::move(f));
  }

  // The sites go before the relay they were made on (Communicator::take_held).
  void drop_sites() { sites_.clear(); }

 private:
  RideCall ride_call(std::size_t d) const {
    if (!last_call_rides(d)) throw Error(ErrorCode::invalid_argument, "the last call cannot ride in a host's command buffer");
    const auto& plan = *comm_.last_plan_;
    const std::uint32_t slot_set = comm_.last_slot_set_;
    const Command& cmd = plan.schedule.devices[d].batches[0].commands[0];
    Device& dev = comm_.group_[d];
    RideCall call;
    call.pipeline = dev.kernels().pipeline(cmd.kernel, plan.schedule.wire);
    call.set = plan.descriptor_sets[d][slot_set];
    call.args = cmd.args;
    call.groups = kernel_groups(cmd.kernel, cmd.args.count, dev.capabilities().max_workgroups_x);
    call.span = comm_.last_spans_[d];
    call.slot_set = slot_set;
    call.done = plan.submits[d][slot_set].signal_values[0];
    return call;
  }

  RideSites& sites(std::size_t d) {
    if (sites_.empty()) sites_.resize(comm_.size());
    if (!sites_[d])
      sites_[d] = std::make_unique<RideSites>(comm_.group_[d], *comm_.relay_.hub(), d, [this, d](std::uint64_t value) {
        return comm_.submitter_.reached_now(d, Role::compute, value);
      });
    return *sites_[d];
  }

  Comm& comm_;
  std::vector<std::unique_ptr<RideSites>> sites_;  // by device, made by the first site
};

}  // namespace tpar::inline v0::detail
