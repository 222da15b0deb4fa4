// How deferred calls reach a queue: batches that wait on nothing folded into the batch
// before them (detail::MergedBatches). Pure bookkeeping on submit structures: nothing is
// submitted, so the handles are stand-ins.
#include <doctest/doctest.h>
#include <tpar/comm/detail/merged_batches.hpp>

#include <vector>

using namespace tpar;

namespace {

template <class Handle>
Handle fake(std::uint64_t v) {
  return Handle(reinterpret_cast<typename Handle::CType>(v));
}

// One source batch: its waits, command buffers and signals, kept alive with the info.
struct Source {
  std::vector<vk::Semaphore> waits;
  std::vector<std::uint64_t> wait_values;
  std::vector<vk::PipelineStageFlags> stages;
  std::vector<vk::CommandBuffer> buffers;
  std::vector<vk::Semaphore> signals;
  std::vector<std::uint64_t> signal_values;
  vk::TimelineSemaphoreSubmitInfo ti;
  vk::SubmitInfo info;

  Source(std::vector<std::pair<std::uint64_t, std::uint64_t>> w, std::vector<std::uint64_t> cbs,
         std::vector<std::pair<std::uint64_t, std::uint64_t>> s) {
    for (auto [sem, v] : w) {
      waits.push_back(fake<vk::Semaphore>(sem));
      wait_values.push_back(v);
      stages.push_back(vk::PipelineStageFlagBits::eAllCommands);
    }
    for (auto b : cbs) buffers.push_back(fake<vk::CommandBuffer>(b));
    for (auto [sem, v] : s) {
      signals.push_back(fake<vk::Semaphore>(sem));
      signal_values.push_back(v);
    }
    ti = vk::TimelineSemaphoreSubmitInfo(static_cast<std::uint32_t>(waits.size()), wait_values.data(),
                                         static_cast<std::uint32_t>(signals.size()), signal_values.data());
    info = vk::SubmitInfo(static_cast<std::uint32_t>(waits.size()), waits.data(), stages.data(),
                          static_cast<std::uint32_t>(buffers.size()), buffers.data(), static_cast<std::uint32_t>(signals.size()),
                          signals.data(), &ti);
  }
  Source(const Source&) = delete;
};

std::vector<std::uint64_t> buffers_of(const vk::SubmitInfo& i) {
  std::vector<std::uint64_t> out;
  for (std::uint32_t k = 0; k < i.commandBufferCount; ++k)
    out.push_back(reinterpret_cast<std::uint64_t>(static_cast<VkCommandBuffer>(i.pCommandBuffers[k])));
  return out;
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> signals_of(const vk::SubmitInfo& i) {
  const auto& ti = *static_cast<const vk::TimelineSemaphoreSubmitInfo*>(i.pNext);
  REQUIRE(ti.signalSemaphoreValueCount == i.signalSemaphoreCount);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  for (std::uint32_t k = 0; k < i.signalSemaphoreCount; ++k)
    out.emplace_back(reinterpret_cast<std::uint64_t>(static_cast<VkSemaphore>(i.pSignalSemaphores[k])), ti.pSignalSemaphoreValues[k]);
  return out;
}

}  // namespace

TEST_CASE("batches that wait on nothing fold into the batch before them, keeping every signal") {
  // Two calls of OneShot on one queue: [sum 1 (waits on peers)] [publish 2] [sum 2 (waits)],
  // after a first publish that waits on nothing, and a batch with a repeated signal.
  Source publish1({}, {11}, {{0x200, 5}, {0x300, 5}});
  Source sum1({{0x900, 5}, {0x901, 5}}, {12}, {{0x100, 3}});
  Source publish2({}, {13}, {{0x200, 6}, {0x300, 6}});
  Source compute({}, {14}, {{0x100, 4}});  // the compute timeline again: only the higher value stays
  Source sum2({{0x900, 6}}, {15}, {{0x100, 5}});

  detail::MergedBatches merged;
  for (const Source* s : {&publish1, &sum1, &publish2, &compute, &sum2}) merged.add(s->info);
  const auto out = merged.build();
  REQUIRE(out.size() == 3);

  // The first batch starts a run even without waits.
  CHECK(out[0].waitSemaphoreCount == 0);
  CHECK(buffers_of(out[0]) == std::vector<std::uint64_t>{11});
  CHECK(signals_of(out[0]) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0x200, 5}, {0x300, 5}});

  // sum 1 keeps its waits and takes publish 2 and the compute batch.
  CHECK(out[1].waitSemaphoreCount == 2);
  CHECK(out[1].pWaitSemaphores == sum1.waits.data());
  CHECK(static_cast<const vk::TimelineSemaphoreSubmitInfo*>(out[1].pNext)->pWaitSemaphoreValues == sum1.wait_values.data());
  CHECK(static_cast<const vk::TimelineSemaphoreSubmitInfo*>(out[1].pNext)->waitSemaphoreValueCount == 2);
  CHECK(buffers_of(out[1]) == std::vector<std::uint64_t>{12, 13, 14});
  CHECK(signals_of(out[1]) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0x100, 4}, {0x200, 6}, {0x300, 6}});

  CHECK(out[2].waitSemaphoreCount == 1);
  CHECK(buffers_of(out[2]) == std::vector<std::uint64_t>{15});
  CHECK(signals_of(out[2]) == std::vector<std::pair<std::uint64_t, std::uint64_t>>{{0x100, 5}});

  // Built again after clear(): only the new sources.
  merged.clear();
  merged.add(sum2.info);
  const auto again = merged.build();
  REQUIRE(again.size() == 1);
  CHECK(buffers_of(again[0]) == std::vector<std::uint64_t>{15});
}
