// tpar-group-cycles: what a process keeps after creating and destroying tpar's own
// DeviceGroup many times. Each cycle creates a group (one device opened K times, or K
// GPUs), a communicator and buffers, makes one AllReduce and checks its result on every
// device, then destroys them all. At cycles 1, 10, 100, 1000, ... and the last it prints
// the process's open file descriptors (/proc/self/fd), mapped regions (/proc/self/maps
// lines), resident memory (/proc/self/statm) and threads (/proc/self/task).
//
// Why: every group tpar creates has its own VkInstance, and the Vulkan loader loads the
// drivers with an instance and unloads them with the last one. On an H200 a process that
// cycled like this found no driver at its 30th create. DeviceGroup::create now keeps the
// drivers loaded for the process's life (detail::anchor_drivers in vk/device_group.hpp);
// this tool shows what the cycles leave behind (GroupOptions::keep_drivers_loaded = false
// with --let-drivers-unload, for comparison).
//
// --steady-from C: after the last cycle, fail (exit 1) if the open fds, mapped regions or
// threads grew from cycle C, or resident memory by more than --rss-slack KiB.
//
// Exit status: 0 when every cycle succeeded with the right sums (and, with --steady-from,
// nothing grew); 1 when a cycle failed, a sum was wrong or something grew; 2 on a usage
// error.
#include <tpar/tpar.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

namespace {

// Entries of a /proc/self directory, less "." and ".." (and, for fd/, the descriptor
// the listing itself holds open).
std::size_t entries(const char* dir) {
  std::size_t n = 0;
  if (DIR* d = ::opendir(dir)) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') ++n;
    ::closedir(d);
  }
  return n;
}

struct Footprint {
  std::size_t fds = 0, maps = 0, threads = 0;
  std::size_t rss_kib = 0;
};

Footprint footprint() {
  Footprint f;
  f.fds = entries("/proc/self/fd");
  if (f.fds) --f.fds;  // opendir's own descriptor
  f.threads = entries("/proc/self/task");
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) ++f.maps;
  std::ifstream statm("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  if (statm >> size >> resident) f.rss_kib = resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)) / 1024;
  return f;
}

void print(std::uint64_t cycle, const Footprint& f) {
  std::printf("cycle %8llu: fds %4zu  maps %5zu  rss %8zu KiB  threads %3zu\n", static_cast<unsigned long long>(cycle), f.fds,
              f.maps, f.rss_kib, f.threads);
  std::fflush(stdout);
}

// A host-visible, host-coherent buffer of `count` floats on one device, mapped.
struct Buffer {
  vk::Device device;
  vk::Buffer buffer;
  vk::DeviceMemory memory;
  float* data = nullptr;
  Buffer(tpar::Device& dev, std::size_t count) : device(dev.handle()) {
    vk::BufferCreateInfo info({}, count * sizeof(float), vk::BufferUsageFlagBits::eStorageBuffer);
    tpar::detail::check(device.createBuffer(&info, nullptr, &buffer), "vkCreateBuffer");
    vk::MemoryRequirements req;
    device.getBufferMemoryRequirements(buffer, &req);
    const auto props = dev.physical().getMemoryProperties();
    const auto want = vk::MemoryPropertyFlagBits::eHostVisible | vk::MemoryPropertyFlagBits::eHostCoherent;
    std::uint32_t type = 0;
    while (type < props.memoryTypeCount &&
           !(((req.memoryTypeBits >> type) & 1u) && (props.memoryTypes[type].propertyFlags & want) == want))
      ++type;
    if (type == props.memoryTypeCount) {
      device.destroyBuffer(buffer);
      throw tpar::Error(tpar::ErrorCode::unsupported, "no host-visible, host-coherent memory for a storage buffer");
    }
    vk::MemoryAllocateInfo alloc(req.size, type);
    if (const auto r = device.allocateMemory(&alloc, nullptr, &memory); r != vk::Result::eSuccess) {
      device.destroyBuffer(buffer);
      tpar::detail::check(r, "vkAllocateMemory");
    }
    void* mapped = nullptr;
    if (auto r = vk::Result(VULKAN_HPP_DEFAULT_DISPATCHER.vkBindBufferMemory(device, buffer, memory, 0));
        r != vk::Result::eSuccess || (r = device.mapMemory(memory, 0, VK_WHOLE_SIZE, {}, &mapped)) != vk::Result::eSuccess) {
      device.destroyBuffer(buffer);
      device.freeMemory(memory);
      tpar::detail::check(r, "vkBindBufferMemory/vkMapMemory");
    }
    data = static_cast<float*>(mapped);
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() {
    device.unmapMemory(memory);
    device.destroyBuffer(buffer);
    device.freeMemory(memory);
  }
};

// One cycle: group, communicator, one checked call, all destroyed on return. Small
// integers, so every summation order gives the same f32. Returns what was wrong, or "".
std::string cycle(const tpar::GroupOptions& options, std::size_t count) {
  auto group = tpar::DeviceGroup::create(options);
  const std::size_t n = group.size();
  std::vector<std::unique_ptr<Buffer>> buffers;  // before the communicator: it goes first
  std::vector<tpar::BufferSpan> spans;
  for (std::size_t d = 0; d < n; ++d) {
    buffers.push_back(std::make_unique<Buffer>(group[d], count));
    for (std::size_t i = 0; i < count; ++i) buffers[d]->data[i] = float(i % 7 + d);
    spans.push_back({buffers[d]->buffer, 0, count, count * sizeof(float)});
  }
  auto comm = tpar::make_communicator(group);
  comm.allreduce(spans).wait();
  for (std::size_t d = 0; d < n; ++d)
    for (std::size_t i = 0; i < count; ++i) {
      const float want = float(n * (i % 7) + n * (n - 1) / 2);
      if (buffers[d]->data[i] != want)
        return "device " + std::to_string(d) + " holds " + std::to_string(buffers[d]->data[i]) + " at " + std::to_string(i) +
               ", not " + std::to_string(want);
    }
  return "";
}

void usage_text(std::FILE* to) {
  std::fprintf(to,
               "usage: tpar-group-cycles --cycles N [--virtual K | -g K] [--count C] [--steady-from S [--rss-slack KIB]]\n"
               "                         [--let-drivers-unload]\n"
               "  --cycles N       create and destroy a group, a communicator and one checked AllReduce N times\n"
               "  --virtual K      one device opened K times (default 2)\n"
               "  -g, --gpus K     the first K GPUs\n"
               "  --count C        values per call (default 4096)\n"
               "  --steady-from S  fail if open fds, mapped regions or threads grew from cycle S to the last, or resident\n"
               "                   memory by more than --rss-slack KiB (default 2048)\n"
               "  --let-drivers-unload  groups made with keep_drivers_loaded = false: the loader loads and\n"
               "                   unloads the drivers with every group, as before tpar kept them loaded\n"
               "Prints open fds, mapped regions, resident memory and threads at cycles 1, 10, 100, ... and the last.\n"
               "Exit status: 0 all cycles right, 1 a cycle failed or something grew, 2 usage error.\n");
}

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "tpar-group-cycles: %s\n", why.c_str());
  usage_text(stderr);
  std::exit(2);
}

