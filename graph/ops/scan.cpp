// graph/ops: cumsum, as torch.cumsum — one kCumsum node, whose kernel keeps f32 sums accurate
// by adding in f64. Its gradient is the same sum taken in reverse (the node's reverse flag).
#include <fmt/format.h>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"

namespace axle {

Tensor cumsum(const Tensor& x, int64_t dim, Loc where) {
  if (ops::autocast_dtype()) [[unlikely]] {  // on autocast's f32 list
    const ops::AutocastSuspended off;
    return cumsum(ops::autocast_cast(x, DType::kFloat32, where), dim, where);
  }
  ops::require_defined("cumsum", x, "the operand", where);
  const int64_t d = ops::normalize_dim("cumsum", x, dim, x.dim(), where);
  // Integers and bool sum in s64, as torch.cumsum.
  const DType dtype = is_floating(x.dtype()) ? x.dtype() : DType::kInt64;
  Tensor result =
      ops::make_result(Op::kCumsum, dtype, x.shape(), Operands{ops::value_as(x, dtype, where)},
                       x.device(), where, IntAttrs{d, 0});
  if (autograd::should_record(x)) autograd::record(autograd::kCumsumBackward, result, {x}, {d});
  return result;
}

}  // namespace axle
