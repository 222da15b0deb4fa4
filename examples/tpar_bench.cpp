// tpar-bench: AllReduce performance and correctness in the manner of nccl-tests'
// all_reduce_perf. Times back-to-back in-place calls per size, then checks results:
// integer inputs must come out exact on every device, and random inputs are compared
// with a double-precision sum. `--link` first measures the host-staging copy bandwidth
// (device->host, host->device, both at once; each device alone and all together) and
// then reports each row's efficiency against the bound that bandwidth sets.
#include <tpar/tpar.hpp>

#include "common/cli.hpp"
#include "common/vk_buffer.hpp"

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace {

using Clock = std::chrono::steady_clock;
const std::string program = "tpar-bench";

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU time of the calling thread only.
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::string human_bytes(std::size_t b) {
  char buf[32];
  if (b >= (std::size_t{1} << 30) && b % (std::size_t{1} << 30) == 0) std::snprintf(buf, sizeof buf, "%zuG", b >> 30);
  else if (b >= (std::size_t{1} << 20) && b % (std::size_t{1} << 20) == 0) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), what.c_str());
  std::exit(1);
}

void vk_check(vk::Result r, const char* what) {
  if (r != vk::Result::eSuccess) die(std::string(what) + ": " + vk::to_string(r));
}

using tpar_example::Buffer;

// One device's buffers and a way to run copies on it, outside any timing.
struct DeviceRig {
  tpar::Device* dev;
  std::unique_ptr<Buffer> data, pristine, stage;
  vk::CommandPool pool;
  tpar::Timeline timeline;
  std::uint64_t value = 0;

  DeviceRig(tpar::Device& d, std::size_t bytes) : dev(&d), timeline(d.handle()) {
    data = std::make_unique<Buffer>(d, bytes, false);
    pristine = std::make_unique<Buffer>(d, bytes, false);
    stage = std::make_unique<Buffer>(d, bytes, true);
    vk::CommandPoolCreateInfo info(vk::CommandPoolCreateFlagBits::eTransient, d.compute_queue().family());
    vk_check(d.handle().createCommandPool(&info, nullptr, &pool), "vkCreateCommandPool");
  }
  ~DeviceRig() { dev->handle().destroyCommandPool(pool); }

  // Records `record` into a fresh command buffer, submits it after everything queued so
  // far, and returns the value it signals.
  template <class F>
  std::uint64_t run(F&& record) {
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(dev->handle().allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const vk::MemoryBarrier all(vk::AccessFlagBits::eMemoryWrite, vk::AccessFlagBits::eMemoryRead | vk::AccessFlagBits::eMemoryWrite);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands, {}, 1, &all, 0, nullptr, 0, nullptr);
    record(cb);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eAllCommands, vk::PipelineStageFlagBits::eAllCommands | vk::PipelineStageFlagBits::eHost,
                       {}, 1, &all, 0, nullptr, 0, nullptr);
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    const vk::Semaphore sem = timeline.handle();
    const std::uint64_t signal = ++value;
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &signal);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    vk_check(dev->compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit");
    pending.push_back({cb, signal});
    return signal;
  }
  void finish() {
    const vk::Semaphore sem = timeline.handle();
    vk_check(tpar::detail::wait_all(dev->handle(), std::span(&sem, 1), std::span(&value, 1), std::chrono::seconds(60)), "waiting for a copy");
    for (auto& p : pending) dev->handle().freeCommandBuffers(pool, 1, &p.first);
    pending.clear();
  }
  std::vector<std::pair<vk::CommandBuffer, std::uint64_t>> pending;

  void copy(vk::Buffer from, vk::Buffer to, std::size_t bytes) {
    run([&](vk::CommandBuffer cb) {
      const vk::BufferCopy region(0, 0, bytes);
      cb.copyBuffer(from, to, 1, &region);
    });
  }
};

// Host-staging bandwidth. The paths a device can move data between its memory and host
// memory imported into it: copy engines (vkCmdCopyBuffer) on the transfer queue, the
// compute queue, or a second transfer queue; or compute shaders that write to / read from
// the host memory directly over PCIe.
enum class Path { ce_d2h, ce_h2d_compute, ce_h2d_transfer2, sm_d2h, sm_h2d };

const char* path_name(Path p) {
  switch (p) {
    case Path::ce_d2h: return "copy d2h (transfer queue)";
    case Path::ce_h2d_compute: return "copy h2d (compute queue)";
    case Path::ce_h2d_transfer2: return "copy h2d (2nd transfer queue)";
    case Path::sm_d2h: return "shader d2h (compute queue)";
    case Path::sm_h2d: return "shader h2d (compute queue)";
  }
  return "?";
}

struct LinkCombo {
  std::vector<Path> paths;
  std::vector<double> alone;  // GB/s per device, each device alone (all paths' bytes)
  double all = 0;             // GB/s per device, every device at once
};

struct LinkFigures {
  std::vector<LinkCombo> combos;
  // The data path the communicator uses (copy d2h on the transfer queue, copy h2d on the
  // compute queue), every device at once, GB/s per device: the bound rows are judged by.
  double d2h_all = 0, h2d_all = 0, duplex_all = 0;
  // The same with the copy h2d on the second transfer queue (0 where a device has none):
  // the bound of ring calls whose downloads run there.
  double h2d2_all = 0, duplex2_all = 0;
};

