// backends/cpu: the AVX-512 product kernels, compiled with -mavx512f/bw/vl/dq/bf16 apart from
// the rest of the library and called only when cpuid reports those (isa.h). Register tiles of
// 14 rows x 32 columns (28 accumulators): per step of k, two vector loads of op(b), 14 broadcasts
// of op(a) and 28 FMAs (or vdpbf16ps, a pair of bf16 products each). Operands are packed into
// panels first, converting on the way: bf16 widened to f32 for the f32 kernel, f32 rounded to
// bf16 for the bf16 one, and a transposed layout turned 16 x 16 at a time in registers.
//
// Nothing here is inline outside this file's own namespace (see gemm_kernels.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "axle/backends/cpu/avx512_lanes.h"
#include "axle/backends/cpu/bf16_pairs.h"
#include "axle/backends/cpu/gemm_kernels.h"

// The small helpers below must inline into the loops that call them (a call would pass the
// tile's accumulators through memory).
#define ALWAYS_INLINE __attribute__((always_inline)) inline

namespace axle::cpu {
namespace avx512_gemm {
namespace {

using avx512_lanes::first_lanes;
using avx512_lanes::round_to_bf16;
using gemm_detail::min_of;
using gemm_detail::TileIo;

ALWAYS_INLINE __mmask32 first_halves(int64_t n) noexcept {
  if (n >= 32) return 0xffffffffu;
  if (n <= 0) return 0;
  return static_cast<__mmask32>((uint32_t{1} << n) - 1);
}

ALWAYS_INLINE __m512 widen_bits(__m512i bits) noexcept {
  return _mm512_castsi512_ps(_mm512_slli_epi32(bits, 16));
}

/// Up to 16 contiguous elements from `at` (f32 or bf16) as f32, the lanes past n zero.
ALWAYS_INLINE __m512 load_f32(const void* at, bool bf16, int64_t n) noexcept {
  const __mmask16 mask = first_lanes(n);
  if (bf16) {
    return widen_bits(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, at)));
  }
  return _mm512_maskz_loadu_ps(mask, at);
}
/// Up to 16 contiguous elements as bf16 bits in the low half of each lane.
ALWAYS_INLINE __m512i load_bf16_bits(const void* at, bool bf16, int64_t n) noexcept {
  if (bf16) return _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first_lanes(n), at));
  return round_to_bf16(_mm512_maskz_loadu_ps(first_lanes(n), at));
}

