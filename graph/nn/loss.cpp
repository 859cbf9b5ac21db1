// graph/nn: losses. The class term is a product with the one-hot target, so every loss is made of
// elementwise ops and reductions whose gradients need no scatter.
#include "graph/nn/loss.h"

#include <fmt/format.h>

#include "graph/ops.h"
#include "graph/ops/op_util.h"

namespace axle::nn {
namespace {

Tensor reduce(const Tensor& per_sample, Reduction reduction, const Loc& where) {
  switch (reduction) {
    case Reduction::kMean:
      return mean(per_sample, {}, false, where);
    case Reduction::kSum:
      return sum(per_sample, {}, false, where);
    case Reduction::kNone:
      break;
  }
  return per_sample;
}

void check_classes(std::string_view op, const Tensor& scores, const Tensor& target,
                   const Loc& where) {
  ops::require_defined(op, scores, "the input", where);
  ops::require_defined(op, target, "the target", where);
  if (scores.dim() != 2 || target.dim() != 1 || target.size(0) != scores.size(0)) {
    ops::fail(op,
              fmt::format("expects an input [N, C] and a target [N], got {} and {}",
                          ops::describe(scores), ops::describe(target)),
              where);
  }
  if (!is_floating(scores.dtype())) {
    ops::fail(op, fmt::format("the input must be floating-point, not {}", ops::describe(scores)),
              where);
  }
  if (target.dtype() != DType::kI64 && target.dtype() != DType::kI32) {
    ops::fail(op,
              fmt::format("the target must hold class indices (s32 or s64), not {}",
                          ops::describe(target)),
              where);
  }
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction, Loc where) {
  check_classes("nll_loss", log_probs, target, where);
  const Tensor picked = cast(one_hot(target, log_probs.size(1), where), log_probs.dtype(), where);
  return reduce(-sum(log_probs * picked, {1}, false, where), reduction, where);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing,
                     Reduction reduction, Loc where) {
  check_classes("cross_entropy", logits, target, where);
  if (!(label_smoothing >= 0 && label_smoothing <= 1)) {
    ops::fail("cross_entropy", fmt::format("label_smoothing {} is not in [0, 1]", label_smoothing),
              where);
  }
  const Tensor log_probs = log_softmax(logits, 1, where);
  const int64_t classes = logits.size(1);
  Tensor weights = cast(one_hot(target, classes, where), logits.dtype(), where);
  if (label_smoothing > 0) {
    weights = weights * (1 - label_smoothing) + label_smoothing / static_cast<double>(classes);
  }
  return reduce(-sum(log_probs * weights, {1}, false, where), reduction, where);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc where) {
  // Checked here so that an error names mse_loss, not the sub inside it.
  ops::require_defined("mse_loss", input, "the input", where);
  ops::require_defined("mse_loss", target, "the target", where);
  if (!is_floating(input.dtype()) || !is_floating(target.dtype())) {
    ops::fail("mse_loss",
              fmt::format("expects floating-point operands, got {} and {}", ops::describe(input),
                          ops::describe(target)),
              where);
  }
  (void)ops::broadcast_shapes("mse_loss", input.shape(), target.shape(), where, &input, &target);
  const Tensor diff = sub(input, target, where);
  return reduce(mul(diff, diff, where), reduction, where);
}

}  // namespace axle::nn
