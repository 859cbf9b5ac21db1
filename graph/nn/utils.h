// graph/nn: torch.nn.utils — gradient clipping.
#pragma once

#include <source_location>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle::nn::utils {

/// Scales the gradients of `params` so that their joint `norm_type`-norm (infinity: the largest
/// magnitude) is at most `max_norm`, as torch.nn.utils.clip_grad_norm_, without reading anything
/// back: the scale is where(coef < 1, coef, 1) with coef = max_norm / (norm + 1e-6). Returns the
/// norm before clipping (a pending 0-d tensor); parameters without a gradient are left out.
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       std::source_location where = std::source_location::current());

}  // namespace axle::nn::utils
