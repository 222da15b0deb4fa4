// A timeline semaphore a test owns on one device, signalled from the host: a ready point
// the test controls.
#pragma once

#include <doctest/doctest.h>
#include <tpar/vk/device.hpp>

#include <cstdint>

namespace tpar_test {

struct TestTimeline {
  vk::Device device;
  vk::Semaphore semaphore;
  explicit TestTimeline(vk::Device d) : device(d) {
    vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
    vk::SemaphoreCreateInfo info({}, &type);
    REQUIRE(device.createSemaphore(&info, nullptr, &semaphore) == vk::Result::eSuccess);
  }
  TestTimeline(const TestTimeline&) = delete;
  TestTimeline& operator=(const TestTimeline&) = delete;
  ~TestTimeline() { device.destroySemaphore(semaphore); }
  void signal(std::uint64_t v) const {
    vk::SemaphoreSignalInfo s(semaphore, v);
    REQUIRE(device.signalSemaphore(&s) == vk::Result::eSuccess);
  }
};

}  // namespace tpar_test
