// tpar-bench --chain: what an AllReduce costs a decode step, as the program pays it. Per
// step, every device runs a small dispatch (shaders/chain_step.comp: it reads
// --chain-work bytes of weights, as half a transformer layer reads its weight matrix, and
// rewrites its span from the last sum), then the span is summed across the devices, and
// the next step's dispatch reads the sum: a dependent chain, enqueued by the host in one
// go and waited for once, as llama.cpp enqueues a token. Per row: the time per step; the
// same chain without the AllReduce; their difference, the boundary's cost; the host's
// enqueue time and CPU per step (far below the step time when the host runs ahead of the
// GPUs); what each step costs the driver (vkQueueSubmit calls and semaphore waits per
// device). Wirings:
//   streams     tpar::Stream: the dispatch and tpar's batches in one submission per step,
//               ordered by the queue (what llama.cpp's patch does now)
//   semaphores  the dispatch's submission signals a timeline, tpar submits its own batches
//               after it, the next dispatch waits for tpar's done point (the older wiring)
//   threads     streams, with a thread per device that submits its dispatches and its part
//               of each AllReduce (StreamAllreduce::enqueue), the calls made on the main
//               thread (allreduce_split): what llama.cpp's meta backend does with its
//               threads; the enqueue time is until every thread is done
//   gated       streams, but the host waits for each sum's inputs before submitting it, so
//               no queue waits on another device: a measurement of what such a wait costs
//               (several devices on one GPU), not a way to run: the host is in lockstep
//   ride        streams, and each step's command buffer holds the call before it first
//               (tpar::Stream::ride: a relay call's kernel, recorded as a site and the
//               command buffer submitted again every run, as ggml-vulkan's replay does),
//               so a call ends no command buffer of its own; calls that cannot ride
//               (OneShot's) go out as with streams
//   ride-ordered  ride, with the ride told that nothing before it needs a barrier: every
//               step's command buffer ends with one, so the relay's kernel starts its
//               command buffer with none before it (tpar::Stream::ride's `ordered`, as
//               ggml-vulkan does with patch 0017)
// --chain-warm SIZE adds to the ride wirings' command buffers a second dispatch of the
// step's shader beside the riding kernel (tpar::RideBeside): it reads the first SIZE of the
// step's weights as the step's first work groups do, and writes nothing, so that they are
// in the GPU's L2 when the step reads them after the sum (docs/design/l2-warm.md).
// Every run starts from zeros and the last one is checked against the host's simulation,
// exactly, on every device.
#pragma once

#include "bench.hpp"
#include "options.hpp"
#include "spirv/chain_step.hpp"

#include <tpar/comm/stream.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tpar_bench {

// The push constants of shaders/chain_step.comp.
struct ChainArgs {
  std::uint32_t count, device, step, weight_vec4s;
};

// What chain_step.comp computes for value i of device d at step k from x (the last sum).
inline float chain_value(float x, std::uint32_t d, std::uint32_t k, std::size_t i) {
  const auto u = static_cast<std::uint32_t>(static_cast<int>(x) + 1024);
  const std::uint32_t y = (u * 5u + d + k + static_cast<std::uint32_t>(i)) % 17u;
  return static_cast<float>(static_cast<int>(y) - 8);
}

