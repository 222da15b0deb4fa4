// Builds against the packaged headers and exercises what needs no device: the wire
// formats, a schedule, and the error type. (A machine without Vulkan still passes.)
#include <tpar/tpar.hpp>

#include <cstdio>

VULKAN_HPP_DEFAULT_DISPATCH_LOADER_DYNAMIC_STORAGE

int main() {
  tpar::ScheduleRequest request;
  request.devices = 4;
  request.count = 1 << 20;
  request.wire = tpar::Wire::bf16;
  const tpar::Schedule schedule = tpar::ChunkedRing::build(request);
  const tpar::Error error(tpar::ErrorCode::timeout, "example");
  std::printf("tpar %s: a 4-device ring of 2^20 values runs %zu batches on device 0; errors say \"%s\"\n",
              TPAR_VERSION_STRING, schedule.devices[0].batches.size(), error.code().message().c_str());
  return schedule.devices.size() == 4 ? 0 : 1;
}
