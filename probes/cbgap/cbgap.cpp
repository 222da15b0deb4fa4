// cbgap: what does a GPU pay, on its own timeline, for ending one command buffer and
// starting the next, against a barrier inside one command buffer? A decode token under
// tpar's streams is ggml's command buffers and tpar's, alternating at every AllReduce;
// this settles whether recording tpar's dispatch into ggml's command buffer would shorten
// the token. A standalone probe, not part of tpar.
//
//   cbgap [steps] [words] [reps]
//
// Every row runs `steps` dependent dispatches (each updates `words` 32-bit words the one
// before wrote, a compute-to-compute barrier in front of each), arranged as the row says,
// and reports the GPU's span from a timestamp before the first dispatch to one after the
// last, divided by the steps (median and p90 over `reps` repetitions), and the host's
// time from the vkQueueSubmit to the fence. The buffer's final words are checked.
#include <vulkan/vulkan.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>
#include "step_spv.h"

#define CK(x) do { VkResult r_ = (x); if (r_ != VK_SUCCESS) { std::printf("FAIL %s -> %d (line %d)\n", #x, r_, __LINE__); std::exit(1); } } while (0)
using clk = std::chrono::steady_clock;

static void usage(FILE* f) {
  std::fprintf(f,
               "usage: cbgap [steps] [words] [reps]\n"
               "  steps  dependent dispatches a row (default 256, 8..4096)\n"
               "  words  32-bit words each dispatch updates (default 4096 = 16 KiB, 1..1048576)\n"
               "  reps   repetitions a row (default 30, 3..1000)\n"
               "environment: PD=<index> picks the physical device (default 0)\n");
}

static bool parse(const char* s, long lo, long hi, long& out) {
  char* e = nullptr;
  long v = std::strtol(s, &e, 10);
  if (!*s || *e || v < lo || v > hi) return false;
  out = v;
  return true;
}

