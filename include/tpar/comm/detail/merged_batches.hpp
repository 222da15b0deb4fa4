// MergedBatches — the batches one vkQueueSubmit hands to one queue, with every batch that
// waits on nothing folded into the batch before it. A driver's vkQueueSubmit costs per
// batch; folding changes no ordering: on one queue each of tpar's batches starts with a
// full barrier, so it ran after its predecessor anyway, and the folded batch's signals
// now come at the end of the merged one, after the same work. A semaphore signalled
// twice in one merged batch keeps only the later (higher) value.
#pragma once

#include <tpar/vk/device.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace tpar::inline v0::detail {

class MergedBatches {
 public:
  void clear() { sources_.clear(); }
  // Every source's pNext is its VkTimelineSemaphoreSubmitInfo, as tpar builds them. The
  // source must stay valid until build()'s result is submitted.
  void add(const vk::SubmitInfo& info) { sources_.push_back(&info); }

  // The merged batches, valid until the next clear() or build().
  std::span<const vk::SubmitInfo> build() {
    std::size_t batches = 0, buffers = 0, signals = 0;
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      batches += i == 0 || sources_[i]->waitSemaphoreCount > 0;
      buffers += sources_[i]->commandBufferCount;
      signals += sources_[i]->signalSemaphoreCount;
    }
    infos_.resize(batches);
    timeline_infos_.resize(batches);
    command_buffers_.resize(buffers);
    signals_.resize(signals);
    signal_values_.resize(signals);
    std::size_t out = 0, cb = 0, sig = 0, run_signals = 0;
    for (std::size_t i = 0; i < sources_.size(); ++i) {
      const vk::SubmitInfo& s = *sources_[i];
      const auto& s_ti = *static_cast<const vk::TimelineSemaphoreSubmitInfo*>(s.pNext);
      if (i == 0 || s.waitSemaphoreCount > 0) {
        vk::SubmitInfo& o = infos_[out];
        vk::TimelineSemaphoreSubmitInfo& ti = timeline_infos_[out];
        ++out;
        ti = vk::TimelineSemaphoreSubmitInfo(s.waitSemaphoreCount, s_ti.pWaitSemaphoreValues, 0, signal_values_.data() + sig);
        o = vk::SubmitInfo(s.waitSemaphoreCount, s.pWaitSemaphores, s.pWaitDstStageMask, 0, command_buffers_.data() + cb, 0,
                           signals_.data() + sig, &ti);
        run_signals = sig;
      }
      vk::SubmitInfo& o = infos_[out - 1];
      for (std::uint32_t k = 0; k < s.commandBufferCount; ++k) command_buffers_[cb++] = s.pCommandBuffers[k];
      o.commandBufferCount += s.commandBufferCount;
      for (std::uint32_t k = 0; k < s.signalSemaphoreCount; ++k) {
        std::size_t j = run_signals;
        while (j < sig && signals_[j] != s.pSignalSemaphores[k]) ++j;
        if (j == sig) {
          signals_[sig] = s.pSignalSemaphores[k];
          signal_values_[sig++] = s_ti.pSignalSemaphoreValues[k];
          ++o.signalSemaphoreCount;
          ++timeline_infos_[out - 1].signalSemaphoreValueCount;
        } else {
          signal_values_[j] = std::max(signal_values_[j], s_ti.pSignalSemaphoreValues[k]);
        }
      }
    }
    return std::span<const vk::SubmitInfo>(infos_.data(), out);
  }

 private:
  std::vector<const vk::SubmitInfo*> sources_;
  std::vector<vk::SubmitInfo> infos_;
  std::vector<vk::TimelineSemaphoreSubmitInfo> timeline_infos_;
  std::vector<vk::CommandBuffer> command_buffers_;
  std::vector<vk::Semaphore> signals_;
  std::vector<std::uint64_t> signal_values_;
};

}  // namespace tpar::inline v0::detail
