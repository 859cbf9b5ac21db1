// graph/nn: embedding, layer_norm, batch_norm and dropout, made of tensor ops; their gradients are
// those ops', but for layer_norm's and training batch_norm's, which have derivatives of their own.
// Arguments are checked here, so an error names the function the user called.
#include "axle/graph/nn/functional.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "axle/graph/autograd.h"
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

namespace {

// [C] as [1, C, 1, ...] for an input of `rank` dims.
Tensor per_channel(const Tensor& t, int rank, const Loc& where) {
  std::vector<int64_t> shape(static_cast<std::size_t>(rank), 1);
  shape[1] = -1;
  return reshape(t, shape, where);
}

void check_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                      const Tensor& weight, const Tensor& bias, bool training, const Loc& where) {
  constexpr std::string_view kOp = "batch_norm";
  ops::require_defined(kOp, x, "the input", where);
  (void)ops::common_device(kOp, {&x, &running_mean, &running_var, &weight, &bias}, where);
  if (x.dim() < 2) {
    ops::fail(kOp, fmt::format("the input must be [N, C, ...], not {}", ops::describe(x)), where);
  }
  const int64_t channels = x.size(1);
  const std::pair<const Tensor*, const char*> per_channel_args[] = {{&running_mean, "running_mean"},
                                                                    {&running_var, "running_var"},
                                                                    {&weight, "weight"},
                                                                    {&bias, "bias"}};
  for (const auto& [tensor, name] : per_channel_args) {
    if (tensor->defined() && !(tensor->shape() == Shape{channels})) {
      ops::fail(kOp,
                fmt::format("the {} is {}, expected [{}] for input {}", name,
                            ops::describe(*tensor), channels, ops::describe(x)),
                where);
    }
  }
  if (!training && (!running_mean.defined() || !running_var.defined())) {
    ops::fail(kOp, "outside training it needs running_mean and running_var", where);
  }
  if (training && x.numel() == channels) {  // torch refuses a variance of one value, too
    ops::fail(kOp,
              fmt::format("expected more than 1 value per channel when training, got input {}",
                          ops::describe(x)),
              where);
  }
}

}  // namespace

Tensor batch_norm(const Tensor& given, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight, const Tensor& bias, bool training, double momentum,
                  double eps, Loc where) {
  check_batch_norm(given, running_mean, running_var, weight, bias, training, where);
  // On autocast's f32 list: in a region a bf16 input is normalised in f32.
  const Tensor x =
      ops::autocast_dtype() ? ops::autocast_cast(given, DType::kFloat32, where) : given;
  const ops::AutocastSuspended off;
  const int rank = x.dim();
  const int64_t channels = x.size(1);
  const Tensor w = weight.defined() ? weight : ones(Shape{channels}, x.dtype(), x.device());
  const Tensor b = bias.defined() ? bias : zeros(Shape{channels}, x.dtype(), x.device());
  if (!training) {  // running statistics: an affine map, whose gradient its ops give
    const Tensor scale = w * rsqrt(running_var + eps);
    return x * per_channel(scale, rank, where) + per_channel(b - running_mean * scale, rank, where);
  }
  std::vector<int64_t> dims{0};
  for (int d = 2; d < rank; ++d) dims.push_back(d);
  Tensor mean_c, rstd, y;
  {
    const NoGradGuard no_grad;  // the derivative below stands for these ops
    mean_c = mean(x, dims);
    const Tensor centered = x - per_channel(mean_c, rank, where);
    const Tensor var_c = mean(centered * centered, dims);
    rstd = rsqrt(var_c + eps);
    const Tensor scale = w * rstd;
    y = x * per_channel(scale, rank, where) + per_channel(b - mean_c * scale, rank, where);
    const auto n = static_cast<double>(x.numel() / channels);
    if (running_mean.defined()) {
      running_mean.copy_(running_mean * (1 - momentum) + mean_c * momentum);
    }
    if (running_var.defined()) {
      running_var.copy_(running_var * (1 - momentum) + var_c * (momentum * n / (n - 1)));
    }
  }
  if (autograd::should_record(x, w, b)) {
    autograd::record(autograd::kBatchNormBackward, y, {x, w, b, mean_c, rstd});
  }
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