// One device's part of the chain: its span, weights, the step's pipeline, a command
// buffer per step (recorded once), a stream over its compute queue, a timeline for the
// semaphore wiring.
class ChainDevice {
 public:
  ChainDevice(tpar::Device& dev, std::size_t max_count, std::size_t work_bytes, std::uint32_t index, std::size_t warm_bytes = 0)
      : dev_(&dev), index_(index), timeline_(dev.handle()) {
    warm_vec4s_ = static_cast<std::uint32_t>(std::min(warm_bytes, work_bytes) / 16);
    const vk::Device d = dev.handle();
    span_ = std::make_unique<Buffer>(dev, max_count * 4, false);
    readback_ = std::make_unique<Buffer>(dev, max_count * 4, true);
    weight_vec4s_ = static_cast<std::uint32_t>(work_bytes / 16);
    weights_ = std::make_unique<Buffer>(dev, std::max<std::size_t>(work_bytes, 16), false);
    std::array<vk::DescriptorSetLayoutBinding, 2> bindings;
    for (std::uint32_t b = 0; b < 2; ++b)
      bindings[b] = vk::DescriptorSetLayoutBinding(b, vk::DescriptorType::eStorageBuffer, 1, vk::ShaderStageFlagBits::eCompute);
    vk::DescriptorSetLayoutCreateInfo dsl({}, bindings);
    vk_check(d.createDescriptorSetLayout(&dsl, nullptr, &set_layout_), "vkCreateDescriptorSetLayout");
    vk::PushConstantRange range(vk::ShaderStageFlagBits::eCompute, 0, sizeof(ChainArgs));
    vk::PipelineLayoutCreateInfo pl({}, 1, &set_layout_, 1, &range);
    vk_check(d.createPipelineLayout(&pl, nullptr, &layout_), "vkCreatePipelineLayout");
    vk::ShaderModuleCreateInfo mi({}, sizeof spirv::chain_step, spirv::chain_step);
    vk::ShaderModule module;
    vk_check(d.createShaderModule(&mi, nullptr, &module), "vkCreateShaderModule");
    vk::ComputePipelineCreateInfo ci({}, vk::PipelineShaderStageCreateInfo({}, vk::ShaderStageFlagBits::eCompute, module, "main"),
                                     layout_);
    const vk::Result r = d.createComputePipelines(nullptr, 1, &ci, nullptr, &pipeline_);
    d.destroyShaderModule(module);
    vk_check(r, "vkCreateComputePipelines");
    vk::DescriptorPoolSize ps(vk::DescriptorType::eStorageBuffer, 2);
    vk::DescriptorPoolCreateInfo dp({}, 1, 1, &ps);
    vk_check(d.createDescriptorPool(&dp, nullptr, &descriptor_pool_), "vkCreateDescriptorPool");
    vk::DescriptorSetAllocateInfo ai(descriptor_pool_, 1, &set_layout_);
    vk_check(d.allocateDescriptorSets(&ai, &set_), "vkAllocateDescriptorSets");
    const vk::DescriptorBufferInfo infos[2] = {{span_->buffer, 0, VK_WHOLE_SIZE}, {weights_->buffer, 0, VK_WHOLE_SIZE}};
    const vk::WriteDescriptorSet writes[2] = {{set_, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[0]},
                                              {set_, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[1]}};
    d.updateDescriptorSets(2, writes, 0, nullptr);
    vk::CommandPoolCreateInfo cp({}, dev.compute_queue().family());
    vk_check(d.createCommandPool(&cp, nullptr, &pool_), "vkCreateCommandPool");
    tpar::Queue& q = dev.compute_queue();
    tpar::TraceQueue trace;
    trace.name = "device " + std::to_string(index);
    trace.work = "chain step";
    trace.timestamp_bits = dev.capabilities().queue_families.at(q.family()).timestampValidBits;
    trace.period_ns = dev.capabilities().timestamp_period_ns;
    trace.calibrate = dev.extension_fns().get_calibrated_timestamps;
    stream_ = std::make_unique<tpar::Stream>(d, q.handle(), q.family(), q.shared_lock(), trace);
  }
  ChainDevice(const ChainDevice&) = delete;
  ChainDevice& operator=(const ChainDevice&) = delete;
  ~ChainDevice() {
    drop_rides();
    stream_.reset();
    const vk::Device d = dev_->handle();
    d.destroyCommandPool(pool_);
    d.destroyDescriptorPool(descriptor_pool_);
    d.destroyPipeline(pipeline_);
    d.destroyPipelineLayout(layout_);
    d.destroyDescriptorSetLayout(set_layout_);
  }

