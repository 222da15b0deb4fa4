// Kernel tests: every embedded shader (pack, combine, oneshot), for every wire and mode,
// run on a real Vulkan device (lavapipe preferred) under the Khronos validation layer
// with synchronization validation, and compared bit for bit with the host reference in
// tpar/detail/wire_codec.hpp. Words around every output and user values outside the
// piece are checked to stay as they were.
//
// Subnormals: Vulkan lets shader arithmetic flush or keep them, and the kernels flush
// every operand and sum themselves (flush_subnormal), so blocks of them, and of normal
// values near 2^-126 whose sums cancel into the subnormal range, go everywhere, and the
// host reference flushes as the kernels do: a device that kept them would fail here.
// Other values are zero or of magnitude >= 2^-100. Infinities and NaNs (signalling
// ones too) only go where shaders move and bit-test values without arithmetic: pack's
// encoding, COPY, COPY_FINAL and UNPACK.

#ifndef VULKAN_HPP_DISPATCH_LOADER_DYNAMIC
#define VULKAN_HPP_DISPATCH_LOADER_DYNAMIC 1
#endif
#include <vulkan/vulkan.hpp>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <tpar/detail/spirv/combine.hpp>
#include <tpar/detail/spirv/oneshot.hpp>
#include <tpar/detail/spirv/pack.hpp>
#include <tpar/detail/wire_codec.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace {

using tpar::Wire;
namespace codec = tpar::detail;

// ---------------------------------------------------------------------------------------
// Device harness

std::atomic<int> g_validation_errors{0};
std::atomic<int> g_validation_warnings{0};

VKAPI_ATTR VkBool32 VKAPI_CALL on_validation_message(
    VkDebugUtilsMessageSeverityFlagBitsEXT severity, VkDebugUtilsMessageTypeFlagsEXT,
    const VkDebugUtilsMessengerCallbackDataEXT* data, void*) {
  const char* what = "info";
  if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) {
    ++g_validation_errors;
    what = "ERROR";
  } else if (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT) {
    ++g_validation_warnings;
    what = "warning";
  }
  std::fprintf(stderr, "[validation %s] %s\n", what,
               data && data->pMessage ? data->pMessage : "(no message)");
  return VK_FALSE;
}

enum class Shader { pack, combine, oneshot };

const char* shader_name(Shader s) {
  switch (s) {
    case Shader::pack: return "pack";
    case Shader::combine: return "combine";
    case Shader::oneshot: return "oneshot";
  }
  return "?";
}

std::span<const std::uint32_t> shader_code(Shader s) {
  switch (s) {
    case Shader::pack: return tpar::detail::spirv::pack;
    case Shader::combine: return tpar::detail::spirv::combine;
    case Shader::oneshot: return tpar::detail::spirv::oneshot;
  }
  return {};
}

// The push-constant block pack, combine and oneshot declare (std430, 40 bytes): the start
// of tpar::KernelArgs, whose last word only the relay reads (tests/comm/test_relay.cpp).
struct Push {
  std::uint32_t count = 0;
  std::uint32_t user_off = 0;
  std::uint32_t in_off = 0;
  std::uint32_t out_off = 0;
  std::uint32_t mode = 0;
  std::uint32_t nseg = 0;
  std::uint32_t seg_words = 0;
  std::uint32_t mask = 0;
  std::uint32_t host_out_off = ~0u;  // pack: second copy of the output into host.w; ~0: none
  std::uint32_t self = 0;            // oneshot DIRECT: this device's segment
};
static_assert(sizeof(Push) == 40);

// oneshot DIRECT reads peer[j] (binding 3, 8 entries): here window j of the host buffer,
// so every peer's segment lives in its own place.
constexpr std::uint32_t direct_peers = 8;
constexpr std::size_t peer_window_words = std::size_t{1} << 18;

constexpr std::size_t user_capacity = std::size_t{1} << 19;     // floats
constexpr std::size_t scratch_capacity = std::size_t{1} << 21;  // words

struct HostBuffer {
  vk::Buffer buffer;
  vk::DeviceMemory memory;
  std::uint32_t* words = nullptr;
  std::size_t size_words = 0;
};

// No Vulkan here to test on (no loader, no driver, no suitable device): the tests are
// skipped rather than failed.
struct GpuUnavailable : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class Gpu {
 public:
  Gpu() {
    try {
      loader_.emplace();
    } catch (const std::exception& e) {
      throw GpuUnavailable(std::string("no Vulkan loader: ") + e.what());
    }
    auto get_instance_proc =
        loader_->getProcAddress<PFN_vkGetInstanceProcAddr>("vkGetInstanceProcAddr");
    if (!get_instance_proc) throw GpuUnavailable("no vkGetInstanceProcAddr in the Vulkan loader");
    VULKAN_HPP_DEFAULT_DISPATCHER.init(get_instance_proc);
    create_instance();
    pick_device();
    create_device();
    create_resources();
  }

  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  ~Gpu() {
    if (device_) {
      device_.waitIdle();
      for (auto& [key, pipeline] : pipelines_) device_.destroyPipeline(pipeline);
      for (auto& [key, module] : modules_) device_.destroyShaderModule(module);
      device_.destroyFence(fence_);
      device_.destroyCommandPool(command_pool_);
      device_.destroyDescriptorPool(descriptor_pool_);
      device_.destroyPipelineLayout(pipeline_layout_);
      device_.destroyDescriptorSetLayout(set_layout_);
      for (HostBuffer* b : {&user_, &scratch_, &host_}) {
        if (b->words) device_.unmapMemory(b->memory);
        device_.destroyBuffer(b->buffer);
        device_.freeMemory(b->memory);
      }
      device_.destroy();
    }
    if (messenger_) instance_.destroyDebugUtilsMessengerEXT(messenger_);
    if (instance_) instance_.destroy();
  }