int main(int argc, char** argv) {
  long steps = 256, words = 4096, reps = 30;
  if (argc > 1 && (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h"))) { usage(stdout); return 0; }
  if (argc > 4 || (argc > 1 && !parse(argv[1], 8, 4096, steps)) || (argc > 2 && !parse(argv[2], 1, 1 << 20, words)) ||
      (argc > 3 && !parse(argv[3], 3, 1000, reps))) {
    usage(stderr);
    return 2;
  }

  VkApplicationInfo ai{VK_STRUCTURE_TYPE_APPLICATION_INFO}; ai.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ici{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO}; ici.pApplicationInfo = &ai;
  VkInstance inst; CK(vkCreateInstance(&ici, nullptr, &inst));
  uint32_t n = 0; vkEnumeratePhysicalDevices(inst, &n, nullptr);
  std::vector<VkPhysicalDevice> pds(n); vkEnumeratePhysicalDevices(inst, &n, pds.data());
  const long pdi = std::getenv("PD") ? std::atol(std::getenv("PD")) : 0;
  if (!n || pdi < 0 || pdi >= long(n)) { std::fprintf(stderr, "cbgap: no physical device %ld (%u found)\n", pdi, n); return 1; }
  VkPhysicalDevice pd = pds[pdi];
  VkPhysicalDeviceProperties props; vkGetPhysicalDeviceProperties(pd, &props);
  VkPhysicalDeviceMemoryProperties mp; vkGetPhysicalDeviceMemoryProperties(pd, &mp);
  uint32_t qn = 0; vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, nullptr);
  std::vector<VkQueueFamilyProperties> qf(qn); vkGetPhysicalDeviceQueueFamilyProperties(pd, &qn, qf.data());
  uint32_t qfi = 0; for (; qfi < qn; qfi++) if (qf[qfi].queueFlags & VK_QUEUE_COMPUTE_BIT) break;
  if (qfi == qn || qf[qfi].timestampValidBits == 0) { std::fprintf(stderr, "cbgap: no compute queue with timestamps\n"); return 1; }
  std::printf("# cbgap: %s (driver 0x%x), %ld steps of %ld words, %ld repetitions a row\n", props.deviceName,
              props.driverVersion, steps, words, reps);

  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES}; f12.timelineSemaphore = VK_TRUE;
  float pr = 1; VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO}; qci.queueFamilyIndex = qfi; qci.queueCount = 1; qci.pQueuePriorities = &pr;
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO}; dci.pNext = &f12; dci.queueCreateInfoCount = 1; dci.pQueueCreateInfos = &qci;
  VkDevice d; CK(vkCreateDevice(pd, &dci, nullptr, &d));
  VkQueue q; vkGetDeviceQueue(d, qfi, 0, &q);

  // The buffer: device-local where offered, host-visible to check the result (a staging copy otherwise).
  const VkDeviceSize bytes = 4ull * words;
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO}; bci.size = bytes;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer buf; CK(vkCreateBuffer(d, &bci, nullptr, &buf));
  VkMemoryRequirements mr; vkGetBufferMemoryRequirements(d, buf, &mr);
  auto pick = [&](uint32_t bits, VkMemoryPropertyFlags want) -> int {
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
      if ((bits >> i & 1) && (mp.memoryTypes[i].propertyFlags & want) == want) return int(i);
    return -1;
  };
  int t = pick(mr.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT);
  if (t < 0) t = pick(mr.memoryTypeBits, 0);
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO}; mai.allocationSize = mr.size; mai.memoryTypeIndex = uint32_t(t);
  VkDeviceMemory mem; CK(vkAllocateMemory(d, &mai, nullptr, &mem)); CK(vkBindBufferMemory(d, buf, mem, 0));
  bci.usage = VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer host; CK(vkCreateBuffer(d, &bci, nullptr, &host));
  vkGetBufferMemoryRequirements(d, host, &mr);
  const int th = pick(mr.memoryTypeBits, VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT);
  if (th < 0) { std::fprintf(stderr, "cbgap: no host-visible coherent memory\n"); return 1; }
  mai.allocationSize = mr.size; mai.memoryTypeIndex = uint32_t(th);
  VkDeviceMemory hmem; CK(vkAllocateMemory(d, &mai, nullptr, &hmem)); CK(vkBindBufferMemory(d, host, hmem, 0));
  uint32_t* hp = nullptr; CK(vkMapMemory(d, hmem, 0, VK_WHOLE_SIZE, 0, reinterpret_cast<void**>(&hp)));

  VkShaderModuleCreateInfo smci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO}; smci.codeSize = sizeof(step_spv); smci.pCode = step_spv;
  VkShaderModule sm; CK(vkCreateShaderModule(d, &smci, nullptr, &sm));
  VkDescriptorSetLayoutBinding bnd{0, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
  VkDescriptorSetLayoutCreateInfo dslci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO}; dslci.bindingCount = 1; dslci.pBindings = &bnd;
  VkDescriptorSetLayout dsl; CK(vkCreateDescriptorSetLayout(d, &dslci, nullptr, &dsl));
  VkPushConstantRange pcr{VK_SHADER_STAGE_COMPUTE_BIT, 0, 8};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO}; plci.setLayoutCount = 1; plci.pSetLayouts = &dsl; plci.pushConstantRangeCount = 1; plci.pPushConstantRanges = &pcr;
  VkPipelineLayout pl; CK(vkCreatePipelineLayout(d, &plci, nullptr, &pl));
  VkComputePipelineCreateInfo cpci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cpci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, nullptr, 0, VK_SHADER_STAGE_COMPUTE_BIT, sm, "main", nullptr}; cpci.layout = pl;
  // Two pipelines of the one shader and two descriptor sets of the one buffer: the rows
  // marked "alt" bind the other pair at every step, as a real graph's dispatches switch
  // pipelines, so that a driver's skipping of a repeated bind does not flatter one-cb.
  VkPipeline pipes[2];
  CK(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, nullptr, &pipes[0]));
  CK(vkCreateComputePipelines(d, VK_NULL_HANDLE, 1, &cpci, nullptr, &pipes[1]));
  // A third set names a small buffer of its own, for the rows whose command buffers start
  // with other work (lead).
  VkBufferCreateInfo dbci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO}; dbci.size = 1024;
  dbci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  VkBuffer dummy; CK(vkCreateBuffer(d, &dbci, nullptr, &dummy));
  VkMemoryRequirements dmr; vkGetBufferMemoryRequirements(d, dummy, &dmr);
  VkMemoryAllocateInfo dmai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO}; dmai.allocationSize = dmr.size; dmai.memoryTypeIndex = uint32_t(t);
  VkDeviceMemory dmem; CK(vkAllocateMemory(d, &dmai, nullptr, &dmem)); CK(vkBindBufferMemory(d, dummy, dmem, 0));
  VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 3};
  VkDescriptorPoolCreateInfo dpci{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO}; dpci.maxSets = 3; dpci.poolSizeCount = 1; dpci.pPoolSizes = &ps;
  VkDescriptorPool dp; CK(vkCreateDescriptorPool(d, &dpci, nullptr, &dp));
  const VkDescriptorSetLayout dsls[3] = {dsl, dsl, dsl};
  VkDescriptorSetAllocateInfo dsai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO}; dsai.descriptorPool = dp; dsai.descriptorSetCount = 3; dsai.pSetLayouts = dsls;
  VkDescriptorSet dss[3]; CK(vkAllocateDescriptorSets(d, &dsai, dss));
  for (int i = 0; i < 3; i++) {
    VkDescriptorBufferInfo dbi{i < 2 ? buf : dummy, 0, VK_WHOLE_SIZE};
    VkWriteDescriptorSet wds{VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET}; wds.dstSet = dss[i]; wds.descriptorCount = 1; wds.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER; wds.pBufferInfo = &dbi;
    vkUpdateDescriptorSets(d, 1, &wds, 0, nullptr);
  }

  VkQueryPoolCreateInfo qpci{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO}; qpci.queryType = VK_QUERY_TYPE_TIMESTAMP; qpci.queryCount = 2;
  VkQueryPool qp; CK(vkCreateQueryPool(d, &qpci, nullptr, &qp));
  VkCommandPoolCreateInfo cpi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO}; cpi.queueFamilyIndex = qfi;
  cpi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  VkCommandPool cp; CK(vkCreateCommandPool(d, &cpi, nullptr, &cp));
  cpi.flags |= VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  VkCommandPool cp_transient; CK(vkCreateCommandPool(d, &cpi, nullptr, &cp_transient));
  std::vector<VkCommandBuffer> cbs(size_t(steps) + 2), tcbs(static_cast<size_t>(steps));
  VkCommandBufferAllocateInfo cbai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO}; cbai.commandPool = cp; cbai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY; cbai.commandBufferCount = uint32_t(cbs.size());
  CK(vkAllocateCommandBuffers(d, &cbai, cbs.data()));
  cbai.commandPool = cp_transient; cbai.commandBufferCount = uint32_t(tcbs.size());
  CK(vkAllocateCommandBuffers(d, &cbai, tcbs.data()));
  cbai.commandPool = cp;
  std::vector<VkCommandBuffer> secs(static_cast<size_t>(steps));
  cbai.level = VK_COMMAND_BUFFER_LEVEL_SECONDARY; cbai.commandBufferCount = uint32_t(secs.size());
  CK(vkAllocateCommandBuffers(d, &cbai, secs.data()));
  VkSemaphoreTypeCreateInfo stci{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO}; stci.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
  VkSemaphoreCreateInfo sci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO}; sci.pNext = &stci;
  VkSemaphore sem; CK(vkCreateSemaphore(d, &sci, nullptr, &sem));
  uint64_t sem_value = 0;
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO}; VkFence fence; CK(vkCreateFence(d, &fci, nullptr, &fence));

  const uint32_t groups = uint32_t((words + 255) / 256);
  // How a step's barrier is placed: before its dispatch (every row but these), after it
  // (the next command buffer then starts with the dispatch), or left out (timing only).
  enum Barrier { BEFORE, AFTER, NONE, NARROW, BUFFER };
  enum Lead { LEAD_NONE, LEAD_DISPATCH, LEAD_FILL, LEAD_BIND };
  auto barrier = [&](VkCommandBuffer cb) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  };
  // NARROW: compute to compute, shader writes to shader reads and writes only. BUFFER: the
  // probe's barrier as a buffer memory barrier on the one buffer.
  auto barrier_of = [&](VkCommandBuffer cb, Barrier kind) {
    if (kind == NARROW) {
      VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
      mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    } else if (kind == BUFFER) {
      VkBufferMemoryBarrier bb{VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER};
      bb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      bb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
      bb.srcQueueFamilyIndex = bb.dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED;
      bb.buffer = buf; bb.offset = 0; bb.size = VK_WHOLE_SIZE;
      vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 0, nullptr, 1, &bb, 0, nullptr);
    } else {
      barrier(cb);
    }
  };
  auto step = [&](VkCommandBuffer cb, uint32_t k, bool alt = false, Barrier where = BEFORE) {
    if (where == BEFORE || where == NARROW || where == BUFFER) barrier_of(cb, where);
    const uint32_t which = alt ? k & 1u : 0u;
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[which]);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &dss[which], 0, nullptr);
    uint32_t pc[2] = {uint32_t(words), k};
    vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 8, pc);
    vkCmdDispatch(cb, groups, 1, 1);
    if (where == AFTER) barrier(cb);
  };
  // A step as a recipe of commands, one letter each: d a one-group dispatch into another
  // buffer (as the relay's kernel before a step), f a 4-byte fill of that buffer (as
  // ggml-vulkan zeroing its add/rms partials), b a barrier, n a narrow one (NARROW), w a
  // wide one (compute and transfer to compute and transfer, their reads and writes, as
  // ggml_vk_sync_buffers records), s the step's dispatch (no barrier of its own). With
  // mode 0 every step's recipe goes into one command buffer.
  auto record_recipe = [&](VkCommandBuffer cb, uint32_t k, const char* recipe) {
    for (const char* c = recipe; *c; ++c) {
      if (*c == 'b') {
        barrier(cb);
      } else if (*c == 'n') {
        barrier_of(cb, NARROW);
      } else if (*c == 'w') {
        VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
        mb.srcAccessMask = mb.dstAccessMask =
            VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
        const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
        vkCmdPipelineBarrier(cb, st, st, 0, 1, &mb, 0, nullptr, 0, nullptr);
      } else if (*c == 's') {
        step(cb, k, false, NONE);
      } else if (*c == 'f') {
        vkCmdFillBuffer(cb, dummy, 0, 4, 0);
      } else if (*c == 'd') {
        vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[1]);
        vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &dss[2], 0, nullptr);
        uint32_t pc[2] = {1u, 0u};
        vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 8, pc);
        vkCmdDispatch(cb, 1, 1, 1);
      }
    }
  };
  auto begin = [&](VkCommandBuffer cb, VkCommandBufferUsageFlags usage = 0) {
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    bi.flags = usage;
    CK(vkResetCommandBuffer(cb, 0));
    CK(vkBeginCommandBuffer(cb, &bi));
  };
  // cbs[0]: zero the buffer, reset the queries, first stamp. cbs[last]: last stamp, copy out.
  auto record_ends = [&]() {
    begin(cbs.front());
    vkCmdFillBuffer(cbs.front(), buf, 0, bytes, 0);
    vkCmdResetQueryPool(cbs.front(), qp, 0, 2);
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT; mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cbs.front(), VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    vkCmdWriteTimestamp(cbs.front(), VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 0);
    CK(vkEndCommandBuffer(cbs.front()));
    VkCommandBuffer cb = cbs.back();
    begin(cb);
    VkMemoryBarrier b2{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    b2.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT; b2.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &b2, 0, nullptr, 0, nullptr);
    vkCmdWriteTimestamp(cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, qp, 1);
    VkBufferCopy bc{0, 0, bytes};
    vkCmdCopyBuffer(cb, buf, host, 1, &bc);
    CK(vkEndCommandBuffer(cb));
  };
  // The expected words after `steps` steps from zero: v = v * 3 + k for k = 1..steps.
  uint32_t expect = 0;
  for (long k = 1; k <= steps; k++) expect = expect * 3u + uint32_t(k);

  // mode 1 rows may differ from cb-N in one way each: begin flags, the pool, the binds,
  // or where the barrier goes.
  struct Row { const char* name; const char* what; int mode; long per_cb; VkCommandBufferUsageFlags usage = 0;
               bool transient = false; bool alt = false; Barrier where = BEFORE; bool end_barrier = false;
               int lead = 0;  // lead: what each command buffer starts with before its first step (LEAD_*)
               const char* recipe = nullptr; };  // see record_recipe
  const Row rows[] = {
      {"one-cb", "every step in one command buffer, a barrier between steps", 0, 0},
      {"cb-8", "8 steps a command buffer, one batch", 1, 8},
      {"cb-2", "2 steps a command buffer, one batch", 1, 2},
      {"cb-1", "1 step a command buffer, one batch", 1, 1},
      {"batch-1", "1 step a command buffer, a batch each, one vkQueueSubmit", 2, 1},
      {"batch-1-signal", "as batch-1, each batch signalling a timeline semaphore", 3, 1},
      {"submit-1", "1 step a command buffer, a vkQueueSubmit each", 4, 1},
      {"secondary-1", "one command buffer executing a secondary command buffer a step", 5, 1},
      {"one-cb-alt", "as one-cb, binding the other of two pipelines and descriptor sets each step", 0, 0, 0, false, true},
      {"cb-1-alt", "as cb-1, binding the other of two pipelines and descriptor sets each step", 1, 1, 0, false, true},
      {"cb-1-onetime", "as cb-1, begun with ONE_TIME_SUBMIT", 1, 1, VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT},
      {"cb-1-simultaneous", "as cb-1, begun with SIMULTANEOUS_USE", 1, 1, VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT},
      {"cb-1-transient", "as cb-1, from a TRANSIENT command pool", 1, 1, 0, true},
      {"cb-1-barrier-end", "as cb-1, the barrier at the end of each command buffer, not the start", 1, 1, 0, false, false, AFTER},
      {"cb-1-both", "as cb-1, with one more barrier at the end of each command buffer", 1, 1, 0, false, false, BEFORE, true},
      {"cb-8-both", "as cb-8, with one more barrier at the end of each command buffer", 1, 8, 0, false, false, BEFORE, true},
      {"cb-1-alt-both", "as cb-1-alt, with one more barrier at the end of each command buffer", 1, 1, 0, false, true, BEFORE, true},
      {"cb-1-lead-dispatch", "as cb-1, each command buffer starting with a one-group dispatch into another buffer", 1, 1, 0, false, false, BEFORE, false, LEAD_DISPATCH},
      {"cb-1-lead-fill", "as cb-1, each command buffer starting with a 4-byte fill of another buffer", 1, 1, 0, false, false, BEFORE, false, LEAD_FILL},
      {"cb-1-lead-bind", "as cb-1, each command buffer binding its pipeline and set before the barrier", 1, 1, 0, false, false, BEFORE, false, LEAD_BIND},
      {"one-cb-narrow", "as one-cb, the barriers compute to compute, shader writes only", 0, 0, 0, false, false, NARROW},
      {"cb-1-narrow", "as cb-1, the barriers compute to compute, shader writes only", 1, 1, 0, false, false, NARROW},
      {"cb-1-buffer", "as cb-1, the barriers on the buffer rather than global", 1, 1, 0, false, false, BUFFER},
      // the shapes of ggml-vulkan's command buffer after an AllReduce: before patch 0017
      // (barrier, fill, barrier, barrier, the relay's kernel, barrier, work) and with it
      // (the kernel, barrier, fill, barrier, work, barrier), and the same in one command buffer
      {"one-cb-ggml-before", "one command buffer, each step as bfbbdbs (the shape before patch 0017)", 0, 0, 0, false, false, BEFORE, false, LEAD_NONE, "bfbbdbs"},
      {"cb-1-ggml-before", "a command buffer a step, each bfbbdbs", 1, 1, 0, false, false, BEFORE, false, LEAD_NONE, "bfbbdbs"},
      {"one-cb-ggml-0017", "one command buffer, each step as dbfbsb (patch 0017's shape)", 0, 0, 0, false, false, BEFORE, false, LEAD_NONE, "dbfbsb"},
      {"cb-1-ggml-0017", "a command buffer a step, each dbfbsb", 1, 1, 0, false, false, BEFORE, false, LEAD_NONE, "dbfbsb"},
      {"cb-1-ggml-0017-nofill", "a command buffer a step, each dbsb (no fill)", 1, 1, 0, false, false, BEFORE, false, LEAD_NONE, "dbsb"},
      // which barrier ends a command buffer: the probe's, a narrow one, ggml-vulkan's wide one
      {"one-cb-sn", "one command buffer, each step as sn", 0, 0, 0, false, false, BEFORE, false, LEAD_NONE, "sn"},
      {"cb-1-end-narrow", "a command buffer a step, each sn: a narrow barrier at the end", 1, 1, 0, false, false, BEFORE, false, LEAD_NONE, "sn"},
      {"one-cb-sw", "one command buffer, each step as sw", 0, 0, 0, false, false, BEFORE, false, LEAD_NONE, "sw"},
      {"cb-1-end-wide", "a command buffer a step, each sw: ggml-vulkan's wide barrier at the end", 1, 1, 0, false, false, BEFORE, false, LEAD_NONE, "sw"},
      // secondary command buffers with the barrier at the end: a primary that executes a
      // subgraph each, recorded once and replayed, would end no command buffer between them
      {"secondary-1-end", "one command buffer executing a secondary command buffer a step, each sb", 5, 1, 0, false, false, BEFORE, false, LEAD_NONE, "sb"},
      {"one-cb-no-barrier", "as one-cb with no barriers (timing only: the steps may overlap)", 0, 0, 0, false, false, NONE},
      {"cb-1-no-barrier", "as cb-1 with no barriers (timing only: the steps may overlap)", 1, 1, 0, false, false, NONE},
  };
  std::printf("# %-15s %10s %10s %12s %12s  %s\n", "row", "gpu_us/st", "p90", "host_us/st", "extra_us/cb", "what");
  // extra_us/cb is against the one-cb row of the same binds and barriers (one-cb,
  // one-cb-alt, one-cb-no-barrier), which comes first.
  double bases[2][3] = {};  // [alt][barriers: as one-cb, narrow, none]
  std::map<std::string, double> recipe_bases;
  for (const Row& row : rows) {
    record_ends();
    std::vector<VkCommandBuffer> mid;
    if (row.mode == 5) {
      VkCommandBufferInheritanceInfo inh{VK_STRUCTURE_TYPE_COMMAND_BUFFER_INHERITANCE_INFO};
      for (long k = 1; k <= steps; k++) {
        VkCommandBuffer sc = secs[size_t(k - 1)];
        CK(vkResetCommandBuffer(sc, 0));
        VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO}; bi.pInheritanceInfo = &inh;
        CK(vkBeginCommandBuffer(sc, &bi));
        if (row.recipe) record_recipe(sc, uint32_t(k), row.recipe);
        else step(sc, uint32_t(k), row.alt, row.where);
        CK(vkEndCommandBuffer(sc));
      }
      begin(cbs[1]);
      vkCmdExecuteCommands(cbs[1], uint32_t(steps), secs.data());
      CK(vkEndCommandBuffer(cbs[1]));
      mid.push_back(cbs[1]);
    } else if (row.mode == 0) {
      begin(cbs[1]);
      for (long k = 1; k <= steps; k++) {
        if (row.recipe) record_recipe(cbs[1], uint32_t(k), row.recipe);
        else step(cbs[1], uint32_t(k), row.alt, row.where);
      }
      CK(vkEndCommandBuffer(cbs[1]));
      mid.push_back(cbs[1]);
    } else {
      const long per = row.per_cb;
      for (long c = 0; c * per < steps; c++) {
        VkCommandBuffer cb = row.transient ? tcbs[size_t(c)] : cbs[size_t(1 + c)];
        begin(cb, row.usage);
        if (row.lead == LEAD_DISPATCH) {
          vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[1]);
          vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &dss[2], 0, nullptr);
          uint32_t pc[2] = {1u, 0u};
          vkCmdPushConstants(cb, pl, VK_SHADER_STAGE_COMPUTE_BIT, 0, 8, pc);
          vkCmdDispatch(cb, 1, 1, 1);
        } else if (row.lead == LEAD_FILL) {
          vkCmdFillBuffer(cb, dummy, 0, 4, 0);
        } else if (row.lead == LEAD_BIND) {
          vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipes[0]);
          vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pl, 0, 1, &dss[0], 0, nullptr);
        }
        for (long k = c * per + 1; k <= std::min(steps, (c + 1) * per); k++) {
          if (row.recipe) record_recipe(cb, uint32_t(k), row.recipe);
          else step(cb, uint32_t(k), row.alt, row.where);
        }
        if (row.end_barrier) barrier(cb);
        CK(vkEndCommandBuffer(cb));
        mid.push_back(cb);
      }
    }
    std::vector<double> gpu, hostt;
    bool wrong = false;
    for (long r = 0; r < reps + 2; r++) {
      std::vector<VkCommandBuffer> all;
      all.push_back(cbs.front());
      all.insert(all.end(), mid.begin(), mid.end());
      all.push_back(cbs.back());
      std::vector<VkSubmitInfo> sis;
      std::vector<VkTimelineSemaphoreSubmitInfo> tss(all.size());
      std::vector<uint64_t> vals(all.size());
      const auto t0 = clk::now();
      if (row.mode <= 1 || row.mode == 5) {
        VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = uint32_t(all.size()); si.pCommandBuffers = all.data();
        CK(vkQueueSubmit(q, 1, &si, fence));
      } else if (row.mode == 2 || row.mode == 3) {
        for (size_t i = 0; i < all.size(); i++) {
          VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &all[i];
          if (row.mode == 3) {
            vals[i] = ++sem_value;
            tss[i] = VkTimelineSemaphoreSubmitInfo{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
            tss[i].signalSemaphoreValueCount = 1; tss[i].pSignalSemaphoreValues = &vals[i];
            si.pNext = &tss[i]; si.signalSemaphoreCount = 1; si.pSignalSemaphores = &sem;
          }
          sis.push_back(si);
        }
        CK(vkQueueSubmit(q, uint32_t(sis.size()), sis.data(), fence));
      } else {
        for (size_t i = 0; i < all.size(); i++) {
          VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO}; si.commandBufferCount = 1; si.pCommandBuffers = &all[i];
          CK(vkQueueSubmit(q, 1, &si, i + 1 == all.size() ? fence : VK_NULL_HANDLE));
        }
      }
      CK(vkWaitForFences(d, 1, &fence, VK_TRUE, 10ull * 1000000000ull));
      const auto t1 = clk::now();
      CK(vkResetFences(d, 1, &fence));
      uint64_t ts[2] = {0, 0};
      CK(vkGetQueryPoolResults(d, qp, 0, 2, sizeof(ts), ts, 8, VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
      const uint64_t mask = props.limits.timestampPeriod > 0 && qf[qfi].timestampValidBits < 64 ? (1ull << qf[qfi].timestampValidBits) - 1 : ~0ull;
      const double span_us = double((ts[1] - ts[0]) & mask) * props.limits.timestampPeriod / 1000.0;
      for (long i = 0; i < words; i++) if (hp[i] != expect) { wrong = true; break; }
      if (r < 2) continue;  // warm-up
      gpu.push_back(span_us / double(steps));
      hostt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / double(steps));
    }
    std::sort(gpu.begin(), gpu.end());
    std::sort(hostt.begin(), hostt.end());
    const double med = gpu[gpu.size() / 2], p90 = gpu[std::min(gpu.size() - 1, gpu.size() * 9 / 10)];
    // a recipe row against the one-cb row of the same recipe (none: extra is the whole step)
    double& base = row.recipe ? recipe_bases[row.recipe] : bases[row.alt ? 1 : 0][row.where == NONE ? 2 : row.where == NARROW ? 1 : 0];
    if (row.mode == 0) base = med;
    const long cbs_n = row.mode == 0 ? 1 : row.mode == 5 ? steps : (steps + row.per_cb - 1) / row.per_cb;
    const double extra = row.mode == 0 ? 0.0 : (med - base) * double(steps) / double(cbs_n);
    std::printf("%-17s %10.3f %10.3f %12.3f %12.3f  %s%s\n", row.name, med, p90, hostt[hostt.size() / 2], extra, row.what,
                wrong ? (row.where == NONE ? " -- result differs (no barriers)" : " -- WRONG RESULT") : "");
    if (wrong && row.where != NONE) return 1;
  }
  std::printf("# extra_us/cb: the GPU span's excess over one-cb, per command buffer boundary\n");
  vkDestroyDevice(d, nullptr);
  vkDestroyInstance(inst, nullptr);
  return 0;
}
