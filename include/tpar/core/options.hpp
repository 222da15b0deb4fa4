// Options — what a communicator may choose for itself; the ranges its whole-number
// options take; and one table of the environment overrides a user can set without
// recompiling the host (detail::env_options(): TPAR_SYNC, TPAR_ALGO, TPAR_WIRE,
// TPAR_DEPTH, TPAR_RELAY_MAX, TPAR_RELAY_SUM, TPAR_RELAY_THREADS, TPAR_RELAY_RIDE,
// TPAR_STREAM_HOLD), which with_environment() and the checks of bad values read.
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/core/wire.hpp>
#include <tpar/core/detail/known_enum.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

namespace tpar::inline v0 {

enum class SyncChoice { automatic, native, proxy };
enum class AlgoChoice { automatic, ring, oneshot, relay };
// Where ChunkedRing's downloads (host staging -> scratch) run: compute = in the combine's
// compute-queue batch; separate = as batches of their own on the device's second transfer
// queue (a second copy engine; the transfer queue, or the one queue, of a device without
// one), the combine waiting for them. On H200s separate moved the ring's busbw by -13% to
// +10% depending on size and group (docs/PERFORMANCE.md), so compute is the default.
enum class DownloadQueue { compute, separate };

inline constexpr std::array<SyncChoice, 3> all_sync_choices{SyncChoice::automatic, SyncChoice::native, SyncChoice::proxy};
inline constexpr std::array<AlgoChoice, 4> all_algo_choices{AlgoChoice::automatic, AlgoChoice::ring, AlgoChoice::oneshot,
                                                             AlgoChoice::relay};
inline constexpr std::array<DownloadQueue, 2> all_download_queues{DownloadQueue::compute, DownloadQueue::separate};

constexpr std::string_view to_string(SyncChoice s) {
  switch (s) {
    case SyncChoice::automatic: return "auto";
    case SyncChoice::native: return "native";
    case SyncChoice::proxy: return "proxy";
  }
  return "?";
}

constexpr std::string_view to_string(DownloadQueue q) {
  switch (q) {
    case DownloadQueue::compute: return "compute";
    case DownloadQueue::separate: return "separate";
  }
  return "?";
}

constexpr std::string_view to_string(AlgoChoice a) {
  switch (a) {
    case AlgoChoice::automatic: return "auto";
    case AlgoChoice::ring: return "ring";
    case AlgoChoice::oneshot: return "oneshot";
    case AlgoChoice::relay: return "relay";
  }
  return "?";
}

// The most pieces ChunkedRing cuts a chunk into; max_pieces and lanes take 1 to this.
inline constexpr std::uint32_t max_pieces_per_chunk = 64;
// The most calls a communicator keeps in flight (Options::depth).
inline constexpr std::uint32_t max_depth = 128;
// The most host threads that serve one relay call (Options::relay_threads).
inline constexpr std::uint32_t max_relay_threads = 16;

struct Options {
  // Cross-device sync: native = NativeImport, proxy = ProxyBridge, auto = what the
  // group's capabilities allow (make_communicator chooses by it; a Communicator<Sync>
  // takes auto or its own, and refuses the other, naming both).
  SyncChoice sync = SyncChoice::automatic;
  // Algorithm: auto = the relay up to relay_max_bytes of payload where the group allows
  // it automatically (DeviceGroup::relay_gate), then OneShot while payload x (n - 1) --
  // what each device downloads -- stays within oneshot_max_bytes, ChunkedRing above.
  // OneShot makes one cross-device hop, the ring 2(n - 1), and a hop costs tens of
  // microseconds (docs/PERFORMANCE.md); the relay makes none (docs/relay.md). relay =
  // the relay for every call up to relay_max_bytes, larger calls as auto. Read by BySize
  // (the default algorithm policy); a communicator of a fixed one (ChunkedRing, OneShot,
  // Relay) takes auto or its own, and refuses the others, naming both.
  AlgoChoice algo = AlgoChoice::automatic;
  std::size_t oneshot_max_bytes = std::size_t{12} << 20;
  // The largest payload the relay takes; each device holds a slot this large in its own
  // host-visible memory (and twice that in host memory) per call in flight (depth).
  // TPAR_RELAY_MAX=SIZE (bytes, or with K or M: 64K, 1M).
  std::size_t relay_max_bytes = std::size_t{64} << 10;
  // Tests and tpar-bench only: the relay's host thread plays this many extra devices,
  // which contribute relay_host_peer_value(peer, i) (algo/relay.hpp) to every relay
  // call, so that one real device forms a relay of 1 + relay_host_peers. Every call up to
  // relay_max_bytes then takes the relay.
  std::uint32_t relay_host_peers = 0;
  // How the relay's host thread reads and sums the published values: vector (4 or 8
  // values a step, AVX2 where the CPU has it; the default) or scalar (one value a step,
  // the loop of before, kept to compare: tpar-bench, tests). The sums are bit-identical.
  // TPAR_RELAY_SUM=vector|scalar.
  bool relay_scalar_sum = false;
  // Host threads that serve a relay call together: a call of at least two grains (512
  // values each) is cut into up to this many parts of whole grains, each thread reading
  // its part's values from every device, summing them in device order and writing the
  // part into every device's slot (the sums are bit-identical to one thread's). The
  // host's reading of the devices' published values is most of a 16-64 KiB call's time
  // (docs/design/relay-threads.md); each thread spins only while relay calls are in
  // flight, so while a GPU decodes each costs about a host core: eight took 4 us off a 16
  // KiB boundary in the chain on one H200 and cost some 4.6 cores more than two in
  // llama-bench's decode (docs/design/relay-grain.md). TPAR_RELAY_THREADS=1..16; 1 is the
  // one thread of before.
  std::uint32_t relay_threads = 2;
  // tpar::StreamAllreduce: the most AllReduces whose batches wait on no other device (the
  // relay's) every device's stream holds with the host's work before they go out
  // together; fewer while a GPU may run dry. Every vkQueueSubmit ends a batch, and on
  // NVIDIA's driver (580) the GPU idled about 10 us more after a submission's end than
  // between two command buffers of one (docs/design/relay-in-one-submission.md); held
  // so, a decode step's relay calls and the host's work between them run as one batch.
  // 0 or 1: each call goes out at once. TPAR_STREAM_HOLD=1..1024.
  std::uint32_t stream_hold = 16;
  // tpar::StreamAllreduce, with a host that records its own command buffers and offers
  // them (Stream::ride: ggml-vulkan under -sm tensor): a held relay call's kernel is
  // recorded at the start of the host's next command buffer on each device, not in a
  // command buffer of tpar's, so that a call ends no command buffer of its own (on
  // NVIDIA's driver 580 each end cost the GPU about 4.7 us: docs/design/relay-ride.md).
  // Only where the relay's kernels wait for the sum on the GPU. TPAR_RELAY_RIDE=0|1.
  bool relay_ride = true;
  // Wire: a fixed format, or (nullopt) f32 below bf16_min_bytes of payload and bf16 from it.
  std::optional<Wire> wire;
  std::size_t bf16_min_bytes = std::size_t{1} << 20;
  // ChunkedRing pipelining. Each chunk is cut into pieces: by default (piece_bytes = 0)
  // as many as give pieces of at least min_piece_wire_bytes on the wire, at most
  // max_pieces; copy engines need large copies to reach their bandwidth, and every piece
  // costs a semaphore hop, so a few large pieces beat many small ones (measured on H200:
  // docs/PERFORMANCE.md). A nonzero piece_bytes fixes the f32 payload per piece instead,
  // up to max_pieces_per_chunk pieces: a larger chunk is cut into that many, each larger
  // than piece_bytes (thousands of small pieces a call made NVIDIA's driver lose the
  // device: docs/design/submission-size.md).
  std::size_t piece_bytes = 0;
  std::size_t min_piece_wire_bytes = std::size_t{1} << 20;
  std::uint32_t max_pieces = 4;
  std::uint32_t lanes = 4;  // pieces a device keeps in flight
  DownloadQueue downloads = DownloadQueue::compute;
  // Calls that may be in flight at once; each has its own host staging slots (and a call
  // needing a slot set still in use waits on the host for it). 0, the default, sizes it
  // by bytes: as many slot sets as staging_in_flight holds at the current staging size,
  // at least 2 and at most max_depth, so that decode-sized calls never wait for a slot
  // within a step of a model's layers (a 16 KiB call's set takes 64 KiB: 128 fit), while
  // prefill-sized ones do not pin hundreds of MiB (a 4 MiB bf16 set: 8 fit). After a long
  // prefill, decode-sized calls use its staging, with its fewer sets, until it shrinks
  // (64 calls later: staging/capacity.hpp). 1 to max_depth fixes it.
  std::uint32_t depth = 0;
  // Host staging per device for calls in flight when depth is 0.
  std::size_t staging_in_flight = std::size_t{32} << 20;
  // Bound on every wait tpar makes (a ready point, a peer, the GPU draining on destroy).
  std::chrono::nanoseconds timeout = std::chrono::seconds(10);
  // Record GPU timestamps around every batch, for Communicator::profile(). Costs a few
  // commands per batch; meant for tpar-bench --profile, not for production.
  bool profile = false;