  bool validation() const { return validation_; }
  bool sync_validation() const { return sync_validation_; }
  const std::string& device_name() const { return device_name_; }
  std::uint32_t* user() { return user_.words; }
  std::uint32_t* scratch() { return scratch_.words; }
  std::uint32_t* host() { return host_.words; }

  // Records and runs one dispatch, waiting for it; host writes to the buffers before the
  // call are seen by the shader and its writes are visible to the host after it.
  void dispatch(Shader shader, Wire wire, const Push& push, std::uint32_t groups) {
    const vk::Pipeline pipeline = pipeline_for(shader, wire);
    command_buffer_.reset();
    command_buffer_.begin(
        vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
    const vk::MemoryBarrier before(
        vk::AccessFlagBits::eHostWrite | vk::AccessFlagBits::eShaderWrite,
        vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
    command_buffer_.pipelineBarrier(
        vk::PipelineStageFlagBits::eHost | vk::PipelineStageFlagBits::eComputeShader,
        vk::PipelineStageFlagBits::eComputeShader, {}, before, {}, {});
    command_buffer_.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline);
    command_buffer_.bindDescriptorSets(vk::PipelineBindPoint::eCompute, pipeline_layout_, 0,
                                       descriptor_set_, {});
    command_buffer_.pushConstants(pipeline_layout_, vk::ShaderStageFlagBits::eCompute, 0,
                                  sizeof(Push), &push);
    command_buffer_.dispatch(groups, 1, 1);
    const vk::MemoryBarrier after(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eHostRead);
    command_buffer_.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader,
                                    vk::PipelineStageFlagBits::eHost, {}, after, {}, {});
    command_buffer_.end();
    queue_.submit(vk::SubmitInfo({}, {}, command_buffer_), fence_);
    const vk::Result r = device_.waitForFences(fence_, VK_TRUE, 60'000'000'000ull);
    if (r != vk::Result::eSuccess) throw std::runtime_error("dispatch timed out");
    device_.resetFences(fence_);
  }

 private:
  void create_instance() {
    const auto layers = vk::enumerateInstanceLayerProperties();
    const char* const validation_layer = "VK_LAYER_KHRONOS_validation";
    const bool have_layer =
        std::any_of(layers.begin(), layers.end(), [&](const vk::LayerProperties& l) {
          return std::strcmp(l.layerName.data(), validation_layer) == 0;
        });
    // TPAR_TEST_NO_VALIDATION turns the layer off, as for tpar's other tests.
    validation_ = have_layer && !std::getenv("TPAR_TEST_NO_VALIDATION");
    std::vector<const char*> layer_names;
    std::vector<const char*> extensions;
    bool features_ext = false;
    if (validation_) {
      layer_names.push_back(validation_layer);
      for (const auto& e : vk::enumerateInstanceExtensionProperties(std::string(validation_layer)))
        if (std::strcmp(e.extensionName.data(), VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME) == 0)
          features_ext = true;
      if (features_ext) extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
    } else if (!have_layer) {
      std::fprintf(stderr,
                   "test_kernels: VK_LAYER_KHRONOS_validation is not installed; running "
                   "without validation\n");
    }
    bool debug_utils = false;
    for (const auto& e : vk::enumerateInstanceExtensionProperties())
      if (std::strcmp(e.extensionName.data(), VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0)
        debug_utils = true;
    if (validation_ && !debug_utils) {
      for (const auto& e : vk::enumerateInstanceExtensionProperties(std::string(validation_layer)))
        if (std::strcmp(e.extensionName.data(), VK_EXT_DEBUG_UTILS_EXTENSION_NAME) == 0)
          debug_utils = true;
    }
    if (debug_utils) extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);

    const vk::ApplicationInfo app("tpar test_kernels", 1, "tpar", 1, VK_API_VERSION_1_2);
    vk::InstanceCreateInfo info({}, &app, layer_names, extensions);

    const std::array<vk::ValidationFeatureEnableEXT, 1> enables{
        vk::ValidationFeatureEnableEXT::eSynchronizationValidation};
    vk::ValidationFeaturesEXT features(enables, {});
    vk::DebugUtilsMessengerCreateInfoEXT messenger_info(
        {},
        vk::DebugUtilsMessageSeverityFlagBitsEXT::eError |
            vk::DebugUtilsMessageSeverityFlagBitsEXT::eWarning,
        vk::DebugUtilsMessageTypeFlagBitsEXT::eGeneral |
            vk::DebugUtilsMessageTypeFlagBitsEXT::eValidation |
            vk::DebugUtilsMessageTypeFlagBitsEXT::ePerformance,
        &on_validation_message);
    // Chain: instance -> messenger (reports during vkCreateInstance) -> validation features.
    const void* chain = nullptr;
    if (features_ext) {
      features.pNext = chain;
      chain = &features;
    }
    if (debug_utils) {
      messenger_info.pNext = chain;
      chain = &messenger_info;
    }
    info.pNext = chain;
    sync_validation_ = validation_ && features_ext;

    try {
      instance_ = vk::createInstance(info);
    } catch (const vk::IncompatibleDriverError& e) {
      throw GpuUnavailable(std::string("no Vulkan driver: ") + e.what());
    }
    VULKAN_HPP_DEFAULT_DISPATCHER.init(instance_);
    if (debug_utils) {
      messenger_info.pNext = nullptr;
      messenger_ = instance_.createDebugUtilsMessengerEXT(messenger_info);
    }
  }

  void pick_device() {
    const auto devices = instance_.enumeratePhysicalDevices();
    if (devices.empty()) throw GpuUnavailable("no Vulkan device");
    // lavapipe first, then any CPU device, then the first device.
    int best = -1;
    int best_rank = -1;
    for (std::size_t i = 0; i < devices.size(); ++i) {
      const auto props = devices[i].getProperties();
      if (props.apiVersion < VK_API_VERSION_1_2) continue;
      const auto chain =
          devices[i]
              .getProperties2<vk::PhysicalDeviceProperties2, vk::PhysicalDeviceDriverProperties>();
      const auto& driver = chain.get<vk::PhysicalDeviceDriverProperties>();
      int rank = 0;
      if (props.deviceType == vk::PhysicalDeviceType::eCpu) rank = 1;
      if (driver.driverID == vk::DriverId::eMesaLlvmpipe) rank = 2;
      if (rank > best_rank) {
        best_rank = rank;
        best = static_cast<int>(i);
      }
    }
    if (best < 0) throw GpuUnavailable("no Vulkan 1.2 device");
    physical_ = devices[static_cast<std::size_t>(best)];
    device_name_ = physical_.getProperties().deviceName.data();
    if (best_rank < 2)
      std::fprintf(stderr, "test_kernels: lavapipe not found, testing on %s\n",
                   device_name_.c_str());
  }

  void create_device() {
    const auto families = physical_.getQueueFamilyProperties();
    family_ = ~0u;
    for (std::uint32_t i = 0; i < families.size(); ++i)
      if (families[i].queueFlags & vk::QueueFlagBits::eCompute) {
        family_ = i;
        break;
      }
    if (family_ == ~0u) throw std::runtime_error("no compute queue");
    const float priority = 1.0f;
    const vk::DeviceQueueCreateInfo queue_info({}, family_, 1, &priority);
    device_ = physical_.createDevice(vk::DeviceCreateInfo({}, queue_info));
    VULKAN_HPP_DEFAULT_DISPATCHER.init(device_);
    queue_ = device_.getQueue(family_, 0);
  }

  HostBuffer make_buffer(std::size_t words) {
    HostBuffer b;
    b.size_words = words;
    b.buffer = device_.createBuffer(vk::BufferCreateInfo(
        {}, words * 4, vk::BufferUsageFlagBits::eStorageBuffer, vk::SharingMode::eExclusive));
    const auto req = device_.getBufferMemoryRequirements(b.buffer);
    const auto mem = physical_.getMemoryProperties();
    const auto want =
        vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
    std::uint32_t type = ~0u;
    for (std::uint32_t i = 0; i < mem.memoryTypeCount; ++i)
      if ((req.memoryTypeBits & (1u << i)) && (mem.memoryTypes[i].propertyFlags & want) == want) {
        type = i;
        break;
      }
    if (type == ~0u) throw std::runtime_error("no host-visible coherent memory");
    b.memory = device_.allocateMemory(vk::MemoryAllocateInfo(req.size, type));
    device_.bindBufferMemory(b.buffer, b.memory, 0);
    b.words = static_cast<std::uint32_t*>(device_.mapMemory(b.memory, 0, VK_WHOLE_SIZE));
    return b;
  }

  void create_resources() {
    user_ = make_buffer(user_capacity);
    scratch_ = make_buffer(scratch_capacity);
    host_ = make_buffer(scratch_capacity);

    const std::array<vk::DescriptorSetLayoutBinding, 4> bindings{
        vk::DescriptorSetLayoutBinding(0, vk::DescriptorType::eStorageBuffer, 1,
                                       vk::ShaderStageFlagBits::eCompute),
        vk::DescriptorSetLayoutBinding(1, vk::DescriptorType::eStorageBuffer, 1,
                                       vk::ShaderStageFlagBits::eCompute),
        vk::DescriptorSetLayoutBinding(2, vk::DescriptorType::eStorageBuffer, 1,
                                       vk::ShaderStageFlagBits::eCompute),
        vk::DescriptorSetLayoutBinding(3, vk::DescriptorType::eStorageBuffer, direct_peers,
                                       vk::ShaderStageFlagBits::eCompute)};
    set_layout_ =
        device_.createDescriptorSetLayout(vk::DescriptorSetLayoutCreateInfo({}, bindings));
    const vk::PushConstantRange range(vk::ShaderStageFlagBits::eCompute, 0, sizeof(Push));
    pipeline_layout_ =
        device_.createPipelineLayout(vk::PipelineLayoutCreateInfo({}, set_layout_, range));
    const vk::DescriptorPoolSize pool_size(vk::DescriptorType::eStorageBuffer, 3 + direct_peers);
    descriptor_pool_ = device_.createDescriptorPool(vk::DescriptorPoolCreateInfo({}, 1, pool_size));
    descriptor_set_ =
        device_.allocateDescriptorSets(vk::DescriptorSetAllocateInfo(descriptor_pool_, set_layout_))
            .front();
    const vk::DescriptorBufferInfo user_info(user_.buffer, 0, VK_WHOLE_SIZE);
    const vk::DescriptorBufferInfo scratch_info(scratch_.buffer, 0, VK_WHOLE_SIZE);
    const vk::DescriptorBufferInfo host_info(host_.buffer, 0, VK_WHOLE_SIZE);
    std::array<vk::DescriptorBufferInfo, direct_peers> peer_info;
    for (std::uint32_t j = 0; j < direct_peers; ++j)
      peer_info[j] = vk::DescriptorBufferInfo(host_.buffer, j * peer_window_words * 4, peer_window_words * 4);
    const std::array<vk::WriteDescriptorSet, 4> writes{
        vk::WriteDescriptorSet(descriptor_set_, 0, 0, vk::DescriptorType::eStorageBuffer, {},
                               user_info),
        vk::WriteDescriptorSet(descriptor_set_, 1, 0, vk::DescriptorType::eStorageBuffer, {},
                               scratch_info),
        vk::WriteDescriptorSet(descriptor_set_, 2, 0, vk::DescriptorType::eStorageBuffer, {},
                               host_info),
        vk::WriteDescriptorSet(descriptor_set_, 3, 0, vk::DescriptorType::eStorageBuffer, {},
                               peer_info)};
    device_.updateDescriptorSets(writes, {});

    command_pool_ = device_.createCommandPool(
        vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, family_));
    command_buffer_ = device_
                          .allocateCommandBuffers(vk::CommandBufferAllocateInfo(
                              command_pool_, vk::CommandBufferLevel::ePrimary, 1))
                          .front();
    fence_ = device_.createFence({});
  }

