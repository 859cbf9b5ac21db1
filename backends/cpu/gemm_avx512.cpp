// backends/cpu: the AVX-512 product kernels, compiled with -mavx512f/bw/vl/dq/bf16 apart from
// the rest of the library and called only when cpuid reports those (isa.h). Register tiles of
// 14 rows x 32 columns (28 accumulators): per step of k, two vector loads of op(b), 14 broadcasts
// of op(a) and 28 FMAs (or vdpbf16ps, a pair of bf16 products each). Operands are packed into
// panels first, converting on the way: bf16 widened to f32 for the f32 kernel, f32 rounded to
// bf16 for the bf16 one (gemm_avx512_packing.h); a shallow product's op(b) is read in place.
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
using packing::RowPairs;
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

/// Adds to a tile's sums what its TileIo asks (the output's or the stage's values, the bias) and
/// stores the first R rows: the end of every register tile, packed (tile) or shallow.
template <int R, bool kPairs>
ALWAYS_INLINE void finish(__m512 (&acc)[R][2], const TileIo& io) noexcept {
  const __mmask16 m0 = first_lanes(io.cols), m1 = first_lanes(io.cols - 16);
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
  // A bf16 output on AVX512_BF16: vcvtne2ps2bf16 rounds to nearest even as narrow() does, but
  // reads denormal values as zero. vdpbf16ps's sums are never denormal (it flushes them); a bias
  // or an earlier depth block's sum added can make one, and a tile holding one is stored again,
  // rounded in software.
  if constexpr (kPairs) {
    if (io.out_bf16) {
      constexpr int kDenormal = 0x20;  // vfpclassps's category
      auto* out = static_cast<uint16_t*>(io.out);
      const int64_t ld = io.ld_out;
      const __mmask32 columns = first_halves(io.cols);
      const bool added = io.in || io.bias;
      __mmask16 denormal = 0;
#pragma GCC unroll 14
      for (int r = 0; r < R; ++r) {
        if (added) {
          denormal |= _mm512_fpclass_ps_mask(acc[r][0], kDenormal) |
                      _mm512_fpclass_ps_mask(acc[r][1], kDenormal);
        }
        _mm512_mask_storeu_epi16(out + r * ld, columns,
                                 (__m512i)_mm512_cvtne2ps_pbh(acc[r][1], acc[r][0]));
      }
      if (denormal == 0) [[likely]]
        return;
    }
  }
  // The common f32 stores without a branch a row.
  if (!io.out_bf16 && !io.round_bf16 && !io.residual) {
    float* out = static_cast<float*>(io.out);
    const int64_t ld = io.ld_out;
#pragma GCC unroll 14
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_ps(out + r * ld, m0, acc[r][0]);
      _mm512_mask_storeu_ps(out + r * ld + 16, m1, acc[r][1]);
    }
    return;
  }
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) store_row(io, r, acc[r][0], acc[r][1], m0, m1);
}

/// Starts reading a tile's residual rows, added at the store, while its sums run.
template <int R>
ALWAYS_INLINE void prefetch_residual(const TileIo& io) noexcept {
  if (!io.residual) return;
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) {
    _mm_prefetch(reinterpret_cast<const char*>(io.residual + r * io.ld_out), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(io.residual + r * io.ld_out + 16), _MM_HINT_T0);
  }
}

/// The tile's first R rows over `steps` packed steps: one FMA (f32) or vdpbf16ps (bf16 pairs)
/// per row, vector and step, in step order. op(b)'s steps lie b_step apart: a packed panel's,
/// or (kInPlace, f32) the rows of a shallow product where they lie, read up to io.cols only.
template <int R, bool kPairs, bool kInPlace = false, class Packed>
void tile(int64_t steps, const Packed* a, const Packed* b, int64_t b_step,
          const TileIo& io) noexcept {
  const __mmask16 m0 = first_lanes(io.cols), m1 = first_lanes(io.cols - 16);
  __m512 acc[R][2];
#pragma GCC unroll 14
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  prefetch_residual<R>(io);
  for (int64_t s = 0; s < steps; ++s, a += kRows, b += b_step) {
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
      const __m512 b0 = kInPlace ? _mm512_maskz_loadu_ps(m0, b) : _mm512_load_ps(b);
      const __m512 b1 = kInPlace ? _mm512_maskz_loadu_ps(m1, b + 16) : _mm512_load_ps(b + 16);
#pragma GCC unroll 14
      for (int r = 0; r < R; ++r) {
        const __m512 x = _mm512_set1_ps(a[r]);
        acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
      }
    }
  }
  finish<R, kPairs>(acc, io);
}

