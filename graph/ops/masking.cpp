// graph/ops: ops that keep some elements and replace the others — clamp, masked_fill, tril and
// triu. Each is made of elementwise ops (maximum, minimum, where, comparisons of iotas), so the
// compiler fuses them with their neighbours; clamp records its own derivative, which passes the
// gradient at the bounds as torch does (maximum's would split it in half there).
#include <fmt/format.h>

#include <cmath>

#include "axle/graph/autograd.h"
#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

using ops::describe;

// x limited by a scalar bound: maximum for a lower bound, minimum for an upper one.
Tensor bounded(Op op, const Tensor& x, double bound, DType dtype, const Loc& loc) {
  return ops::make_result(op, dtype, x.shape(),
                          Operands{ops::value_as(x, dtype, loc), ops::scalar(bound, dtype, loc)},
                          x.device(), loc);
}

// The dtype clamp computes in, as torch's result_type: a fractional bound makes an integer
// tensor's result f32.
DType clamp_dtype(const Tensor& x, std::optional<double> min, std::optional<double> max) {
  if (is_floating(x.dtype())) return x.dtype();
  const bool fractional =
      (min && std::nearbyint(*min) != *min) || (max && std::nearbyint(*max) != *max);
  return fractional ? DType::kFloat32 : x.dtype();
}

Tensor triangle(std::string_view op, const Tensor& x, int64_t diagonal, bool lower,
                const Loc& loc) {
  ops::require_defined(op, x, "the operand", loc);
  if (x.dim() < 2) {
    ops::fail(op, fmt::format("needs a tensor of at least 2 dims, not {}", describe(x)), loc);
  }
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const Tensor row = reshape(
      arange(0, static_cast<double>(rows), 1, DType::kInt64, x.device(), loc), {rows, 1}, loc);
  const Tensor col = arange(0, static_cast<double>(cols), 1, DType::kInt64, x.device(), loc);
  const Tensor above_diagonal = sub(col, row, loc);  // col - row, [rows, cols]
  const auto d = static_cast<double>(diagonal);
  const Tensor keep = lower ? lt(above_diagonal, d + 1, loc) : gt(above_diagonal, d - 1, loc);
  return where(keep, x, zeros({}, x.dtype(), x.device(), loc), loc);
}

}  // namespace

Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max, Loc loc) {
  ops::require_defined("clamp", x, "the operand", loc);
  if (!min && !max) {
    ops::fail("clamp", fmt::format("needs a min or a max (clamping {})", describe(x)), loc);
  }
  if (x.dtype() == DType::kBool) {
    ops::fail("clamp", fmt::format("is not defined for {}", describe(x)), loc);
  }
  const DType dtype = clamp_dtype(x, min, max);
  Tensor out = x;
  if (min) out = bounded(Op::kMaximum, out, *min, dtype, loc);
  if (max) out = bounded(Op::kMinimum, out, *max, dtype, loc);
  if (autograd::should_record(x)) {
    autograd::record(autograd::kClampBackward, out, {x}, IntAttrs{min ? 1 : 0, max ? 1 : 0},
                     RealAttrs{min.value_or(0), max.value_or(0)});
  }
  return out;
}

Tensor clamp(const Tensor& x, const Tensor& min, const Tensor& max, Loc loc) {
  ops::require_defined("clamp", x, "the operand", loc);
  if (!min.defined() && !max.defined()) {
    ops::fail("clamp", fmt::format("needs a min or a max (clamping {})", describe(x)), loc);
  }
  (void)ops::common_device("clamp", {&x, &min, &max}, loc);
  std::vector<Tensor> inputs = {x};
  for (const Tensor* bound : {&min, &max}) {
    if (!bound->defined()) continue;
    if (x.dtype() == DType::kBool || bound->dtype() == DType::kBool) {
      ops::fail("clamp",
                fmt::format("is not defined for pred ({} and {})", describe(x), describe(*bound)),
                loc);
    }
    (void)ops::broadcast_shapes("clamp", x.shape(), bound->shape(), loc, &x, bound);
    inputs.push_back(*bound);
  }
  Tensor out;
  {
    NoGradGuard no_grad;  // one derivative for the whole op, recorded below
    out = min.defined() ? maximum(x, min, loc) : x;
    if (max.defined()) out = minimum(out, max, loc);
  }
  if (autograd::should_record_list(inputs)) {
    autograd::record(autograd::kClampTensorBackward, out, inputs,
                     IntAttrs{min.defined() ? 1 : 0, max.defined() ? 1 : 0});
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value, Loc loc) {
  ops::require_defined("masked_fill", x, "the operand", loc);
  ops::require_defined("masked_fill", mask, "the mask", loc);
  (void)ops::common_device("masked_fill", {&x, &mask}, loc);
  if (mask.dtype() != DType::kBool) {
    ops::fail("masked_fill", fmt::format("the mask must be pred (bool), not {}", describe(mask)),
              loc);
  }
  (void)ops::broadcast_shapes("masked_fill", x.shape(), mask.shape(), loc, &x, &mask);
  // An integer tensor takes the value truncated and a bool one `value != 0`, as torch converts it.
  const double fill = is_floating(x.dtype())      ? value
                      : x.dtype() == DType::kBool ? (value != 0 ? 1.0 : 0.0)
                                                  : std::trunc(value);
  return where(mask, scalar_tensor(fill, x.dtype(), x.device(), loc), x, loc);
}

Tensor tril(const Tensor& x, int64_t diagonal, Loc loc) {
  return triangle("tril", x, diagonal, true, loc);
}

Tensor triu(const Tensor& x, int64_t diagonal, Loc loc) {
  return triangle("triu", x, diagonal, false, loc);
}

}  // namespace axle
