// The CPU time of tpar's own threads (named "tpar-...": ProxyBridge's tpar-bridge-J, the
// relay's tpar-relay and tpar-relay-h), read per thread from /proc/self/task: what an
// idle-CPU contract is measured by. Unlike the process's CPU time, it does not take in
// the driver's threads finishing their own work, nor depend on how loaded the machine is:
// a blocked thread accumulates nothing however long it waits for a core.
#pragma once

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace tpar_test {

struct ThreadsCpu {
  std::size_t threads = 0;        // tpar's threads alive
  std::chrono::nanoseconds cpu{0};  // their CPU time so far (user + system)
};

namespace thread_cpu_detail {
inline std::string read_all(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}
// schedstat's nanoseconds where the kernel keeps them, else stat's clock ticks.
inline std::chrono::nanoseconds cpu_of(const std::string& dir) {
  const std::string sched = read_all(dir + "/schedstat");
  if (!sched.empty()) return std::chrono::nanoseconds(std::strtoll(sched.c_str(), nullptr, 10));
  const std::string stat = read_all(dir + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return {};
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  long long ticks = 0;
  for (int i = 3; in >> field; ++i)  // fields counted as in proc(5)
    if (i == 14 || i == 15) ticks += std::strtoll(field.c_str(), nullptr, 10);
  return std::chrono::nanoseconds(ticks * 1000000000LL / ::sysconf(_SC_CLK_TCK));
}
}  // namespace thread_cpu_detail

inline ThreadsCpu tpar_threads_cpu() {
  ThreadsCpu out;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    if (thread_cpu_detail::read_all(dir + "/comm").rfind("tpar-", 0) != 0) continue;
    ++out.threads;
    out.cpu += thread_cpu_detail::cpu_of(dir);
  }
  ::closedir(d);
  return out;
}

}  // namespace tpar_test
