// backends/cpu: packing a product's operands into the panels the AVX-512 register tiles read
// (gemm_avx512.cpp, the one file that includes this, compiled with the AVX-512 flags): bf16
// widened to f32 for the f32 kernel, f32 rounded to bf16 pairs for the bf16 one, lines along k
// turned 16 x 16 at a time in registers, lines across the rows spread row by row.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "axle/backends/cpu/avx512_lanes.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/gemm_kernels.h"

namespace axle::cpu::avx512_gemm::packing {
// Internal linkage in the one file that includes this (see gemm_kernels.h).
namespace {

using avx512_lanes::first_lanes;
using avx512_lanes::round_to_bf16;
using gemm_detail::min_of;

AXLE_ALWAYS_INLINE __mmask32 first_halves(int64_t n) noexcept {
  if (n >= 32) return 0xffffffffu;
  if (n <= 0) return 0;
  return static_cast<__mmask32>((uint32_t{1} << n) - 1);
}

AXLE_ALWAYS_INLINE __m512 widen_bits(__m512i bits) noexcept {
  return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
}

/// Up to 16 contiguous elements from `at` (f32 or bf16) as f32, the lanes past n zero.
AXLE_ALWAYS_INLINE __m512 load_f32(const void* at, bool bf16, int64_t n) noexcept {
  const __mmask16 mask = first_lanes(n);
  if (bf16) {
    return widen_bits(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, at)));
  }
  return _mm512_maskz_loadu_ps(mask, at);
}
/// Up to 16 contiguous elements as bf16 bits in the low half of each lane.
AXLE_ALWAYS_INLINE __m512i load_bf16_bits(const void* at, bool bf16, int64_t n) noexcept {
  if (bf16) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first_lanes(n), at));
  return round_to_bf16(_mm512_maskz_loadu_ps(first_lanes(n), at));
}

/// r[i][j] -> r[j][i] for 16 rows of 16 lanes.
AXLE_ALWAYS_INLINE void transpose16(__m512 r[16]) noexcept {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4g + c] holds, in 128-bit lane L, column 4L + c of rows 4g..4g+3.
  __m512 u[16];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    const __m512d t0 = _mm512_castps_pd(t[4 * g]), t1 = _mm512_castps_pd(t[4 * g + 1]);
    const __m512d t2 = _mm512_castps_pd(t[4 * g + 2]), t3 = _mm512_castps_pd(t[4 * g + 3]);
    u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(t0, t2));
    u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(t0, t2));
    u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(t1, t3));
    u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(t1, t3));
  }
#pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    const __m512 v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
    const __m512 v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xdd);
    const __m512 w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
    const __m512 w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xdd);
    r[c] = _mm512_shuffle_f32x4(v0, w0, 0x88);
    r[4 + c] = _mm512_shuffle_f32x4(v1, w1, 0x88);
    r[8 + c] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
    r[12 + c] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
  }
}

// ---- packing -----------------------------------------------------------------------------------
//
// An operand as lines along k: the rows of op(a) or the columns of op(b). Element (line i, k p)
// lies at data + (i * ld + p) elements when k runs along memory (op(a) untransposed, op(b)
// transposed), else at data + (p * ld + i).
struct Lines {
  const char* data;
  int64_t ld;
  bool k_contiguous;
  bool bf16;
};

Lines lines_of_a(const Gemm& g) noexcept {
  return {static_cast<const char*>(g.a.data), g.a.ld, !g.a.transposed, g.a.bf16};
}
Lines lines_of_b(const Gemm& g) noexcept {
  return {static_cast<const char*>(g.b.data), g.b.ld, g.b.transposed, g.b.bf16};
}

/// Up to 16 elements of a line as f32 (the rest zero); with kQuantize, f32 values rounded to bf16.
template <class kSource, bool kQuantize>
AXLE_ALWAYS_INLINE __m512 load_packed(const kSource* at, int64_t n) noexcept {
  constexpr bool kBf16 = std::is_same_v<kSource, uint16_t>;
  const __m512 x = load_f32(at, kBf16, n);
  if constexpr (kQuantize && !kBf16) return widen_bits(round_to_bf16(x));
  return x;
}

/// How many rows ahead of the one it reads a packing loop over rows of the source prefetches.
constexpr int64_t kRowsAhead = 8;

