// graph/nn: loss functions, as torch.nn.functional's.
#pragma once

#include <cstdint>
#include <source_location>

#include "graph/tensor.h"

namespace axle::nn {

/// How per-sample losses combine.
enum class Reduction { kMean, kSum, kNone };

/// Negative log-likelihood of class `target` (s32/s64 [N] or [N, d1, ...]) under `log_probs`
/// [N, C] or [N, C, d1, ...]. Targets equal to ignore_index contribute nothing; the mean is over
/// the rest (NaN when every target is ignored), as torch.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::kMean, int64_t ignore_index = -100,
                std::source_location where = std::source_location::current());

/// log_softmax over the class dim (1) then nll_loss, with label smoothing ε: the target
/// distribution is 1 - ε on the class plus ε / C on every class, as torch's cross_entropy. Shapes
/// and ignore_index as nll_loss.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::kMean, int64_t ignore_index = -100,
                     std::source_location where = std::source_location::current());

/// Squared error, elementwise (shapes broadcast).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                std::source_location where = std::source_location::current());

}  // namespace axle::nn
