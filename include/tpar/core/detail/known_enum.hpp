// Internal: the one check every enum that enters tpar's API passes (Wire, SyncChoice,
// AlgoChoice, DownloadQueue, ...). A C++ enum holds any value of its underlying type
// (a cast, a struct filled from elsewhere), and tpar indexes tables and picks shaders by
// these values, so one that no enumerator names is refused before anything is built or
// enqueued, with the valid names in the message.
#pragma once

#include <tpar/core/error.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <type_traits>

namespace tpar::inline v0::detail {

// Throws Error(invalid_argument) unless `value` is one of `known`; `what` names where
// the value came from ("AllreduceArgs::wire"). Each enum's to_string is found by ADL.
template <class E, std::size_t N>
void require_known(E value, const std::array<E, N>& known, std::string_view what) {
  static_assert(std::is_enum_v<E>);
  if (std::find(known.begin(), known.end(), value) != known.end()) return;
  std::string names;
  for (E k : known) {
    if (!names.empty()) names += ", ";
    names += to_string(k);
  }
  throw Error(ErrorCode::invalid_argument, std::string(what) + " = " +
                                               std::to_string(static_cast<long long>(static_cast<std::underlying_type_t<E>>(value))) +
                                               " is not a value of its enum; use one of: " + names);
}

}  // namespace tpar::inline v0::detail
