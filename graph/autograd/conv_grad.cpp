// graph/autograd: derivatives of conv2d, conv_transpose2d, max_pool2d and avg_pool2d. conv2d's
// weight gradient convolves the input with the output gradient as kernel, the batch playing the
// channels, as XLA builds it. Its input gradient is conv_transpose2d (the adjoint) for a strided
// convolution; at unit stride, the padded output gradient convolved with the flipped kernel
// (channels swapped per group), on the convolution kernels' faster paths. conv_transpose2d's
// gradients are a convolution and the same weight gradient. The pooling gradients have kernels of
// their own (kMaxPool2dBackward, kAvgPool2dBackward).
#include <algorithm>
#include <array>
#include <vector>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/autograd/grad_util.h"
#include "axle/graph/op_util.h"

namespace axle::autograd {
namespace {

struct ConvAttrs {
  std::array<int64_t, 2> stride, pad, dilation;
  int64_t groups;
};

ConvAttrs conv_attrs(const GradFn& fn) {
  const IntAttrs& i = fn.ints();
  return {{i[0], i[1]}, {i[2], i[3]}, {i[4], i[5]}, i[6]};
}

// w [O, C / G, KH, KW] -> [C, O / G, KH, KW], each group's in/out channels swapped, the kernel
// turned by 180 degrees.
Tensor transposed_kernel(const Tensor& w, int64_t groups) {
  const int64_t o = w.size(0), cg = w.size(1), kh = w.size(2), kw = w.size(3);
  Tensor t = w;
  if (groups == 1) {
    t = transpose(t, 0, 1);
  } else {
    t = reshape(t, {groups, o / groups, cg, kh, kw});
    t = reshape(permute(t, {0, 2, 1, 3, 4}), {groups * cg, o / groups, kh, kw});
  }
  // Turning the kernel reverses its taps in row-major order: one gather over them flattened.
  const int64_t taps = kh * kw;
  if (taps == 1) return t;
  const Tensor reversed = arange(static_cast<double>(taps - 1), -1, -1, DType::kInt64, w.device());
  t = index_select(reshape(t, {t.size(0), t.size(1), taps}), 2, reversed);
  return reshape(t, {t.size(0), t.size(1), kh, kw});
}

// A strided convolution's input gradient as conv_transpose2d, which spreads g through the kernel
// without the zeros a stride-dilated g would hold (three quarters of it at stride 2).
Tensor strided_conv_input_grad(const Tensor& g, const Tensor& x, const Tensor& w,
                               const ConvAttrs& a) {
  ConvTranspose2dOptions options;
  options.stride = {a.stride[0], a.stride[1]};
  options.padding = {a.pad[0], a.pad[1]};
  options.dilation = {a.dilation[0], a.dilation[1]};
  options.groups = a.groups;
  for (int axis = 0; axis < 2; ++axis) {
    const int dim = 2 + axis;
    // The rows past the last window's reach, which the forward skipped.
    const int64_t reach = (g.size(dim) - 1) * a.stride[axis] - 2 * a.pad[axis] +
                          a.dilation[axis] * (w.size(dim) - 1) + 1;
    options.output_padding.at(static_cast<std::size_t>(axis)) = x.size(dim) - reach;
  }
  return conv_transpose2d(g, w, {}, options);
}

Tensor conv_input_grad(const Tensor& g, const Tensor& x, const Tensor& w, const ConvAttrs& a) {
  if (a.stride[0] > 1 || a.stride[1] > 1) return strided_conv_input_grad(g, x, w, a);
  Tensor padded = g;
  std::vector<int64_t> symmetric(2);
  for (int axis = 0; axis < 2; ++axis) {
    const int dim = 2 + axis;
    const int64_t k = w.size(dim), size = x.size(dim), out = g.size(dim);
    // Output i reads input i * stride + j * dilation - pad: spread the gradient out by the
    // stride, then pad it so that a stride-1 conv with the flipped kernel gives `size` values.
    const int64_t lo = a.dilation[axis] * (k - 1) - a.pad[axis];
    const int64_t hi = size + a.pad[axis] - (out - 1) * a.stride[axis] - 1;
    // The part both sides share goes to conv2d's own padding, which stores no zeros.
    symmetric[axis] = std::max<int64_t>(0, std::min(lo, hi));
    padded = pad_dim(padded, dim, lo - symmetric[axis], hi - symmetric[axis], a.stride[axis] - 1);
  }
  Conv2dOptions options;
  options.padding = symmetric;
  options.dilation = {a.dilation[0], a.dilation[1]};
  options.groups = a.groups;
  return conv2d(padded, transposed_kernel(w, a.groups), {}, options);
}

// The weight gradient's convolution gives a tap for every offset the padded input has room for:
// where a stride skipped the input's last rows or columns, more than the kernel's. x is cut (or
// padded more at the start than at the end) so that it gives the kernel's taps alone, rather than
// computing taps that belong to no weight; the padding both sides keep goes in `symmetric`.
Tensor input_for_weight_taps(const Tensor& g, const Tensor& x, const Tensor& w, const ConvAttrs& a,
                             std::array<int64_t, 2>& symmetric) {
  Tensor cut = x;
  for (int axis = 0; axis < 2; ++axis) {
    const int dim = 2 + axis;
    const int64_t k = w.size(dim), out = g.size(dim), pad = a.pad[axis];
    // Tap t reads input t * dilation + y * stride - pad for y < out: the last tap's last read
    // ends the extent the taps need, from -pad on.
    const int64_t needed = (k - 1) * a.dilation[axis] + (out - 1) * a.stride[axis] + 1;
    const int64_t taps = (x.size(dim) + 2 * pad - needed) / a.dilation[axis] + k;
    symmetric[axis] = pad;
    if (taps == k) continue;
    const int64_t hi = needed - x.size(dim) - pad;  // negative: rows cut from the end
    symmetric[axis] = std::max<int64_t>(0, hi);
    cut = pad_dim(cut, dim, pad - symmetric[axis], hi - symmetric[axis]);
  }
  return cut;
}

Tensor conv_weight_grad(const Tensor& g, const Tensor& x_in, const Tensor& w, const ConvAttrs& a) {
  std::array<int64_t, 2> symmetric{};
  const Tensor x = input_for_weight_taps(g, x_in, w, a, symmetric);
  const int64_t n = x.size(0), groups = a.groups;
  const int64_t cg = x.size(1) / groups, o = g.size(1);
  // Input [C / G, G * N, H, W]: the batch becomes each group's channels. Kernel [O, N, OH, OW].
  Tensor input, kernel;
  if (groups == 1) {
    input = transpose(x, 0, 1);
    kernel = transpose(g, 0, 1);
  } else {
    input = reshape(x, {n, groups, cg, x.size(2), x.size(3)});
    input = reshape(permute(input, {2, 1, 0, 3, 4}), {cg, groups * n, x.size(2), x.size(3)});
    kernel = reshape(g, {n, groups, o / groups, g.size(2), g.size(3)});
    kernel = reshape(permute(kernel, {1, 2, 0, 3, 4}), {o, n, g.size(2), g.size(3)});
  }
  Conv2dOptions options;
  options.stride = {a.dilation[0], a.dilation[1]};
  options.padding = {symmetric[0], symmetric[1]};
  options.dilation = {a.stride[0], a.stride[1]};
  options.groups = groups;
  return transpose(conv2d(input, kernel, {}, options), 0, 1);  // [O, C / G, KH, KW]
}

void conv2d_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const ConvAttrs a = conv_attrs(fn);
  const Tensor& x = fn.input(0);
  const Tensor& w = fn.input(1);
  if (fn.needs_grad(0)) grads[0] = conv_input_grad(g, x, w, a);
  if (fn.needs_grad(1)) grads[1] = conv_weight_grad(g, x, w, a);
}

// conv_transpose2d is conv2d's adjoint: x's gradient is the convolution of g, and w's the
// weight gradient of the convolution from the output's space (g's) to the input's (x's).
void conv_transpose2d_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  const ConvAttrs a = conv_attrs(fn);
  const Tensor& x = fn.input(0);
  const Tensor& w = fn.input(1);
  if (fn.needs_grad(0)) {
    Conv2dOptions options;
    options.stride = {a.stride[0], a.stride[1]};
    options.padding = {a.pad[0], a.pad[1]};
    options.dilation = {a.dilation[0], a.dilation[1]};
    options.groups = a.groups;
    Tensor dx = conv2d(g, w, {}, options);
    // An output padding of a dilation or more leaves windows past x's last row.
    if (dx.size(2) > x.size(2)) dx = slice(dx, 2, 0, x.size(2));
    if (dx.size(3) > x.size(3)) dx = slice(dx, 3, 0, x.size(3));
    grads[0] = dx;
  }
  if (fn.needs_grad(1)) grads[1] = conv_weight_grad(x, g, w, a);
}

