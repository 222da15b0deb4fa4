// tpar-idle-cpu: whose threads use the CPU while tpar has nothing to do. Opens N devices
// (one GPU opened N times, or N GPUs), sets up what --mode says, lets it settle, then
// reads every thread's CPU time and voluntary context switches (its wake-ups) from
// /proc/self/task over --seconds, and prints them per thread, with the owner: the main
// thread, tpar's own threads (tpar-bridge-J, tpar-relay), or the driver's (everything
// else, the driver's threads that took the process's name "tpar-idle-cpu" included).
//
//   devices     the VkDevices alone, as a DeviceGroup opens them: the driver's baseline
//   semaphores  + what NativeImport holds, without a communicator: per device an
//               exportable timeline, imported into every peer
//   comm        + a communicator (--sync), after --calls calls, idle
//   pending     + a call whose ready point is never signalled (the main thread sleeps)
//   wait        + the same, the main thread blocked in Ticket::wait on it
//
// Usage errors exit 2, runtime failures 1.
#include <tpar/tpar.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace {

struct ThreadSample {
  std::string name;
  double cpu_ms = 0;          // user + system
  std::uint64_t wakeups = 0;  // voluntary context switches
};

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// CPU time of one thread in ms: schedstat's nanoseconds where the kernel keeps them,
// else stat's clock ticks (10 ms resolution).
double thread_cpu_ms(const std::string& dir) {
  const std::string sched = read_file(dir + "/schedstat");
  if (!sched.empty()) return std::strtod(sched.c_str(), nullptr) / 1e6;
  const std::string stat = read_file(dir + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; in >> field; ++i) {  // fields counted as in proc(5); state is 3
    if (i == 14) utime = std::strtod(field.c_str(), nullptr);
    if (i == 15) {
      stime = std::strtod(field.c_str(), nullptr);
      break;
    }
  }
  return (utime + stime) * 1000.0 / double(::sysconf(_SC_CLK_TCK));
}

std::map<int, ThreadSample> sample_threads() {
  std::map<int, ThreadSample> out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const int tid = std::atoi(e->d_name);
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    ThreadSample s;
    s.name = read_file(dir + "/comm");
    if (!s.name.empty() && s.name.back() == '\n') s.name.pop_back();
    s.cpu_ms = thread_cpu_ms(dir);
    std::istringstream status(read_file(dir + "/status"));
    for (std::string line; std::getline(status, line);)
      if (line.rfind("voluntary_ctxt_switches:", 0) == 0) s.wakeups = std::strtoull(line.c_str() + 24, nullptr, 10);
    out[tid] = s;
  }
  ::closedir(d);
  return out;
}

// tpar names every thread it starts (ProxyBridge: tpar-bridge-J); a thread nobody
// named carries the program's name, and here only the driver starts such threads.
std::string owner(int tid, const std::string& name) {
  if (tid == ::getpid()) return "main";
  if (name.rfind("tpar-bridge", 0) == 0 || name.rfind("tpar-relay", 0) == 0) return "tpar";
  return "driver";
}

// Reports every thread over `seconds`; `during` runs meanwhile on the main thread (or
// nothing: it sleeps).
void measure(double seconds, const std::function<void(std::chrono::nanoseconds)>& during) {
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // let start-up work settle
  const auto before = sample_threads();
  const auto t0 = std::chrono::steady_clock::now();
  const auto window = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
  if (during) during(window);
  else std::this_thread::sleep_for(window);
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto after = sample_threads();
  std::printf("%-8s %-16s %-7s %10s %8s %10s\n", "tid", "name", "owner", "cpu ms", "% core", "wakeups/s");
  std::map<std::string, double> by_owner;
  for (const auto& [tid, a] : after) {
    const auto b = before.find(tid);
    const double cpu = a.cpu_ms - (b == before.end() ? 0.0 : b->second.cpu_ms);
    const double wakeups = double(a.wakeups - (b == before.end() ? 0 : b->second.wakeups));
    const std::string who = owner(tid, a.name);
    by_owner[who] += cpu;
    std::printf("%-8d %-16s %-7s %10.3f %8.3f %10.1f%s\n", tid, a.name.c_str(), who.c_str(), cpu, 100.0 * cpu / (elapsed * 1e3),
                wakeups / elapsed, b == before.end() ? "  (new)" : "");
  }
  for (const auto& [tid, b] : before)
    if (!after.count(tid)) std::printf("%-8d %-16s %-7s (ended during the window)\n", tid, b.name.c_str(), owner(tid, b.name).c_str());
  std::printf("over %.2f s:", elapsed);
  for (const auto& [who, cpu] : by_owner) std::printf("  %s %.3f ms (%.3f%% of a core)", who.c_str(), cpu, 100.0 * cpu / (elapsed * 1e3));
  std::printf("\n");
}

