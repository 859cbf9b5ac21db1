// backends/cpu: matrix products (gemm.h): the instruction set's kernel chosen per call, a large
// product split over the device's threads, and Eigen's GEMM for f64 and integer products and
// for builds without x86 kernels.
#include "axle/backends/cpu/gemm.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/vector_math.h"
#include "axle/engine/this_thread.h"

namespace axle::cpu {
namespace {

// Products smaller than this many multiply-adds stay on one thread: a part costs a wake-up of a
// few microseconds and packs the operand that every part shares.
constexpr int64_t kParallelMultiplyAdds = int64_t{1} << 20;

// Sums at least this long split a product into one part per thread (see gemm below).
constexpr int64_t kLongSum = 1024;

GemmBlockKernel kernel_for(CpuIsa isa, GemmPrecision precision) {
  switch (isa) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
      return avx512_gemm_kernel(precision, true);
    case CpuIsa::kAvx512:
      return avx512_gemm_kernel(precision, false);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return avx2_gemm_kernel(precision);
#endif
    default:
      return {};
  }
}

// ---- Eigen ---------------------------------------------------------------------------------

template <class T>
using ConstStridedMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

template <class C, class Product>
void assign(C& c, const Product& product, bool accumulate) {
  if (accumulate) {
    c.noalias() += product;
  } else {
    c.noalias() = product;
  }
}

/// out[m, n] = op(a) * op(b) on Eigen. The four transpose cases are separate instantiations so
/// Eigen sees each operand's storage order at compile time and picks its packing without a copy.
template <class T>
void eigen_multiply(const MatrixProduct& q, bool transpose_a, bool transpose_b) {
  Eigen::Map<RowMatrix<T>, 0, Eigen::OuterStride<>> c(static_cast<T*>(q.out), q.m, q.n,
                                                      Eigen::OuterStride<>(q.ldc));
  if (q.k == 0) {
    if (!q.accumulate) c.setZero();  // an empty sum
    return;
  }
  const T* a = static_cast<const T*>(q.a);
  const T* b = static_cast<const T*>(q.b);
  const Eigen::OuterStride<> sa(q.lda), sb(q.ldb);
  if (!transpose_a) {
    ConstStridedMap<T> lhs(a, q.m, q.k, sa);
    if (!transpose_b) {
      assign(c, lhs * ConstStridedMap<T>(b, q.k, q.n, sb), q.accumulate);
    } else {
      assign(c, lhs * ConstStridedMap<T>(b, q.n, q.k, sb).transpose(), q.accumulate);
    }
  } else {
    auto lhs = ConstStridedMap<T>(a, q.k, q.m, sa).transpose();
    if (!transpose_b) {
      assign(c, lhs * ConstStridedMap<T>(b, q.k, q.n, sb), q.accumulate);
    } else {
      assign(c, lhs * ConstStridedMap<T>(b, q.n, q.k, sb).transpose(), q.accumulate);
    }
  }
}

/// One Eigen product on the pool's threads: the output split into blocks of whole rows or whole
/// columns, each an Eigen product on one thread. The larger side is split, since each part packs
/// all of the operand along the other side.
template <class T>
void eigen_multiply_parallel(const MatrixProduct& q, bool transpose_a, bool transpose_b,
                             ComputePool& pool) {
  if (pool.threads() == 1 || q.m * q.n * q.k < kParallelMultiplyAdds) {
    return eigen_multiply<T>(q, transpose_a, transpose_b);
  }
  // Eigen's register blocks are SIMD packets of output columns by 4 rows (it computes the
  // row-major product as its transposed column-major one); whole ones keep parts on its fast path.
  constexpr int64_t kColumnAlign = 8, kRowAlign = 4;
  if (q.m > q.n) {
    parallel_for(
        pool, q.m, kRowAlign,
        [&](int64_t r0, int64_t r1, int) {
          MatrixProduct part = q;
          part.m = r1 - r0;
          part.a = static_cast<const T*>(q.a) + (transpose_a ? r0 : r0 * q.lda);
          part.out = static_cast<T*>(q.out) + r0 * q.ldc;
          eigen_multiply<T>(part, transpose_a, transpose_b);
        },
        kRowAlign, 1);
  } else {
    parallel_for(
        pool, q.n, kColumnAlign,
        [&](int64_t c0, int64_t c1, int) {
          MatrixProduct part = q;
          part.n = c1 - c0;
          part.b = static_cast<const T*>(q.b) + (transpose_b ? c0 * q.ldb : c0);
          part.out = static_cast<T*>(q.out) + c0;
          eigen_multiply<T>(part, transpose_a, transpose_b);
        },
        kColumnAlign, 1);
  }
}

// out[i, :] = residual[i, :] + out[i, :] for rows [r0, r1) (Gemm::residual), after the kernels
// that do not add it as they store.
void add_residual(const Gemm& g, int64_t r0, int64_t r1) {
  if (!g.residual) return;
  float* out = static_cast<float*>(g.out);
  for (int64_t i = r0; i < r1; ++i) {
    for (int64_t j = 0; j < g.n; ++j)
      out[i * g.ldc + j] = g.residual[i * g.ldc + j] + out[i * g.ldc + j];
  }
}

/// A product without an instruction set's kernels: op(a) and op(b) made f32 (rounded to bf16
/// first for a bf16 product), multiplied on Eigen, the output rounded if bf16.
void generic_gemm(const Gemm& g, ComputePool* pool) {
  auto dense = [&](const GemmOperand& x, int64_t rows, int64_t cols) {
    // op(x) [rows, cols], row-major.
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t at = x.transposed ? j * x.ld + i : i * x.ld + j;
        float v = x.bf16 ? widen(static_cast<const Bf16*>(x.data)[at])
                         : static_cast<const float*>(x.data)[at];
        if (g.precision == GemmPrecision::kBf16) v = widen(narrow(v));
        out[static_cast<std::size_t>(i * cols + j)] = v;
      }
    }
    return out;
  };
  const std::vector<float> a = dense(g.a, g.m, g.k), b = dense(g.b, g.k, g.n);
  std::vector<float> product;
  float* out = static_cast<float*>(g.out);
  int64_t ldc = g.ldc;
  if (g.out_bf16) {
    product.resize(static_cast<std::size_t>(g.m * g.n));
    out = product.data();
    ldc = g.n;
  }
  const MatrixProduct q{g.m, g.n, g.k, a.data(), g.k, b.data(), g.n, out, ldc, g.accumulate};
  if (pool) {
    eigen_multiply_parallel<float>(q, false, false, *pool);
  } else {
    eigen_multiply<float>(q, false, false);
  }
  if (g.bias) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) out[i * ldc + j] += g.bias[j];
    }
  }
  if (g.out_bf16) {
    for (int64_t i = 0; i < g.m; ++i) {
      narrow_block(out + i * g.n, static_cast<Bf16*>(g.out) + i * g.ldc, g.n);
    }
  } else if (g.round_bf16) {
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) out[i * ldc + j] = widen(narrow(out[i * ldc + j]));
    }
  }
  add_residual(g, 0, g.m);
}

