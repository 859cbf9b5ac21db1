// backends/cpu: linear-algebra kernels (kMatmul): the shape checks and NumPy batch broadcasting,
// then one gemm (gemm.h) per product of the batch: f32 and bf16 on the instruction set's packed
// kernels (bf16 summed in f32, rounded once), f64 and integers on Eigen. A bias (lowering folds
// `matmul(a, b) + bias` into the call) is added by the f32 and bf16 kernels as they write the
// output, and after the product for f64; so is gelu's backward when lowering folds the product
// into `gelu_backward(matmul(a, b), x)`, relu's into `where(x > 0, matmul(a, b), 0)`, and relu
// into `relu(matmul(a, b) (+ bias))` (f32 and bf16).
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

/// What a matmul call computes, worked out once from the slot shapes: `batch` products of
/// [m, k] x [k, n], operand i of product j starting at offsets_i[j] elements.
struct MatmulPlan {
  int64_t m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  std::vector<int64_t> a_offsets, b_offsets;
  // Set when b is shared by every product and the a matrices sit back to back untransposed:
  // then the whole batch is one [batch * m, k] x [k, n] product, which blocks better than
  // many small ones (the common "linear layer over [B, S, K]" case).
  bool fold_batch_into_rows = false;
  // ints[2]: bf16 operands whose product's values (rounded to bf16) go to an f32 output.
  bool bf16_as_f32 = false;
  // ints[3]: the output is gelu_backward(product, x), x the last operand.
  bool gelu_backward = false;
  // ints[4]: the last operand r (f32) is added to the product's values: r + product.
  bool residual = false;
  // ints[5]: the output is where(x > 0, product, 0), x the last operand.
  bool relu_backward = false;
  // ints[6]: the output is relu(product).
  bool relu = false;
  bool bias = false;
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

// Element offset of each product's operands over the broadcast batch dims `batch_dims` (of a's
// and b's sizes `a_dims`, `b_dims`): a broadcast dim (size 1) contributes stride 0.
void set_batch_offsets(MatmulPlan& plan, const Shape& batch_dims,
                       const std::vector<int64_t>& a_dims, const std::vector<int64_t>& b_dims,
                       int64_t batch) {
  const int batch_rank = static_cast<int>(a_dims.size());
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
      const int64_t index = rest % batch_dims[i];
      rest /= batch_dims[i];
      oa += index * a_strides[i];
      ob += index * b_strides[i];
    }
    plan.a_offsets[j] = oa;
    plan.b_offsets[j] = ob;
  }
}

// The optional third operand: N values of the output's (floating) dtype, added to each row.
void check_bias(const KernelArgs& args, const MatmulPlan& plan, DType dtype) {
  if (!plan.bias) return;
  const BufferDesc& bias = *args.inputs[2].desc;
  if (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kBFloat16) {
    reject(args, "a bias is added to f32, f64 or bf16 products only");
  }
  if (bias.dtype != dtype) reject(args, "the bias must have the operands' dtype");
  bool row = bias.shape.rank() >= 1 && bias.shape[bias.shape.rank() - 1] == plan.n;
  for (int d = 0; row && d + 1 < bias.shape.rank(); ++d) row = bias.shape[d] == 1;
  if (!row) {
    reject(args, fmt::format("the bias {} must hold one value per output column (N={})",
                             bias.shape.to_string(), plan.n));
  }
}

// gelu_backward's or relu_backward's x (the last operand): the output's dtype (f32 or bf16)
// and shape.
void check_activation_input(const KernelArgs& args, const MatmulPlan& plan, DType dtype) {
  const BufferDesc& x = *args.inputs.back().desc;
  const char* name = plan.gelu_backward ? "gelu" : "relu";
  if ((dtype != DType::kFloat32 && dtype != DType::kBFloat16) || plan.bf16_as_f32) {
    reject(args, fmt::format("{}'s backward is applied to f32 and bf16 products only", name));
  }
  if (x.dtype != dtype || !(x.shape == args.output.desc->shape)) {
    reject(args, fmt::format("{}_backward's x {}{} must have the output's dtype and shape", name,
                             dtype_name(x.dtype), x.shape.to_string()));
  }
}

// The residual (the last operand): f32 in the output's shape.
void check_residual(const KernelArgs& args) {
  const BufferDesc& r = *args.inputs.back().desc;
  if (r.dtype != DType::kFloat32 || !(r.shape == args.output.desc->shape)) {
    reject(args, fmt::format("the residual {}{} must be f32 in the output's shape",
                             dtype_name(r.dtype), r.shape.to_string()));
  }
}

