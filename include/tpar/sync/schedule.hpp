// Schedule — one AllReduce as a graph of batches on device queues, before any Vulkan
// object exists. A batch runs on one queue of one device and signals that queue's
// timeline; it waits on batches of its own device (other queue) or of peers (through
// the sync policy). Algorithms build schedules; the communicator records each batch
// once into a command buffer and replays it with new timeline values.
#pragma once

#include <tpar/core/wire.hpp>
#include <tpar/detail/align.hpp>
#include <tpar/vk/kernels.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tpar::inline v0 {

// What a batch's completion means, and so which of its device's timelines it signals:
// compute = results on the device; transfer = an upload, data in host staging that peers
// wait on; download = a peer's piece copied into scratch, for a later compute batch of the
// same device (peers never wait on it).
enum class Role : std::uint8_t { compute = 0, transfer = 1, download = 2 };
inline constexpr std::size_t role_count = 3;

constexpr std::string_view to_string(Role r) {
  return r == Role::compute ? "compute" : r == Role::transfer ? "transfer" : "download";
}

// Memory a copy touches: the device's scratch, or one source device's host staging
// (offsets within that device's slot set for the current call).
struct Region {
  enum class Kind : std::uint8_t { scratch, host };
  Kind kind = Kind::scratch;
  std::uint32_t host_owner = 0;  // Kind::host: whose host allocation
  std::uint64_t offset = 0;      // bytes

  static Region scratch(std::uint64_t offset) { return {Kind::scratch, 0, offset}; }
  static Region host(std::uint32_t owner, std::uint64_t offset) { return {Kind::host, owner, offset}; }
};

struct Command {
  enum class Type : std::uint8_t {
    copy,          // src -> dst, `bytes`
    kernel,        // `kernel` with `args` (binding 0 = caller's span, 1 = scratch, 2 = own host staging)
    barrier,       // earlier copies/kernels of this batch before later ones
    host_barrier,  // make this batch's writes to host staging (copies or kernels) visible to the host (and so to peers)
  };
  Type type = Type::barrier;
  Region src, dst;
  std::uint64_t bytes = 0;
  Kernel kernel = Kernel::pack;
  KernelArgs args{};
};

// "Batch `index` of `role` on `device` has completed": the value that batch signals.
struct BatchRef {
  std::uint32_t device = 0;
  Role role = Role::compute;
  std::uint32_t index = 0;  // position among the device's batches of that role
};

struct Batch {
  // The timeline the batch signals, and the queue it runs on: compute, the transfer queue,
  // or for downloads the device's second transfer queue (its own copy engine; the
  // transfer queue where a device has none, and the one queue of a device that has one).
  Role role = Role::compute;
  // A transfer batch whose kernels write host staging themselves runs on the compute
  // queue (no copy engine, no hop between queues), still signalling the uploads timeline.
  bool on_compute_queue = false;
  std::vector<Command> commands;
  std::vector<BatchRef> waits;       // same device, or a peer's transfer batches
  bool wait_ready = false;           // the caller's ready point for this device
  bool wait_previous_call = false;   // all transfers of this device's previous call (scratch reuse)
  bool wait_previous_compute = false;  // all compute batches of this device's previous call (a
                                       // download's scratch reuse: the combines that read it)
  bool wait_relay = false;  // the relay's host thread: this device's sum is in its slot (algo/relay.hpp)
};

// The queue a batch runs on.
inline Role queue_of(const Batch& b) { return b.on_compute_queue ? Role::compute : b.role; }

// Bytes kernels move through host staging themselves, without a copy command: pack
// publishing its piece (binding 2), OneShot's direct sum reading its peers' (binding 3).
struct HostTraffic {
  std::uint64_t to_host = 0, from_host = 0;
  HostTraffic& operator+=(const HostTraffic& o) {
    to_host += o.to_host;
    from_host += o.from_host;
    return *this;
  }
};

inline HostTraffic kernel_host_traffic(Wire wire, const Command& c) {
  HostTraffic t;
  if (c.type != Command::Type::kernel) return t;
  const std::uint64_t piece = wire_words(wire, c.args.count) * 4;
  if (c.kernel == Kernel::pack && c.args.host_out_off != KernelArgs::no_host_out) t.to_host = piece;
  if (c.kernel == Kernel::oneshot && c.args.mode == static_cast<std::uint32_t>(OneShotMode::direct)) {
    const std::uint32_t segments = c.args.nseg >= 32 ? ~0u : (1u << c.args.nseg) - 1u;
    t.from_host = piece * static_cast<std::uint64_t>(std::popcount(c.args.mask & segments & ~(1u << c.args.self)));
  }
  return t;
}

struct DeviceSchedule {
  std::vector<Batch> batches;  // a valid order for a single queue doing both roles
  std::uint32_t count(Role r) const {
    std::uint32_t n = 0;
    for (const auto& b : batches) n += b.role == r;
    return n;
  }
};

inline HostTraffic kernel_host_traffic(Wire wire, const DeviceSchedule& s) {
  HostTraffic t;
  for (const auto& b : s.batches)
    for (const auto& c : b.commands) t += kernel_host_traffic(wire, c);
  return t;
}

// How a schedule's sums travel, set by the algorithm that builds it. tpar's rooms ask
// this (takes_relay), never the algorithm's name: an algorithm of one's own that returns
// another's schedule travels as that one does.
enum class Transport : std::uint8_t {
  queues,  // the devices' queues and the communicator's host staging (OneShot, ChunkedRing)
  relay,   // the relay's host thread and its own memory (Relay): none of the staging
};

struct Schedule {
  std::string_view algorithm;  // the algorithm that built it (for reports: last_call(), traces)
  Transport transport = Transport::queues;
  // Whether each device's scratch is sized by the pipelined pieces, not by the tensor
  // (ChunkedRing, which already took the most pieces that fit): where it does not fit a
  // binding, only a smaller call helps, not another algorithm.
  bool scratch_per_piece = false;
  Wire wire = Wire::f32;
  std::size_t count = 0;
  std::vector<DeviceSchedule> devices;
  std::vector<std::uint64_t> host_bytes;     // per device: host staging its uploads need per call
  std::vector<std::uint64_t> scratch_bytes;  // per device: device-local scratch
};

// Whether the schedule's calls go through the relay (its memory, slot sets and host
// thread) rather than the communicator's staging and queues alone.
inline bool takes_relay(const Schedule& s) { return s.transport == Transport::relay; }

namespace detail {

inline constexpr std::uint64_t region_align = 256;

inline Command copy_cmd(Region src, Region dst, std::uint64_t bytes) {
  Command c;
  c.type = Command::Type::copy;
  c.src = src;
  c.dst = dst;
  c.bytes = bytes;
  return c;
}

inline Command kernel_cmd(Kernel k, const KernelArgs& args) {
  Command c;
  c.type = Command::Type::kernel;
  c.kernel = k;
  c.args = args;
  return c;
}

inline Command barrier_cmd(Command::Type t = Command::Type::barrier) {
  Command c;
  c.type = t;
  return c;
}

}  // namespace detail
}  // namespace tpar::inline v0
