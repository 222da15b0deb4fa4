// LayerRotation — which rounding phase a layer's splits use, so that the granules lost to
// rounding do not pile up on the same device in every layer.
//
//   for (std::uint32_t il = 0; il < n_layers; ++il)
//     plans.emplace_back(weights, n_ff, g, tpar::LayerRotation{.layer = il});
//
// Rounding every boundary down (phase 0, the default) shortchanges the first device and
// favours the last, which takes what is left, the same way in every layer, so over a
// model the differences add up layer after layer. Phase j of `period` rounds a boundary up instead when its ideal position lies in
// the top j/period of its granule. Over `period` consecutive layers each boundary is then
// rounded up in proportion to how far into its granule it lies, so its rounding errors
// sum to less than one granule, and so does every device's (split.hpp states the bound).
// With equal weights this is the familiar rotation: layer 0 gives the leftover granule to
// the last device, layer 1 to the one before it, and so on.
//
// period 0 means the device count: the bound then holds over every n consecutive layers,
// and a longer run adds less than one granule per device per further n layers. Use the
// number of layers as the period to keep a whole model's totals within one granule.
#pragma once

#include <cstdint>

namespace tpar::inline v0 {

struct LayerRotation {
  std::uint32_t layer = 0;
  std::uint32_t period = 0;  // 0: the number of devices

  // The phase j ∈ [0, period) this layer uses; the phase denominator is resolved_period().
  constexpr std::uint64_t phase(std::uint64_t device_count) const {
    return layer % resolved_period(device_count);
  }
  constexpr std::uint64_t resolved_period(std::uint64_t device_count) const {
    return period != 0 ? period : (device_count != 0 ? device_count : 1);
  }

  friend constexpr bool operator==(LayerRotation, LayerRotation) = default;
};

}  // namespace tpar::inline v0