  vk::Pipeline pipeline_for(Shader shader, Wire wire) {
    const auto key = std::make_pair(shader, wire);
    if (auto it = pipelines_.find(key); it != pipelines_.end()) return it->second;
    auto& module = modules_[shader];
    if (!module) {
      const auto code = shader_code(shader);
      module = device_.createShaderModule(
          vk::ShaderModuleCreateInfo({}, code.size_bytes(), code.data()));
    }
    const std::uint32_t wire_value = static_cast<std::uint32_t>(wire);
    const vk::SpecializationMapEntry entry(0, 0, sizeof(std::uint32_t));
    const vk::SpecializationInfo spec(1, &entry, sizeof(wire_value), &wire_value);
    const vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, module,
                                                  "main", &spec);
    const auto result = device_.createComputePipeline(
        {}, vk::ComputePipelineCreateInfo({}, stage, pipeline_layout_));
    if (result.result != vk::Result::eSuccess) throw std::runtime_error("pipeline creation failed");
    pipelines_[key] = result.value;
    return result.value;
  }

  std::optional<vk::DynamicLoader> loader_;
  vk::Instance instance_;
  vk::DebugUtilsMessengerEXT messenger_;
  bool validation_ = false;
  bool sync_validation_ = false;
  vk::PhysicalDevice physical_;
  std::string device_name_;
  std::uint32_t family_ = 0;
  vk::Device device_;
  vk::Queue queue_;
  HostBuffer user_;
  HostBuffer scratch_;
  HostBuffer host_;  // binding 2: stands in for host staging (pack's second output)
  vk::DescriptorSetLayout set_layout_;
  vk::PipelineLayout pipeline_layout_;
  vk::DescriptorPool descriptor_pool_;
  vk::DescriptorSet descriptor_set_;
  vk::CommandPool command_pool_;
  vk::CommandBuffer command_buffer_;
  vk::Fence fence_;
  std::map<Shader, vk::ShaderModule> modules_;
  std::map<std::pair<Shader, Wire>, vk::Pipeline> pipelines_;
};

