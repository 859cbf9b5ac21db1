// graph/autograd: the derivative of matmul (and of linear, which is matmul with the weight
// transposed, plus an add the add's own derivative covers).
#include <vector>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"

namespace axle::autograd {
namespace {

// torch.matmul's promotion of 1-d operands: a [K] is [1, K], b [K] is [K, 1].
Tensor as_matrix(const Tensor& t, bool is_a) {
  if (t.dim() != 1) return t;
  return reshape(t, is_a ? std::vector<int64_t>{1, t.size(0)} : std::vector<int64_t>{t.size(0), 1});
}

// The transpose of the last two dims (canonicalisation folds it into the matmul reading it).
Tensor mT(const Tensor& t) { return transpose(t, -1, -2); }

// d/da (a @ b) and d/db, with a [..., M, K] and b [..., K, N], or b [N, K] when `transpose_b`
// (linear's weight, always 2-d). Batch dims broadcast; backward() sums them back.
void matmul_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& a = fn.input(0);
  const Tensor& b = fn.input(1);
  const bool transpose_b = fn.ints()[0] != 0;
  const Tensor a2 = as_matrix(a, true);
  const Tensor b2 = as_matrix(b, false);
  // The gradient of the rank >= 2 product, before the dims of 1-d operands were dropped.
  std::vector<int64_t> product = dims_of(g.shape());
  if (a.dim() == 1) product.insert(product.end() - (b.dim() == 1 ? 0 : 1), 1);
  if (b.dim() == 1) product.push_back(1);
  const Tensor g2 = reshape(g, product);
  if (fn.needs_grad(0)) {
    const Tensor ga = matmul(g2, transpose_b ? b2 : mT(b2));
    grads[0] = reshape(sum_to(ga, a2.shape()), dims_of(a.shape()));
  }
  if (fn.needs_grad(1)) {
    Tensor gb;
    if (b2.dim() == 2) {
      // A 2-d b is shared by every batch entry: one matmul over the flattened batch sums them.
      // (Rows counted, not inferred with -1, which a size-0 dim would make ambiguous.)
      int64_t rows = 1;
      for (int d = 0; d + 1 < a2.dim(); ++d) rows *= a2.size(d);
      const Tensor a_flat = reshape(a2, {rows, a2.size(-1)});
      const Tensor g_flat = reshape(g2, {rows, g2.size(-1)});
      gb = transpose_b ? matmul(mT(g_flat), a_flat) : matmul(mT(a_flat), g_flat);
    } else {
      gb = sum_to(matmul(mT(a2), g2), b2.shape());
    }
    grads[1] = reshape(gb, dims_of(b.shape()));
  }
}

}  // namespace

const Derivative kMatmulBackward{"MatmulBackward", matmul_backward};

}  // namespace axle::autograd
