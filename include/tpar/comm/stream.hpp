// Stream — a host's work and tpar's AllReduces as one ordered stream per device, on the
// device's compute queue: what a decode step needs, where every layer's AllReduce sits
// between two pieces of the host's compute and the host must never wait.
//
//   tpar::Stream s0(dev0, queue0, family0), s1(dev1, queue1, family1);   // the host's queues
//   tpar::StreamAllreduce ar(comm, {&s0, &s1});
//   s0.submit(layer_work_0); s1.submit(layer_work_1);   // held, not yet on the queues
//   ar.allreduce(spans);          // one vkQueueSubmit per device: the held work, then tpar's
//   s0.submit(next_0); ...        // the sum's batch goes in front of this, in the same submission
//
// Order comes from the queue, not from semaphores: tpar's batches follow the host's work
// submitted before the call (each begins with a full barrier), and the host's work after
// the call follows tpar's last batch on the queue (which ends with one). Where a call can
// run wholly on the compute queues (OneShot, the relay), each device's batches up to its
// first wait on a peer go out with the host's held work at once, every device's before
// any device's later batches, so no queue waits on a signal not yet submitted; the rest
// goes in front of the host's next submission. A device then costs one vkQueueSubmit per
// AllReduce and no semaphore wait but the one on its peers. A call that also needs other
// queues (ChunkedRing) is submitted by the communicator after the host's held work, which
// signals the stream's timeline for it.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/batch_list.hpp>
#include <tpar/comm/detail/submit_gate.hpp>
#include <tpar/comm/ticket.hpp>
#include <tpar/core/buffer_span.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace tpar::inline v0 {

template <class Comm>
class StreamAllreduce;
namespace detail {
struct StreamProtocol;
}

class Stream {
 public:
  // The host's compute queue of one device, locked by `lock` where the host shares it
  // (empty: a mutex of the stream's own). `trace`: how a trace window names and times it
  // (its device, queue and family are filled in here).
  Stream(vk::Device device, vk::Queue queue, std::uint32_t family, QueueLock lock = {}, TraceQueue trace = {})
      : device_(device), queue_(queue, family, 0, std::move(lock)), timeline_(device) {
    trace.device = device;
    trace.family = family;
    if (trace.name.empty()) trace.name = "stream";
    queue_.trace_as(std::move(trace), -1);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() {
    try {
      flush();
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("tpar::Stream: submitting held work on destruction: ") + e.what());
    }
    queue_.untrace();
  }

  // While on (a StreamAllreduce uses the stream), the host's work is held until the next
  // AllReduce, flush() or a submission with a fence, so that it reaches the queue in one
  // submission with tpar's batches. Off: submit() submits at once.
  void set_holding(bool on) {
    if (!on) flush();
    std::lock_guard lock(mutex_);
    holding_ = on;
  }
  bool holding() const {
    std::lock_guard lock(mutex_);
    return holding_;
  }

  // The host's work, after everything submitted to the stream so far (copied: the
  // batches' arrays need not outlive the call). `fence`: submitted at once, with
  // everything held before it, and signalled when all of it is done.
  void submit(std::span<const vk::SubmitInfo> batches, vk::Fence fence = {}) {
    if (fence) release_held_calls();
    std::lock_guard lock(mutex_);
    ride_falls_back();
    held_.append(batches);
    if (ride_ == RideState::taken) {
      // the call's kernel is in these batches: its signals end them
      held_.append(ride_batches_, false);
      ride_batches_.clear();
      ride_ = RideState::none;
    }
    if (!holding_ || fence) flush_locked(fence);
  }
  void submit(std::initializer_list<vk::SubmitInfo> batches, vk::Fence fence = {}) {
    submit(std::span<const vk::SubmitInfo>(batches.begin(), batches.size()), fence);
  }

  // Everything held (tpar's batches of the last AllReduce first, then the host's work) to
  // the queue in one vkQueueSubmit, with `fence` where given (alone if nothing is held).
  // Throws Error on a failed submission; what was held is dropped then.
  void flush(vk::Fence fence = {}) {
    release_held_calls();
    std::lock_guard lock(mutex_);
    flush_locked(fence);
  }

