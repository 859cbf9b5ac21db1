// backends/cpu: matrix products for the kernels that multiply (matmul, convolution), without
// Eigen or intrinsics in the header. f32 and bf16 products run on packed register-tiled kernels
// of the instruction set isa.h chose (gemm_avx2.cpp, gemm_avx512.cpp); f64 ones on Eigen. On
// AVX-512, a shallow product (k at most 16, op(b) stored [k, n] in the product's precision: a
// first convolution's taps) reads op(b) where it lies instead of packing it, with the same bits.
//
// Every output element is summed alike whatever the thread count or the instruction set: k is
// cut into blocks of 256, each block one chain of fused multiply-adds in order from 0, and the
// blocks' sums are added in order (to the output's value when accumulating), so a long sum's
// rounding error grows with k / 256 + 256 rather than with k, and f32 results are bit-identical
// across threads and instruction sets. bf16 products (operands rounded to bf16, products summed
// in f32) are bit-identical across threads for one instruction set; vdpbf16ps adds a pair of
// products per step, so the avx512_bf16 path and the f32 paths may differ in the last bits.
#pragma once

#include <cstdint>

#include "axle/backends/cpu/compute_pool.h"

namespace axle::cpu {

/// One operand of a product as it lies in memory: row-major with a row stride of `ld` elements,
/// f32 or bf16. A transposed operand is stored as the transpose of the matrix the product reads
/// (op(a) [m, k] stored [k, m]; op(b) [k, n] stored [n, k]).
struct GemmOperand {
  const void* data = nullptr;
  int64_t ld = 0;
  bool transposed = false;
  bool bf16 = false;
};

/// What a product's multiplications are computed in. kBf16 rounds each operand to bf16 (to
/// nearest even, as a cast does; bf16 operands already are) and sums the products in f32.
enum class GemmPrecision : uint8_t { kF32, kBf16 };

/// out[m, n] = op(a) · op(b), or out += op(a) · op(b) with `accumulate` (f32 outputs only).
/// The output is row-major with row stride ldc, f32 or bf16 (rounded once, at the end), and
/// aliases neither operand. With `bias` (n values, not with `accumulate`), out[i, j] = the sum +
/// bias[j], added after the whole sum: an f32 output has the bits of the product and a separate
/// add; a bf16 one is rounded once, after the add. With `round_bf16` (an f32 output, not with
/// `accumulate`), each output value is the bf16 output's, stored as f32. With `gelu_input` (x
/// in the output's dtype and layout, row stride ldc; not with `accumulate` or `round_bf16`),
/// each output value v becomes gelu's derivative at x times v, as kGeluBackward computes it from
/// the stored v: the product of a gradient and gelu's backward in one pass over the output. With
/// `residual` (f32 in the output's layout, row stride ldc; an f32 output written, not with
/// `gelu_input`), each output value v becomes residual + v, v as it would be stored (after the
/// bias and the rounding of `round_bf16`): a residual connection's add in the same pass. With
/// `relu_input` (x as `gelu_input`, not with it, `residual`, `accumulate` or `round_bf16`), each
/// output value v becomes v where x > 0 and +0 elsewhere, as where(x > 0, v, 0) gives it: a
/// gradient through relu's backward in the same pass. With `relu` (a bias at most of the above),
/// each output value v becomes relu(v), as kRelu gives it (v < 0 ? 0 : v, NaN and -0 kept): a
/// linear layer's activation in the same pass.
struct Gemm {
  int64_t m = 0, n = 0, k = 0;
  GemmOperand a, b;
  void* out = nullptr;
  int64_t ldc = 0;
  bool out_bf16 = false;
  bool accumulate = false;
  GemmPrecision precision = GemmPrecision::kF32;
  const float* bias = nullptr;
  bool round_bf16 = false;
  const void* gelu_input = nullptr;
  const float* residual = nullptr;
  const void* relu_input = nullptr;
  bool relu = false;
};

/// Rows [r0, r1) x columns [c0, c1) of `g`'s output, written, replaced by gelu_backward(out, x)
/// (Gemm::gelu_input): the kernels call it on each block of the output they finish.
void gelu_backward_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/// The same block of `g`'s output, written, kept where relu's input x > 0 and made +0 elsewhere
/// (Gemm::relu_input).
void relu_backward_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/// The same block of `g`'s output, written, made relu of itself (Gemm::relu).
void relu_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/// The same block of `g`'s output, written, given what `g` asks after its sums: gelu's backward,
/// relu's backward, relu (each block function above where `g` sets it).
void activations_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1);

