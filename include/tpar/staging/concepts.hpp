// StagingPolicy — what a staging policy (HostImport) provides, beside CrossDeviceSync in
// sync/: a name, a check that the group can use it, and a Generation: the host staging and
// scratch of one capacity, made from (group, bytes per slot set, slot sets, scratch
// bytes), whose buffers the communicator binds and copies through. A type that misses
// any of it is rejected where it is named (Communicator<Sync, Algo, Bad>: one error, "the
// constraints of StagingPolicy are not satisfied"), not seven errors deep inside the
// communicator. HostImport is the only model tpar ships.
#pragma once

#include <tpar/vk/device_group.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tpar::inline v0 {

template <class G>
concept StagingGeneration =
    std::constructible_from<G, const DeviceGroup&, std::uint64_t, std::uint32_t, std::uint64_t> &&
    requires(const G& g, std::size_t device, std::uint32_t slot_set) {
      { g.depth() } -> std::convertible_to<std::uint32_t>;            // slot sets
      { g.set_bytes() } -> std::convertible_to<std::uint64_t>;        // host staging per slot set and source
      { g.scratch_bytes() } -> std::convertible_to<std::uint64_t>;    // each device's scratch
      { g.host_buffer(device, device) } -> std::same_as<vk::Buffer>;  // source j's staging as a buffer of device d
      { g.scratch(device) } -> std::same_as<vk::Buffer>;
      { g.slot_offset(slot_set) } -> std::convertible_to<std::uint64_t>;
      { g.host_bytes_total() } -> std::convertible_to<std::uint64_t>;
    };

template <class S>
concept StagingPolicy = requires(const DeviceGroup& group) {
  { S::name } -> std::convertible_to<std::string_view>;
  S::check_support(group);
  typename S::Generation;
} && StagingGeneration<typename S::Generation>;

}  // namespace tpar::inline v0
