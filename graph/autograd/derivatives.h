// graph/autograd: the derivative of every differentiable op, by op family (elementwise_grad.cpp,
// reduce_grad.cpp, linalg_grad.cpp, conv_grad.cpp, attention_grad.cpp, shape_grad.cpp). The ops in
// graph/ops/ record them; the attributes each one expects are listed with it.
#pragma once

#include "axle/graph/autograd/function.h"
#include "axle/graph/op.h"

namespace axle::autograd {

// --- elementwise: inputs as the op's, no attributes unless listed ---
/// add sub mul div pow maximum minimum of two tensors.
[[nodiscard]] const Derivative& binary_derivative(Op op);
/// add sub mul div pow of a tensor and a scalar; reals = [scalar], ints = [scalar_first].
[[nodiscard]] const Derivative& scalar_derivative(Op op);
/// neg relu abs, and gelu (ints = [approximate: 1 tanh]). The float functions' (exp, log, ...)
/// are in their rows (graph/ops/float_functions.h).
[[nodiscard]] const Derivative& unary_derivative(Op op);
extern const Derivative kWhereBackward;  ///< [condition, a, b]
extern const Derivative kCastBackward;   ///< [x]
extern const Derivative kGeluBackwardBackward;  ///< [grad, x]; ints = [approximate]
/// clamp with scalar bounds: [x]; ints = [has_min, has_max], reals = [min, max].
extern const Derivative kClampBackward;
/// clamp with tensor bounds: [x, min, max] without the missing ones; ints = [has_min, has_max].
extern const Derivative kClampTensorBackward;

// --- reductions: [x] ---
/// sum mean amax amin logsumexp (ints = [keepdim, dims...], as the IR's), softmax log_softmax
/// (ints = [dim]).
[[nodiscard]] const Derivative& reduction_derivative(Op op);
extern const Derivative kCumsumBackward;  ///< [x]; ints = [dim]

// --- linear algebra, convolution, pooling ---
extern const Derivative kMatmulBackward;     ///< [a, b]; ints = [transpose_b] (linear's weight)
extern const Derivative kConv2dBackward;     ///< [x, w]; ints = the kConv2d node's
extern const Derivative kConvTranspose2dBackward;  ///< [x, w]; ints = the kConvTranspose2d node's
extern const Derivative kMaxPool2dBackward;  ///< [x]; ints = the kMaxPool2d node's
extern const Derivative kAvgPool2dBackward;  ///< [x]; ints = the kAvgPool2d node's
/// relu's gradient where `g`, the gradient of relu(x), is a max_pool2d gradient over relu(x)
/// itself (conv, relu, pool): that pool's gradient masked on the pooled output instead of on the
/// full-size x, exactly equal to masking it afterwards. Undefined when `g` is anything else.
[[nodiscard]] Tensor relu_grad_through_max_pool(const Tensor& x, const Tensor& g);

// --- attention ---
/// The fused scaled_dot_product_attention: [q, k, v, the fused node's output (, mask)]; ints and
/// reals as the fused node's.
extern const Derivative kScaledDotProductAttentionBackward;

// --- normalisation ---
/// layer_norm's normalisation (kLayerNorm): [x]; ints = [k]; reals = [eps], as the node's.
extern const Derivative kLayerNormBackward;
/// batch_norm in training: [x, weight, bias, mean, rstd] (the batch's statistics per channel).
extern const Derivative kBatchNormBackward;

// --- shape and data movement ---
extern const Derivative kReshapeBackward;      ///< [x] (reshape, view, flatten, squeeze, ...)
extern const Derivative kPermuteBackward;      ///< [x]; ints = permutation
extern const Derivative kExpandBackward;       ///< [x]
extern const Derivative kSliceBackward;        ///< [x]; ints = [dim, start, step]
extern const Derivative kCatBackward;          ///< [x0, x1, ...]; ints = [dim]
extern const Derivative kIndexSelectBackward;  ///< [x, index]; ints = [dim]
extern const Derivative kGatherBackward;       ///< [x, index]; ints = [dim]
extern const Derivative kScatterAddBackward;   ///< [x, index, src]; ints = [dim]

}  // namespace axle::autograd
