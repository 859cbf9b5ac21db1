// backends/cpu: the AVX2 product kernels (the build's baseline instruction set). Register tiles
// of 6 rows x 16 columns (12 accumulators): per step of k, two vector loads of op(b), 6
// broadcasts of op(a) and 12 FMAs. bf16 operands are widened to f32 while packed (and f32 ones
// rounded to bf16 first for a bf16 product), so every precision runs the f32 tile.
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>

#include "axle/backends/cpu/gemm_kernels.h"

namespace axle::cpu {
namespace avx2_gemm {
namespace {

using gemm_detail::TileIo;

constexpr int64_t kRows = 6, kColumns = 16;

float bf16_to_f32(uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}
uint16_t f32_to_bf16(float f) noexcept {  // as narrow() in element.h
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t nearest_even = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>(f != f ? quiet_nan : nearest_even);
}

// An operand as lines along k (see gemm_avx512.cpp's Lines).
struct Lines {
  const void* data;
  int64_t ld;
  bool k_contiguous;
  bool bf16;
  bool quantize;  // round f32 values to bf16
  [[nodiscard]] float get(int64_t line, int64_t p) const noexcept {
    const int64_t index = k_contiguous ? line * ld + p : p * ld + line;
    if (bf16) return bf16_to_f32(static_cast<const uint16_t*>(data)[index]);
    const float x = static_cast<const float*>(data)[index];
    return quantize ? bf16_to_f32(f32_to_bf16(x)) : x;
  }
};

/// Lines [line0, line0 + lines) x k [p0, p0 + depth) into panels of kWidth lines (panel t at
/// dst + t * kWidth * depth, element (p, i) at p * kWidth + i); lines past the end are zero.
template <int64_t kWidth>
void pack(const Lines& src, int64_t line0, int64_t lines, int64_t p0, int64_t depth,
          float* dst) noexcept {
  for (int64_t t = 0; t * kWidth < lines; ++t) {
    float* panel = dst + t * kWidth * depth;
    const int64_t valid = gemm_detail::min_of(kWidth, lines - t * kWidth);
    const int64_t first = line0 + t * kWidth;
    if (!src.k_contiguous && !src.bf16 && !src.quantize && valid == kWidth) {
      const float* at = static_cast<const float*>(src.data) + p0 * src.ld + first;
      for (int64_t p = 0; p < depth; ++p, at += src.ld) {
        for (int64_t i = 0; i < kWidth; ++i) panel[p * kWidth + i] = at[i];
      }
      continue;
    }
    if (src.k_contiguous) {
      for (int64_t i = 0; i < valid; ++i) {
        for (int64_t p = 0; p < depth; ++p) panel[p * kWidth + i] = src.get(first + i, p0 + p);
      }
    } else {
      for (int64_t p = 0; p < depth; ++p) {
        for (int64_t i = 0; i < valid; ++i) panel[p * kWidth + i] = src.get(first + i, p0 + p);
      }
    }
    for (int64_t p = 0; p < depth; ++p) {
      for (int64_t i = valid; i < kWidth; ++i) panel[p * kWidth + i] = 0.0f;
    }
  }
}

__m256i lane_mask(int64_t n) noexcept {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n < 0 ? 0 : n)), index);
}

/// bf16 bits of 8 lanes rounded as f32_to_bf16, in their low halves.
__m256i round_to_bf16(__m256 x) noexcept {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i nearest =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q));
  return _mm256_blendv_epi8(nearest, quiet, nan);
}

void store8(const TileIo& io, int r, int v, __m256 x, int64_t n) noexcept {
  if (n <= 0) return;
  if (io.out_bf16) {
    auto* out = static_cast<uint16_t*>(io.out) + r * io.ld_out + 8 * v;
    alignas(32) uint32_t bits[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(bits), round_to_bf16(x));
    for (int64_t i = 0; i < n && i < 8; ++i) out[i] = static_cast<uint16_t>(bits[i]);
    return;
  }
  if (io.round_bf16) x = _mm256_castsi256_ps(_mm256_slli_epi32(round_to_bf16(x), 16));
  if (io.residual) {
    const float* residual = io.residual + r * io.ld_out + 8 * v;
    x = _mm256_add_ps(
        n >= 8 ? _mm256_loadu_ps(residual) : _mm256_maskload_ps(residual, lane_mask(n)), x);
  }
  float* out = static_cast<float*>(io.out) + r * io.ld_out + 8 * v;
  if (n >= 8) {
    _mm256_storeu_ps(out, x);
  } else {
    _mm256_maskstore_ps(out, lane_mask(n), x);
  }
}

template <int R>
void tile(int64_t steps, const float* a, const float* b, const TileIo& io) noexcept {
  const int64_t n0 = io.cols, n1 = io.cols - 8;
  const __m256i m0 = lane_mask(n0), m1 = lane_mask(n1);
  __m256 acc[R][2];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    acc[r][0] = _mm256_setzero_ps();
    acc[r][1] = _mm256_setzero_ps();
  }
  for (int64_t s = 0; s < steps; ++s, a += kRows, b += kColumns) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(a + r);
      acc[r][0] = _mm256_fmadd_ps(x, b0, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(x, b1, acc[r][1]);
    }
  }
  if (io.in) {
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const float* in = io.in + r * io.ld_in;
      acc[r][0] =
          _mm256_add_ps(n0 >= 8 ? _mm256_loadu_ps(in) : _mm256_maskload_ps(in, m0), acc[r][0]);
      acc[r][1] = _mm256_add_ps(n1 >= 8 ? _mm256_loadu_ps(in + 8) : _mm256_maskload_ps(in + 8, m1),
                                acc[r][1]);
    }
  }
  if (io.bias) {
    const __m256 bias0 = n0 >= 8 ? _mm256_loadu_ps(io.bias) : _mm256_maskload_ps(io.bias, m0);
    const __m256 bias1 =
        n1 >= 8 ? _mm256_loadu_ps(io.bias + 8) : _mm256_maskload_ps(io.bias + 8, m1);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      acc[r][0] = _mm256_add_ps(acc[r][0], bias0);
      acc[r][1] = _mm256_add_ps(acc[r][1], bias1);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    store8(io, r, 0, acc[r][0], n0);
    store8(io, r, 1, acc[r][1], n1);
  }
}