  // What the stream holds, in batches (tpar's carried ones and the host's).
  std::size_t held() const {
    std::lock_guard lock(mutex_);
    return carried_.size() + held_.size() + (ride_ == RideState::pending ? ride_batches_.size() : 0);
  }
  // Riding (docs/design/relay-ride.md): where tpar holds a relay call on this stream
  // (StreamAllreduce, Options::relay_ride), a host that records its own command buffers
  // may take the call's kernel into the command buffer it submits here next, so the call
  // ends no command buffer of its own. Not taken, the call goes out as always, in
  // tpar's command buffer ahead of the host's next submission.
  //
  // Whether a call waits for a ride.
  bool ride_pending() const {
    std::lock_guard lock(mutex_);
    return ride_ == RideState::pending;
  }
  // Records the waiting call's kernel at this point of `cb`, a command buffer the host is
  // recording and submits to this stream next (nothing else submitted here before it).
  // The sum is visible to the compute and transfer commands recorded after it in `cb`.
  // `ordered`: the host vouches that `cb` has nothing recorded yet and that every command
  // buffer it submits to this queue ends with a barrier making its compute and transfer
  // writes available to later compute and transfer commands (tpar's own command buffers
  // do): the kernel then starts `cb` with no barrier before it, which on NVIDIA's driver
  // costs about 3 us less a boundary (docs/design/barrier-at-the-end.md).
  // `keep`: the host may submit `cb` again later; the returned site (0: none) is what to
  // name to ride_again() before each such submission and to ride_forget() once `cb` is
  // freed. Where no site is free, nothing is recorded and the call goes out in tpar's
  // command buffer. Throws Error where recording failed (the call goes out then too).
  // `beside`: commands of the host's recorded right after the kernel, before the barrier
  // that makes the sum visible, so the GPU runs them while the kernel waits for the sum;
  // called only where the call rides (RideBeside says what they may do, and what an
  // exception from them leaves).
  std::uint64_t ride(vk::CommandBuffer cb, bool keep, bool ordered = false, const RideBeside& beside = {}) {
    std::function<std::optional<std::uint64_t>(vk::CommandBuffer, bool, bool, const RideBeside&)> record;
    {
      std::lock_guard lock(mutex_);
      if (ride_ != RideState::pending || !rider_.record) return 0;
      record = rider_.record;
    }
    const std::optional<std::uint64_t> site = record(cb, keep, ordered, beside);
    std::lock_guard lock(mutex_);
    if (!site) return 0;
    ride_ = RideState::taken;
    ++ride_stats_.recorded;
    if (*site) ++ride_stats_.sites;
    return *site;
  }
  // Before the host submits again a command buffer it recorded with ride `site` (0: one
  // recorded with no ride in it): whether it may. True for 0 (a waiting call then goes out
  // in tpar's command buffer ahead of it), and for a site that now serves the waiting
  // call. False where the site cannot (no call waits, or one of another buffer, size or
  // mode, or the site's previous call is not done): the host records the command buffer
  // anew, without submitting the old one.
  bool ride_again(std::uint64_t site) {
    std::function<bool(std::uint64_t)> bind;
    {
      std::lock_guard lock(mutex_);
      if (!site) return true;
      if (ride_ != RideState::pending || !rider_.bind) return false;
      bind = rider_.bind;
    }
    const bool ok = bind(site);
    std::lock_guard lock(mutex_);
    if (ok) {
      ride_ = RideState::taken;
      ++ride_stats_.again;
    } else {
      ++ride_stats_.refused;
    }
    return ok;
  }
  // The host freed the command buffer that held ride `site`.
  void ride_forget(std::uint64_t site) {
    std::function<void(std::uint64_t)> forget;
    {
      std::lock_guard lock(mutex_);
      forget = rider_.forget;
    }
    if (site && forget) forget(site);
  }
  struct RideStats {
    std::uint64_t recorded = 0;   // calls recorded into a host's command buffer (ride())
    std::uint64_t sites = 0;      // of them, as a site the host submits again
    std::uint64_t again = 0;      // calls served by a site again (ride_again())
    std::uint64_t refused = 0;    // sites that could not serve a call (the host recorded anew)
    std::uint64_t fell_back = 0;  // calls that waited for a ride and went out in tpar's command buffer
  };
  RideStats ride_stats() const {
    std::lock_guard lock(mutex_);
    return ride_stats_;
  }

  // The queue all of it goes to: its counts say what the stream cost the driver.
  Queue& queue() { return queue_; }
  vk::Device device() const { return device_; }

 private:
  // The hand-off between the stream and StreamAllreduce: what a call holds, carries and
  // submits with the host's work (tests reach it through detail::StreamProtocol).
  template <class> friend class StreamAllreduce;
  friend struct detail::StreamProtocol;

  // What records a waiting call into a host's command buffer
  // (StreamPort::record_ride, bind_site, forget_site for this stream's device).
  struct Rider {
    std::function<std::optional<std::uint64_t>(vk::CommandBuffer, bool, bool, const RideBeside&)> record;  // (cb, keep, ordered, beside)
    std::function<bool(std::uint64_t)> bind;
    std::function<void(std::uint64_t)> forget;
  };
  void set_rider(Rider rider) {
    std::lock_guard lock(mutex_);
    rider_ = std::move(rider);
  }
  // Held work kept, and `calls`'s batches (one call, none of which
  // waits on anything) waiting for a ride. Throws Error(invalid_argument), holding
  // nothing new, where the host took an earlier call's ride and did not submit it yet.
  void hold_ride(detail::BatchList& calls) {
    std::lock_guard lock(mutex_);
    refuse_taken_ride();
    collect();
    std::swap(held_, out_);
    out_.clear();
    ride_batches_.clear();
    ride_batches_.append(calls);
    ride_ = RideState::pending;
    holds_call_.store(true, std::memory_order_release);
  }

