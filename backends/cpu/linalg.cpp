// backends/cpu: linear-algebra kernels (kMatmul). Every product goes through Eigen's blocked
// GEMM on mapped row-major buffers, so the kernel costs what Eigen costs plus a shape check.
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "backends/cpu/element.h"
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

/// out[m, n] = op(a) * op(b) for one product. The four transpose cases are separate
/// instantiations so Eigen sees each operand's storage order at compile time and picks its
/// packing without a copy.
template <class T>
void multiply(const T* a, const T* b, T* out, const MatmulPlan& p) {
  MatrixMap<T> c(out, p.m, p.n);
  if (p.k == 0) {
    c.setZero();  // an empty sum
    return;
  }
  if (!p.transpose_a) {
    ConstMatrixMap<T> lhs(a, p.m, p.k);
    if (!p.transpose_b) {
      c.noalias() = lhs * ConstMatrixMap<T>(b, p.k, p.n);
    } else {
      c.noalias() = lhs * ConstMatrixMap<T>(b, p.n, p.k).transpose();
    }
  } else {
    auto lhs = ConstMatrixMap<T>(a, p.k, p.m).transpose();
    if (!p.transpose_b) {
      c.noalias() = lhs * ConstMatrixMap<T>(b, p.k, p.n);
    } else {
      c.noalias() = lhs * ConstMatrixMap<T>(b, p.n, p.k).transpose();
    }
  }
}

template <class T>
void run_plan(const T* a, const T* b, T* out, const MatmulPlan& p) {
  const int64_t out_matrix = p.m * p.n;
  for (std::size_t j = 0; j < p.a_offsets.size(); ++j) {
    multiply(a + p.a_offsets[j], b + p.b_offsets[j], out + static_cast<int64_t>(j) * out_matrix, p);
  }
}

/// bf16 storage with f32 accumulation: widen both operands once (a broadcast operand is then
/// widened once, not once per product), multiply in f32, round the result to bf16 at the end.
void run_plan_bf16(const KernelArgs& args, const MatmulPlan& p) {
  const std::vector<float> a = widened(args.inputs[0]);
  const std::vector<float> b = widened(args.inputs[1]);
  std::vector<float> out(static_cast<std::size_t>(args.output.desc->shape.numel()));
  run_plan(a.data(), b.data(), out.data(), p);
  narrow_block(out.data(), args.output.as<Bf16>(), static_cast<int64_t>(out.size()));
}

void matmul(const KernelArgs& args) {
  const MatmulPlan plan = plan_matmul(args);
  if (plan.a_offsets.empty()) return;  // empty output
  switch (args.output.desc->dtype) {
    case DType::kF32:
      return run_plan(args.inputs[0].as<float>(), args.inputs[1].as<float>(),
                      args.output.as<float>(), plan);
    case DType::kF64:
      return run_plan(args.inputs[0].as<double>(), args.inputs[1].as<double>(),
                      args.output.as<double>(), plan);
    case DType::kI32:
      return run_plan(args.inputs[0].as<int32_t>(), args.inputs[1].as<int32_t>(),
                      args.output.as<int32_t>(), plan);
    case DType::kI64:
      return run_plan(args.inputs[0].as<int64_t>(), args.inputs[1].as<int64_t>(),
                      args.output.as<int64_t>(), plan);
    case DType::kBF16:
      return run_plan_bf16(args, plan);
    case DType::kBool:
      break;  // rejected by plan_matmul
  }
}

}  // namespace

void register_linalg_kernels(KernelTable& table) { set_kernel(table, Kernel::kMatmul, matmul); }

}  // namespace axle::cpu