template <bool kQuantize>
struct Traits {
  using Packed = float;
  static constexpr int64_t kRows = avx2_gemm::kRows, kColumns = avx2_gemm::kColumns;
  static constexpr int64_t kDepthStep = 1, kDepth = gemm_detail::kSumDepth;
  static constexpr int64_t kRowBlock = kRows * 16, kRowsAcross = kRowBlock;
  static constexpr int64_t kColumnBlock = 1024;
  static void pack_a(const Gemm& g, int64_t i0, int64_t rows, int64_t p0, int64_t depth,
                     float* dst) noexcept {
    pack<kRows>({g.a.data, g.a.ld, !g.a.transposed, g.a.bf16, kQuantize}, i0, rows, p0, depth, dst);
  }
  static void pack_b(const Gemm& g, int64_t j0, int64_t cols, int64_t p0, int64_t depth,
                     float* dst) noexcept {
    pack<kColumns>({g.b.data, g.b.ld, g.b.transposed, g.b.bf16, kQuantize}, j0, cols, p0, depth,
                   dst);
  }
  static void tile(int rows, int64_t steps, const float* a, const float* b,
                   const TileIo& io) noexcept {
    switch (rows) {
      case 6:
        return avx2_gemm::tile<6>(steps, a, b, io);
      case 5:
        return avx2_gemm::tile<5>(steps, a, b, io);
      case 4:
        return avx2_gemm::tile<4>(steps, a, b, io);
      case 3:
        return avx2_gemm::tile<3>(steps, a, b, io);
      case 2:
        return avx2_gemm::tile<2>(steps, a, b, io);
      default:
        return avx2_gemm::tile<1>(steps, a, b, io);
    }
  }
};

/// A tile of kRows x 8 * kVectors of a direct product (gemm.h's DirectProduct), columns from col.
template <int kRows, int kVectors>
void direct_tile(const DirectProduct& q, int64_t i0, int64_t col) noexcept {
  __m256 acc[kRows][kVectors];
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) {
      acc[r][v] = q.accumulate ? _mm256_loadu_ps(q.c + (i0 + r) * q.ldc + col + 8 * v)
                               : _mm256_setzero_ps();
    }
  }
  const float* a_at = q.a + i0 * q.a_row;
  const float* b_at = q.b + col;
  for (int64_t p = 0; p < q.depth; ++p, a_at += q.a_col, b_at += q.ldb) {
    __m256 brow[kVectors];
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) brow[v] = _mm256_loadu_ps(b_at + 8 * v);
#pragma GCC unroll 4
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_broadcast_ss(a_at + r * q.a_row);
#pragma GCC unroll 2
      for (int v = 0; v < kVectors; ++v) acc[r][v] = _mm256_fmadd_ps(x, brow[v], acc[r][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < kRows; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < kVectors; ++v) {
      _mm256_storeu_ps(q.c + (i0 + r) * q.ldc + col + 8 * v, acc[r][v]);
    }
  }
}

template <int kVectors>
void direct_columns(const DirectProduct& q, int64_t col) noexcept {
  int64_t i0 = 0;
  for (; i0 + 4 <= q.m; i0 += 4) direct_tile<4, kVectors>(q, i0, col);
  for (; i0 < q.m; ++i0) direct_tile<1, kVectors>(q, i0, col);
}

}  // namespace
}  // namespace avx2_gemm

void avx2_direct_gemm(const DirectProduct& q) {
  using namespace avx2_gemm;
  // Tiles of 4 rows x 16 columns (8 registers), then 4 x 8, then single rows; the last columns
  // as scalar chains (the same fused multiply-adds in the same order).
  int64_t j0 = 0;
  for (; j0 + 16 <= q.n; j0 += 16) direct_columns<2>(q, j0);
  for (; j0 + 8 <= q.n; j0 += 8) direct_columns<1>(q, j0);
  for (int64_t i = 0; i < q.m; ++i) {
    for (int64_t j = j0; j < q.n; ++j) {
      float sum = q.accumulate ? q.c[i * q.ldc + j] : 0.0f;
      for (int64_t p = 0; p < q.depth; ++p) {
        sum = std::fma(q.a[i * q.a_row + p * q.a_col], q.b[p * q.ldb + j], sum);
      }
      q.c[i * q.ldc + j] = sum;
    }
  }
}

GemmBlockKernel avx2_gemm_kernel(GemmPrecision precision) {
  using namespace avx2_gemm;
  if (precision == GemmPrecision::kF32)
    return {kRows, kColumns, gemm_detail::run_block<Traits<false>>};
  return {kRows, kColumns, gemm_detail::run_block<Traits<true>>};
}

}  // namespace axle::cpu
#endif  // __AVX2__ && __FMA__
