// ScheduleRequest — what an algorithm needs to lay out one AllReduce, and the concept
// every algorithm policy meets.
#pragma once

#include <tpar/core/options.hpp>
#include <tpar/sync/schedule.hpp>

#include <concepts>
#include <cstdint>
#include <string_view>

namespace tpar::inline v0 {

// ChunkedRing's parameters (ScheduleRequest::ring).
struct RingParams {
  // Values per pipelined piece (a multiple of wire_block), or 0 to cut each chunk into
  // pieces of at least min_piece_wire_bytes on the wire, at most max_pieces.
  std::size_t piece_elems = 0;
  std::size_t min_piece_wire_bytes = std::size_t{1} << 20;
  std::uint32_t max_pieces = 4;
  std::uint32_t lanes = 4;  // pieces in flight per device
  // Each download (a peer's piece from host staging into scratch) is a batch of its own
  // (Role::download, the device's second copy engine), the combine a compute batch
  // waiting on it; else download and combine are one compute-queue batch.
  bool separate_downloads = false;
};

// BySize's parameters (ScheduleRequest::by_size): the algorithm to use (automatic: the
// relay where RelayParams lets it, then OneShot while payload x (n-1) is at most
// oneshot_max_bytes, ChunkedRing above).
struct BySizeParams {
  AlgoChoice choice = AlgoChoice::automatic;
  std::size_t oneshot_max_bytes = std::size_t{12} << 20;
};

// The relay's parameters (ScheduleRequest::relay): the largest payload it takes; whether
// the automatic choice may take it (the group's RelayGate) and up to what payload (the
// gate's own bound); bit d: device d waits for its sum at the queue (a host-signalled
// semaphore) rather than in the kernel; the kernel's spin bound in milliseconds.
struct RelayParams {
  std::size_t max_bytes = std::size_t{64} << 10;
  bool automatic = false;
  std::size_t automatic_max_bytes = std::size_t{64} << 10;
  std::uint32_t queue_waits = 0;
  std::uint32_t spin_bound_ms = 20000;
};

struct ScheduleRequest {
  std::uint32_t devices = 1;
  std::size_t count = 0;
  Wire wire = Wire::f32;
  std::uint32_t contributing = ~0u;  // bit i: device i contributes (else counts as zeros)
  // The smallest maxStorageBufferRange in the group, or 0 for no limit: a kernel binds a
  // device's whole scratch, so ChunkedRing cuts more pieces (then uses fewer lanes) where
  // the layout asked for would not fit one binding.
  std::uint64_t max_scratch_bytes = 0;
  // Each algorithm's own: ChunkedRing reads `ring`, BySize `by_size` (and asks Relay
  // whether `relay` lets it take the call), Relay `relay`; OneShot the fields above only.
  RingParams ring;
  BySizeParams by_size;
  RelayParams relay;

  bool contributes(std::uint32_t device) const { return (contributing >> device) & 1u; }

  // Throws Error(invalid_argument) where `wire` or `by_size.choice` holds a value no
  // enumerator names: algorithms size staging and pick shaders by them.
  void validate_enums() const {
    detail::require_known(wire, all_wires, "ScheduleRequest::wire");
    detail::require_known(by_size.choice, all_algo_choices, "ScheduleRequest::by_size.choice");
  }
};

// The empty schedule an algorithm fills: one entry per device, no staging yet.
inline Schedule empty_schedule(std::string_view algorithm, const ScheduleRequest& rq) {
  Schedule s;
  s.algorithm = algorithm;
  s.wire = rq.wire;
  s.count = rq.count;
  s.devices.resize(rq.devices);
  s.host_bytes.assign(rq.devices, 0);
  s.scratch_bytes.assign(rq.devices, 0);
  return s;
}

// An algorithm turns a request into a schedule (pure: no Vulkan objects). `choice`, where
// it has one, is the Options::algo value that names it (AlgoChoice::automatic: it chooses
// by Options::algo, as BySize); an algorithm without one is named by no Options::algo
// value, so only automatic agrees with it.
template <class A>
concept Algorithm = requires(const ScheduleRequest& request) {
  { A::name } -> std::convertible_to<std::string_view>;
  { A::build(request) } -> std::same_as<Schedule>;
};

namespace detail {
template <Algorithm A>
constexpr bool reads_algo_option() {
  if constexpr (requires { A::choice; }) return A::choice == AlgoChoice::automatic;
  else return false;
}
// The policy type's own name, for messages ("ChunkedRing", or the algorithm's name).
template <Algorithm A>
constexpr std::string_view algorithm_type_name() {
  if constexpr (requires { A::choice; }) {
    switch (A::choice) {
      case AlgoChoice::automatic: return "BySize";
      case AlgoChoice::ring: return "ChunkedRing";
      case AlgoChoice::oneshot: return "OneShot";
      case AlgoChoice::relay: return "Relay";
    }
  }
  return A::name;
}
}  // namespace detail

}  // namespace tpar::inline v0
