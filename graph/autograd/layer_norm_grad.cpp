// graph/autograd: the derivative of layer_norm's normalisation (kLayerNorm, graph/nn/
// functional.cpp): one kLayerNormBackward node, which recomputes each row's mean and deviation
// from the saved input. The weight's and bias's gradients are their elementwise ops'.
#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"
#include "axle/graph/op_util.h"

namespace axle::autograd {
namespace {

void layer_norm_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);
  const Loc where = Loc::current();
  grads[0] = ops::make_result(
      Op::kLayerNormBackward, x.dtype(), x.shape(),
      Operands{ops::value_as(g, x.dtype(), where), ops::value_as(x, x.dtype(), where)}, g.device(),
      where, fn.ints(), fn.reals());
}

}  // namespace

const Derivative kLayerNormBackward{"LayerNormBackward", layer_norm_backward};

}  // namespace axle::autograd
