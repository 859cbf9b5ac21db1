// graph/reference: data movement — reshape, permute, expand, slice, cat, index_select, gather,
// one_hot — which copy elements bit for bit, and scatter_add, which adds them in index order,
// rounding each sum as it is stored (as the CPU backend does). Indices out of range are errors.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

void expect_same_dtype(const OpCall& call, const CpuTensor& in) {
  expect_dtype(call, "the operand", in.dtype, call.dtype());
}

void expect_index(const OpCall& call, const CpuTensor& index) {
  if (index.dtype != DType::kInt32 && index.dtype != DType::kInt64) {
    fail(call, fmt::format("indices must be s32 or s64, not {}", dtype_name(index.dtype)));
  }
}

// An index read from `index` at `at`, checked against `size`.
int64_t checked_index(const OpCall& call, const CpuTensor& index, int64_t at, int64_t dim,
                      int64_t size) {
  const int64_t v = int_at(index, at);
  if (v < 0 || v >= size) {
    fail(call,
         fmt::format("index {} is out of bounds for dimension {} with size {}", v, dim, size));
  }
  return v;
}

int checked_dim(const OpCall& call, int64_t dim, int rank) {
  if (dim < 0 || dim >= rank)
    fail(call, fmt::format("dim {} is out of range for rank {}", dim, rank));
  return static_cast<int>(dim);
}

CpuTensor reshape(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& x = call.operand(0);
  expect_same_dtype(call, x);
  if (x.shape.numel() != call.shape().numel()) fail(call, "the element counts differ");
  CpuTensor out = result_of(call);
  out.bytes = x.bytes;
  return out;
}

// ints = the permutation: output dim i is input dim ints[i].
CpuTensor permute(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& x = call.operand(0);
  expect_same_dtype(call, x);
  const auto perm = call.ints();
  const int rank = x.shape.rank();
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  bool valid = static_cast<int>(perm.size()) == rank && call.shape().rank() == rank;
  for (int i = 0; valid && i < rank; ++i) {
    valid = perm[i] >= 0 && perm[i] < rank && !seen[static_cast<std::size_t>(perm[i])] &&
            call.shape()[i] == x.shape[static_cast<int>(perm[i])];
    if (valid) seen[static_cast<std::size_t>(perm[i])] = true;
  }
  if (!valid)
    fail(call, fmt::format("[{}] is not a permutation taking the operand to the result",
                           fmt::join(perm, ",")));
  const Index in_strides = strides_of(x.shape);
  Index strides{};
  for (int i = 0; i < rank; ++i) strides[i] = in_strides[static_cast<std::size_t>(perm[i])];
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for_each_index(call.shape(), [&](const Index& index) {
    copy_element(x, offset_of(index, strides, rank), out, at++);
  });
  return out;
}

CpuTensor expand(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& x = call.operand(0);
  expect_same_dtype(call, x);
  CpuTensor out = result_of(call);
  broadcast_loop<1>(call, {&x}, [&](int64_t i, const std::array<int64_t, 1>& at) {
    copy_element(x, at[0], out, i);
  });
  return out;
}

// ints = [dim, start, step]; the result's shape gives the length.
CpuTensor slice(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 3, "[dim, start, step]");
  const CpuTensor& x = call.operand(0);
  expect_same_dtype(call, x);
  const int rank = x.shape.rank();
  const int dim = checked_dim(call, call.ints()[0], rank);
  const int64_t start = call.ints()[1], step = call.ints()[2];
  if (step < 1) fail(call, fmt::format("step {} is not >= 1", step));
  bool fits = call.shape().rank() == rank;
  for (int d = 0; fits && d < rank; ++d) fits = d == dim || call.shape()[d] == x.shape[d];
  if (!fits) fail(call, "the result differs from the operand outside the sliced dim");
  const int64_t length = call.shape()[dim];
  if (length > 0 && (start < 0 || start + (length - 1) * step >= x.shape[dim])) {
    fail(call, fmt::format("{} elements from {} in steps of {} run past dim {} of size {}", length,
                           start, step, dim, x.shape[dim]));
  }
  Index strides = strides_of(x.shape);
  const int64_t base = length > 0 ? start * strides[dim] : 0;
  strides[dim] *= step;
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for_each_index(call.shape(), [&](const Index& index) {
    copy_element(x, base + offset_of(index, strides, rank), out, at++);
  });
  return out;
}

