// The checks every allreduce call passes before anything is enqueued: one span per
// device, the same count everywhere, offsets aligned for the device, every span inside
// its buffer's stated size, or inside its memory requirements' size where the size is
// not stated (BufferSpan::buffer_size 0; that size may exceed the buffer's), written so
// that nothing wraps; enums in range. Throws Error(invalid_argument) with what is wrong;
// changes nothing. And the checks a communicator's options pass at its creation.
#pragma once

#include <tpar/comm/call.hpp>
#include <tpar/core/buffer_span.hpp>
#include <tpar/core/error.hpp>
#include <tpar/core/options.hpp>
#include <tpar/core/wire.hpp>
#include <tpar/core/detail/known_enum.hpp>
#include <tpar/vk/device_group.hpp>

#include <algorithm>
#include <span>
#include <string>

namespace tpar::inline v0::detail {

// The options a communicator is made with, past their enums (Options::validate_enums):
// depth, pieces, lanes and the timeout in range.
inline void validate_options(const Options& options) {
  if (options.depth && !depth_range.holds(options.depth))
    throw Error(ErrorCode::invalid_argument, "depth " + std::to_string(options.depth) + " is out of range: use 0 (sized by " +
                                                 "staging_in_flight) or " + depth_range.text());
  if (!options.depth && options.staging_in_flight == 0)
    throw Error(ErrorCode::invalid_argument, "staging_in_flight must be positive where depth is 0");
  const std::string up_to = "use " + pieces_range.text();
  if (!pieces_range.holds(options.lanes))
    throw Error(ErrorCode::invalid_argument, "lanes " + std::to_string(options.lanes) + " is out of range: " + up_to);
  if (options.piece_bytes && options.piece_bytes < wire_block * sizeof(float))
    throw Error(ErrorCode::invalid_argument, "piece_bytes must be 0 (automatic) or at least " + std::to_string(wire_block * sizeof(float)));
  if (!pieces_range.holds(options.max_pieces))
    throw Error(ErrorCode::invalid_argument, "max_pieces " + std::to_string(options.max_pieces) + " is out of range: " + up_to);
  if (options.timeout.count() <= 0) throw Error(ErrorCode::invalid_argument, "timeout must be positive");
}

inline void validate_call(const DeviceGroup& group, std::span<const BufferSpan> spans, const AllreduceArgs& args) {
  const std::size_t n = group.size();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::invalid_argument, what); };
  if (spans.size() != n)
    bad("allreduce got " + std::to_string(spans.size()) + " spans for a group of " + std::to_string(n) + " devices");
  if (!args.ready.empty() && args.ready.size() != n)
    bad("allreduce got " + std::to_string(args.ready.size()) + " ready points for " + std::to_string(n) + " devices");
  if (!args.contributes.empty() && args.contributes.size() != n)
    bad("allreduce got " + std::to_string(args.contributes.size()) + " contribution flags for " + std::to_string(n) + " devices");
  if (args.wire) detail::require_known(*args.wire, all_wires, "AllreduceArgs::wire");
  const std::size_t count = spans[0].count;
  for (std::size_t d = 0; d < n; ++d) {
    const BufferSpan& s = spans[d];
    const std::string who = "span " + std::to_string(d);
    if (s.count != count)
      bad(who + " has " + std::to_string(s.count) + " values but span 0 has " + std::to_string(count) +
          ": every device must reduce the same count");
    if (count == 0) continue;
    const auto& caps = group[d].capabilities();
    if (!s.buffer) bad(who + " has no buffer");
    if (count > 0xFFFFFFFFull) bad(who + ": at most 2^32-1 values per call");
    const vk::DeviceSize align = std::max<vk::DeviceSize>(caps.min_storage_offset_alignment, sizeof(float));
    if (s.offset % align)
      bad(who + "'s offset " + std::to_string(s.offset) + " is not a multiple of " + std::to_string(align) +
          " (minStorageBufferOffsetAlignment of device " + std::to_string(d) + ")");
    if (s.bytes() > caps.max_storage_buffer_range)
      bad(who + " is " + std::to_string(s.bytes()) + " bytes, more than device " + std::to_string(d) +
          "'s maxStorageBufferRange (" + std::to_string(caps.max_storage_buffer_range) + ")");
    // Without a stated size, the most Vulkan tells: the memory the buffer needs, which
    // may run past its end, so a span ending in between passes (BufferSpan says so).
    vk::DeviceSize size = s.buffer_size;
    if (!size) {
      vk::MemoryRequirements req;
      group[d].handle().getBufferMemoryRequirements(s.buffer, &req);
      size = req.size;
    }
    // Written so that nothing wraps: an offset near 2^64 plus the span's bytes would.
    if (s.offset > size || s.bytes() > size - s.offset)
      bad(who + " (offset " + std::to_string(s.offset) + ", " + std::to_string(count) + " values) ends past the end of its buffer (" +
          std::to_string(size) + " bytes" + (s.buffer_size ? "" : ", its memory requirements' size: buffer_size is 0") + ")");
  }
}

}  // namespace tpar::inline v0::detail
