// backends/cpu: linear-algebra kernels (kMatmul). Every product goes through Eigen's blocked
// GEMM on mapped row-major buffers, so the kernel costs what Eigen costs plus a shape check; a
// large product is split into blocks of output rows or columns over the device's threads. bf16
// products accumulate in f32 over tiles widened as they are multiplied (run_plan_bf16).
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/compute_pool.h"
#include "backends/cpu/element.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

/// What a matmul call computes, worked out once from the slot shapes: `batch` products of
/// [m, k] x [k, n], operand i of product j starting at offsets_i[j] elements.
struct MatmulPlan {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  std::vector<int64_t> a_offsets, b_offsets;
  // Set when b is shared by every product and the a matrices sit back to back untransposed:
  // then the whole batch is one [batch * m, k] x [k, n] product, which Eigen blocks better than
  // many small ones (the common "linear layer over [B, S, K]" case).
  bool fold_batch_into_rows = false;
};

std::string describe(const KernelArgs& args) {
  const Shape& a = args.inputs[0].desc->shape;
  const Shape& b = args.inputs[1].desc->shape;
  return fmt::format("matmul(a {}{}, b {}{}, transpose_a={}, transpose_b={}) -> {}{}",
                     dtype_name(args.inputs[0].desc->dtype), a.to_string(),
                     dtype_name(args.inputs[1].desc->dtype), b.to_string(),
                     args.call.ints.size() > 0 ? args.call.ints[0] : 0,
                     args.call.ints.size() > 1 ? args.call.ints[1] : 0,
                     dtype_name(args.output.desc->dtype), args.output.desc->shape.to_string());
}

[[noreturn]] void reject(const KernelArgs& args, std::string_view why) {
  throw std::invalid_argument(fmt::format("{}: {}", describe(args), why));
}

MatmulPlan plan_matmul(const KernelArgs& args) {
  if (args.inputs.size() != 2) reject(args, "matmul takes exactly two operands");
  if (args.call.ints.size() != 2) reject(args, "ints must be [transpose_a, transpose_b]");
  const Shape& a = args.inputs[0].desc->shape;
  const Shape& b = args.inputs[1].desc->shape;
  const Shape& out = args.output.desc->shape;
  const DType dtype = args.output.desc->dtype;
  if (args.inputs[0].desc->dtype != dtype || args.inputs[1].desc->dtype != dtype) {
    reject(args, "both operands must have the output's dtype");
  }
  if (dtype == DType::kBool) reject(args, "matmul supports f32, f64, bf16, s32 and s64");
  if (a.rank() < 2 || b.rank() < 2) reject(args, "both operands need rank >= 2");

  MatmulPlan plan;
  plan.transpose_a = args.call.ints[0] != 0;
  plan.transpose_b = args.call.ints[1] != 0;
  const int ra = a.rank(), rb = b.rank();
  plan.m = plan.transpose_a ? a[ra - 1] : a[ra - 2];
  plan.k = plan.transpose_a ? a[ra - 2] : a[ra - 1];
  const int64_t k_b = plan.transpose_b ? b[rb - 1] : b[rb - 2];
  plan.n = plan.transpose_b ? b[rb - 2] : b[rb - 1];
  if (plan.k != k_b) {
    reject(args, fmt::format("contraction sizes differ: a has K={}, b has K={}", plan.k, k_b));
  }

  // NumPy broadcasting over the batch dims, aligned from the right.
  const int batch_rank = std::max(ra, rb) - 2;
  Shape expected;
  std::vector<int64_t> a_dims(batch_rank, 1), b_dims(batch_rank, 1);
  for (int i = 0; i < ra - 2; ++i) a_dims[batch_rank - (ra - 2) + i] = a[i];
  for (int i = 0; i < rb - 2; ++i) b_dims[batch_rank - (rb - 2) + i] = b[i];
  for (int i = 0; i < batch_rank; ++i) {
    if (a_dims[i] != b_dims[i] && a_dims[i] != 1 && b_dims[i] != 1) {
      reject(args,
             fmt::format("batch dim {} does not broadcast ({} vs {})", i, a_dims[i], b_dims[i]));
    }
    expected.push_back(a_dims[i] == 1 ? b_dims[i] : a_dims[i]);
  }
  expected.push_back(plan.m);
  expected.push_back(plan.n);
  if (!(expected == out)) {
    reject(args, fmt::format("the operands give an output of shape {}", expected.to_string()));
  }

  int64_t batch = 1, a_batch = 1, b_batch = 1;
  for (int i = 0; i < batch_rank; ++i) {
    batch *= expected[i];
    a_batch *= a_dims[i];
    b_batch *= b_dims[i];
  }
  if (batch == 0 || plan.m == 0 || plan.n == 0) return plan;  // nothing to write
  if (b_batch == 1 && a_batch == batch && !plan.transpose_a) {
    plan.fold_batch_into_rows = true;
    plan.a_offsets = {0};
    plan.b_offsets = {0};
    plan.m *= batch;
    return plan;
  }

  // Element offset of each product's operands; a broadcast dim (size 1) contributes stride 0.
  const int64_t a_matrix = plan.m * plan.k, b_matrix = plan.k * plan.n;
  std::vector<int64_t> a_strides(batch_rank), b_strides(batch_rank);
  for (int64_t i = batch_rank - 1, sa = a_matrix, sb = b_matrix; i >= 0; --i) {
    a_strides[i] = a_dims[i] == 1 ? 0 : sa;
    b_strides[i] = b_dims[i] == 1 ? 0 : sb;
    sa *= a_dims[i];
    sb *= b_dims[i];
  }
  plan.a_offsets.resize(batch);
  plan.b_offsets.resize(batch);
  for (int64_t j = 0; j < batch; ++j) {
    int64_t rest = j, oa = 0, ob = 0;
    for (int i = batch_rank - 1; i >= 0; --i) {
      const int64_t index = rest % expected[i];
      rest /= expected[i];
      oa += index * a_strides[i];
      ob += index * b_strides[i];
    }
    plan.a_offsets[j] = oa;
    plan.b_offsets[j] = ob;
  }
  return plan;
}