// `window` (0: all of `bytes`): device->host copies cycle through that much host memory
// per device, to see how the host's cache takes a small footprint (docs/PERFORMANCE.md).
LinkFigures measure_link(tpar::DeviceGroup& group, std::size_t bytes, std::size_t window, bool quiet) {
  const std::size_t n = group.size();
  tpar::HostImport::check_support(group);
  if (!quiet) std::fprintf(stderr, "%s: measuring host-staging bandwidth (%s per copy)\n", program.c_str(), human_bytes(bytes).c_str());
  // Host memory: the first half receives device->host traffic, the second half feeds
  // host->device, so concurrent directions never touch the same bytes.
  tpar::HostImport::Generation staging(group, 2 * bytes, 1, bytes);
  const std::uint32_t words = static_cast<std::uint32_t>(bytes / 4);
  struct Dev {
    std::unique_ptr<Buffer> second;
    vk::CommandPool compute_pool, transfer_pool;
    vk::DescriptorPool descriptors;
    vk::DescriptorSet to_host, from_host;
    std::vector<tpar::Timeline> timelines;  // compute, transfer, second transfer
    std::uint64_t values[3] = {0, 0, 0};
  };
  std::vector<Dev> devs(n);
  for (std::size_t d = 0; d < n; ++d) {
    auto& dev = group[d];
    auto& x = devs[d];
    const vk::Device vkd = dev.handle();
    x.second = std::make_unique<Buffer>(dev, bytes, false);
    vk::CommandPoolCreateInfo cp(vk::CommandPoolCreateFlagBits::eTransient, dev.compute_queue().family());
    vk_check(vkd.createCommandPool(&cp, nullptr, &x.compute_pool), "vkCreateCommandPool");
    cp.queueFamilyIndex = dev.transfer_queue().family();
    vk_check(vkd.createCommandPool(&cp, nullptr, &x.transfer_pool), "vkCreateCommandPool");
    for (int q = 0; q < 3; ++q) x.timelines.emplace_back(vkd);
    vk::DescriptorPoolSize size(vk::DescriptorType::eStorageBuffer, 6);
    vk::DescriptorPoolCreateInfo dp({}, 2, 1, &size);
    if (dev.kernels().update_after_bind()) dp.flags = vk::DescriptorPoolCreateFlagBits::eUpdateAfterBind;
    vk_check(vkd.createDescriptorPool(&dp, nullptr, &x.descriptors), "vkCreateDescriptorPool");
    const vk::DescriptorSetLayout layouts[2] = {dev.kernels().set_layout(), dev.kernels().set_layout()};
    vk::DescriptorSet sets[2];
    vk::DescriptorSetAllocateInfo ai(x.descriptors, 2, layouts);
    vk_check(vkd.allocateDescriptorSets(&ai, sets), "vkAllocateDescriptorSets");
    x.to_host = sets[0];
    x.from_host = sets[1];
    const vk::DescriptorBufferInfo scratch(staging.scratch(d), 0, bytes), second(x.second->buffer, 0, bytes),
        host_out(staging.host_buffer(d, d), 0, bytes), host_in(staging.host_buffer(d, d), bytes, bytes);
    // Binding 2 (a kernel's own host staging) is not used here, but must hold a buffer.
    const vk::WriteDescriptorSet w[6] = {
        vk::WriteDescriptorSet(x.to_host, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &scratch),
        vk::WriteDescriptorSet(x.to_host, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_out),
        vk::WriteDescriptorSet(x.to_host, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_out),
        vk::WriteDescriptorSet(x.from_host, 0, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &second),
        vk::WriteDescriptorSet(x.from_host, 1, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_in),
        vk::WriteDescriptorSet(x.from_host, 2, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &host_in)};
    vkd.updateDescriptorSets(6, w, 0, nullptr);
  }
  const int reps = 4;
  // Submits one path on one device; returns the (queue slot, command buffer) to free.
  auto submit = [&](std::size_t d, Path path) {
    auto& dev = group[d];
    auto& x = devs[d];
    const int slot = path == Path::ce_d2h ? 1 : path == Path::ce_h2d_transfer2 ? 2 : 0;
    tpar::Queue* queue = slot == 0 ? &dev.compute_queue() : slot == 1 ? &dev.transfer_queue() : dev.second_transfer_queue();
    const vk::CommandPool pool = slot == 0 ? x.compute_pool : x.transfer_pool;
    vk::CommandBuffer cb;
    vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
    vk_check(dev.handle().allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
    vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eOneTimeSubmit);
    vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
    const bool shader = path == Path::sm_d2h || path == Path::sm_h2d;
    const vk::PipelineStageFlags stage = shader ? vk::PipelineStageFlags(vk::PipelineStageFlagBits::eComputeShader)
                                                : vk::PipelineStageFlags(vk::PipelineStageFlagBits::eTransfer);
    const vk::MemoryBarrier m(vk::AccessFlagBits::eMemoryWrite, vk::AccessFlagBits::eMemoryWrite | vk::AccessFlagBits::eMemoryRead);
    for (int r = 0; r < reps; ++r) {
      if (shader) {
        auto& k = dev.kernels();
        tpar::KernelArgs args;
        args.count = words;
        const bool out = path == Path::sm_d2h;
        args.mode = static_cast<std::uint32_t>(out ? tpar::PackMode::encode : tpar::PackMode::zeros);
        if (!out) args.mode = static_cast<std::uint32_t>(tpar::CombineMode::unpack);
        cb.bindPipeline(vk::PipelineBindPoint::eCompute, k.pipeline(out ? tpar::Kernel::pack : tpar::Kernel::combine, tpar::Wire::f32));
        cb.bindDescriptorSets(vk::PipelineBindPoint::eCompute, k.layout(), 0, 1, out ? &x.to_host : &x.from_host, 0, nullptr);
        cb.pushConstants(k.layout(), vk::ShaderStageFlagBits::eCompute, 0, sizeof args, &args);
        cb.dispatch(tpar::kernel_groups(words, dev.capabilities().max_workgroups_x), 1, 1);
      } else {
        const vk::Buffer host = staging.host_buffer(d, d);
        const vk::BufferCopy to_host(0, 0, bytes), from_host(bytes, 0, bytes);
        if (path == Path::ce_d2h && window && window < bytes) {
          for (std::size_t off = 0; off < bytes; off += window) {  // each part over the window's start
            const vk::BufferCopy part(off, 0, std::min(window, bytes - off));
            cb.copyBuffer(staging.scratch(d), host, 1, &part);
          }
        } else if (path == Path::ce_d2h) cb.copyBuffer(staging.scratch(d), host, 1, &to_host);
        else cb.copyBuffer(host, x.second->buffer, 1, &from_host);
      }
      cb.pipelineBarrier(stage, stage, {}, 1, &m, 0, nullptr, 0, nullptr);
    }
    vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
    const vk::Semaphore sem = x.timelines[slot].handle();
    const std::uint64_t signal = ++x.values[slot];
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &signal);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    vk_check(queue->submit(std::span(&si, 1)), "vkQueueSubmit");
    return std::make_pair(pool, cb);
  };
  // GB/s per device for `paths` run concurrently on each of `devices`.
  auto run = [&](const std::vector<std::size_t>& devices, const std::vector<Path>& paths) {
    std::vector<std::pair<std::size_t, std::pair<vk::CommandPool, vk::CommandBuffer>>> cbs;
    const auto t0 = Clock::now();
    for (auto d : devices)
      for (Path p : paths) cbs.push_back({d, submit(d, p)});
    for (auto d : devices)
      for (int q = 0; q < 3; ++q) {
        const vk::Semaphore sem = devs[d].timelines[q].handle();
        vk_check(tpar::detail::wait_all(group[d].handle(), std::span(&sem, 1), std::span(&devs[d].values[q], 1),
                                        std::chrono::seconds(120)),
                 "waiting for link copies");
      }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    for (auto& [d, c] : cbs) group[d].handle().freeCommandBuffers(c.first, 1, &c.second);
    return double(bytes) * reps * double(paths.size()) / seconds / 1e9;
  };
  const bool two = [&] {
    for (std::size_t d = 0; d < n; ++d)
      if (!group[d].second_transfer_queue()) return false;
    return true;
  }();
  std::vector<std::vector<Path>> combos = {{Path::ce_d2h}, {Path::ce_h2d_compute}, {Path::sm_d2h}, {Path::sm_h2d},
                                           {Path::ce_d2h, Path::ce_h2d_compute}, {Path::ce_d2h, Path::sm_h2d},
                                           {Path::sm_d2h, Path::ce_h2d_compute}};
  if (two) {
    combos.insert(combos.begin() + 2, {Path::ce_h2d_transfer2});
    combos.push_back({Path::ce_d2h, Path::ce_h2d_transfer2});
    combos.push_back({Path::sm_d2h, Path::ce_h2d_transfer2});
  }
  std::vector<std::size_t> all(n);
  for (std::size_t d = 0; d < n; ++d) all[d] = d;
  LinkFigures f;
  for (int pass = 0; pass < 2; ++pass) {  // the first pass warms up (pins pages, wakes links)
    f.combos.clear();
    for (const auto& paths : combos) {
      LinkCombo c;
      c.paths = paths;
      for (std::size_t d = 0; d < n; ++d) c.alone.push_back(run({d}, paths));
      c.all = run(all, paths);
      f.combos.push_back(c);
    }
  }
  for (const auto& c : f.combos) {
    if (c.paths == std::vector<Path>{Path::ce_d2h}) f.d2h_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_h2d_compute}) f.h2d_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_d2h, Path::ce_h2d_compute}) f.duplex_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_h2d_transfer2}) f.h2d2_all = c.all;
    if (c.paths == std::vector<Path>{Path::ce_d2h, Path::ce_h2d_transfer2}) f.duplex2_all = c.all;
  }
  for (std::size_t d = 0; d < n; ++d) {
    const vk::Device vkd = group[d].handle();
    vkd.destroyDescriptorPool(devs[d].descriptors);
    vkd.destroyCommandPool(devs[d].compute_pool);
    vkd.destroyCommandPool(devs[d].transfer_pool);
  }
  return f;
}