// The pooling gradients' ops, traced here rather than in graph/ops (they are not user ops).
void pool_backward(const GradFn& fn, const Tensor& g, GradList& grads, bool is_max) {
  const Tensor& x = fn.input(0);
  const Loc where = Loc::current();
  const DType dtype = x.dtype();
  Operands operands;
  if (is_max) operands.push_back(ops::value_as(x, dtype, where));
  operands.push_back(ops::value_as(g, dtype, where));
  grads[0] = ops::make_result(is_max ? Op::kMaxPool2dBackward : Op::kAvgPool2dBackward, dtype,
                              x.shape(), std::move(operands), x.device(), where, fn.ints());
}

void max_pool2d_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  pool_backward(fn, g, grads, true);
}
void avg_pool2d_backward(const GradFn& fn, const Tensor& g, GradList& grads) {
  pool_backward(fn, g, grads, false);
}

}  // namespace

// Pooling's gradient is non-zero only at the tap each window picked, where relu(x) holds the
// window's maximum: x > 0 there exactly when the pooled value is > 0 (a NaN wins the window and
// fails both tests). So masking the small pooled gradient first gives the same bits, and the
// pick may then run over x itself: where the pooled value is > 0 the window holds no NaN and
// its first maximum is the same tap in x as in relu(x); elsewhere only zeros are spread. The
// forward's pooled values come back by CSE.
Tensor relu_grad_through_max_pool(const Tensor& x, const Tensor& g) {
  const TensorImpl& gi = *g.impl();
  if (!gi.pending_ir() || g.dtype() != x.dtype()) return {};
  const Node& pool_grad = *gi.ir();
  if (pool_grad.op() != Op::kMaxPool2dBackward || pool_grad.operands().size() != 2) return {};
  const NodePtr& pooled_input = pool_grad.operands()[0];
  if (pooled_input->op() != Op::kRelu || pooled_input->operands().size() != 1) return {};
  const Loc loc = Loc::current();
  const DType dtype = x.dtype();
  const NodePtr x_node = ops::value_as(x, dtype, loc);
  if (pooled_input->operands()[0] != x_node) return {};
  const NodePtr& grad_out = pool_grad.operands()[1];
  const IntAttrs ints(pool_grad.ints());
  const Tensor pooled = ops::make_result(Op::kMaxPool2d, dtype, grad_out->shape(),
                                         Operands{pooled_input}, x.device(), loc, ints);
  const Tensor small_grad(make_intrusive<TensorImpl>(dtype, grad_out, x.device()));
  const Tensor kept = where(gt(pooled, 0.0), small_grad, scalar_zero(small_grad));
  return ops::make_result(Op::kMaxPool2dBackward, dtype, x.shape(),
                          Operands{x_node, ops::value_as(kept, dtype, loc)}, x.device(), loc, ints);
}

const Derivative kConv2dBackward{"ConvolutionBackward", conv2d_backward};
const Derivative kConvTranspose2dBackward{"ConvolutionBackward", conv_transpose2d_backward};
const Derivative kMaxPool2dBackward{"MaxPool2DBackward", max_pool2d_backward};
const Derivative kAvgPool2dBackward{"AvgPool2DBackward", avg_pool2d_backward};

}  // namespace axle::autograd
