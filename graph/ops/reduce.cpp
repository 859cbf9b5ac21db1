// graph/ops: reductions (sum, mean, amax, amin, logsumexp, argmax, var, std) and softmax.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

using ops::describe;

// The dims a reduction runs over: normalized, sorted and unique, as the kernels expect; an
// empty list means every dim. A 0-d tensor accepts dim 0 / -1 (as torch) but has no dim to
// reduce, so its list stays empty and the node's ints are just [keepdim].
std::vector<int64_t> reduced_dims(std::string_view op, const Tensor& x,
                                  const std::vector<int64_t>& dims, const Loc& where) {
  const int rank = x.dim();
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    const int64_t n = ops::normalize_dim(op, x, d, rank, where);
    if (std::find(out.begin(), out.end(), n) != out.end()) {
      ops::fail(op,
                fmt::format("dim {} appears more than once in [{}] (reducing {})", n,
                            fmt::join(dims, ","), describe(x)),
                where);
    }
    out.push_back(n);
  }
  if (rank == 0) return {};
  if (dims.empty()) {
    for (int d = 0; d < rank; ++d) out.push_back(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape reduced_shape(const Shape& in, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int d = 0; d < in.rank(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!reduced)
      out.push_back(in[d]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

// max, min and argmax have no identity for an empty dim, so torch rejects one; so does axle.
void require_nonempty(std::string_view op, const Tensor& x, const std::vector<int64_t>& dims,
                      const Loc& where) {
  for (int64_t d : dims) {
    if (x.shape()[static_cast<int>(d)] == 0) {
      ops::fail(op, fmt::format("cannot reduce dim {} of {}: it is empty", d, describe(x)), where);
    }
  }
}

enum class ResultType {
  kSame,       // the input's dtype
  kSumType,    // integers and bool widen to s64, as torch.sum
  kFloatType,  // integers and bool compute in f32
};

DType result_dtype(DType in, ResultType kind) {
  if (kind == ResultType::kSumType && !is_floating(in)) return DType::kInt64;
  if (kind == ResultType::kFloatType && !is_floating(in)) return DType::kFloat32;
  return in;
}

// `name` is the user's name for the op (amax), which errors use; the IR's is shorter (max).
Tensor reduce(Op op, std::string_view name, const Tensor& x, const std::vector<int64_t>& dims,
              bool keepdim, ResultType kind, const Loc& where) {
  ops::require_defined(name, x, "the operand", where);
  const std::vector<int64_t> reduced = reduced_dims(name, x, dims, where);
  if (op == Op::kReduceMax || op == Op::kReduceMin) require_nonempty(name, x, reduced, where);
  const DType dtype = result_dtype(x.dtype(), kind);
  IntAttrs ints{keepdim ? 1 : 0};
  for (int64_t d : reduced) ints.push_back(d);
  const bool record = autograd::should_record(x);
  Tensor result = ops::make_result(op, dtype, reduced_shape(x.shape(), reduced, keepdim),
                                   Operands{ops::value_as(x, dtype, where)}, x.device(), where,
                                   record ? ints : std::move(ints));
  if (record) autograd::record(autograd::reduction_derivative(op), result, {x}, std::move(ints));
  return result;
}

// A reshape node the result's operand reads through (not a result of its own).
NodePtr reshaped(const NodePtr& value, const Shape& shape, const Loc& where) {
  return make_intrusive<Node>(Op::kReshape, value->dtype(), shape, Operands{value}, IntAttrs{},
                              RealAttrs{}, where);
}

Tensor softmax_like(Op op, const Tensor& x, int64_t dim, const Loc& where) {
  if (ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return softmax_like(op, ops::autocast_cast(x, DType::kFloat32, where), dim, where);
  }
  const std::string_view name = op_name(op);
  ops::require_defined(name, x, "the operand", where);
  const int64_t d = ops::normalize_dim(name, x, dim, x.dim(), where);
  ops::require_floating(name, x, where);
  const DType dtype = x.dtype();
  NodePtr value = ops::value_as(x, dtype, where);
  Tensor result;
  if (x.dim() > 0) {
    result = ops::make_result(op, dtype, x.shape(), Operands{std::move(value)}, x.device(), where,
                              IntAttrs{d});
  } else {
    // The kernels need a real dim; a 0-d tensor runs as [1] and is reshaped back.
    const Tensor one =
        ops::make_result(op, dtype, Shape{1}, Operands{reshaped(value, Shape{1}, where)},
                         x.device(), where, IntAttrs{0});
    result = ops::make_result(Op::kReshape, dtype, Shape{}, Operands{one.impl()->value_node(where)},
                              x.device(), where);
  }
  if (autograd::should_record(x)) {
    autograd::record(autograd::reduction_derivative(op), result, {x}, IntAttrs{d});
  }
  return result;
}

// Two passes, the mean and then the squared deviations from it: the one-pass E[x^2] - E[x]^2
// loses every digit when the mean is large next to the spread. The count less the correction is
// clamped at 0 as torch does, so the unbiased variance of one element is NaN, as there.
Tensor variance(std::string_view op, const Tensor& x, const std::vector<int64_t>& dims,
                double correction, bool keepdim, const Loc& where) {
  ops::require_defined(op, x, "the operand", where);
  ops::require_floating(op, x, where);
  const std::vector<int64_t> reduced = reduced_dims(op, x, dims, where);
  int64_t count = 1;
  for (int64_t d : reduced) count *= x.shape()[static_cast<int>(d)];
  if (!std::isfinite(correction)) {
    ops::fail(op, fmt::format("correction {} is not a finite number ({})", correction, describe(x)),
              where);
  }
  const double divisor = std::max(static_cast<double>(count) - correction, 0.0);
  // torch.var is one op, on no autocast list: it keeps a bf16 input's dtype, whatever the sum
  // inside it would do in a region.
  const ops::AutocastSuspended off;
  // The corrected two-pass sum: the deviations from the computed mean, squared and summed, less
  // (their sum)^2 / n. A mean off by e adds n·e² to the squares, which the second term takes
  // back: with a spread of a few f32 steps around a large mean, e is as large as the spread,
  // while torch's f32 var stays within 1e-7 of the exact one (it accumulates in double).
  const Tensor deviation = sub(x, mean(x, reduced, /*keepdim=*/true, where), where);
  const Tensor squares = sum(mul(deviation, deviation, where), reduced, keepdim, where);
  const Tensor drift = sum(deviation, reduced, keepdim, where);
  // Never below 0: equal values leave two roundings of the same n·e², an ulp apart either way.
  const Tensor spread =
      clamp(sub(squares, div(mul(drift, drift, where), static_cast<double>(count), where), where),
            0.0, std::nullopt, where);
  return div(spread, divisor, where);
}

}  // namespace

Tensor sum(const Tensor& x, std::vector<int64_t> dims, bool keepdim, Loc where) {
  if (ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return sum(ops::autocast_cast(x, DType::kFloat32, where), std::move(dims), keepdim, where);
  }
  return reduce(Op::kSum, "sum", x, dims, keepdim, ResultType::kSumType, where);
}

Tensor mean(const Tensor& x, std::vector<int64_t> dims, bool keepdim, Loc where) {
  // As torch: the mean of integers has no dtype to infer (cast first).
  if (x.defined()) ops::require_floating("mean", x, where);
  return reduce(Op::kMean, "mean", x, dims, keepdim, ResultType::kFloatType, where);
}

Tensor amax(const Tensor& x, std::vector<int64_t> dims, bool keepdim, Loc where) {
  return reduce(Op::kReduceMax, "amax", x, dims, keepdim, ResultType::kSame, where);
}

Tensor amin(const Tensor& x, std::vector<int64_t> dims, bool keepdim, Loc where) {
  return reduce(Op::kReduceMin, "amin", x, dims, keepdim, ResultType::kSame, where);
}

Tensor logsumexp(const Tensor& x, std::vector<int64_t> dims, bool keepdim, Loc where) {
  if (ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return logsumexp(ops::autocast_cast(x, DType::kFloat32, where), std::move(dims), keepdim,
                     where);
  }
  return reduce(Op::kLogSumExp, "logsumexp", x, dims, keepdim, ResultType::kFloatType, where);
}

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim, Loc where) {
  ops::require_defined("argmax", x, "the operand", where);
  if (x.dtype() == DType::kBool) {
    ops::fail("argmax", fmt::format("does not take the pred (bool) tensor {}", describe(x)), where);
  }
  const Shape& in = x.shape();
  if (dim) {
    const int64_t d = ops::normalize_dim("argmax", x, *dim, in.rank(), where);
    if (in.rank() > 0) {
      require_nonempty("argmax", x, {d}, where);
      return ops::make_result(Op::kArgMax, DType::kInt64, reduced_shape(in, {d}, keepdim),
                              Operands{ops::value_as(x, x.dtype(), where)}, x.device(), where,
                              IntAttrs{keepdim ? 1 : 0, d});
    }
  }
  if (x.numel() == 0) {
    ops::fail("argmax", fmt::format("cannot take the argmax of the empty {}", describe(x)), where);
  }
  // Over the flattened tensor (or a 0-d one): argmax of x viewed as 1-d. With keepdim the
  // result keeps x's rank with every dim 1, as torch >= 1.13 does.
  const Shape flat{x.numel()};
  const Tensor index =
      ops::make_result(Op::kArgMax, DType::kInt64, Shape{},
                       Operands{reshaped(ops::value_as(x, x.dtype(), where), flat, where)},
                       x.device(), where, IntAttrs{0, 0});
  if (!keepdim || in.rank() == 0) return index;
  Shape ones;
  for (int d = 0; d < in.rank(); ++d) ones.push_back(1);
  return ops::make_result(Op::kReshape, DType::kInt64, ones,
                          Operands{index.impl()->value_node(where)}, x.device(), where);
}

Tensor var(const Tensor& x, std::vector<int64_t> dims, bool unbiased, bool keepdim, Loc where) {
  return variance("var", x, dims, unbiased ? 1 : 0, keepdim, where);
}

Tensor std(const Tensor& x, std::vector<int64_t> dims, bool unbiased, bool keepdim, Loc where) {
  return sqrt(variance("std", x, dims, unbiased ? 1 : 0, keepdim, where), where);
}

Tensor var(const Tensor& x, std::vector<int64_t> dims, const VarOptions& options, Loc where) {
  return variance("var", x, dims, options.correction, options.keepdim, where);
}

Tensor std(const Tensor& x, std::vector<int64_t> dims, const VarOptions& options, Loc where) {
  return sqrt(variance("std", x, dims, options.correction, options.keepdim, where), where);
}

Tensor softmax(const Tensor& x, int64_t dim, Loc where) {
  return softmax_like(Op::kSoftmax, x, dim, where);
}

Tensor log_softmax(const Tensor& x, int64_t dim, Loc where) {
  return softmax_like(Op::kLogSoftmax, x, dim, where);
}

}  // namespace axle
