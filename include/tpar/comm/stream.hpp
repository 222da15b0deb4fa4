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
#include <tpar/comm/ticket.hpp>
#include <tpar/core/buffer_span.hpp>
#include <tpar/sync/timeline.hpp>
#include <tpar/vk/device.hpp>
#include <tpar/vk/trace.hpp>

#include <algorithm>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace tpar::inline v0 {

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
    std::lock_guard lock(mutex_);
    held_.append(batches);
    if (!holding_ || fence) flush_locked(fence);
  }
  void submit(std::initializer_list<vk::SubmitInfo> batches, vk::Fence fence = {}) {
    submit(std::span<const vk::SubmitInfo>(batches.begin(), batches.size()), fence);
  }

  // Everything held (tpar's batches of the last AllReduce first, then the host's work) to
  // the queue in one vkQueueSubmit, with `fence` where given (alone if nothing is held).
  // Throws Error on a failed submission; what was held is dropped then.
  void flush(vk::Fence fence = {}) {
    std::lock_guard lock(mutex_);
    flush_locked(fence);
  }

  // What the stream holds, in batches (tpar's carried ones and the host's).
  std::size_t held() const {
    std::lock_guard lock(mutex_);
    return carried_.size() + held_.size();
  }
  // The queue all of it goes to: its counts say what the stream cost the driver.
  Queue& queue() { return queue_; }
  vk::Device device() const { return device_; }

  // For StreamAllreduce: the point the held work signals where a call also runs on other
  // queues (announced before the call; signalled only by flush_signalling()).
  TimelinePoint next_ready() const {
    std::lock_guard lock(mutex_);
    return {timeline_.handle(), signalled_ + 1};
  }
  void flush_signalling(const TimelinePoint& ready) {
    std::lock_guard lock(mutex_);
    out_.clear();
    out_.append(carried_);
    out_.append(held_);
    carried_.clear();
    held_.clear();
    out_.add_signal(ready.semaphore, ready.value);
    submit_out({});
    signalled_ = ready.value;
  }
  // For StreamAllreduce: held work, then `calls`'s batches [0, first) in one submission;
  // [first, end) go in front of the next. False (and nothing kept) where the submission failed.
  bool submit_with(detail::BatchList& calls, std::size_t first) noexcept {
    std::lock_guard lock(mutex_);
    try {
      out_.clear();
      out_.append(carried_);
      out_.append(held_);
      carried_.clear();
      held_.clear();
      out_.append(calls.infos(false, 0, first));
      submit_out({});
      carried_.append(calls.infos(false, first));
      return true;
    } catch (...) {
      carried_.clear();
      return false;
    }
  }
  // For StreamAllreduce: what the stream carries of tpar's last call, to the queue now
  // (the host's held work stays). False where the submission failed.
  bool flush_carried() noexcept {
    std::lock_guard lock(mutex_);
    if (carried_.empty()) return true;
    try {
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

 private:
  void flush_locked(vk::Fence fence) {
    if (carried_.empty() && held_.empty() && !fence) return;
    out_.clear();
    out_.append(carried_);
    out_.append(held_);
    carried_.clear();
    held_.clear();
    submit_out(fence);
  }

  void submit_out(vk::Fence fence) {
    const auto infos = out_.infos(true);
    const vk::Result r = queue_.submit(infos, fence);
    out_.clear();
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
};

// AllReduces over streams, one per device of the communicator's group in device order.
// While it lives the streams hold the host's work (Stream::set_holding) and the
// communicator submits what they hold before it waits or submits on its own; destroyed,
// everything held is submitted. `Comm`: tpar::AnyCommunicator or a Communicator<...>.
template <class Comm>
class StreamAllreduce {
 public:
  StreamAllreduce(Comm& comm, std::vector<Stream*> streams) : comm_(comm), streams_(std::move(streams)) {
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
    for (auto* s : streams_) s->set_holding(true);
    comm_.set_before_wait([this] { flush(); });
  }
  StreamAllreduce(const StreamAllreduce&) = delete;
  StreamAllreduce& operator=(const StreamAllreduce&) = delete;
  ~StreamAllreduce() {
    comm_.set_before_wait({});
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
    for (std::size_t d = 0; d < streams_.size(); ++d) ready_[d] = streams_[d]->next_ready();
    args.ready = ready_;
    args.ready_on_compute_queue = true;
    args.defer = true;
    Ticket ticket = comm_.allreduce(spans, args);
    const std::size_t n = streams_.size();
    bool carry = true;
    if (comm_.take_pending(batches_, leading_, carry)) {
      if (std::all_of(batches_.begin(), batches_.end(), [](const auto& b) { return b.empty(); })) return ticket;  // nothing to do
      // Every device's first part (its held work and the batches that wait on no peer)
      // before any device's rest, so no queue ever waits on a signal not yet submitted.
      // The rest goes in front of each device's next submission where no device waits on
      // another's rest; otherwise (the ring's steps) at once, every device's in turn.
      bool ok = true;
      reached_.assign(n, 0);
      for (std::size_t d = 0; d < n; ++d) {
        if (!streams_[d]->submit_with(batches_[d], leading_[d])) {
          ok = false;
          break;
        }
        reached_[d] = leading_[d];
      }
      if (ok && !carry)
        for (std::size_t d = 0; d < n && ok; ++d) {
          ok = streams_[d]->flush_carried();
          if (ok) reached_[d] = batches_[d].size();
        }
      comm_.handed(batches_, reached_, ok);
      if (!ok) {
        for (auto* s : streams_) s->drop_carried();
        throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
      }
    } else {
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
        const vk::Result r = detail::wait_all(s->device(), std::span(&p.semaphore, 1), std::span(&p.value, 1),
                                              comm_.options().timeout);
        if (r != vk::Result::eSuccess) throw Error(detail::code_for(r), "StreamAllreduce: a wait of the carried batches", r);
      }
      if (!s->flush_carried()) throw Error(ErrorCode::failed, "vkQueueSubmit failed for a stream carrying tpar's batches");
    }
  }

  // Everything the streams hold to their queues.
  void flush() {
    for (auto* s : streams_) s->flush();
  }

  std::size_t size() const { return streams_.size(); }
  Stream& stream(std::size_t d) { return *streams_[d]; }
  Comm& communicator() { return comm_; }

 private:
  Comm& comm_;
  std::vector<Stream*> streams_;
  std::vector<TimelinePoint> ready_;
  std::vector<std::size_t> reached_;
  std::vector<detail::BatchList> batches_;
  std::vector<std::size_t> leading_;
};

}  // namespace tpar::inline v0
