// The plan cache: the plans of the calls seen (by key, most recently used first, at most
// max_plans), the staging generation they bind and the two capacities that size it
// (host staging, device scratch), what retired waiting for the GPU to finish with it,
// and the counts PlanStats reports. Bookkeeping only: the communicator builds the
// schedules (Algo::build), makes a plan's Vulkan objects (its descriptor bindings) and
// the generations, and says what the queues were handed; this decides what is kept,
// what must be made anew, and what may be freed.
#pragma once

#include <tpar/algo/request.hpp>
#include <tpar/comm/call.hpp>
#include <tpar/comm/detail/comm_plan.hpp>
#include <tpar/staging/capacity.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

namespace tpar::inline v0::detail {

template <class Generation>
class PlanCache {
 public:
  using PlanType = Plan<Generation>;
  static constexpr std::size_t max_plans = 64;

  static PlanKey key_for(const ScheduleRequest& rq) {
    PlanKey key;
    key.count = rq.count;
    key.wire = rq.wire;
    key.contributing = rq.contributing;
    key.relay_automatic = rq.relay.automatic;
    return key;
  }

  // The plan of `key`, now the most recently used; null where there is none.
  PlanType* find(const PlanKey& key) {
    auto it = std::find_if(plans_.begin(), plans_.end(), [&](const auto& p) { return p->key == key; });
    if (it == plans_.end()) return nullptr;
    if (it != plans_.begin()) plans_.splice(plans_.begin(), plans_, it);
    return plans_.front().get();
  }

  // Whether a call of `schedule` needs a new staging generation: there is none yet, or
  // the capacities change for what it needs. A relay call needs no staging (its memory
  // is the relay's), so it neither grows the staging nor counts as a small call towards
  // shrinking it: a server's decode steps between two prompts would otherwise shrink the
  // staging that the next prompt grows again, each time importing and pinning it anew
  // (89 times in a run of 55 s on two H200s, 20 ms of the host's time each:
  // docs/design/server-mixed.md).
  bool needs_generation(const Schedule& schedule) {
    const std::uint64_t host_need = max_of(schedule.host_bytes), scratch_need = max_of(schedule.scratch_bytes);
    const bool feeds = !takes_relay(schedule) || host_need > host_.current() || scratch_need > scratch_.current();
    const auto host_cap = feeds ? host_.update(host_need) : std::nullopt;
    const auto scratch_cap = feeds ? scratch_.update(scratch_need) : std::nullopt;
    return !generation_ || host_cap || scratch_cap;
  }
  std::uint64_t host_capacity() const { return host_.current(); }
  std::uint64_t scratch_capacity() const { return scratch_.current(); }

  // `fresh` replaces the generation; every plan (each binds the old one) and the old
  // generation retire until the devices reach `submitted` ([role * n + device], what the
  // queues were handed). `took`: the host time making it took.
  void renew(std::shared_ptr<Generation> fresh, std::vector<std::uint64_t> submitted, std::chrono::nanoseconds took) {
    ++stats_.generations;
    stats_.generation_time += took;
    stats_.largest_staging = std::max(stats_.largest_staging, fresh->host_bytes_total());
    for (auto& p : plans_) retire(std::move(p));
    plans_.clear();
    if (generation_) retiring_.push_back({nullptr, std::move(generation_), std::move(submitted)});
    generation_ = std::move(fresh);
  }
  const std::shared_ptr<Generation>& generation() const { return generation_; }

  // `plan`, made for the current generation, becomes the most recently used; past
  // max_plans the least recently used retires (`retired`: alive until its last use
  // finishes; null where none did). `took`: the host time making it took.
  struct Inserted {
    PlanType& plan;
    PlanType* retired;
  };
  Inserted insert(std::unique_ptr<PlanType> plan, std::chrono::nanoseconds took) {
    plans_.push_front(std::move(plan));
    ++stats_.plans;
    stats_.plan_time += took;
    PlanType* gone = nullptr;
    if (plans_.size() > max_plans) {
      gone = plans_.back().get();
      retire(std::move(plans_.back()));
      plans_.pop_back();
    }
    return {*plans_.front(), gone};
  }

  // Frees what retired: plans and staging whose last use every device has finished
  // (ctx[d].completed, brought up to date here from the timelines).
  void free_finished(std::vector<DeviceContext>& ctx) {
    if (retiring_.empty()) return;
    const std::size_t n = ctx.size();
    for (auto& c : ctx) {
      for (std::size_t r = 0; r < role_count; ++r) {
        std::uint64_t v = 0;
        if (c.device->handle().getSemaphoreCounterValue(c.timeline(static_cast<Role>(r)).handle(), &v) == vk::Result::eSuccess)
          c.completed[r] = std::max(c.completed[r], v);
      }
    }
    retiring_.remove_if([&](Retired& r) {
      for (std::size_t d = 0; d < n; ++d)
        for (std::size_t k = 0; k < role_count; ++k)
          if (ctx[d].completed[k] < r.values[k * n + d]) return false;
      if (r.plan) r.plan->destroy(ctx);
      return true;
    });
  }

  // Every plan, kept or retiring (for diagnostics: which batch a queue waits at).
  template <class F>
  void for_each_plan(F&& f) const {
    for (const auto& p : plans_) f(*p);
    for (const auto& r : retiring_)
      if (r.plan) f(*r.plan);
  }

  const PlanStats& stats() const { return stats_; }

  // Frees everything, kept or retiring, the plans first: for when no work on the queues
  // uses any of it.
  void destroy(std::vector<DeviceContext>& ctx) {
    for (auto& p : plans_) p->destroy(ctx);
    plans_.clear();
    for (auto& r : retiring_)
      if (r.plan) r.plan->destroy(ctx);
    retiring_.clear();
    generation_.reset();
  }

 private:
  struct Retired {
    std::unique_ptr<PlanType> plan;
    std::shared_ptr<Generation> generation;
    std::vector<std::uint64_t> values;  // [role * n + device]: the devices' timelines must reach these
  };

  static std::uint64_t max_of(const std::vector<std::uint64_t>& v) {
    std::uint64_t m = 0;
    for (auto x : v) m = std::max(m, x);
    return m;
  }

  void retire(std::unique_ptr<PlanType> plan) {
    std::vector<std::uint64_t> values;
    for (const auto& use : plan->last_use) values.insert(values.end(), use.begin(), use.end());
    retiring_.push_back({std::move(plan), nullptr, std::move(values)});
  }

  Capacity host_, scratch_;
  PlanStats stats_;
  std::shared_ptr<Generation> generation_;
  std::list<std::unique_ptr<PlanType>> plans_;  // most recently used first
  std::list<Retired> retiring_;
};

}  // namespace tpar::inline v0::detail
