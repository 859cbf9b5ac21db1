// backends/cpu: vector_math.h on AVX-512, compiled apart with AVX-512 flags (backends/CMakeLists)
// and called only where cpuid reports them. Nothing here is inline outside this file's namespace.
#include <immintrin.h>

#include <bit>
#include <cstdint>
#include <type_traits>

#include "axle/backends/cpu/vector_math.h"
#include "axle/backends/cpu/vector_math_lane.h"

namespace axle::cpu::vector_math_detail {
namespace {

// Sixteen lanes: the operations exp_lanes needs.
struct Avx512Ops {
  static __m512 set(float v) { return _mm512_set1_ps(v); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512 sub(__m512 a, __m512 b) { return _mm512_sub_ps(a, b); }
  static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 fma(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 min(__m512 a, __m512 b) { return _mm512_min_ps(a, b); }
  static __m512 max(__m512 a, __m512 b) { return _mm512_max_ps(a, b); }
  static __m512 floor(__m512 a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEG_INF); }
  static __m512 div(__m512 a, __m512 b) { return _mm512_div_ps(a, b); }
  static __m512 keep_nan(__m512 x, __m512 y) {
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }
  static __m512 scalef(__m512 y, __m512 m) { return _mm512_scalef_ps(y, m); }
  static __m512 pow2(__m512 e) {
    const __m512i bits =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(e), _mm512_set1_epi32(127)), 23);
    return _mm512_castsi512_ps(bits);
  }
  static __m512 fix_exp_edges(__m512 x, __m512 y) {
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, set(kExpHigh), _CMP_GT_OQ),
                           set(__builtin_huge_valf()));
    y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, set(kExpLow), _CMP_LT_OQ), _mm512_setzero_ps());
    return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
  }
};

__mmask16 first_lanes(int64_t n) {
  return n >= 16 ? 0xffff : static_cast<__mmask16>((1u << n) - 1);
}

}  // namespace

namespace {

// Lanes j and j + 8, then j and j + 4, ...: as the scalar path adds them.
float add_lanes(__m512 sum) {
  const __m256 eight = _mm256_add_ps(_mm512_castps512_ps256(sum), _mm512_extractf32x8_ps(sum, 1));
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(eight), _mm256_extractf128_ps(eight, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_shuffle_ps(two, two, 1)));
}

// kRows rows at once, so that their independent chains fill the pipes.
template <int kRows>
void exp_rows(float* x, int64_t n, int64_t ld, const float* shifts, float* sums) {
  __m512 shift[kRows], sum[kRows];
  for (int r = 0; r < kRows; ++r) {
    shift[r] = _mm512_set1_ps(shifts[r]);
    sum[r] = _mm512_setzero_ps();
  }
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = first_lanes(n - i);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      float* at = x + r * ld + i;
      const __m512 e =
          exp_lanes<Avx512Ops>(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, at), shift[r]));
      _mm512_mask_storeu_ps(at, mask, e);
      sum[r] = _mm512_mask_add_ps(sum[r], mask, sum[r], e);
    }
  }
  if (sums) {
    for (int r = 0; r < kRows; ++r) sums[r] = add_lanes(sum[r]);
  }
}

// map(lanes) with f's lanes function: one loop per function, so the switch stays out of it.
template <class Map>
void with_function_lanes(VectorFunction f, Map&& map) {
  switch (f) {
    case VectorFunction::kExp:
      return map([](__m512 v) { return exp_lanes<Avx512Ops>(v); });
    case VectorFunction::kErf:
      return map([](__m512 v) { return erf_lanes<Avx512Ops>(v); });
    case VectorFunction::kGelu:
      return map([](__m512 v) { return gelu_lanes<Avx512Ops>(v); });
  }
}

}  // namespace

void map_f32_avx512(VectorFunction f, const float* x, float* out, int64_t n) {
  with_function_lanes(f, [&](auto function) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, function(_mm512_loadu_ps(x + i)));
    if (i < n) {
      const __mmask16 mask = first_lanes(n - i);
      _mm512_mask_storeu_ps(out + i, mask, function(_mm512_maskz_loadu_ps(mask, x + i)));
    }
  });
}

void gelu_backward_f32_avx512(const float* g, const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm512_storeu_ps(
        out + i, gelu_backward_lanes<Avx512Ops>(_mm512_loadu_ps(g + i), _mm512_loadu_ps(x + i)));
  }
  if (i < n) {
    const __mmask16 mask = first_lanes(n - i);
    _mm512_mask_storeu_ps(out + i, mask,
                          gelu_backward_lanes<Avx512Ops>(_mm512_maskz_loadu_ps(mask, g + i),
                                                         _mm512_maskz_loadu_ps(mask, x + i)));
  }
}