// The device every test uses, made on first use and destroyed when the tests end, before
// static destruction: drivers (NVIDIA's) tear down at exit, and a VkDevice destroyed
// after that crashes.
std::unique_ptr<Gpu>& gpu_instance() {
  static std::unique_ptr<Gpu> instance;
  return instance;
}

// Null (with the reason) when there is no Vulkan to test on; any other failure to set up throws.
Gpu* try_gpu(std::string& why_not) {
  auto& instance = gpu_instance();
  static std::string unavailable;
  if (!instance && unavailable.empty()) {
    try {
      instance = std::make_unique<Gpu>();
    } catch (const GpuUnavailable& e) {
      unavailable = e.what();
    }
  }
  why_not = unavailable;
  return instance.get();
}

Gpu& gpu() {
  std::string why_not;
  Gpu* g = try_gpu(why_not);
  if (!g) throw std::runtime_error(why_not);
  return *g;
}

// Skips the calling test (reported as skipped by ctest, which looks for "[skipped]")
// when there is no Vulkan device.
#define REQUIRE_GPU_OR_SKIP()                                                \
  do {                                                                       \
    std::string why_not_;                                                    \
    if (!try_gpu(why_not_)) {                                                \
      MESSAGE("[skipped] no Vulkan device to run kernels on: " << why_not_); \
      return;                                                                \
    }                                                                        \
  } while (false)

void check_validation_clean() {
  INFO("the validation layer reported errors (see stderr)");
  CHECK(g_validation_errors.load() == 0);
}

// ---------------------------------------------------------------------------------------
// Test data