// out[i, :] = bias (or 0 without one) for each row: an empty sum plus the bias.
void fill_rows(const Gemm& g) {
  for (int64_t i = 0; i < g.m; ++i) {
    if (g.out_bf16) {
      auto* row = static_cast<Bf16*>(g.out) + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) row[j] = g.bias ? narrow(g.bias[j]) : Bf16{};
    } else {
      float* row = static_cast<float*>(g.out) + i * g.ldc;
      for (int64_t j = 0; j < g.n; ++j) {
        const float value = g.bias ? g.bias[j] : 0.0f;
        row[j] = g.round_bf16 ? widen(narrow(value)) : value;
      }
    }
  }
}

// Keeps each value of the output's block where `keep` holds for the same element of `x` (in the
// output's dtype and layout), writing +0 elsewhere: v's bits and a mask of ones or zeros, in
// groups of a known length, which GCC vectorises at -O2.
template <class KeepF32, class KeepBf16>
void keep_block(const Gemm& g, const void* x, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                KeepF32 keep_f32, KeepBf16 keep_bf16) {
  constexpr int64_t kGroup = 16;
  auto keep = [](auto* out, const auto* x_row, int64_t len, auto holds) {
    using Bits = std::remove_reference_t<decltype(*out)>;
    auto masked = [&](int64_t i) {
      return static_cast<Bits>(out[i] & static_cast<Bits>(-static_cast<Bits>(holds(x_row[i]))));
    };
    int64_t j = 0;
    for (; j + kGroup <= len; j += kGroup) {
      Bits group[kGroup];
      for (int64_t i = 0; i < kGroup; ++i) group[i] = masked(j + i);
      for (int64_t i = 0; i < kGroup; ++i) out[j + i] = group[i];
    }
    for (; j < len; ++j) out[j] = masked(j);
  };
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t offset = r * g.ldc + c0, len = c1 - c0;
    if (g.out_bf16) {
      keep(&(static_cast<Bf16*>(g.out) + offset)->bits,
           &(static_cast<const Bf16*>(x) + offset)->bits, len, keep_bf16);
    } else {
      keep(reinterpret_cast<uint32_t*>(static_cast<float*>(g.out) + offset),
           static_cast<const float*>(x) + offset, len, keep_f32);
    }
  }
}