// Products smaller than this many multiply-adds stay on one thread: a part costs a wake-up of a
// few microseconds and repacks the operand every part shares.
constexpr int64_t kParallelMultiplyAdds = int64_t{1} << 20;

template <class T>
using ConstStridedMap = Eigen::Map<const RowMatrix<T>, 0, Eigen::OuterStride<>>;

// c = product, or c += product.
template <class C, class Product>
void assign(C& c, const Product& product, bool accumulate) {
  if (accumulate) {
    c.noalias() += product;
  } else {
    c.noalias() = product;
  }
}

/// out[m, n] = op(a) * op(b). The four transpose cases are separate instantiations so Eigen sees
/// each operand's storage order at compile time and picks its packing without a copy.
template <class T>
void multiply(const MatrixProduct& q, bool transpose_a, bool transpose_b) {
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

/// Rows [r0, r1) of product q (op(a) rows, out rows).
template <class T>
MatrixProduct rows_of(const MatrixProduct& q, bool transpose_a, int64_t r0, int64_t r1) {
  MatrixProduct part = q;
  part.m = r1 - r0;
  part.a = static_cast<const T*>(q.a) + (transpose_a ? r0 : r0 * q.lda);
  part.out = static_cast<T*>(q.out) + r0 * q.ldc;
  return part;
}

/// Columns [c0, c1) of product q (op(b) columns, out columns).
template <class T>
MatrixProduct columns_of(const MatrixProduct& q, bool transpose_b, int64_t c0, int64_t c1) {
  MatrixProduct part = q;
  part.n = c1 - c0;
  part.b = static_cast<const T*>(q.b) + (transpose_b ? c0 * q.ldb : c0);
  part.out = static_cast<T*>(q.out) + c0;
  return part;
}

/// One product on the pool's threads: the output split into blocks of whole rows or whole
/// columns, each an Eigen product on one thread, so every output element is summed by one
/// thread in an order fixed by the thread count. The larger side is split, since each part
/// packs all of the operand along the other side.
template <class T>
void multiply_parallel(const MatrixProduct& q, bool transpose_a, bool transpose_b,
                       ComputePool& pool) {
  if (pool.threads() == 1 || q.m * q.n * q.k < kParallelMultiplyAdds) {
    return multiply<T>(q, transpose_a, transpose_b);
  }
  // Eigen's register blocks are SIMD packets of output columns by 4 rows (it computes the
  // row-major product as its transposed column-major one); whole ones keep parts on its fast path.
  constexpr int64_t kColumnAlign = 8, kRowAlign = 4;
  if (q.m > q.n) {
    parallel_for(
        pool, q.m, kRowAlign,
        [&](int64_t r0, int64_t r1, int) {
          multiply<T>(rows_of<T>(q, transpose_a, r0, r1), transpose_a, transpose_b);
        },
        kRowAlign, 1);
  } else {
    parallel_for(
        pool, q.n, kColumnAlign,
        [&](int64_t c0, int64_t c1, int) {
          multiply<T>(columns_of<T>(q, transpose_b, c0, c1), transpose_a, transpose_b);
        },
        kColumnAlign, 1);
  }
}

template <class T>
void run_plan(const T* a, const T* b, T* out, const MatmulPlan& p, ComputePool& pool) {
  const int64_t out_matrix = p.m * p.n;
  const int64_t lda = p.transpose_a ? p.m : p.k, ldb = p.transpose_b ? p.k : p.n;
  auto product = [&](std::size_t j) {
    return MatrixProduct{p.m, p.n,
                         p.k, a + p.a_offsets[j],
                         lda, b + p.b_offsets[j],
                         ldb, out + static_cast<int64_t>(j) * out_matrix,
                         p.n};
  };
  const auto batch = static_cast<int64_t>(p.a_offsets.size());
  if (batch >= pool.threads() && batch * p.m * p.n * p.k >= kParallelMultiplyAdds) {
    // Enough products to go round: each runs whole on one thread.
    return parallel_for(pool, batch, 1, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) {
        multiply<T>(product(static_cast<std::size_t>(j)), p.transpose_a, p.transpose_b);
      }
    });
  }
  for (std::size_t j = 0; j < p.a_offsets.size(); ++j) {
    multiply_parallel<T>(product(j), p.transpose_a, p.transpose_b, pool);
  }
}