/// r[i][j] -> r[j][i] for 16 rows of 16 lanes.
ALWAYS_INLINE void transpose16(__m512 r[16]) noexcept {
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

/// Lines [line0, line0 + lines) x k [p0, p0 + depth) of `src` as f32 into panels of `kWidth`
/// lines: panel t holds dst[t * kWidth * depth + p * kWidth + i]; lines past the end are zero.
/// kSource is float or uint16_t (bf16, widened); with kQuantize, f32 values are rounded to bf16
/// (a bf16 product on f32 arithmetic).
template <int64_t kWidth, class kSource, bool kQuantize>
void pack_f32(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
              float* dst) noexcept {
  constexpr bool kBf16 = std::is_same_v<kSource, uint16_t>;
  const auto* data = reinterpret_cast<const kSource*>(src.data);
  // Lines are taken 16 at a time (a panel of 14 as one group of 14).
  constexpr int64_t kGroup = kWidth < 16 ? kWidth : 16;
  static_assert(kWidth <= 16 || kWidth % 16 == 0);
  auto load = [&](const kSource* at, int64_t n) {
    const __m512 x = load_f32(at, kBf16, n);
    if constexpr (kQuantize && !kBf16) return widen_bits(round_to_bf16(x));
    return x;
  };
  for (int64_t t = 0; t * kWidth < lines; ++t) {
    float* panel = dst + t * kWidth * depth;
    const int64_t panel_lines = min_of(kWidth, lines - t * kWidth);
    for (int64_t g0 = 0; g0 < kWidth; g0 += 16) {
      const __mmask16 store_mask = first_lanes(kWidth - g0);
      const int64_t valid = min_of(16, panel_lines - g0);  // may be <= 0: a group of zeros
      const int64_t first = line0 + t * kWidth + g0;
      if (src.k_contiguous) {
        const kSource* row = data + first * src.ld + p0;
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
      } else {
        const kSource* at = data + p0 * src.ld + first;
        for (int64_t k = 0; k < depth; ++k, at += src.ld) {
          const __m512 x = valid > 0 ? load(at, valid) : _mm512_setzero_ps();
          _mm512_mask_storeu_ps(panel + k * kWidth + g0, store_mask, x);
        }
      }
    }
  }
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
ALWAYS_INLINE __m512i load_pairs(const kSource* at, int64_t n) noexcept {
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

/// As pack_f32, into bf16 pairs: step s of panel t holds, for each line, the bf16 bits of k = 2s
/// (low half) and 2s + 1 (high half; 0 past the depth) as one 32-bit element.
template <int64_t kWidth, class kSource>
void pack_pairs(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                uint32_t* dst) noexcept {
  constexpr bool kBf16 = std::is_same_v<kSource, uint16_t>;
  const auto* data = reinterpret_cast<const kSource*>(src.data);
  constexpr int64_t kGroup = kWidth < 16 ? kWidth : 16;
  const int64_t steps = (depth + 1) / 2;
  for (int64_t t = 0; t * kWidth < lines; ++t) {
    uint32_t* panel = dst + t * kWidth * steps;
    const int64_t panel_lines = min_of(kWidth, lines - t * kWidth);
    for (int64_t g0 = 0; g0 < kWidth; g0 += 16) {
      const __mmask16 store_mask = first_lanes(kWidth - g0);
      const int64_t valid = min_of(16, panel_lines - g0);
      const int64_t first = line0 + t * kWidth + g0;
      if (src.k_contiguous) {
        const kSource* row = data + first * src.ld + p0;
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
      } else {
        const kSource* at = data + p0 * src.ld + first;
        for (int64_t s = 0; s < steps; ++s, at += 2 * src.ld) {
          __m512i pairs = _mm512_setzero_si512();
          if (valid > 0) {
            const __m512i lo = load_bf16_bits(at, kBf16, valid);
            const __m512i hi = 2 * s + 1 < depth ? load_bf16_bits(at + src.ld, kBf16, valid)
                                                 : _mm512_setzero_si512();
            pairs = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
          }
          _mm512_mask_storeu_epi32(panel + s * kWidth + g0, store_mask, pairs);
        }
      }
    }
  }
}

template <int64_t kWidth>
void pack_pairs(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
                uint32_t* dst) noexcept {
  if (src.bf16) return pack_pairs<kWidth, uint16_t>(src, line0, lines, p0, depth, dst);
  pack_pairs<kWidth, float>(src, line0, lines, p0, depth, dst);
}

// ---- register tiles --------------------------------------------------------------------------

constexpr int64_t kRows = 14, kColumns = 32;

/// Stores a tile row's two accumulators (the first `cols` columns) as f32 or bf16.
ALWAYS_INLINE void store_row(const TileIo& io, int r, __m512 lo, __m512 hi, __mmask16 m0,
                             __mmask16 m1) noexcept {
  if (io.round_bf16) {
    lo = widen_bits(round_to_bf16(lo));
    hi = widen_bits(round_to_bf16(hi));
  }
  if (io.out_bf16) {
    auto* out = static_cast<uint16_t*>(io.out) + r * io.ld_out;
    _mm512_mask_cvtepi32_storeu_epi16(out, m0, round_to_bf16(lo));
    _mm512_mask_cvtepi32_storeu_epi16(out + 16, m1, round_to_bf16(hi));
  } else {
    float* out = static_cast<float*>(io.out) + r * io.ld_out;
    _mm512_mask_storeu_ps(out, m0, lo);
    _mm512_mask_storeu_ps(out + 16, m1, hi);
  }
}

/// The tile's first R rows over `steps` packed steps: one FMA (f32) or vdpbf16ps (bf16 pairs)
/// per row, vector and step, in step order.
template <int R, bool kPairs, class Packed>
void tile(int64_t steps, const Packed* a, const Packed* b, const TileIo& io) noexcept {
  const __mmask16 m0 = first_lanes(io.cols), m1 = first_lanes(io.cols - 16);
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm512_setzero_ps();
    acc[r][1] = _mm512_setzero_ps();
  }
  for (int64_t s = 0; s < steps; ++s, a += kRows, b += kColumns) {
    if constexpr (kPairs) {
      const __m512bh b0 = (__m512bh)_mm512_load_si512(b);
      const __m512bh b1 = (__m512bh)_mm512_load_si512(b + 16);
#pragma GCC unroll 14
      for (int r = 0; r < R; ++r) {
        const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[r]));
        acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b0);
        acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b1);
      }
    } else {
      const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 14
      for (int r = 0; r < R; ++r) {
        const __m512 x = _mm512_set1_ps(a[r]);
        acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
      }
    }
  }
  if (io.in) {
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      const float* in = io.in + r * io.ld_in;
      acc[r][0] = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, in), acc[r][0]);
      acc[r][1] = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, in + 16), acc[r][1]);
    }
  }
  if (io.bias) {
    const __m512 bias0 = _mm512_maskz_loadu_ps(m0, io.bias);
    const __m512 bias1 = _mm512_maskz_loadu_ps(m1, io.bias + 16);
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm512_add_ps(acc[r][0], bias0);
      acc[r][1] = _mm512_add_ps(acc[r][1], bias1);
    }
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) store_row(io, r, acc[r][0], acc[r][1], m0, m1);
}