// `x` from its element p0 along k on: op(a)'s columns (rows when stored transposed), op(b)'s
// rows (columns when stored transposed).
GemmOperand from_depth(GemmOperand x, int64_t p0, bool k_along_rows) {
  const int64_t offset = k_along_rows ? p0 * x.ld : p0;
  x.data = static_cast<const char*>(x.data) + offset * (x.bf16 ? 2 : 4);
  return x;
}

// Whether `g` is split into its depth blocks rather than into blocks of output columns (see
// gemm_by_depth): an input gradient dy · W (dy stored [m, k], W stored [k, n]) over two to
// `threads` blocks of k with a short batch (m at most k, the output at most 1M values), whose
// column split would have every thread read a part of each of W's rows.
bool splits_by_depth(const Gemm& g, int threads) {
  const int64_t blocks = (g.k + kF32SumDepth - 1) / kF32SumDepth;
  return g.precision == GemmPrecision::kF32 && !g.a.transposed && !g.b.transposed && g.m < g.n &&
         g.m <= g.k && blocks >= 2 && blocks <= threads && g.m * g.n <= (int64_t{1} << 20) &&
         !g.accumulate && !g.out_bf16 && !g.round_bf16 && !g.residual && !g.gelu_input;
}

// row[0, n) += sum[0, n), in groups GCC vectorises.
void add_row(float* row, const float* sum, int64_t n) {
  constexpr int64_t kGroup = 16;
  int64_t j = 0;
  for (; j + kGroup <= n; j += kGroup) {
    for (int64_t i = 0; i < kGroup; ++i) row[j + i] += sum[j + i];
  }
  for (; j < n; ++j) row[j] += sum[j];
}

// The calling thread's buffer for a product computed in another arrangement (a depth split's
// block sums, a transposed product), kept between products. It only grows: a vector resized
// down and up again would zero what the product then writes over.
struct ProductBuffer {
  std::vector<float> values;
  float* at_least(int64_t count) {
    if (values.size() < static_cast<std::size_t>(count)) {
      values.resize(static_cast<std::size_t>(count));
    }
    return values.data();
  }
};

// `g` with one part per depth block of k: part d sums block d over the whole output, into the
// output (d = 0) or a buffer of the calling thread, so the thread running it reads only block
// d's rows of W, the rows its share of W's optimizer update (split by rows) writes; W's lines
// then stay in one core's cache instead of being shared by both. The blocks' sums are then added
// in order and the bias after them, as the one-thread kernel adds them (so the bits are the
// same), and relu's backward or relu applied, by rows over the pool.
void gemm_by_depth(const Gemm& g, const GemmBlockKernel& kernel, ComputePool& pool) {
  const int64_t blocks = (g.k + kF32SumDepth - 1) / kF32SumDepth, size = g.m * g.n;
  float* const sums = this_thread_object<ProductBuffer>().at_least((blocks - 1) * size);
  pool.run(blocks, [&](int64_t d, int) {
    const int64_t p0 = d * kF32SumDepth;
    Gemm part = g;
    part.k = std::min(kF32SumDepth, g.k - p0);
    part.a = from_depth(g.a, p0, g.a.transposed);
    part.b = from_depth(g.b, p0, !g.b.transposed);
    part.bias = nullptr;
    part.relu_input = nullptr;
    part.relu = false;
    if (d > 0) {
      part.out = sums + (d - 1) * size;
      part.ldc = g.n;
    }
    kernel.run(part, 0, g.m, 0, g.n);
  });
  parallel_for(
      pool, g.m, 1,
      [&](int64_t r0, int64_t r1, int) {
        for (int64_t i = r0; i < r1; ++i) {
          float* row = static_cast<float*>(g.out) + i * g.ldc;
          for (int64_t d = 1; d < blocks; ++d) add_row(row, sums + (d - 1) * size + i * g.n, g.n);
          if (g.bias) add_row(row, g.bias, g.n);
        }
        if (g.relu_input) relu_backward_block(g, r0, r1, 0, g.n);
        if (g.relu) relu_block(g, r0, r1, 0, g.n);
      },
      1, 1);
}

