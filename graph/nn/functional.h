// graph/nn: the functional forms of layers, as torch.nn.functional's: embedding, layer_norm,
// batch_norm, dropout and scaled_dot_product_attention. The modules of layers.h call them; losses
// are in loss.h.
#pragma once

#include <optional>
#include <source_location>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle::nn {

/// Rows of `weight` ([num_embeddings, dim]) at integer `indices` of any shape, giving
/// indices.shape + [dim]; the gradient adds into the rows (repeated indices add up).
Tensor embedding(const Tensor& indices, const Tensor& weight,
                 std::source_location where = std::source_location::current());

/// x normalised over its trailing dims `normalized_shape` (mean 0, biased variance 1, eps added
/// to the variance), then scaled by `weight` and shifted by `bias` of that shape when given.
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape,
                  const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5,
                  std::source_location where = std::source_location::current());

/// x [N, C, ...] normalised per channel (dim 1), as torch.nn.functional.batch_norm: in training
/// with the batch's mean and biased variance over every other dim, running_mean and running_var
/// (when defined, [C]) then moved toward them by `momentum` (the variance unbiased), in place;
/// otherwise with running_mean and running_var. Then scaled by `weight` and shifted by `bias`
/// ([C]) when given. In training the gradient is PyTorch's batch-norm backward: two sums over
/// the channel's values and one elementwise pass, recomputed from the saved statistics.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = {}, const Tensor& bias = {}, bool training = false,
                  double momentum = 0.1, double eps = 1e-5,
                  std::source_location where = std::source_location::current());

/// In training, each element zeroed with probability p (from the device's random stream) and the
/// rest scaled by 1 / (1 - p); x itself when !training or p = 0; zeros (x * 0) when p = 1.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true,
               std::source_location where = std::source_location::current());

/// softmax(q k^T * scale + mask) v, as torch.nn.functional.scaled_dot_product_attention: q
/// [..., L, E], k [..., S, E], v [..., S, Ev] (batch dims broadcast); a bool mask [L, S] (or
/// broadcasting to [..., L, S]) keeps where true, a floating one is added; is_causal keeps
/// key j <= query i (no mask then); scale defaults to 1 / sqrt(E). One fused op computes it
/// block by block without storing the [L, S] scores (bf16 accumulates in f32), and its gradient
/// recomputes them the same way. A query that keeps no key gets NaN, as in torch's math path.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& attn_mask = {}, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt,
                                    std::source_location where = std::source_location::current());

/// The same attention composed of matmul, masking and softmax, as torch's math reference
/// (torch.ops.aten._scaled_dot_product_attention_math): what scaled_dot_product_attention runs
/// where the fused op does not apply (a mask that requires grad, empty dims), and what tests
/// compare it with.
Tensor scaled_dot_product_attention_math(
    const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask = {},
    bool is_causal = false, std::optional<double> scale = std::nullopt,
    std::source_location where = std::source_location::current());

}  // namespace axle::nn
