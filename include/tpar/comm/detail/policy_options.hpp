// A runtime option that contradicts the communicator's policy types is an error naming
// both, never silently ignored: Communicator<ProxyBridge> asked for Options::sync =
// native, Communicator<P, ChunkedRing> for Options::algo = oneshot. What agrees: auto, or
// the policy's own value. Where the algorithm is one of tpar's fixed ones, the options
// then name it (Options::algo = its choice), so that what reads them (the relay's setup:
// Relay is the relay asked for) sees what the type says.
#pragma once

#include <tpar/algo/request.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/options.hpp>
#include <tpar/vk/capabilities.hpp>

#include <string>

namespace tpar::inline v0::detail {

template <class Sync, Algorithm Algo>
void apply_policy_types(Options& o) {
  const std::string type = "Communicator<" + std::string(to_string(Sync::kind)) + ", " + std::string(algorithm_type_name<Algo>()) + ">";
  const SyncChoice own_sync = Sync::kind == SyncKind::native_import ? SyncChoice::native : SyncChoice::proxy;
  if (o.sync != SyncChoice::automatic && o.sync != own_sync)
    throw Error(ErrorCode::invalid_argument,
                "Options::sync = " + std::string(to_string(o.sync)) + " contradicts the sync policy of " + type + ", " +
                    std::string(to_string(Sync::kind)) + ": leave it auto, or choose the sync at run time (make_communicator)");
  if constexpr (!reads_algo_option<Algo>()) {
    constexpr AlgoChoice own = [] {
      if constexpr (requires { Algo::choice; }) return Algo::choice;
      else return AlgoChoice::automatic;  // named by no Options::algo value
    }();
    if (o.algo != AlgoChoice::automatic && o.algo != own)
      throw Error(ErrorCode::invalid_argument,
                  "Options::algo = " + std::string(to_string(o.algo)) + " contradicts the algorithm of " + type + ", " +
                      std::string(algorithm_type_name<Algo>()) +
                      ": leave it auto, or use the algorithm that chooses by it (Communicator<" + std::string(to_string(Sync::kind)) +
                      ", BySize>, the default)");
    o.algo = own;
  }
}

}  // namespace tpar::inline v0::detail