// Whether `g` is computed as its transpose (see gemm_transposed): a product into a few columns
// over many rows (a classifier's logits, n of the classes), whose register tiles would fill a
// few of their columns' lanes.
bool runs_transposed(const Gemm& g, const GemmBlockKernel& kernel) {
  return g.precision == GemmPrecision::kF32 && 2 * g.n <= kernel.column_align &&
         g.m >= kernel.column_align && !g.accumulate && !g.out_bf16 && !g.round_bf16 &&
         !g.residual && !g.gelu_input && !g.relu_input && !g.relu;
}

// `g` as outᵀ = op(b)ᵀ · op(a)ᵀ into a buffer of the calling thread, then transposed into the
// output and the bias added: each sum is the same chain of fused multiply-adds (a product's
// factors commute), so the bits are the product's.
void gemm_transposed(const Gemm& g, const GemmBlockKernel& kernel) {
  float* const buffer = this_thread_object<ProductBuffer>().at_least(g.m * g.n);
  Gemm t = g;
  t.m = g.n;
  t.n = g.m;
  t.a = g.b;
  t.a.transposed = !g.b.transposed;
  t.b = g.a;
  t.b.transposed = !g.a.transposed;
  t.out = buffer;
  t.ldc = g.m;
  t.bias = nullptr;
  kernel.run(t, 0, t.m, 0, t.n);
  for (int64_t i = 0; i < g.m; ++i) {
    float* row = static_cast<float*>(g.out) + i * g.ldc;
    for (int64_t j = 0; j < g.n; ++j) {
      const float sum = buffer[j * g.m + i];
      row[j] = g.bias ? sum + g.bias[j] : sum;
    }
  }
}

}  // namespace

void gemm(const Gemm& g, ComputePool* pool) {
  if (g.accumulate && g.out_bf16) {
    throw std::invalid_argument("gemm: a bf16 output cannot be accumulated into");
  }
  if (g.accumulate && g.bias) {
    throw std::invalid_argument("gemm: a bias is not added to an accumulated output");
  }
  if (g.round_bf16 && (g.out_bf16 || g.accumulate)) {
    throw std::invalid_argument("gemm: only a written f32 output is rounded to bf16 values");
  }
  if (g.gelu_input && (g.accumulate || g.round_bf16)) {
    throw std::invalid_argument("gemm: gelu's backward applies to a written output only");
  }
  if (g.residual && (g.out_bf16 || g.accumulate || g.gelu_input)) {
    throw std::invalid_argument("gemm: a residual is added to a written f32 output only");
  }
  if (g.relu_input && (g.accumulate || g.round_bf16 || g.gelu_input || g.residual)) {
    throw std::invalid_argument("gemm: relu's backward applies to a written output only");
  }
  if (g.relu && (g.accumulate || g.round_bf16 || g.gelu_input || g.residual || g.relu_input)) {
    throw std::invalid_argument("gemm: relu applies to a written output with a bias at most");
  }
  if (g.m <= 0 || g.n <= 0) return;
  const GemmBlockKernel kernel = kernel_for(cpu_isa(), g.precision);
  if (g.k <= 0 || !kernel.run) {
    if (g.k > 0) {
      generic_gemm(g, pool);
    } else if (!g.accumulate) {
      fill_rows(g);
      add_residual(g, 0, g.m);
    }
    activations_block(g, 0, g.m, 0, g.n);
    return;
  }
  if (!pool || pool->threads() == 1 || g.m * g.n * g.k < kParallelMultiplyAdds) {
    if (runs_transposed(g, kernel)) return gemm_transposed(g, kernel);
    return kernel.run(g, 0, g.m, 0, g.n);
  }
  if (splits_by_depth(g, pool->threads())) return gemm_by_depth(g, kernel, *pool);
  // Each part packs its share of one operand and all of the other's: the longer side is split.
  // A weight gradient (dyᵀ · x) goes by rows unless x is more than twice as wide as dy: each
  // thread then writes whole rows, the rows its share of the weight's optimizer update (split by
  // rows) reads. The bits do not depend on the split. Two parts a thread even out the threads'
  // shares; over a long sum (weight gradients: k of the batch's rows) repacking the shared operand
  // costs more.
  const int64_t parts_per_thread = g.k >= kLongSum ? 1 : 2;
  const bool weight_gradient = g.a.transposed && !g.b.transposed;
  if (g.m >= g.n || (weight_gradient && 2 * g.m >= g.n)) {
    parallel_for(
        *pool, g.m, kernel.row_align,
        [&](int64_t r0, int64_t r1, int) { kernel.run(g, r0, r1, 0, g.n); }, kernel.row_align,
        parts_per_thread);
  } else {
    parallel_for(
        *pool, g.n, kernel.column_align,
        [&](int64_t c0, int64_t c1, int) { kernel.run(g, 0, g.m, c0, c1); }, kernel.column_align,
        parts_per_thread);
  }
}

