// What BufferSpan::buffer_size buys. With the size the buffer was created with, a span
// that runs past the buffer's end is refused. With 0 ("not stated") tpar checks the span
// against the size of the buffer's memory requirements, which may be larger: a span that
// ends in that padding passes, and only one past the requirement is refused.
//
// A driver decides the padding. An H200 (driver 580.159.04) rounded the requirement of
// every storage buffer tried up to a multiple of 16: 112 bytes for a 100-byte buffer
// (docs/perf/raw/group-cycles-h200.txt), and a 112-byte span with buffer_size 0 was
// reduced there. Lavapipe (Mesa 22.3) pads nothing: its requirement is the buffer's size,
// odd sizes included (1, 3, 101, 1001, 4097 bytes came back unchanged). So the test pads
// as the H200 does, rounding up to a multiple of 16, by wrapping
// vkGetBufferMemoryRequirements in Vulkan-Hpp's default dispatcher (tests use dynamic
// dispatch; tpar calls through it), and allocates its buffers at the padded size, as an
// application would. On the H200 the wrapper changes nothing, and the test passed there.
//
// The cases go through detail::validate_call, the check every allreduce runs before it
// enqueues anything (Communicator::allreduce, hence the runtime-selected communicator and
// the C ABI): the spans it passes are not run, since one ending in the padding is invalid
// Vulkan use that the validation layer would rightly report.
#include <doctest/doctest.h>
#include <tpar/comm/detail/validate.hpp>

#include "support/vk_env.hpp"

#include <memory>
#include <vector>

using namespace tpar;
using namespace tpar_test;

namespace {

PFN_vkGetBufferMemoryRequirements driver_requirements = nullptr;

VKAPI_ATTR void VKAPI_CALL padded_requirements(VkDevice device, VkBuffer buffer, VkMemoryRequirements* out) {
  driver_requirements(device, buffer, out);
  out->size = (out->size + 15) / 16 * 16;
}

// The wrapper, installed while it lives.
struct PaddedRequirements {
  PaddedRequirements() {
    driver_requirements = VULKAN_HPP_DEFAULT_DISPATCHER.vkGetBufferMemoryRequirements;
    VULKAN_HPP_DEFAULT_DISPATCHER.vkGetBufferMemoryRequirements = padded_requirements;
  }
  ~PaddedRequirements() { VULKAN_HPP_DEFAULT_DISPATCHER.vkGetBufferMemoryRequirements = driver_requirements; }
  PaddedRequirements(const PaddedRequirements&) = delete;
  PaddedRequirements& operator=(const PaddedRequirements&) = delete;
};

}  // namespace

TEST_CASE("buffer_size: the stated size refuses a span into the padding, 0 checks only the memory requirements' size") {
  VkEnv env(2);
  if (!env.ok()) return;
  const PaddedRequirements padded;
  constexpr vk::DeviceSize bytes = 100;  // 25 floats
  std::vector<std::unique_ptr<TestBuffer>> buffers;
  for (std::size_t d = 0; d < 2; ++d) buffers.push_back(std::make_unique<TestBuffer>(env.group()[d], bytes));
  vk::MemoryRequirements req;
  env.group()[0].handle().getBufferMemoryRequirements(buffers[0]->handle(), &req);
  // 112 here and on the H200; a driver that pads more moves the cases below with it.
  REQUIRE(req.size >= 112);
  REQUIRE(req.size % 4 == 0);
  const std::size_t to_end = static_cast<std::size_t>(req.size / 4);  // floats to the requirement's end
  const vk::DeviceSize align = std::max<vk::DeviceSize>(env.group()[0].capabilities().min_storage_offset_alignment, 4);

  // Whether the call would be accepted for these spans, on both devices alike.
  auto accepted = [&](vk::DeviceSize offset, std::size_t count, vk::DeviceSize buffer_size) {
    std::vector<BufferSpan> spans;
    for (const auto& b : buffers) spans.push_back({b->handle(), offset, count, buffer_size});
    CAPTURE(offset);
    CAPTURE(count);
    CAPTURE(buffer_size);
    const ErrorCode code = code_of([&] { detail::validate_call(env.group(), spans, {}); });
    if (code != ErrorCode{}) CHECK(code == ErrorCode::invalid_argument);
    return code == ErrorCode{};
  };

  // The buffer's size stated: exactly the buffer.
  CHECK(accepted(0, 25, bytes));        // the whole buffer
  CHECK_FALSE(accepted(0, 26, bytes));  // 4 bytes into the padding
  CHECK_FALSE(accepted(0, to_end, bytes));      // to the requirement's end
  CHECK_FALSE(accepted(0, to_end + 1, bytes));  // past the requirement

  // Not stated: the requirement's size. Spans ending in the padding are not caught.
  CHECK(accepted(0, 25, 0));
  CHECK(accepted(0, 26, 0));               // not caught: ends 4 bytes past the buffer
  CHECK(accepted(0, to_end, 0));           // not caught: 112 bytes, the span the H200 reduced
  CHECK_FALSE(accepted(0, to_end + 1, 0));  // refused: past the requirement
  CHECK_FALSE(accepted((req.size + align - 1) / align * align, 1, 0));  // refused: starts past the requirement's end

  // The same with an offset, where the device's alignment leaves room for one.
  if (align + 4 <= bytes) {
    const std::size_t fits = static_cast<std::size_t>((bytes - align) / 4);
    CHECK(accepted(align, fits, bytes));
    CHECK_FALSE(accepted(align, fits + 1, bytes));
    CHECK(accepted(align, static_cast<std::size_t>((req.size - align) / 4), 0));  // not caught
    CHECK_FALSE(accepted(align, static_cast<std::size_t>((req.size - align) / 4) + 1, 0));
  }

  // The refusal says which size it checked against.
  std::vector<BufferSpan> past;
  for (const auto& b : buffers) past.push_back({b->handle(), 0, to_end + 1, 0});
  try {
    detail::validate_call(env.group(), past, {});
    FAIL("a span past the memory requirements' size was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find(std::to_string(req.size) + " bytes, its memory requirements' size: buffer_size is 0") !=
          std::string::npos);
  }
}
