// DeviceGroup — the devices an AllReduce spans: GPUs tpar opens itself (all, or a
// selection by index, name or UUID), one device opened K times as K "virtual" devices,
// or devices a host application already owns ("adopted").
#pragma once

#include <tpar/core/log.hpp>
#include <tpar/vk/device.hpp>

#include <algorithm>
#include <cctype>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tpar::inline v0 {

// The most devices one group (and one communicator) spans.
inline constexpr std::size_t max_group_devices = 32;

// Which physical devices to open. Criteria combine (a device must meet all that are
// set). With none set: every GPU, or the CPU devices (lavapipe) when there is no GPU.
struct DeviceSelection {
  std::vector<std::uint32_t> indices;  // physical device indices, in enumeration order
  std::string name;                    // case-insensitive substring of the device name
  std::optional<Uuid> uuid;            // deviceUUID
  std::optional<std::uint32_t> count;  // keep only the first `count` of those matched
  // Open the first matched device this many times as separate logical devices.
  std::optional<std::uint32_t> virtual_count;

  DeviceSelection& with_indices(std::vector<std::uint32_t> v) { indices = std::move(v); return *this; }
  DeviceSelection& with_name(std::string v) { name = std::move(v); return *this; }
  DeviceSelection& with_uuid(const Uuid& v) { uuid = v; return *this; }
  DeviceSelection& first(std::uint32_t n) { count = n; return *this; }
  DeviceSelection& virtual_devices(std::uint32_t k) { virtual_count = k; return *this; }
};

struct ValidationMessage {
  vk::DebugUtilsMessageSeverityFlagBitsEXT severity;
  std::string id;
  std::string text;
  bool is_error() const { return severity == vk::DebugUtilsMessageSeverityFlagBitsEXT::eError; }
};

struct GroupOptions {
  DeviceSelection select;
  // Enable the Khronos validation layer (with synchronization validation) on tpar's
  // instance; its messages go to on_validation and, errors, to the log.
  bool validation = false;
  bool sync_validation = true;
  std::function<void(const ValidationMessage&)> on_validation;
  // Device extensions the host needs as well; a device without one is an error.
  std::vector<std::string> required_extensions;
  bool require_f16 = false;  // shaderFloat16 + storageBuffer16BitAccess
  // Dynamic dispatch only: the Vulkan loader library to load (default: the system's).
  std::string loader;
  std::string application_name = "tpar";
  // Keep the Vulkan drivers loaded from this create until the process exits, through an
  // instance of tpar's own with no layers and no devices (detail::anchor_drivers says
  // why). false: this create makes none, and the loader unloads the drivers with the
  // last instance; an anchor an earlier create made stays.
  bool keep_drivers_loaded = true;
};

// A device the host created and keeps owning.
struct AdoptedDevice {
  vk::Instance instance;
  vk::PhysicalDevice physical;
  vk::Device device;
  vk::Queue compute_queue;
  std::uint32_t compute_family = 0;
  std::uint32_t compute_index = 0;
  QueueLock compute_lock;
  vk::Queue transfer_queue;  // optional: a transfer queue tpar may use for uploads
  std::uint32_t transfer_family = 0;
  std::uint32_t transfer_index = 0;
  QueueLock transfer_lock;
  // Device extensions the host enabled (tpar uses VK_EXT_external_memory_host and
  // VK_KHR_external_semaphore_fd where listed). Timeline semaphores must be enabled.
  std::vector<std::string> enabled_extensions;
  bool shader_float16_enabled = false;
  bool storage_16bit_enabled = false;
  // Whether the host enabled descriptorBindingStorageBufferUpdateAfterBind (Vulkan 1.2
  // descriptor indexing). With it, a call on buffers tpar has not seen costs a descriptor
  // update; without it, also re-recording that call's kernel command buffers.
  bool update_after_bind_enabled = false;
  // Whether the host enabled VK_KHR_shader_clock (listed in enabled_extensions) with
  // shaderDeviceClock: the relay's kernel then bounds its wait by time, else by a count.
  bool shader_device_clock_enabled = false;
  // Whether the host enabled VK_AMD_device_coherent_memory (listed in enabled_extensions)
  // with deviceCoherentMemory: the relay then puts its words in a device-coherent memory
  // type; without it tpar never allocates from such a type.
  bool device_coherent_memory_enabled = false;
};