void gelu_backward_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t offset = r * g.ldc + c0;
    if (g.out_bf16) {
      uint16_t* out = &(static_cast<Bf16*>(g.out) + offset)->bits;
      gelu_backward_bf16(out, &(static_cast<const Bf16*>(g.gelu_input) + offset)->bits, out,
                         c1 - c0);
    } else {
      float* out = static_cast<float*>(g.out) + offset;
      gelu_backward_f32(out, static_cast<const float*>(g.gelu_input) + offset, out, c1 - c0);
    }
  }
}

void relu_backward_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  // As where(gt(x, 0), v, 0): v where x > 0 (false for NaN), else +0. A bf16 value is above 0
  // when its bits, as a signed number, lie in (0, +inf].
  keep_block(
      g, g.relu_input, r0, r1, c0, c1, [](float x) { return x > 0.0f; },
      [](uint16_t bits) { return static_cast<int16_t>(bits) > 0 && bits <= 0x7F80; });
}

void relu_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  // As kRelu: v < 0 ? 0 : v, which keeps NaN and -0. A bf16 value is below 0 when its sign is
  // set and its magnitude lies in (0, +inf].
  keep_block(
      g, g.out, r0, r1, c0, c1, [](float v) { return !(v < 0.0f); },
      [](uint16_t bits) {
        const uint16_t magnitude = bits & 0x7FFF;
        return !(bits > 0x8000 && magnitude <= 0x7F80);
      });
}

void activations_block(const Gemm& g, int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
  if (g.gelu_input) gelu_backward_block(g, r0, r1, c0, c1);
  if (g.relu_input) relu_backward_block(g, r0, r1, c0, c1);
  if (g.relu) relu_block(g, r0, r1, c0, c1);
}

void direct_gemm(const DirectProduct& q) {
  if (q.m <= 0 || q.n <= 0) return;
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAvx512:
      return avx512_direct_gemm(q);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return avx2_direct_gemm(q);
#endif
    default:
      break;
  }
  for (int64_t i = 0; i < q.m; ++i) {
    for (int64_t j = 0; j < q.n; ++j) {
      float sum = q.accumulate ? q.c[i * q.ldc + j] : 0.0f;
      for (int64_t p = 0; p < q.depth; ++p) {
        sum = std::fma(q.a[i * q.a_row + p * q.a_col], q.b[p * q.ldb + j], sum);
      }
      q.c[i * q.ldc + j] = sum;
    }
  }
}

template <class T>
void gemm(const MatrixProduct& product, bool transpose_a, bool transpose_b, ComputePool* pool) {
  if (product.m == 0 || product.n == 0) return;
  if constexpr (std::is_same_v<T, float>) {
    Gemm g;
    g.m = product.m;
    g.n = product.n;
    g.k = product.k;
    g.a = {product.a, product.lda, transpose_a, false};
    g.b = {product.b, product.ldb, transpose_b, false};
    g.out = product.out;
    g.ldc = product.ldc;
    g.accumulate = product.accumulate;
    g.precision = product.precision;
    g.bias = product.bias;
    g.gelu_input = product.gelu_input;
    g.relu_input = product.relu_input;
    g.relu = product.relu;
    gemm(g, pool);
  } else {
    if (pool) return eigen_multiply_parallel<T>(product, transpose_a, transpose_b, *pool);
    eigen_multiply<T>(product, transpose_a, transpose_b);
  }
}
template void gemm<float>(const MatrixProduct&, bool, bool, ComputePool*);
template void gemm<double>(const MatrixProduct&, bool, bool, ComputePool*);
template void gemm<int32_t>(const MatrixProduct&, bool, bool, ComputePool*);
template void gemm<int64_t>(const MatrixProduct&, bool, bool, ComputePool*);

}  // namespace axle::cpu