struct Config {
  std::vector<std::size_t> sizes;
  std::size_t min_bytes = 16 << 10, max_bytes = 0, factor = 4;
  int iters = 0, warmup = 5, repeat = 1;
  std::vector<std::optional<tpar::Wire>> wires{std::nullopt};
  std::vector<tpar::AlgoChoice> algos{tpar::AlgoChoice::automatic};
  tpar::SyncChoice sync = tpar::SyncChoice::automatic;
  bool link = false, link_only = false, csv = false, json = false, quiet = false;
  std::size_t link_bytes = 256 << 20;
  std::size_t link_window = 0;
  std::size_t piece_bytes = 0;
  std::uint32_t lanes = 0;
  std::uint32_t max_pieces = 0;
  tpar::DownloadQueue downloads = tpar::DownloadQueue::compute;
  std::uint32_t defer = 1;  // calls per submission in the timed loop
  std::uint32_t depth = 0;  // 0: tpar's default, or 2 x defer (at most 8) with --defer
  bool profile = false;
  std::string profile_out;
  bool wake = false;
  bool submit_cost = false;
  tpar::GroupOptions group;
  bool explicit_devices = false;
};

void print_help() {
  std::printf(
      "Usage: tpar-bench [options]\n"
      "Times tpar's AllReduce on the selected devices over a range of sizes (back-to-back,\n"
      "in place, f32 payload), then checks every result. Columns: bytes and count of the f32\n"
      "payload, wire, algorithm, sync, time per call (us), algbw = bytes/time and busbw =\n"
      "algbw*2(n-1)/n (GB/s), max error relative to sum|x| on random data, #wrong values on\n"
      "integer data (must be 0), host CPU time per call (us: every thread of the process, less\n"
      "the bench's own wait for the results), and with --link the\n"
      "efficiency against the host-staging bound.\n\n"
      "Sizes:\n"
      "  -b, --min-bytes SIZE  smallest payload (default 16K)\n"
      "  -e, --max-bytes SIZE  largest payload (default 256M on GPUs, 4M on lavapipe)\n"
      "  -f, --factor N        multiply by N between sizes (default 4)\n"
      "  --sizes A,B,...       exactly these sizes (bytes; K, M, G suffixes)\n"
      "Runs:\n"
      "  -n, --iters N         timed calls per size (default: 200 up to 1M, 40 up to 16M, 10 above)\n"
      "  -w, --warmup N        untimed calls first (default 5)\n"
      "  -r, --repeat R        time R runs of N calls; report each figure's median over the\n"
      "                        runs (default 1)\n"
      "  --wire W              auto, f32, bf16, f16 or all (default auto)\n"
      "  --algo A              auto, ring, oneshot or all (default auto)\n"
      "  --sync S              auto, native or proxy (default auto)\n"
      "  --link                measure host-staging bandwidth first, and report efficiency\n"
      "  --link-only           only measure the host-staging bandwidth\n"
      "  --wake                only measure how late a host thread blocked in vkWaitSemaphores\n"
      "                        wakes after the GPU signals (what ProxyBridge pays per hop)\n"
      "  --submit-cost         only measure the host CPU of vkQueueSubmit on device 0 by\n"
      "                        batches per submission (-n: batches per row, default 4096)\n"
      "  --link-bytes SIZE     bytes per link copy (default 256M)\n"
      "  --link-window SIZE    device->host link copies cycle through SIZE of host memory per\n"
      "                        device (default: all of --link-bytes)\n"
      "  --piece-bytes SIZE    ChunkedRing: fixed f32 payload per pipelined piece (default:\n"
      "                        automatic, see --max-pieces)\n"
      "  --max-pieces N        ChunkedRing: at most N pieces per chunk, each at least 1 MiB on\n"
      "                        the wire (default 4)\n"
      "  --lanes N             ChunkedRing: pieces in flight per device (default 4)\n"
      "  --downloads Q         ChunkedRing: where downloads run: compute (in the combine's\n"
      "                        batch, the default) or separate (batches of their own on the\n"
      "                        second transfer queue, a second copy engine)\n"
      "  --defer K             timed calls go K to a submission: K calls with\n"
      "                        AllreduceArgs::defer, then flush() (default 1: each call\n"
      "                        submits itself)\n"
      "  --depth D             calls in flight, each with its own staging slots (default 2,\n"
      "                        or 2K up to 8 with --defer K)\n"
      "  --profile             after each row, one more call with GPU timestamps around every\n"
      "                        batch: per device and queue, batches, busy time and the span\n"
      "  --profile-out PREFIX  also write every batch to PREFIX-<bytes>-<wire>-<algo>.csv\n"
      "Output:\n"
      "  --csv, --json         machine-readable table on stdout\n"
      "  -q, --quiet           no progress on stderr\n"
      "  -h, --help            this text\n\n"
      "TPAR_SYNC, TPAR_ALGO and TPAR_WIRE apply where the flags are not given.\n\n%s",
      tpar_cli::device_flags_help());
}