// ---- bf16 products ------------------------------------------------------------------------
//
// bf16 storage, f32 accumulation, and no widened copy of a whole operand. The output is cut into
// tiles of kBf16Rows x kBf16Columns; a run of tiles of one column walks the contraction
// kBf16Depth at a time: that slice of op(b)'s columns is widened once into f32 scratch, then each
// tile's slice of op(a)'s rows, and their Eigen product is added into the tile's f32 accumulator;
// each tile is rounded to bf16 once at the end. What a tile sums, and in which order, depends on
// the shape only, never on how tiles are shared among threads, so every thread count gives the
// same bits.
constexpr int64_t kBf16Rows = 64, kBf16Columns = 256, kBf16Depth = 256;

// Per-thread scratch, kept between calls: a fresh allocation per call would cost page faults
// on every step.
struct Bf16Scratch {
  ScratchArray<float> data;
  std::size_t size = 0;
  float* get(std::size_t n) {
    if (n > size) {
      data = scratch_array<float>(n);
      size = n;
    }
    return data.get();
  }
};

// Widens rows [r0, r0 + rows) x columns [c0, c0 + cols) of the row-major bf16 matrix x (row
// stride ld) into dense row-major f32 dst.
void widen_tile(const Bf16* x, int64_t ld, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                float* dst) {
  for (int64_t r = 0; r < rows; ++r) widen_block(x + (r0 + r) * ld + c0, dst + r * cols, cols);
}

struct Bf16Product {
  int64_t m, n, k;
  const Bf16* a;
  int64_t lda;
  const Bf16* b;
  int64_t ldb;
  Bf16* out;
  int64_t ldc;
};