void exp_shifted_rows_avx512(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                             float* sums) {
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4)
    exp_rows<4>(x + r * ld, n, ld, shifts + r, sums ? sums + r : nullptr);
  for (; r < rows; ++r) exp_rows<1>(x + r * ld, n, ld, shifts + r, sums ? sums + r : nullptr);
}

namespace {

// narrow_bits on sixteen lanes (u: the floats' bits).
__m512i narrow_lanes(__m512i u) {
  const __m512i high = _mm512_srli_epi32(u, 16);
  const __m512i nearest_even =
      _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                                         _mm512_and_si512(high, _mm512_set1_epi32(1))),
                        16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_mov_epi32(nearest_even, nan, _mm512_or_si512(high, _mm512_set1_epi32(0x40)));
}

// Sixteen f32 values rounded to bf16 with narrow_lanes' bits. With kBf16Instructions, by
// AVX512_BF16's vcvtneps2bf16 where no lane is subnormal: it rounds every other value (NaNs and
// infinities too) as narrow_bits does, checked over all 2^32 patterns, but flushes subnormals.
template <bool kBf16Instructions>
__m256i narrowed(__m512 v) {
  if constexpr (kBf16Instructions) {
    constexpr int kSubnormal = 0x20;  // vfpclassps's class
    if (_mm512_fpclass_ps_mask(v, kSubnormal) == 0) {
      return std::bit_cast<__m256i>(_mm512_cvtneps_pbh(v));
    }
  }
  return _mm512_cvtepi32_epi16(narrow_lanes(_mm512_castps_si512(v)));
}

// body(std::true_type) where the bf16 instructions may round, else body(std::false_type).
template <class Body>
void with_rounding(bool bf16_instructions, Body&& body) {
  if (bf16_instructions) return body(std::true_type{});
  return body(std::false_type{});
}

}  // namespace

void widen_bf16_avx512(const uint16_t* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)));
    _mm512_storeu_ps(out + i, _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t{x[i]} << 16);
}

void narrow_bf16_avx512(const float* x, uint16_t* out, int64_t n, bool bf16_instructions) {
  with_rounding(bf16_instructions, [&](auto instructions) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                          narrowed<decltype(instructions)::value>(_mm512_loadu_ps(x + i)));
    }
    for (; i < n; ++i) out[i] = static_cast<uint16_t>(narrow_bits(std::bit_cast<uint32_t>(x[i])));
  });
}

void round_to_bf16_avx512(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = narrow_lanes(_mm512_castps_si512(_mm512_loadu_ps(x + i)));
    _mm512_storeu_ps(x + i, _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16)));
  }
  for (; i < n; ++i) x[i] = std::bit_cast<float>(narrow_bits(std::bit_cast<uint32_t>(x[i])) << 16);
}

namespace {

// Sixteen bf16 values (the first n < 16 when masked) widened to f32, and f32 values rounded to
// bf16 and stored: widen_bf16's and narrow_bf16's bits.
__m512 load_widened(const uint16_t* x) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
__m512 load_widened(const uint16_t* x, __mmask16 mask) {
  const __m256i bits = _mm256_maskz_loadu_epi16(mask, x);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}
}  // namespace

void map_bf16_avx512(VectorFunction f, const uint16_t* x, uint16_t* out, int64_t n,
                     bool bf16_instructions) {
  with_rounding(bf16_instructions, [&](auto instructions) {
    with_function_lanes(f, [&](auto function) {
      int64_t i = 0;
      for (; i + 16 <= n; i += 16) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                            narrowed<decltype(instructions)::value>(function(load_widened(x + i))));
      }
      if (i < n) {
        const __mmask16 mask = first_lanes(n - i);
        _mm256_mask_storeu_epi16(
            out + i, mask,
            narrowed<decltype(instructions)::value>(function(load_widened(x + i, mask))));
      }
    });
  });
}

void gelu_backward_bf16_avx512(const uint16_t* g, const uint16_t* x, uint16_t* out, int64_t n,
                               bool bf16_instructions) {
  with_rounding(bf16_instructions, [&](auto instructions) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      const __m512 grads = gelu_backward_lanes<Avx512Ops>(load_widened(g + i), load_widened(x + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                          narrowed<decltype(instructions)::value>(grads));
    }
    if (i < n) {
      const __mmask16 mask = first_lanes(n - i);
      const __m512 grads =
          gelu_backward_lanes<Avx512Ops>(load_widened(g + i, mask), load_widened(x + i, mask));
      _mm256_mask_storeu_epi16(out + i, mask, narrowed<decltype(instructions)::value>(grads));
    }
  });
}

}  // namespace axle::cpu::vector_math_detail