/// Computes `product` with the kernels of cpu_isa(). With a pool, a large product is split into
/// blocks of output rows or columns over its threads, or (a short input gradient over a few
/// blocks of k) into its depth blocks; without, it runs on the calling thread. A product into a
/// few columns over many rows, run on one thread, runs as its transpose. The bits are the same
/// whichever way.
/// Throws std::invalid_argument for an accumulating bf16 output.
void gemm(const Gemm& product, ComputePool* pool);

/// A small f32 product read where its operands lie, without packing them: for blocks (attention's
/// 64 x 64 score blocks) too small for packing to pay. c[i, 0:n] (+)= sum over p < depth of
/// a(i, p) * b[p, 0:n] for i < m, with a(i, p) at a[i * a_row + p * a_col] (a transposed operand
/// is a stride swap) and b, c row-major with row strides ldb, ldc. Every element is one chain of
/// fused multiply-adds over p in order, from c's value with `accumulate` and from 0 without, on
/// every instruction set alike (so the bits do not depend on it).
struct DirectProduct {
  int64_t m = 0, n = 0, depth = 0;
  const float* a = nullptr;
  int64_t a_row = 0, a_col = 0;
  const float* b = nullptr;
  int64_t ldb = 0;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
};

/// Computes `product` on the calling thread with the kernels of cpu_isa().
void direct_gemm(const DirectProduct& product);

/// out[m, n] = op(a) * op(b) on row-major matrices with row strides (elements) lda, ldb, ldc;
/// op(a) is [m, k] (a is stored [k, m] when transposed), op(b) is [k, n] (stored [n, k] when
/// transposed). out aliases neither operand. With `accumulate`, out[m, n] += op(a) * op(b)
/// instead (a sum over k split into blocks, as a convolution's weight gradient is).
struct MatrixProduct {
  int64_t m, n, k;
  const void* a;
  int64_t lda;
  const void* b;
  int64_t ldb;
  void* out;
  int64_t ldc;
  bool accumulate = false;
  /// f32 products only: kBf16 multiplies the operands rounded to bf16 (bf16 data widened to
  /// f32 loses nothing to it) on the instruction set's bf16 kernels.
  GemmPrecision precision = GemmPrecision::kF32;
  /// f32 products only: n values added to each output row after the sum (Gemm::bias).
  const float* bias = nullptr;
  /// f32 products only: gelu's backward applied to the output (Gemm::gelu_input).
  const float* gelu_input = nullptr;
  /// f32 products only: relu's backward applied to the output (Gemm::relu_input).
  const float* relu_input = nullptr;
  /// f32 products only: relu applied to the output (Gemm::relu).
  bool relu = false;
};

/// Computes `product` of T (float, double, int32_t or int64_t): float through gemm(Gemm), the
/// others on Eigen's GEMM; with a pool, a large one is split into blocks of output rows or
/// columns over its threads.
template <class T>
void gemm(const MatrixProduct& product, bool transpose_a, bool transpose_b, ComputePool* pool);

/// The products along k that one chain of f32 FMAs sums from 0 before it is added to the output
/// (gemm_kernels.h): every f32 kernel's depth block, so their results agree to the bit.
inline constexpr int64_t kF32SumDepth = 256;

/// What gemm.cpp asks of one instruction set's product kernels (gemm_avx2.cpp, gemm_avx512.cpp,
/// which share the loops of gemm_kernels.h).
/// One instruction set's kernel for one precision: computes rows [r0, r1) x columns [c0, c1)
/// of a product, over all of k, on the calling thread. Blocks split on multiples of the
/// alignments keep whole register tiles (any split gives the same bits).
struct GemmBlockKernel {
  int64_t row_align = 1, column_align = 1;
  void (*run)(const Gemm& product, int64_t r0, int64_t r1, int64_t c0, int64_t c1) = nullptr;
};

/// The AVX2 kernels (6 x 16 register tiles; bf16 operands widened while packed).
GemmBlockKernel avx2_gemm_kernel(GemmPrecision precision);
/// The AVX-512 kernels (14 x 32 register tiles); with `bf16_dot`, bf16 products on vdpbf16ps.
/// Only in builds for x86-64 with AXLE_HAVE_AVX512_KERNELS.
GemmBlockKernel avx512_gemm_kernel(GemmPrecision precision, bool bf16_dot);

/// direct_gemm (gemm.h) on AVX2 and on AVX-512.
void avx2_direct_gemm(const DirectProduct& product);
void avx512_direct_gemm(const DirectProduct& product);

}  // namespace axle::cpu