std::uint64_t number(const std::string& flag, const char* text) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (!*text || *end || text[0] == '-') usage(flag + " needs a whole number, not '" + text + "'");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::uint64_t cycles = 0, steady_from = 0, rss_slack_kib = 2048;
  std::uint32_t k = 2;
  bool gpus = false, virtual_given = false, cycles_given = false, let_unload = false;
  std::size_t count = 4096;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage_text(stdout);
      return 0;
    } else if (a == "--cycles") {
      cycles = number(a, value());
      cycles_given = true;
    } else if (a == "--virtual") {
      k = static_cast<std::uint32_t>(number(a, value()));
      virtual_given = true;
    } else if (a == "-g" || a == "--gpus") {
      k = static_cast<std::uint32_t>(number(a, value()));
      gpus = true;
    } else if (a == "--count") count = number(a, value());
    else if (a == "--steady-from") steady_from = number(a, value());
    else if (a == "--rss-slack") rss_slack_kib = number(a, value());
    else if (a == "--let-drivers-unload") let_unload = true;
    else usage("unknown argument " + a);
  }
  if (!cycles_given || cycles == 0) usage("--cycles N (N at least 1) is required");
  if (gpus && virtual_given) usage("--virtual and -g exclude each other");
  if (k < 1 || k > tpar::max_group_devices) usage("the device count must be 1 to " + std::to_string(tpar::max_group_devices));
  if (count < 1) usage("--count must be at least 1");
  if (steady_from > cycles) usage("--steady-from must not be past --cycles");

  tpar::GroupOptions options;
  if (gpus) options.select.first(k);
  else options.select.virtual_devices(k);
  options.keep_drivers_loaded = !let_unload;
  print(0, footprint());
  Footprint at_steady;
  std::uint64_t next_print = 1;
  for (std::uint64_t c = 1; c <= cycles; ++c) {
    try {
      if (const std::string wrong = cycle(options, count); !wrong.empty()) {
        std::fprintf(stderr, "tpar-group-cycles: cycle %llu: wrong sum: %s\n", static_cast<unsigned long long>(c), wrong.c_str());
        return 1;
      }
    } catch (const tpar::Error& e) {
      std::fprintf(stderr, "tpar-group-cycles: cycle %llu failed: %s\n", static_cast<unsigned long long>(c), e.what());
      print(c, footprint());
      return 1;
    }
    const bool printed = c == next_print || c == cycles || c == steady_from;
    if (printed) {
      const Footprint f = footprint();
      print(c, f);
      if (c == steady_from) at_steady = f;
    }
    if (c == next_print) next_print *= 10;
  }
  if (steady_from) {
    const Footprint last = footprint();
    bool grew = false;
    auto check = [&](const char* what, std::size_t from, std::size_t to, std::size_t slack) {
      if (to > from + slack) {
        std::fprintf(stderr, "tpar-group-cycles: %s grew from %zu at cycle %llu to %zu at cycle %llu\n", what, from,
                     static_cast<unsigned long long>(steady_from), to, static_cast<unsigned long long>(cycles));
        grew = true;
      }
    };
    check("open fds", at_steady.fds, last.fds, 0);
    check("mapped regions", at_steady.maps, last.maps, 0);
    check("threads", at_steady.threads, last.threads, 0);
    check("resident memory (KiB)", at_steady.rss_kib, last.rss_kib, rss_slack_kib);
    if (grew) return 1;
    std::printf("steady from cycle %llu: fds, mapped regions and threads did not grow, resident memory by at most %llu KiB\n",
                static_cast<unsigned long long>(steady_from), static_cast<unsigned long long>(rss_slack_kib));
  }
  std::printf("%llu cycles, every sum right\n", static_cast<unsigned long long>(cycles));
  return 0;
}
