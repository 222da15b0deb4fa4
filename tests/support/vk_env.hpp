// A DeviceGroup for tests: lavapipe virtual devices (or real GPUs with
// TPAR_TEST_DEVICES=gpus), the validation layer with synchronization validation on
// (unless a test asks for the core checks alone), and a check that nothing the test did
// made it report an error.
#pragma once

#include <doctest/doctest.h>
#include <tpar/vk/device_group.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tpar_test {

// The installed Khronos validation layer's version (0 when absent).
inline std::uint32_t validation_layer_version() {
  static const std::uint32_t version = [] {
    tpar::detail::ensure_loader("");
    std::uint32_t n = 0;
    if (vk::enumerateInstanceLayerProperties(&n, nullptr) != vk::Result::eSuccess) return 0u;
    std::vector<vk::LayerProperties> layers(n);
    if (vk::enumerateInstanceLayerProperties(&n, layers.data()) != vk::Result::eSuccess) return 0u;
    for (const auto& l : layers)
      if (std::string_view(l.layerName.data()) == "VK_LAYER_KHRONOS_validation") return l.specVersion;
    return 0u;
  }();
  return version;
}

// Messages the validation layer reports about its own state tracking, not about the
// application. One: before 1.3.296, after a host wait its queue bookkeeping can wait for
// a host signal it has not recorded yet (ProxyBridge's threads signal timelines that
// queues wait on) or for a value no batch signals exactly, and after its internal 10 s
// timeout it reports UNASSIGNED-VkSemaphore-state-timeout, "most likely a validation bug"
// in its own words (docs/testing.md says when); Vulkan-ValidationLayers PR #8519 rewrote
// that tracking. A queue or fence whose state waits behind such a semaphore gets the same
// report of its own (UNASSIGNED-VkQueue-state-timeout, -VkFence-: seen in CI under load,
// 2026-11-26). Counted and printed, never an error, and only for those versions.
inline bool is_layer_self_report(const tpar::ValidationMessage& m) {
  return (m.id == "UNASSIGNED-VkSemaphore-state-timeout" || m.id == "UNASSIGNED-VkQueue-state-timeout" ||
          m.id == "UNASSIGNED-VkFence-state-timeout") &&
         validation_layer_version() < VK_MAKE_API_VERSION(0, 1, 3, 296);
}

struct ValidationLog {
  std::mutex mutex;
  std::vector<std::string> errors;
  std::size_t layer_self_reports = 0;
  void add(const tpar::ValidationMessage& m) {
    if (!m.is_error()) return;
    std::lock_guard lock(mutex);
    if (is_layer_self_report(m)) ++layer_self_reports;
    else errors.push_back(m.id + ": " + m.text);
  }
};

// Runs f and returns the code of the tpar::Error it throws (printing its message), or a
// value-initialized code when it throws nothing.
inline tpar::ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const tpar::Error& e) {
    MESSAGE(std::string(e.what()));
    return e.code_value();
  }
  return tpar::ErrorCode{};
}

// Bound for test waits: tpar's own 10 s default plus room for the layer's stall above.
inline constexpr std::chrono::seconds test_timeout{60};

// TPAR_TEST_DEVICES: unset, one device (lavapipe, or the first GPU) opened n times as
// virtual devices; "gpus", the first n GPUs; "all", the first n devices the loader lists,
// GPUs and CPU devices alike (a GPU and llvmpipe: a group of two drivers, docs/devices/).
inline std::string test_devices() {
  const char* v = std::getenv("TPAR_TEST_DEVICES");
  return v ? v : "";
}
// Distinct physical devices rather than one opened several times.
inline bool use_real_gpus() {
  const auto v = test_devices();
  return v == "gpus" || v == "all";
}

// What the validation layer checks on a test's devices: everything (its core checks and
// synchronization validation), or with sync_validation false its core checks alone, for
// tests whose command buffers have the shapes other tests record under synchronization
// validation (docs/testing.md). TPAR_TEST_ALL_CHECKS=1 turns synchronization validation
// on everywhere (slow with a layer older than 1.3.296).
inline tpar::GroupOptions test_options(ValidationLog& log, std::uint32_t n, bool sync_validation = true) {
  tpar::GroupOptions o;
  o.validation = !std::getenv("TPAR_TEST_NO_VALIDATION");
  o.sync_validation = sync_validation || std::getenv("TPAR_TEST_ALL_CHECKS");
  o.on_validation = [&log](const tpar::ValidationMessage& m) { log.add(m); };
  if (test_devices() == "all") {
    for (std::uint32_t i = 0; i < n; ++i) o.select.indices.push_back(i);
  } else if (use_real_gpus()) {
    o.select.first(n);
  } else {
    o.select.virtual_devices(n);
  }
  return o;
}

