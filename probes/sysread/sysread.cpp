// sysread: can a running compute kernel read host memory the host (or another GPU) wrote
// while the kernel runs, and how fast is the round trip? probes/barpoll found that a kernel
// polling host memory with plain loads sees the first value and never a later one (NVIDIA
// serves such reads from a GPU cache until the next vkQueueSubmit). This probe asks the two
// questions that decide whether GPUs can exchange partial sums through host memory
// without a host thread summing them:
//   - is a FIRST read of a host-memory address, made after a flag says the data is there,
//     fresh? (bar-fresh: flag in the BAR, the payload at a new host address every round;
//     bar-stale re-reads one address as the control)
//   - do atomics, or acquire loads under the Vulkan memory model, on host memory see host
//     writes made after the kernel began? (sys-atomic, sys-acquire: flag and payload in host
//     memory, one address re-read every round)
// A standalone probe, not part of tpar.
#include <vulkan/vulkan.h>
#include <immintrin.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "shaders_spv.h"

#define CK(x) do { VkResult r_ = (x); if (r_ != VK_SUCCESS) { printf("FAIL %s -> %d (line %d)\n", #x, r_, __LINE__); exit(1); } } while (0)
using clk = std::chrono::steady_clock;
static double us(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::micro>(b - a).count(); }

static void usage(FILE* f) {
  fprintf(f,
          "usage: sysread MODE [rounds] [payload_words] [groups]\n"
          "  MODE  bar-bar     flag and payload in device-local host-visible memory (the BAR), plain loads\n"
          "        bar-fresh   flag in the BAR; payload in host memory, a new address every round, plain loads\n"
          "        bar-stale   flag in the BAR; payload in host memory, one address every round, plain loads\n"
          "        sys-atomic  flag and payload in host memory, one address, read with atomicAdd(x, 0)\n"
          "        sys-acquire flag and payload in host memory, one address, atomicLoad acquire|MakeVisible\n"
          "                    at queue-family scope (needs vulkanMemoryModel)\n"
          "        wide-bar    GROUPS work groups poll a flag in the BAR, then each reads its share of a\n"
          "                    payload in the BAR with 16-byte loads (how a relay kernel reads the host's sum)\n"
          "        wide-fresh  the same with the payload in host memory, a new address every round\n"
          "  rounds (default 2000), payload_words (default 4096: 16 KiB); the kernel gives up a round\n"
          "  after a bounded spin and the host after 0.5 s (5 s for the first).\n"
          "  groups (wide modes only, default 32): payload_words must be a multiple of 4 x groups.\n"
          "  Host memory is imported with VK_EXT_external_memory_host (as tpar's staging is);\n"
          "  SYSREAD_MEMORY=driver allocates the driver's host-visible, not device-local type instead.\n"
          "  Exit 0 when every round was answered with the payload intact, 1 otherwise, 2 on usage errors.\n");
}