namespace detail {

struct GroupState {
  vk::Instance instance;
  bool owns_instance = false;
  VkDebugUtilsMessengerEXT messenger = VK_NULL_HANDLE;
  PFN_vkDestroyDebugUtilsMessengerEXT destroy_messenger = nullptr;
  std::function<void(const ValidationMessage&)> on_validation;
  std::vector<std::unique_ptr<Device>> devices;
  std::mutex submission_order;  // DeviceGroup::lock_submissions()

  GroupState() = default;
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;
  ~GroupState() {
    devices.clear();  // devices before the messenger and instance
    if (messenger && destroy_messenger) destroy_messenger(instance, messenger, nullptr);
    if (owns_instance && instance) instance.destroy();
  }
};

inline VKAPI_ATTR VkBool32 VKAPI_CALL on_debug_message(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                      VkDebugUtilsMessageTypeFlagsEXT,
                                                      const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* state = static_cast<GroupState*>(user);
  ValidationMessage msg{vk::DebugUtilsMessageSeverityFlagBitsEXT(severity),
                        data->pMessageIdName ? data->pMessageIdName : "", data->pMessage ? data->pMessage : ""};
  if (msg.is_error()) log(LogLevel::error, "validation: " + msg.id + ": " + msg.text);
  if (state && state->on_validation) state->on_validation(msg);
  return VK_FALSE;
}

inline std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A failed enumeration throws: read as "none", it would turn an out-of-memory into "the
// validation layer is not installed", or quietly drop an extension the instance needs.
inline bool has_layer(const char* name) {
  std::uint32_t n = 0;
  check(vk::enumerateInstanceLayerProperties(&n, nullptr), "vkEnumerateInstanceLayerProperties");
  std::vector<vk::LayerProperties> layers(n);
  check(vk::enumerateInstanceLayerProperties(&n, layers.data()), "vkEnumerateInstanceLayerProperties");
  for (std::uint32_t i = 0; i < n; ++i)
    if (std::string_view(layers[i].layerName.data()) == name) return true;
  return false;
}

// The instance extensions of the loader and drivers, or of `layer` (none where the
// layer is not installed).
inline std::vector<vk::ExtensionProperties> instance_extensions(const char* layer) {
  std::uint32_t n = 0;
  vk::Result r = vk::enumerateInstanceExtensionProperties(layer, &n, nullptr);
  if (r == vk::Result::eErrorLayerNotPresent) return {};
  check(r, "vkEnumerateInstanceExtensionProperties");
  std::vector<vk::ExtensionProperties> exts(n);
  r = vk::enumerateInstanceExtensionProperties(layer, &n, exts.data());
  if (r == vk::Result::eErrorLayerNotPresent) return {};
  check(r, "vkEnumerateInstanceExtensionProperties");
  exts.resize(n);
  return exts;
}

// The instance that keeps the Vulkan drivers loaded for the process's life.
//
// Each group tpar creates has an instance of its own (its layers, its messenger, its
// application name). The Vulkan loader loads every driver's library for an instance (and
// for the queries before one, vkEnumerateInstanceExtensionProperties) and unloads it
// when no instance is left. A process that creates and destroys groups in turn thus
// loads and unloads the drivers every time (lavapipe's libvulkan_lvp.so, traced with
// LD_DEBUG=files: once a cycle). NVIDIA's
// driver does not survive that: on an H200 (driver 580.159.04, 2026-11-24),
// tpar-group-cycles failed its 30th create, the loader reporting "Could not get
// 'vkCreateInstance' via 'vk_icdGetInstanceProcAddr' for ICD libGLX_nvidia.so.0" (the
// library loaded, and handed out no entry point), then "Found no drivers!"
// (docs/perf/raw/group-cycles-h200.txt).
//
// So the first create makes one more instance, with no layers, no extensions and no
// devices, and keeps it: the loader then holds each driver's library open throughout (a
// group's vkDestroyInstance only drops a reference), and the driver keeps the state it
// sets up for its first instance. With it the same H200 ran 1000 cycles with every sum
// right, and the process's open files, mapped regions and threads did not change from
// the first cycle on. The groups' own instances are as before, so validation and
// messages stay per group. The cost, for the process's life rather than a group's: the
// drivers' state for one instance without devices. On the H200, 13 open files and the
// driver's one thread that no device owns (0.4 wake-ups a second), which a group holds
// anyway: with a group open, the anchor added no thread. On lavapipe, every installed
// Mesa driver's library stays mapped, about 12 MiB resident.
//
// The alternatives were worse: one instance shared by the groups cannot differ in layers
// per group, and would hand each group's messenger the others' messages; pinning the
// drivers' libraries with dlopen(RTLD_NODELETE) would mean finding them as the loader
// does (its manifests and environment), and would still let the driver tear down and set
// up its state with every last instance.
//
// It is never destroyed: the process's end releases it, as it does the loader. Destroyed
// by a static destructor, it crashed every run on the H200 at exit (SIGSEGV, after every
// cycle had passed): at exit the driver may already be tearing itself down. A failure
// to make it is not an error: the group's own instance meets the same cause and reports
// it, and the next create tries again.
inline void anchor_drivers() {
  static std::mutex mutex;
  static vk::Instance instance;  // reachable from here, so no leak to LeakSanitizer
  std::lock_guard lock(mutex);
  if (instance) return;
  vk::ApplicationInfo app("tpar (keeps the drivers loaded)", 1, "tpar",
                          VK_MAKE_API_VERSION(0, TPAR_VERSION_MAJOR, TPAR_VERSION_MINOR, TPAR_VERSION_PATCH), VK_API_VERSION_1_2);
  vk::InstanceCreateInfo info({}, &app);
  vk::Instance made;
  if (const auto r = vk::createInstance(&info, nullptr, &made); r != vk::Result::eSuccess)
    log(LogLevel::debug, "no instance to keep the drivers loaded: vkCreateInstance returned " + vk::to_string(r));
  else
    instance = made;
}

inline void create_instance(GroupState& state, const GroupOptions& options) {
  const bool tpar_loaded = ensure_loader(options.loader);
  std::uint32_t loader_version = VK_API_VERSION_1_0;
#if VULKAN_HPP_DISPATCH_LOADER_DYNAMIC == 1
  if (VULKAN_HPP_DEFAULT_DISPATCHER.vkEnumerateInstanceVersion)  // null in a Vulkan 1.0 loader
#endif
    (void)vk::enumerateInstanceVersion(&loader_version);
  if (loader_version < VK_API_VERSION_1_2)
    throw Error(ErrorCode::no_driver, "the Vulkan loader offers Vulkan " + api_version_string(loader_version) +
                                          "; tpar needs 1.2 (timeline semaphores): update the Vulkan loader");
  // First, so that the queries below find the drivers loaded as well.
  if (options.keep_drivers_loaded) anchor_drivers();

  constexpr const char* validation_layer = "VK_LAYER_KHRONOS_validation";
  std::vector<const char*> layers, extensions;
  const auto available = instance_extensions(nullptr);
  const bool want_messages = options.validation || options.on_validation;
  bool sync_validation = false;
  if (options.validation) {
    if (!has_layer(validation_layer))
      throw Error(ErrorCode::missing_feature,
                  "validation was requested but VK_LAYER_KHRONOS_validation is not installed (Debian/Ubuntu: "
                  "apt-get install vulkan-validationlayers)");
    layers.push_back(validation_layer);
    if (options.sync_validation && has_extension(instance_extensions(validation_layer), VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
      extensions.push_back(VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
      sync_validation = true;
    }
  }
  if (want_messages && (has_extension(available, VK_EXT_DEBUG_UTILS_EXTENSION_NAME) || options.validation))
    extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
  vk::InstanceCreateFlags flags;
  if (has_extension(available, VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
    extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
    flags |= vk::InstanceCreateFlagBits::eEnumeratePortabilityKHR;
  }

  vk::ApplicationInfo app(options.application_name.c_str(), 1, "tpar",
                          VK_MAKE_API_VERSION(0, TPAR_VERSION_MAJOR, TPAR_VERSION_MINOR, TPAR_VERSION_PATCH),
                          std::min<std::uint32_t>(loader_version, VK_API_VERSION_1_3));
  vk::InstanceCreateInfo info(flags, &app, layers, extensions);
  const vk::ValidationFeatureEnableEXT enables[] = {vk::ValidationFeatureEnableEXT::eSynchronizationValidation};
  vk::ValidationFeaturesEXT features(enables, {});
  if (sync_validation) info.pNext = &features;

  VkInstance instance = VK_NULL_HANDLE;
  const auto r = vk::createInstance(&info, nullptr, reinterpret_cast<vk::Instance*>(&instance));
  if (r == vk::Result::eErrorIncompatibleDriver)
    throw Error(ErrorCode::no_driver,
                "no Vulkan driver: the loader found no usable ICD (install your GPU's driver, or mesa-vulkan-drivers "
                "for the CPU driver lavapipe)",
                r);
  check(r, "vkCreateInstance");
  state.instance = instance;
  state.owns_instance = true;
  bind_dispatcher(state.instance, tpar_loaded);

  if (want_messages) {
    auto create = load_instance_fn<PFN_vkCreateDebugUtilsMessengerEXT>(state.instance, "vkCreateDebugUtilsMessengerEXT");
    state.destroy_messenger =
        load_instance_fn<PFN_vkDestroyDebugUtilsMessengerEXT>(state.instance, "vkDestroyDebugUtilsMessengerEXT");
    if (create && state.destroy_messenger) {
      VkDebugUtilsMessengerCreateInfoEXT mi{};
      mi.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT;
      mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
      mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
      mi.pfnUserCallback = on_debug_message;
      mi.pUserData = &state;
      check(create(state.instance, &mi, nullptr, &state.messenger), "vkCreateDebugUtilsMessengerEXT");
    }
  }
}

inline std::vector<vk::PhysicalDevice> physical_devices(vk::Instance instance) {
  std::uint32_t n = 0;
  if (const auto r = instance.enumeratePhysicalDevices(&n, nullptr); r == vk::Result::eErrorInitializationFailed)
    return {};  // every driver failed to find its hardware: no device
  else
    check(r, "vkEnumeratePhysicalDevices");
  std::vector<vk::PhysicalDevice> devices(n);
  if (n) check(instance.enumeratePhysicalDevices(&n, devices.data()), "vkEnumeratePhysicalDevices");
  devices.resize(n);
  return devices;
}

inline std::string list_devices(const std::vector<DeviceCapabilities>& caps) {
  std::string s;
  for (std::size_t i = 0; i < caps.size(); ++i)
    s += (i ? "; " : "") + std::to_string(i) + ": " + caps[i].name + " (" + vk::to_string(caps[i].type) + ")";
  return s;
}

// Indices of the physical devices `sel` picks.
inline std::vector<std::uint32_t> select_devices(const std::vector<DeviceCapabilities>& caps,
                                                 const DeviceSelection& sel) {
  if (sel.virtual_count && (*sel.virtual_count == 0 || *sel.virtual_count > max_group_devices))
    throw Error(ErrorCode::invalid_argument, "virtual device count " + std::to_string(*sel.virtual_count) +
                                                 " is out of range: use 1 to " + std::to_string(max_group_devices));
  if (sel.count && *sel.count == 0) throw Error(ErrorCode::invalid_argument, "a selection of 0 devices selects nothing");
  for (auto i : sel.indices)
    if (i >= caps.size())
      throw Error(ErrorCode::no_match, "no device " + std::to_string(i) + "; devices: " + list_devices(caps));
  std::vector<std::uint32_t> picked;
  const bool by_criteria = !sel.indices.empty() || !sel.name.empty() || sel.uuid;
  bool any_gpu = false;
  for (const auto& c : caps) any_gpu |= c.is_gpu();
  for (std::uint32_t i = 0; i < caps.size(); ++i) {
    const auto& c = caps[i];
    if (!sel.indices.empty() && std::find(sel.indices.begin(), sel.indices.end(), i) == sel.indices.end()) continue;
    if (!sel.name.empty() && lower(c.name).find(lower(sel.name)) == std::string::npos) continue;
    if (sel.uuid && c.device_uuid != *sel.uuid) continue;
    if (!by_criteria && any_gpu && !c.is_gpu()) continue;
    picked.push_back(i);
  }
  if (picked.empty()) {
    std::string what = !sel.name.empty() ? "name '" + sel.name + "'" : sel.uuid ? "UUID " + to_string(*sel.uuid) : "the selection";
    throw Error(ErrorCode::no_match, "no device matches " + what + "; devices: " + list_devices(caps));
  }
  if (sel.count) {
    if (*sel.count > picked.size())
      throw Error(ErrorCode::no_match, std::to_string(*sel.count) + " devices were asked for but only " +
                                           std::to_string(picked.size()) + " match; devices: " + list_devices(caps));
    picked.resize(*sel.count);
  }
  if (sel.virtual_count) picked.assign(*sel.virtual_count, picked.front());
  if (picked.size() > max_group_devices)
    throw Error(ErrorCode::invalid_argument, "a group spans at most " + std::to_string(max_group_devices) + " devices");
  return picked;
}

// Checks that `caps` meets tpar's floor (and the host's extra requirements).
inline void require_features(const DeviceCapabilities& caps, std::uint32_t index, const GroupOptions& options,
                             const std::vector<vk::ExtensionProperties>& exts) {
  const std::string who = "device " + std::to_string(index) + " (" + caps.name + ")";
  if (caps.api_version < VK_API_VERSION_1_2 || !caps.timeline_semaphores)
    throw Error(ErrorCode::missing_feature, who + " lacks timeline semaphores (Vulkan 1.2), which tpar needs; it offers Vulkan " +
                                                api_version_string(caps.api_version));
  if (caps.compute_family == ~0u) throw Error(ErrorCode::missing_feature, who + " has no compute queue");
  for (const auto& e : options.required_extensions)
    if (!has_extension(exts, e.c_str()))
      throw Error(ErrorCode::missing_feature, who + " lacks the extension " + e + ", which was required");
  if (options.require_f16 && !(caps.shader_float16 && caps.storage_16bit))
    throw Error(ErrorCode::missing_feature,
                who + " lacks " + (caps.shader_float16 ? "storageBuffer16BitAccess" : "shaderFloat16") + ", which was required");
}

inline std::unique_ptr<Device> open_device(GroupState& state, vk::PhysicalDevice physical, std::uint32_t physical_index,
                                           std::uint32_t index, bool is_virtual, const GroupOptions& options) {
  DeviceCapabilities caps = query_capabilities(physical);
  const auto exts = device_extensions(physical);
  require_features(caps, index, options, exts);

  std::vector<const char*> enable;
  EnabledFeatures enabled;
  if (caps.external_memory_host) {
    enable.push_back(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
    enabled.external_memory_host = true;
  }
  if (caps.external_semaphore_fd) {
    enable.push_back(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
    enabled.external_semaphore_fd = true;
  }
  if (caps.calibrated_timestamps) {
    enable.push_back(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
    enabled.calibrated_timestamps = true;
  }
  if (caps.shader_device_clock) {
    enable.push_back(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
    enabled.shader_device_clock = true;
  }
  if (caps.device_coherent_memory) {
    enable.push_back(VK_AMD_DEVICE_COHERENT_MEMORY_EXTENSION_NAME);
    enabled.device_coherent_memory = true;
  }
  for (const auto& e : options.required_extensions)
    if (std::find_if(enable.begin(), enable.end(), [&](const char* s) { return e == s; }) == enable.end())
      enable.push_back(e.c_str());

  vk::PhysicalDeviceFeatures2 f2;
  vk::PhysicalDeviceVulkan11Features f11;
  vk::PhysicalDeviceVulkan12Features f12;
  vk::PhysicalDeviceShaderClockFeaturesKHR clock;
  vk::PhysicalDeviceCoherentMemoryFeaturesAMD coherent;
  f2.pNext = &f11;
  f11.pNext = &f12;
  void** tail = &f12.pNext;
  if (caps.shader_device_clock) {
    *tail = &clock;
    tail = &clock.pNext;
    clock.shaderDeviceClock = VK_TRUE;
  }
  if (caps.device_coherent_memory) {
    *tail = &coherent;
    coherent.deviceCoherentMemory = VK_TRUE;
  }
  f12.timelineSemaphore = VK_TRUE;
  f12.shaderFloat16 = caps.shader_float16;
  f11.storageBuffer16BitAccess = caps.storage_16bit;
  enabled.shader_float16 = caps.shader_float16;
  enabled.storage_16bit = caps.storage_16bit;
  f12.descriptorBindingStorageBufferUpdateAfterBind = caps.update_after_bind;
  enabled.update_after_bind = caps.update_after_bind;

  const float priorities[2] = {1.0f, 1.0f};
  std::vector<vk::DeviceQueueCreateInfo> queues{vk::DeviceQueueCreateInfo({}, caps.compute_family, 1, priorities)};
  const std::uint32_t transfer_queues =
      caps.transfer_family ? std::min<std::uint32_t>(2, caps.queue_families[*caps.transfer_family].queueCount) : 0;
  if (caps.transfer_family) queues.emplace_back(vk::DeviceQueueCreateFlags{}, *caps.transfer_family, transfer_queues, priorities);
  vk::DeviceCreateInfo info({}, queues, {}, enable, nullptr, &f2);
  vk::Device device;
  check(physical.createDevice(&info, nullptr, &device), "vkCreateDevice for device " + std::to_string(index) + " (" + caps.name + ")");

  Device::Init init;
  init.instance = state.instance;
  init.physical = physical;
  init.device = device;
  init.owned = true;
  init.index = index;
  init.physical_index = physical_index;
  init.is_virtual = is_virtual;
  init.enabled = enabled;
  init.compute_family = caps.compute_family;
  init.compute_queue = device.getQueue(caps.compute_family, 0);
  if (caps.transfer_family) {
    init.transfer_family = *caps.transfer_family;
    init.transfer_queue = device.getQueue(*caps.transfer_family, 0);
    if (transfer_queues > 1) init.second_transfer_queue = device.getQueue(*caps.transfer_family, 1);
  }
  init.caps = std::move(caps);
  try {
    return std::make_unique<Device>(std::move(init));
  } catch (...) {
    device.destroy();
    throw;
  }
}

}  // namespace detail

class DeviceGroup {
 public:
  // Opens the devices `options.select` picks, on an instance tpar creates.
  static DeviceGroup create(const GroupOptions& options = {}) {
    (void)detail::log_state();  // reads TPAR_LOG now
    auto state = std::make_shared<detail::GroupState>();
    state->on_validation = options.on_validation;
    detail::create_instance(*state, options);
    const auto physical = detail::physical_devices(state->instance);
    if (physical.empty())
      throw Error(ErrorCode::no_devices,
                  "Vulkan reports no device: install your GPU's Vulkan driver, or mesa-vulkan-drivers for the CPU "
                  "driver lavapipe");
    std::vector<DeviceCapabilities> caps;
    for (auto p : physical) caps.push_back(query_capabilities(p));
    const auto picked = detail::select_devices(caps, options.select);
    const bool is_virtual = options.select.virtual_count.has_value();
    for (std::uint32_t i = 0; i < picked.size(); ++i)
      state->devices.push_back(detail::open_device(*state, physical[picked[i]], picked[i], i, is_virtual, options));
    return DeviceGroup(std::move(state));
  }

  // Wraps devices the host owns. tpar destroys none of them; the host keeps them (and
  // its instance) alive until the group and every communicator built on it are gone.
  static DeviceGroup adopt(std::span<const AdoptedDevice> devices) {
    (void)detail::log_state();  // reads TPAR_LOG now
    if (devices.empty()) throw Error(ErrorCode::invalid_argument, "adopt needs at least one device");
    if (devices.size() > max_group_devices)
      throw Error(ErrorCode::invalid_argument, "a group spans at most " + std::to_string(max_group_devices) + " devices");
    auto state = std::make_shared<detail::GroupState>();
    state->instance = devices[0].instance;
    for (std::uint32_t i = 0; i < devices.size(); ++i) {
      const auto& a = devices[i];
      const std::string who = "adopted device " + std::to_string(i);
      if (!a.instance || !a.physical || !a.device || !a.compute_queue)
        throw Error(ErrorCode::invalid_argument, who + " lacks an instance, physical device, device or compute queue");
      DeviceCapabilities caps = query_capabilities(a.physical);
      if (a.compute_family >= caps.queue_families.size() ||
          !(caps.queue_families[a.compute_family].queueFlags & vk::QueueFlagBits::eCompute))
        throw Error(ErrorCode::invalid_argument, who + ": queue family " + std::to_string(a.compute_family) + " has no compute support");
      if (caps.api_version < VK_API_VERSION_1_2 || !caps.timeline_semaphores)
        throw Error(ErrorCode::missing_feature, who + " (" + caps.name + ") lacks timeline semaphores (Vulkan 1.2)");
      auto listed = [&](const char* ext) {
        return std::find(a.enabled_extensions.begin(), a.enabled_extensions.end(), ext) != a.enabled_extensions.end();
      };
      Device::Init init;
      init.instance = a.instance;
      init.physical = a.physical;
      init.device = a.device;
      init.owned = false;
      init.index = i;
      init.enabled.external_memory_host = caps.external_memory_host && listed(VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME);
      init.enabled.external_semaphore_fd = caps.external_semaphore_fd && listed(VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME);
      init.enabled.calibrated_timestamps = caps.calibrated_timestamps && listed(VK_EXT_CALIBRATED_TIMESTAMPS_EXTENSION_NAME);
      init.enabled.shader_float16 = a.shader_float16_enabled;
      init.enabled.storage_16bit = a.storage_16bit_enabled;
      init.enabled.update_after_bind = caps.update_after_bind && a.update_after_bind_enabled;
      init.enabled.shader_device_clock =
          caps.shader_device_clock && a.shader_device_clock_enabled && listed(VK_KHR_SHADER_CLOCK_EXTENSION_NAME);
      init.enabled.device_coherent_memory = caps.device_coherent_memory && a.device_coherent_memory_enabled &&
                                            listed(VK_AMD_DEVICE_COHERENT_MEMORY_EXTENSION_NAME);
      init.compute_queue = a.compute_queue;
      init.compute_family = a.compute_family;
      init.compute_index = a.compute_index;
      init.compute_lock = a.compute_lock;
      if (a.transfer_queue) {
        init.transfer_queue = a.transfer_queue;
        init.transfer_family = a.transfer_family;
        init.transfer_index = a.transfer_index;
        init.transfer_lock = a.transfer_lock;
      }
      init.caps = std::move(caps);
      state->devices.push_back(std::make_unique<Device>(std::move(init)));
    }
    return DeviceGroup(std::move(state));
  }

  std::size_t size() const { return state_->devices.size(); }
  Device& operator[](std::size_t i) const { return *state_->devices.at(i); }
  vk::Instance instance() const { return state_->instance; }
  bool owns_instance() const { return state_->owns_instance; }

  std::vector<DeviceCapabilities> capabilities() const {
    std::vector<DeviceCapabilities> caps;
    for (const auto& d : state_->devices) caps.push_back(d->capabilities());
    return caps;
  }

  // Which cross-device sync this group can use, and why.
  SyncGate sync_gate() const {
    const auto caps = capabilities();
    bool fd_enabled[max_group_devices] = {};
    for (std::size_t i = 0; i < size(); ++i) fd_enabled[i] = state_->devices[i]->enabled().external_semaphore_fd;
    return tpar::sync_gate(caps, std::span<const bool>(fd_enabled, size()));
  }

  // One submission order for the whole group. Each device's queues start batches in
  // submission order, so two submissions spanning several devices whose batches wait on
  // each other's devices (two communicators' calls, used from two threads) must reach
  // every queue in the same order, or each waits behind the other's until both time out.
  // Every such submission holds this lock from its first vkQueueSubmit to its last: a
  // communicator's flush, NativeImport's self-test. Copies of the group share it; a host
  // that submits cross-device work of its own on these queues may take it too. Order:
  // this lock first, then a queue's lock (the host's, on adopted devices), never the
  // reverse.
  [[nodiscard]] std::unique_lock<std::mutex> lock_submissions() const { return std::unique_lock(state_->submission_order); }

  // Whether the relay can serve this group, whether the automatic choice takes it, and why.
  RelayGate relay_gate() const {
    const auto caps = capabilities();
    bool clock_enabled[max_group_devices] = {};
    for (std::size_t i = 0; i < size(); ++i) clock_enabled[i] = state_->devices[i]->enabled().shader_device_clock;
    return tpar::relay_gate(caps, std::span<const bool>(clock_enabled, size()));
  }

  // Shared ownership of the group's Vulkan objects (communicators keep it alive).
  const std::shared_ptr<detail::GroupState>& state() const { return state_; }

 private:
  explicit DeviceGroup(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}
  std::shared_ptr<detail::GroupState> state_;
};

}  // namespace tpar::inline v0
