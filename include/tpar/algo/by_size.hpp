// BySize — the default algorithm: the relay for the smallest calls where the group
// allows it (no cross-device semaphore at all), OneShot while what each device downloads
// (the payload times n-1) is small enough that latency dominates (one cross-device hop),
// ChunkedRing above, where bandwidth does (each device moves 2(n-1)/n of the tensor
// instead of n-1 times it, over 2(n-1) hops).
#pragma once

#include <tpar/algo/chunked_ring.hpp>
#include <tpar/algo/one_shot.hpp>
#include <tpar/algo/relay.hpp>

namespace tpar::inline v0 {

struct BySize {
  static constexpr std::string_view name = "auto";
  // Chooses among the others by Options::algo (TPAR_ALGO) and the call's size: the one
  // algorithm policy that reads Options::algo rather than being one of its values.
  static constexpr AlgoChoice choice = AlgoChoice::automatic;

  static bool use_relay(const ScheduleRequest& rq) {
    if (!Relay::takes(rq)) return false;
    if (rq.by_size.choice == AlgoChoice::relay) return true;
    return rq.by_size.choice == AlgoChoice::automatic && Relay::automatic_takes(rq);
  }

  // Asked for the relay, a call too large for it goes as chosen automatically.
  static bool use_oneshot(const ScheduleRequest& rq) {
    const AlgoChoice asked = rq.by_size.choice;
    if (asked != AlgoChoice::automatic && asked != AlgoChoice::relay)
      return asked == AlgoChoice::oneshot || rq.devices < 2;
    return rq.devices < 2 || rq.count * sizeof(float) * (rq.devices - 1) <= rq.by_size.oneshot_max_bytes;
  }

  static Schedule build(const ScheduleRequest& rq) {
    rq.validate_enums();
    if (use_relay(rq)) return Relay::build(rq);
    return use_oneshot(rq) ? OneShot::build(rq) : ChunkedRing::build(rq);
  }
};

static_assert(Algorithm<BySize>);

}  // namespace tpar::inline v0
