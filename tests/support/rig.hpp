// Per-device test buffers holding one AllReduce's spans.
#pragma once

#include <tpar/core/buffer_span.hpp>

#include "support/vk_env.hpp"

#include <memory>
#include <vector>

namespace tpar_test {

class Rig {
 public:
  // `count` values at byte `offset` of a buffer with `slack` bytes after them.
  Rig(tpar::DeviceGroup& group, std::size_t count, std::size_t offset = 256, std::size_t slack = 64)
      : count_(count), offset_(offset) {
    for (std::size_t d = 0; d < group.size(); ++d) {
      buffers_.push_back(std::make_unique<TestBuffer>(group[d], offset + count * 4 + slack));
      spans_.push_back({buffers_.back()->handle(), offset, count, buffers_.back()->size()});
    }
  }
  const std::vector<tpar::BufferSpan>& spans() const { return spans_; }
  TestBuffer& buffer(std::size_t d) { return *buffers_[d]; }
  void write(const std::vector<std::vector<float>>& x) {
    for (std::size_t d = 0; d < buffers_.size(); ++d) buffers_[d]->write(offset_, x[d]);
  }
  std::vector<std::vector<float>> read() const {
    std::vector<std::vector<float>> out;
    for (const auto& b : buffers_) out.push_back(b->read(offset_, count_));
    return out;
  }

 private:
  std::size_t count_, offset_;
  std::vector<std::unique_ptr<TestBuffer>> buffers_;
  std::vector<tpar::BufferSpan> spans_;
};

}  // namespace tpar_test