struct Rng {
  std::uint64_t state;
  explicit Rng(std::uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull) {}
  std::uint64_t next() {  // splitmix64
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::uint32_t u32() { return static_cast<std::uint32_t>(next() >> 32); }
  std::uint32_t below(std::uint32_t n) { return static_cast<std::uint32_t>((next() >> 32) % n); }
  int range(int lo, int hi) {
    return lo + static_cast<int>(below(static_cast<std::uint32_t>(hi - lo + 1)));
  }
};

float make_float(std::uint32_t sign, int exponent, std::uint32_t mantissa) {
  // exponent unbiased, kept within the normal range
  const std::uint32_t e = static_cast<std::uint32_t>(std::clamp(exponent, -126, 127) + 127);
  return codec::bits_f32((sign << 31) | (e << 23) | (mantissa & 0x7FFFFFu));
}

constexpr int min_exponent = -100;  // see the file comment

enum class Kind {
  varied,     // magnitudes 2^-90 .. 2^90 in one block
  narrow,     // magnitudes within a factor of ~16
  huge,       // around 1e30 and up to FLT_MAX
  tiny,       // around 1e-30
  zeros,      // mostly +-0
  ties,       // exact rounding ties for bf16 and f16
  saturate,   // bf16 rounding past its largest finite value
  specials,   // +-inf and NaN mixed in (encoding paths only)
  nonfinite,  // a block of only inf/NaN/zeros (encoding paths only)
  subnormal,  // f32 subnormals, and normal values within 2^-124 whose sums may be subnormal
};

float value_of(Kind kind, Rng& rng, int block_exponent) {
  const std::uint32_t sign = rng.below(2);
  const std::uint32_t mant = rng.u32() & 0x7FFFFFu;
  if (rng.below(40) == 0) return sign ? -0.0f : 0.0f;
  switch (kind) {
    case Kind::varied: return make_float(sign, rng.range(-90, 90), mant);
    case Kind::narrow: return make_float(sign, block_exponent + rng.range(-4, 0), mant);
    case Kind::huge: {
      switch (rng.below(4)) {
        case 0: return sign ? -3.0e38f : 3.0e38f;
        case 1: return make_float(sign, 127, mant);  // up to FLT_MAX
        case 2:
          return (sign ? -1e30f : 1e30f) * (1.0f + static_cast<float>(rng.below(1000)) / 250.0f);
        default: return make_float(sign, rng.range(60, 127), mant);
      }
    }
    case Kind::tiny:
      return (sign ? -1e-30f : 1e-30f) * (1.0f + static_cast<float>(rng.below(3000)) / 1000.0f);
    case Kind::subnormal:
      if (rng.below(2)) return codec::bits_f32((sign << 31) | (mant == 0 ? 1u : mant));  // exponent field 0
      return make_float(sign, -126 + rng.range(0, 1), mant);
    case Kind::zeros:
      return rng.below(8) == 0 ? make_float(sign, rng.range(-20, 20), mant) : (sign ? -0.0f : 0.0f);
    case Kind::ties: {
      // Low 16 bits exactly half a bf16 ulp, or low 13 bits half an f16 ulp, with both
      // slot sets of the kept part.
      std::uint32_t m = mant;
      if (rng.below(2))
        m = (m & ~0xFFFFu) | 0x8000u;
      else
        m = (m & ~0x1FFFu) | 0x1000u;
      return make_float(sign, block_exponent + rng.range(-3, 0), m);
    }
    case Kind::saturate: {
      switch (rng.below(4)) {
        case 0: return codec::bits_f32((sign << 31) | 0x7F7FFFFFu);  // FLT_MAX
        case 1: return codec::bits_f32((sign << 31) | 0x7F7F8000u);  // tie: rounds up
        case 2: return codec::bits_f32((sign << 31) | 0x7F7F8000u | (rng.u32() & 0x7FFFu));
        default: return codec::bits_f32((sign << 31) | 0x7F7F0000u | (rng.u32() & 0x7FFFu));
      }
    }
    case Kind::specials:
    case Kind::nonfinite: {
      // NaNs of every kind, the signalling ones included (only moved and bit-tested
      // on these paths): a payload only in the low 16 bits must still encode as NaN.
      static constexpr std::uint32_t nans[] = {0x7FC00000u, 0x7F800001u, 0x7F80FFFFu,
                                               0x7F810000u, 0x7FFFFFFFu, 0x7F802000u};
      const std::uint32_t pick = rng.below(kind == Kind::specials ? 8 : 4);
      switch (pick) {
        case 0: return codec::bits_f32((sign << 31) | 0x7F800000u);  // inf
        case 1: return codec::bits_f32((sign << 31) | nans[rng.below(6)]);
        case 2: return codec::bits_f32((sign << 31) | 0x7F800000u | (rng.u32() & 0x7FFFFFu) | 1u);
        case 3: return sign ? -0.0f : 0.0f;
        default: return make_float(sign, block_exponent + rng.range(-30, 0), mant);
      }
    }
  }
  return 0.0f;
}

// n values, one Kind per 512-value block (counted from the piece start, like the f16
// scale blocks). Non-finite values only when `specials`.
std::vector<float> make_values(std::size_t n, Rng& rng, bool specials) {
  static constexpr Kind finite_kinds[] = {Kind::varied, Kind::narrow,   Kind::huge,     Kind::tiny,
                                          Kind::zeros,  Kind::ties,     Kind::saturate, Kind::subnormal};
  constexpr std::uint32_t finite = std::size(finite_kinds);
  std::vector<float> v(n);
  for (std::size_t lo = 0; lo < n; lo += tpar::wire_block) {
    Kind kind;
    const std::uint32_t pick = rng.below(specials ? finite + 2 : finite);
    if (pick < finite)
      kind = finite_kinds[pick];
    else
      kind = pick == finite ? Kind::specials : Kind::nonfinite;
    const int block_exponent = rng.range(-60, 60);
    const std::size_t hi = std::min(n, lo + tpar::wire_block);
    for (std::size_t i = lo; i < hi; ++i) {
      v[i] = value_of(kind, rng, block_exponent);
      const std::uint32_t b = codec::f32_bits(v[i]);
      const std::uint32_t e = (b >> 23) & 0xFFu;
      if (kind != Kind::subnormal && e != 0 && e != 0xFFu && static_cast<int>(e) - 127 < min_exponent)
        v[i] = codec::bits_f32(b & 0x80000000u);  // stay clear of subnormal sums
    }
  }
  return v;
}

std::vector<std::uint32_t> encode(Wire w, const std::vector<float>& x) {
  std::vector<std::uint32_t> out(tpar::wire_words(w, x.size()));
  codec::encode_piece(w, x.data(), x.size(), out.data());
  return out;
}

std::vector<float> decode(Wire w, const std::uint32_t* words, std::size_t n) {
  std::vector<float> out(n);
  codec::decode_piece(w, words, n, out.data());
  return out;
}

// Overwrites the unused high half of the last data word (odd counts, 16-bit wires) with
// garbage: readers must ignore it. Mostly the largest finite half, which would also
// raise an f16 block's scale if it were let in.
void dirty_padding(Wire w, std::vector<std::uint32_t>& words, std::size_t n, Rng& rng) {
  if (w == Wire::f32 || !(n & 1u)) return;
  const std::uint32_t garbage =
      rng.below(4) == 0 ? rng.u32() >> 16 : 0x7BFFu | (rng.u32() & 0x8000u);
  words[n / 2] = (words[n / 2] & 0xFFFFu) | (garbage << 16);
}

// ---------------------------------------------------------------------------------------
// Running a case: initial buffer contents in, expected contents out.

struct Layout {
  std::uint32_t user_off = 0;
  std::uint32_t in_off = 0;
  std::uint32_t out_off = 0;
};

struct Buffers {
  std::vector<std::uint32_t> user;     // user.v bits, [0, user.size())
  std::vector<std::uint32_t> scratch;  // scratch.w, [0, scratch.size())
  std::vector<std::uint32_t> host;     // host.w, [0, host.size())
};

constexpr std::size_t guard_words = 67;  // sentinels checked past the last used word

Buffers sentinel_buffers(std::size_t user_words, std::size_t scratch_words, Rng& rng) {
  Buffers b;
  b.user.resize(user_words + guard_words);
  b.scratch.resize(scratch_words + guard_words);
  b.host.resize(scratch_words + guard_words);
  // Distinct, recognisable junk (NaN patterns among it).
  for (auto& w : b.user) w = 0x7FA00000u ^ (rng.u32() & 0x801FFFFFu);
  for (auto& w : b.scratch) w = 0xDEAD0000u ^ (rng.u32() & 0x0000FFFFu);
  for (auto& w : b.host) w = 0xB0570000u ^ (rng.u32() & 0x0000FFFFu);
  return b;
}

std::string hex(std::uint32_t w) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", w);
  return buf;
}