template <bool kPairs, class Packed>
void tile_rows(int rows, int64_t steps, const Packed* a, const Packed* b,
               const TileIo& io) noexcept {
  switch (rows) {
    case 14:
      return tile<14, kPairs>(steps, a, b, io);
    case 13:
      return tile<13, kPairs>(steps, a, b, io);
    case 12:
      return tile<12, kPairs>(steps, a, b, io);
    case 11:
      return tile<11, kPairs>(steps, a, b, io);
    case 10:
      return tile<10, kPairs>(steps, a, b, io);
    case 9:
      return tile<9, kPairs>(steps, a, b, io);
    case 8:
      return tile<8, kPairs>(steps, a, b, io);
    case 7:
      return tile<7, kPairs>(steps, a, b, io);
    case 6:
      return tile<6, kPairs>(steps, a, b, io);
    case 5:
      return tile<5, kPairs>(steps, a, b, io);
    case 4:
      return tile<4, kPairs>(steps, a, b, io);
    case 3:
      return tile<3, kPairs>(steps, a, b, io);
    case 2:
      return tile<2, kPairs>(steps, a, b, io);
    default:
      return tile<1, kPairs>(steps, a, b, io);
  }
}

// ---- the two kernels -------------------------------------------------------------------------

/// f32 arithmetic; `kQuantize` rounds f32 operands to bf16 first (bf16 products without
/// vdpbf16ps).
template <bool kQuantize>
struct F32Traits {
  using Packed = float;
  static constexpr int64_t kRows = avx512_gemm::kRows, kColumns = avx512_gemm::kColumns;
  // A panel of op(b) (kDepth x kColumns, 32 KiB) stays in L1 while the tiles of a block of
  // op(a) (kRowBlock x kDepth, 112 KiB) stream past it from L2; op(b)'s block (kDepth x
  // kColumnBlock, 512 KiB) is read from L2 and L3 (Zen 5: 48 KiB L1, 1 MiB L2 a core).
  static constexpr int64_t kDepthStep = 1, kDepth = gemm_detail::kSumDepth;
  static constexpr int64_t kRowBlock = kRows * 8;
  static constexpr int64_t kColumnBlock = 512;
  static void pack_a(const Gemm& g, int64_t i0, int64_t rows, int64_t p0, int64_t depth,
                     float* dst) noexcept {
    pack_f32<kRows, kQuantize>(lines_of_a(g), i0, rows, p0, depth, dst);
  }
  static void pack_b(const Gemm& g, int64_t j0, int64_t cols, int64_t p0, int64_t depth,
                     float* dst) noexcept {
    pack_f32<kColumns, kQuantize>(lines_of_b(g), j0, cols, p0, depth, dst);
  }
  static void tile(int rows, int64_t steps, const float* a, const float* b,
                   const TileIo& io) noexcept {
    tile_rows<false>(rows, steps, a, b, io);
  }
};

