// backends/cpu: vector_math.h on AVX2 (the build's baseline). Two 8-lane registers stand for the
// 16 lanes of the other paths, so sums are added in the same order.
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "axle/backends/cpu/vector_math.h"
#include "axle/backends/cpu/vector_math_lane.h"

namespace axle::cpu::vector_math_detail {
namespace {

struct Avx2Ops {
  static __m256 set(float v) { return _mm256_set1_ps(v); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m256 sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
  static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256 fma(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 min(__m256 a, __m256 b) { return _mm256_min_ps(a, b); }
  static __m256 max(__m256 a, __m256 b) { return _mm256_max_ps(a, b); }
  static __m256 floor(__m256 a) { return _mm256_floor_ps(a); }
  static __m256 div(__m256 a, __m256 b) { return _mm256_div_ps(a, b); }
  static __m256 keep_nan(__m256 x, __m256 y) {
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
  static __m256 pow2(__m256 e) {
    const __m256i bits =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(e), _mm256_set1_epi32(127)), 23);
    return _mm256_castsi256_ps(bits);
  }
  static __m256 fix_exp_edges(__m256 x, __m256 y) {
    y = _mm256_blendv_ps(y, set(__builtin_huge_valf()),
                         _mm256_cmp_ps(x, set(kExpHigh), _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, set(kExpLow), _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  }
};

__m256i lane_mask(int64_t n) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 0 ? 0 : (n > 8 ? 8 : n))),
                            index);
}

// exp of up to 8 values at x (the rest of the lanes 0), stored back; returns them.
__m256 exp_eight(float* x, int64_t n, __m256 shift) {
  const __m256i mask = lane_mask(n);
  const __m256 e = exp_lanes<Avx2Ops>(_mm256_sub_ps(_mm256_maskload_ps(x, mask), shift));
  _mm256_maskstore_ps(x, mask, e);
  return _mm256_and_ps(e, _mm256_castsi256_ps(mask));
}

}  // namespace

void map_f32_avx2(VectorFunction f, const float* x, float* out, int64_t n) {
  auto map = [&](auto function) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, function(_mm256_loadu_ps(x + i)));
    if (i < n) {
      const __m256i mask = lane_mask(n - i);
      _mm256_maskstore_ps(out + i, mask, function(_mm256_maskload_ps(x + i, mask)));
    }
  };
  switch (f) {
    case VectorFunction::kExp:
      return map([](__m256 v) { return exp_lanes<Avx2Ops>(v); });
    case VectorFunction::kErf:
      return map([](__m256 v) { return erf_lanes<Avx2Ops>(v); });
    case VectorFunction::kGelu:
      return map([](__m256 v) { return gelu_lanes<Avx2Ops>(v); });
  }
}

void gelu_backward_f32_avx2(const float* g, const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     gelu_backward_lanes<Avx2Ops>(_mm256_loadu_ps(g + i), _mm256_loadu_ps(x + i)));
  }
  if (i < n) {
    const __m256i mask = lane_mask(n - i);
    _mm256_maskstore_ps(out + i, mask,
                        gelu_backward_lanes<Avx2Ops>(_mm256_maskload_ps(g + i, mask),
                                                     _mm256_maskload_ps(x + i, mask)));
  }
}

void exp_shifted_rows_avx2(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                           float* sums) {
  for (int64_t row = 0; row < rows; ++row) {
    float* at = x + row * ld;
    const __m256 s = _mm256_set1_ps(shifts[row]);
    __m256 low = _mm256_setzero_ps(), high = _mm256_setzero_ps();  // lanes 0-7, 8-15
    for (int64_t i = 0; i < n; i += 16) {
      low = _mm256_add_ps(low, exp_eight(at + i, n - i, s));
      if (n - i > 8) high = _mm256_add_ps(high, exp_eight(at + i + 8, n - i - 8, s));
    }
    if (!sums) continue;
    const __m256 eight = _mm256_add_ps(low, high);
    const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
    const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
    sums[row] = _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
  }
}

namespace {

// narrow_bits on eight lanes (u: the floats' bits).
__m256i narrow_lanes(__m256i u) {
  const __m256i high = _mm256_srli_epi32(u, 16);
  const __m256i nearest_even =
      _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)),
                                         _mm256_and_si256(high, _mm256_set1_epi32(1))),
                        16);
  // |u| > inf's bits, compared signed: both sides are below 2^31.
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(nearest_even, _mm256_or_si256(high, _mm256_set1_epi32(0x40)), nan);
}

}  // namespace

void widen_bf16_avx2(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t{x[i]} << 16);
}

void narrow_bf16_avx2(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = narrow_lanes(_mm256_castps_si256(_mm256_loadu_ps(x + i)));
    // Values fit 16 bits, so the unsigned saturation keeps them; the pack works per 128-bit half.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) out[i] = static_cast<uint16_t>(narrow_bits(std::bit_cast<uint32_t>(x[i])));
}

void round_to_bf16_avx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = narrow_lanes(_mm256_castps_si256(_mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(x + i, _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
  }
  for (; i < n; ++i) x[i] = std::bit_cast<float>(narrow_bits(std::bit_cast<uint32_t>(x[i])) << 16);
}

}  // namespace axle::cpu::vector_math_detail
#endif  // __AVX2__ && __FMA__