  // (Re)records a command buffer per step for spans of `count` values: step k zeroes the
  // span first where k is 0, then dispatches. The weights are zeroed once here.
  void record(std::size_t count, std::uint32_t steps) {
    const vk::Device d = dev_->handle();
    if (!cbs_.empty()) d.freeCommandBuffers(pool_, static_cast<std::uint32_t>(cbs_.size()), cbs_.data());
    cbs_.assign(steps, nullptr);
    vk::CommandBufferAllocateInfo ai(pool_, vk::CommandBufferLevel::ePrimary, steps);
    vk_check(d.allocateCommandBuffers(&ai, cbs_.data()), "vkAllocateCommandBuffers");
    groups_ = std::clamp<std::uint32_t>(std::max<std::uint32_t>(weight_vec4s_ / 4096, static_cast<std::uint32_t>((count + 255) / 256)),
                                        1, std::min<std::uint32_t>(dev_->capabilities().max_workgroups_x, 4096));
    count_ = count;
    // The warm's work groups read the step's first work groups' runs (chain_step.comp:
    // each group a contiguous run of ceil(weights / groups) vec4s).
    const std::uint32_t per = (weight_vec4s_ + groups_ - 1) / groups_;
    warm_groups_ = per ? std::max<std::uint32_t>(1, (warm_vec4s_ + per - 1) / per) : 1;
    for (std::uint32_t k = 0; k < steps; ++k) {
      const vk::CommandBuffer cb = cbs_[k];
      vk::CommandBufferBeginInfo bi;
      vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
      record_step(cb, k);
    }
    zeroed_ = true;
    drop_rides(steps);
  }

  vk::CommandBuffer step(std::uint32_t k) const { return cbs_[k]; }

  // Step k's command buffer with the call before it first where the stream offers it
  // (Wiring::ride): recorded as a site once, submitted again in later runs while the site
  // can serve the call (the runs before it are done), recorded anew where it cannot.
  // `ordered` (Wiring::ride_ordered): the ride is told that nothing before it needs a
  // barrier (every step's command buffer ends with one), and leaves its own out.
  vk::CommandBuffer ride_step(std::uint32_t k, bool ordered = false) {
    if (ordered != rides_ordered_) {  // another wiring's recordings: record anew
      drop_rides(ride_cbs_.size());
      rides_ordered_ = ordered;
    }
    if (!stream_->ride_pending()) return cbs_[k];
    if (ride_cbs_[k] && stream_->ride_again(ride_sites_[k])) return ride_cbs_[k];
    const vk::Device d = dev_->handle();
    if (ride_cbs_[k]) {
      stream_->ride_forget(ride_sites_[k]);
      d.freeCommandBuffers(pool_, 1, &ride_cbs_[k]);  // (its last run is done: each run ends waiting for its last sum)
    }
    vk::CommandBufferAllocateInfo ai(pool_, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(d.allocateCommandBuffers(&ai, &ride_cbs_[k]), "vkAllocateCommandBuffers");
    const vk::CommandBuffer cb = ride_cbs_[k];
    vk::CommandBufferBeginInfo bi;
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const tpar::RideBeside warm = [this](vk::CommandBuffer c) {
      // (count 0: the shader reads the weights and writes nothing)
      c.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline_);
      c.bindDescriptorSets(vk::PipelineBindPoint::eCompute, layout_, 0, 1, &set_, 0, nullptr);
      const ChainArgs args{0, index_, 0, warm_vec4s_};
      c.pushConstants(layout_, vk::ShaderStageFlagBits::eCompute, 0, sizeof args, &args);
      c.dispatch(warm_groups_, 1, 1);
      ++warms_;
    };
    ride_sites_[k] = stream_->ride(cb, true, ordered, warm_vec4s_ ? warm : tpar::RideBeside{});
    record_step(cb, k);
    return cb;
  }
  tpar::Stream& stream() { return *stream_; }
  tpar::Device& device() { return *dev_; }
  std::uint64_t warms() const { return warms_; }  // warm dispatches recorded beside a ride
  tpar::BufferSpan span() const { return {span_->buffer, 0, count_, span_->size}; }
  const tpar::Timeline& timeline() const { return timeline_; }
  std::uint64_t& signalled() { return signalled_; }

