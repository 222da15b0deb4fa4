// How a schedule's batches split, device by device, into a leading part (what a device
// may submit with nothing of a peer's submitted yet) and the rest, for a host that hands
// each device's part of a call to submissions of its own (tpar::StreamAllreduce): it must
// never hand a queue a wait on a signal not yet submitted. Pure: schedules only.
#pragma once

#include <tpar/sync/schedule.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace tpar::inline v0 {

// Whether every wait of a batch on a peer's batch is on one within that peer's leading
// part (`leading[j]`: the first so many of device j's batches, in schedule order). Then
// no device's rest is what another device waits on, and holding one device's rest back
// cannot hold up another.
inline bool peer_waits_within(const Schedule& s, std::span<const std::size_t> leading) {
  for (std::size_t d = 0; d < s.devices.size(); ++d)
    for (const Batch& b : s.devices[d].batches)
      for (const BatchRef& ref : b.waits) {
        if (ref.device == d) continue;
        const auto& theirs = s.devices[ref.device].batches;
        std::uint32_t seen = 0;
        for (std::size_t i = 0; i < theirs.size(); ++i)
          if (theirs[i].role == ref.role && seen++ == ref.index) {
            if (i >= leading[ref.device]) return false;
            break;
          }
      }
  return true;
}

// How many of device d's batches come before its first that waits on a peer's batch or
// on the relay's host thread.
inline std::size_t leading_batches(const Schedule& s, std::size_t d) {
  const auto& batches = s.devices[d].batches;
  auto waits_on_peer = [&](const Batch& b) {
    return b.wait_relay || std::any_of(b.waits.begin(), b.waits.end(), [&](const BatchRef& r) { return r.device != d; });
  };
  std::size_t k = 0;
  while (k < batches.size() && !waits_on_peer(batches[k])) ++k;
  return k;
}

// Whether each device's part can be submitted by a thread of its own, every device's
// leading part ahead of any device's rest: no device waits on what a peer submits after
// its own first wait (OneShot; not the ring's steps). The queues are the caller's to
// check: a part submitted by one thread runs on one queue.
inline bool splits_per_device(const Schedule& s) {
  std::vector<std::size_t> leading(s.devices.size());
  for (std::size_t d = 0; d < s.devices.size(); ++d) leading[d] = leading_batches(s, d);
  return peer_waits_within(s, leading);
}

// Whether no batch waits on another device's batch: only on its own device's work, on
// the relay's host thread, or on nothing (the relay; not OneShot's sum). Every device's
// part may then be held back and submitted with the others' later.
inline bool waits_on_host_only(const Schedule& s) {
  for (std::size_t d = 0; d < s.devices.size(); ++d)
    for (const Batch& b : s.devices[d].batches)
      for (const BatchRef& ref : b.waits)
        if (ref.device != d) return false;
  return true;
}

}  // namespace tpar::inline v0
