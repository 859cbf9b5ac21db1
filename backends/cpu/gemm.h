// backends/cpu: matrix products on Eigen's GEMM for kernels that build their operands themselves
// (convolution), without Eigen in the header.
#pragma once

#include <cstdint>

#include "backends/cpu/compute_pool.h"

namespace axle::cpu {

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
};

/// Computes `product` of T (float or double); with a pool, a large one is split into blocks of
/// output rows or columns over its threads (each element summed by one thread, in an order fixed
/// by the thread count). Without, on the calling thread.
template <class T>
void gemm(const MatrixProduct& product, bool transpose_a, bool transpose_b, ComputePool* pool);

}  // namespace axle::cpu
