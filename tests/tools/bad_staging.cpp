// Must not compile (test policies/bad_staging_error): a staging policy whose Generation
// has only a constructor. The error is to be StagingPolicy's, where the type is named.
#include <tpar/comm/communicator.hpp>

struct OnlyConstructed {
  struct Generation {
    Generation(const tpar::DeviceGroup&, std::uint64_t, std::uint32_t, std::uint64_t) {}
  };
  static constexpr std::string_view name = "OnlyConstructed";
  static void check_support(const tpar::DeviceGroup&) {}
};

// Used as a host would: built, then called (before the concept said what a Generation
// provides, this compiled until the call, then failed with seven errors inside
// communicator.hpp and comm_plan.hpp).
void run(tpar::DeviceGroup& group, std::span<const tpar::BufferSpan> spans) {
  tpar::Communicator<tpar::ProxyBridge, tpar::BySize, OnlyConstructed> comm(group);
  comm.allreduce(spans).wait();
}
