// graph/autograd: building blocks the derivative formulas share.
#include "axle/graph/autograd/grad_util.h"

#include <fmt/format.h>

#include <stdexcept>

#include "axle/graph/op_util.h"

namespace axle::autograd {

std::vector<int64_t> dims_of(const Shape& shape) {
  return {shape.dims().begin(), shape.dims().end()};
}

namespace {

// When `grad` is a max_pool2d gradient without dilation, the gradient of its output: every window
// then overlaps the input and hands its gradient to one tap (or, overlapping, adds it to a tap
// that others share), so each plane of `grad` sums to its plane of this. Undefined otherwise.
Tensor max_pool_grad_out(const Tensor& grad) {
  if (!grad.impl()->pending_ir()) return {};
  const Node& node = *grad.impl()->ir();
  if (node.op() != Op::kMaxPool2dBackward || node.operands().size() != 2 ||
      node.ints().size() != 9 || node.ints()[6] != 1 || node.ints()[7] != 1) {
    return {};
  }
  return Tensor(make_intrusive<TensorImpl>(grad.dtype(), node.operands()[1], grad.device()));
}

}  // namespace

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  const Shape& from = grad.shape();
  if (from == shape) return grad;
  const int lead = from.rank() - shape.rank();
  auto mismatch = [&] {
    return std::logic_error(fmt::format("autograd: a gradient of shape {} cannot be summed to {}",
                                        from.to_string(), shape.to_string()));
  };
  if (lead < 0) throw mismatch();
  std::vector<int64_t> dims;
  for (int i = 0; i < from.rank(); ++i) {
    if (i < lead || (shape[i - lead] == 1 && from[i] != 1)) {
      dims.push_back(i);
    } else if (shape[i - lead] != from[i]) {
      throw mismatch();
    }
  }
  if (const Tensor pooled = max_pool_grad_out(grad);
      pooled.defined() && dims.size() >= 2 && dims[dims.size() - 2] == 2 && dims.back() == 3) {
    return sum_to(pooled, shape);
  }
  const Tensor summed = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  return summed.shape() == shape ? summed : reshape(summed, dims_of(shape));
}

Tensor unreduce(const Tensor& grad, const Shape& shape, std::span<const int64_t> dims,
                bool keepdim) {
  Tensor g = grad;
  if (!keepdim && !dims.empty()) {
    Shape kept = shape;
    for (int64_t d : dims) kept[static_cast<int>(d)] = 1;
    g = reshape(g, dims_of(kept));
  }
  return g.shape() == shape ? g : expand(g, dims_of(shape));
}

Tensor pad_dim(const Tensor& t, int64_t dim, int64_t lo, int64_t hi, int64_t interior) {
  Tensor out = t;
  const int64_t n = t.shape()[static_cast<int>(dim)];
  if (interior > 0 && n > 1) {
    // [.., n, ..] -> [.., n, 1 + interior, ..] with zeros after each element, flattened back
    // into dim, and the zeros after the last element cut off.
    std::vector<int64_t> grown = dims_of(t.shape());
    grown.insert(grown.begin() + dim + 1, interior);
    const Tensor spaced = cat({unsqueeze(t, dim + 1), zeros(Shape(std::span<const int64_t>(grown)),
                                                            t.dtype(), t.device())},
                              dim + 1);
    std::vector<int64_t> flat = dims_of(t.shape());
    flat[static_cast<std::size_t>(dim)] = n * (1 + interior);
    out = slice(reshape(spaced, flat), dim, 0, (n - 1) * (1 + interior) + 1);
  }
  const int64_t size = out.shape()[static_cast<int>(dim)];
  if (lo < 0 || hi < 0) {
    out = slice(out, dim, lo < 0 ? -lo : 0, hi < 0 ? size + hi : size);
  }
  if (lo <= 0 && hi <= 0) return out;
  std::vector<Tensor> parts;
  auto zero_block = [&](int64_t length) {
    Shape s = out.shape();
    s[static_cast<int>(dim)] = length;
    return zeros(s, out.dtype(), out.device());
  };
  if (lo > 0) parts.push_back(zero_block(lo));
  parts.push_back(out);
  if (hi > 0) parts.push_back(zero_block(hi));
  return cat(parts, dim);
}

Tensor scalar_zero(const Tensor& t) { return scalar_tensor(0, t.dtype(), t.device()); }

// kCumsum's reverse flag has no public op (torch has none either); the node is built here.
Tensor reverse_cumsum(const Tensor& t, int64_t dim) {
  const Loc where = Loc::current();
  return ops::make_result(Op::kCumsum, t.dtype(), t.shape(),
                          Operands{ops::value_as(t, t.dtype(), where)}, t.device(), where,
                          IntAttrs{dim, 1});
}

}  // namespace axle::autograd