// "" when got[0, want.size()) == want, else how many words differ and the first few.
std::string compare_words(const char* what, const std::uint32_t* got,
                          const std::vector<std::uint32_t>& want) {
  std::size_t bad = 0;
  std::ostringstream first;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad < 6)
      first << "\n    " << what << "[" << i << "]: got " << hex(got[i]) << ", want "
            << hex(want[i]);
    ++bad;
  }
  if (!bad) return {};
  std::ostringstream msg;
  msg << bad << " of " << want.size() << " words differ in " << what << first.str();
  return msg.str();
}

void run_case(Shader shader, Wire wire, const Push& push, std::uint32_t groups,
              const Buffers& initial, const Buffers& expected) {
  Gpu& g = gpu();
  REQUIRE(initial.user.size() <= user_capacity);
  REQUIRE(initial.scratch.size() <= scratch_capacity);
  REQUIRE(initial.host.size() <= scratch_capacity);
  std::memcpy(g.user(), initial.user.data(), initial.user.size() * 4);
  std::memcpy(g.scratch(), initial.scratch.data(), initial.scratch.size() * 4);
  std::memcpy(g.host(), initial.host.data(), initial.host.size() * 4);
  g.dispatch(shader, wire, push, groups);
  const std::string user_diff = compare_words("user", g.user(), expected.user);
  const std::string scratch_diff = compare_words("scratch", g.scratch(), expected.scratch);
  const std::string host_diff = compare_words("host", g.host(), expected.host);
  CHECK_MESSAGE(user_diff.empty(), user_diff);
  CHECK_MESSAGE(scratch_diff.empty(), scratch_diff);
  CHECK_MESSAGE(host_diff.empty(), host_diff);
}

std::string describe(Shader s, Wire w, const Push& p, std::uint32_t groups) {
  std::ostringstream o;
  o << shader_name(s) << " wire=" << tpar::to_string(w) << " mode=" << p.mode
    << " count=" << p.count << " groups=" << groups << " user_off=" << p.user_off
    << " in_off=" << p.in_off << " out_off=" << p.out_off;
  if (s == Shader::oneshot)
    o << " nseg=" << p.nseg << " seg_words=" << p.seg_words << " mask=" << hex(p.mask);
  if (p.host_out_off != ~0u) o << " host_out_off=" << p.host_out_off;
  return o.str();
}

constexpr std::uint32_t test_counts[] = {1, 2, 3, 511, 512, 513, 1024 + 7, 100000 + 3};

std::uint32_t blocks_of(std::uint32_t n) {
  return static_cast<std::uint32_t>((n + tpar::wire_block - 1) / tpar::wire_block);
}

// Group counts: one group (the grid-stride loop walks every block), three, and one more
// than there are blocks (a group with nothing to do).
std::array<std::uint32_t, 3> group_counts(std::uint32_t n) { return {1u, 3u, blocks_of(n) + 1u}; }

// Offsets for variant v of a piece whose input and output take `in_words`/`out_words`:
// 0: everything at 0 and output right after input; 1: odd offsets with gaps; 2: output
// before input, user at a large offset.
Layout layout_for(int v, std::size_t in_words, std::size_t out_words) {
  Layout l;
  switch (v % 3) {
    case 0: l = {0, 0, static_cast<std::uint32_t>(in_words)}; break;
    case 1: l = {3, 5, static_cast<std::uint32_t>(5 + in_words + 9)}; break;
    default: l = {1001, static_cast<std::uint32_t>(1 + out_words + 2), 1}; break;
  }
  return l;
}

// ---------------------------------------------------------------------------------------
// pack

void pack_cases(std::uint32_t mode) {
  std::uint64_t seed = 1000 + mode;
  for (Wire wire : tpar::all_wires)
    for (std::uint32_t n : test_counts) {
      int variant = 0;
      for (std::uint32_t groups : group_counts(n)) {
        Rng rng(++seed);
        const std::size_t ww = tpar::wire_words(wire, n);
        Layout l = layout_for(variant++, 0, ww);
        if (variant == 2) l.in_off = 0x0FFFFFFFu;  // pack never reads the input piece
        Push p;
        p.count = n;
        p.user_off = l.user_off;
        p.in_off = l.in_off;
        p.out_off = l.out_off;
        p.mode = mode;
        // Variants 1 and 2 also publish the piece to host.w (OneShot's direct write), at
        // the start and at an odd offset; variant 0 must leave host.w alone.
        if (variant >= 2) p.host_out_off = variant == 2 ? 0u : 17u;
        INFO(describe(Shader::pack, wire, p, groups));
        const std::vector<float> x = make_values(n, rng, true);
        Buffers init = sentinel_buffers(l.user_off + n, std::max<std::size_t>(l.out_off, 17) + ww, rng);
        std::memcpy(init.user.data() + l.user_off, x.data(), n * 4);
        Buffers want = init;
        const std::vector<std::uint32_t> words = mode == 0 ? encode(wire, x) : std::vector<std::uint32_t>(ww, 0u);
        std::copy(words.begin(), words.end(), want.scratch.begin() + l.out_off);
        if (p.host_out_off != ~0u) std::copy(words.begin(), words.end(), want.host.begin() + p.host_out_off);
        run_case(Shader::pack, wire, p, groups, init, want);
      }
    }
}