Config parse(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    auto value = [&]() -> std::string_view {
      if (i + 1 >= argc) tpar_cli::usage_error(program, std::string(a) + " needs a value");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      print_help();
      std::exit(0);
    } else if (a == "-b" || a == "--min-bytes") {
      c.min_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "-e" || a == "--max-bytes") {
      c.max_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "-f" || a == "--factor") {
      c.factor = tpar_cli::parse_number<std::size_t>(program, a, value());
      if (c.factor < 2) tpar_cli::usage_error(program, "--factor must be at least 2");
    } else if (a == "--sizes") {
      c.sizes = tpar_cli::parse_list(program, a, value(), [&](std::string_view t) { return tpar_cli::parse_size(program, a, t); });
    } else if (a == "-n" || a == "--iters") {
      c.iters = tpar_cli::parse_number<int>(program, a, value());
      if (c.iters < 1) tpar_cli::usage_error(program, "--iters must be at least 1");
    } else if (a == "-r" || a == "--repeat") {
      c.repeat = tpar_cli::parse_number<int>(program, a, value());
      if (c.repeat < 1) tpar_cli::usage_error(program, "--repeat must be at least 1");
    } else if (a == "-w" || a == "--warmup") {
      c.warmup = tpar_cli::parse_number<int>(program, a, value());
    } else if (a == "--wire") {
      const std::string_view w = value();
      if (w == "all") c.wires = {tpar::Wire::f32, tpar::Wire::bf16, tpar::Wire::f16};
      else if (w == "auto") c.wires = {std::nullopt};
      else if (auto p = tpar::parse_wire(w)) c.wires = {*p};
      else tpar_cli::usage_error(program, "--wire takes auto, f32, bf16, f16 or all");
    } else if (a == "--algo") {
      const std::string_view v = value();
      if (v == "all") c.algos = {tpar::AlgoChoice::oneshot, tpar::AlgoChoice::ring};
      else if (v == "auto") c.algos = {tpar::AlgoChoice::automatic};
      else if (v == "ring") c.algos = {tpar::AlgoChoice::ring};
      else if (v == "oneshot") c.algos = {tpar::AlgoChoice::oneshot};
      else tpar_cli::usage_error(program, "--algo takes auto, ring, oneshot or all");
    } else if (a == "--sync") {
      const std::string_view v = value();
      if (v == "auto") c.sync = tpar::SyncChoice::automatic;
      else if (v == "native") c.sync = tpar::SyncChoice::native;
      else if (v == "proxy") c.sync = tpar::SyncChoice::proxy;
      else tpar_cli::usage_error(program, "--sync takes auto, native or proxy");
    } else if (a == "--link") {
      c.link = true;
    } else if (a == "--link-only") {
      c.link = c.link_only = true;
    } else if (a == "--link-bytes") {
      c.link_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "--piece-bytes") {
      c.piece_bytes = tpar_cli::parse_size(program, a, value());
    } else if (a == "--max-pieces") {
      c.max_pieces = tpar_cli::parse_number<std::uint32_t>(program, a, value());
    } else if (a == "--link-window") {
      c.link_window = tpar_cli::parse_size(program, a, value());
    } else if (a == "--lanes") {
      c.lanes = tpar_cli::parse_number<std::uint32_t>(program, a, value());
    } else if (a == "--downloads") {
      const std::string_view v = value();
      if (v == "compute") c.downloads = tpar::DownloadQueue::compute;
      else if (v == "separate") c.downloads = tpar::DownloadQueue::separate;
      else tpar_cli::usage_error(program, "--downloads takes compute or separate");
    } else if (a == "--defer") {
      c.defer = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (c.defer < 1 || c.defer > 8) tpar_cli::usage_error(program, "--defer takes 1 to 8 calls per submission");
    } else if (a == "--depth") {
      c.depth = tpar_cli::parse_number<std::uint32_t>(program, a, value());
      if (c.depth < 1 || c.depth > 8) tpar_cli::usage_error(program, "--depth takes 1 to 8");
    } else if (a == "--wake") {
      c.wake = true;
    } else if (a == "--submit-cost") {
      c.submit_cost = true;
    } else if (a == "--profile") {
      c.profile = true;
    } else if (a == "--profile-out") {
      c.profile = true;
      c.profile_out = std::string(value());
    } else if (a == "--csv") {
      c.csv = true;
    } else if (a == "--json") {
      c.json = true;
    } else if (a == "-q" || a == "--quiet") {
      c.quiet = true;
    } else if (tpar_cli::parse_device_flag(program, argc, argv, i, c.group)) {
      c.explicit_devices = true;
    } else {
      tpar_cli::usage_error(program, "unknown option " + std::string(a));
    }
  }
  if (c.csv && c.json) tpar_cli::usage_error(program, "choose one of --csv and --json");
  if (c.link_window && !c.link) tpar_cli::usage_error(program, "--link-window needs --link or --link-only");
  return c;
}

