// ScheduleRequest — what an algorithm needs to lay out one AllReduce, and the concept
// every algorithm policy meets.
#pragma once

#include <tpar/core/options.hpp>
#include <tpar/sync/schedule.hpp>

#include <concepts>
#include <cstdint>
#include <string_view>

namespace tpar::inline v0 {

struct ScheduleRequest {
  std::uint32_t devices = 1;
  std::size_t count = 0;
  Wire wire = Wire::f32;
  std::uint32_t contributing = ~0u;       // bit i: device i contributes (else counts as zeros)
  std::size_t piece_elems = 512 * 1024;   // ChunkedRing: values per pipelined piece (multiple of wire_block)
  std::uint32_t lanes = 4;                // ChunkedRing: pieces in flight per device
  // BySize: the algorithm to use (automatic: OneShot up to oneshot_max_bytes of payload).
  AlgoChoice choice = AlgoChoice::automatic;
  std::size_t oneshot_max_bytes = std::size_t{256} << 10;

  bool contributes(std::uint32_t device) const { return (contributing >> device) & 1u; }
};

// An algorithm turns a request into a schedule (pure: no Vulkan objects).
template <class A>
concept Algorithm = requires(const ScheduleRequest& request) {
  { A::name } -> std::convertible_to<std::string_view>;
  { A::build(request) } -> std::same_as<Schedule>;
};

}  // namespace tpar::inline v0
