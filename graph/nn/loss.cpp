// graph/nn: losses. The class term gathers each sample's target log-probability, as torch's
// nll_loss does (a product with a one-hot target would write and read C values per sample, and
// turn a -inf log-probability of another class into NaN). Class losses take scores [N, C] or
// [N, C, d1, ...] with targets [N] or [N, d1, ...]; targets equal to ignore_index add nothing, and
// the mean is over the others (NaN when none is left, as torch).
#include "axle/graph/nn/loss.h"

#include <fmt/format.h>

#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle::nn {
namespace {

Tensor reduce(const Tensor& per_sample, Reduction reduction, const Loc& loc) {
  switch (reduction) {
    case Reduction::kMean:
      return mean(per_sample, {}, false, loc);
    case Reduction::kSum:
      return sum(per_sample, {}, false, loc);
    case Reduction::kNone:
      break;
  }
  return per_sample;
}

void check_classes(std::string_view op, const Tensor& scores, const Tensor& target,
                   const Loc& loc) {
  ops::require_defined(op, scores, "the input", loc);
  ops::require_defined(op, target, "the target", loc);
  // The target's shape is the input's without the class dim (dim 1).
  bool fits = scores.dim() >= 2 && target.dim() == scores.dim() - 1;
  for (int d = 0; fits && d < target.dim(); ++d) {
    fits = target.size(d) == scores.size(d == 0 ? 0 : d + 1);
  }
  if (!fits) {
    ops::fail(op,
              fmt::format("expects an input [N, C, d1, ...] and a target [N, d1, ...], got {} and "
                          "{}",
                          ops::describe(scores), ops::describe(target)),
              loc);
  }
  if (!is_floating(scores.dtype())) {
    ops::fail(op, fmt::format("the input must be floating-point, not {}", ops::describe(scores)),
              loc);
  }
  if (target.dtype() != DType::kInt64 && target.dtype() != DType::kInt32) {
    ops::fail(op,
              fmt::format("the target must hold class indices (s32 or s64), not {}",
                          ops::describe(target)),
              loc);
  }
}

// scores [N, C, d1, ...] as [N, d1, ..., C], so that each sample's classes are its last dim.
Tensor classes_last(const Tensor& scores, const Loc& loc) {
  if (scores.dim() == 2) return scores;
  std::vector<int64_t> order = {0};
  for (int64_t d = 2; d < scores.dim(); ++d) order.push_back(d);
  order.push_back(1);
  return permute(scores, order, loc);
}

// -log_probs[target] per sample, reduced over the samples not ignored. log_probs has its classes
// last; `smoothing` ε mixes in ε / C of every class's -log p, as torch's label smoothing does.
Tensor class_loss(const Tensor& log_probs, const Tensor& target, double smoothing,
                  Reduction reduction, int64_t ignore_index, const Loc& loc) {
  const int64_t classes = log_probs.size(-1);
  const Tensor ignored = eq(target, static_cast<double>(ignore_index), loc);
  // An ignored target may be no class at all (-100): class 0 is read in its place.
  const Tensor safe_target =
      where(ignored, zeros({}, target.dtype(), target.device(), loc), target, loc);
  const Tensor picked = gather(log_probs, -1, unsqueeze(safe_target, -1, loc), loc);
  Tensor per_sample = -squeeze(picked, -1, loc);
  if (smoothing > 0) {
    const Tensor all_classes = -sum(log_probs, {-1}, false, loc);
    per_sample =
        per_sample * (1 - smoothing) + all_classes * (smoothing / static_cast<double>(classes));
  }
  // where, not a product with 0: an ignored sample's loss may be NaN.
  const Tensor losses =
      where(ignored, zeros({}, per_sample.dtype(), per_sample.device(), loc), per_sample, loc);
  if (reduction != Reduction::kMean) return reduce(losses, reduction, loc);
  const Tensor kept = cast(logical_not(ignored, loc), per_sample.dtype(), loc);
  return div(sum(losses, {}, false, loc), sum(kept, {}, false, loc), loc);
}

// Losses are on autocast's f32 list: in a region a bf16 input is computed in f32 (and the ops the
// loss is made of trace as they are, under an AutocastSuspended).
Tensor f32_in_autocast(const Tensor& t, const Loc& loc) {
  return ops::autocast_dtype() ? ops::autocast_cast(t, DType::kFloat32, loc) : t;
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction,
                int64_t ignore_index, Loc loc) {
  check_classes("nll_loss", log_probs, target, loc);
  const Tensor input = f32_in_autocast(log_probs, loc);
  const ops::AutocastSuspended off;
  return class_loss(classes_last(input, loc), target, 0, reduction, ignore_index, loc);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing,
                     Reduction reduction, int64_t ignore_index, Loc loc) {
  check_classes("cross_entropy", logits, target, loc);
  if (!(label_smoothing >= 0 && label_smoothing <= 1)) {
    ops::fail("cross_entropy", fmt::format("label_smoothing {} is not in [0, 1]", label_smoothing),
              loc);
  }
  const Tensor input = f32_in_autocast(logits, loc);
  const ops::AutocastSuspended off;
  const Tensor log_probs = log_softmax(classes_last(input, loc), -1, loc);
  return class_loss(log_probs, target, label_smoothing, reduction, ignore_index, loc);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction, Loc loc) {
  // Checked here so that an error names mse_loss, not the sub inside it.
  ops::require_defined("mse_loss", input, "the input", loc);
  ops::require_defined("mse_loss", target, "the target", loc);
  if (!is_floating(input.dtype()) || !is_floating(target.dtype())) {
    ops::fail("mse_loss",
              fmt::format("expects floating-point operands, got {} and {}", ops::describe(input),
                          ops::describe(target)),
              loc);
  }
  (void)ops::broadcast_shapes("mse_loss", input.shape(), target.shape(), loc, &input, &target);
  const Tensor a = f32_in_autocast(input, loc), b = f32_in_autocast(target, loc);
  const ops::AutocastSuspended off;
  const Tensor diff = sub(a, b, loc);
  return reduce(mul(diff, diff, loc), reduction, loc);
}

}  // namespace axle::nn
