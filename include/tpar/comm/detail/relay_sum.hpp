// The relay thread's inner loop: every contributing device's published units (each a
// 4-byte f32 value and the call's 4-byte stamp in one aligned 8-byte word) summed in
// device order, all devices' units of a block read in one pass.
//
// It is most of the relay's host time at decode sizes. Read one unit at a time (an
// atomic 8-byte load, a compare, a branchy subnormal flush, then a second pass to add),
// a 16 KiB payload's 32 KiB of units took 5.8-8.6 us on an H200 host, and the same loop
// ran at the same ~5 GB/s on values already in L1 on a 2-core EPYC: the loop's
// instructions, not memory, bound it (docs/design/relay-on-the-token.md). Here the units are
// read 4 (SSE2, every x86-64) or 8 (AVX2, chosen at run time) at a time, their stamps
// checked together and the values added in the same pass.
//
// All devices in one pass, each device's units prefetched 2 KiB ahead, where the thread
// once read one device at a time into a running sum it stored and reloaded between
// devices. The units are fresh from the GPUs (written over PCIe since the thread last
// read them). On an H200 host, every value landed before the read, a thread's 128 KiB of units (two devices'
// 8192 values) took 12.9 us in one pass against 15.2 one device at a time (means of five
// runs, each spread over 11-19 us), 5.9 against 7.8 us for 64 KiB; with the units flushed
// from the caches, 17 us against 47 (docs/design/server-mixed.md, "The relay's host
// side, read in one pass").
//
// Each vector load is 8-byte aligned per unit and within one cache line per 8-byte lane,
// so every lane is one of the aligned quadword accesses x86 makes atomically: a lane
// holds a whole unit as some moment saw it, never half of an older one. A block whose
// stamps are not all the call's (on any device) is not added: its values are taken one
// by one up to the first whose unit on some device does not carry the stamp yet, and the
// function returns that value's index, so the caller can wait for it and call again
// from there. The arithmetic is the scalar code's, lane by lane
// (flush the value, add in f32 with round-to-nearest, flush the result), so the sum is
// bit-identical on every path. A sum that is NaN becomes the one quiet NaN 0x7FC00000:
// which operand's payload an addition keeps is the instruction's and the compiler's
// choice (the one-value loop and the SSE2 loop kept different ones), not the data's.
#pragma once

#include <tpar/detail/wire_codec.hpp>

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

// ThreadSanitizer cannot know that each lane of a vector load is an atomic quadword, and
// C++ has no atomic vector load: where the writer is a host thread (the tests' played
// devices; on a GPU the writer is the device, which TSan does not see) it would report
// every block as a race. Under TSan the one-unit loop's atomic loads stand in, reading
// the same words in the same order, so the thread's other sharing is still checked.
#if defined(__SANITIZE_THREAD__)
#define TPAR_RELAY_SUM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TPAR_RELAY_SUM_TSAN 1
#endif
#endif

#if (defined(__x86_64__) || defined(_M_X64)) && !defined(TPAR_RELAY_SUM_TSAN)
#include <immintrin.h>
#define TPAR_RELAY_SUM_SSE2 1
#if defined(__GNUC__) || defined(__clang__)
#define TPAR_RELAY_SUM_AVX2 1
#endif
#endif

namespace tpar::inline v0::detail {

// One unit, one 8-byte load.
inline std::uint64_t relay_load_unit(const std::uint64_t* unit) {
  return std::atomic_ref<std::uint64_t>(*const_cast<std::uint64_t*>(unit)).load(std::memory_order_relaxed);
}

// The NaN every path writes for a sum that is NaN.
inline constexpr std::uint32_t relay_quiet_nan = 0x7FC00000u;

// The value of unit `u` flushed (a subnormal becomes a zero of its sign).
inline float relay_unit_value(std::uint64_t u) {
  return flush_subnormal(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
}

// The running sum and one more device's value, as every path adds them.
inline float relay_add(float acc, float v) {
  const float r = flush_subnormal(acc + v);  // acc and v are flushed already
  return r != r ? std::bit_cast<float>(relay_quiet_nan) : r;
}

// Scalar: values [i, m) of the n devices' units into acc, in device order, while every
// device's unit carries `stamp`; returns where it stopped.
inline std::size_t relay_sum_scalar(const std::uint64_t* const* units, std::size_t n, std::size_t i, std::size_t m,
                                    std::uint32_t stamp, float* acc) {
  for (; i < m; ++i) {
    for (std::size_t d = 0; d < n; ++d)
      if (static_cast<std::uint32_t>(relay_load_unit(units[d] + i) >> 32) != stamp) return i;
    float sum = relay_unit_value(relay_load_unit(units[0] + i));
    for (std::size_t d = 1; d < n; ++d) sum = relay_add(sum, relay_unit_value(relay_load_unit(units[d] + i)));
    acc[i] = sum;
  }
  return m;
}

// How far ahead of the block being summed each device's units are prefetched.
inline constexpr std::size_t relay_prefetch_units = 256;  // 2 KiB

#ifdef TPAR_RELAY_SUM_SSE2
// x with a zero exponent (zero or subnormal) becomes a zero of its sign.
inline __m128 relay_flush4(__m128 x) {
  const __m128i bits = _mm_castps_si128(x);
  const __m128i tiny = _mm_cmpeq_epi32(_mm_and_si128(bits, _mm_set1_epi32(0x7F800000)), _mm_setzero_si128());
  const __m128i sign = _mm_and_si128(bits, _mm_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm_castsi128_ps(_mm_or_si128(_mm_and_si128(tiny, sign), _mm_andnot_si128(tiny, bits)));
}

inline std::size_t relay_sum_sse2(const std::uint64_t* const* units, std::size_t n, std::size_t i, std::size_t m,
                                  std::size_t readable, std::uint32_t stamp, float* acc) {
  const __m128i want = _mm_set1_epi32(static_cast<int>(stamp));
  const __m128 quiet = _mm_castsi128_ps(_mm_set1_epi32(static_cast<int>(relay_quiet_nan)));
  for (; i + 4 <= m; i += 4) {
    const bool fetch = i + relay_prefetch_units < readable;
    __m128 sum = _mm_setzero_ps();
    bool ready = true;
    for (std::size_t d = 0; d < n && ready; ++d) {
      if (fetch) _mm_prefetch(reinterpret_cast<const char*>(units[d] + i + relay_prefetch_units), _MM_HINT_T0);
      const __m128 a = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(units[d] + i)));
      const __m128 b = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(units[d] + i + 2)));
      const __m128i stamps = _mm_castps_si128(_mm_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
      ready = _mm_movemask_epi8(_mm_cmpeq_epi32(stamps, want)) == 0xFFFF;
      const __m128 v = relay_flush4(_mm_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)));
      if (d == 0) {
        sum = v;
      } else {
        const __m128 r = relay_flush4(_mm_add_ps(sum, v));
        const __m128 nan = _mm_cmpunord_ps(r, r);
        sum = _mm_or_ps(_mm_and_ps(nan, quiet), _mm_andnot_ps(nan, r));
      }
    }
    if (!ready) break;
    _mm_storeu_ps(acc + i, sum);
  }
  return relay_sum_scalar(units, n, i, m, stamp, acc);
}
#endif

