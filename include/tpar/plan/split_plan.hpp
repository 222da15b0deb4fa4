// SplitPlan — one split, computed once, that every tensor meeting in an op applies, so
// their shares cannot disagree.
//
//   // An attention layer with GQA, planned in units of kv heads. Each tensor states its
//   // extent along its split axis and the granularity its format needs there.
//   std::array<tpar::TensorAxis, 4> attn{{
//       {n_head * head_dim, tpar::Granularity(block_size(wq))},  // wq: output axis
//       {n_kv * head_dim, tpar::Granularity(block_size(wk))},    // wk
//       {n_kv * head_dim, tpar::Granularity(block_size(wv))},    // wv
//       {n_head * head_dim, tpar::Granularity(block_size(wo))},  // wo: input axis
//   }};
//   auto plan = tpar::SplitPlan::for_tensors(weights, n_kv, attn, {.layer = il});
//   std::vector<tpar::Share> wq_shares = plan.apply(attn[0]);   // also wk, wv, wo
//   tpar::SegmentedSplit fused = plan.apply_parts(std::array<tpar::Part, 3>{{
//       {n_head * head_dim}, {n_kv * head_dim}, {n_kv * head_dim}}});   // fused wqkv
//
// Why a plan: splitting each tensor on its own with the same weights does not keep them
// consistent. 32 q heads and 8 kv heads over 3 devices round differently, a device ends
// up with q heads whose kv head lives elsewhere, and the op asserts (a reported failure
// with 3 mixed GPUs). A plan splits its own extent once (split_extent's rules and bounds,
// in plan units); a tensor whose extent is k times the plan's applies the plan scaled by
// k, so device i's slice of every such tensor covers exactly plan units
// [share(i).offset, share(i).end()). Disagreement is impossible by construction: no
// tensor's shares are computed any other way. for_tensors picks the plan's granularity,
// the finest that every listed tensor can take once scaled (the LCM of their needs), so
// the tensors it was built from can always apply it; apply() checks any other tensor and throws rather than
// return boundaries its format cannot take. Plans compare with ==, so an engine can
// assert that two tensors were split by the same plan.
//
// Plan in the unit all tensors share: kv heads for attention (q has n_head / n_kv times
// as many rows per unit), rows of n_ff for an FFN (up, gate and down share the extent).
#pragma once

#include <tpar/core/error.hpp>
#include <tpar/plan/granularity.hpp>
#include <tpar/plan/layer_rotation.hpp>
#include <tpar/plan/segments.hpp>
#include <tpar/plan/split.hpp>
#include <tpar/plan/split_weights.hpp>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tpar::inline v0 {

// One tensor's split axis as a plan sees it: its length there, and the step its own
// layout needs its boundaries on (a quantized format's block size along that axis).
struct TensorAxis {
  std::int64_t extent = 0;
  Granularity granularity{};
};

class SplitPlan {
 public:
  SplitPlan(const SplitWeights& weights, std::int64_t extent, Granularity granularity,
            LayerRotation rotation = {})
      : extent_(extent),
        granularity_(granularity),
        phase_(rotation.phase(weights.device_count())),
        period_(rotation.resolved_period(weights.device_count())),
        shares_(weights.device_count()) {
    detail::require_splittable(extent, granularity, "plan extent");
    detail::split_into(weights, extent, granularity, rotation, shares_);
  }

