// graph/autograd: the derivative of batch_norm in training (graph/nn/functional.cpp), as
// PyTorch's batch-norm backward: with x̂ = (x - mean) rstd per channel and M values a channel,
//   dbias = sum(g), dweight = sum(g x̂), dx = weight rstd (g - dbias / M - x̂ dweight / M),
// two sums over the channel's values and one elementwise pass, where the gradient of the ops
// that compute the statistics would take a dozen passes.
#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"
#include "axle/graph/ops.h"

namespace axle::autograd {
namespace {

// Inputs [x, weight, bias, mean, rstd]: the statistics saved by the forward, not trained.
void batch_norm_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);
  const int rank = x.dim();
  std::vector<int64_t> dims{0}, channel_shape(static_cast<std::size_t>(rank), 1);
  for (int d = 2; d < rank; ++d) dims.push_back(d);
  channel_shape[1] = -1;
  auto per_channel = [&](const Tensor& t) { return reshape(t, channel_shape); };
  const Tensor& rstd = fn.input(4);
  const Tensor normalised = (x - per_channel(fn.input(3))) * per_channel(rstd);
  const Tensor g_sum = sum(g, dims);
  const Tensor gx_sum = sum(g * normalised, dims);
  if (fn.needs_grad(1)) grads[1] = gx_sum;
  if (fn.needs_grad(2)) grads[2] = g_sum;
  if (fn.needs_grad(0)) {
    const auto m = static_cast<double>(x.numel() / x.size(1));
    grads[0] = per_channel(fn.input(1) * rstd) *
               (g - per_channel(g_sum * (1 / m)) - normalised * per_channel(gx_sum * (1 / m)));
  }
}

}  // namespace

const Derivative kBatchNormBackward{"NativeBatchNormBackward", batch_norm_backward};

}  // namespace axle::autograd