  // The point the held work signals where a call also runs on other
  // queues (announced before the call; signalled only by flush_signalling()).
  TimelinePoint next_ready() const {
    std::lock_guard lock(mutex_);
    return {timeline_.handle(), signalled_ + 1};
  }
  void flush_signalling(const TimelinePoint& ready) {
    std::lock_guard lock(mutex_);
    await_carried();
    collect();
    out_.add_signal(ready.semaphore, ready.value);
    submit_out({});
    signalled_ = ready.value;
  }
  // Held work, then `calls`'s batches [0, first) in one submission;
  // [first, end) go in front of the next. `call`: the call's number, published through the
  // gate once its leading batches are on the queue. False (and nothing kept) where the
  // submission failed, or the gate timed out.
  bool submit_with(detail::BatchList& calls, std::size_t first, std::uint64_t call = 0) noexcept {
    std::lock_guard lock(mutex_);
    try {
      await_carried();
      collect();
      out_.append(calls.infos(false, 0, first));
      submit_out({});
      carried_.append(calls.infos(false, first));
      if (call) {
        carried_call_ = call;
        if (gate_) gate_->publish(gate_index_, call);
      }
      return true;
    } catch (...) {
      carried_.clear();
      return false;
    }
  }
  // Held work, then `calls`'s batches (none of which waits on
  // another device), all held: they go out with the stream's next submission, on every
  // device together (flush_held(), or the group's hook before any flush).
  void hold_with(detail::BatchList& calls) {
    std::lock_guard lock(mutex_);
    refuse_taken_ride();
    collect();
    out_.append(calls.infos(false));
    carried_call_ = 0;
    std::swap(held_, out_);
    out_.clear();
    holds_call_.store(true, std::memory_order_release);
  }
  // Everything held to the queue in one submission that signals the
  // stream's hold timeline (flushes_done() sees it done). False where it failed.
  bool flush_held() noexcept {
    std::lock_guard lock(mutex_);
    try {
      ride_falls_back();  // a call no host took goes now, even where nothing else is held
    } catch (...) {
      return false;
    }
    if (carried_.empty() && held_.empty()) return true;
    try {
      await_carried();
      collect();
      if (!hold_timeline_.handle()) hold_timeline_ = Timeline(device_);
      out_.add_signal(hold_timeline_.handle(), hold_signalled_ + 1);
      submit_out({});
      ++hold_signalled_;
      return true;
    } catch (...) {
      return false;
    }
  }
  // Submissions flush_held() made, and how many of them the GPU finished (all of them
  // where the count cannot be read: a lost device fails the next wait anyway).
  std::uint64_t flushes() const {
    std::lock_guard lock(mutex_);
    return hold_signalled_;
  }
  std::uint64_t flushes_done() const {
    std::lock_guard lock(mutex_);
    if (!hold_timeline_.handle()) return hold_signalled_;
    std::uint64_t v = 0;
    return device_.getSemaphoreCounterValue(hold_timeline_.handle(), &v) == vk::Result::eSuccess ? v : hold_signalled_;
  }
  // Whether this stream holds a call hold_with() gave it.
  bool holds_call() const { return holds_call_.load(std::memory_order_acquire); }
  // Called, outside the stream's lock, before this stream submits
  // with a fence or is flushed while it holds a call, so that every device's held calls
  // go out together (a device's relay kernel waits for its peers' parts).
  void set_release(std::function<void()> f) {
    std::lock_guard lock(mutex_);
    release_ = std::move(f);
  }

  // What the stream carries of tpar's last call, to the queue now
  // (the host's held work stays). False where the submission failed.
  bool flush_carried() noexcept {
    std::lock_guard lock(mutex_);
    if (carried_.empty()) return true;
    try {
      await_carried();
      out_.clear();
      out_.append(carried_);
      carried_.clear();
      submit_out({});
      return true;
    } catch (...) {
      return false;
    }
  }
  // The semaphore waits of what the stream carries of tpar's last call (for a host that
  // waits for them itself: StreamAllreduce::submit_when_ready).
  std::vector<TimelinePoint> carried_waits() {
    std::lock_guard lock(mutex_);
    std::vector<TimelinePoint> out;
    for (const auto& info : carried_.infos(false)) {
      const auto& ti = *static_cast<const vk::TimelineSemaphoreSubmitInfo*>(info.pNext);
      for (std::uint32_t k = 0; k < info.waitSemaphoreCount; ++k) out.push_back({info.pWaitSemaphores[k], ti.pWaitSemaphoreValues[k]});
    }
    return out;
  }
  // Drops what the stream holds of tpar's calls (after a failure of theirs).
  void drop_carried() {
    std::lock_guard lock(mutex_);
    carried_.clear();
  }

