// What one allreduce call takes and reports: its arguments, what it chose, the relay's
// statistics. Included by communicator.hpp.
#pragma once

#include <tpar/core/options.hpp>
#include <tpar/core/timeline_point.hpp>
#include <tpar/core/wire.hpp>
#include <tpar/staging/concepts.hpp>
#include <tpar/vk/device_group.hpp>

#include <chrono>
#include <concepts>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tpar::inline v0 {

// Commands a host records beside a riding relay call's kernel (Stream::ride): right after
// the kernel in the host's command buffer, before the barrier that makes the sum visible,
// so the GPU runs them while the kernel waits for the host's sum (the GPU's memory is
// otherwise idle then). They may read anything the host's commands before the ride wrote
// (the ride's own ordering covers them where the ride is `ordered`; otherwise the barrier
// before the kernel does), and must neither read the call's span nor write anything the
// kernel or the host's later commands read, with no barrier of their own: what helps is
// work whose only effect is on the caches, as reading the weights the next commands
// read first (docs/design/l2-warm.md). Called once, while the ride records. An exception
// it throws leaves Stream::ride with the kernel recorded into the host's command buffer
// and the call still waiting: the host must not submit that command buffer then.
using RideBeside = std::function<void(vk::CommandBuffer)>;

struct AllreduceArgs {
  // Per device (or empty): work on the span starts once this point is reached. A null
  // semaphore means no wait for that device.
  std::span<const TimelinePoint> ready;
  // Per device (or empty: all): false marks a device that computed nothing; its buffer
  // counts as zeros (whatever it holds) and still receives the result.
  std::span<const bool> contributes;
  // Overrides the communicator's wire choice for this call.
  std::optional<Wire> wire;
  // Hold the call's work back until flush() (or until tpar must submit it: a later call
  // that is not deferred, a host wait on its ticket, a slot set needed again,
  // destruction), so that back-to-back calls reach each queue in one vkQueueSubmit: the
  // driver's cost per submission is most of a small call's host CPU. At most
  // Options::depth calls are held. Work of the caller's that waits on the ticket's done
  // points is submitted after the flush (queued ahead of tpar's batches on the same queue,
  // it would wait forever).
  bool defer = false;
  // The ready points are signalled by work the caller submitted to each device's compute
  // queue before this call's batches reach it (or no ready point is needed there): the
  // call's batches on that queue follow it by submission order, with no semaphore wait;
  // batches on other queues (ChunkedRing's copies) still wait on `ready`. A null ready
  // point then means the caller's earlier work is all on the compute queue.
  bool ready_on_compute_queue = false;
};

// What one call did, for reports (tpar-bench, logs). The relay carries f32 whatever wire
// was asked for, and says so here.
struct CallInfo {
  std::string_view algorithm;
  Wire wire = Wire::f32;
};

// The relay's host thread so far (zeros before the first relay call).
struct RelayStats {
  std::uint64_t calls = 0;                // relay calls it served
  std::chrono::nanoseconds cpu{0};        // its CPU time, its helpers' included
  std::uint64_t split_calls = 0;          // calls served in parts by several threads (Options::relay_threads)
  // Where the served calls' time went, summed over them (divide by calls): from the call's
  // submission to every device's first values seen by the thread (the GPUs start the
  // kernels, which publish), and from there to the sum in every slot with its flag.
  std::chrono::nanoseconds arriving{0};
  std::chrono::nanoseconds serving{0};
  // How far apart the devices' values came, as the thread saw them, over the calls of two
  // or more contributing devices it was waiting for before the first device's came: their
  // count, the time from the first device's first value to the last's (summed), and by
  // device how many of those calls it came last (a device the others wait for).
  std::uint64_t timed_arrivals = 0;
  std::chrono::nanoseconds spread{0};
  std::vector<std::uint64_t> last;
  // The relay kernels' own times where they read the device clock (work group 0's stamps),
  // summed over device parts: from a kernel's start to its values published, from there
  // to the sum seen, from there to its copy done; and over consecutive calls on a device,
  // from one kernel's end to the next's start (the GPU's work between two calls).
  std::uint64_t kernels = 0;
  std::chrono::nanoseconds kernel_publish{0}, kernel_wait{0}, kernel_copy{0};
  std::uint64_t kernel_gaps = 0;
  std::chrono::nanoseconds kernel_gap{0};
  std::chrono::nanoseconds kernel_gap_median{0};  // of the gaps, to 0.25 us; 1 ms: 1 ms or more
  // The thread's sleeps: how many calls it came to after sleeping with none in flight (it
  // lingers 50 us after the last, then blocks), and from each one's hand-over to the thread
  // coming to it (summed: the wake-up, where the GPUs may already be waiting for the sum);
  // and how many times a helper thread was asleep when a part was posted to it.
  std::uint64_t wakeups = 0;
  std::chrono::nanoseconds wake{0};
  std::uint64_t helper_wakeups = 0;
};