// The product's dtype: the operands'. A bf16 product also takes f32 operands, each rounded to
// bf16 as it is read (a narrowing cast folded into the call).
DType product_dtype(const KernelArgs& args, const MatmulPlan& plan) {
  const DType dtype = plan.bf16_as_f32 ? DType::kBFloat16 : args.output.desc->dtype;
  auto takes = [&](DType operand) {
    return operand == dtype || (dtype == DType::kBFloat16 && operand == DType::kFloat32);
  };
  if (!takes(args.inputs[0].desc->dtype) || !takes(args.inputs[1].desc->dtype)) {
    reject(args, plan.bf16_as_f32 ? "a bf16 product's values as f32 need bf16 or f32 operands"
                                  : "both operands must have the output's dtype (or f32 for a "
                                    "bf16 product)");
  }
  return dtype;
}

// The call's flags (ints[2:]) and which operands it has.
MatmulPlan plan_operands(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.size() < 2 || ints.size() > 7) {
    reject(args,
           "ints must be [transpose_a, transpose_b (, bf16 values as f32 (, gelu_backward (, "
           "residual (, relu_backward (, relu))))))]");
  }
  MatmulPlan plan;
  plan.bf16_as_f32 = ints.size() >= 3 && ints[2] != 0;
  plan.gelu_backward = ints.size() >= 4 && ints[3] != 0;
  plan.residual = ints.size() >= 5 && ints[4] != 0;
  plan.relu_backward = ints.size() >= 6 && ints[5] != 0;
  plan.relu = ints.size() == 7 && ints[6] != 0;
  if (plan.relu &&
      (plan.bf16_as_f32 || plan.gelu_backward || plan.residual || plan.relu_backward)) {
    reject(args, "relu goes with a bias only");
  }
  if (plan.residual && (plan.gelu_backward || !plan.bf16_as_f32)) {
    reject(args, "a residual is added to a bf16 product's values as f32 only");
  }
  if (plan.relu_backward && (plan.gelu_backward || plan.residual)) {
    reject(args, "relu's backward goes with neither gelu's backward nor a residual");
  }
  const bool activation = plan.gelu_backward || plan.relu_backward;
  const std::size_t operands = args.inputs.size() - (activation || plan.residual ? 1 : 0);
  if (args.inputs.size() < 2 || (operands != 2 && operands != 3)) {
    reject(args, activation      ? "matmul takes two operands, an optional bias and x"
                 : plan.residual ? "matmul takes two operands, an optional bias and a residual"
                                 : "matmul takes two operands and an optional bias");
  }
  plan.bias = operands == 3;
  return plan;
}

MatmulPlan plan_matmul(const KernelArgs& args) {
  MatmulPlan plan = plan_operands(args);
  const Shape& a = args.inputs[0].desc->shape;
  const Shape& b = args.inputs[1].desc->shape;
  const Shape& out = args.output.desc->shape;
  if (plan.bf16_as_f32 && args.output.desc->dtype != DType::kFloat32) {
    reject(args, "a bf16 product's values as f32 need an f32 output");
  }
  const DType dtype = product_dtype(args, plan);
  if (dtype == DType::kBool) reject(args, "matmul supports f32, f64, bf16, s32 and s64");
  if (a.rank() < 2 || b.rank() < 2) reject(args, "both operands need rank >= 2");

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
  check_bias(args, plan, dtype);
  if (plan.gelu_backward || plan.relu_backward) check_activation_input(args, plan, dtype);
  if (plan.relu && dtype != DType::kFloat32 && dtype != DType::kBFloat16) {
    reject(args, "relu is applied to f32 and bf16 products only");
  }
  if (plan.residual) check_residual(args);

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

  set_batch_offsets(plan, expected, a_dims, b_dims, batch);
  return plan;
}

// Products smaller than this many multiply-adds are not worth a part of their own.
constexpr int64_t kParallelMultiplyAdds = int64_t{1} << 20;

/// Runs product(j, pool) for each of the plan's products: whole products spread over the pool's
/// threads when there are enough of them, else one after another, each split over the threads.
template <class Product>
void for_each_product(const MatmulPlan& p, ComputePool& pool, Product&& product) {
  const auto batch = static_cast<int64_t>(p.a_offsets.size());
  if (pool.threads() > 1 && batch >= pool.threads() &&
      batch * p.m * p.n * p.k >= kParallelMultiplyAdds) {
    return parallel_for(pool, batch, 1, [&](int64_t j0, int64_t j1, int) {
      for (int64_t j = j0; j < j1; ++j) product(static_cast<std::size_t>(j), nullptr);
    });
  }
  for (std::size_t j = 0; j < p.a_offsets.size(); ++j) product(j, &pool);
}

// out (+)= bias on each of its rows: for the products whose kernels take no bias (f64), the
// add a separate call would make.
template <class T>
void add_bias_rows(T* out, int64_t rows, int64_t n, const T* bias) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) out[i * n + j] += bias[j];
  }
}