  // Where threads of their own submit to the devices' streams, the
  // batches this stream carries of a call go to the queue only once `gate` says every
  // device published that call (device `index` of it), waiting at most `timeout`.
  void set_gate(detail::SubmitGate* gate, std::size_t index, std::chrono::nanoseconds timeout) {
    std::lock_guard lock(mutex_);
    gate_ = gate;
    gate_index_ = index;
    gate_timeout_ = timeout;
  }

  // Throws Error(timeout) where the gate did not open in time (nothing submitted then).
  void await_carried() {
    if (!gate_ || carried_.empty() || !carried_call_) return;
    if (!gate_->wait(carried_call_, gate_timeout_))
      throw Error(ErrorCode::timeout, "tpar::Stream: a peer device did not submit its part of AllReduce " +
                                          std::to_string(carried_call_) + " within the timeout");
  }

  // Every device's held calls to the queues (the group's hook) where this one holds one.
  void release_held_calls() {
    if (!holds_call_.load(std::memory_order_acquire)) return;
    std::function<void()> f;
    {
      std::lock_guard lock(mutex_);
      f = release_;
    }
    if (f) f();
  }

  // What the stream carries of tpar's last call, then the host's held work, into out_
  // (both emptied): the order every submission of them takes.
  void collect() {
    ride_falls_back();
    out_.clear();
    out_.append(carried_);
    out_.append(held_);
    carried_.clear();
    held_.clear();
  }

  // Before another call is held: a ride the host took must have been submitted (the
  // relay serves calls in order; the next call's kernel must not go ahead of it).
  void refuse_taken_ride() const {
    if (ride_ == RideState::taken)
      throw Error(ErrorCode::invalid_argument, "tpar::Stream: a command buffer that took an AllReduce's ride was not submitted "
                                               "before the next AllReduce");
  }

  // A call that waited for a ride no host took goes out as it is, after the held work.
  void ride_falls_back() {
    if (ride_ != RideState::pending) return;
    held_.append(ride_batches_);
    ride_batches_.clear();
    ride_ = RideState::none;
    ++ride_stats_.fell_back;
  }

  void flush_locked(vk::Fence fence) {
    ride_falls_back();
    if (carried_.empty() && held_.empty() && !fence) return;
    await_carried();
    collect();
    submit_out(fence);
  }

  void submit_out(vk::Fence fence) {
    const auto infos = out_.infos(true);
    const vk::Result r = queue_.submit(infos, fence);
    out_.clear();
    if (held_.empty()) holds_call_.store(false, std::memory_order_release);  // it went with this submission
    if (r != vk::Result::eSuccess)
      throw Error(detail::code_for(r), "vkQueueSubmit (tpar::Stream): " + vk::to_string(r), r);
  }

  mutable std::mutex mutex_;
  vk::Device device_;
  Queue queue_;
  Timeline timeline_;
  std::uint64_t signalled_ = 0;
  bool holding_ = false;
  detail::BatchList held_;     // the host's work not yet submitted
  detail::BatchList carried_;  // tpar's batches that go in front of the next submission
  detail::BatchList out_;
  detail::SubmitGate* gate_ = nullptr;
  std::size_t gate_index_ = 0;
  std::chrono::nanoseconds gate_timeout_{0};
  std::uint64_t carried_call_ = 0;  // the call whose batches carried_ holds (0: none numbered)
  Timeline hold_timeline_;         // signalled by flush_held()'s submissions (made at the first)
  std::uint64_t hold_signalled_ = 0;
  std::atomic<bool> holds_call_{false};
  std::function<void()> release_;
  enum class RideState : std::uint8_t { none, pending, taken };
  RideState ride_ = RideState::none;
  detail::BatchList ride_batches_;  // the call waiting for a ride, or taken (its signals then)
  Rider rider_;
  RideStats ride_stats_;
};

namespace detail {
// Stream's hand-off protocol, for the tests that drive it as StreamAllreduce does.
struct StreamProtocol {
  using Rider = Stream::Rider;
  static void set_rider(Stream& s, Rider r) { s.set_rider(std::move(r)); }
  static void hold_ride(Stream& s, BatchList& calls) { s.hold_ride(calls); }
  static void hold_with(Stream& s, BatchList& calls) { s.hold_with(calls); }
  static bool submit_with(Stream& s, BatchList& calls, std::size_t first, std::uint64_t call = 0) {
    return s.submit_with(calls, first, call);
  }
  static bool flush_held(Stream& s) { return s.flush_held(); }
  static bool flush_carried(Stream& s) { return s.flush_carried(); }
  static std::vector<TimelinePoint> carried_waits(Stream& s) { return s.carried_waits(); }
  static void drop_carried(Stream& s) { s.drop_carried(); }
  static bool holds_call(const Stream& s) { return s.holds_call(); }
  static std::uint64_t flushes(const Stream& s) { return s.flushes(); }
  static std::uint64_t flushes_done(const Stream& s) { return s.flushes_done(); }
};
}  // namespace detail

