// What every part of tpar-bench shares: its name, its clocks and how it stops on an error.
#pragma once

#include <tpar/tpar.hpp>

#include "common/vk_buffer.hpp"

#include <sys/resource.h>
#ifdef __linux__
#include <dirent.h>
#endif
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace tpar_bench {

using Clock = std::chrono::steady_clock;
inline const std::string program = "tpar-bench";

// CPU time of every thread of the process so far. On Linux each live thread's own CPU
// clock, summed: getrusage() and the process CPU clock add a thread's time to the
// process's total only at its scheduler ticks and switches, so a thread spinning on
// another core (the relay's, a driver's) is missing up to a tick (4 ms at HZ=250) at
// each end of a window of a few milliseconds: a row's cpu(us) once read 9.0 against its
// relay thread's own 18.9. A thread's clock is read exactly, running or not. (Threads
// that end inside a window lose their time; none does in a timed loop.)
inline double cpu_seconds() {
#ifdef __linux__
  if (DIR* dir = opendir("/proc/self/task")) {
    double sum = 0;
    bool any = false;
    while (const dirent* e = readdir(dir)) {
      char* end = nullptr;
      const long tid = std::strtol(e->d_name, &end, 10);
      if (end == e->d_name || *end || tid <= 0) continue;
      // The kernel's per-thread scheduler clock for `tid` (what pthread_getcpuclockid gives).
      const auto clock = static_cast<clockid_t>((~static_cast<clockid_t>(tid) << 3) | 6);
      timespec t{};
      if (clock_gettime(clock, &t) != 0) continue;  // the thread ended meanwhile
      sum += double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
      any = true;
    }
    closedir(dir);
    if (any) return sum;
  }
#endif
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// CPU time of the calling thread only.
inline double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

inline std::string human_bytes(std::size_t b) {
  char buf[32];
  if (b >= (std::size_t{1} << 30) && b % (std::size_t{1} << 30) == 0) std::snprintf(buf, sizeof buf, "%zuG", b >> 30);
  else if (b >= (std::size_t{1} << 20) && b % (std::size_t{1} << 20) == 0) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

[[noreturn]] inline void die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), what.c_str());
  std::exit(1);
}

inline void vk_check(vk::Result r, const char* what) {
  if (r != vk::Result::eSuccess) die(std::string(what) + ": " + vk::to_string(r));
}

using tpar_example::Buffer;

}  // namespace tpar_bench