int main(int argc, char** argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) { usage(stdout); return 0; }
  if (argc < 2 || argc > 5) { usage(stderr); return 2; }
  const std::string mode = argv[1];
  int kmode = 0; bool flag_bar = true, pay_bar = false, fresh = false, acquire = false, wide = false;
  if (mode == "bar-bar") pay_bar = true;
  else if (mode == "bar-fresh") fresh = true;
  else if (mode == "bar-stale") {}
  else if (mode == "sys-atomic") { kmode = 1; flag_bar = false; }
  else if (mode == "sys-acquire") { kmode = 2; flag_bar = false; acquire = true; }
  else if (mode == "wide-bar") { wide = true; pay_bar = true; }
  else if (mode == "wide-fresh") { wide = true; fresh = true; }
  else { fprintf(stderr, "sysread: unknown mode '%s'\n", mode.c_str()); usage(stderr); return 2; }
  auto num = [&](int i, uint32_t def, uint32_t lo, uint32_t hi) -> uint32_t {
    if (argc <= i) return def;
    char* e = nullptr; unsigned long v = strtoul(argv[i], &e, 10);
    if (!*argv[i] || *e || v < lo || v > hi) { fprintf(stderr, "sysread: '%s' is not a whole number from %u to %u\n", argv[i], lo, hi); exit(2); }
    return uint32_t(v);
  };
  const uint32_t rounds = num(2, 2000, 2, 100000), nwords = num(3, 4096, 0, 1u << 20);
  const uint32_t groups = wide ? num(4, 32, 1, 1024) : 1;
  if (argc > 4 && !wide) { fprintf(stderr, "sysread: groups apply to the wide modes only\n"); return 2; }
  if (wide && (nwords == 0 || nwords % (4 * groups))) { fprintf(stderr, "sysread: payload_words must be a positive multiple of 4 x groups (%u)\n", 4 * groups); return 2; }
  const uint32_t regions = fresh ? rounds + 1 : 1;
  if (4ull * std::max<uint32_t>(nwords, 64) * regions > (4ull << 30)) {
    fprintf(stderr, "sysread: %s reads a new address every round: rounds x payload_words x 4 bytes must stay within 4 GiB\n", mode.c_str());
    return 2;
  }
  const bool import = !(getenv("SYSREAD_MEMORY") && !strcmp(getenv("SYSREAD_MEMORY"), "driver"));

  VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO}; ai.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO}; ici.pApplicationInfo = &ai;
  VkInstance inst; CK(vkCreateInstance(&ici, nullptr, &inst));
  uint32_t n = 0; vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n); vkEnumeratePhysicalDevices(inst, &n, pds.data());
  if (!n) { printf("no device\n"); return 1; }
  VkPhysicalDevice pd = pds[getenv("PD") ? atoi(getenv("PD")) % n : 0];
  VkPhysicalDeviceProperties props; vkGetPhysicalDeviceProperties(pd, &props);
  VkPhysicalDeviceMemoryProperties mp; vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  printf("device: %s (driver 0x%x), mode %s, rounds %u, payload %u words, regions %u, groups %u, host memory %s\n",
         props.deviceName, props.driverVersion, mode.c_str(), rounds, nwords, regions, groups, import ? "imported" : "the driver's");
  uint32_t qn = 0; vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, nullptr);
  std::vector<VkQueueFamilyProperties> qf(qn); vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf.data());
  uint32_t qfi = 0; for (; qfi < qn; qfi++) if (qf[qfi].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
  float pr = 1; VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}; qci.queueFamilyIndex = qfi; qci.queueCount = 1; qci.pQueuePriorities = &pr;
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2}; f2.pNext = &f12;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  if (acquire && (!f12.vulkanMemoryModel || !f12.vulkanMemoryModelDeviceScope)) { printf("the device lacks vulkanMemoryModel(DeviceScope): sys-acquire cannot run\n"); return 1; }
  VkPhysicalDeviceVulkan12Features en12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  en12.vulkanMemoryModel = acquire; en12.vulkanMemoryModelDeviceScope = acquire;
  const char* exts[] = {VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME};
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO}; dci.pNext = &en12; dci.queueCreateInfoCount = 1; dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = import ? 1 : 0; dci.ppEnabledExtensionNames = exts;
  VkDevice d; CK(vkCreateDevice(pd, &dci, nullptr, &d));
  VkQueue q; vkGetDeviceQueue(d, qfi, 0, &q);
  auto getHostPtrProps = (PFN_vkGetMemoryHostPointerPropertiesEXT)vkGetDeviceProcAddr(d, "vkGetMemoryHostPointerPropertiesEXT");

  auto pick = [&](uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags avoid) -> int {
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
      if ((bits >> i & 1) && (mp.memoryTypes[i].propertyFlags & want) == want && !(mp.memoryTypes[i].propertyFlags & avoid)) return int(i);
    return -1;
  };
  struct Buf { VkBuffer b; VkDeviceMemory m; void* p; };
  const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  auto make = [&](VkDeviceSize size, bool bar, const char* what) {
    Buf B{};
    size = (size + 65535) & ~VkDeviceSize(65535);
    VkExternalMemoryBufferCreateInfo ebci{VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO};
    ebci.handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT;
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO}; bci.size = size; bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    const bool imp = import && !bar;
    if (imp) bci.pNext = &ebci;
    CK(vkCreateBuffer(d, &bci, nullptr, &B.b));
    VkMemoryRequirements mr; vkGetBufferMemoryRequirements(d, B.b, &mr);
    VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO}; mai.allocationSize = mr.size;
    VkImportMemoryHostPointerInfoEXT imi{VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT};
    int t;
    if (imp) {
      void* host = aligned_alloc(65536, size);
      if (!host) { printf("no host memory for the %s (%llu bytes)\n", what, (unsigned long long)size); exit(1); }
      memset(host, 0, size);
      VkMemoryHostPointerPropertiesEXT hpp{VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
      CK(getHostPtrProps(d, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, host, &hpp));
      t = pick(mr.memoryTypeBits & hpp.memoryTypeBits, hv, 0);
      imi.handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT; imi.pHostPointer = host;
      mai.pNext = &imi; mai.allocationSize = size; B.p = host;
    } else {
      t = bar ? pick(mr.memoryTypeBits, hv | VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0)
              : pick(mr.memoryTypeBits, hv, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
      if (t < 0 && !bar) t = pick(mr.memoryTypeBits, hv, 0);  // unified-memory drivers (lavapipe)
    }
    if (t < 0) { printf("no memory type for the %s\n", what); exit(1); }
    printf("  %s: %s, type %d flags=0x%x, %llu bytes\n", what, bar ? "BAR" : imp ? "host, imported" : "host, the driver's", t,
           mp.memoryTypes[t].propertyFlags, (unsigned long long)size);
    mai.memoryTypeIndex = t;
    CK(vkAllocateMemory(d, &mai, nullptr, &B.m)); CK(vkBindBufferMemory(d, B.b, B.m, 0));
    if (!imp) { CK(vkMapMemory(d, B.m, 0, VK_WHOLE_SIZE, 0, &B.p)); memset(B.p, 0, size); }
    return B;
  };
  Buf flag = make(256, flag_bar, "flag");
  Buf pay = make(4ull * std::max<uint32_t>(nwords, 64) * regions, pay_bar, "payload");
  Buf out = make(64ull * groups, false, "answer");

  VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  if (acquire) { smci.codeSize = sizeof(acquire_spv); smci.pCode = acquire_spv; }
  else if (wide) { smci.codeSize = sizeof(wide_spv); smci.pCode = wide_spv; }
  else { smci.codeSize = sizeof(poll_spv); smci.pCode = poll_spv; }
  VkShaderModule sm; CK(vkCreateShaderModule(d, &smci, nullptr, &sm));
  VkDescriptorSetLayoutBinding bnd[3];
  for (uint32_t i = 0; i < 3; i++) bnd[i] = {i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dslci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO}; dslci.bindingCount = 3; dslci.pBindings = bnd;
  VkDescriptorSetLayout dsl; CK(vkCreateDescriptorSetLayout(d, &dslci, nullptr, &dsl));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 20};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO}; plci.setLayoutCount = 1; plci.pSetLayouts = &dsl; plci.pushConstantRangeCount = 1; plci.pPushConstantRanges = &pcr;
  VkPipelineLayout pl; CK(vkCreatePipelineLayout(d, &plci, nullptr, &pl));
  VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, sm, "main", nullptr}; cpci.layout = pl;
  VkPipeline pipe; CK(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, nullptr, &pipe));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
  VkDescriptorPoolCreateInfo dpci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO}; dpci.maxSets = 1; dpci.poolSizeCount = 1; dpci.pPoolSizes = &ps;
  VkDescriptorPool dp; CK(vkCreateDescriptorPool(d, &dpci, nullptr, &dp));
  VkDescriptorSetAllocateInfo dsai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO}; dsai.descriptorPool = dp; dsai.descriptorSetCount = 1; dsai.pSetLayouts = &dsl;
  VkDescriptorSet ds; CK(vkAllocateDescriptorSets(d, &dsai, &ds));
  VkDescriptorBufferInfo dbi[3] = {{flag.b, 0, VK_WHOLE_SIZE}, {pay.b, 0, VK_WHOLE_SIZE}, {out.b, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet w[3] = {};
  for (int i = 0; i < 3; i++) { w[i].sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET; w[i].dstSet = ds; w[i].dstBinding = i; w[i].descriptorCount = 1; w[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER; w[i].pBufferInfo = &dbi[i]; }
  vkUpdateDescriptorSets(d, 3, w, 0, nullptr);

  VkCommandPoolCreateInfo cpi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO}; cpi.queueFamilyIndex = qfi;
  VkCommandPool cp; CK(vkCreateCommandPool(d, &cpi, nullptr, &cp));
  VkCommandBufferAllocateInfo cbai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO}; cbai.commandPool = cp; cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY; cbai.commandBufferCount = 1;
  VkCommandBuffer cb; CK(vkAllocateCommandBuffers(d, &cbai, &cb));
  VkCommandBufferBeginInfo cbbi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  CK(vkBeginCommandBuffer(cb, &cbbi));
  vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
  vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, nullptr);
  uint32_t pc[5] = {rounds, 4000000u, nwords, uint32_t(kmode), regions};
  vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 20, pc);
  vkCmdDispatch(cb, groups, 1, 1);
  CK(vkEndCommandBuffer(cb));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}; VkFence fence; CK(vkCreateFence(d, &fci, nullptr, &fence));
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &cb;

  volatile uint32_t* flagw = (volatile uint32_t*)flag.p;
  uint32_t* payw = (uint32_t*)pay.p;
  volatile uint32_t* outw = (volatile uint32_t*)out.p;   // group g: word 16g = flag, 16g+1 = status
  std::vector<uint32_t> payload(nwords);
  std::vector<double> rt; rt.reserve(rounds);
  uint32_t bad_rounds = 0, timeouts = 0, answered = 0, first_bad = 0;
  auto t_start = clk::now();
  CK(vkQueueSubmit(q, 1, &si, fence));
  for (uint32_t r = 1; r <= rounds; r++) {
    for (uint32_t i = 0; i < nwords; i++) payload[i] = r * 1000003u + i;
    auto t0 = clk::now();
    if (nwords) memcpy(payw + size_t(r % regions) * nwords, payload.data(), 4ull * nwords);
    _mm_sfence();
    flagw[0] = r;
    _mm_sfence();
    bool seen = false;
    uint32_t g = 0;
    for (;;) {
      while (g < groups && outw[16 * g] == r) g++;
      if (g == groups) { seen = true; break; }
      if (us(t0, clk::now()) > (r == 1 ? 5e6 : 5e5)) break;
    }
    auto t1 = clk::now();
    if (!seen) { timeouts++; printf("round %u: no answer from group %u of the kernel within the bound (status word 0x%x)\n", r, g, outw[16 * g + 1]); break; }
    answered++;
    uint32_t bad = 0, dead = 0;
    for (g = 0; g < groups; g++) { uint32_t st = outw[16 * g + 1]; if (st >> 16 == 0xdead) dead = st; else bad += st; }
    if (bad || dead) {
      if (!bad_rounds) first_bad = r;
      bad_rounds++;
      if (bad_rounds <= 3) printf("round %u: the kernel read %u of %u payload words other than the host wrote\n", r, bad, nwords);
      if (dead) { printf("round %u: the kernel gave up waiting for the flag (status 0x%x)\n", r, dead); break; }
    }
    if (r > 1) rt.push_back(us(t0, t1));
  }
  flagw[0] = 0xffffffffu;  // release a kernel still polling
  _mm_sfence();
  VkResult fr = vkWaitForFences(d, 1, &fence, VK_TRUE, 20ull * 1000000000ull);
  printf("kernel finished: %s after %.0f ms\n", fr == VK_SUCCESS ? "yes" : "NO (timeout)", us(t_start, clk::now()) / 1000);
  if (!rt.empty()) {
    std::sort(rt.begin(), rt.end());
    auto pct = [&](double p) { return rt[std::min<size_t>(rt.size() - 1, size_t(p * rt.size()))]; };
    printf("round trips host->GPU->host: %zu, min %.2f us, median %.2f us, p90 %.2f us, p99 %.2f us, max %.2f us\n", rt.size(),
           rt.front(), pct(0.5), pct(0.9), pct(0.99), rt.back());
  }
  printf("result %s: %u of %u rounds answered, %u with a wrong payload (first: round %u), %u timeouts\n", mode.c_str(), answered,
         rounds, bad_rounds, first_bad, timeouts);
  return (answered == rounds && !bad_rounds && fr == VK_SUCCESS) ? 0 : 1;
}