// AllReduces over streams, one per device of the communicator's group in device order.
// While it lives the streams hold the host's work (Stream::set_holding) and the
// communicator submits what they hold before it waits or submits on its own; destroyed,
// everything held is submitted. `Comm`: tpar::AnyCommunicator or a Communicator<...>.
//
// Where each device's work is submitted by a thread of its own, allreduce_split() makes
// the call on one thread and submits nothing; each device's thread then hands its part to
// its stream with enqueue(d), after the work that produced its span and before the work
// that reads the sum:
//
//   // host thread                              // device d's thread, in the same order
//   ar.allreduce_split(spans);                  s_d.submit(layer_work_d); ar.enqueue(d);
//
// A part's batches that wait on the peers go to the queue only once every device's
// thread published its own part (detail::SubmitGate), never before.
template <class Comm>
class StreamAllreduce {
 public:
  StreamAllreduce(Comm& comm, std::vector<Stream*> streams)
      : comm_(comm), streams_(std::move(streams)), gate_(streams_.size()), queues_(streams_.size()), taken_(streams_.size()) {
    if (streams_.size() != comm_.size())
      throw Error(ErrorCode::invalid_argument, "StreamAllreduce: " + std::to_string(streams_.size()) + " streams for " +
                                                   std::to_string(comm_.size()) + " devices");
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      if (!streams_[d]) throw Error(ErrorCode::invalid_argument, "StreamAllreduce: stream " + std::to_string(d) + " is null");
      if (streams_[d]->queue().handle() != comm_.group()[d].compute_queue().handle())
        throw Error(ErrorCode::invalid_argument, "StreamAllreduce: stream " + std::to_string(d) +
                                                     " is not on the compute queue tpar uses for device " + std::to_string(d));
    }
    ready_.resize(streams_.size());
    hold_ = std::max<std::uint32_t>(1, comm_.options().stream_hold);
    for (std::size_t d = 0; d < streams_.size(); ++d) streams_[d]->set_gate(&gate_, d, comm_.options().timeout);
    for (auto* s : streams_) s->set_release([this] { release_held(); });
    if (comm_.options().relay_ride)
      for (std::size_t d = 0; d < streams_.size(); ++d)
        streams_[d]->set_rider({[this, d](vk::CommandBuffer cb, bool keep, bool ordered, const RideBeside& beside) {
                                  return comm_.port().record_ride(d, cb, keep, ordered, beside);
                                },
                                [this, d](std::uint64_t site) { return comm_.port().bind_site(d, site); },
                                [this, d](std::uint64_t site) { comm_.port().forget_site(d, site); }});
    for (auto* s : streams_) s->set_holding(true);
    comm_.port().set_before_wait([this] { before_wait(); });
  }
  StreamAllreduce(const StreamAllreduce&) = delete;
  StreamAllreduce& operator=(const StreamAllreduce&) = delete;
  ~StreamAllreduce() {
    if (!release_held()) log(LogLevel::error, "tpar::StreamAllreduce: submitting held calls failed");
    for (auto* s : streams_) s->set_release({});
    for (auto* s : streams_) s->set_rider({});
    comm_.port().set_before_wait({});
    for (auto* s : streams_) s->set_gate(nullptr, 0, {});
    for (auto* s : streams_) {
      try {
        s->set_holding(false);
      } catch (const std::exception& e) {
        log(LogLevel::error, std::string("tpar::StreamAllreduce: submitting held work: ") + e.what());
      }
    }
  }

  // Sums `spans` across the devices after all work submitted to each device's stream so
  // far and before all work submitted to it later. `args.ready`, `defer` and
  // `ready_on_compute_queue` are the streams' to set. Bad input throws with nothing
  // submitted or changed. The ticket's done points are reached once the streams' queues
  // ran the call (its wait() submits what the streams hold first).
  Ticket allreduce(std::span<const BufferSpan> spans, AllreduceArgs args = {}) {
    // The call and its hand-over as one: a ticket's wait on another thread, which may
    // submit deferred calls, must not come between them.
    const auto exclusive = comm_.port().exclusive();
    if (!drain()) throw Error(ErrorCode::timeout, "StreamAllreduce: parts of earlier calls were not enqueued within the timeout");
    for (std::size_t d = 0; d < streams_.size(); ++d) ready_[d] = streams_[d]->next_ready();
    args.ready = ready_;
    args.ready_on_compute_queue = true;
    args.defer = true;
    Ticket ticket = comm_.allreduce(spans, args);
    const std::size_t n = streams_.size();
    const auto [taken, rest_may_wait] = comm_.port().take_pending(batches_, leading_);
    if (taken) {
      if (std::all_of(batches_.begin(), batches_.end(), [](const auto& b) { return b.empty(); })) return ticket;  // nothing to do
      // Every device's first part (its held work and the batches that wait on no peer)
      // before any device's rest, so no queue ever waits on a signal not yet submitted.
      // The rest goes in front of each device's next submission where no device waits on
      // another's rest; otherwise (the ring's steps) at once, every device's in turn.
      bool ok = true;
      reached_.assign(n, 0);
      // A call no batch of which waits on another device (the relay) is held with the
      // host's work, on every device, while each device still has an earlier submission
      // to run: one batch then carries several steps where the relay's kernels wait for
      // the sum, one submission where its queues do.
      if (hold_ > 1 && !split_used_ && comm_.port().pending_waits_on_host_only()) {
        if (rides(n)) {
          // Each device's part waits for the host's next command buffer on that device
          // (Stream::ride), where it goes out in any case; the calls held before go out
          // now if due, as this one cannot go with them.
          release_if_due(held_calls_);
          hold_on_every_stream(&batches_, true);
          comm_.port().handed(batches_, reached_);
          return ticket;
        }
        const std::uint32_t held = hold_on_every_stream(&batches_);
        comm_.port().handed(batches_, reached_);  // none out yet: a ticket's wait releases them first
        release_if_due(held);
        return ticket;
      }
      if (!release_held()) throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
      const std::uint64_t call = ++calls_;
      for (std::size_t d = 0; d < n; ++d) {
        if (!streams_[d]->submit_with(batches_[d], leading_[d], call)) {
          ok = false;
          break;
        }
        reached_[d] = leading_[d];
      }
      if (ok && !rest_may_wait)
        for (std::size_t d = 0; d < n && ok; ++d) {
          ok = streams_[d]->flush_carried();
          if (ok) reached_[d] = batches_[d].size();
        }
      if (ok) comm_.port().handed(batches_, reached_);
      else comm_.port().hand_failed(batches_, reached_);
      if (!ok) {
        for (auto* s : streams_) s->drop_carried();
        throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
      }
    } else {
      if (!release_held()) throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
      // Calls on other queues too: the held work goes first and signals what they wait on.
      for (std::size_t d = 0; d < streams_.size(); ++d) streams_[d]->flush_signalling(ready_[d]);
      comm_.flush();
    }
    return ticket;
  }
  Ticket allreduce(std::initializer_list<BufferSpan> spans, AllreduceArgs args = {}) {
    return allreduce(std::span<const BufferSpan>(spans.begin(), spans.size()), args);
  }

  // What the streams carry of the last call goes to the queues once the host saw every
  // wait of it reached (bounded by the communicator's timeout): no queue then waits on a
  // semaphore another device signals. This blocks the calling thread; it exists to
  // measure what a queue's wait on another device's semaphore costs (tpar-bench --chain
  // --chain-wiring gated), where one GPU serves several devices.
  void submit_when_ready() {
    for (auto* s : streams_) {
      for (const TimelinePoint& p : s->carried_waits()) {
        const vk::Result r = tpar::wait(s->device(), std::span(&p.semaphore, 1), std::span(&p.value, 1),
                                              comm_.options().timeout);
        if (r != vk::Result::eSuccess) throw Error(detail::code_for(r), "StreamAllreduce: a wait of the carried batches", r);
      }
      if (!s->flush_carried()) throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
    }
  }

  // Like allreduce(), but submits nothing: each device's part of the call waits until
  // the thread that submits to its stream calls enqueue(d). Only for a call the
  // communicator can split so (comm.port().per_device(count, contributing)); any other throws
  // Error(invalid_argument) with nothing enqueued. The ticket's done points are reached
  // once every device's part was enqueued and ran.
  Ticket allreduce_split(std::span<const BufferSpan> spans, AllreduceArgs args = {}) {
    const auto exclusive = comm_.port().exclusive();
    const std::size_t n = streams_.size();
    if (spans.size() != n)
      throw Error(ErrorCode::invalid_argument, "StreamAllreduce: " + std::to_string(spans.size()) + " spans for " + std::to_string(n) + " devices");
    std::uint32_t mask = 0;
    for (std::size_t d = 0; d < n; ++d)
      if (args.contributes.empty() || args.contributes[d]) mask |= 1u << d;
    if (!comm_.port().per_device(spans[0].count, mask))
      throw Error(ErrorCode::invalid_argument, "StreamAllreduce::allreduce_split: this call (" + std::to_string(spans[0].count) +
                                                   " values) runs on queues or steps that one device's thread cannot submit alone");
    // Threads of their own submit each device's part from now on: no call is held across
    // them (a held relay call on one device would wait for a thread of another).
    split_used_ = true;
    if (!release_held()) throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
    for (std::size_t d = 0; d < n; ++d) ready_[d] = {};
    args.ready = {};
    args.ready_on_compute_queue = true;
    args.defer = true;
    Ticket ticket = comm_.allreduce(spans, args);
    const auto handoff = comm_.port().take_pending(batches_, leading_);
    if (!handoff.taken || !handoff.rest_may_wait) {
      // per_device() said otherwise: nothing may be submitted in this order now
      comm_.port().hand_failed(batches_, std::vector<std::size_t>(n, 0));
      throw Error(ErrorCode::failed, "StreamAllreduce::allreduce_split: the call could not be split after all");
    }
    const bool empty = std::all_of(batches_.begin(), batches_.end(), [](const auto& b) { return b.empty(); });
    const std::uint64_t call = empty ? 0 : ++calls_;
    // Handed over: the devices' threads submit the leading parts, and the rest rides in
    // front of the streams' next submissions (a ticket's wait flushes them, as after
    // allreduce()).
    comm_.port().handed(batches_, leading_);
    for (std::size_t d = 0; d < n; ++d) {
      PartQueue& q = queues_[d];
      std::lock_guard lock(q.mutex);
      if (q.count == q.parts.size()) {
        // grow the ring, its oldest first
        std::vector<Part> grown(std::max<std::size_t>(8, 2 * q.parts.size()));
        for (std::size_t i = 0; i < q.count; ++i) std::swap(grown[i], q.parts[(q.head + i) % q.parts.size()]);
        q.parts.swap(grown);
        q.head = 0;
      }
      Part& p = q.parts[(q.head + q.count) % q.parts.size()];
      std::swap(p.batches, batches_[d]);  // (batches_[d] keeps the part's old storage for the next call)
      p.leading = leading_[d];
      p.call = call;
      p.done = ticket.done(d);
      ++q.count;
      outstanding_.fetch_add(1, std::memory_order_relaxed);
    }
    return ticket;
  }

  // Device d's next part from allreduce_split() (in call order) to its stream, with what
  // the stream holds: the part's leading batches at once, the rest in front of the
  // stream's next submission, once every device enqueued this part. Call it from the
  // thread that submits device d's work, once per call; a thread per device may do so
  // concurrently. Returns the call's done point on device d (the ticket's done(d)).
  // Throws Error where there is no part, or the submission failed or timed out.
  TimelinePoint enqueue(std::size_t d) {
    if (d >= streams_.size()) throw Error(ErrorCode::invalid_argument, "StreamAllreduce::enqueue: no device " + std::to_string(d));
    PartQueue& q = queues_[d];
    Part& p = taken_[d];
    {
      std::lock_guard lock(q.mutex);
      if (!q.count) throw Error(ErrorCode::invalid_argument, "StreamAllreduce::enqueue: device " + std::to_string(d) + " has no part waiting");
      std::swap(p, q.parts[q.head]);
      q.head = (q.head + 1) % q.parts.size();
      --q.count;
    }
    const bool ok = !p.call || streams_[d]->submit_with(p.batches, p.leading, p.call);
    if (outstanding_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lock(drained_mutex_);
      drained_.notify_all();
    }
    if (!ok) {
      streams_[d]->drop_carried();
      throw Error(ErrorCode::failed, "vkQueueSubmit failed (or a peer's part did not come in time) for a stream carrying tpar's batches");
    }
    return p.done;
  }

  // Parts allreduce_split() made that no enqueue() took yet.
  std::size_t outstanding() const { return outstanding_.load(std::memory_order_acquire); }

  // How often a part's rest waited for a peer's thread to enqueue its part, and how long.
  std::uint64_t gate_waits() const { return gate_.waits(); }
  std::chrono::nanoseconds gate_waited() const { return gate_.waited(); }

  // A call that sums nothing, for timing a host's work without its boundaries
  // (TPAR_GGML_SKIP_ALLREDUCE): held and released as a relay call is, with no batches, so
  // the queues see the host's work in the submissions a held call would make.
  void skip_call() {
    if (!drain()) throw Error(ErrorCode::timeout, "StreamAllreduce: parts of earlier calls were not enqueued within the timeout");
    release_if_due(hold_on_every_stream(nullptr));
  }

  // Everything the streams hold to their queues.
  void flush() {
    for (auto* s : streams_) s->flush();
  }

  // What the streams' hosts did with calls that could ride in their command buffers.
  Stream::RideStats ride_stats() const {
    Stream::RideStats out;
    for (auto* s : streams_) {
      const auto r = s->ride_stats();
      out.recorded += r.recorded;
      out.sites += r.sites;
      out.again += r.again;
      out.refused += r.refused;
      out.fell_back += r.fell_back;
    }
    return out;
  }

  // Calls held so far (Options::stream_hold) and the submissions that released them.
  std::uint64_t held_calls() const { return held_total_; }
  std::uint64_t hold_releases() const { return releases_; }

  std::size_t size() const { return streams_.size(); }
  Stream& stream(std::size_t d) { return *streams_[d]; }
  Comm& communicator() { return comm_; }

 private:
  struct Part {
    detail::BatchList batches;
    std::size_t leading = 0;
    std::uint64_t call = 0;  // 0: nothing to submit (a call with no batches)
    TimelinePoint done;      // the call's done point on this device
  };
  // One device's parts, in call order: a ring the host thread fills and the device's
  // thread empties (each keeps the lists' storage for the next call).
  struct PartQueue {
    std::mutex mutex;
    std::vector<Part> parts;
    std::size_t head = 0, count = 0;
  };

  // Whether the call just handed over (batches_) waits for rides: Options::relay_ride,
  // and on every device one batch that waits on nothing, a relay kernel that waits on the
  // GPU (StreamPort::last_call_rides).
  bool rides(std::size_t n) const {
    if (!comm_.options().relay_ride) return false;
    for (std::size_t d = 0; d < n; ++d)
      if (batches_[d].size() != 1 || batches_[d].waits() || !comm_.port().last_call_rides(d)) return false;
    return true;
  }

  // Until every part made is enqueued (bounded by the timeout). False on timeout.
  bool drain() {
    if (!outstanding()) return true;
    std::unique_lock lock(drained_mutex_);
    return drained_.wait_for(lock, comm_.options().timeout, [this] { return outstanding() == 0; });
  }

  // Before the communicator waits on the host (a slot set still in use): what it waits
  // for must reach the queues. Where devices' threads still have parts to enqueue, they
  // submit it: wait for them, touching no stream (a stream's thread may be waiting at the
  // gate for this thread otherwise); else submit what the streams hold.
  void before_wait() {
    if (!release_held()) throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
    if (outstanding()) {
      if (!drain()) throw Error(ErrorCode::timeout, "StreamAllreduce: the devices' threads did not enqueue their parts within the timeout");
      return;
    }
    flush();
  }

  // A call's batches (`per_device`, or none: skip_call) held with the host's work on every
  // stream (`ride`: waiting for a ride, Stream::hold_ride); the held calls so far.
  std::uint32_t hold_on_every_stream(std::vector<detail::BatchList>* per_device, bool ride = false) {
    std::lock_guard lock(hold_mutex_);
    detail::BatchList nothing;
    for (std::size_t d = 0; d < streams_.size(); ++d) {
      detail::BatchList& calls = per_device ? (*per_device)[d] : nothing;
      if (ride) streams_[d]->hold_ride(calls);
      else streams_[d]->hold_with(calls);
    }
    if (per_device) ++held_total_;
    return ++held_calls_;
  }
  // Releases what every stream holds once `held` calls are held or a GPU may run dry.
  void release_if_due(std::uint32_t held) {
    if ((held >= hold_ || gpus_short()) && !release_held())
      throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
  }

  // Every device's held calls to its queue, device order. False where a submission failed
  // (what the others held went out).
  bool release_held() noexcept {
    std::lock_guard lock(hold_mutex_);
    bool any = false;
    for (auto* s : streams_) any |= s->holds_call();
    if (!any) {
      held_calls_ = 0;
      return true;
    }
    bool ok = true;
    for (auto* s : streams_) ok &= s->flush_held();
    held_calls_ = 0;
    ++releases_;
    return ok;
  }
  // Whether some device may run out of work: it has at most one released submission of
  // held calls not yet finished (so the GPU would idle after it until the next).
  bool gpus_short() const {
    for (auto* s : streams_)
      if (s->flushes_done() + 1 >= s->flushes()) return true;
    return false;
  }

  Comm& comm_;
  std::vector<Stream*> streams_;
  std::uint32_t hold_ = 1;
  bool split_used_ = false;
  std::uint32_t held_calls_ = 0;
  std::uint64_t held_total_ = 0, releases_ = 0;
  std::mutex hold_mutex_;
  detail::SubmitGate gate_;
  std::vector<PartQueue> queues_;
  std::vector<Part> taken_;  // by device: the part its thread is submitting
  std::atomic<std::size_t> outstanding_{0};
  std::mutex drained_mutex_;
  std::condition_variable drained_;
  std::uint64_t calls_ = 0;
  std::vector<TimelinePoint> ready_;
  std::vector<std::size_t> reached_;
  std::vector<detail::BatchList> batches_;
  std::vector<std::size_t> leading_;
};

}  // namespace tpar::inline v0