// ints = [dim]: the operands one after another along dim.
CpuTensor concat(const OpCall& call) {
  expect_ints(call, 1, "[dim]");
  if (call.operands.empty()) fail(call, "needs at least one operand");
  const Shape& shape = call.shape();
  const int rank = shape.rank();
  const int dim = checked_dim(call, call.ints()[0], rank);
  int64_t total = 0;
  for (const CpuTensor* in : call.operands) {
    expect_same_dtype(call, *in);
    bool fits = in->shape.rank() == rank;
    for (int d = 0; fits && d < rank; ++d) fits = d == dim || in->shape[d] == shape[d];
    if (!fits) fail(call, fmt::format("operand {} does not fit the result", in->shape.to_string()));
    total += in->shape[dim];
  }
  if (total != shape[dim])
    fail(call, fmt::format("the operands add up to {} along dim {}", total, dim));
  const Index out_strides = strides_of(shape);
  CpuTensor out = result_of(call);
  int64_t offset = 0;  // where the current operand starts along dim
  for (const CpuTensor* in : call.operands) {
    int64_t at = 0;
    for_each_index(in->shape, [&](const Index& index) {
      Index moved = index;
      moved[dim] += offset;
      copy_element(*in, at++, out, offset_of(moved, out_strides, rank));
    });
    offset += in->shape[dim];
  }
  return out;
}

// [x, index (1-d or 0-d)]; ints = [dim]. A 0-d x is one element along dim 0.
CpuTensor index_select(const OpCall& call) {
  expect_operands(call, 2);
  expect_ints(call, 1, "[dim]");
  const CpuTensor& x = call.operand(0);
  const CpuTensor& index = call.operand(1);
  expect_same_dtype(call, x);
  expect_index(call, index);
  if (index.shape.rank() > 1) fail(call, "the index must be 1-d");
  const Shape x_shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  const int rank = x_shape.rank();
  const int dim = checked_dim(call, call.ints()[0], rank);
  const int64_t n = index.shape.numel();
  Shape expected = x_shape;
  expected[dim] = n;
  const bool fits = x.shape.rank() == 0 ? call.shape().numel() == n : expected == call.shape();
  if (!fits)
    fail(call, fmt::format("{} indices along dim {} give {}", n, dim, expected.to_string()));
  std::vector<int64_t> picked(static_cast<std::size_t>(n));
  for (int64_t j = 0; j < n; ++j) picked[j] = checked_index(call, index, j, dim, x_shape[dim]);
  const Index strides = strides_of(x_shape);
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for_each_index(expected, [&](const Index& i) {
    Index source = i;
    source[dim] = picked[static_cast<std::size_t>(i[dim])];
    copy_element(x, offset_of(source, strides, rank), out, at++);
  });
  return out;
}

// [x, index (x's rank)]; ints = [dim]: out[i] = x[i with dim replaced by index[i]].
CpuTensor gather(const OpCall& call) {
  expect_operands(call, 2);
  expect_ints(call, 1, "[dim]");
  const CpuTensor& x = call.operand(0);
  const CpuTensor& index = call.operand(1);
  expect_same_dtype(call, x);
  expect_index(call, index);
  if (index.shape.rank() != x.shape.rank() || !(index.shape == call.shape())) {
    fail(call, "the index must have the operand's rank and the result the index's shape");
  }
  const Shape x_shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  const Shape i_shape = index.shape.rank() == 0 ? Shape{1} : index.shape;
  const int rank = x_shape.rank();
  const int dim = checked_dim(call, call.ints()[0], rank);
  for (int d = 0; d < rank; ++d) {
    if (d != dim && i_shape[d] > x_shape[d])
      fail(call, fmt::format("the index is larger in dim {}", d));
  }
  const Index strides = strides_of(x_shape);
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for_each_index(i_shape, [&](const Index& i) {
    Index source = i;
    source[dim] = checked_index(call, index, at, dim, x_shape[dim]);
    copy_element(x, offset_of(source, strides, rank), out, at++);
  });
  return out;
}