template <bool kPairs, class Packed>
void tile_rows(int rows, int64_t steps, const Packed* a, const Packed* b,
               const TileIo& io) noexcept {
  switch (rows) {
    case 14:
      return tile<14, kPairs>(steps, a, b, kColumns, io);
    case 13:
      return tile<13, kPairs>(steps, a, b, kColumns, io);
    case 12:
      return tile<12, kPairs>(steps, a, b, kColumns, io);
    case 11:
      return tile<11, kPairs>(steps, a, b, kColumns, io);
    case 10:
      return tile<10, kPairs>(steps, a, b, kColumns, io);
    case 9:
      return tile<9, kPairs>(steps, a, b, kColumns, io);
    case 8:
      return tile<8, kPairs>(steps, a, b, kColumns, io);
    case 7:
      return tile<7, kPairs>(steps, a, b, kColumns, io);
    case 6:
      return tile<6, kPairs>(steps, a, b, kColumns, io);
    case 5:
      return tile<5, kPairs>(steps, a, b, kColumns, io);
    case 4:
      return tile<4, kPairs>(steps, a, b, kColumns, io);
    case 3:
      return tile<3, kPairs>(steps, a, b, kColumns, io);
    case 2:
      return tile<2, kPairs>(steps, a, b, kColumns, io);
    default:
      return tile<1, kPairs>(steps, a, b, kColumns, io);
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

// ---- shallow bf16 products -------------------------------------------------------------------
// A bf16 product over a few pairs along k (a first convolution's taps: k = 9 over one channel)
// spends as long packing op(b) as multiplying it. When op(b)'s rows are bf16 where they lie,
// each block of 32 columns is instead read and paired in registers, once for all the rows, and
// every tile of rows multiplies those registers. The sums are the packed kernel's (one chain of
// vdpbf16ps from 0 over the pairs in order, then finish), so the bits are too.

constexpr int64_t kShallowPairs = 8;

/// Whether `g` is shallow: at most 2 kShallowPairs along k, op(b)'s rows in place and in the
/// product's precision (f32 rows for an f32 product, bf16 ones for a bf16 product).
bool is_shallow(const Gemm& g) noexcept {
  return g.k <= 2 * kShallowPairs && !g.b.transposed &&
         g.b.bf16 == (g.precision == GemmPrecision::kBf16);
}

/// `io` for the tile `rows` rows further down.
TileIo io_rows_on(TileIo io, int64_t rows) noexcept {
  if (io.in) io.in += rows * io.ld_in;
  io.out = static_cast<char*>(io.out) + rows * io.ld_out * (io.out_bf16 ? 2 : 4);
  if (io.residual) io.residual += rows * io.ld_out;
  return io;
}

/// R rows of a shallow product: a holds the rows' packed pairs (a panel of kRows rows from its
/// first row), b the column block's S pairs in registers.
template <int R, int S, bool kPlain>
ALWAYS_INLINE void shallow_tile(const uint32_t* a, const __m512bh (&b)[S][2],
                                const TileIo& io) noexcept {
  __m512 acc[R][2];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  if constexpr (!kPlain) prefetch_residual<R>(io);
#pragma GCC unroll 8
  for (int s = 0; s < S; ++s) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512bh x = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[s * kRows + r]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], x, b[s][0]);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], x, b[s][1]);
    }
  }
  if constexpr (kPlain) {
    auto* out = static_cast<uint16_t*>(io.out);
    const __mmask32 columns = first_halves(io.cols);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      _mm512_mask_storeu_epi16(out + r * io.ld_out, columns,
                               (__m512i)_mm512_cvtne2ps_pbh(acc[r][1], acc[r][0]));
    }
  } else {
    finish<R, true>(acc, io);
  }
}