template <class T>
void run_plan(const KernelArgs& args, const MatmulPlan& p) {
  const T* a = args.inputs[0].as<T>();
  const T* b = args.inputs[1].as<T>();
  const T* bias = p.bias ? args.inputs[2].as<T>() : nullptr;
  const T* gelu_input = p.gelu_backward ? args.inputs.back().as<T>() : nullptr;
  const T* relu_input = p.relu_backward ? args.inputs.back().as<T>() : nullptr;
  T* out = args.output.as<T>();
  const int64_t lda = p.transpose_a ? p.m : p.k, ldb = p.transpose_b ? p.k : p.n;
  for_each_product(p, args.pool, [&](std::size_t j, ComputePool* part_pool) {
    T* product_out = out + static_cast<int64_t>(j) * p.m * p.n;
    MatrixProduct q{p.m, p.n,         p.k, a + p.a_offsets[j], lda, b + p.b_offsets[j],
                    ldb, product_out, p.n};
    if constexpr (std::is_same_v<T, float>) {
      q.bias = bias;
      if (gelu_input) q.gelu_input = gelu_input + static_cast<int64_t>(j) * p.m * p.n;
      if (relu_input) q.relu_input = relu_input + static_cast<int64_t>(j) * p.m * p.n;
      q.relu = p.relu;
    }
    gemm<T>(q, p.transpose_a, p.transpose_b, part_pool);
    if constexpr (!std::is_same_v<T, float>) {
      if (bias) add_bias_rows(product_out, p.m, p.n, bias);
    }
  });
}

// bf16 storage: operands taken as bf16 by the product kernels (f32 ones rounded to bf16 as they
// are read), products summed in f32, each output rounded once (and stored as f32 with
// bf16_as_f32).
void run_plan_bf16(const KernelArgs& args, const MatmulPlan& p) {
  // An f32 operand is rounded to bf16 as the product packs it.
  const bool a_bf16 = args.inputs[0].desc->dtype == DType::kBFloat16;
  const bool b_bf16 = args.inputs[1].desc->dtype == DType::kBFloat16;
  auto at = [](const ConstView& operand, bool bf16, int64_t offset) -> const void* {
    if (bf16) return operand.as<Bf16>() + offset;
    return operand.as<float>() + offset;
  };
  auto out = [&](int64_t offset) -> void* {
    if (p.bf16_as_f32) return args.output.as<float>() + offset;
    return args.output.as<Bf16>() + offset;
  };
  const float* bias = p.bias ? widened(args.inputs[2], 0) : nullptr;
  const Bf16* gelu_input = p.gelu_backward ? args.inputs.back().as<Bf16>() : nullptr;
  const Bf16* relu_input = p.relu_backward ? args.inputs.back().as<Bf16>() : nullptr;
  const float* residual = p.residual ? args.inputs.back().as<float>() : nullptr;
  const int64_t lda = p.transpose_a ? p.m : p.k, ldb = p.transpose_b ? p.k : p.n;
  for_each_product(p, args.pool, [&](std::size_t j, ComputePool* part_pool) {
    Gemm g;
    g.m = p.m;
    g.n = p.n;
    g.k = p.k;
    g.a = {at(args.inputs[0], a_bf16, p.a_offsets[j]), lda, p.transpose_a, a_bf16};
    g.b = {at(args.inputs[1], b_bf16, p.b_offsets[j]), ldb, p.transpose_b, b_bf16};
    g.out = out(static_cast<int64_t>(j) * p.m * p.n);
    g.ldc = p.n;
    g.out_bf16 = !p.bf16_as_f32;
    g.round_bf16 = p.bf16_as_f32;
    g.precision = GemmPrecision::kBf16;
    g.bias = bias;
    if (gelu_input) g.gelu_input = gelu_input + static_cast<int64_t>(j) * p.m * p.n;
    if (relu_input) g.relu_input = relu_input + static_cast<int64_t>(j) * p.m * p.n;
    g.relu = p.relu;
    if (residual) g.residual = residual + static_cast<int64_t>(j) * p.m * p.n;
    gemm(g, part_pool);
  });
}

void matmul(const KernelArgs& args) {
  const MatmulPlan plan = plan_matmul(args);
  if (plan.a_offsets.empty()) return;  // empty output
  if (plan.bf16_as_f32) return run_plan_bf16(args, plan);
  switch (args.output.desc->dtype) {
    case DType::kFloat32:
      return run_plan<float>(args, plan);
    case DType::kFloat64:
      return run_plan<double>(args, plan);
    case DType::kInt32:
      return run_plan<int32_t>(args, plan);
    case DType::kInt64:
      return run_plan<int64_t>(args, plan);
    case DType::kBFloat16:
      return run_plan_bf16(args, plan);
    case DType::kBool:
      break;  // rejected by plan_matmul
    case DType::kFloat16:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
      throw std::invalid_argument(fmt::format(
          "matmul computes in {}, not {} (the compiler widens it)",
          dtype_name(widened_dtype(args.output.desc->dtype)), dtype_name(args.output.desc->dtype)));
  }
}

}  // namespace

void register_linalg_kernels(KernelTable& table) { set_kernel(table, Kernel::kMatmul, matmul); }

}  // namespace axle::cpu