// A host-visible buffer on one device, filled and read from the host.
class TestBuffer {
 public:
  TestBuffer(tpar::Device& dev, std::size_t bytes) : device_(dev.handle()), bytes_(bytes) {
    vk::BufferCreateInfo info({}, bytes, vk::BufferUsageFlagBits::eStorageBuffer | vk::BufferUsageFlagBits::eTransferSrc |
                                             vk::BufferUsageFlagBits::eTransferDst);
    REQUIRE(device_.createBuffer(&info, nullptr, &buffer_) == vk::Result::eSuccess);
    vk::MemoryRequirements req;
    device_.getBufferMemoryRequirements(buffer_, &req);
    const auto props = dev.physical().getMemoryProperties();
    std::uint32_t type = ~0u;
    const auto want = vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
    for (std::uint32_t i = 0; i < props.memoryTypeCount && type == ~0u; ++i)
      if (((req.memoryTypeBits >> i) & 1u) && (props.memoryTypes[i].propertyFlags & want) == want) type = i;
    REQUIRE(type != ~0u);
    vk::MemoryAllocateInfo alloc(req.size, type);
    REQUIRE(device_.allocateMemory(&alloc, nullptr, &memory_) == vk::Result::eSuccess);
    REQUIRE(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(device_, buffer_, memory_, 0) == VK_SUCCESS);
    REQUIRE(device_.mapMemory(memory_, 0, VK_WHOLE_SIZE, {}, &mapped_) == vk::Result::eSuccess);
  }
  TestBuffer(const TestBuffer&) = delete;
  TestBuffer& operator=(const TestBuffer&) = delete;
  ~TestBuffer() {
    device_.unmapMemory(memory_);
    device_.destroyBuffer(buffer_);
    device_.freeMemory(memory_);
  }
  vk::Buffer handle() const { return buffer_; }
  std::size_t size() const { return bytes_; }
  float* floats(std::size_t byte_offset = 0) const { return reinterpret_cast<float*>(static_cast<char*>(mapped_) + byte_offset); }
  void write(std::size_t byte_offset, const std::vector<float>& v) const { std::memcpy(floats(byte_offset), v.data(), v.size() * 4); }
  std::vector<float> read(std::size_t byte_offset, std::size_t count) const {
    return std::vector<float>(floats(byte_offset), floats(byte_offset) + count);
  }

 private:
  vk::Device device_;
  vk::Buffer buffer_;
  vk::DeviceMemory memory_;
  void* mapped_ = nullptr;
  std::size_t bytes_;
};

// A group of n devices with validation; the destructor fails the test if the
// validation layer reported an error while it lived.
class VkEnv {
 public:
  struct Options {
    // false leaves the validation layer off where it is older than 1.3.296, whose
    // timeline tracking stalls 10 s at a time under host signals from several threads
    // at once (see is_layer_self_report); for tests that are about results under such
    // load, not about API usage.
    bool old_layer_ok = true;
    // the layer's synchronization validation too (docs/testing.md says where the tests
    // leave it off, and why).
    bool sync_validation = true;
  };
  explicit VkEnv(std::uint32_t n) : VkEnv(n, Options{}) {}
  VkEnv(std::uint32_t n, Options options) : old_layer_ok_(options.old_layer_ok), group_(make(n, options.sync_validation)) {}
  ~VkEnv() { check_validation(); }
  tpar::DeviceGroup& group() { return *group_; }
  bool ok() const { return group_.has_value(); }
  void check_validation() {
    std::lock_guard lock(log_.mutex);
    for (const auto& e : log_.errors) FAIL_CHECK("validation: " << e);
    log_.errors.clear();
    if (log_.layer_self_reports)
      MESSAGE("the validation layer (older than 1.3.296) reported its own state-tracking timeout "
              << log_.layer_self_reports << " time(s); see docs/testing.md");
    log_.layer_self_reports = 0;
  }

 private:
  std::optional<tpar::DeviceGroup> make(std::uint32_t n, bool sync_validation) {
    try {
      auto o = test_options(log_, n, sync_validation);
      if (!old_layer_ok_ && validation_layer_version() < VK_MAKE_API_VERSION(0, 1, 3, 296)) {
        if (o.validation) MESSAGE("validation layer off: this layer version stalls under host signals from several threads");
        o.validation = false;
      }
      return tpar::DeviceGroup::create(o);
    } catch (const tpar::Error& e) {
      if (use_real_gpus() && e.code() == tpar::ErrorCode::no_match) {
        MESSAGE("[skipped] " << n << std::string(test_devices() == "all" ? " devices" : " GPUs") << " are needed: "
                              << std::string(e.what()));
        return std::nullopt;
      }
      throw;
    }
  }
  bool old_layer_ok_ = true;
  ValidationLog log_;
  std::optional<tpar::DeviceGroup> group_;
};

}  // namespace tpar_test
