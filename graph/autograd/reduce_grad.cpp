// graph/autograd: derivatives of the reductions, softmax and cumsum. The reductions record the IR's
// attributes, [keepdim, dims...] with the dims sorted and non-negative (every dim when the user
// gave none), so each gradient is spread back over exactly the dims the forward reduced.
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"

namespace axle::autograd {
namespace {

struct Reduction {
  bool keepdim;
  std::vector<int64_t> dims;
};

Reduction reduction_of(const GradFn& fn) {
  const IntAttrs& ints = fn.ints();
  return {ints[0] != 0, std::vector<int64_t>(ints.begin() + 1, ints.end())};
}

void sum_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Reduction r = reduction_of(fn);
  grads[0] = unreduce(g, fn.input(0).shape(), r.dims, r.keepdim);
}

void mean_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Reduction r = reduction_of(fn);
  const Shape& shape = fn.input(0).shape();
  int64_t count = 1;
  for (int64_t d : r.dims) count *= shape[static_cast<int>(d)];
  grads[0] = div(unreduce(g, shape, r.dims, r.keepdim), static_cast<double>(count));
}

// As torch, the gradient is shared evenly among the elements equal to the extremum.
void extremum_backward(const GradFn& fn, const Tensor& g, GradList& grads, bool is_max) {
  const Reduction r = reduction_of(fn);
  const Tensor& x = fn.input(0);
  // The forward's own reduction (same attributes, so CSE shares it).
  const Tensor y = is_max ? amax(x, r.dims, r.keepdim) : amin(x, r.dims, r.keepdim);
  const Tensor hits = cast(eq(x, unreduce(y, x.shape(), r.dims, r.keepdim)), g.dtype());
  const Tensor count = sum(hits, r.dims, /*keepdim=*/true);
  grads[0] = div(mul(unreduce(g, x.shape(), r.dims, r.keepdim), hits), count);
}

void amax_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  extremum_backward(fn, g, grads, true);
}
void amin_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  extremum_backward(fn, g, grads, false);
}

void logsumexp_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const Reduction r = reduction_of(fn);
  const Tensor& x = fn.input(0);
  const Tensor lse = logsumexp(x, r.dims, r.keepdim);
  const Tensor softmax = exp(sub(x, unreduce(lse, x.shape(), r.dims, r.keepdim)));
  grads[0] = mul(unreduce(g, x.shape(), r.dims, r.keepdim), softmax);
}

void softmax_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const int64_t dim = fn.ints()[0];
  const Tensor y = softmax(fn.input(0), dim);
  grads[0] = mul(y, sub(g, sum(mul(g, y), {dim}, /*keepdim=*/true)));
}

void log_softmax_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const int64_t dim = fn.ints()[0];
  const Tensor y = log_softmax(fn.input(0), dim);
  grads[0] = sub(g, mul(exp(y), sum(g, {dim}, /*keepdim=*/true)));
}

// out[i] = sum of x[j] over j <= i, so x[j] gets the sum of g[i] over i >= j: cumsum in reverse.
void cumsum_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  grads[0] = reverse_cumsum(g, fn.ints()[0]);
}

}  // namespace

const Derivative kCumsumBackward{"CumsumBackward", cumsum_backward};

const Derivative& reduction_derivative(Op op) {
  static const Derivative kSum{"SumBackward", sum_backward};
  static const Derivative kMean{"MeanBackward", mean_backward};
  static const Derivative kAmax{"AmaxBackward", amax_backward};
  static const Derivative kAmin{"AminBackward", amin_backward};
  static const Derivative kLogSumExp{"LogsumexpBackward", logsumexp_backward};
  static const Derivative kSoftmax{"SoftmaxBackward", softmax_backward};
  static const Derivative kLogSoftmax{"LogSoftmaxBackward", log_softmax_backward};
  switch (op) {
    case Op::kSum:
      return kSum;
    case Op::kMean:
      return kMean;
    case Op::kReduceMax:
      return kAmax;
    case Op::kReduceMin:
      return kAmin;
    case Op::kLogSumExp:
      return kLogSumExp;
    case Op::kSoftmax:
      return kSoftmax;
    case Op::kLogSoftmax:
      return kLogSoftmax;
    default:
      throw std::logic_error("autograd: no derivative for " + std::string(op_name(op)));
  }
}

}  // namespace axle::autograd