/// Lines [line0, line0 + lines) x k [p0, p0 + depth) of `src` as f32 into panels of `kWidth`
/// lines: panel t holds dst[t * kWidth * depth + p * kWidth + i]; lines past the end are zero.
/// kSource is float or uint16_t (bf16, widened); with kQuantize, f32 values are rounded to bf16
/// (a bf16 product on f32 arithmetic). This form is for lines contiguous along k: 16 lines at a
/// time are read and transposed.
template <int64_t kWidth, class kSource, bool kQuantize>
void pack_f32_lines(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                    float* dst) noexcept {
  const auto* data = reinterpret_cast<const kSource*>(src.data);
  // Lines are taken 16 at a time (a panel of 14 as one group of 14).
  constexpr int64_t kGroup = kWidth < 16 ? kWidth : 16;
  static_assert(kWidth <= 16 || kWidth % 16 == 0);
  auto load = [](const kSource* at, int64_t n) { return load_packed<kSource, kQuantize>(at, n); };
  for (int64_t t = 0; t * kWidth < lines; ++t) {
    float* panel = dst + t * kWidth * depth;
    const int64_t panel_lines = min_of(kWidth, lines - t * kWidth);
    for (int64_t g0 = 0; g0 < kWidth; g0 += 16) {
      const __mmask16 store_mask = first_lanes(kWidth - g0);
      const int64_t valid = min_of(16, panel_lines - g0);  // may be <= 0: a group of zeros
      const kSource* row = data + (line0 + t * kWidth + g0) * src.ld + p0;
      int64_t kk = 0;
      if (valid == kGroup) {
        for (; kk + 16 <= depth; kk += 16) {
          __m512 r[16];
#pragma GCC unroll 16
          for (int l = 0; l < 16; ++l) {
            if (l >= kGroup) {
              r[l] = _mm512_setzero_ps();
              continue;
            }
            // Each line is its own stream through memory: fetch a few lines ahead.
            _mm_prefetch(reinterpret_cast<const char*>(row + l * src.ld + kk) + 256, _MM_HINT_T0);
            r[l] = load(row + l * src.ld + kk, 16);
          }
          transpose16(r);
#pragma GCC unroll 16
          for (int k = 0; k < 16; ++k) {
            _mm512_mask_storeu_ps(panel + (kk + k) * kWidth + g0, store_mask, r[k]);
          }
        }
      }
      for (; kk < depth; kk += 16) {
        const int64_t kn = min_of(16, depth - kk);
        __m512 r[16];
        for (int l = 0; l < 16; ++l) {
          r[l] = l < valid ? load(row + l * src.ld + kk, kn) : _mm512_setzero_ps();
        }
        transpose16(r);
        for (int64_t k = 0; k < kn; ++k) {
          _mm512_mask_storeu_ps(panel + (kk + k) * kWidth + g0, store_mask, r[k]);
        }
      }
    }
  }
}

/// As pack_f32_lines, for lines that lie side by side along a row of the source (a row holds one
/// k of every line): each row is read from end to end and spread over the panels. Reading a
/// panel's width from each of `depth` rows ld apart instead left the loads waiting on memory.
template <int64_t kWidth, class kSource, bool kQuantize>
void pack_f32_across(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                     float* dst) noexcept {
  const kSource* row = reinterpret_cast<const kSource*>(src.data) + p0 * src.ld + line0;
  for (int64_t k = 0; k < depth; ++k, row += src.ld) {
    for (int64_t t = 0; t * kWidth < lines; ++t) {
      float* step = dst + t * kWidth * depth + k * kWidth;
      const int64_t panel_lines = min_of(kWidth, lines - t * kWidth);
      for (int64_t g0 = 0; g0 < kWidth; g0 += 16) {
        const int64_t valid = min_of(16, panel_lines - g0);  // may be <= 0: a group of zeros
        const kSource* at = row + t * kWidth + g0;
        _mm_prefetch(reinterpret_cast<const char*>(at + kRowsAhead * src.ld), _MM_HINT_T0);
        const __m512 x =
            valid > 0 ? load_packed<kSource, kQuantize>(at, valid) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(step + g0, first_lanes(kWidth - g0), x);
      }
    }
  }
}

/// Packs f32 panels in the form for the source's layout.
template <int64_t kWidth, class kSource, bool kQuantize>
void pack_f32(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
              float* dst) noexcept {
  if (src.k_contiguous) {
    return pack_f32_lines<kWidth, kSource, kQuantize>(src, line0, lines, p0, depth, dst);
  }
  pack_f32_across<kWidth, kSource, kQuantize>(src, line0, lines, p0, depth, dst);
}