  // The slot sets a staging generation of `set_bytes` per call gets.
  std::uint32_t depth_for(std::uint64_t set_bytes) const {
    if (depth) return depth;
    const std::uint64_t fit = staging_in_flight / std::max<std::uint64_t>(set_bytes, 1);
    return static_cast<std::uint32_t>(std::clamp<std::uint64_t>(fit, 2, max_depth));
  }
  // The most slot sets any generation gets (what the relay's slots are sized for).
  std::uint32_t max_slot_sets() const { return depth ? depth : max_depth; }

  Wire wire_for(std::size_t payload_bytes) const {
    if (wire) return *wire;
    return payload_bytes >= bf16_min_bytes ? Wire::bf16 : Wire::f32;
  }

  // These options with every variable of detail::env_options() applied where set (an
  // empty one counts as unset). A bad value throws Error(invalid_argument) that lists
  // the valid ones, and nothing is applied.
  Options with_environment() const;

  // Throws Error(invalid_argument) where an enum field holds a value no enumerator names
  // (communicators check their options with it before building anything).
  void validate_enums() const {
    detail::require_known(sync, all_sync_choices, "Options::sync");
    detail::require_known(algo, all_algo_choices, "Options::algo");
    if (wire) detail::require_known(*wire, all_wires, "Options::wire");
    detail::require_known(downloads, all_download_queues, "Options::downloads");
  }
};

// The ranges of the whole-number options, read by Options' checks, the environment and
// the C ABI (one place each is written).
struct OptionRange {
  std::uint64_t lo, hi;
  constexpr bool holds(std::uint64_t v) const { return v >= lo && v <= hi; }
  std::string text() const { return std::to_string(lo) + " to " + std::to_string(hi); }
};
inline constexpr OptionRange depth_range{1, max_depth};                   // Options::depth (0: sized by bytes)
inline constexpr OptionRange pieces_range{1, max_pieces_per_chunk};       // Options::max_pieces, Options::lanes
inline constexpr OptionRange relay_threads_range{1, max_relay_threads};   // Options::relay_threads
inline constexpr OptionRange stream_hold_range{1, 1024};                  // Options::stream_hold (0 or 1: at once)
inline constexpr OptionRange relay_max_range{4, std::uint64_t{64} << 20};  // Options::relay_max_bytes, a multiple of 4

namespace detail {

inline const char* env_value(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// The enumerator whose name (to_string) is `s`, and the names an error lists.
template <class E, std::size_t N>
std::optional<E> parse_choice(std::string_view s, const std::array<E, N>& all) {
  for (E e : all)
    if (to_string(e) == s) return e;
  return std::nullopt;
}
template <class E, std::size_t N>
std::string choice_names(const std::array<E, N>& all) {
  std::string out;
  for (E e : all) out += (out.empty() ? "" : ", ") + std::string(to_string(e));
  return out;
}

// Digits only, no sign, no overflow.
inline std::optional<std::uint64_t> parse_whole(std::string_view s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  std::uint64_t v = 0;
  for (const char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
    v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return v;
}

// A size in bytes, or with K or M (64K, 1M), within relay_max_range and a multiple of 4.
inline std::optional<std::uint64_t> parse_relay_size(std::string_view s) {
  std::uint64_t shift = 0;
  if (!s.empty() && (s.back() == 'K' || s.back() == 'k')) shift = 10;
  else if (!s.empty() && (s.back() == 'M' || s.back() == 'm')) shift = 20;
  const auto v = parse_whole(shift ? s.substr(0, s.size() - 1) : s);
  if (!v || *v > (relay_max_range.hi >> shift)) return std::nullopt;
  const std::uint64_t b = *v << shift;
  if (!relay_max_range.holds(b) || b % 4) return std::nullopt;
  return b;
}

// One option a user sets from the environment: the variable, the Options member it sets,
// the values it takes (as an error lists them), and how a value is applied (false: it is
// not one of them, and nothing is changed).
struct EnvOption {
  std::string_view env;
  std::string_view field;
  std::string (*valid)();
  bool (*apply)(Options&, std::string_view);
};

// Every environment override, in the order with_environment() applies them; docs/api.md
// and docs/integrating-ggml.md name each (tests/tools/check_env_docs.py).
inline const std::array<EnvOption, 9>& env_options() {
  static const std::array<EnvOption, 9> table{{
      {"TPAR_SYNC", "sync", [] { return choice_names(all_sync_choices); },
       [](Options& o, std::string_view s) {
         const auto c = parse_choice(s, all_sync_choices);
         if (c) o.sync = *c;
         return c.has_value();
       }},
      {"TPAR_ALGO", "algo", [] { return choice_names(all_algo_choices); },
       [](Options& o, std::string_view s) {
         const auto c = parse_choice(s, all_algo_choices);
         if (c) o.algo = *c;
         return c.has_value();
       }},
      {"TPAR_WIRE", "wire", [] { return "auto, " + choice_names(all_wires); },
       [](Options& o, std::string_view s) {
         if (s == "auto") return o.wire.reset(), true;
         const auto w = parse_choice(s, all_wires);
         if (w) o.wire = *w;
         return w.has_value();
       }},
      {"TPAR_DEPTH", "depth", [] { return "auto, or " + depth_range.text(); },
       [](Options& o, std::string_view s) {
         if (s == "auto") return o.depth = 0, true;
         const auto d = parse_whole(s);
         if (!d || !depth_range.holds(*d)) return false;
         o.depth = static_cast<std::uint32_t>(*d);
         return true;
       }},
      {"TPAR_RELAY_MAX", "relay_max_bytes",
       [] { return std::string("a size of 4 bytes to 64M, a multiple of 4 (65536, 64K, 1M)"); },
       [](Options& o, std::string_view s) {
         const auto b = parse_relay_size(s);
         if (b) o.relay_max_bytes = static_cast<std::size_t>(*b);
         return b.has_value();
       }},
      {"TPAR_RELAY_SUM", "relay_scalar_sum", [] { return std::string("vector, scalar"); },
       [](Options& o, std::string_view s) {
         if (s != "vector" && s != "scalar") return false;
         o.relay_scalar_sum = s == "scalar";
         return true;
       }},
      {"TPAR_RELAY_THREADS", "relay_threads", [] { return relay_threads_range.text(); },
       [](Options& o, std::string_view s) {
         const auto t = parse_whole(s);
         if (!t || !relay_threads_range.holds(*t)) return false;
         o.relay_threads = static_cast<std::uint32_t>(*t);
         return true;
       }},
      {"TPAR_RELAY_RIDE", "relay_ride", [] { return std::string("0 or 1"); },
       [](Options& o, std::string_view s) {
         if (s != "0" && s != "1") return false;
         o.relay_ride = s == "1";
         return true;
       }},
      {"TPAR_STREAM_HOLD", "stream_hold", [] { return stream_hold_range.text(); },
       [](Options& o, std::string_view s) {
         const auto h = parse_whole(s);
         if (!h || !stream_hold_range.holds(*h)) return false;
         o.stream_hold = static_cast<std::uint32_t>(*h);
         return true;
       }},
  }};
  return table;
}

}  // namespace detail

inline Options Options::with_environment() const {
  Options o = *this;
  for (const detail::EnvOption& row : detail::env_options()) {
    const char* v = detail::env_value(std::string(row.env).c_str());
    if (v && !row.apply(o, v))
      throw Error(ErrorCode::invalid_argument,
                  std::string(row.env) + "=" + v + " is not valid; use one of: " + row.valid());
  }
  return o;
}

}  // namespace tpar::inline v0