  // The span as the device holds it now (the queues must be idle).
  std::vector<float> read() {
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool_, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(dev_->handle().allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const vk::BufferCopy region(0, 0, count_ * 4);
    cb.copyBuffer(span_->buffer, readback_->buffer, 1, &region);
    const vk::MemoryBarrier to_host(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {}, 1, &to_host, 0, nullptr, 0, nullptr);
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    const std::uint64_t v = ++signalled_;
    const vk::Semaphore sem = timeline_.handle();
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &v);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    stream_->flush();
    vk_check(dev_->compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit (read-back)");
    vk_check(tpar::wait(dev_->handle(), sem, v, std::chrono::seconds(60)),
             "waiting for the read-back");
    dev_->handle().freeCommandBuffers(pool_, 1, &cb);
    const float* p = static_cast<const float*>(readback_->mapped);
    return std::vector<float>(p, p + count_);
  }

 private:
  // Step k's commands into `cb` (begun), ending it: step 0 zeroes the span first.
  void record_step(vk::CommandBuffer cb, std::uint32_t k) {
    const vk::MemoryBarrier all(vk::AccessFlagBits::eMemoryWrite, vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite);
    // Whatever wrote the span before (the last sum) is done; like a ggml node's barrier.
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &all, 0, nullptr, 0,
                       nullptr);
    if (k == 0) {
      cb.fillBuffer(span_->buffer, 0, count_ * 4, 0u);
      if (!zeroed_) cb.fillBuffer(weights_->buffer, 0, VK_WHOLE_SIZE, 0u);
      cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {}, 1, &all, 0, nullptr, 0,
                         nullptr);
    }
    cb.bindPipeline(vk::PipelineBindPoint::eCompute, pipeline_);
    cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, layout_, 0, 1, &set_, 0, nullptr);
    const ChainArgs args{static_cast<std::uint32_t>(count_), index_, k, weight_vec4s_};
    cb.pushConstants(layout_, vk::ShaderStageFlagBits::eCompute, 0, sizeof args, &args);
    cb.dispatch(groups_, 1, 1);
    // The span's writes, for tpar's batches and the next step (and the host's read-back).
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &all, 0, nullptr, 0,
                       nullptr);
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    tpar::Trace::instance().label(cb, "chain step");
  }

  // Frees the ride wiring's command buffers (their runs are done) and forgets their sites,
  // leaving `steps` empty slots for them.
  void drop_rides(std::size_t steps = 0) {
    for (std::size_t k = 0; k < ride_cbs_.size(); ++k)
      if (ride_cbs_[k]) {
        stream_->ride_forget(ride_sites_[k]);
        dev_->handle().freeCommandBuffers(pool_, 1, &ride_cbs_[k]);
      }
    ride_cbs_.assign(steps, nullptr);
    ride_sites_.assign(steps, 0);
  }

  tpar::Device* dev_;
  std::uint32_t index_;
  std::unique_ptr<Buffer> span_, weights_, readback_;
  std::uint32_t weight_vec4s_ = 0;
  vk::DescriptorSetLayout set_layout_;
  vk::PipelineLayout layout_;
  vk::Pipeline pipeline_;
  vk::DescriptorPool descriptor_pool_;
  vk::DescriptorSet set_;
  vk::CommandPool pool_;
  std::vector<vk::CommandBuffer> cbs_;
  std::vector<vk::CommandBuffer> ride_cbs_;  // Wiring::ride, by step (null: not recorded)
  std::vector<std::uint64_t> ride_sites_;
  bool rides_ordered_ = false;  // how ride_cbs_ were recorded
  std::uint32_t groups_ = 1;
  std::uint32_t warm_vec4s_ = 0, warm_groups_ = 1;  // --chain-warm
  std::uint64_t warms_ = 0;
  bool zeroed_ = false;
  std::size_t count_ = 0;
  std::unique_ptr<tpar::Stream> stream_;
  tpar::Timeline timeline_;
  std::uint64_t signalled_ = 0;
};

inline const char* wiring_name(Wiring w) {
  return w == Wiring::none ? "none" : w == Wiring::streams ? "streams" : w == Wiring::gated ? "gated"
                                    : w == Wiring::threads ? "threads" : w == Wiring::ride ? "ride"
                                    : w == Wiring::ride_ordered ? "ride-ordered" : "semaphores";
}

