// graph/nn: embedding, layer_norm and dropout, made of tensor ops (their gradients are those
// ops'). Arguments are checked here, so an error names the function the user called.
#include "axle/graph/nn/functional.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle::nn {

Tensor embedding(const Tensor& indices, const Tensor& weight, Loc where) {
  ops::require_defined("embedding", indices, "the indices", where);
  ops::require_defined("embedding", weight, "the weight", where);
  (void)ops::common_device("embedding", {&indices, &weight}, where);
  if (indices.dtype() != DType::kInt64 && indices.dtype() != DType::kInt32) {
    ops::fail("embedding",
              fmt::format("the indices must be s32 or s64, not {}", ops::describe(indices)), where);
  }
  if (weight.dim() != 2) {
    ops::fail(
        "embedding",
        fmt::format("the weight must be [num_embeddings, dim], not {}", ops::describe(weight)),
        where);
  }
  std::vector<int64_t> shape(indices.shape().dims().begin(), indices.shape().dims().end());
  shape.push_back(weight.size(1));
  return reshape(index_select(weight, 0, flatten(indices, 0, -1, where), where), shape, where);
}

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape,
                  const Tensor& weight, const Tensor& bias, double eps, Loc where) {
  ops::require_defined("layer_norm", x, "the input", where);
  (void)ops::common_device("layer_norm", {&x, &weight, &bias}, where);
  const auto k = static_cast<int>(normalized_shape.size());
  const int rank = x.dim();
  bool fits = k >= 1 && rank >= k;
  for (int i = 0; fits && i < k; ++i) fits = x.size(rank - k + i) == normalized_shape[i];
  if (!fits) {
    ops::fail("layer_norm",
              fmt::format("the input {} does not end in normalized_shape [{}]", ops::describe(x),
                          fmt::join(normalized_shape, ",")),
              where);
  }
  if (!is_floating(x.dtype())) {
    ops::fail("layer_norm",
              fmt::format("the input must be floating-point, not {}", ops::describe(x)), where);
  }
  const Shape expected(normalized_shape);
  for (const auto& [tensor, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (tensor->defined() && !(tensor->shape() == expected)) {
      ops::fail("layer_norm",
                fmt::format("the {} is {}, expected shape {}", name, ops::describe(*tensor),
                            expected.to_string()),
                where);
    }
  }
  // On autocast's f32 list: in a region, bf16 operands are normalised in f32.
  const bool amp = ops::autocast_dtype().has_value();
  const Tensor input = amp ? ops::autocast_cast(x, DType::kFloat32, where) : x;
  const ops::AutocastSuspended off;
  // One node normalises each row (kLayerNorm); the weight and bias are elementwise ops, which
  // the compiler fuses.
  Tensor y = ops::make_result(Op::kLayerNorm, input.dtype(), input.shape(),
                              Operands{input.impl()->value_node(where)}, input.device(), where,
                              IntAttrs{k}, RealAttrs{eps});
  if (autograd::should_record(input)) {
    autograd::record(autograd::kLayerNormBackward, y, {input}, IntAttrs{k}, RealAttrs{eps});
  }
  if (weight.defined())
    y = mul(y, amp ? ops::autocast_cast(weight, DType::kFloat32, where) : weight, where);
  if (bias.defined())
    y = add(y, amp ? ops::autocast_cast(bias, DType::kFloat32, where) : bias, where);
  return y;
}

Tensor dropout(const Tensor& x, double p, bool training, Loc where) {
  ops::require_defined("dropout", x, "the input", where);
  if (!(p >= 0 && p <= 1)) {
    ops::fail("dropout", fmt::format("p = {} is outside [0, 1] (input {})", p, ops::describe(x)),
              where);
  }
  if (!training || p == 0) return x;
  if (!is_floating(x.dtype())) {
    ops::fail("dropout", fmt::format("the input must be floating-point, not {}", ops::describe(x)),
              where);
  }
  if (p == 1) return mul(x, 0.0, where);
  const Tensor keep = bernoulli(x.shape(), 1 - p, x.dtype(), x.device(), where);
  return mul(mul(x, keep, where), 1.0 / (1 - p), where);
}

}  // namespace axle::nn
