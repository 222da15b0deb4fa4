// BatchList — batches (VkSubmitInfos with their timeline semaphore values) copied out of
// whoever built them, to be submitted later, possibly with others: what tpar::Stream
// holds of the host's work and of tpar's calls between an AllReduce and the host's next
// submission. Only VkTimelineSemaphoreSubmitInfo may hang off a batch's pNext.
#pragma once

#include <tpar/core/error.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tpar::inline v0::detail {

class BatchList {
 public:
  void clear() {
    entries_.clear();
    cbs_.clear();
    waits_.clear();
    wait_values_.clear();
    stages_.clear();
    signals_.clear();
    signal_values_.clear();
  }
  bool empty() const { return entries_.empty(); }
  std::size_t size() const { return entries_.size(); }
  std::size_t command_buffers() const { return cbs_.size(); }

  // Appends copies of `infos`. Throws Error(invalid_argument) for a pNext other than a
  // VkTimelineSemaphoreSubmitInfo (nothing is appended then).
  void append(std::span<const vk::SubmitInfo> infos) {
    for (const auto& info : infos)
      for (auto* p = static_cast<const VkBaseInStructure*>(info.pNext); p; p = p->pNext)
        if (p->sType != VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO)
          throw Error(ErrorCode::invalid_argument, "a batch handed to a tpar::Stream carries a pNext structure other than "
                                                   "VkTimelineSemaphoreSubmitInfo (sType " + std::to_string(p->sType) + ")");
    for (const auto& info : infos) {
      const vk::TimelineSemaphoreSubmitInfo* ti = nullptr;
      for (auto* p = static_cast<const VkBaseInStructure*>(info.pNext); p; p = p->pNext)
        ti = reinterpret_cast<const vk::TimelineSemaphoreSubmitInfo*>(p);
      Entry e;
      e.cb_first = static_cast<std::uint32_t>(cbs_.size());
      e.cb_count = info.commandBufferCount;
      cbs_.insert(cbs_.end(), info.pCommandBuffers, info.pCommandBuffers + info.commandBufferCount);
      e.wait_first = static_cast<std::uint32_t>(waits_.size());
      e.wait_count = info.waitSemaphoreCount;
      for (std::uint32_t k = 0; k < info.waitSemaphoreCount; ++k) {
        waits_.push_back(info.pWaitSemaphores[k]);
        stages_.push_back(info.pWaitDstStageMask[k]);
        wait_values_.push_back(ti && k < ti->waitSemaphoreValueCount ? ti->pWaitSemaphoreValues[k] : 0);
      }
      e.signal_first = static_cast<std::uint32_t>(signals_.size());
      e.signal_count = info.signalSemaphoreCount;
      for (std::uint32_t k = 0; k < info.signalSemaphoreCount; ++k) {
        signals_.push_back(info.pSignalSemaphores[k]);
        signal_values_.push_back(ti && k < ti->signalSemaphoreValueCount ? ti->pSignalSemaphoreValues[k] : 0);
      }
      entries_.push_back(e);
    }
  }

  // Copies of `other`'s batches; `command_buffers` false: their semaphore waits and
  // signals only (a ride: the command buffers' work is recorded in the host's).
  void append(const BatchList& other, bool command_buffers = true) {
    for (const Entry& o : other.entries_) {
      Entry e = o;
      if (!command_buffers) e.cb_count = 0;
      e.cb_first = static_cast<std::uint32_t>(cbs_.size());
      e.wait_first = static_cast<std::uint32_t>(waits_.size());
      e.signal_first = static_cast<std::uint32_t>(signals_.size());
      cbs_.insert(cbs_.end(), other.cbs_.begin() + o.cb_first, other.cbs_.begin() + o.cb_first + e.cb_count);
      waits_.insert(waits_.end(), other.waits_.begin() + o.wait_first, other.waits_.begin() + o.wait_first + o.wait_count);
      stages_.insert(stages_.end(), other.stages_.begin() + o.wait_first, other.stages_.begin() + o.wait_first + o.wait_count);
      wait_values_.insert(wait_values_.end(), other.wait_values_.begin() + o.wait_first,
                          other.wait_values_.begin() + o.wait_first + o.wait_count);
      signals_.insert(signals_.end(), other.signals_.begin() + o.signal_first,
                      other.signals_.begin() + o.signal_first + o.signal_count);
      signal_values_.insert(signal_values_.end(), other.signal_values_.begin() + o.signal_first,
                            other.signal_values_.begin() + o.signal_first + o.signal_count);
      entries_.push_back(e);
    }
  }