/// Rows [r0, r1) x columns [c0, c1) of a shallow product of S pairs, rows packed in a_pack.
template <int S, bool kPlain>
void shallow_block(const Gemm& g, const uint32_t* a_pack, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1) noexcept {
  const RowPairs pairs;
  const auto* b_rows = static_cast<const uint16_t*>(g.b.data);
  const gemm_detail::TileSums sums{g, nullptr, 0, 0, 0, true, true};
  constexpr int64_t kHalf = kRows / 2;  // two tiles a panel: 14 accumulators and 2 S pairs
  for (int64_t j = c0; j < c1; j += kColumns) {
    const int cols = static_cast<int>(min_of(kColumns, c1 - j));
    const __mmask32 valid = first_halves(cols);
    __m512bh b[S][2];
#pragma GCC unroll 8
    for (int s = 0; s < S; ++s) {
      const uint16_t* at = b_rows + 2 * s * g.b.ld + j;
      const __m512i first = _mm512_maskz_loadu_epi16(valid, at);
      const __m512i second =
          2 * s + 1 < g.k ? _mm512_maskz_loadu_epi16(valid, at + g.b.ld) : _mm512_setzero_si512();
      b[s][0] = (__m512bh)pairs.first_half(first, second);
      b[s][1] = (__m512bh)pairs.second_half(first, second);
    }
    TileIo io = gemm_detail::tile_io(g, sums, r0, j, cols);
    int64_t half = 0;  // tiles of kHalf rows so far: the a panel's half (half & 1) of its rows
    for (; r0 + (half + 1) * kHalf <= r1; ++half) {
      shallow_tile<kHalf, S, kPlain>(a_pack + (half >> 1) * kRows * S + (half & 1) * kHalf, b, io);
      io = io_rows_on(io, kHalf);
    }
    const int64_t rest = r1 - r0 - half * kHalf;
    const uint32_t* a = a_pack + (half >> 1) * kRows * S + (half & 1) * kHalf;
    [&]<int... kR>(std::integer_sequence<int, kR...>) {
      ((rest == kR + 1 ? shallow_tile<kR + 1, S, kPlain>(a, b, io) : void()), ...);
    }
    (std::make_integer_sequence<int, kHalf - 1>{});
    activations_block(g, r0, r1, j, j + cols);
  }
}

/// The f32 kernel: shallow products of f32 rows (is_shallow) read op(b) where it lies, the
/// others are packed. The sums are the packed kernel's: one chain of FMAs from 0 over k in order.
void run_f32(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (!is_shallow(g)) {
    return gemm_detail::run_block<F32Traits<false>>(g, r0, r1, c0, c1);
  }
  const int64_t rows = r1 - r0;
  auto* a_pack = static_cast<float*>(this_thread_object<gemm_detail::PackBuffers>().a.get(
      sizeof(float) * static_cast<std::size_t>((rows + kRows - 1) / kRows * kRows * g.k)));
  F32Traits<false>::pack_a(g, r0, rows, 0, g.k, a_pack);
  const auto* b_rows = static_cast<const float*>(g.b.data);
  const gemm_detail::TileSums sums{g, nullptr, 0, 0, 0, true, true};
  for (int64_t j = c0; j < c1; j += kColumns) {
    const int cols = static_cast<int>(min_of(kColumns, c1 - j));
    TileIo io = gemm_detail::tile_io(g, sums, r0, j, cols);
    const float* a = a_pack;
    int64_t i = r0;
    for (; i + kRows <= r1; i += kRows, a += kRows * g.k) {
      tile<kRows, false, true>(g.k, a, b_rows + j, g.b.ld, io);
      io = io_rows_on(io, kRows);
    }
    const int64_t rest = r1 - i;
    [&]<int... kR>(std::integer_sequence<int, kR...>) {
      ((rest == kR + 1 ? tile<kR + 1, false, true>(g.k, a, b_rows + j, g.b.ld, io) : void()), ...);
    }
    (std::make_integer_sequence<int, kRows - 1>{});
    activations_block(g, r0, r1, j, j + cols);
  }
}

/// The bf16 kernel: shallow products (is_shallow) as above, the others packed.
void run_pairs(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (!is_shallow(g)) {
    return gemm_detail::run_block<PairTraits>(g, r0, r1, c0, c1);
  }
  const int64_t steps = (g.k + 1) / 2, rows = r1 - r0;
  auto* a_pack = static_cast<uint32_t*>(this_thread_object<gemm_detail::PackBuffers>().a.get(
      sizeof(uint32_t) * static_cast<std::size_t>((rows + kRows - 1) / kRows * kRows * steps)));
  PairTraits::pack_a(g, r0, rows, 0, g.k, a_pack);
  // A bf16 output with nothing added to the sums: rounded and stored, no more.
  const bool plain = g.out_bf16 && !g.bias;
  [&]<int... kS>(std::integer_sequence<int, kS...>) {
    ((steps == kS + 1 ? (plain ? shallow_block<kS + 1, true>(g, a_pack, r0, r1, c0, c1)
                               : shallow_block<kS + 1, false>(g, a_pack, r0, r1, c0, c1))
                      : void()),
     ...);
  }
  (std::make_integer_sequence<int, kShallowPairs>{});
}

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
    kernel.run = run_f32;
  } else if (bf16_dot) {
    kernel.run = run_pairs;
  } else {
    kernel.run = gemm_detail::run_block<F32Traits<true>>;
  }
  return kernel;
}

}  // namespace axle::cpu
#undef ALWAYS_INLINE
