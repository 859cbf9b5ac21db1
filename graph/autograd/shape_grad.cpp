// graph/autograd: derivatives of the shape and data-movement ops. Gathers scatter their gradient
// back with kScatterAdd (indices may repeat: their gradients add up); slices pad theirs with
// zeros.
#include <vector>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"

namespace axle::autograd {
namespace {

void reshape_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = reshape(g, dims_of(fn.input(0).shape()));
}

void permute_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const IntAttrs& perm = fn.ints();
  std::vector<int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[static_cast<std::size_t>(perm[i])] = i;
  grads[0] = permute(g, inverse);
}

// The sum over the expanded dims is backward()'s, as for any broadcast.
void expand_backward(const GradFn&, const Tensor& g, GradList& grads) { grads[0] = g; }

void slice_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const int64_t dim = fn.ints()[0], start = fn.ints()[1], step = fn.ints()[2];
  const Tensor& x = fn.input(0);
  const int64_t size = x.size(static_cast<int>(dim));
  const int64_t length = g.size(static_cast<int>(dim));
  if (length == 0) {
    grads[0] = zeros(x.shape(), g.dtype(), g.device());
    return;
  }
  const int64_t span = (length - 1) * step + 1;
  grads[0] = pad_dim(g, dim, start, size - start - span, step - 1);
}

void cat_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const int64_t dim = fn.ints()[0];
  int64_t offset = 0;
  for (std::size_t i = 0; i < fn.num_inputs(); ++i) {
    const int64_t size = fn.input(i).size(static_cast<int>(dim));
    if (fn.needs_grad(i)) grads[i] = slice(g, dim, offset, offset + size);
    offset += size;
  }
}

void index_select_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);
  const Tensor& index = fn.input(1);
  if (x.dim() == 0) {  // one element, selected once
    grads[0] = reshape(g, {});
    return;
  }
  const int64_t dim = fn.ints()[0];
  // The index along `dim`, the same for every other coordinate of the gradient.
  std::vector<int64_t> along(static_cast<std::size_t>(x.dim()), 1);
  along[static_cast<std::size_t>(dim)] = index.numel();
  const Tensor spread = expand(reshape(index, along), dims_of(g.shape()));
  grads[0] = scatter_add(zeros(x.shape(), g.dtype(), g.device()), dim, spread, g);
}

void gather_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Tensor& x = fn.input(0);
  grads[0] = scatter_add(zeros(x.shape(), g.dtype(), g.device()), fn.ints()[0], fn.input(1), g);
}

void scatter_add_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  if (fn.needs_grad(0)) grads[0] = g;
  if (fn.needs_grad(2)) grads[2] = gather(g, fn.ints()[0], fn.input(1));
}

}  // namespace

const Derivative kReshapeBackward{"ViewBackward", reshape_backward};
const Derivative kPermuteBackward{"PermuteBackward", permute_backward};
const Derivative kExpandBackward{"ExpandBackward", expand_backward};
const Derivative kSliceBackward{"SliceBackward", slice_backward};
const Derivative kCatBackward{"CatBackward", cat_backward};
const Derivative kIndexSelectBackward{"IndexSelectBackward", index_select_backward};
const Derivative kGatherBackward{"GatherBackward", gather_backward};
const Derivative kScatterAddBackward{"ScatterAddBackward", scatter_add_backward};

}  // namespace axle::autograd
