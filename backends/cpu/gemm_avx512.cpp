// backends/cpu: the AVX-512 product kernels, compiled with -mavx512f/bw/vl/dq/bf16 apart from
// the rest of the library and called only when cpuid reports those (isa.h). Register tiles of
// 14 rows x 32 columns (28 accumulators): per step of k, two vector loads of op(b), 14 broadcasts
// of op(a) and 28 FMAs (or vdpbf16ps, a pair of bf16 products each). Operands are packed into
// panels first, converting on the way: bf16 widened to f32 for the f32 kernel, f32 rounded to
// bf16 for the bf16 one (gemm_avx512_packing.h).
//
// Nothing here is inline outside this file's own namespace (see gemm_kernels.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "axle/backends/cpu/avx512_lanes.h"
#include "axle/backends/cpu/bf16_pairs.h"
#include "axle/backends/cpu/gemm_avx512_packing.h"
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
using packing::first_halves;
using packing::Lines;
using packing::lines_of_a;
using packing::lines_of_b;
using packing::load_bf16_bits;
using packing::load_f32;
using packing::pack_f32;
using packing::pack_pairs;
using packing::transpose16;
using packing::widen_bits;

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
    if (io.residual) {
      const float* residual = io.residual + r * io.ld_out;
      lo = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, residual), lo);
      hi = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, residual + 16), hi);
    }
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
  if (io.residual) {  // read at the store: on its way while the sums run
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      _mm_prefetch(reinterpret_cast<const char*>(io.residual + r * io.ld_out), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(io.residual + r * io.ld_out + 16), _MM_HINT_T0);
    }
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
  static constexpr int64_t kRowBlock = kRows * 8, kRowsAcross = kRows * 36;
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
  static constexpr int64_t kRowBlock = kRows * 8, kRowsAcross = kRows * 36;
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
  avx512_gemm::direct_product<uint32_t>({q.m, q.n, q.pairs, q.a, q.a_transposed ? 1 : q.lda,
                                         q.a_transposed ? q.lda : 1, q.b, q.ldb, q.c, q.ldc,
                                         q.accumulate});
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