#ifdef TPAR_RELAY_SUM_AVX2
__attribute__((target("avx2"))) inline __m256 relay_flush8(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i tiny = _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
  const __m256i sign = _mm256_and_si256(bits, _mm256_set1_epi32(static_cast<int>(0x80000000u)));
  return _mm256_castsi256_ps(_mm256_or_si256(_mm256_and_si256(tiny, sign), _mm256_andnot_si256(tiny, bits)));
}

__attribute__((target("avx2"))) inline std::size_t relay_sum_avx2(const std::uint64_t* const* units, std::size_t n,
                                                                   std::size_t i, std::size_t m, std::size_t readable,
                                                                   std::uint32_t stamp, float* acc) {
  const __m256i want = _mm256_set1_epi32(static_cast<int>(stamp));
  const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);  // values low, stamps high
  const __m256 quiet = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(relay_quiet_nan)));
  for (; i + 8 <= m; i += 8) {
    const bool fetch = i + relay_prefetch_units < readable;
    __m256 sum = _mm256_setzero_ps();
    bool ready = true;
    for (std::size_t d = 0; d < n && ready; ++d) {
      if (fetch) _mm_prefetch(reinterpret_cast<const char*>(units[d] + i + relay_prefetch_units), _MM_HINT_T0);
      const __m256i a = _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(units[d] + i)), order);
      const __m256i b =
          _mm256_permutevar8x32_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(units[d] + i + 4)), order);
      const __m256i stamps = _mm256_permute2x128_si256(a, b, 0x31);
      ready = _mm256_movemask_epi8(_mm256_cmpeq_epi32(stamps, want)) == -1;
      const __m256 v = relay_flush8(_mm256_castsi256_ps(_mm256_permute2x128_si256(a, b, 0x20)));
      if (d == 0) {
        sum = v;
      } else {
        const __m256 r = relay_flush8(_mm256_add_ps(sum, v));
        sum = _mm256_blendv_ps(r, quiet, _mm256_cmp_ps(r, r, _CMP_UNORD_Q));
      }
    }
    if (!ready) break;
    _mm256_storeu_ps(acc + i, sum);
  }
  return relay_sum_scalar(units, n, i, m, stamp, acc);
}

inline bool relay_has_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

// Which inner loop relay_sum() takes on this CPU ("avx2", "sse2" or "scalar").
inline const char* relay_sum_path() {
#ifdef TPAR_RELAY_SUM_AVX2
  if (relay_has_avx2()) return "avx2";
#endif
#ifdef TPAR_RELAY_SUM_SSE2
  return "sse2";
#else
  return "scalar";
#endif
}

// Values [i, m) of n devices (units[d]: device d's units, n >= 1) summed into acc in
// device order (acc = the first device's value, then each next one added), as far as
// every device's unit carries `stamp`: returns m, or the index of the first value some
// device has not stamped yet, every value before which is in acc and none from it on.
// `readable`: how many units from each units[d] the caller may read (prefetched up to it).
// `force_scalar` takes the one-value loop (TPAR_RELAY_SUM=scalar; tests compare it).
inline std::size_t relay_sum(const std::uint64_t* const* units, std::size_t n, std::size_t i, std::size_t m,
                             std::size_t readable, std::uint32_t stamp, float* acc, bool force_scalar = false) {
  if (force_scalar) return relay_sum_scalar(units, n, i, m, stamp, acc);
#ifdef TPAR_RELAY_SUM_AVX2
  if (relay_has_avx2()) return relay_sum_avx2(units, n, i, m, readable, stamp, acc);
#endif
#ifdef TPAR_RELAY_SUM_SSE2
  return relay_sum_sse2(units, n, i, m, readable, stamp, acc);
#else
  (void)readable;
  return relay_sum_scalar(units, n, i, m, stamp, acc);
#endif
}

}  // namespace tpar::inline v0::detail