/// pack_f32 for the source's element type.
template <int64_t kWidth, bool kQuantize>
void pack_f32(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
              float* dst) noexcept {
  if (src.bf16) return pack_f32<kWidth, uint16_t, false>(src, line0, lines, p0, depth, dst);
  pack_f32<kWidth, float, kQuantize>(src, line0, lines, p0, depth, dst);
}

/// 16 pairs of bf16 (k, k + 1) from up to 32 contiguous elements of a line (the rest zero).
template <class kSource>
AXLE_ALWAYS_INLINE __m512i load_pairs(const kSource* at, int64_t n) noexcept {
  if constexpr (std::is_same_v<kSource, uint16_t>) {
    return _mm512_maskz_loadu_epi16(first_halves(n), at);
  } else {
    const __m256i lo =
        _mm512_cvtepi32_epi16(round_to_bf16(_mm512_maskz_loadu_ps(first_lanes(n), at)));
    const __m256i hi =
        _mm512_cvtepi32_epi16(round_to_bf16(_mm512_maskz_loadu_ps(first_lanes(n - 16), at + 16)));
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
  }
}

/// As pack_f32_lines, into bf16 pairs: step s of panel t holds, for each line, the bf16 bits of
/// k = 2s (low half) and 2s + 1 (high half; 0 past the depth) as one 32-bit element.
template <int64_t kWidth, class kSource>
void pack_pairs_lines(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                      uint32_t* dst) noexcept {
  const auto* data = reinterpret_cast<const kSource*>(src.data);
  constexpr int64_t kGroup = kWidth < 16 ? kWidth : 16;
  const int64_t steps = (depth + 1) / 2;
  for (int64_t t = 0; t * kWidth < lines; ++t) {
    uint32_t* panel = dst + t * kWidth * steps;
    const int64_t panel_lines = min_of(kWidth, lines - t * kWidth);
    for (int64_t g0 = 0; g0 < kWidth; g0 += 16) {
      const __mmask16 store_mask = first_lanes(kWidth - g0);
      const int64_t valid = min_of(16, panel_lines - g0);
      const kSource* row = data + (line0 + t * kWidth + g0) * src.ld + p0;
      int64_t kk = 0;
      if (valid == kGroup) {
        for (; kk + 32 <= depth; kk += 32) {
          __m512 r[16];
#pragma GCC unroll 16
          for (int l = 0; l < 16; ++l) {
            if (l >= kGroup) {
              r[l] = _mm512_setzero_ps();
              continue;
            }
            _mm_prefetch(reinterpret_cast<const char*>(row + l * src.ld + kk) + 256, _MM_HINT_T0);
            r[l] = _mm512_castsi512_ps(load_pairs(row + l * src.ld + kk, 32));
          }
          transpose16(r);
#pragma GCC unroll 16
          for (int kp = 0; kp < 16; ++kp) {
            _mm512_mask_storeu_epi32(panel + (kk / 2 + kp) * kWidth + g0, store_mask,
                                     _mm512_castps_si512(r[kp]));
          }
        }
      }
      for (; kk < depth; kk += 32) {
        const int64_t kn = min_of(32, depth - kk);
        __m512 r[16];
        for (int l = 0; l < 16; ++l) {
          r[l] = l < valid ? _mm512_castsi512_ps(load_pairs(row + l * src.ld + kk, kn))
                           : _mm512_setzero_ps();
        }
        transpose16(r);
        const int64_t kp_count = (kn + 1) / 2;
        for (int64_t kp = 0; kp < kp_count; ++kp) {
          _mm512_mask_storeu_epi32(panel + (kk / 2 + kp) * kWidth + g0, store_mask,
                                   _mm512_castps_si512(r[kp]));
        }
      }
    }
  }
}