// [index]; ints = [num_classes]: one more trailing dim, 1 at each index's class.
CpuTensor one_hot(const OpCall& call) {
  expect_operands(call, 1);
  expect_ints(call, 1, "[num_classes]");
  const CpuTensor& index = call.operand(0);
  expect_index(call, index);
  const int64_t classes = call.ints()[0];
  Shape expected = index.shape;
  expected.push_back(classes);
  if (classes < 0 || !(expected == call.shape())) {
    fail(call, fmt::format("{} classes give {}", classes, expected.to_string()));
  }
  CpuTensor out = result_of(call);
  for (int64_t i = 0; i < index.shape.numel(); ++i) {
    const int64_t c = int_at(index, i);
    if (c < 0 || c >= classes)
      fail(call, fmt::format("class {} is out of range for {} classes", c, classes));
    store_real(out, i * classes + c, 1.0);
  }
  return out;
}

// [base, index, src (the index's shape)]; ints = [dim]: base with src[i] added at i with dim
// replaced by index[i], in index order (torch.scatter_add).
CpuTensor scatter_add(const OpCall& call) {
  expect_operands(call, 3);
  expect_ints(call, 1, "[dim]");
  const CpuTensor& base = call.operand(0);
  const CpuTensor& index = call.operand(1);
  const CpuTensor& src = call.operand(2);
  expect_same_dtype(call, base);
  expect_dtype(call, "the source", src.dtype, call.dtype());
  expect_index(call, index);
  if (call.dtype() == DType::kBool) fail(call, "not defined for pred");
  if (!(base.shape == call.shape())) fail(call, "the base must have the result's shape");
  const Shape out_shape = call.shape().rank() == 0 ? Shape{1} : call.shape();
  const Shape i_shape = index.shape.rank() == 0 ? Shape{1} : index.shape;
  const int rank = out_shape.rank();
  const int dim = checked_dim(call, call.ints()[0], rank);
  bool fits = i_shape.rank() == rank && index.shape == src.shape;
  for (int d = 0; fits && d < rank; ++d) fits = d == dim || i_shape[d] <= out_shape[d];
  if (!fits) {
    fail(call,
         "the index and source must have one shape, of the base's rank, no larger than it "
         "outside dim");
  }
  const Index strides = strides_of(out_shape);
  CpuTensor out = base;
  int64_t at = 0;
  for_each_index(i_shape, [&](const Index& i) {
    Index target = i;
    target[dim] = checked_index(call, index, at, dim, out_shape[dim]);
    const int64_t o = offset_of(target, strides, rank);
    if (is_floating(out.dtype)) {
      store_real(out, o, real_at(out, o) + real_at(src, at));
    } else {
      store_int(out, o, wrapping_add(int_at(out, o), int_at(src, at)));
    }
    ++at;
  });
  return out;
}

}  // namespace

CpuTensor evaluate_data_movement(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kReshape:
      return reshape(call);
    case Op::kPermute:
      return permute(call);
    case Op::kExpand:
      return expand(call);
    case Op::kSlice:
      return slice(call);
    case Op::kConcat:
      return concat(call);
    case Op::kIndexSelect:
      return index_select(call);
    case Op::kGather:
      return gather(call);
    case Op::kOneHot:
      return one_hot(call);
    case Op::kScatterAdd:
      return scatter_add(call);
    default:
      fail(call, "is not a data-movement op");
  }
}

}  // namespace axle::reference::detail