  // A plan over `extent` units with the coarsest granularity that every tensor in
  // `tensors` needs: tensor t of extent k·extent needs plan boundaries on multiples of
  // g_t / gcd(g_t, k), so that k × a boundary is a multiple of its own granularity g_t.
  static SplitPlan for_tensors(const SplitWeights& weights, std::int64_t extent,
                               std::span<const TensorAxis> tensors, LayerRotation rotation = {}) {
    detail::require_splittable(extent, Granularity{}, "plan extent");
    Granularity needed;
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      const std::int64_t scale = scale_of(extent, tensors[t], "tensor " + std::to_string(t));
      if (scale == 0) continue;  // an empty plan: every tensor is empty too
      const std::int64_t step = tensors[t].granularity.value();
      needed = needed.combined_with(Granularity(step / std::gcd(step, scale)));
      if (needed.value() > extent)
        throw Error(ErrorCode::invalid_argument,
                    "tensor " + std::to_string(t) + " (extent " +
                        std::to_string(tensors[t].extent) + ", granularity " +
                        std::to_string(step) + ") needs plan boundaries every " +
                        std::to_string(needed.value()) + " units together with the tensors "
                        "before it, but the plan has only " + std::to_string(extent) +
                        " units, so one device would take everything; keep these tensors "
                        "whole (mirrored) or plan in a finer unit");
    }
    return SplitPlan(weights, extent, needed, rotation);
  }

  std::size_t device_count() const { return shares_.size(); }
  std::int64_t extent() const { return extent_; }
  Granularity granularity() const { return granularity_; }
  // The rounding phase the plan was split with, out of period() (layer_rotation.hpp).
  std::uint64_t phase() const { return phase_; }
  std::uint64_t period() const { return period_; }
  // The plan's own split, in plan units.
  std::span<const Share> shares() const { return shares_; }
  Share share(std::size_t device) const { return shares_.at(device); }

  // How many of the tensor's rows one plan unit stands for. Throws unless the tensor's
  // extent is a multiple of the plan's and scaled boundaries meet its granularity.
  std::int64_t scale_for(TensorAxis tensor) const {
    const std::int64_t scale = scale_of(extent_, tensor, "tensor");
    if (scale != 0 && scale * granularity_.value() % tensor.granularity.value() != 0)
      throw Error(ErrorCode::invalid_argument,
                  "this plan puts the tensor's boundaries on multiples of " +
                      std::to_string(scale * granularity_.value()) +
                      " rows (plan granularity " + std::to_string(granularity_.value()) +
                      " x " + std::to_string(scale) +
                      " rows per unit), which its granularity " +
                      std::to_string(tensor.granularity.value()) +
                      " does not divide; build the plan with SplitPlan::for_tensors listing "
                      "this tensor");
    return scale;
  }

  // The tensor's shares: the plan's, scaled by scale_for(tensor).
  std::vector<Share> apply(TensorAxis tensor) const {
    const std::int64_t scale = scale_for(tensor);
    std::vector<Share> shares(shares_.size());
    for (std::size_t d = 0; d < shares_.size(); ++d)
      shares[d] = {shares_[d].offset * scale, shares_[d].size * scale};
    return shares;
  }

  // A fused tensor whose parts each apply this plan (each part's size a multiple of the
  // plan's extent); tensor_granularity is the fused tensor's own granularity.
  SegmentedSplit apply_parts(std::span<const Part> parts,
                             Granularity tensor_granularity = {}) const {
    detail::require_fusable(parts);
    const std::size_t n = shares_.size();
    std::vector<Share> part_shares(parts.size() * n);
    for (std::size_t p = 0; p < parts.size(); ++p) {
      const std::int64_t scale = scale_for(TensorAxis{parts[p].size, tensor_granularity});
      for (std::size_t d = 0; d < n; ++d)
        part_shares[p * n + d] = {shares_[d].offset * scale, shares_[d].size * scale};
    }
    return detail::assemble_segments(parts, n, part_shares);
  }

  // Plans are equal when they split every tensor the same way; the phase that produced
  // the shares does not matter.
  friend bool operator==(const SplitPlan& a, const SplitPlan& b) {
    return a.extent_ == b.extent_ && a.granularity_ == b.granularity_ && a.shares_ == b.shares_;
  }

 private:
  static std::int64_t scale_of(std::int64_t plan_extent, TensorAxis tensor,
                               const std::string& name) {
    if (tensor.extent < 0)
      throw Error(ErrorCode::invalid_argument,
                  name + " extent " + std::to_string(tensor.extent) +
                      " is negative; pass its length along the split axis");
    if (plan_extent == 0) {
      if (tensor.extent == 0) return 0;
    } else if (tensor.extent % plan_extent == 0) {
      return tensor.extent / plan_extent;
    }
    throw Error(ErrorCode::invalid_argument,
                name + " extent " + std::to_string(tensor.extent) +
                    " is not a whole multiple of the plan's extent " +
                    std::to_string(plan_extent) +
                    ", so plan units cannot map to whole rows of it; plan in a unit that "
                    "divides every tensor's extent (e.g. kv heads)");
  }

  std::int64_t extent_;
  Granularity granularity_;
  std::uint64_t phase_;
  std::uint64_t period_;
  std::vector<Share> shares_;
};

}  // namespace tpar::inline v0
