#pragma once

#include <cstdint>

namespace tpar::inline v0::detail {

constexpr std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return (v + a - 1) / a * a; }

}  // namespace tpar::inline v0::detail
