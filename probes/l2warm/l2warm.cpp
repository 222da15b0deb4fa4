// l2warm: while a GPU waits at an AllReduce boundary (the relay kernel spinning for the
// host's sum, some 7 us on an H200), its memory is idle; the work after the boundary
// begins with a matrix-vector product that streams tens of MB of weights. Does reading the
// first part of those weights during the wait (a second dispatch beside the waiting one,
// no barrier between them) leave them in the L2 so that the product after the barrier runs
// shorter, and by how much? A standalone probe, not part of tpar.
//
//   l2warm [mib] [wait_us] [steps] [reps]
//
// A step stands in for one boundary and the product after it: `spin` waits wait_us on
// the device clock (one invocation in each of 4 work groups, as small as the relay's
// kernel), `warm` reads the first W MiB of the step's weights and keeps nothing, `gemv`
// reads all `mib` MiB of them and writes a sum a work group. The steps' weights rotate
// through 8 slices, so no step finds its weights left in the L2 by the step before. Each
// row is `steps` steps in one command buffer between two timestamps; it reports the
// GPU's span divided by the steps (median and p90 over `reps` repetitions). The last
// step's sums are checked against the slice's contents, and the spin's measured wait
// against wait_us.
#include <vulkan/vulkan.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "shaders_spv.h"

#define CK(x) do { VkResult r_ = (x); if (r_ != VK_SUCCESS) { std::printf("FAIL %s -> %d (line %d)\n", #x, r_, __LINE__); std::exit(1); } } while (0)

static void usage(FILE* f) {
  std::fprintf(f,
               "usage: l2warm [mib] [wait_us] [steps] [reps]\n"
               "  mib      MiB of weights a step's product reads (default 32, 1..512)\n"
               "  wait_us  how long each step's spin waits, us (default 7, 0..1000; 0 leaves the spin out)\n"
               "  steps    steps a row (default 64, 2..1024)\n"
               "  reps     repetitions a row (default 20, 3..1000)\n"
               "environment: PD=<index> picks the physical device (default 0); GROUPS=<n> the product's\n"
               "work groups (default 2048)\n");
}

static bool parse(const char* s, long lo, long hi, long& out) {
  char* e = nullptr;
  long v = std::strtol(s, &e, 10);
  if (!*s || *e || v < lo || v > hi) return false;
  out = v;
  return true;
}

