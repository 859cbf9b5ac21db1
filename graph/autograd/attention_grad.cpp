// graph/autograd: the derivative of the fused scaled_dot_product_attention (graph/nn/
// attention.cpp). One kScaledDotProductAttentionBackward node recomputes the softmax block by
// block from q, k and the logsumexp the forward node kept, and gives the rows of dq, dk and dv
// of each batch entry one under another; they are sliced out here. The math path's gradient is that
// of its ops.
#include <algorithm>
#include <vector>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"
#include "axle/graph/op_util.h"

namespace axle::autograd {
namespace {

// Saved inputs: [q, k, v, the forward node's output [batch..., L, Ev + 1] (, mask)]; ints and
// reals are the forward node's. The gradients come in the output's batch shape (backward() sums
// broadcast dims back to each input's).
void attention_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& q = fn.input(0);
  const Tensor& k = fn.input(1);
  const Tensor& v = fn.input(2);
  const Tensor& forward = fn.input(3);
  const Loc where = Loc::current();
  const DType dtype = promote_types(promote_types(q.dtype(), k.dtype()), v.dtype());
  const int64_t L = q.size(-2), S = k.size(-2), E = q.size(-1), Ev = v.size(-1);
  std::vector<int64_t> batch = dims_of(forward.shape());
  batch.resize(batch.size() - 2);
  Shape shape(batch);
  const int64_t width = std::max(E, Ev);
  shape.push_back(L + 2 * S);
  shape.push_back(width);
  Operands operands{ops::value_as(q, dtype, where), ops::value_as(k, dtype, where),
                    ops::value_as(v, dtype, where)};
  operands.push_back(ops::value_as(forward, forward.dtype(), where));
  operands.push_back(ops::value_as(g, dtype, where));
  if (fn.num_inputs() > 4) {
    const Tensor& mask = fn.input(4);
    operands.push_back(
        ops::value_as(mask, mask.dtype() == DType::kBool ? DType::kBool : dtype, where));
  }
  // The gradients in the operands' dtype: bf16 ones are rounded once from the kernel's f32
  // sums, not stored in f32 and cast after.
  const Tensor packed =
      ops::make_result(Op::kScaledDotProductAttentionBackward, dtype, shape, std::move(operands),
                       g.device(), where, fn.ints(), fn.reals());
  // Rows [start, start + rows) and the first `cols` columns: one slice when cols is the width
  // (E = Ev, as in every transformer).
  auto part = [&](int64_t start, int64_t rows, int64_t cols) {
    const Tensor r = slice(packed, -2, start, start + rows);
    return cols == width ? r : slice(r, -1, 0, cols);
  };
  if (fn.needs_grad(0)) grads[0] = part(0, L, E);
  if (fn.needs_grad(1)) grads[1] = part(L, S, E);
  if (fn.needs_grad(2)) grads[2] = part(L + S, S, Ev);
}

}  // namespace

const Derivative kScaledDotProductAttentionBackward{"ScaledDotProductAttentionBackward",
                                                    attention_backward};

}  // namespace axle::autograd