// A thread per device for --chain-wiring threads, kept across runs: a run wakes them, each
// submits its device's steps and parts, and the run waits until all are done.
class ChainThreads {
 public:
  explicit ChainThreads(std::size_t n) {
    for (std::size_t d = 0; d < n; ++d) threads_.emplace_back([this, d] { loop(d); });
  }
  ChainThreads(const ChainThreads&) = delete;
  ChainThreads& operator=(const ChainThreads&) = delete;
  ~ChainThreads() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    start_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Starts work(d) on every device's thread (`work` must outlive finish()).
  void start(const std::function<void(std::size_t)>& work) {
    {
      std::lock_guard lock(mutex_);
      work_ = &work;
      left_ = threads_.size();
      error_ = nullptr;
      ++generation_;
    }
    start_.notify_all();
  }
  // Until every thread returned from its work; rethrows the first exception one threw.
  void finish() {
    std::unique_lock lock(mutex_);
    finished_.wait(lock, [this] { return left_ == 0; });
    work_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void loop(std::size_t d) {
    std::uint64_t seen = 0;
    std::unique_lock lock(mutex_);
    while (true) {
      start_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const auto* work = work_;
      lock.unlock();
      std::exception_ptr error;
      try {
        (*work)(d);
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      if (error && !error_) error_ = error;
      if (--left_ == 0) finished_.notify_all();
    }
  }

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_, finished_;
  const std::function<void(std::size_t)>* work_ = nullptr;
  std::size_t left_ = 0;
  std::uint64_t generation_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

struct ChainRow {
  std::size_t bytes;
  std::string algo, wiring;
  double step_us, none_us, boundary_us, enqueue_us, cpu_us, submits, waits;
  std::size_t wrong;
};

// Every queue a device's work reaches: its compute queue through the stream and through
// tpar, and tpar's transfer queues.
inline tpar::Queue::Counts chain_counts(ChainDevice& c) {
  tpar::Queue::Counts sum;
  auto add = [&](const tpar::Queue& q) {
    const auto k = q.counts();
    sum.submits += k.submits;
    sum.batches += k.batches;
    sum.waits += k.waits;
  };
  add(c.stream().queue());
  add(c.device().compute_queue());
  if (c.device().has_transfer_queue()) add(c.device().transfer_queue());
  if (c.device().second_transfer_queue()) add(*c.device().second_transfer_queue());
  return sum;
}

// One run: `steps` steps enqueued, then one host wait. Returns {seconds in all, seconds
// to enqueue, CPU seconds less the wait's}.
struct ChainTimes {
  double total, enqueue, cpu;
};

inline ChainTimes chain_run(std::vector<std::unique_ptr<ChainDevice>>& devs, tpar::AnyCommunicator* comm,
                            tpar::StreamAllreduce<tpar::AnyCommunicator>* streamed, Wiring wiring, std::uint32_t steps,
                            ChainThreads* threads = nullptr) {
  const std::size_t n = devs.size();
  std::vector<tpar::BufferSpan> spans;
  for (auto& c : devs) spans.push_back(c->span());
  std::vector<tpar::TimelinePoint> ready(n), done(n);
  const double c0 = cpu_seconds();
  const auto t0 = Clock::now();
  tpar::Ticket last;
  const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
  if (wiring == Wiring::threads) {
    // The main thread makes the calls; each device's thread submits its steps and, once
    // the call of a step is made, its part of it.
    std::atomic<std::uint32_t> made{0};
    std::atomic<bool> failed{false};
    const std::function<void(std::size_t)> work = [&](std::size_t d) {
      ChainDevice& c = *devs[d];
      for (std::uint32_t k = 0; k < steps; ++k) {
        const vk::CommandBuffer cb = c.step(k);
        const vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb);
        c.stream().submit({si});
        while (made.load(std::memory_order_acquire) <= k) {
          if (failed.load(std::memory_order_relaxed)) return;
          std::this_thread::yield();
        }
        streamed->enqueue(d);
      }
    };
    threads->start(work);
    try {
      for (std::uint32_t k = 0; k < steps; ++k) {
        last = streamed->allreduce_split(spans);
        made.store(k + 1, std::memory_order_release);
      }
    } catch (...) {
      failed = true;
      threads->finish();
      throw;
    }
    threads->finish();
  }
  for (std::uint32_t k = 0; wiring != Wiring::threads && k < steps; ++k) {
    for (std::size_t d = 0; d < n; ++d) {
      ChainDevice& c = *devs[d];
      const bool rides = wiring == Wiring::ride || wiring == Wiring::ride_ordered;
      const vk::CommandBuffer cb = rides ? c.ride_step(k, wiring == Wiring::ride_ordered) : c.step(k);
      if (wiring == Wiring::streams || wiring == Wiring::gated || rides) {
        const vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb);
        c.stream().submit({si});
      } else {
        // The dispatch waits for the last sum's done point and signals its ready point.
        const std::uint64_t v = ++c.signalled();
        const vk::Semaphore sem = c.timeline().handle();
        const bool wait = wiring == Wiring::semaphores && done[d];
        vk::TimelineSemaphoreSubmitInfo ti(wait ? 1 : 0, &done[d].value, 1, &v);
        vk::SubmitInfo si(wait ? 1 : 0, &done[d].semaphore, &stage, 1, &cb, 1, &sem, &ti);
        vk_check(c.device().compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit (chain step)");
        ready[d] = {sem, v};
      }
    }
    if (wiring == Wiring::streams || wiring == Wiring::gated || wiring == Wiring::ride || wiring == Wiring::ride_ordered) {
      last = streamed->allreduce(spans);
      if (wiring == Wiring::gated) streamed->submit_when_ready();
    } else if (wiring == Wiring::semaphores) {
      tpar::AllreduceArgs args;
      args.ready = ready;
      last = comm->allreduce(spans, args);
      for (std::size_t d = 0; d < n; ++d) done[d] = last.done(d);
    }
  }
  const auto t_enqueued = Clock::now();
  const double c1 = cpu_seconds();
  if (wiring == Wiring::none) {
    for (std::size_t d = 0; d < n; ++d) {
      const vk::Semaphore sem = ready[d].semaphore;
      vk_check(tpar::wait(devs[d]->device().handle(), sem, ready[d].value,
                                      std::chrono::seconds(60)),
               "waiting for the chain");
    }
  } else {
    last.wait();
  }
  const auto t1 = Clock::now();
  return {std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t_enqueued - t0).count(), c1 - c0};
}

// The host's simulation of the chain from zeros: each device's span after `steps` steps.
inline std::vector<std::vector<float>> chain_expected(std::size_t n, std::size_t count, std::uint32_t steps, bool reduce,
                                                      std::uint32_t host_peers) {
  std::vector<std::vector<float>> x(n, std::vector<float>(count, 0.0f));
  for (std::uint32_t k = 0; k < steps; ++k) {
    std::vector<std::vector<float>> p(n, std::vector<float>(count));
    for (std::size_t d = 0; d < n; ++d)
      for (std::size_t i = 0; i < count; ++i) p[d][i] = chain_value(x[d][i], static_cast<std::uint32_t>(d), k, i);
    if (!reduce) {
      x = p;
      continue;
    }
    for (std::size_t i = 0; i < count; ++i) {
      float s = 0;
      for (std::size_t d = 0; d < n; ++d) s += p[d][i];
      for (std::uint32_t q = 0; q < host_peers; ++q) s += tpar::relay_host_peer_value(q, i);
      for (std::size_t d = 0; d < n; ++d) x[d][i] = s;
    }
  }
  return x;
}

inline int run_chain(tpar::DeviceGroup& group, const Config& cfg, const std::string& header) {
  const std::size_t n = group.size();
  ChainThreads threads(n);
  const std::size_t largest = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());
  std::vector<std::unique_ptr<ChainDevice>> devs;
  for (std::size_t d = 0; d < n; ++d)
    devs.push_back(std::make_unique<ChainDevice>(group[d], largest / 4, cfg.chain_work, static_cast<std::uint32_t>(d), cfg.chain_warm));
  const std::uint32_t steps = cfg.chain_steps;
  const int runs = cfg.iters ? cfg.iters : 20;
  const bool text = !cfg.csv && !cfg.json;
  if (text) {
    std::printf("# %s\n# chain: %u steps a run, each a dispatch reading %s of weights per device, then the AllReduce of its span;"
                " %d runs (median of %d repeats); times per step\n",
                header.c_str(), steps, human_bytes(cfg.chain_work).c_str(), runs, cfg.repeat);
    if (cfg.relay_peers)
      std::printf("# relay floor: device 0 and %u peer%s played by the relay's host thread (n = %zu)\n", cfg.relay_peers,
                  cfg.relay_peers == 1 ? "" : "s", n + cfg.relay_peers);
    if (cfg.chain_warm)
      std::printf("# beside each riding call's kernel: a read of the first %s of the step's weights\n",
                  human_bytes(cfg.chain_warm).c_str());
    std::printf("# %9s %8s %11s %9s %11s %12s %11s %8s %8s %8s %7s\n", "bytes", "algo", "wiring", "step(us)", "no-AR(us)",
                "boundary(us)", "enqueue(us)", "cpu(us)", "submits", "waits", "#wrong");
  }
  std::vector<ChainRow> rows;
  bool all_ok = true;
  bool traced = false;
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  // Times `runs` runs (after warm-up), `repeat` times: the medians, and the counts per step.
  auto time_rows = [&](tpar::AnyCommunicator* comm, tpar::StreamAllreduce<tpar::AnyCommunicator>* streamed, Wiring w) {
    for (int i = 0; i < cfg.warmup; ++i) chain_run(devs, comm, streamed, w, steps, &threads);
    std::vector<tpar::Queue::Counts> before;
    for (auto& c : devs) before.push_back(chain_counts(*c));
    std::vector<double> totals, enqueues, cpus;
    const bool trace_this = tpar::Trace::instance().enabled() && !traced && w != Wiring::none;
    for (int rep = 0; rep < cfg.repeat; ++rep) {
      double total = 0, enqueue = 0, cpu = 0;
      for (int r = 0; r < runs; ++r) {
        const bool window = trace_this && rep + 1 == cfg.repeat && r + 1 == runs;
        if (window) tpar::Trace::instance().begin_window();
        const ChainTimes t = chain_run(devs, comm, streamed, w, steps, &threads);
        if (window) {
          tpar::Trace::instance().step();
          tpar::Trace::instance().end_window("one run of tpar-bench --chain");
          traced = true;
        }
        total += t.total;
        enqueue += t.enqueue;
        cpu += t.cpu;
      }
      totals.push_back(total / runs / steps * 1e6);
      enqueues.push_back(enqueue / runs / steps * 1e6);
      cpus.push_back(cpu / runs / steps * 1e6);
    }
    double submits = 0, waits = 0;
    const double per = double(cfg.repeat) * runs * steps;
    for (std::size_t d = 0; d < n; ++d) {
      const auto c = chain_counts(*devs[d]);
      submits = std::max(submits, double(c.submits - before[d].submits) / per);
      waits = std::max(waits, double(c.waits - before[d].waits) / per);
    }
    return std::array<double, 5>{median(totals), median(enqueues), median(cpus), submits, waits};
  };
  auto check = [&](bool reduce) {
    const auto expect = chain_expected(n, devs[0]->span().count, steps, reduce, cfg.relay_peers);
    std::size_t wrong = 0;
    for (std::size_t d = 0; d < n; ++d) {
      const auto got = devs[d]->read();
      for (std::size_t i = 0; i < got.size(); ++i) wrong += got[i] != expect[d][i];
    }
    return wrong;
  };
  for (std::size_t bytes : cfg.sizes) {
    const std::size_t count = bytes / 4;
    for (auto& c : devs) c->record(count, steps);
    const auto none = time_rows(nullptr, nullptr, Wiring::none);
    const std::size_t none_wrong = check(false);
    all_ok &= none_wrong == 0;
    for (auto algo : cfg.algos) {
      tpar::Options options;
      options.algo = algo;
      options.sync = cfg.sync;
      options.timeout = std::chrono::seconds(60);
      if (cfg.depth) options.depth = cfg.depth;
      if (cfg.relay_max) options.relay_max_bytes = cfg.relay_max;
      else if (cfg.relay_peers) options.relay_max_bytes = std::max(options.relay_max_bytes, largest);
      options.relay_host_peers = cfg.relay_peers;
      options.relay_scalar_sum = cfg.relay_scalar_sum;
      if (cfg.wires.size() == 1 && cfg.wires[0]) options.wire = cfg.wires[0];
      auto comm = tpar::make_communicator(group, options);
      for (Wiring w : cfg.chain_wirings) {
        if (!cfg.quiet)
          std::fprintf(stderr, "%s: chain %s %s %s\n", program.c_str(), human_bytes(bytes).c_str(),
                       std::string(to_string(algo)).c_str(), wiring_name(w));
        std::unique_ptr<tpar::StreamAllreduce<tpar::AnyCommunicator>> streamed;
        if (w == Wiring::streams || w == Wiring::gated || w == Wiring::threads || w == Wiring::ride || w == Wiring::ride_ordered) {
          std::vector<tpar::Stream*> streams;
          for (auto& c : devs) streams.push_back(&c->stream());
          streamed = std::make_unique<tpar::StreamAllreduce<tpar::AnyCommunicator>>(comm, streams);
        }
        const tpar::RelayStats relay0 = comm.relay_stats();
        std::uint64_t warms0 = 0;
        for (auto& c : devs) warms0 += c->warms();
        const auto t = time_rows(&comm, streamed.get(), w);
        tpar::RelayStats relay = comm.relay_stats();
        streamed.reset();
        const std::size_t wrong = check(true);
        all_ok &= wrong == 0;
        ChainRow row{bytes, std::string(comm.last_call().algorithm), wiring_name(w), t[0], none[0], t[0] - none[0], t[1], t[2],
                     t[3], t[4], wrong};
        rows.push_back(row);
        if (text)
          std::printf("  %9zu %8s %11s %9.1f %11.1f %12.1f %11.1f %8.1f %8.2f %8.2f %7zu\n", bytes, row.algo.c_str(),
                      row.wiring.c_str(), row.step_us, row.none_us, row.boundary_us, row.enqueue_us, row.cpu_us, row.submits,
                      row.waits, row.wrong);
        // the relay's view of those calls (warm-up included): how far apart the devices came
        relay.timed_arrivals -= relay0.timed_arrivals;
        relay.spread -= relay0.spread;
        for (std::size_t d = 0; d < relay.last.size() && d < relay0.last.size(); ++d) relay.last[d] -= relay0.last[d];
        relay.kernels -= relay0.kernels;
        relay.kernel_publish -= relay0.kernel_publish;
        relay.kernel_wait -= relay0.kernel_wait;
        relay.kernel_copy -= relay0.kernel_copy;
        relay.kernel_gaps -= relay0.kernel_gaps;
        relay.kernel_gap -= relay0.kernel_gap;
        if (text && relay.timed_arrivals) std::printf("#   %s: %s\n", row.algo.c_str(), tpar::relay_arrivals(relay).c_str());
        if (text && relay.kernels) std::printf("#   %s: %s\n", row.algo.c_str(), tpar::relay_kernel_times(relay).c_str());
        std::uint64_t warms = 0;
        for (auto& c : devs) warms += c->warms();
        if (text && cfg.chain_warm && (w == Wiring::ride || w == Wiring::ride_ordered))
          std::printf("#   warm: %llu read%s recorded beside a riding kernel (none where no call rode)\n",
                      static_cast<unsigned long long>(warms - warms0), warms - warms0 == 1 ? "" : "s");
      }
    }
    if (text)
      std::printf("  %9zu %8s %11s %9.1f %11s %12s %11.1f %8.1f %8.2f %8.2f %7zu\n", bytes, "-", "no AR", none[0], "-", "-", none[1],
                  none[2], none[3], none[4], none_wrong);
  }
  if (cfg.json) {
    std::printf("{\"devices\": %zu, \"steps\": %u, \"work_bytes\": %zu, \"host_peers\": %u, \"rows\": [", n, steps, cfg.chain_work,
                cfg.relay_peers);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      std::printf("%s{\"bytes\": %zu, \"algo\": %s, \"wiring\": %s, \"step_us\": %.3f, \"no_allreduce_us\": %.3f, "
                  "\"boundary_us\": %.3f, \"enqueue_us\": %.3f, \"cpu_us\": %.3f, \"submits\": %.3f, \"waits\": %.3f, "
                  "\"wrong\": %zu}",
                  i ? ", " : "", r.bytes, tpar_cli::json_string(r.algo).c_str(), tpar_cli::json_string(r.wiring).c_str(), r.step_us,
                  r.none_us, r.boundary_us, r.enqueue_us, r.cpu_us, r.submits, r.waits, r.wrong);
    }
    std::printf("], \"all_correct\": %s}\n", all_ok ? "true" : "false");
  } else if (cfg.csv) {
    std::printf("bytes,algo,wiring,step_us,no_allreduce_us,boundary_us,enqueue_us,cpu_us,submits,waits,wrong\n");
    for (const auto& r : rows)
      std::printf("%zu,%s,%s,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%zu\n", r.bytes, r.algo.c_str(), r.wiring.c_str(), r.step_us,
                  r.none_us, r.boundary_us, r.enqueue_us, r.cpu_us, r.submits, r.waits, r.wrong);
  } else {
    std::printf("# %s\n", all_ok ? "every result checked correct on every device" : "WRONG RESULTS: see #wrong");
  }
  return all_ok ? 0 : exit_wrong_results;
}

}  // namespace tpar_bench