struct PairTraits {
  using Packed = uint32_t;
  static constexpr int64_t kRows = avx512_gemm::kRows, kColumns = avx512_gemm::kColumns;
  // As F32Traits's, with two bf16 to a packed element.
  static constexpr int64_t kDepthStep = 2, kDepth = 2 * gemm_detail::kSumDepth;
  static constexpr int64_t kRowBlock = kRows * 8;
  static constexpr int64_t kColumnBlock = 512;
  static void pack_a(const Gemm& g, int64_t i0, int64_t rows, int64_t p0, int64_t depth,
                     uint32_t* dst) noexcept {
    pack_pairs<kRows>(lines_of_a(g), i0, rows, p0, depth, dst);
  }
  static void pack_b(const Gemm& g, int64_t j0, int64_t cols, int64_t p0, int64_t depth,
                     uint32_t* dst) noexcept {
    pack_pairs<kColumns>(lines_of_b(g), j0, cols, p0, depth, dst);
  }
  static void tile(int rows, int64_t steps, const uint32_t* a, const uint32_t* b,
                   const TileIo& io) noexcept {
    tile_rows<true>(rows, steps, a, b, io);
  }
};

// ---- direct products -------------------------------------------------------------------------
// Products read where their operands lie (gemm.h's DirectProduct, bf16_pairs.h's PairProduct):
// of f32 values (one FMA per element and step) or of bf16 pairs in 32-bit words (one vdpbf16ps).

/// A direct product of Word (float, or uint32_t for bf16 pairs): c[i, 0:n] (+)= sum over
/// p < depth of a(i, p) * b[p, 0:n], a(i, p) at a[i * a_row + p * a_col].
template <class Word>
struct Direct {
  int64_t m, n, depth;
  const Word* a;
  int64_t a_row, a_col;
  const Word* b;
  int64_t ldb;
  float* c;
  int64_t ldc;
  bool accumulate;
};

ALWAYS_INLINE __m512 load_row(__mmask16 mask, const float* at) noexcept {
  return _mm512_maskz_loadu_ps(mask, at);
}
ALWAYS_INLINE __m512bh load_row(__mmask16 mask, const uint32_t* at) noexcept {
  return (__m512bh)_mm512_maskz_loadu_epi32(mask, at);
}
ALWAYS_INLINE __m512 broadcast(const float* at) noexcept { return _mm512_set1_ps(*at); }
ALWAYS_INLINE __m512bh broadcast(const uint32_t* at) noexcept {
  uint32_t word;  // a bf16 row's word need not be 4-byte aligned
  std::memcpy(&word, at, sizeof word);
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(word));
}
ALWAYS_INLINE __m512 multiply_add(__m512 x, __m512 b, __m512 acc) noexcept {
  return _mm512_fmadd_ps(x, b, acc);
}
ALWAYS_INLINE __m512 multiply_add(__m512bh x, __m512bh b, __m512 acc) noexcept {
  return _mm512_dpbf16_ps(acc, x, b);
}