// What the relay's self-test found (Communicator::relay_self_test(); docs/relay.md, "The
// self-test"): whether each device's running kernel saw a host write into its memory,
// its values reached the host, every value both ways right, within the bounds.
struct RelaySelfTest {
  struct Device {
    bool passed = false;
    bool cached = false;        // an earlier test's verdict in this process (same driver, version, device)
    bool conclusive = true;     // false: a busy queue or a late host decided nothing (not cached)
    bool kernel_waits = false;  // its kernel waited for the write while running (else its queue did)
    std::string reason;         // what was seen, or what was not
    std::string memory;         // the memory types of its slot and publish area
    std::chrono::nanoseconds seen{0};  // from the host's write to the kernel's confirmation
  };
  bool ran = false;         // false: not needed (the relay is neither chosen automatically nor asked for)
  bool passed = false;
  bool conclusive = true;   // false where some device's verdict was not conclusive
  std::string reason;       // one sentence: passed, or the first device that failed and why
  std::vector<Device> devices;
  std::chrono::nanoseconds took{0};  // the whole test, at communicator creation
};

// What the communicator built on the host so far: host staging generations (made when a
// call needs more staging than is held, or when Capacity shrinks it; each drops every plan)
// and plans (one a call shape), with the host time each took (pinning and importing the
// staging, creating descriptor sets and recording command buffers).
struct PlanStats {
  std::uint64_t generations = 0;
  std::chrono::nanoseconds generation_time{0};
  std::uint64_t largest_staging = 0;  // bytes of host staging, all devices, of the largest generation
  std::uint64_t plans = 0;
  std::chrono::nanoseconds plan_time{0};
};

namespace detail {
// `total` over `n`, in microseconds to one decimal ("9.1").
inline std::string mean_us(std::chrono::nanoseconds total, std::uint64_t n) {
  const auto tenths = (total.count() / static_cast<std::int64_t>(n) + 50) / 100;
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10);
}
}  // namespace detail

// RelayStats' arrivals in words: "the devices' first values came 3.2 us apart (mean of
// 24000 calls the relay waited for); the last was device 0 in 48%, device 1 in 52%".
inline std::string relay_arrivals(const RelayStats& r) {
  if (!r.timed_arrivals) return "no call's arrivals timed";
  std::string out = "the devices' first values came " + detail::mean_us(r.spread, r.timed_arrivals) + " us apart (mean of " +
                    std::to_string(r.timed_arrivals) + " calls the relay waited for); the last was";
  for (std::size_t d = 0; d < r.last.size(); ++d)
    out += std::string(d ? "," : "") + " device " + std::to_string(d) + " in " +
           std::to_string((r.last[d] * 100 + r.timed_arrivals / 2) / r.timed_arrivals) + "%";
  return out;
}

// RelayStats' sleeps in words: "the relay thread came to 812 calls after sleeping, 41.3 us
// after their hand-over (mean); its helpers were woken 790 times".
inline std::string relay_wakeups(const RelayStats& r) {
  return "the relay thread came to " + std::to_string(r.wakeups) + " of " + std::to_string(r.calls) +
         " calls after sleeping" + (r.wakeups ? ", " + detail::mean_us(r.wake, r.wakeups) + " us after their hand-over (mean)" : std::string()) +
         "; its helpers were woken " + std::to_string(r.helper_wakeups) + " times";
}

// RelayStats' kernel times in words: "a kernel took 9.1 us on the GPU (1.0 publishing its
// values, 7.0 waiting for the sum, 1.1 copying it; mean of 49280 device parts), 55.3 us
// from one kernel's end to the next's start on a device (median 52.1)".
inline std::string relay_kernel_times(const RelayStats& r) {
  if (!r.kernels) return "no kernel's times read";
  const auto us = detail::mean_us;
  std::string out = "a kernel took " + us(r.kernel_publish + r.kernel_wait + r.kernel_copy, r.kernels) + " us on the GPU (" +
                    us(r.kernel_publish, r.kernels) + " publishing its values, " + us(r.kernel_wait, r.kernels) +
                    " waiting for the sum, " + us(r.kernel_copy, r.kernels) + " copying it; mean of " + std::to_string(r.kernels) +
                    " device parts)";
  if (r.kernel_gaps)
    out += ", " + us(r.kernel_gap, r.kernel_gaps) + " us from one kernel's end to the next's start on a device (median " +
           (r.kernel_gap_median >= std::chrono::milliseconds(1) ? std::string("1 ms or more") : us(r.kernel_gap_median, 1)) + ")";
  return out;
}

}  // namespace tpar::inline v0
