// backends/cpu: products of bf16 pairs on vdpbf16ps (AVX512_BF16), for attention's blocks, and
// the layouts they read. bf16 values go two to a 32-bit word along the sum: element 2s in the low
// half, 2s + 1 in the high half, as vdpbf16ps takes them; a row's contiguous bf16 values are
// such words already. Compiled with AVX-512 flags (the product in gemm_avx512.cpp, the layouts
// in attention_avx512.cpp); call only where cpu_isa() is kAvx512Bf16.
#pragma once

#include <cstdint>

namespace axle::cpu {

/// c[i, 0:n] (+)= sum over s < pairs of the pair products a(i, s) . b(s, 0:n) for i < m, each
/// summed in f32 (vdpbf16ps, which reads denormal bf16 values as zero and flushes denormal
/// results), s in order; a(i, s) is the word a[i * lda + s] (a[s * lda + i] when
/// `a_transposed`), b(s, j) the word b[s * ldb + j]; c row-major with row stride ldc, from c's
/// values with `accumulate`.
struct PairProduct {
  int64_t m = 0, n = 0, pairs = 0;
  const uint32_t* a = nullptr;
  int64_t lda = 0;
  const uint32_t* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  bool a_transposed = false;
};

/// Computes `product` on the calling thread.
void avx512_pair_gemm(const PairProduct& product);

/// Rows 2s and 2s + 1 of f32 `src` (rows x cols, row stride lds) rounded to bf16 and paired
/// into word row s of `out` (row stride ldo) for s < (rows + 1) / 2; an odd last row pairs
/// with zeros.
void avx512_pair_rows(const float* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* out,
                      int64_t ldo);
/// As above, from bf16 bits.
void avx512_pair_rows(const uint16_t* src, int64_t rows, int64_t cols, int64_t lds, uint32_t* out,
                      int64_t ldo);
/// Rows of f32 `src` (rows x cols, row stride lds) rounded to bf16 into rows of `out` (row
/// stride ldo, in bf16 values); an odd cols gets a zero after its last value, so that every row
/// is whole words.
void avx512_narrow_rows(const float* src, int64_t rows, int64_t cols, int64_t lds, uint16_t* out,
                        int64_t ldo);
/// out[r, c] = bf16(src[r, c] * factor) for r < rows, c < cols (row strides lds and ldo): the
/// product rounded once to f32, then to bf16 as element.h's narrow rounds it.
void avx512_narrow_scaled_rows(const float* src, int64_t rows, int64_t cols, int64_t lds,
                               float factor, uint16_t* out, int64_t ldo);
/// Per row i < rows of attention's backward: d[i] = the dot of bf16 `grad` row i (row stride
/// g_row) with f32 `forward` row i (row stride cols + 1), summed 16 columns to a lane and then
/// across the lanes; lse[i] = forward[i, cols] (the forward's logsumexp after its output row).
void avx512_row_terms(const float* forward, const uint16_t* grad, int64_t g_row, int64_t rows,
                      int64_t cols, float* d, float* lse);

}  // namespace axle::cpu