/// A tile of R rows x kVectors * 16 columns of a direct product, columns from col; the last
/// vector takes the columns `last` masks (the others are whole).
template <int R, int kVectors, class Word>
void direct_tile(const Direct<Word>& q, int64_t i0, int64_t col, __mmask16 last) noexcept {
  auto mask = [&](int v) { return v == kVectors - 1 ? last : __mmask16{0xffff}; };
  __m512 acc[R][kVectors];
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      acc[r][v] = q.accumulate
                      ? _mm512_maskz_loadu_ps(mask(v), q.c + (i0 + r) * q.ldc + col + 16 * v)
                      : _mm512_setzero_ps();
    }
  }
  const Word* a_at = q.a + i0 * q.a_row;
  const Word* b_at = q.b + col;
  for (int64_t p = 0; p < q.depth; ++p, a_at += q.a_col, b_at += q.ldb) {
    decltype(load_row(0, b_at)) brow[kVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) brow[v] = load_row(mask(v), b_at + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < R; ++r) {
      const auto x = broadcast(a_at + r * q.a_row);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v) acc[r][v] = multiply_add(x, brow[v], acc[r][v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v) {
      _mm512_mask_storeu_ps(q.c + (i0 + r) * q.ldc + col + 16 * v, mask(v), acc[r][v]);
    }
  }
}

/// Every row of columns [col, col + 16 * kVectors) (the last vector masked by `last`), in
/// tiles of kRows rows and one of the rows left over.
template <int kRows, int kVectors, class Word>
void direct_columns(const Direct<Word>& q, int64_t col, __mmask16 last) noexcept {
  int64_t i0 = 0;
  for (; i0 + kRows <= q.m; i0 += kRows) direct_tile<kRows, kVectors>(q, i0, col, last);
  const int64_t rest = q.m - i0;
  if (rest == 0) return;
  [&]<int... kR>(std::integer_sequence<int, kR...>) {
    ((rest == kR + 1 ? direct_tile<kR + 1, kVectors>(q, i0, col, last) : void()), ...);
  }
  (std::make_integer_sequence<int, kRows - 1>{});
}

// 64 columns at a time in tiles of 6 rows (24 accumulators; per step 4 loads of b and 6
// broadcasts of a for 24 multiply-adds), then 32 at a time in tiles of 12, then the rest masked.
template <class Word>
void direct_product(const Direct<Word>& q) {
  int64_t j0 = 0;
  for (; j0 + 64 <= q.n; j0 += 64) direct_columns<6, 4>(q, j0, 0xffff);
  for (; j0 + 32 <= q.n; j0 += 32) direct_columns<12, 2>(q, j0, 0xffff);
  if (j0 + 16 < q.n) {
    direct_columns<12, 2>(q, j0, first_lanes(q.n - j0 - 16));
  } else if (j0 < q.n) {
    direct_columns<12, 1>(q, j0, first_lanes(q.n - j0));
  }
}

}  // namespace
}  // namespace avx512_gemm

void avx512_direct_gemm(const DirectProduct& q) {
  avx512_gemm::direct_product<float>(
      {q.m, q.n, q.depth, q.a, q.a_row, q.a_col, q.b, q.ldb, q.c, q.ldc, q.accumulate});
}

void avx512_pair_gemm(const PairProduct& q) {
  avx512_gemm::direct_product<uint32_t>(
      {q.m, q.n, q.pairs, q.a, q.lda, 1, q.b, q.ldb, q.c, q.ldc, q.accumulate});
}

GemmBlockKernel avx512_gemm_kernel(GemmPrecision precision, bool bf16_dot) {
  using namespace avx512_gemm;
  GemmBlockKernel kernel{kRows, kColumns, nullptr};
  if (precision == GemmPrecision::kF32) {
    kernel.run = gemm_detail::run_block<F32Traits<false>>;
  } else if (bf16_dot) {
    kernel.run = gemm_detail::run_block<PairTraits>;
  } else {
    kernel.run = gemm_detail::run_block<F32Traits<true>>;
  }
  return kernel;
}

}  // namespace axle::cpu
#undef ALWAYS_INLINE