TEST_CASE("pack: mode 0 encodes user values into a wire piece (and publishes it to host.w when asked)") {
  REQUIRE_GPU_OR_SKIP();
  pack_cases(0);
  check_validation_clean();
}

TEST_CASE("pack: mode 1 writes an all-zero wire piece (and publishes it to host.w when asked)") {
  REQUIRE_GPU_OR_SKIP();
  pack_cases(1);
  check_validation_clean();
}

// ---------------------------------------------------------------------------------------
// combine

enum CombineMode : std::uint32_t {
  add_fwd = 0,
  copy = 1,
  add_final = 2,
  copy_final = 3,
  unpack = 4
};

void combine_cases(std::uint32_t mode) {
  std::uint64_t seed = 2000 + 100 * mode;
  const bool adds = mode == add_fwd || mode == add_final;
  for (Wire wire : tpar::all_wires)
    for (std::uint32_t n : test_counts) {
      int variant = 0;
      for (std::uint32_t groups : group_counts(n)) {
        Rng rng(++seed);
        const std::size_t ww = tpar::wire_words(wire, n);
        const Layout l = layout_for(variant++, ww, ww);
        Push p;
        p.count = n;
        p.user_off = l.user_off;
        p.in_off = l.in_off;
        p.out_off = l.out_off;
        p.mode = mode;
        INFO(describe(Shader::combine, wire, p, groups));

        // The input piece: a valid encoding (with inf/NaN where no arithmetic sees them),
        // or for COPY arbitrary words, which must travel verbatim.
        std::vector<std::uint32_t> in_words;
        if (mode == copy) {
          in_words.resize(ww);
          for (auto& w : in_words) w = rng.u32();
        } else {
          in_words = encode(wire, make_values(n, rng, !adds));
          dirty_padding(wire, in_words, n, rng);
        }
        const std::vector<float> user_x = make_values(n, rng, false);

        const std::size_t scratch_words = std::max<std::size_t>(l.in_off, l.out_off) + ww;
        Buffers init = sentinel_buffers(l.user_off + n, scratch_words, rng);
        std::memcpy(init.user.data() + l.user_off, user_x.data(), n * 4);
        std::copy(in_words.begin(), in_words.end(), init.scratch.begin() + l.in_off);
        Buffers want = init;

        const std::vector<float> in_x = decode(wire, in_words.data(), n);
        auto set_user = [&](const std::vector<float>& v) {
          std::memcpy(want.user.data() + l.user_off, v.data(), n * 4);
        };
        if (adds) {
          std::vector<float> acc(n);
          for (std::size_t i = 0; i < n; ++i) acc[i] = codec::add_flushed(user_x[i], in_x[i]);
          const auto out = encode(wire, acc);
          std::copy(out.begin(), out.end(), want.scratch.begin() + l.out_off);
          if (mode == add_final) set_user(decode(wire, out.data(), n));
        } else {
          if (mode != unpack)
            std::copy(in_words.begin(), in_words.end(), want.scratch.begin() + l.out_off);
          if (mode != copy) set_user(in_x);
        }
        run_case(Shader::combine, wire, p, groups, init, want);
      }
    }
}

TEST_CASE("combine: mode 0 ADD_FWD adds and re-encodes") {
  REQUIRE_GPU_OR_SKIP();
  combine_cases(add_fwd);
  check_validation_clean();
}

TEST_CASE("combine: mode 1 COPY forwards words verbatim") {
  REQUIRE_GPU_OR_SKIP();
  combine_cases(copy);
  check_validation_clean();
}

TEST_CASE("combine: mode 2 ADD_FINAL adds, encodes and keeps the decoded sum") {
  REQUIRE_GPU_OR_SKIP();
  combine_cases(add_final);
  check_validation_clean();
}

TEST_CASE("combine: mode 3 COPY_FINAL forwards and decodes") {
  REQUIRE_GPU_OR_SKIP();
  combine_cases(copy_final);
  check_validation_clean();
}

TEST_CASE("combine: mode 4 UNPACK decodes into user") {
  REQUIRE_GPU_OR_SKIP();
  combine_cases(unpack);
  check_validation_clean();
}

// ---------------------------------------------------------------------------------------
// oneshot

struct MaskCase {
  std::uint32_t nseg;
  std::uint32_t mask;
  std::uint32_t gap;        // words between one segment's end and the next one's start
  std::uint32_t max_count;  // only for counts up to this
};

constexpr MaskCase mask_cases[] = {
    {1, 0x1u, 0, ~0u},         {3, 0x7u, 3, ~0u},
    {4, 0x0u, 1, ~0u},          // nobody contributes: +0
    {5, 0x4u, 0, ~0u},          // a single segment, not the first
    {5, 0x1Au, 7, ~0u},         // segments 1, 3, 4
    {3, 0xFFFFFFF2u, 2, 2048},  // bits at and past nseg are ignored
    {8, 0xFFu, 0, 2048},       {32, 0x80000001u | 0x00F0F000u, 1, 2048},
};

