// graph/ops: topk, as torch.topk. The kTopK node gives the positions; the values are a gather
// at them, so their gradient is gather's (scattered back to the positions).
#include <fmt/format.h>

#include "axle/graph/op_util.h"

namespace axle {

TopK topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted, Loc where) {
  // Results always come sorted: torch leaves the order open when !sorted, and sorting costs
  // nothing extra in a partial sort that ranks the k anyway.
  (void)sorted;
  ops::require_defined("topk", x, "the operand", where);
  if (x.dtype() == DType::kBool) {
    ops::fail("topk", fmt::format("is not defined for {}", ops::describe(x)), where);
  }
  const int64_t d = ops::normalize_dim("topk", x, dim, x.dim(), where);
  const int64_t size = x.dim() == 0 ? 1 : x.size(static_cast<int>(d));
  if (k < 0 || k > size) {
    ops::fail("topk",
              fmt::format("k = {} is out of range for dim {} of {} (expected 0..{})", k, d,
                          ops::describe(x), size),
              where);
  }
  if (x.dim() == 0) {
    // One element: it is the top 1 (a 0-d result, as torch), and the top 0 is empty.
    if (k == 1) return {x, zeros({}, DType::kInt64, x.device(), where)};
    return {zeros({0}, x.dtype(), x.device(), where), zeros({0}, DType::kInt64, x.device(), where)};
  }
  Shape shape = x.shape();
  shape[static_cast<int>(d)] = k;
  const Tensor indices = ops::make_result(Op::kTopK, DType::kInt64, shape,
                                          Operands{ops::value_as(x, x.dtype(), where)}, x.device(),
                                          where, IntAttrs{d, k, largest ? 1 : 0});
  return {gather(x, d, indices, where), indices};
}

}  // namespace axle
