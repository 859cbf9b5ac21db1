// backends/cpu: the AVX2 lanes the pooling kernels share (pooling.cpp, max_pool_strided.cpp):
// eight windows of a stride-2 row at a time. Compiled with the build's baseline (x86-64-v3).
#pragma once

#if defined(__AVX2__)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace axle::cpu::pool_lanes {

// Lanes [0, count) of an AVX2 mask (count clipped to [0, 8]).
inline __m256i first_lanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(count, 0, 8))),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Eight f32 windows at once: the even and odd taps of 16 floats of one row (2 * windows of
// them, the rest read as 0, when fewer than eight windows are left).
inline void split_even_odd(const float* p, int64_t windows, __m256& even, __m256& odd) {
  __m256 lo, hi;
  if (windows >= 8) {
    lo = _mm256_loadu_ps(p), hi = _mm256_loadu_ps(p + 8);
  } else {
    lo = _mm256_maskload_ps(p, first_lanes(2 * windows));
    hi = _mm256_maskload_ps(p + 8, first_lanes(2 * windows - 8));
  }
  even = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0))), 0xD8));
  odd = _mm256_castpd_ps(_mm256_permute4x64_pd(
      _mm256_castps_pd(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1))), 0xD8));
}

// relu as the kRelu kernel computes it, v < 0 ? +0 : v (NaN and -0 kept), on eight lanes.
inline __m256 relu8(__m256 v) {
  return _mm256_andnot_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ), v);
}

// The first `count` (< 8) lanes of v at p. A masked store (vmaskmovps) is microcoded and slow on
// some processors (AMD's), and rows of fewer than eight windows (a 14x14 plane's) make every
// store a partial one: the lanes go through the stack instead.
inline void store_first(float* p, int64_t count, __m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  for (int64_t i = 0; i < count; ++i) p[i] = lanes[i];
}

}  // namespace axle::cpu::pool_lanes
#endif
