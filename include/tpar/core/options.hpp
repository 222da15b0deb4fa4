// Options — what a communicator may choose for itself, and the environment overrides
// (TPAR_SYNC, TPAR_ALGO, TPAR_WIRE) a user can set without recompiling the host.
#pragma once

#include <tpar/core/wire.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace tpar::inline v0 {

enum class SyncChoice { automatic, native, proxy };
enum class AlgoChoice { automatic, ring, oneshot };

constexpr std::string_view to_string(SyncChoice s) {
  switch (s) {
    case SyncChoice::automatic: return "auto";
    case SyncChoice::native: return "native";
    case SyncChoice::proxy: return "proxy";
  }
  return "?";
}

constexpr std::string_view to_string(AlgoChoice a) {
  switch (a) {
    case AlgoChoice::automatic: return "auto";
    case AlgoChoice::ring: return "ring";
    case AlgoChoice::oneshot: return "oneshot";
  }
  return "?";
}

struct Options {
  // Cross-device sync (runtime-selected communicator only): native = NativeImport,
  // proxy = ProxyBridge, auto = what the group's capabilities allow.
  SyncChoice sync = SyncChoice::automatic;
  // Algorithm: auto = OneShot up to oneshot_max_bytes of f32 payload, ChunkedRing above.
  AlgoChoice algo = AlgoChoice::automatic;
  std::size_t oneshot_max_bytes = std::size_t{256} << 10;
  // Wire: a fixed format, or (nullopt) f32 below bf16_min_bytes of payload and bf16 from it.
  std::optional<Wire> wire;
  std::size_t bf16_min_bytes = std::size_t{1} << 20;
  // ChunkedRing pipelining: f32 payload per piece, and pieces a device keeps in flight.
  std::size_t piece_bytes = std::size_t{2} << 20;
  std::uint32_t lanes = 4;
  // Calls that may be in flight at once; each has its own host staging slots.
  std::uint32_t depth = 2;
  // Bound on every wait tpar makes (a ready point, a peer, the GPU draining on destroy).
  std::chrono::nanoseconds timeout = std::chrono::seconds(10);

  Wire wire_for(std::size_t payload_bytes) const {
    if (wire) return *wire;
    return payload_bytes >= bf16_min_bytes ? Wire::bf16 : Wire::f32;
  }

  // These options with TPAR_SYNC, TPAR_ALGO and TPAR_WIRE applied where set. An unknown
  // value throws an Error that lists the valid ones.
  Options with_environment() const;
};

namespace detail {

inline const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

[[noreturn]] inline void bad_env(const char* name, std::string_view value, std::string_view valid) {
  throw Error(ErrorCode::invalid_argument,
              std::string(name) + "=" + std::string(value) + " is not valid; use one of: " + std::string(valid));
}

}  // namespace detail

inline Options Options::with_environment() const {
  Options o = *this;
  if (const char* v = detail::env_value("TPAR_SYNC")) {
    const std::string_view s(v);
    if (s == "auto") o.sync = SyncChoice::automatic;
    else if (s == "native") o.sync = SyncChoice::native;
    else if (s == "proxy") o.sync = SyncChoice::proxy;
    else detail::bad_env("TPAR_SYNC", s, "auto, native, proxy");
  }
  if (const char* v = detail::env_value("TPAR_ALGO")) {
    const std::string_view s(v);
    if (s == "auto") o.algo = AlgoChoice::automatic;
    else if (s == "ring") o.algo = AlgoChoice::ring;
    else if (s == "oneshot") o.algo = AlgoChoice::oneshot;
    else detail::bad_env("TPAR_ALGO", s, "auto, ring, oneshot");
  }
  if (const char* v = detail::env_value("TPAR_WIRE")) {
    const std::string_view s(v);
    if (s == "auto") o.wire.reset();
    else if (auto w = parse_wire(s)) o.wire = *w;
    else detail::bad_env("TPAR_WIRE", s, "auto, f32, bf16, f16");
  }
  return o;
}

}  // namespace tpar::inline v0
