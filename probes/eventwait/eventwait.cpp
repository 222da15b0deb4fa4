// eventwait: can a command buffer wait, between two dispatches, for an event the host
// sets while it runs, and how long is the host -> GPU -> host round trip that way? A
// relay call recorded into the host's own command buffer could wait for its sum so,
// with no kernel spinning (which lavapipe cannot run) and no batch boundary. A standalone
// probe, not part of tpar. The specification requires the host to set an event a
// command buffer waits for before submitting it (queue forward progress): this probe
// sets it later on purpose, to see what drivers do; nothing in tpar relies on it.
//
//   eventwait [rounds]
//
// One command buffer of `rounds` steps: a dispatch writes the step's number into a flag
// word in host memory, then vkCmdWaitEvents on an event the host sets, then
// vkCmdResetEvent. The host spins on the flag, sets the event once it sees step r, and
// times from seeing step r to seeing step r + 1.
#include <vulkan/vulkan.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "mark_spv.h"

#define CK(x) do { VkResult r_ = (x); if (r_ != VK_SUCCESS) { std::printf("FAIL %s -> %d (line %d)\n", #x, r_, __LINE__); std::exit(1); } } while (0)
using clk = std::chrono::steady_clock;
static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

int main(int argc, char** argv) {
  long rounds = 2000;
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) {
    std::printf("usage: eventwait [rounds]   (default 2000, 10..100000; PD=<index> picks the device)\n");
    return 0;
  }
  if (argc > 2 || (argc == 2 && ((rounds = std::strtol(argv[1], nullptr, 10)) < 10 || rounds > 100000))) {
    std::fprintf(stderr, "usage: eventwait [rounds]   (default 2000, 10..100000; PD=<index> picks the device)\n");
    return 2;
  }
  VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO}; ai.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO}; ici.pApplicationInfo = &ai;
  VkInstance inst; CK(vkCreateInstance(&ici, nullptr, &inst));
  uint32_t n = 0; vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n); vkEnumeratePhysicalDevices(inst, &n, pds.data());
  const long pdi = std::getenv("PD") ? std::atol(std::getenv("PD")) : 0;
  if (!n || pdi < 0 || pdi >= long(n)) { std::fprintf(stderr, "eventwait: no physical device %ld\n", pdi); return 1; }
  VkPhysicalDevice pd = pds[pdi];
  VkPhysicalDeviceProperties props; vkGetPhysicalDeviceProperties(pd, &props);
  VkPhysicalDeviceMemoryProperties mp; vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  uint32_t qn = 0; vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, nullptr);
  std::vector<VkQueueFamilyProperties> qf(qn); vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf.data());
  uint32_t qfi = 0; for (; qfi < qn; qfi++) if (qf[qfi].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
  std::printf("# eventwait: %s (driver 0x%x), %ld rounds\n", props.deviceName, props.driverVersion, rounds);
  float pr = 1; VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}; qci.queueFamilyIndex = qfi; qci.queueCount = 1; qci.pQueuePriorities = &pr;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO}; dci.queueCreateInfoCount = 1; dci.pQueueCreateInfos = &qci;
  VkDevice d; CK(vkCreateDevice(pd, &dci, nullptr, &d));
  VkQueue q; vkGetDeviceQueue(d, qfi, 0, &q);

  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO}; bci.size = 256; bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
  VkBuffer buf; CK(vkCreateBuffer(d, &bci, nullptr, &buf));
  VkMemoryRequirements mr; vkGetBufferMemoryRequirements(d, buf, &mr);
  int t = -1;
  const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  for (uint32_t i = 0; i < mp.memoryTypeCount && t < 0; i++)
    if ((mr.memoryTypeBits >> i & 1) && (mp.memoryTypes[i].propertyFlags & hv) == hv && !(mp.memoryTypes[i].propertyFlags & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT)) t = int(i);
  for (uint32_t i = 0; i < mp.memoryTypeCount && t < 0; i++)
    if ((mr.memoryTypeBits >> i & 1) && (mp.memoryTypes[i].propertyFlags & hv) == hv) t = int(i);  // unified memory (lavapipe)
  if (t < 0) { std::fprintf(stderr, "eventwait: no host-visible coherent memory\n"); return 1; }
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO}; mai.allocationSize = mr.size; mai.memoryTypeIndex = uint32_t(t);
  VkDeviceMemory mem; CK(vkAllocateMemory(d, &mai, nullptr, &mem)); CK(vkBindBufferMemory(d, buf, mem, 0));
  volatile uint32_t* flag = nullptr; CK(vkMapMemory(d, mem, 0, VK_WHOLE_SIZE, 0, (void**)&flag));
  *flag = 0;

  VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO}; smci.codeSize = sizeof(mark_spv); smci.pCode = mark_spv;
  VkShaderModule sm; CK(vkCreateShaderModule(d, &smci, nullptr, &sm));
  VkDescriptorSetLayoutBinding bnd{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dslci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO}; dslci.bindingCount = 1; dslci.pBindings = &bnd;
  VkDescriptorSetLayout dsl; CK(vkCreateDescriptorSetLayout(d, &dslci, nullptr, &dsl));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 4};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO}; plci.setLayoutCount = 1; plci.pSetLayouts = &dsl; plci.pushConstantRangeCount = 1; plci.pPushConstantRanges = &pcr;
  VkPipelineLayout pl; CK(vkCreatePipelineLayout(d, &plci, nullptr, &pl));
  VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, sm, "main", nullptr}; cpci.layout = pl;
  VkPipeline pipe; CK(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, nullptr, &pipe));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1};
  VkDescriptorPoolCreateInfo dpci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO}; dpci.maxSets = 1; dpci.poolSizeCount = 1; dpci.pPoolSizes = &ps;
  VkDescriptorPool dp; CK(vkCreateDescriptorPool(d, &dpci, nullptr, &dp));
  VkDescriptorSetAllocateInfo dsai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO}; dsai.descriptorPool = dp; dsai.descriptorSetCount = 1; dsai.pSetLayouts = &dsl;
  VkDescriptorSet ds; CK(vkAllocateDescriptorSets(d, &dsai, &ds));
  VkDescriptorBufferInfo dbi{buf, 0, VK_WHOLE_SIZE};
  VkWriteDescriptorSet w{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET}; w.dstSet = ds; w.descriptorCount = 1; w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER; w.pBufferInfo = &dbi;
  vkUpdateDescriptorSets(d, 1, &w, 0, nullptr);

  VkEventCreateInfo eci{VK_STRUCTURE_TYPE_EVENT_CREATE_INFO};
  VkEvent ev; CK(vkCreateEvent(d, &eci, nullptr, &ev));
  VkCommandPoolCreateInfo cpi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO}; cpi.queueFamilyIndex = qfi;
  VkCommandPool cp; CK(vkCreateCommandPool(d, &cpi, nullptr, &cp));
  VkCommandBufferAllocateInfo cbai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO}; cbai.commandPool = cp; cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY; cbai.commandBufferCount = 1;
  VkCommandBuffer cb; CK(vkAllocateCommandBuffers(d, &cbai, &cb));
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  CK(vkBeginCommandBuffer(cb, &bi));
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, nullptr);
  for (long r = 1; r <= rounds + 1; r++) {
    const uint32_t v = uint32_t(r);
    vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 4, &v);
    vkCmdDispatch(cb, 1, 1, 1);
    if (r == rounds + 1) break;
    // the flag out to the host, then wait for the host's event, then make it unset again
    VkMemoryBarrier to_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER}; to_host.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT; to_host.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &to_host, 0, nullptr, 0, nullptr);
    VkMemoryBarrier from_host{VK_STRUCTURE_TYPE_MEMORY_BARRIER}; from_host.srcAccessMask = VK_ACCESS_HOST_WRITE_BIT; from_host.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdWaitEvents(cb, 1, &ev, VK_PIPELINE_STAGE_HOST_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 1, &from_host, 0, nullptr, 0, nullptr);
    vkCmdResetEvent(cb, ev, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT);
  }
  CK(vkEndCommandBuffer(cb));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}; VkFence fence; CK(vkCreateFence(d, &fci, nullptr, &fence));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &cb;
  CK(vkQueueSubmit(q, 1, &si, fence));

  std::vector<double> rt, set_cost;
  long timeouts = 0;
  auto wait_flag = [&](uint32_t v, clk::time_point& at) {
    const auto t0 = clk::now();
    for (;;) {
      if (*flag >= v) { at = clk::now(); return true; }
      if (us(t0, clk::now()) > 2e6) return false;
    }
  };
  clk::time_point seen{}, next{};
  if (!wait_flag(1, seen)) { std::printf("the first step never wrote its flag\n"); return 1; }
  for (long r = 1; r <= rounds; r++) {
    const auto a = clk::now();
    CK(vkSetEvent(d, ev));
    const auto b = clk::now();
    if (!wait_flag(uint32_t(r + 1), next)) { timeouts++; std::printf("round %ld: no step after the event within 2 s\n", r); break; }
    if (r > 10) { rt.push_back(us(seen, next)); set_cost.push_back(us(a, b)); }
    seen = next;
  }
  const VkResult fr = vkWaitForFences(d, 1, &fence, VK_TRUE, 10ull * 1000000000ull);
  std::printf("command buffer finished: %s\n", fr == VK_SUCCESS ? "yes" : "NO");
  if (rt.empty()) return 1;
  std::sort(rt.begin(), rt.end());
  std::sort(set_cost.begin(), set_cost.end());
  auto pct = [](const std::vector<double>& v, double p) { return v[std::min(v.size() - 1, size_t(p * double(v.size())))]; };
  std::printf("round trip host sees step r -> sets the event -> GPU runs step r+1 -> host sees it: %zu rounds, min %.2f us, "
              "median %.2f, p90 %.2f, p99 %.2f, max %.2f; vkSetEvent itself median %.2f us; timeouts %ld\n",
              rt.size(), rt.front(), pct(rt, 0.5), pct(rt, 0.9), pct(rt, 0.99), rt.back(), pct(set_cost, 0.5), timeouts);
  return (fr == VK_SUCCESS && timeouts == 0) ? 0 : 1;
}
