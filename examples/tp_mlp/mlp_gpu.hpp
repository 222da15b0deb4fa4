// tp-mlp's Vulkan side: buffers, the two matmul pipelines per device, and a Shard -- the
// part of the MLP one device runs (its slices of W_up and W_down, or, for the reference,
// the whole MLP on device 0) -- recorded once per token count and submitted per step.
#pragma once

#include <tpar/tpar.hpp>

#include "common/vk_buffer.hpp"
#include "mlp_check.hpp"
#include "spirv/matmul_skinny.hpp"
#include "spirv/matmul_tiled.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace tp_mlp {

using tpar_example::Buffer;
using tpar_example::Failure;
using tpar_example::mib;
using tpar_example::vk_check;

inline constexpr std::uint32_t skinny_max_tokens = 8;  // matmul_skinny.comp: NMAX
inline constexpr std::uint32_t skinny_rows = 16;        // matmul_skinny.comp: ROWS (rows per work group)
inline constexpr std::int64_t tile_rows = 64;            // matmul_tiled.comp: BM (and BN)

// The push constants of shaders/matmul_common.glsl.
struct MatmulArgs {
  std::uint32_t M, N, K, ldc, c_off, act;
};
static_assert(sizeof(MatmulArgs) == 24);

// One device as tp-mlp uses it: the matmul pipelines, a command pool, a timeline its
// steps signal, and one-off transfers (uploads, read-backs) outside any timing.
class Gpu {
 public:
  Gpu(tpar::Device& dev) : dev_(&dev), timeline_(dev.handle()) {
    const vk::Device d = dev.handle();
    std::array<vk::DescriptorSetLayoutBinding, 3> bindings;
    for (std::uint32_t b = 0; b < 3; ++b)
      bindings[b] = vk::DescriptorSetLayoutBinding(b, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute);
    vk::DescriptorSetLayoutCreateInfo dsl({}, bindings);
    vk_check(d.createDescriptorSetLayout(&dsl, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
    vk::PushConstantRange range(vk::ShaderStageFlagBits::eCompute, 0, sizeof(MatmulArgs));
    vk::PipelineLayoutCreateInfo pl({}, 1, &set_layout_, 1, &range);
    vk_check(d.createPipelineLayout(&pl, nullptr, &layout_), "vkCreatePipelineLayout");
    tiled_ = make_pipeline(spirv::matmul_tiled, sizeof spirv::matmul_tiled);
    skinny_ = make_pipeline(spirv::matmul_skinny, sizeof spirv::matmul_skinny);
    vk::CommandPoolCreateInfo cp(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, dev.compute_queue().family());
    vk_check(d.createCommandPool(&cp, nullptr, &pool_), "vkCreateCommandPool");
    const auto& family = dev.capabilities().queue_families.at(dev.compute_queue().family());
    timestamps_ = family.timestampValidBits > 0 && dev.capabilities().timestamp_period_ns > 0;
    // The largest binding a shader may see, and the largest single allocation.
    vk::PhysicalDeviceProperties2 p2;
    vk::PhysicalDeviceMaintenance3Properties m3;
    p2.pNext = &m3;
    dev.physical().getProperties2(&p2);
    max_binding_ = std::min<std::size_t>(dev.capabilities().max_storage_buffer_range, m3.maxMemoryAllocationSize);
    max_groups_ = {p2.properties.limits.maxComputeWorkGroupCount[0], p2.properties.limits.maxComputeWorkGroupCount[1]};
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  ~Gpu() {
    const vk::Device d = dev_->handle();
    d.destroyCommandPool(pool_);
    d.destroyPipeline(tiled_);
    d.destroyPipeline(skinny_);
    d.destroyPipelineLayout(layout_);
    d.destroyDescriptorSetLayout(set_layout_);
  }

  tpar::Device& device() { return *dev_; }
  vk::Device handle() const { return dev_->handle(); }
  vk::DescriptorSetLayout set_layout() const { return set_layout_; }
  vk::PipelineLayout layout() const { return layout_; }
  vk::Pipeline pipeline(std::uint32_t tokens) const { return tokens <= skinny_max_tokens ? skinny_ : tiled_; }
  vk::CommandPool pool() const { return pool_; }
  const tpar::Timeline& timeline() const { return timeline_; }
  bool timestamps() const { return timestamps_; }
  double timestamp_ns() const { return dev_->capabilities().timestamp_period_ns; }
  std::size_t max_binding() const { return max_binding_; }
  std::array<std::uint32_t, 2> max_groups() const { return max_groups_; }

  // Submits `cb` on the compute queue after `waits`; returns the timeline value it signals.
  std::uint64_t submit(vk::CommandBuffer cb, std::span<const tpar::TimelinePoint> waits = {}) {
    std::vector<vk::Semaphore> sems;
    std::vector<std::uint64_t> values;
    std::vector<vk::PipelineStageFlags> stages;
    for (const auto& w : waits)
      if (w) {
        sems.push_back(w.semaphore);
        values.push_back(w.value);
        stages.push_back(vk::PipelineStageFlagBits::eAllCommands);
      }
    const vk::Semaphore sem = timeline_.handle();
    const std::uint64_t signal = ++value_;
    vk::TimelineSemaphoreSubmitInfo ti(static_cast<std::uint32_t>(values.size()), values.data(), 1, &signal);
    vk::SubmitInfo si(static_cast<std::uint32_t>(sems.size()), sems.data(), stages.data(), 1, &cb, 1, &sem, &ti);
    vk_check(dev_->compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit");
    return signal;
  }
  std::uint64_t last_value() const { return value_; }

  // Host wait for this device's timeline to reach `value`.
  void wait(std::uint64_t value, std::chrono::seconds timeout = std::chrono::seconds(600)) const {
    const vk::Semaphore sem = timeline_.handle();
    const vk::Result r = tpar::wait(dev_->handle(), sem, value, timeout);
    if (r == vk::Result::eTimeout) throw Failure("device " + std::to_string(dev_->index()) + " did not finish a step in time");
    vk_check(r, "vkWaitSemaphores");
  }

  // Records `record` into a one-off command buffer between full barriers, runs it after
  // `waits`, and waits for it on the host.
  void run_once(const std::function<void(vk::CommandBuffer)>& record, std::span<const tpar::TimelinePoint> waits = {}) {
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool_, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(handle().allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const vk::MemoryBarrier all(vk::AccessFlagBits::eMemoryWrite, vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &all, 0, nullptr, 0,
                       nullptr);
    record(cb);
    const vk::MemoryBarrier to_host(vk::AccessFlagBits::eMemoryWrite,
                                    vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite | vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands | vk::PipelineStageFlagBits::eHost,
                       {}, 1, &to_host, 0, nullptr, 0, nullptr);
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    const std::uint64_t v = submit(cb, waits);
    wait(v);
    handle().freeCommandBuffers(pool_, 1, &cb);
  }

  // Fills `bytes` of `dst` from `fill(values, first, count)` (f32 values, `first` counted
  // from the start of dst), through a host-visible staging buffer of at most 64 MiB.
  void upload(vk::Buffer dst, std::size_t bytes, const std::function<void(float*, std::size_t, std::size_t)>& fill) {
    const std::size_t step = std::min<std::size_t>(bytes, std::size_t{64} << 20);
    if (step == 0) return;
    Buffer stage(*dev_, step, true);
    for (std::size_t at = 0; at < bytes; at += step) {
      const std::size_t n = std::min(step, bytes - at);
      fill(static_cast<float*>(stage.mapped), at / sizeof(float), n / sizeof(float));
      run_once([&](vk::CommandBuffer cb) {
        const vk::BufferCopy region(0, at, n);
        cb.copyBuffer(stage.buffer, dst, 1, &region);
      });
    }
  }

  // Reads `count` floats at byte `offset` of `src`, after `waits`.
  std::vector<float> download(vk::Buffer src, std::size_t offset, std::size_t count, std::span<const tpar::TimelinePoint> waits = {}) {
    std::vector<float> out(count);
    if (count == 0) return out;
    Buffer stage(*dev_, count * sizeof(float), true);
    run_once(
        [&](vk::CommandBuffer cb) {
          const vk::BufferCopy region(offset, 0, count * sizeof(float));
          cb.copyBuffer(src, stage.buffer, 1, &region);
        },
        waits);
    std::memcpy(out.data(), stage.mapped, count * sizeof(float));
    return out;
  }

  void zero(vk::Buffer dst, std::size_t bytes, std::span<const tpar::TimelinePoint> waits = {}) {
    run_once([&](vk::CommandBuffer cb) { cb.fillBuffer(dst, 0, bytes, 0u); }, waits);
  }

 private:
  vk::Pipeline make_pipeline(const std::uint32_t* code, std::size_t bytes) {
    const vk::Device d = dev_->handle();
    vk::ShaderModuleCreateInfo mi({}, bytes, code);
    vk::ShaderModule module;
    vk_check(d.createShaderModule(&mi, nullptr, &module), "vkCreateShaderModule");
    vk::PipelineShaderStageCreateInfo stage({}, vk::ShaderStageFlagBits::eCompute, module, "main");
    vk::ComputePipelineCreateInfo ci({}, stage, layout_);
    vk::Pipeline pipeline;
    const vk::Result r = d.createComputePipelines(nullptr, 1, &ci, nullptr, &pipeline);
    d.destroyShaderModule(module);
    vk_check(r, "vkCreateComputePipelines");
    return pipeline;
  }

  tpar::Device* dev_;
  tpar::Timeline timeline_;
  std::uint64_t value_ = 0;
  vk::DescriptorSetLayout set_layout_;
  vk::PipelineLayout layout_;
  vk::Pipeline tiled_, skinny_;
  vk::CommandPool pool_;
  bool timestamps_ = false;
  std::size_t max_binding_ = 0;
  std::array<std::uint32_t, 2> max_groups_{};
};

// A row-major weight matrix on one device, cut into chunks of whole rows small enough
// to bind (maxStorageBufferRange is 128 MiB on lavapipe, less than one 4096 x 14336 f32
// matrix): one buffer and one dispatch per chunk.
struct Matrix {
  struct Chunk {
    std::int64_t row0, rows;
    std::unique_ptr<Buffer> buffer;
  };
  std::int64_t rows = 0, cols = 0;
  std::vector<Chunk> chunks;

  // Element (r, c) of the whole matrix this one is, for the generator: `value(r, c)`.
  Matrix(Gpu& gpu, std::int64_t rows_, std::int64_t cols_, const std::function<float(std::int64_t, std::int64_t)>& value,
         const std::function<void(std::int64_t, double)>& row_square_sum = {})
      : rows(rows_), cols(cols_) {
    if (rows == 0 || cols == 0) return;
    const std::size_t row_bytes = std::size_t(cols) * sizeof(float);
    std::int64_t per_chunk = std::int64_t(gpu.max_binding() / row_bytes) / tile_rows * tile_rows;
    per_chunk = std::min<std::int64_t>(per_chunk, std::int64_t(gpu.max_groups()[0]) * skinny_rows / tile_rows * tile_rows);
    if (per_chunk < tile_rows)
      throw Failure("a " + std::to_string(cols) + "-wide f32 weight matrix needs " + std::to_string(tile_rows) +
                    " rows per binding, more than this device's maxStorageBufferRange (" + mib(gpu.max_binding()) + ") allows");
    for (std::int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
      Chunk c{r0, std::min(per_chunk, rows - r0), nullptr};
      c.buffer = std::make_unique<Buffer>(gpu.device(), std::size_t(c.rows) * row_bytes, false);
      gpu.upload(c.buffer->buffer, std::size_t(c.rows) * row_bytes, [&](float* out, std::size_t first, std::size_t count) {
        std::int64_t r = c.row0 + std::int64_t(first) / cols, k = std::int64_t(first) % cols;
        double square = 0;
        for (std::size_t i = 0; i < count; ++i) {
          out[i] = value(r, k);
          square += double(out[i]) * double(out[i]);
          if (++k == cols) {
            if (row_square_sum) row_square_sum(r, square);
            square = 0;
            k = 0;
            ++r;
          }
        }
        if (k != 0 && row_square_sum) row_square_sum(r, square);  // a row cut by the staging step
      });
      chunks.push_back(std::move(c));
    }
  }
};

// What one device computes in a step: act = act(W_up_slice . x), y = W_down_slice . act,
// i.e. the whole MLP when the slice is everything (the reference on device 0).
class Shard {
 public:
  // `rows` intermediate rows starting at `offset` of the whole I; x is the device's input
  // buffer [max_tokens x hidden].
  Shard(Gpu& gpu, std::shared_ptr<Buffer> x, std::int64_t hidden, std::int64_t offset, std::int64_t rows, std::int64_t max_tokens,
        std::unique_ptr<Matrix> up, std::unique_ptr<Matrix> down, Act act)
      : gpu_(&gpu), x_(std::move(x)), hidden_(hidden), offset_(offset), rows_(rows), act_kind_(act), up_(std::move(up)),
        down_(std::move(down)) {
    const std::size_t act_bytes = std::size_t(max_tokens) * std::size_t(rows) * sizeof(float);
    const std::size_t y_bytes = std::size_t(max_tokens) * std::size_t(hidden) * sizeof(float);
    for (std::size_t b : {act_bytes, y_bytes})
      if (b > gpu.max_binding())
        throw Failure(std::to_string(max_tokens) + " tokens need a " + mib(b) + " activation buffer, more than this device's " +
                      "maxStorageBufferRange (" + mib(gpu.max_binding()) + "): use fewer --tokens");
    act_ = std::make_unique<Buffer>(gpu.device(), act_bytes, false);
    y_ = std::make_unique<Buffer>(gpu.device(), y_bytes, false);
    if (rows_ == 0) return;
    const vk::Device d = gpu.handle();
    const std::uint32_t sets = static_cast<std::uint32_t>(up_->chunks.size() + down_->chunks.size());
    vk::DescriptorPoolSize size(vk::DescriptorType::eStorageBuffer, 3 * sets);
    vk::DescriptorPoolCreateInfo dp({}, sets, 1, &size);
    vk_check(d.createDescriptorPool(&dp, nullptr, &descriptors_), "vkCreateDescriptorPool");
    auto make_set = [&](vk::Buffer a, vk::Buffer b, vk::Buffer c) {
      vk::DescriptorSet set;
      const vk::DescriptorSetLayout layout = gpu.set_layout();
      vk::DescriptorSetAllocateInfo ai(descriptors_, 1, &layout);
      vk_check(d.allocateDescriptorSets(&ai, &set), "vkAllocateDescriptorSets");
      const vk::DescriptorBufferInfo infos[3] = {{a, 0, VK_WHOLE_SIZE}, {b, 0, VK_WHOLE_SIZE}, {c, 0, VK_WHOLE_SIZE}};
      vk::WriteDescriptorSet w[3];
      for (std::uint32_t i = 0; i < 3; ++i) w[i] = vk::WriteDescriptorSet(set, i, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[i]);
      d.updateDescriptorSets(3, w, 0, nullptr);
      return set;
    };
    for (const auto& c : up_->chunks) up_sets_.push_back(make_set(c.buffer->buffer, x_->buffer, act_->buffer));
    for (const auto& c : down_->chunks) down_sets_.push_back(make_set(c.buffer->buffer, act_->buffer, y_->buffer));
    if (gpu.timestamps()) {
      vk::QueryPoolCreateInfo qi({}, vk::QueryType::eTimestamp, 2);
      vk_check(d.createQueryPool(&qi, nullptr, &queries_), "vkCreateQueryPool");
    }
  }
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;
  ~Shard() {
    const vk::Device d = gpu_->handle();
    for (auto& [tokens, cb] : recorded_) d.freeCommandBuffers(gpu_->pool(), 1, &cb);
    if (queries_) d.destroyQueryPool(queries_);
    if (descriptors_) d.destroyDescriptorPool(descriptors_);
  }

  Gpu& gpu() { return *gpu_; }
  std::int64_t offset() const { return offset_; }
  std::int64_t rows() const { return rows_; }
  bool empty() const { return rows_ == 0; }
  Buffer& activations() { return *act_; }
  Buffer& output() { return *y_; }

  // Queues one step for `tokens` tokens after `waits`; returns the timeline value that
  // says it is done (its output y is then in place, ready for the AllReduce).
  std::uint64_t submit(std::uint32_t tokens, std::span<const tpar::TimelinePoint> waits = {}) {
    return gpu_->submit(command_buffer(tokens), waits);
  }

  // GPU time of the last step, in milliseconds (NaN without timestamps). Call after it finished.
  double last_gpu_ms() const {
    if (!queries_) return std::nan("");
    std::uint64_t stamps[2] = {0, 0};
    vk_check(gpu_->handle().getQueryPoolResults(queries_, 0, 2, sizeof stamps, stamps, sizeof stamps[0],
                                                vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait),
             "vkGetQueryPoolResults");
    return double(stamps[1] - stamps[0]) * gpu_->timestamp_ns() * 1e-6;
  }

 private:
  vk::CommandBuffer command_buffer(std::uint32_t tokens) {
    for (auto& [t, cb] : recorded_)
      if (t == tokens) return cb;
    const vk::Device d = gpu_->handle();
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(gpu_->pool(), vk::CommandBufferLevel::ePrimary, 1);
    vk_check(d.allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi;
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    if (queries_) {
      cb.resetQueryPool(queries_, 0, 2);
      cb.writeTimestamp(vk::PipelineStageFlagBits::eTopOfPipe, queries_, 0);
    }
    // Everything earlier on this queue (uploads, read-backs, the previous step) before
    // this step reads or overwrites its buffers. The AllReduce, which may run on other
    // queues, is ordered by the semaphore waits of the submission.
    const vk::MemoryBarrier before(vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite,
                                   vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer,
                       vk::PipelineStageFlagBits::eComputeShader, {}, 1, &before, 0, nullptr, 0, nullptr);
    cb.bindPipeline(vk::PipelineBindPoint::eCompute, gpu_->pipeline(tokens));
    auto dispatch = [&](const Matrix& m, const std::vector<vk::DescriptorSet>& sets, std::uint32_t ldc, Act act) {
      for (std::size_t c = 0; c < m.chunks.size(); ++c) {
        const auto& chunk = m.chunks[c];
        const MatmulArgs args{static_cast<std::uint32_t>(chunk.rows), tokens, static_cast<std::uint32_t>(m.cols), ldc,
                              static_cast<std::uint32_t>(chunk.row0), static_cast<std::uint32_t>(act)};
        cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, gpu_->layout(), 0, 1, &sets[c], 0, nullptr);
        cb.pushConstants(gpu_->layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof args, &args);
        const auto rows = static_cast<std::uint32_t>(chunk.rows);
        if (tokens <= skinny_max_tokens) cb.dispatch((rows + skinny_rows - 1) / skinny_rows, 1, 1);
        else cb.dispatch((rows + tile_rows - 1) / tile_rows, (tokens + tile_rows - 1) / tile_rows, 1);
      }
    };
    dispatch(*up_, up_sets_, static_cast<std::uint32_t>(rows_), act_kind_);
    const vk::MemoryBarrier between(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eShaderRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {}, 1, &between, 0,
                       nullptr, 0, nullptr);
    dispatch(*down_, down_sets_, static_cast<std::uint32_t>(hidden_), Act::none);
    if (queries_) cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, queries_, 1);
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    recorded_.push_back({tokens, cb});
    return cb;
  }

  Gpu* gpu_;
  std::shared_ptr<Buffer> x_;
  std::int64_t hidden_, offset_, rows_;
  Act act_kind_;
  std::unique_ptr<Matrix> up_, down_;
  std::unique_ptr<Buffer> act_, y_;
  vk::DescriptorPool descriptors_;
  std::vector<vk::DescriptorSet> up_sets_, down_sets_;
  vk::QueryPool queries_;
  std::vector<std::pair<std::uint32_t, vk::CommandBuffer>> recorded_;
};

}  // namespace tp_mlp
