// The relay's protocol as the host keeps it, shared with its kernel (shaders/relay.glsl):
// the word offsets of a slot and of a publish area, and how the host orders its stores
// into them. Change one side, change the other.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <immintrin.h>
#define TPAR_RELAY_X86 1
#endif

namespace tpar::inline v0::detail {

// Word offsets shared with shaders/relay.glsl.
namespace relay_layout {
inline constexpr std::size_t seq = 0, flag = 1, abort = 2, payload = 64;  // slot words
inline constexpr std::size_t arrived = 0, gave_up = 1, seen = 8;          // publish header words
// The clock variant's stamps (publish header words): the call's stamp, kernel start; its
// values published, the sum seen; its copy done, the call's stamp again.
inline constexpr std::size_t clock_stamp = 2, clock_start = 3, clock_published = 4, clock_seen = 5, clock_end = 6,
                             clock_stamp_again = 7;
inline constexpr std::size_t header_bytes = 256;                          // before the units
inline constexpr std::uint32_t no_call = 0xFFFFFFFFu;                     // a ride site's word: serve nothing
}  // namespace relay_layout

// Makes the stores before it (also to write-combined memory, as a BAR mapping usually is)
// visible before the stores after it; the compiler moves no memory access across it.
inline void relay_store_fence() {
#ifdef TPAR_RELAY_X86
  std::atomic_signal_fence(std::memory_order_seq_cst);
  _mm_sfence();
  std::atomic_signal_fence(std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// One 4-byte store into a slot: a plain store, never a locked instruction. On x86 a
// sequentially consistent store is an `xchg`, which on a BAR mapping (uncached or
// write-combined memory) takes a bus lock: on an H200 host that made every call's stamp
// cost 26-187 us of the calling thread (docs/design/relay-floor.md). Ordering comes from
// relay_store_fence() around it.
inline void relay_store_word(std::uint32_t* word, std::uint32_t value) {
  std::atomic_ref<std::uint32_t>(*word).store(value, std::memory_order_relaxed);
}

inline void relay_cpu_relax() {
#ifdef TPAR_RELAY_X86
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

}  // namespace tpar::inline v0::detail