/// As pack_pairs_lines, for lines side by side along a row of the source (pack_f32_across): the
/// rows of k = 2s and 2s + 1 are read together and spread over the panels' step s.
template <int64_t kWidth, class kSource>
void pack_pairs_across(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                       uint32_t* dst) noexcept {
  constexpr bool kBf16 = std::is_same_v<kSource, uint16_t>;
  const int64_t steps = (depth + 1) / 2;
  const kSource* row = reinterpret_cast<const kSource*>(src.data) + p0 * src.ld + line0;
  for (int64_t s = 0; s < steps; ++s, row += 2 * src.ld) {
    const bool has_second = 2 * s + 1 < depth;
    for (int64_t t = 0; t * kWidth < lines; ++t) {
      uint32_t* step = dst + t * kWidth * steps + s * kWidth;
      const int64_t panel_lines = min_of(kWidth, lines - t * kWidth);
      for (int64_t g0 = 0; g0 < kWidth; g0 += 16) {
        const int64_t valid = min_of(16, panel_lines - g0);
        const kSource* at = row + t * kWidth + g0;
        _mm_prefetch(reinterpret_cast<const char*>(at + kRowsAhead * src.ld), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(at + (kRowsAhead + 1) * src.ld), _MM_HINT_T0);
        __m512i pairs = _mm512_setzero_si512();
        if (valid > 0) {
          const __m512i first = load_bf16_bits(at, kBf16, valid);
          const __m512i second =
              has_second ? load_bf16_bits(at + src.ld, kBf16, valid) : _mm512_setzero_si512();
          pairs = _mm512_or_si512(first, _mm512_slli_epi32(second, 16));
        }
        _mm512_mask_storeu_epi32(step + g0, first_lanes(kWidth - g0), pairs);
      }
    }
  }
}

/// Two rows of 32 bf16 values (k and k + 1) as 32 pairs in two vectors of 16 words: word i of
/// the first half pairs value i of each row, word i of the second half value 16 + i.
class RowPairs {
 public:
  AXLE_ALWAYS_INLINE __m512i first_half(__m512i first, __m512i second) const noexcept {
    return _mm512_permutex2var_epi16(first, first_half_, second);
  }
  AXLE_ALWAYS_INLINE __m512i second_half(__m512i first, __m512i second) const noexcept {
    return _mm512_permutex2var_epi16(first, second_half_, second);
  }

 private:
  // Index i < 32 picks the first row's value i, 32 + i the second row's.
  const __m512i first_half_ =
      _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                       37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i second_half_ = _mm512_add_epi16(first_half_, _mm512_set1_epi16(16));
};

/// pack_pairs_across for bf16 lines into panels of 32: a panel's 32 values of the rows of k = 2s
/// and 2s + 1 are two loads, paired into the panel's step s by RowPairs.
void pack_bf16_pairs_across_32(const Lines& src, int64_t line0, int64_t lines, int64_t p0,
                               int64_t depth, uint32_t* dst) noexcept {
  const RowPairs pairs;
  const int64_t steps = (depth + 1) / 2;
  const auto* row = reinterpret_cast<const uint16_t*>(src.data) + p0 * src.ld + line0;
  for (int64_t s = 0; s < steps; ++s, row += 2 * src.ld) {
    const bool has_second = 2 * s + 1 < depth;
    for (int64_t t = 0; t * 32 < lines; ++t) {
      const __mmask32 valid = first_halves(lines - t * 32);
      const uint16_t* at = row + t * 32;
      _mm_prefetch(reinterpret_cast<const char*>(at + kRowsAhead * src.ld), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(at + (kRowsAhead + 1) * src.ld), _MM_HINT_T0);
      const __m512i first = _mm512_maskz_loadu_epi16(valid, at);
      const __m512i second =
          has_second ? _mm512_maskz_loadu_epi16(valid, at + src.ld) : _mm512_setzero_si512();
      uint32_t* step = dst + t * 32 * steps + s * 32;
      _mm512_storeu_si512(step, pairs.first_half(first, second));
      _mm512_storeu_si512(step + 16, pairs.second_half(first, second));
    }
  }
}

/// Packs bf16 pairs in the form for the source's layout and element type.
template <int64_t kWidth>
void pack_pairs(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                uint32_t* dst) noexcept {
  if (src.k_contiguous) {
    if (src.bf16) return pack_pairs_lines<kWidth, uint16_t>(src, line0, lines, p0, depth, dst);
    return pack_pairs_lines<kWidth, float>(src, line0, lines, p0, depth, dst);
  }
  if (src.bf16 && kWidth == 32) {
    return pack_bf16_pairs_across_32(src, line0, lines, p0, depth, dst);
  }
  if (src.bf16) return pack_pairs_across<kWidth, uint16_t>(src, line0, lines, p0, depth, dst);
  pack_pairs_across<kWidth, float>(src, line0, lines, p0, depth, dst);
}

}  // namespace
}  // namespace axle::cpu::avx512_gemm::packing
