// KernelSet — tpar's compute kernels on one device, built from the embedded SPIR-V
// (shaders/*.comp) on first use, one pipeline per kernel and wire format.
#pragma once

#include <tpar/core/wire.hpp>
#include <tpar/detail/spirv/combine.hpp>
#include <tpar/detail/spirv/oneshot.hpp>
#include <tpar/detail/spirv/pack.hpp>
#include <tpar/detail/spirv/relay.hpp>
#include <tpar/detail/spirv/relay_clock.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <span>

namespace tpar::inline v0 {

enum class Kernel : std::uint32_t { pack = 0, combine = 1, oneshot = 2, relay = 3 };
inline constexpr std::size_t kernel_count = 4;

// Modes of the kernels (push constant `mode`); shaders/*.comp document each.
enum class PackMode : std::uint32_t { encode = 0, zeros = 1 };
enum class OneShotMode : std::uint32_t { scratch = 0, direct = 1 };
enum class CombineMode : std::uint32_t { add_forward = 0, copy = 1, add_final = 2, copy_final = 3, unpack = 4 };
// The relay's mode is a set of these bits (shaders/relay.glsl).
namespace relay_mode {
inline constexpr std::uint32_t contribute = 1;  // publish the user values, stamped, to host memory
inline constexpr std::uint32_t arrive = 2;      // mark the call started in the publish area's header
inline constexpr std::uint32_t collect = 4;     // wait for the sum in the device's slot, copy it into user
inline constexpr std::uint32_t site = 8;        // a ride site: the call's slot set from a word the host writes
}  // namespace relay_mode

// The push-constant block every kernel shares (shaders/*.comp: `PC`).
struct KernelArgs {
  std::uint32_t count = 0;      // elements in the piece
  std::uint32_t user_off = 0;   // element offset into the caller's span
  std::uint32_t in_off = 0;     // scratch word offset of the wire input
  std::uint32_t out_off = 0;    // scratch word offset of the wire output
  std::uint32_t mode = 0;
  std::uint32_t nseg = 0;       // OneShot: segments
  std::uint32_t seg_words = 0;  // OneShot: words between segments
  std::uint32_t mask = 0;       // OneShot: contributing segments
  // pack: also write the output piece to this word offset of the device's own host
  // staging for the call (binding 2), so peers can read it with no upload; ~0: don't.
  std::uint32_t host_out_off = no_host_out;
  std::uint32_t self = 0;       // OneShot direct: this device's segment (read from scratch out_off)
  // relay: how long its wait may spin, in milliseconds of the device clock (the variant
  // built for devices with shaderDeviceClock; the other gives up after 2^32 polls).
  std::uint32_t spin_bound = 0;
  static constexpr std::uint32_t no_host_out = ~0u;
};
static_assert(sizeof(KernelArgs) == 44);

// OneShot's sum reads the peers' host staging in place (binding 3, one buffer per source)
// for groups up to this size; larger groups copy it into scratch first.
inline constexpr std::uint32_t max_direct_peers = 8;
// Storage buffers one kernel binds: user, scratch, own host staging, and the peers'.
inline constexpr std::uint32_t kernel_storage_buffers = 3 + max_direct_peers;

// The relay's work groups all wait for the sum at once, so they must all be running at
// once: few enough to be resident together on any GPU.
inline constexpr std::uint32_t relay_max_groups = 32;

// Work groups for a piece: one 512-value block per group, capped; the kernels loop.
inline std::uint32_t kernel_groups(std::size_t count, std::uint32_t max_groups_x) {
  const std::size_t blocks = (count + wire_block - 1) / wire_block;
  return static_cast<std::uint32_t>(std::clamp<std::size_t>(blocks, 1, std::min<std::uint32_t>(max_groups_x, 4096)));
}

inline std::uint32_t kernel_groups(Kernel kernel, std::size_t count, std::uint32_t max_groups_x) {
  return kernel_groups(count, kernel == Kernel::relay ? std::min(max_groups_x, relay_max_groups) : max_groups_x);
}

class KernelSet {
 public:
  // `update_after_bind`: binding 0 (the caller's buffer) may be rewritten after command
  // buffers that bind the set were recorded, without invalidating them. `device_clock`:
  // the device enabled shaderDeviceClock, so the relay's wait is bounded by time.
  KernelSet(vk::Device device, bool update_after_bind, bool device_clock = false)
      : device_(device), update_after_bind_(update_after_bind), device_clock_(device_clock) {
    std::array<vk::DescriptorSetLayoutBinding, 4> bindings{
        vk::DescriptorSetLayoutBinding(0, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute),
        vk::DescriptorSetLayoutBinding(1, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute),
        vk::DescriptorSetLayoutBinding(2, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute),
        vk::DescriptorSetLayoutBinding(3, vk::DescriptorType::eStorageBuffer, max_direct_peers, vk::ShaderStageFlagBits::eCompute)};
    const std::array<vk::DescriptorBindingFlags, 4> flags{vk::DescriptorBindingFlagBits::eUpdateAfterBind, {}, {}, {}};
    vk::DescriptorSetLayoutBindingFlagsCreateInfo flags_info(flags);
    vk::DescriptorSetLayoutCreateInfo dsl_info({}, bindings);
    if (update_after_bind) {
      dsl_info.flags = vk::DescriptorSetLayoutCreateFlagBits::eUpdateAfterBindPool;
      dsl_info.pNext = &flags_info;
    }
    detail::check(device_.createDescriptorSetLayout(&dsl_info, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
    vk::PushConstantRange range(vk::ShaderStageFlagBits::eCompute, 0, sizeof(KernelArgs));
    vk::PipelineLayoutCreateInfo layout_info({}, 1, &set_layout_, 1, &range);
    if (auto r = device_.createPipelineLayout(&layout_info, nullptr, &layout_); r != vk::Result::eSuccess) {
      device_.destroyDescriptorSetLayout(set_layout_);
      detail::check(r, "vkCreatePipelineLayout");
    }
  }
  KernelSet(const KernelSet&) = delete;
  KernelSet& operator=(const KernelSet&) = delete;
  ~KernelSet() {
    for (auto& row : pipelines_)
      for (auto p : row)
        if (p) device_.destroyPipeline(p);
    for (auto m : modules_)
      if (m) device_.destroyShaderModule(m);
    device_.destroyPipelineLayout(layout_);
    device_.destroyDescriptorSetLayout(set_layout_);
  }

  vk::DescriptorSetLayout set_layout() const { return set_layout_; }
  bool update_after_bind() const { return update_after_bind_; }
  bool device_clock() const { return device_clock_; }
  vk::PipelineLayout layout() const { return layout_; }

  // Thread-safe; created on first use.
  vk::Pipeline pipeline(Kernel kernel, Wire wire) {
    std::lock_guard lock(mutex_);
    const auto k = static_cast<std::size_t>(kernel);
    const auto w = static_cast<std::size_t>(wire);
    if (pipelines_[k][w]) return pipelines_[k][w];
    if (!modules_[k]) {
      using Code = std::span<const std::uint32_t>;
      const Code code = kernel == Kernel::pack      ? Code(detail::spirv::pack)
                        : kernel == Kernel::combine ? Code(detail::spirv::combine)
                        : kernel == Kernel::oneshot ? Code(detail::spirv::oneshot)
                        : device_clock_             ? Code(detail::spirv::relay_clock)
                                                    : Code(detail::spirv::relay);
      vk::ShaderModuleCreateInfo info({}, code.size_bytes(), code.data());
      detail::check(device_.createShaderModule(&info, nullptr, &modules_[k]), "vkCreateShaderModule");
    }
    const std::uint32_t wire_value = static_cast<std::uint32_t>(wire);
    vk::SpecializationMapEntry entry(0, 0, sizeof(wire_value));
    vk::SpecializationInfo spec(1, &entry, sizeof(wire_value), &wire_value);
    vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, modules_[k], "main", &spec);
    vk::ComputePipelineCreateInfo info({}, stage, layout_);
    detail::check(device_.createComputePipelines(nullptr, 1, &info, nullptr, &pipelines_[k][w]),
                  "vkCreateComputePipelines");
    return pipelines_[k][w];
  }

 private:
  vk::Device device_;
  vk::DescriptorSetLayout set_layout_;
  bool update_after_bind_ = false;
  bool device_clock_ = false;
  vk::PipelineLayout layout_;
  std::mutex mutex_;
  std::array<vk::ShaderModule, kernel_count> modules_{};
  std::array<std::array<vk::Pipeline, 3>, kernel_count> pipelines_{};
};

}  // namespace tpar::inline v0