// mode 0 SCRATCH (no `self`): segment j at scratch in_off + j*seg_words. mode 1 DIRECT:
// segment `self` at scratch out_off, every other one at in_off of peer[j] (window j of
// the host buffer).
void oneshot_cases(const MaskCase& mc, std::optional<std::uint32_t> self = std::nullopt) {
  const bool direct = self.has_value();
  std::uint64_t seed = (direct ? 5000 + *self : 3000) + mc.nseg * 131 + mc.mask % 977;
  for (Wire wire : tpar::all_wires)
    for (std::uint32_t n : test_counts) {
      if (n > mc.max_count) continue;
      int variant = 0;
      for (std::uint32_t groups : group_counts(n)) {
        Rng rng(++seed);
        const std::size_t ww = tpar::wire_words(wire, n);
        const std::uint32_t seg_words = static_cast<std::uint32_t>(ww + mc.gap);
        const std::size_t in_words = direct ? ww : std::size_t{seg_words} * mc.nseg;
        const Layout l = layout_for(variant++, in_words, direct ? ww : 0);
        if (direct) REQUIRE(l.in_off + ww <= peer_window_words);
        Push p;
        p.count = n;
        p.user_off = l.user_off;
        p.in_off = l.in_off;
        p.out_off = direct ? l.out_off : 0x0FFFFFFFu;  // SCRATCH: unused
        p.mode = direct ? 1 : 0;
        p.self = direct ? *self : 0x777u;             // SCRATCH: unused
        p.nseg = mc.nseg;
        p.seg_words = direct ? 0x0FFFFFFFu : seg_words;  // DIRECT: unused
        p.mask = mc.mask;
        INFO(describe(Shader::oneshot, wire, p, groups));
        INFO("self=" << p.self);

        const std::vector<float> user_x = make_values(n, rng, false);
        Buffers init = sentinel_buffers(l.user_off + n, direct ? l.out_off + ww : l.in_off + in_words, rng);
        if (direct) {
          init.host.resize(direct_peers * peer_window_words);
          for (auto& w : init.host) w = 0xB0570000u ^ (rng.u32() & 0x0000FFFFu);
        }
        std::memcpy(init.user.data() + l.user_off, user_x.data(), n * 4);
        std::vector<float> sum(n, 0.0f);
        bool first = true;
        for (std::uint32_t j = 0; j < mc.nseg; ++j) {
          auto words = encode(wire, make_values(n, rng, false));
          dirty_padding(wire, words, n, rng);
          const auto at = !direct     ? init.scratch.begin() + l.in_off + j * seg_words
                          : j == *self ? init.scratch.begin() + l.out_off
                                       : init.host.begin() + j * peer_window_words + l.in_off;
          std::copy(words.begin(), words.end(), at);
          if (j >= 32 || !((mc.mask >> j) & 1u)) continue;
          const auto x = decode(wire, words.data(), n);
          for (std::size_t i = 0; i < n; ++i) sum[i] = first ? codec::flush_subnormal(x[i]) : codec::add_flushed(sum[i], x[i]);
          first = false;
        }
        Buffers want = init;
        std::memcpy(want.user.data() + l.user_off, sum.data(), n * 4);
        run_case(Shader::oneshot, wire, p, groups, init, want);
      }
    }
}

TEST_CASE("oneshot: masked in-order sums of decoded segments") {
  REQUIRE_GPU_OR_SKIP();
  for (const MaskCase& mc : mask_cases) oneshot_cases(mc);
  check_validation_clean();
}

TEST_CASE("oneshot: mode 1 DIRECT reads the peers' segments in place, its own from scratch") {
  REQUIRE_GPU_OR_SKIP();
  for (const MaskCase& mc : mask_cases) {
    if (mc.nseg > direct_peers) continue;
    oneshot_cases(mc, 0);
    oneshot_cases(mc, mc.nseg - 1);
  }
  check_validation_clean();
}

// ---------------------------------------------------------------------------------------
// Harness checks

TEST_CASE("host reference: encodings checked by hand") {
  // So that a bug in the host reference cannot hide behind the same bug in a shader.
  CHECK(codec::bf16_encode(3.0e38f) == 0x7F62u);
  CHECK(codec::bf16_encode(codec::bits_f32(0x7F7FFFFFu)) == 0x7F7Fu);  // saturates, not inf
  CHECK(codec::bf16_encode(codec::bits_f32(0xFF7F8000u)) == 0xFF7Fu);
  CHECK(codec::bf16_encode(std::numeric_limits<float>::infinity()) == 0x7F80u);
  CHECK(codec::bf16_encode(codec::bits_f32(0x7F800001u)) == 0x7FC0u);  // NaN stays NaN, quiet
  CHECK(codec::bf16_encode(codec::bits_f32(0x3F808000u)) == 0x3F80u);  // tie to even
  CHECK(codec::bf16_encode(codec::bits_f32(0x3F818000u)) == 0x3F82u);
  const float block[] = {1.0f, -0.5f, 3.0f};
  const std::int32_t k = codec::f16_block_shift(block, 3);
  CHECK(k == 1 - 14);                            // 3·2^13 lies in [2^14, 2^15)
  CHECK(codec::f16_encode(1.0f, k) == 0x7000u);  // 2^13
  CHECK(codec::f16_encode(codec::bits_f32(0x7F800001u), k) == 0x7E00u);
  CHECK(codec::f16_decode(0x7000u, k) == 1.0f);
  CHECK(codec::f16_decode(0x0001u, 0) == 0x1p-24f);
  CHECK(codec::f16_decode(0x7BFFu, 120) == std::numeric_limits<float>::max());  // saturates
}

TEST_CASE("harness: device and validation layer") {
  REQUIRE_GPU_OR_SKIP();
  Gpu& g = gpu();
  std::string setup = "device: " + g.device_name();
  setup += g.validation() ? ", validation layer on" : ", NO validation layer";
  if (g.sync_validation()) setup += " with synchronization validation";
  MESSAGE(setup);
  // One small dispatch, so that this test alone exercises the whole harness.
  Rng rng(7);
  Push p;
  p.count = 5;
  Buffers init = sentinel_buffers(5, 5, rng);
  for (std::size_t i = 0; i < 5; ++i) init.user[i] = codec::f32_bits(static_cast<float>(i) - 2.0f);
  Buffers want = init;
  for (std::size_t i = 0; i < 5; ++i) want.scratch[i] = init.user[i];
  run_case(Shader::pack, Wire::f32, p, 1, init, want);
  check_validation_clean();
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  gpu_instance().reset();
  return result;
}
