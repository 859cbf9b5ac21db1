// graph/nn: scaled_dot_product_attention, composed of matmul, masked_fill and softmax as
// torch's math reference is (a fused kernel is a backend's later concern); its gradient is that
// of the ops it is made of.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "graph/nn/functional.h"
#include "graph/ops.h"
#include "graph/ops/op_util.h"

namespace axle::nn {

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale, Loc where) {
  constexpr std::string_view kOp = "scaled_dot_product_attention";
  ops::require_defined(kOp, q, "the query", where);
  ops::require_defined(kOp, k, "the key", where);
  ops::require_defined(kOp, v, "the value", where);
  (void)ops::common_device(kOp, {&q, &k, &v, &attn_mask}, where);
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2 || q.size(-1) != k.size(-1) ||
      k.size(-2) != v.size(-2)) {
    ops::fail(kOp,
              fmt::format("expects q [..., L, E], k [..., S, E] and v [..., S, Ev], got {}, {} "
                          "and {}",
                          ops::describe(q), ops::describe(k), ops::describe(v)),
              where);
  }
  if (!is_floating(q.dtype()) || !is_floating(k.dtype()) || !is_floating(v.dtype())) {
    ops::fail(kOp,
              fmt::format("q, k and v must be floating-point, got {}, {} and {}", ops::describe(q),
                          ops::describe(k), ops::describe(v)),
              where);
  }
  if (is_causal && attn_mask.defined()) {
    ops::fail(kOp,
              fmt::format("takes is_causal or an attn_mask, not both (mask {})",
                          ops::describe(attn_mask)),
              where);
  }
  const int64_t queries = q.size(-2), keys = k.size(-2);
  const double factor = scale ? *scale : 1 / std::sqrt(static_cast<double>(q.size(-1)));
  Tensor scores = mul(matmul(q, transpose(k, -2, -1, where), where), factor, where);
  constexpr double kMinusInf = -std::numeric_limits<double>::infinity();
  if (is_causal) {
    const Tensor causal = tril(ones({queries, keys}, DType::kBool, q.device(), where), 0, where);
    scores = masked_fill(scores, logical_not(causal, where), kMinusInf, where);
  } else if (attn_mask.defined()) {
    (void)ops::broadcast_shapes(kOp, attn_mask.shape(), scores.shape(), where, &attn_mask);
    if (attn_mask.dtype() == DType::kBool) {
      scores = masked_fill(scores, logical_not(attn_mask, where), kMinusInf, where);
    } else if (is_floating(attn_mask.dtype())) {
      scores = add(scores, attn_mask, where);
    } else {
      ops::fail(kOp,
                fmt::format("the attn_mask must be bool or floating-point, not {}",
                            ops::describe(attn_mask)),
                where);
    }
  }
  return matmul(softmax(scores, -1, where), v, where);
}

}  // namespace axle::nn