int main(int argc, char** argv) {
  long mib = 32, wait_us = 7, steps = 64, reps = 20, groups = 2048;
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) { usage(stdout); return 0; }
  if (argc > 5 || (argc > 1 && !parse(argv[1], 1, 512, mib)) || (argc > 2 && !parse(argv[2], 0, 1000, wait_us)) ||
      (argc > 3 && !parse(argv[3], 2, 1024, steps)) || (argc > 4 && !parse(argv[4], 3, 1000, reps)) ||
      (std::getenv("GROUPS") && !parse(std::getenv("GROUPS"), 1, 65535, groups))) {
    usage(stderr);
    return 2;
  }
  constexpr long slices = 8;

  VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO}; ai.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO}; ici.pApplicationInfo = &ai;
  VkInstance inst; CK(vkCreateInstance(&ici, nullptr, &inst));
  uint32_t n = 0; vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n); vkEnumeratePhysicalDevices(inst, &n, pds.data());
  const long pdi = std::getenv("PD") ? std::atol(std::getenv("PD")) : 0;
  if (!n || pdi < 0 || pdi >= long(n)) { std::fprintf(stderr, "l2warm: no physical device %ld (%u found)\n", pdi, n); return 1; }
  VkPhysicalDevice pd = pds[pdi];
  VkPhysicalDeviceProperties props; vkGetPhysicalDeviceProperties(pd, &props);
  VkPhysicalDeviceMemoryProperties mp; vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  uint32_t qn = 0; vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, nullptr);
  std::vector<VkQueueFamilyProperties> qf(qn); vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf.data());
  uint32_t qfi = 0; for (; qfi < qn; qfi++) if (qf[qfi].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
  if (qfi == qn || qf[qfi].timestampValidBits == 0) { std::fprintf(stderr, "l2warm: no compute queue with timestamps\n"); return 1; }
  const VkDeviceSize slice = VkDeviceSize(mib) << 20, total = slice * slices;
  if (total > props.limits.maxStorageBufferRange) {
    std::fprintf(stderr, "l2warm: %ld MiB x %ld slices exceed the device's storage buffer range (%u bytes)\n", mib, slices,
                 props.limits.maxStorageBufferRange);
    return 2;
  }
  std::printf("# l2warm: %s (driver 0x%x), %ld MiB a step (%ld slices), spin %ld us, %ld steps, %ld repetitions, "
              "%ld product work groups\n",
              props.deviceName, props.driverVersion, mib, slices, wait_us, steps, reps, groups);

  VkPhysicalDeviceShaderClockFeaturesKHR clock{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_CLOCK_FEATURES_KHR};
  VkPhysicalDeviceFeatures2 f2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2}; f2.pNext = &clock;
  vkGetPhysicalDeviceFeatures2(pd, &f2);
  if (!clock.shaderDeviceClock) { std::fprintf(stderr, "l2warm: the device lacks VK_KHR_shader_clock's shaderDeviceClock\n"); return 1; }
  clock.shaderSubgroupClock = VK_FALSE;
  const char* exts[] = {VK_KHR_SHADER_CLOCK_EXTENSION_NAME};
  float pr = 1; VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}; qci.queueFamilyIndex = qfi; qci.queueCount = 1; qci.pQueuePriorities = &pr;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO}; dci.pNext = &clock; dci.queueCreateInfoCount = 1; dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = 1; dci.ppEnabledExtensionNames = exts;
  VkDevice d; CK(vkCreateDevice(pd, &dci, nullptr, &d));
  VkQueue q; vkGetDeviceQueue(d, qfi, 0, &q);

  auto pick = [&](uint32_t bits, VkMemoryPropertyFlags want) -> int {
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
      if ((bits >> i & 1) && (mp.memoryTypes[i].propertyFlags & want) == want) return int(i);
    return -1;
  };
  auto make = [&](VkDeviceSize bytes, VkBufferUsageFlags usage, VkMemoryPropertyFlags want, VkBuffer& b, VkDeviceMemory& m) {
    VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO}; bci.size = bytes; bci.usage = usage;
    CK(vkCreateBuffer(d, &bci, nullptr, &b));
    VkMemoryRequirements mr; vkGetBufferMemoryRequirements(d, b, &mr);
    int t = pick(mr.memoryTypeBits, want);
    if (t < 0 && want == VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT) t = pick(mr.memoryTypeBits, 0);
    if (t < 0) { std::fprintf(stderr, "l2warm: no memory type for a buffer\n"); std::exit(1); }
    VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO}; mai.allocationSize = mr.size; mai.memoryTypeIndex = uint32_t(t);
    CK(vkAllocateMemory(d, &mai, nullptr, &m)); CK(vkBindBufferMemory(d, b, m, 0));
  };
  // The weights (device-local) and the outputs (host-visible: the spin's waits at word
  // 1024 on, the product's sums at word 2048 on).
  VkBuffer wbuf, obuf; VkDeviceMemory wmem, omem;
  make(total, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, wbuf, wmem);
  const VkDeviceSize obytes = 4ull * (2048 + 65536);
  make(obytes, VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
       VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, obuf, omem);
  uint32_t* out = nullptr; CK(vkMapMemory(d, omem, 0, VK_WHOLE_SIZE, 0, reinterpret_cast<void**>(&out)));

  VkDescriptorSetLayoutBinding bnd[2] = {{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr},
                                         {1, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr}};
  VkDescriptorSetLayoutCreateInfo dslci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO}; dslci.bindingCount = 2; dslci.pBindings = bnd;
  VkDescriptorSetLayout dsl; CK(vkCreateDescriptorSetLayout(d, &dslci, nullptr, &dsl));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 16};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO}; plci.setLayoutCount = 1; plci.pSetLayouts = &dsl; plci.pushConstantRangeCount = 1; plci.pPushConstantRanges = &pcr;
  VkPipelineLayout pl; CK(vkCreatePipelineLayout(d, &plci, nullptr, &pl));
  auto pipeline = [&](const uint32_t* code, size_t bytes) {
    VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO}; smci.codeSize = bytes; smci.pCode = code;
    VkShaderModule sm; CK(vkCreateShaderModule(d, &smci, nullptr, &sm));
    VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    cpci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, sm, "main", nullptr}; cpci.layout = pl;
    VkPipeline p; CK(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, nullptr, &p));
    return p;
  };
  const VkPipeline spin_p = pipeline(spin_spv, sizeof(spin_spv)), warm_p = pipeline(warm_spv, sizeof(warm_spv)),
                   gemv_p = pipeline(gemv_spv, sizeof(gemv_spv));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 2};
  VkDescriptorPoolCreateInfo dpci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO}; dpci.maxSets = 1; dpci.poolSizeCount = 1; dpci.pPoolSizes = &ps;
  VkDescriptorPool dp; CK(vkCreateDescriptorPool(d, &dpci, nullptr, &dp));
  VkDescriptorSetAllocateInfo dsai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO}; dsai.descriptorPool = dp; dsai.descriptorSetCount = 1; dsai.pSetLayouts = &dsl;
  VkDescriptorSet ds; CK(vkAllocateDescriptorSets(d, &dsai, &ds));
  VkDescriptorBufferInfo dbi[2] = {{wbuf, 0, VK_WHOLE_SIZE}, {obuf, 0, VK_WHOLE_SIZE}};
  VkWriteDescriptorSet wds[2];
  for (int i = 0; i < 2; i++) {
    wds[i] = VkWriteDescriptorSet{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET}; wds[i].dstSet = ds; wds[i].dstBinding = uint32_t(i);
    wds[i].descriptorCount = 1; wds[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER; wds[i].pBufferInfo = &dbi[i];
  }
  vkUpdateDescriptorSets(d, 2, wds, 0, nullptr);

  VkQueryPoolCreateInfo qpci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO}; qpci.queryType = VK_QUERY_TYPE_TIMESTAMP; qpci.queryCount = 2;
  VkQueryPool qp; CK(vkCreateQueryPool(d, &qpci, nullptr, &qp));
  VkCommandPoolCreateInfo cpi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO}; cpi.queueFamilyIndex = qfi;
  cpi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  VkCommandPool cp; CK(vkCreateCommandPool(d, &cpi, nullptr, &cp));
  VkCommandBufferAllocateInfo cbai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO}; cbai.commandPool = cp; cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY; cbai.commandBufferCount = 1;
  VkCommandBuffer cb; CK(vkAllocateCommandBuffers(d, &cbai, &cb));
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}; VkFence fence; CK(vkCreateFence(d, &fci, nullptr, &fence));
  auto begin = [&] {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    CK(vkResetCommandBuffer(cb, 0)); CK(vkBeginCommandBuffer(cb, &bi));
  };
  auto run = [&] {
    CK(vkEndCommandBuffer(cb));
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &cb;
    CK(vkQueueSubmit(q, 1, &si, fence));
    CK(vkWaitForFences(d, 1, &fence, VK_TRUE, 60ull * 1000000000ull));
    CK(vkResetFences(d, 1, &fence));
  };
  auto barrier = [&] {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  };

  // Slice s holds the word (s + 1) * 0x01010101 everywhere: its sum is known.
  begin();
  for (long s = 0; s < slices; s++) vkCmdFillBuffer(cb, wbuf, VkDeviceSize(s) * slice, slice, uint32_t(s + 1) * 0x01010101u);
  run();
  const uint32_t slice_words16 = uint32_t(slice / 16);

  auto dispatch = [&](VkPipeline p, uint32_t a, uint32_t b, uint32_t wgs) {
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p);
    uint32_t pc[4] = {a, b, 0, 0};
    vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 16, pc);
    vkCmdDispatch(cb, wgs, 1, 1);
  };
  // A row: each step's parts, as letters: s the spin, w the warm, b a barrier, g the
  // product (the warm reads `warm_mib` of the slice the step's product reads).
  struct Row { std::string recipe; long warm_mib; };
  std::vector<Row> rows = {{"gb", 0}, {"sbgb", 0}};
  const long warm_sizes[] = {4, 8, 12, 16, 24, 32, 48};
  for (long w : warm_sizes)
    if (w <= mib) rows.push_back({"swbgb", w});
  for (long w : warm_sizes)
    if (w <= mib && (w == 8 || w == 16)) rows.push_back({"wbgb", w});
  for (long w : warm_sizes)
    if (w <= mib && (w == 8 || w == 16 || w == 32)) rows.push_back({"swb", w});
  rows.push_back({"sb", 0});
  if (wait_us == 0)
    rows.erase(std::remove_if(rows.begin(), rows.end(), [](const Row& r) { return r.recipe.find('s') != std::string::npos; }),
               rows.end());

  std::printf("%-8s %6s %10s %10s %10s  %s\n", "row", "warm", "us/step", "p90", "vs_sbgb", "what");
  double sbgb = 0;
  for (const Row& row : rows) {
    begin();
    vkCmdResetQueryPool(cb, qp, 0, 2);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &ds, 0, nullptr);
    barrier();
    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 0);
    long last_slice = 0;
    for (long k = 0; k < steps; k++) {
      const long s = k % slices;
      last_slice = s;
      const uint32_t first = uint32_t(s) * slice_words16;
      for (char c : row.recipe) {
        if (c == 's') dispatch(spin_p, uint32_t(wait_us * 1000), 0, 4);
        else if (c == 'w') dispatch(warm_p, first, uint32_t((VkDeviceSize(row.warm_mib) << 20) / 16), uint32_t(groups));
        else if (c == 'g') dispatch(gemv_p, first, slice_words16, uint32_t(groups));
        else barrier();
      }
    }
    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 1);
    CK(vkEndCommandBuffer(cb));
    std::vector<double> per;
    bool wrong = false;
    double waited_us = 0;
    for (long r = 0; r < reps + 2; r++) {
      std::memset(out, 0, obytes);
      VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &cb;
      CK(vkQueueSubmit(q, 1, &si, fence));
      CK(vkWaitForFences(d, 1, &fence, VK_TRUE, 60ull * 1000000000ull));
      CK(vkResetFences(d, 1, &fence));
      uint64_t ts[2] = {0, 0};
      CK(vkGetQueryPoolResults(d, qp, 0, 2, sizeof(ts), ts, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
      const uint64_t mask = qf[qfi].timestampValidBits < 64 ? (1ull << qf[qfi].timestampValidBits) - 1 : ~0ull;
      const double span_us = double((ts[1] - ts[0]) & mask) * props.limits.timestampPeriod / 1000.0;
      if (row.recipe.find('g') != std::string::npos) {
        uint32_t sum = 0;
        for (long g = 0; g < groups; g++) sum += out[2048 + g];
        const uint32_t word = uint32_t(last_slice + 1) * 0x01010101u;
        if (sum != uint32_t(uint64_t(word) * 4u * slice_words16)) wrong = true;
      }
      if (row.recipe.find('s') != std::string::npos) {
        waited_us = out[1024] / 1000.0;
        if (out[1024] < uint32_t(wait_us * 1000)) wrong = true;
      }
      if (r < 2) continue;  // warm-up
      per.push_back(span_us / double(steps));
    }
    std::sort(per.begin(), per.end());
    const double med = per[per.size() / 2], p90 = per[std::min(per.size() - 1, per.size() * 9 / 10)];
    if (row.recipe == "sbgb") sbgb = med;
    std::string what;
    for (char c : row.recipe)
      what += c == 's' ? "spin " : c == 'w' ? "warm " : c == 'g' ? "product " : "| ";
    char vs[32] = "-";
    if (sbgb > 0 && row.recipe.find('g') != std::string::npos && row.recipe != "sbgb") std::snprintf(vs, sizeof vs, "%+.3f", med - sbgb);
    std::printf("%-8s %6ld %10.3f %10.3f %10s  %s(spin measured %.2f us)%s\n", row.recipe.c_str(), row.warm_mib, med, p90, vs,
                what.c_str(), waited_us, wrong ? " -- WRONG RESULT" : "");
    if (wrong) return 1;
  }
  std::printf("# vs_sbgb: us a step against spin | product (negative: the warm during the spin saved that much)\n");
  vkDestroyDevice(d, nullptr);
  vkDestroyInstance(inst, nullptr);
  return 0;
}