// Output rows [r0, r1) x columns [c0, c0 + cols) of q: whole row tiles of one column tile.
void bf16_tiles(const Bf16Product& q, bool transpose_a, bool transpose_b, int64_t r0, int64_t r1,
                int64_t c0, int64_t cols) {
  thread_local Bf16Scratch a_scratch, b_scratch, c_scratch;
  const int64_t rows = r1 - r0;
  float* acc = c_scratch.get(static_cast<std::size_t>(rows * cols));
  if (q.k == 0) std::fill(acc, acc + rows * cols, 0.0f);  // an empty sum
  float* a = a_scratch.get(static_cast<std::size_t>(kBf16Rows * kBf16Depth));
  float* b = b_scratch.get(static_cast<std::size_t>(kBf16Depth * cols));
  for (int64_t k0 = 0; k0 < q.k; k0 += kBf16Depth) {
    const int64_t depth = std::min(kBf16Depth, q.k - k0);
    if (!transpose_b) {
      widen_tile(q.b, q.ldb, k0, depth, c0, cols, b);
    } else {
      widen_tile(q.b, q.ldb, c0, cols, k0, depth, b);
    }
    for (int64_t t0 = r0; t0 < r1; t0 += kBf16Rows) {
      const int64_t tile_rows = std::min(kBf16Rows, r1 - t0);
      Eigen::Map<RowMatrix<float>> c(acc + (t0 - r0) * cols, tile_rows, cols);
      if (!transpose_a) {
        widen_tile(q.a, q.lda, t0, tile_rows, k0, depth, a);
      } else {
        widen_tile(q.a, q.lda, k0, depth, t0, tile_rows, a);
      }
      auto add_product = [&](const auto& lhs) {
        auto assign = [&](const auto& rhs) {
          if (k0 == 0) {
            c.noalias() = lhs * rhs;
          } else {
            c.noalias() += lhs * rhs;
          }
        };
        if (!transpose_b) {
          assign(ConstMatrixMap<float>(b, depth, cols));
        } else {
          assign(ConstMatrixMap<float>(b, cols, depth).transpose());
        }
      };
      if (!transpose_a) {
        add_product(ConstMatrixMap<float>(a, tile_rows, depth));
      } else {
        add_product(ConstMatrixMap<float>(a, depth, tile_rows).transpose());
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    narrow_block(acc + r * cols, q.out + (r0 + r) * q.ldc + c0, cols);
  }
}

void run_plan_bf16(const KernelArgs& args, const MatmulPlan& p) {
  const Bf16* a = args.inputs[0].as<Bf16>();
  const Bf16* b = args.inputs[1].as<Bf16>();
  Bf16* out = args.output.as<Bf16>();
  const int64_t lda = p.transpose_a ? p.m : p.k, ldb = p.transpose_b ? p.k : p.n;
  const int64_t row_tiles = (p.m + kBf16Rows - 1) / kBf16Rows;
  const int64_t column_tiles = (p.n + kBf16Columns - 1) / kBf16Columns;
  const auto batch = static_cast<int64_t>(p.a_offsets.size());
  // Tile t is row tile t % row_tiles of column tile (t / row_tiles) % column_tiles of product
  // t / (row_tiles * column_tiles): a part's consecutive tiles share their columns of op(b).
  auto run_tiles = [&](int64_t t0, int64_t t1, int) {
    while (t0 < t1) {
      const int64_t column = t0 / row_tiles;  // over the whole batch
      const int64_t last = std::min(t1, (column + 1) * row_tiles);
      const auto j = static_cast<std::size_t>(column / column_tiles);
      const int64_t c0 = column % column_tiles * kBf16Columns;
      const Bf16Product q{p.m, p.n,
                          p.k, a + p.a_offsets[j],
                          lda, b + p.b_offsets[j],
                          ldb, out + static_cast<int64_t>(j) * p.m * p.n,
                          p.n};
      bf16_tiles(q, p.transpose_a, p.transpose_b, t0 % row_tiles * kBf16Rows,
                 std::min(p.m, (last - 1) % row_tiles * kBf16Rows + kBf16Rows), c0,
                 std::min(kBf16Columns, p.n - c0));
      t0 = last;
    }
  };
  const int64_t tiles = batch * column_tiles * row_tiles;
  if (args.pool.threads() == 1 || batch * p.m * p.n * p.k < kParallelMultiplyAdds) {
    return run_tiles(0, tiles, 0);
  }
  parallel_for(args.pool, tiles, 1, run_tiles);
}

void matmul(const KernelArgs& args) {
  const MatmulPlan plan = plan_matmul(args);
  if (plan.a_offsets.empty()) return;  // empty output
  ComputePool& pool = args.pool;
  switch (args.output.desc->dtype) {
    case DType::kF32:
      return run_plan(args.inputs[0].as<float>(), args.inputs[1].as<float>(),
                      args.output.as<float>(), plan, pool);
    case DType::kF64:
      return run_plan(args.inputs[0].as<double>(), args.inputs[1].as<double>(),
                      args.output.as<double>(), plan, pool);
    case DType::kI32:
      return run_plan(args.inputs[0].as<int32_t>(), args.inputs[1].as<int32_t>(),
                      args.output.as<int32_t>(), plan, pool);
    case DType::kI64:
      return run_plan(args.inputs[0].as<int64_t>(), args.inputs[1].as<int64_t>(),
                      args.output.as<int64_t>(), plan, pool);
    case DType::kBF16:
      return run_plan_bf16(args, plan);
    case DType::kBool:
      break;  // rejected by plan_matmul
  }
}

}  // namespace

template <class T>
void gemm(const MatrixProduct& product, bool transpose_a, bool transpose_b, ComputePool* pool) {
  if (product.m == 0 || product.n == 0) return;
  if (pool) return multiply_parallel<T>(product, transpose_a, transpose_b, *pool);
  multiply<T>(product, transpose_a, transpose_b);
}
template void gemm<float>(const MatrixProduct&, bool, bool, ComputePool*);
template void gemm<double>(const MatrixProduct&, bool, bool, ComputePool*);

void register_linalg_kernels(KernelTable& table) { set_kernel(table, Kernel::kMatmul, matmul); }

}  // namespace axle::cpu
