// backends/cpu: bf16_pairs.h's layouts on AVX-512 (its product is gemm_avx512.cpp's), compiled
// with AVX-512 flags apart from the rest of the library (backends/CMakeLists.txt) and called only
// where cpuid reports them.
#include <immintrin.h>

#include <cstdint>

#include "axle/backends/cpu/avx512_lanes.h"
#include "axle/backends/cpu/bf16_pairs.h"

namespace axle::cpu {
namespace {

using avx512_lanes::first_lanes;
using avx512_lanes::round_to_bf16;

/// 16 words pairing lanes of `low` and `high` (bf16 bits in each lane's low half).
AXLE_ALWAYS_INLINE __m512i pair_lanes(__m512i low, __m512i high) noexcept {
  return _mm512_or_si512(low, _mm512_slli_epi32(high, 16));
}

AXLE_ALWAYS_INLINE __m512i bf16_lanes(const float* at, __mmask16 mask) noexcept {
  return round_to_bf16(_mm512_maskz_loadu_ps(mask, at));
}
AXLE_ALWAYS_INLINE __m512i bf16_lanes(const uint16_t* at, __mmask16 mask) noexcept {
  return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, at));
}

template <class T>
void pair_rows(const T* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* out, int64_t ldo) {
  for (int64_t s = 0; 2 * s < rows; ++s) {
    const T* low = src + 2 * s * lds;
    const bool has_high = 2 * s + 1 < rows;
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 mask = first_lanes(cols - c);
      const __m512i high = has_high ? bf16_lanes(low + lds + c, mask) : _mm512_setzero_si512();
      _mm512_mask_storeu_epi32(out + s * ldo + c, mask,
                               pair_lanes(bf16_lanes(low + c, mask), high));
    }
  }
}

}  // namespace

void avx512_pair_rows(const float* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* out,
                      int64_t ldo) {
  pair_rows(src, rows, cols, lds, out, ldo);
}

void avx512_pair_rows(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* out,
                      int64_t ldo) {
  pair_rows(src, rows, cols, lds, out, ldo);
}

void avx512_narrow_rows(const float* src, int64_t rows, int64_t cols, int64_t lds, uint16_t* out,
                        int64_t ldo) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 mask = first_lanes(cols - c);
      _mm512_mask_cvtepi32_storeu_epi16(
          out + r * ldo + c, mask, round_to_bf16(_mm512_maskz_loadu_ps(mask, src + r * lds + c)));
    }
    if (cols % 2 != 0) out[r * ldo + cols] = 0;
  }
}

void avx512_narrow_scaled_rows(const float* src, int64_t rows, int64_t cols, int64_t lds,
                               float factor, uint16_t* out, int64_t ldo) {
  const __m512 scale = _mm512_set1_ps(factor);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 mask = first_lanes(cols - c);
      const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, src + r * lds + c), scale);
      _mm512_mask_cvtepi32_storeu_epi16(out + r * ldo + c, mask, round_to_bf16(x));
    }
  }
}

void avx512_row_terms(const float* forward, const uint16_t* grad, int64_t g_row, int64_t rows,
                      int64_t cols, float* d, float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* o = forward + i * (cols + 1);
    const uint16_t* g = grad + i * g_row;
    __m512 sum = _mm512_setzero_ps();
    for (int64_t c = 0; c < cols; c += 16) {
      const __mmask16 mask = first_lanes(cols - c);
      const __m512 wide = _mm512_castsi512_ps(
          _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, g + c)), 16));
      sum = _mm512_fmadd_ps(wide, _mm512_maskz_loadu_ps(mask, o + c), sum);
    }
    d[i] = _mm512_reduce_add_ps(sum);
    lse[i] = o[cols];
  }
}

}  // namespace axle::cpu