// A host-visible buffer of `bytes` on one device, for the calls.
struct Buffer {
  vk::Device device;
  vk::Buffer buffer;
  vk::DeviceMemory memory;
  Buffer(tpar::Device& dev, vk::DeviceSize bytes) : device(dev.handle()) {
    vk::BufferCreateInfo info({}, bytes, vk::BufferUsageFlagBits::eStorageBuffer);
    tpar::detail::check(device.createBuffer(&info, nullptr, &buffer), "vkCreateBuffer");
    vk::MemoryRequirements req;
    device.getBufferMemoryRequirements(buffer, &req);
    const auto props = dev.physical().getMemoryProperties();
    std::uint32_t type = 0;
    while (type < props.memoryTypeCount && !((req.memoryTypeBits >> type) & 1u)) ++type;
    vk::MemoryAllocateInfo alloc(req.size, type);
    tpar::detail::check(device.allocateMemory(&alloc, nullptr, &memory), "vkAllocateMemory");
    tpar::detail::check(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(device, buffer, memory, 0), "vkBindBufferMemory");
  }
  ~Buffer() {
    device.destroyBuffer(buffer);
    device.freeMemory(memory);
  }
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "tpar-idle-cpu: %s\n"
               "usage: tpar-idle-cpu [--devices N] [--gpus] [--mode devices|semaphores|comm|pending|wait]\n"
               "                     [--sync auto|native|proxy] [--calls K] [--seconds S]\n"
               "  --devices N   devices in the group (default 2): one GPU opened N times, or with --gpus N GPUs\n"
               "  --mode        what the process holds while measured (default comm)\n"
               "  --sync        the communicator's cross-device sync (default auto)\n"
               "  --calls K     calls made before measuring (default 20)\n"
               "  --seconds S   the measuring window (default 3)\n",
               why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::uint32_t n = 2, calls = 20;
  bool gpus = false;
  double seconds = 3;
  std::string mode = "comm";
  tpar::SyncChoice sync = tpar::SyncChoice::automatic;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--devices") n = static_cast<std::uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    else if (a == "--gpus") gpus = true;
    else if (a == "--mode") mode = value();
    else if (a == "--calls") calls = static_cast<std::uint32_t>(std::strtoul(value().c_str(), nullptr, 10));
    else if (a == "--seconds") seconds = std::strtod(value().c_str(), nullptr);
    else if (a == "--sync") {
      const std::string s = value();
      if (s == "auto") sync = tpar::SyncChoice::automatic;
      else if (s == "native") sync = tpar::SyncChoice::native;
      else if (s == "proxy") sync = tpar::SyncChoice::proxy;
      else usage(("--sync " + s + " is not auto, native or proxy").c_str());
    } else if (a == "--help" || a == "-h") usage("what it measures: see the top of tests/tools/idle_cpu.cpp");
    else usage(("unknown argument " + a).c_str());
  }
  if (n < 1 || n > tpar::max_group_devices) usage("--devices must be 1 to 32");
  if (!(seconds > 0)) usage("--seconds must be positive");
  if (mode != "devices" && mode != "semaphores" && mode != "comm" && mode != "pending" && mode != "wait")
    usage(("--mode " + mode + " is not devices, semaphores, comm, pending or wait").c_str());
  try {
    tpar::GroupOptions g;
    if (gpus) g.select.first(n);
    else g.select.virtual_devices(n);
    auto group = tpar::DeviceGroup::create(g);
    std::printf("tpar-idle-cpu: %u x %s (%s), mode %s\n", n, group[0].capabilities().name.c_str(),
                group[0].capabilities().driver_name.c_str(), mode.c_str());
    if (mode == "devices") {
      measure(seconds, {});
      return 0;
    }
    if (mode == "semaphores") {
      std::vector<tpar::Timeline> sources;
      std::vector<tpar::Timeline> imports;
      for (std::uint32_t j = 0; j < n; ++j) sources.emplace_back(group[j].handle(), true);
      for (std::uint32_t d = 0; d < n; ++d)
        for (std::uint32_t j = 0; j < n; ++j)
          if (j != d) imports.push_back(tpar::detail::import_timeline(group[j], sources[j].handle(), group[d]));
      measure(seconds, {});
      return 0;
    }
    // A ready point on device 0 that nothing signals during the window (pending, wait);
    // made before the communicator, so that it outlives the work that waits on it.
    tpar::Timeline never(group[0].handle());
    tpar::Options o;
    o.sync = sync;
    o.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds + 30));
    // The buffers too: destroying the communicator first waits for the work on them.
    const std::size_t count = 4096;
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<tpar::BufferSpan> spans;
    for (std::uint32_t d = 0; d < n; ++d) {
      buffers.push_back(std::make_unique<Buffer>(group[d], count * sizeof(float)));
      spans.push_back({buffers.back()->buffer, 0, count, count * sizeof(float)});
    }
    auto comm = tpar::make_communicator(group, o);
    std::printf("sync: %s\n", comm.sync_reason().c_str());
    for (std::uint32_t i = 0; i < calls; ++i) comm.allreduce(spans).wait();
    if (mode == "comm") {
      measure(seconds, {});
      return 0;
    }
    std::vector<tpar::TimelinePoint> ready(n);
    ready[0] = {never.handle(), 1};
    tpar::AllreduceArgs args;
    args.ready = ready;
    tpar::Ticket t = comm.allreduce(spans, args);
    if (mode == "pending") measure(seconds, {});
    else
      measure(seconds, [&](std::chrono::nanoseconds window) {
        try {
          t.wait(window);
        } catch (const tpar::Error&) {
          // the expected timeout: the point comes only after the window
        }
      });
    never.signal(1);  // the call finishes; destroying the communicator waits for it
    return 0;
  } catch (const tpar::Error& e) {
    std::fprintf(stderr, "tpar-idle-cpu: %s\n", e.what());
    return 1;
  }
}