// How late a host thread blocked in vkWaitSemaphores wakes after a queue's signal: the
// GPU copies for ~100 us, stamps the end, then signals; the host, already waiting, notes
// when it woke. Needs calibrated timestamps to relate the two clocks.
void measure_wake(tpar::DeviceGroup& group, int trials) {
  auto& dev = group[0];
  const auto& fns = dev.extension_fns();
  if (!fns.get_calibrated_timestamps) die("--wake needs VK_EXT_calibrated_timestamps on device 0");
  const std::size_t bytes = std::size_t{256} << 20;
  Buffer a(dev, bytes, false), b(dev, bytes, false);
  const vk::Device vkd = dev.handle();
  vk::CommandPool pool;
  vk::CommandPoolCreateInfo pi({}, dev.compute_queue().family());
  vk_check(vkd.createCommandPool(&pi, nullptr, &pool), "vkCreateCommandPool");
  vk::QueryPool queries;
  vk::QueryPoolCreateInfo qi({}, vk::QueryType::eTimestamp, 1);
  vk_check(vkd.createQueryPool(&qi, nullptr, &queries), "vkCreateQueryPool");
  vk::CommandBuffer cb;
  vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
  vk_check(vkd.allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
  vk::CommandBufferBeginInfo bi;
  vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
  cb.resetQueryPool(queries, 0, 1);
  const vk::BufferCopy region(0, 0, bytes / 4);
  cb.copyBuffer(a.buffer, b.buffer, 1, &region);
  cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, queries, 0);
  vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
  tpar::Timeline timeline(vkd);
  const double period = dev.capabilities().timestamp_period_ns;
  std::vector<double> late;
  for (int t = 0; t < trials; ++t) {
    const vk::Semaphore sem = timeline.handle();
    const std::uint64_t value = std::uint64_t(t) + 1;
    vk::TimelineSemaphoreSubmitInfo ti(0, nullptr, 1, &value);
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cb, 1, &sem, &ti);
    vk_check(dev.compute_queue().submit(std::span(&si, 1)), "vkQueueSubmit");
    vk_check(tpar::detail::wait_all(vkd, std::span(&sem, 1), std::span(&value, 1), std::chrono::seconds(10)), "vkWaitSemaphores");
    timespec woke{};
    clock_gettime(CLOCK_MONOTONIC, &woke);
    std::uint64_t stamp = 0;
    vk_check(vkd.getQueryPoolResults(queries, 0, 1, sizeof stamp, &stamp, sizeof stamp, vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait),
             "vkGetQueryPoolResults");
    const VkCalibratedTimestampInfoEXT infos[2] = {{VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_DEVICE_EXT},
                                                  {VK_STRUCTURE_TYPE_CALIBRATED_TIMESTAMP_INFO_EXT, nullptr, VK_TIME_DOMAIN_CLOCK_MONOTONIC_EXT}};
    std::uint64_t ts[2] = {0, 0}, deviation = 0;
    vk_check(vk::Result(fns.get_calibrated_timestamps(vkd, 2, infos, ts, &deviation)), "vkGetCalibratedTimestampsEXT");
    const double gpu_end_ns = double(ts[1]) + (double(stamp) - double(ts[0])) * period;
    const double woke_ns = double(woke.tv_sec) * 1e9 + double(woke.tv_nsec);
    late.push_back((woke_ns - gpu_end_ns) / 1e3);
  }
  std::sort(late.begin(), late.end());
  auto at = [&](double q) { return late[std::min(late.size() - 1, std::size_t(q * double(late.size())))]; };
  std::printf("# vkWaitSemaphores wake-up after a GPU signal, device 0 (%s), %d trials, microseconds\n",
              dev.capabilities().name.c_str(), trials);
  std::printf("  min %.1f  p50 %.1f  p90 %.1f  p99 %.1f  max %.1f\n", late.front(), at(0.5), at(0.9), at(0.99), late.back());
  vkd.destroyQueryPool(queries);
  vkd.destroyCommandPool(pool);
}

// Host CPU of vkQueueSubmit on device 0's compute queue, by batches per submission: each
// batch one tiny command buffer that waits on a timeline (already signalled) and signals
// another, as tpar's batches do. Says how much of a submission's cost is per call of
// vkQueueSubmit and how much per batch, i.e. what several calls per submission would save.
void measure_submit(tpar::DeviceGroup& group, int batches_total) {
  auto& dev = group[0];
  const vk::Device vkd = dev.handle();
  vk::CommandPool pool;
  vk::CommandPoolCreateInfo pi({}, dev.compute_queue().family());
  vk_check(vkd.createCommandPool(&pi, nullptr, &pool), "vkCreateCommandPool");
  vk::CommandBuffer cb;
  vk::CommandBufferAllocateInfo ai(pool, vk::CommandBufferLevel::ePrimary, 1);
  vk_check(vkd.allocateCommandBuffers(&ai, &cb), "vkAllocateCommandBuffers");
  vk::CommandBufferBeginInfo bi(vk::CommandBufferUsageFlagBits::eSimultaneousUse);
  vk_check(cb.begin(&bi), "vkBeginCommandBuffer");
  const vk::MemoryBarrier full(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eShaderRead);
  cb.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {}, 1, &full, 0, nullptr, 0,
                     nullptr);
  vk_check(vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkEndCommandBuffer(cb)), "vkEndCommandBuffer");
  tpar::Timeline ready(vkd), done(vkd);
  const vk::SemaphoreSignalInfo go(ready.handle(), 1);
  vk_check(vkd.signalSemaphore(&go), "vkSignalSemaphore");
  const vk::Semaphore ready_sem = ready.handle(), done_sem = done.handle();
  const std::uint64_t one = 1;
  const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
  std::uint64_t value = 0;
  std::printf("# vkQueueSubmit host CPU, device 0 (%s), compute queue, %d batches per row;\n"
              "# a batch = one command buffer, one timeline wait, one timeline signal\n",
              dev.capabilities().name.c_str(), batches_total);
  std::printf("# %8s %14s %12s\n", "batches", "us per submit", "us per batch");
  for (int per : {1, 2, 4, 8, 16}) {
    std::vector<std::uint64_t> values(per);
    std::vector<vk::TimelineSemaphoreSubmitInfo> tis(per);
    std::vector<vk::SubmitInfo> infos(per);
    double cpu_ns = 0;
    int submits = 0;
    for (int done_batches = 0; done_batches < batches_total; done_batches += per) {
      for (int k = 0; k < per; ++k) {
        values[k] = ++value;
        tis[k] = vk::TimelineSemaphoreSubmitInfo(1, &one, 1, &values[k]);
        infos[k] = vk::SubmitInfo(1, &ready_sem, &stage, 1, &cb, 1, &done_sem, &tis[k]);
      }
      timespec t0{}, t1{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
      vk_check(dev.compute_queue().submit(infos), "vkQueueSubmit");
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
      cpu_ns += double(t1.tv_sec - t0.tv_sec) * 1e9 + double(t1.tv_nsec - t0.tv_nsec);
      ++submits;
      if (submits % 16 == 0)  // keep the queue short; not timed
        vk_check(tpar::detail::wait_all(vkd, std::span(&done_sem, 1), std::span(&value, 1), std::chrono::seconds(10)), "vkWaitSemaphores");
    }
    vk_check(tpar::detail::wait_all(vkd, std::span(&done_sem, 1), std::span(&value, 1), std::chrono::seconds(10)), "vkWaitSemaphores");
    std::printf("  %8d %14.2f %12.2f\n", per, cpu_ns / 1e3 / submits, cpu_ns / 1e3 / (double(submits) * per));
  }
  vkd.destroyCommandPool(pool);
}