  // A signal at the end of the last batch (of a new, empty one where there is none).
  void add_signal(vk::Semaphore semaphore, std::uint64_t value) {
    if (entries_.empty()) entries_.push_back(Entry{static_cast<std::uint32_t>(cbs_.size()), 0, static_cast<std::uint32_t>(waits_.size()),
                                                   0, static_cast<std::uint32_t>(signals_.size()), 0});
    Entry& e = entries_.back();
    // The last entry's signals end the array only while nothing was appended after them.
    if (e.signal_first + e.signal_count != signals_.size()) {
      throw Error(ErrorCode::failed, "BatchList: a signal added out of order");
    }
    signals_.push_back(semaphore);
    signal_values_.push_back(value);
    ++e.signal_count;
  }

  // Semaphore waits among the batches.
  std::uint64_t waits() const { return waits_.size(); }
  // The batches from `first` on that wait on a semaphore (index of the first, or size()).
  std::size_t first_waiting(std::size_t first = 0) const {
    for (std::size_t i = first; i < entries_.size(); ++i)
      if (entries_[i].wait_count) return i;
    return entries_.size();
  }

  // The batches as VkSubmitInfos, each with its timeline values; valid until the list
  // changes. Where `fold`, every batch that waits on nothing is folded into the one before
  // it (as detail::MergedBatches: one queue runs them in order either way; a semaphore
  // signalled twice in one folded batch keeps the higher value). `first`, `count`: a range.
  std::span<const vk::SubmitInfo> infos(bool fold = true, std::size_t first = 0, std::size_t count = ~std::size_t{0}) {
    count = std::min(count, entries_.size() - std::min(first, entries_.size()));
    out_.clear();
    out_ti_.clear();
    out_signals_.clear();
    out_signal_values_.clear();
    out_.reserve(count);
    out_ti_.reserve(count);
    out_signals_.reserve(signals_.size());
    out_signal_values_.reserve(signals_.size());
    std::size_t run = 0;  // first signal of the batch being built
    for (std::size_t i = first; i < first + count; ++i) {
      const Entry& e = entries_[i];
      const bool fresh = !fold || out_.empty() || e.wait_count > 0;
      if (fresh) {
        run = out_signals_.size();
        out_ti_.push_back(vk::TimelineSemaphoreSubmitInfo(e.wait_count, wait_values_.data() + e.wait_first, 0, nullptr));
        out_.push_back(vk::SubmitInfo(e.wait_count, waits_.data() + e.wait_first, stages_.data() + e.wait_first, e.cb_count,
                                      cbs_.data() + e.cb_first, 0, nullptr));
      } else {
        // Command buffers of consecutive entries lie next to each other in cbs_.
        out_.back().commandBufferCount += e.cb_count;
      }
      for (std::uint32_t k = 0; k < e.signal_count; ++k) {
        const vk::Semaphore s = signals_[e.signal_first + k];
        const std::uint64_t v = signal_values_[e.signal_first + k];
        std::size_t j = run;
        while (j < out_signals_.size() && out_signals_[j] != s) ++j;
        if (j == out_signals_.size()) {
          out_signals_.push_back(s);
          out_signal_values_.push_back(v);
        } else if (v > out_signal_values_[j]) {
          out_signal_values_[j] = v;
        }
      }
      out_.back().signalSemaphoreCount = static_cast<std::uint32_t>(out_signals_.size() - run);
      out_ti_.back().signalSemaphoreValueCount = static_cast<std::uint32_t>(out_signals_.size() - run);
    }
    // Pointers last: the signal arrays no longer grow.
    std::size_t s = 0;
    for (std::size_t i = 0; i < out_.size(); ++i) {
      out_[i].pSignalSemaphores = out_signals_.data() + s;
      out_ti_[i].pSignalSemaphoreValues = out_signal_values_.data() + s;
      s += out_[i].signalSemaphoreCount;
      out_[i].pNext = &out_ti_[i];
    }
    return out_;
  }

 private:
  struct Entry {
    std::uint32_t cb_first = 0, cb_count = 0;
    std::uint32_t wait_first = 0, wait_count = 0;
    std::uint32_t signal_first = 0, signal_count = 0;
  };
  std::vector<Entry> entries_;
  std::vector<vk::CommandBuffer> cbs_;
  std::vector<vk::Semaphore> waits_;
  std::vector<std::uint64_t> wait_values_;
  std::vector<vk::PipelineStageFlags> stages_;
  std::vector<vk::Semaphore> signals_;
  std::vector<std::uint64_t> signal_values_;
  std::vector<vk::SubmitInfo> out_;
  std::vector<vk::TimelineSemaphoreSubmitInfo> out_ti_;
  std::vector<vk::Semaphore> out_signals_;
  std::vector<std::uint64_t> out_signal_values_;
};

}  // namespace tpar::inline v0::detail
