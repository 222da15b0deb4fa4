// Fault injection under tpar, in the manner of SQLite's OOM and I/O-error tests: the
// Vulkan functions tpar reaches through Vulkan-Hpp's default dispatcher are wrapped, so
// that the k-th call of a chosen kind fails with a chosen VkResult (without reaching the
// driver), and every object created is counted until destroyed.
//
// It costs tpar nothing: tpar resolves every entry point through the default
// dispatcher's vkGetInstanceProcAddr (and vkGetDeviceProcAddr for the extension
// functions it loads per device), and leaves a dispatcher the host initialised alone.
// install() initialises it with a vkGetInstanceProcAddr that hands out the wrappers.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tpar_test::fault {

// What a wrapped call does, for choosing which calls fail.
enum class Kind {
  create,     // vkCreate*, vkAllocateMemory/CommandBuffers/DescriptorSets (instance and devices included)
  bind,       // vkBindBufferMemory
  record,     // vkBeginCommandBuffer, vkEndCommandBuffer, vkResetCommandBuffer
  submit,     // vkQueueSubmit
  wait,       // vkWaitSemaphores, vkWaitForFences
  query,      // vkGetSemaphoreCounterValue, vkGetQueryPoolResults, vkGetCalibratedTimestampsEXT
  signal,     // vkSignalSemaphore
  external,   // vkGetMemoryHostPointerPropertiesEXT, vkGetSemaphoreFdKHR, vkImportSemaphoreFdKHR
  enumerate,  // vkEnumeratePhysicalDevices, vkEnumerate*ExtensionProperties, vkEnumerateInstanceLayerProperties
};
inline constexpr Kind all_kinds[] = {Kind::create, Kind::bind,   Kind::record,   Kind::submit,   Kind::wait,
                                     Kind::query,  Kind::signal, Kind::external, Kind::enumerate};
std::string_view to_string(Kind kind);

// Initialises VULKAN_HPP_DEFAULT_DISPATCHER with the wrapping vkGetInstanceProcAddr
// (once; before tpar or the test touches Vulkan). False, with a reason, where the
// Vulkan loader cannot be loaded.
bool install(std::string* why = nullptr);

// From now on, the k-th call (1-based) of `kind` returns `result` without reaching the
// driver; calls before and after it go through.
void arm(Kind kind, VkResult result, std::uint64_t k);
void disarm();
// Whether the armed call came, and which function it was.
bool fired();
std::string fired_in();

// Successful vkQueueSubmit calls so far (whether work reached a queue).
std::uint64_t submits();

// Objects created and not yet destroyed, by type ("Buffer: 2, Semaphore: 1"); empty when
// none. Command buffers and descriptor sets are counted with their pools.
std::string live_objects();
std::size_t live_count();

}  // namespace tpar_test::fault
