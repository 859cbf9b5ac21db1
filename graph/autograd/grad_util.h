// graph/autograd: building blocks the derivative formulas share. Each traces public ops (the
// engine runs formulas with grad mode off, so nothing here is recorded).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "axle/graph/ops.h"

namespace axle::autograd {

/// `grad` summed over the dims it was broadcast along, back to `shape` (NumPy broadcasting
/// in reverse). Plane sums of a max_pool2d gradient (a conv bias's, under relu and pooling) are
/// taken over the pooled gradient instead: the same terms, a quarter of the reads for 2x2. Throws
/// std::logic_error when `shape` does not broadcast to grad's shape.
[[nodiscard]] Tensor sum_to(const Tensor& grad, const Shape& shape);

/// The gradient of a reduction of a tensor of `shape` over `dims` (sorted, non-negative), spread
/// back over it: reshaped to keep the reduced dims as 1 (unless `keepdim` already did), then
/// expanded.
[[nodiscard]] Tensor unreduce(const Tensor& grad, const Shape& shape, std::span<const int64_t> dims,
                              bool keepdim);

/// `t` padded along `dim` as XLA's Pad does: `interior` zeros between neighbours, then `lo`
/// zeros before and `hi` after (a negative count crops that many elements instead).
[[nodiscard]] Tensor pad_dim(const Tensor& t, int64_t dim, int64_t lo, int64_t hi,
                             int64_t interior = 0);

/// Sums of t along `dim` (non-negative) from each element to the end: cumsum in reverse.
[[nodiscard]] Tensor reverse_cumsum(const Tensor& t, int64_t dim);

/// A 0-d zero of t's dtype on t's device (where() broadcasts it).
[[nodiscard]] Tensor scalar_zero(const Tensor& t);

/// `shape` as a dims vector (what reshape and expand take).
[[nodiscard]] std::vector<int64_t> dims_of(const Shape& shape);

}  // namespace axle::autograd