struct Row {
  std::size_t bytes, count;
  std::string wire, algo, sync;
  double time_us, algbw, busbw, max_err, cpu_us, eff;
  std::size_t wrong;
};

// The best time the host-staging links allow for one call of this schedule.
double bound_seconds(const tpar::Schedule& s, const LinkFigures& link) {
  double worst = 0;
  for (std::size_t d = 0; d < s.devices.size(); ++d) {
    double up = 0, down = 0;
    const bool second_engine = s.devices[d].count(tpar::Role::download) > 0 && link.duplex2_all > 0;
    const double h2d = second_engine ? link.h2d2_all : link.h2d_all;
    const double duplex = second_engine ? link.duplex2_all : link.duplex_all;
    for (const auto& b : s.devices[d].batches)
      for (const auto& c : b.commands) {
        const tpar::HostTraffic k = tpar::kernel_host_traffic(s.wire, c);  // kernels' own host traffic
        up += double(k.to_host);
        down += double(k.from_host);
        if (c.type != tpar::Command::Type::copy) continue;
        if (c.dst.kind == tpar::Region::Kind::host) up += double(c.bytes);
        if (c.src.kind == tpar::Region::Kind::host) down += double(c.bytes);
      }
    const double t = std::max({up / (link.d2h_all * 1e9), down / (h2d * 1e9), (up + down) / (duplex * 1e9)});
    worst = std::max(worst, t);
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg = parse(argc, argv);
  try {
    auto group = tpar::DeviceGroup::create(cfg.group);
    if (!cfg.explicit_devices && !group[0].capabilities().is_gpu()) {
      // No GPU: four lavapipe virtual devices, so the AllReduce has something to do.
      cfg.group.select.virtual_devices(4);
      group = tpar::DeviceGroup::create(cfg.group);
    }
    const std::size_t n = group.size();
    const bool gpu = group[0].capabilities().is_gpu();
    if (cfg.sizes.empty()) {
      const std::size_t max = cfg.max_bytes ? cfg.max_bytes : (gpu ? std::size_t{256} << 20 : std::size_t{4} << 20);
      for (std::size_t b = cfg.min_bytes; b <= max; b *= cfg.factor) cfg.sizes.push_back(b);
    }
    for (auto& b : cfg.sizes) b = b / 4 * 4;
    const std::size_t largest = *std::max_element(cfg.sizes.begin(), cfg.sizes.end());

    std::string names = group[0].capabilities().name;
    for (std::size_t d = 1; d < n; ++d)
      if (group[d].capabilities().name != names) names += ", " + group[d].capabilities().name;
    const std::string header = "tpar-bench " TPAR_VERSION_STRING ": " + std::to_string(n) + " device" + (n == 1 ? "" : "s") +
                               " (" + names + (group[0].is_virtual() ? ", virtual" : "") + ")";

    if (cfg.wake) {
      measure_wake(group, cfg.iters ? cfg.iters : 300);
      return 0;
    }
    if (cfg.submit_cost) {
      measure_submit(group, cfg.iters ? cfg.iters : 4096);
      return 0;
    }
    std::optional<LinkFigures> link;
    if (cfg.link) {
      link = measure_link(group, cfg.link_bytes, cfg.link_window, cfg.quiet);
      auto combo_name = [](const LinkCombo& c) {
        std::string s;
        for (Path p : c.paths) s += (s.empty() ? "" : " + ") + std::string(path_name(p));
        return s;
      };
      if (!cfg.csv && !cfg.json) {
        std::printf("# %s\n# host-staging bandwidth in GB/s per device (%s per transfer, through imported host memory);\n"
                    "# a row of two paths runs both at once and counts the bytes of both\n",
                    header.c_str(), human_bytes(cfg.link_bytes).c_str());
        if (cfg.link_window && cfg.link_window < cfg.link_bytes)
          std::printf("# device->host copies cycle through %s of host memory per device\n", human_bytes(cfg.link_window).c_str());
        std::printf("# %-62s", "paths");
        for (std::size_t d = 0; d < n; ++d) std::printf(" %8s", ("dev " + std::to_string(d)).c_str());
        std::printf(" %12s\n", n > 1 ? "all at once" : "");
        for (const auto& c : link->combos) {
          std::printf("  %-62s", combo_name(c).c_str());
          for (double v : c.alone) std::printf(" %8.2f", v);
          if (n > 1) std::printf(" %12.2f", c.all);
          std::printf("\n");
        }
        std::printf("\n");
      }
      if (cfg.link_only) {
        if (cfg.json) {
          std::printf("{\"devices\": %zu, \"link_bytes\": %zu, \"paths\": [", n, cfg.link_bytes);
          for (std::size_t i = 0; i < link->combos.size(); ++i) {
            const auto& c = link->combos[i];
            std::printf("%s{\"paths\": %s, \"alone\": [", i ? ", " : "", tpar_cli::json_string(combo_name(c)).c_str());
            for (std::size_t d = 0; d < n; ++d) std::printf("%s%.3f", d ? ", " : "", c.alone[d]);
            std::printf("], \"all_at_once\": %.3f}", c.all);
          }
          std::printf("]}\n");
        }
        return 0;
      }
    }

    std::vector<std::unique_ptr<DeviceRig>> rigs;
    for (std::size_t d = 0; d < n; ++d) rigs.push_back(std::make_unique<DeviceRig>(group[d], largest));

    std::vector<Row> rows;
    const std::size_t total = cfg.sizes.size() * cfg.wires.size() * cfg.algos.size();
    std::size_t done_rows = 0;
    bool all_ok = true;
    if (!cfg.csv && !cfg.json) {
      if (!cfg.link) std::printf("# %s\n", header.c_str());
      std::printf("# %12s %11s %5s %8s %12s %10s %9s %9s %9s %7s %8s %6s\n", "bytes", "count", "wire", "algo", "sync", "time(us)",
                  "algbw", "busbw", "max err", "#wrong", "cpu(us)", "eff");
    }
    for (auto algo : cfg.algos) {
      tpar::Options options;
      options.algo = algo;
      options.sync = cfg.sync;
      options.timeout = std::chrono::seconds(60);
      if (cfg.piece_bytes) options.piece_bytes = cfg.piece_bytes;
      options.profile = cfg.profile;
      if (cfg.lanes) options.lanes = cfg.lanes;
      if (cfg.max_pieces) options.max_pieces = cfg.max_pieces;
      options.downloads = cfg.downloads;
      options.depth = cfg.depth ? cfg.depth : cfg.defer > 1 ? std::min<std::uint32_t>(8, 2 * cfg.defer) : options.depth;
      auto comm = tpar::make_communicator(group, options);
      const std::string sync_name(to_string(comm.sync_kind()));
      if (!cfg.csv && !cfg.json && n > 1 && algo != tpar::AlgoChoice::oneshot)
        std::printf("# ring downloads: %s\n", comm.schedule_request(1).separate_downloads
                                                  ? "batches of their own (second transfer queue where the device has one)"
                                                  : "in the combine's batch (compute queue)");
      if (!cfg.csv && !cfg.json && cfg.defer > 1)
        std::printf("# timed calls: %u per submission (deferred, then flushed), depth %u\n", cfg.defer, options.depth);
      for (std::size_t bytes : cfg.sizes) {
        for (const auto& wire : cfg.wires) {
          const std::size_t count = bytes / 4;
          ++done_rows;
          if (!cfg.quiet && total > 1)
            std::fprintf(stderr, "%s: [%zu/%zu] %s %s %s\n", program.c_str(), done_rows, total, human_bytes(bytes).c_str(),
                         wire ? std::string(to_string(*wire)).c_str() : "auto", std::string(to_string(algo)).c_str());
          std::vector<tpar::BufferSpan> spans;
          for (auto& r : rigs) spans.push_back({r->data->buffer, 0, count, r->data->size});
          tpar::AllreduceArgs args;
          args.wire = wire;
          tpar::AllreduceArgs timed = args;
          timed.defer = cfg.defer > 1;

          // Inputs for timing: magnitudes near 2^-100, so that a batch of back-to-back
          // calls (each multiplying by n) stays within range; restored between batches.
          std::mt19937 rng(1234);
          std::uniform_real_distribution<float> u(1.0f, 2.0f);
          for (std::size_t d = 0; d < n; ++d) {
            float* p = static_cast<float*>(rigs[d]->stage->mapped);
            for (std::size_t i = 0; i < count; ++i) p[i] = std::ldexp(u(rng), -100) * ((i + d) % 2 ? 1.0f : -1.0f);
            rigs[d]->copy(rigs[d]->stage->buffer, rigs[d]->pristine->buffer, bytes);
            rigs[d]->copy(rigs[d]->pristine->buffer, rigs[d]->data->buffer, bytes);
          }
          for (auto& r : rigs) r->finish();
          auto restore = [&] {
            for (auto& r : rigs) r->copy(r->pristine->buffer, r->data->buffer, bytes);
            for (auto& r : rigs) r->finish();
          };
          const int batch = std::max(1, static_cast<int>(200.0 / std::max(1.0, std::log2(double(n)))));
          for (int i = 0; i < cfg.warmup; ++i) comm.allreduce(spans, args).wait();
          restore();
          const int iters = cfg.iters ? cfg.iters : bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 40 : 10;
          std::vector<double> runs, cpus;
          for (int rep = 0; rep < cfg.repeat; ++rep) {
          double seconds = 0, cpu = 0;
          for (int done = 0; done < iters;) {
            const int k = std::min(batch, iters - done);
            const double c0 = cpu_seconds();
            const auto t0 = Clock::now();
            tpar::Ticket last;
            for (int i = 0; i < k; ++i) {
              last = comm.allreduce(spans, timed);
              if ((i + 1) % cfg.defer == 0) comm.flush();
            }
            comm.flush();  // the rest of a group: counted as the calls' CPU, not as the wait's
            // The bench's own host wait is not tpar's work (some drivers spin in it).
            const double w0 = thread_cpu_seconds();
            last.wait();
            const double waited = thread_cpu_seconds() - w0;
            seconds += std::chrono::duration<double>(Clock::now() - t0).count();
            cpu += cpu_seconds() - c0 - waited;
            done += k;
            if (done < iters) restore();
          }
          runs.push_back(seconds);
          cpus.push_back(cpu);
          restore();
          }
          // Medians: a run disturbed by something else on the host moves neither figure.
          std::sort(runs.begin(), runs.end());
          std::sort(cpus.begin(), cpus.end());
          const double seconds = runs[runs.size() / 2];
          const double cpu = cpus[cpus.size() / 2];
          const auto info = comm.last_call();

          // Correctness: integers must be exact everywhere; random data within the bound.
          std::size_t wrong = 0;
          double max_err = 0;
          {
            std::vector<std::vector<float>> x(n, std::vector<float>(count));
            std::uniform_int_distribution<int> small(-8, 8);
            for (int pass = 0; pass < 2; ++pass) {
              std::uniform_real_distribution<float> big(-1.0f, 1.0f);
              for (std::size_t d = 0; d < n; ++d) {
                for (auto& v : x[d]) v = pass == 0 ? float(small(rng)) : big(rng);
                std::memcpy(rigs[d]->stage->mapped, x[d].data(), bytes);
                rigs[d]->copy(rigs[d]->stage->buffer, rigs[d]->data->buffer, bytes);
              }
              for (auto& r : rigs) r->finish();
              comm.allreduce(spans, args).wait();
              for (auto& r : rigs) r->copy(r->data->buffer, r->stage->buffer, bytes);
              for (auto& r : rigs) r->finish();
              const float* first = static_cast<const float*>(rigs[0]->stage->mapped);
              for (std::size_t i = 0; i < count; ++i) {
                double exact = 0, mag = 0;
                for (std::size_t d = 0; d < n; ++d) {
                  exact += x[d][i];
                  mag += std::fabs(x[d][i]);
                }
                for (std::size_t d = 0; d < n; ++d) {
                  const float got = static_cast<const float*>(rigs[d]->stage->mapped)[i];
                  if (pass == 0) wrong += got != static_cast<float>(exact);
                  else {
                    if (std::memcmp(&got, &first[i], sizeof got)) ++wrong;  // devices must agree bit for bit
                    if (mag > 0) max_err = std::max(max_err, std::fabs(double(got) - exact) / mag);
                    if (!std::isfinite(got)) ++wrong;
                  }
                }
              }
            }
          }
          all_ok &= wrong == 0;
          Row row;
          row.bytes = bytes;
          row.count = count;
          row.wire = std::string(to_string(info.wire));
          row.algo = std::string(info.algorithm);
          row.sync = sync_name;
          row.time_us = seconds / iters * 1e6;
          row.algbw = double(bytes) / (seconds / iters) / 1e9;
          row.busbw = row.algbw * 2.0 * double(n - 1) / double(n);
          row.max_err = max_err;
          row.wrong = wrong;
          row.cpu_us = cpu / iters * 1e6;
          row.eff = -1;
          if (link && n > 1) {
            auto rq = comm.schedule_request(count, wire);
            row.eff = bound_seconds(tpar::BySize::build(rq), *link) / (seconds / iters);
          }
          rows.push_back(row);
          if (!cfg.csv && !cfg.json) {
            char eff[16] = "-";
            if (row.eff >= 0) std::snprintf(eff, sizeof eff, "%5.0f%%", row.eff * 100);
            std::printf("  %12zu %11zu %5s %8s %12s %10.1f %9.2f %9.2f %9.2e %7zu %8.1f %6s\n", row.bytes, row.count,
                        row.wire.c_str(), row.algo.c_str(), row.sync.c_str(), row.time_us, row.algbw, row.busbw, row.max_err,
                        row.wrong, row.cpu_us, eff);
            std::fflush(stdout);
          }
          if (cfg.profile) {
            comm.allreduce(spans, args).wait();
            const tpar::CallProfile prof = comm.profile();
            std::string line = "#   profile: span " + std::to_string(int(prof.span_us())) + " us" + (prof.aligned ? "" : " (clocks not aligned)");
            for (std::size_t d = 0; d < n; ++d) {
              double busy[tpar::role_count] = {};
              int count[tpar::role_count] = {};
              double first_start[tpar::role_count] = {1e300, 1e300, 1e300}, last_end[tpar::role_count] = {};
              for (const auto& b : prof.devices[d]) {
                if (std::isnan(b.start_us)) continue;
                const int r = static_cast<int>(b.role);
                busy[r] += b.end_us - b.start_us;
                ++count[r];
                first_start[r] = std::min(first_start[r], b.start_us);
                last_end[r] = std::max(last_end[r], b.end_us);
              }
              char buf[256];
              std::snprintf(buf, sizeof buf, "; dev %zu: compute %d batches %.0f us busy [%.0f..%.0f], transfer %d batches %.0f us busy [%.0f..%.0f]",
                            d, count[0], busy[0], count[0] ? first_start[0] : 0.0, last_end[0], count[1], busy[1],
                            count[1] ? first_start[1] : 0.0, last_end[1]);
              line += buf;
              if (count[2]) {
                std::snprintf(buf, sizeof buf, ", download %d batches %.0f us busy [%.0f..%.0f]", count[2], busy[2], first_start[2], last_end[2]);
                line += buf;
              }
            }
            if (!cfg.csv && !cfg.json) std::printf("%s\n", line.c_str());
            if (prof.devices[0].size() <= 8 && !cfg.csv && !cfg.json)
              for (std::size_t d = 0; d < n; ++d) {
                std::printf("#     dev %zu:", d);
                for (const auto& b : prof.devices[d]) std::printf(" %s %.1f+%.1f |", b.what.c_str(), b.start_us, b.end_us - b.start_us);
                std::printf("\n");
              }
            if (!cfg.profile_out.empty()) {
              const std::string file = cfg.profile_out + "-" + std::to_string(bytes) + "-" + row.wire + "-" + row.algo + ".csv";
              if (std::FILE* f = std::fopen(file.c_str(), "w")) {
                std::fprintf(f, "device,batch,queue,what,start_us,end_us\n");
                for (std::size_t d = 0; d < n; ++d)
                  for (std::size_t b = 0; b < prof.devices[d].size(); ++b) {
                    const auto& t = prof.devices[d][b];
                    std::fprintf(f, "%zu,%zu,%s,%s,%.3f,%.3f\n", d, b, std::string(tpar::to_string(t.role)).c_str(),
                                 t.what.c_str(), t.start_us, t.end_us);
                  }
                std::fclose(f);
              }
            }
          }
        }
      }
    }
    if (cfg.csv) {
      std::printf("bytes,count,wire,algo,sync,time_us,algbw_gbps,busbw_gbps,max_err,wrong,cpu_us,efficiency\n");
      for (const auto& r : rows)
        std::printf("%zu,%zu,%s,%s,%s,%.3f,%.4f,%.4f,%.3e,%zu,%.3f,%s\n", r.bytes, r.count, r.wire.c_str(), r.algo.c_str(),
                    r.sync.c_str(), r.time_us, r.algbw, r.busbw, r.max_err, r.wrong, r.cpu_us,
                    r.eff >= 0 ? std::to_string(r.eff).c_str() : "");
    } else if (cfg.json) {
      std::printf("{\"devices\": %zu, \"names\": %s, \"rows\": [\n", n, tpar_cli::json_string(names).c_str());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const auto& r = rows[i];
        std::printf("  {\"bytes\": %zu, \"count\": %zu, \"wire\": \"%s\", \"algo\": \"%s\", \"sync\": \"%s\", \"time_us\": %.3f, "
                    "\"algbw_gbps\": %.4f, \"busbw_gbps\": %.4f, \"max_err\": %.3e, \"wrong\": %zu, \"cpu_us\": %.3f, "
                    "\"efficiency\": %s}%s\n",
                    r.bytes, r.count, r.wire.c_str(), r.algo.c_str(), r.sync.c_str(), r.time_us, r.algbw, r.busbw, r.max_err,
                    r.wrong, r.cpu_us, r.eff >= 0 ? std::to_string(r.eff).c_str() : "null", i + 1 < rows.size() ? "," : "");
      }
      std::printf("]}\n");
    } else {
      std::printf("# %s\n", all_ok ? "every result checked: correct on every device" : "WRONG RESULTS: see #wrong");
    }
    return all_ok ? 0 : 3;
  } catch (const tpar::Error& e) {
    die(e.what());
  } catch (const tpar_example::Failure& e) {
    die(e.what());
  }
}
