// graph/ops: shape and data-movement ops — reshape and its relatives (all one kReshape node),
// permute, expand, slice, cat, index_select, gather, one_hot.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

using ops::describe;

// Shape's constructor would throw std::length_error past rank 8; a user asking for it is an
// op error like any other, so it gets the op's name and the caller's line.
Shape make_shape(std::string_view op, std::span<const int64_t> dims, const Loc& where) {
  if (dims.size() > static_cast<std::size_t>(Shape::kMaxRank)) {
    ops::fail(op,
              fmt::format("[{}] has {} dims; axle supports at most {}", fmt::join(dims, ","),
                          dims.size(), Shape::kMaxRank),
              where);
  }
  return Shape(dims);
}

// Every shape-only op is one reshape node: the elements keep their row-major order.
Tensor reshape_to(const Tensor& x, const Shape& shape, const Loc& where) {
  Tensor result = ops::make_result(Op::kReshape, x.dtype(), shape,
                                   Operands{ops::value_as(x, x.dtype(), where)}, x.device(), where);
  if (autograd::should_record(x)) autograd::record(autograd::kReshapeBackward, result, {x});
  return result;
}

Tensor view_like(std::string_view op, const Tensor& x, std::vector<int64_t> dims,
                 const Loc& where) {
  ops::require_defined(op, x, "the operand", where);
  int inferred = -1;
  int64_t known = 1;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
    } else if (dims[i] == -1) {
      ops::fail(op, fmt::format("only one dim of [{}] may be -1", fmt::join(dims, ",")), where);
    } else if (dims[i] < 0) {
      ops::fail(op, fmt::format("invalid dim {} in [{}]", dims[i], fmt::join(dims, ",")), where);
    } else {
      known *= dims[i];
    }
  }
  const int64_t numel = x.numel();
  if (inferred >= 0) {
    // As torch: -1 is ambiguous when the other dims multiply to 0.
    if (known == 0 || numel % known != 0) {
      ops::fail(op,
                fmt::format("shape [{}] is invalid for {} ({} elements)", fmt::join(dims, ","),
                            describe(x), numel),
                where);
    }
    dims[inferred] = numel / known;
  } else if (known != numel) {
    ops::fail(op,
              fmt::format("shape [{}] is invalid for {} ({} elements)", fmt::join(dims, ","),
                          describe(x), numel),
              where);
  }
  return reshape_to(x, make_shape(op, dims, where), where);
}

Tensor permute_impl(std::string_view op, const Tensor& x, const std::vector<int64_t>& perm,
                    const Loc& where) {
  const Shape& in = x.shape();
  IntAttrs ints;
  Shape out;
  std::array<bool, Shape::kMaxRank> seen{};
  for (int64_t p : perm) {
    const int64_t d = ops::normalize_dim(op, x, p, in.rank(), where);
    if (seen[d]) {
      ops::fail(op,
                fmt::format("[{}] is not a permutation of the dims of {}", fmt::join(perm, ","),
                            describe(x)),
                where);
    }
    seen[d] = true;
    ints.push_back(d);
    out.push_back(in[static_cast<int>(d)]);
  }
  const bool record = autograd::should_record(x);
  Tensor result =
      ops::make_result(Op::kPermute, x.dtype(), out, Operands{ops::value_as(x, x.dtype(), where)},
                       x.device(), where, record ? ints : std::move(ints));
  if (record) autograd::record(autograd::kPermuteBackward, result, {x}, std::move(ints));
  return result;
}

void require_integer_index(std::string_view op, const Tensor& index, const Loc& where) {
  if (index.dtype() != DType::kInt32 && index.dtype() != DType::kInt64) {
    ops::fail(op, fmt::format("the index must be s32 or s64, not {}", describe(index)), where);
  }
}

}  // namespace

Tensor reshape(const Tensor& x, std::vector<int64_t> shape, Loc where) {
  return view_like("reshape", x, std::move(shape), where);
}

Tensor view(const Tensor& x, std::vector<int64_t> shape, Loc where) {
  return view_like("view", x, std::move(shape), where);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim, Loc where) {
  ops::require_defined("flatten", x, "the operand", where);
  const Shape& in = x.shape();
  if (in.rank() == 0) {
    ops::normalize_dim("flatten", x, start_dim, 0, where);
    ops::normalize_dim("flatten", x, end_dim, 0, where);
    return reshape_to(x, Shape{1}, where);  // torch.flatten of a 0-d tensor is 1-d
  }
  const int64_t start = ops::normalize_dim("flatten", x, start_dim, in.rank(), where);
  const int64_t end = ops::normalize_dim("flatten", x, end_dim, in.rank(), where);
  if (start > end) {
    ops::fail(
        "flatten",
        fmt::format("start_dim {} comes after end_dim {} for {}", start_dim, end_dim, describe(x)),
        where);
  }
  Shape out;
  int64_t merged = 1;
  for (int d = 0; d < in.rank(); ++d) {
    if (d < start || d > end) {
      out.push_back(in[d]);
      continue;
    }
    merged *= in[d];
    if (d == end) out.push_back(merged);
  }
  return reshape_to(x, out, where);
}

Tensor squeeze(const Tensor& x, int64_t dim, Loc where) {
  ops::require_defined("squeeze", x, "the operand", where);
  const Shape& in = x.shape();
  const int64_t d = ops::normalize_dim("squeeze", x, dim, in.rank(), where);
  // torch returns x unchanged when the dim is not 1; a reshape node to the same shape keeps
  // "every op gives a new tensor" true, so an in-place op on the result never touches x.
  if (in.rank() == 0 || in[static_cast<int>(d)] != 1) return reshape_to(x, in, where);
  Shape out;
  for (int i = 0; i < in.rank(); ++i) {
    if (i != d) out.push_back(in[i]);
  }
  return reshape_to(x, out, where);
}

Tensor unsqueeze(const Tensor& x, int64_t dim, Loc where) {
  ops::require_defined("unsqueeze", x, "the operand", where);
  const Shape& in = x.shape();
  const int64_t d = ops::normalize_dim("unsqueeze", x, dim, in.rank() + 1, where);
  std::vector<int64_t> dims(in.dims().begin(), in.dims().end());
  dims.insert(dims.begin() + d, 1);
  return reshape_to(x, make_shape("unsqueeze", dims, where), where);
}

Tensor permute(const Tensor& x, std::vector<int64_t> dims, Loc where) {
  ops::require_defined("permute", x, "the operand", where);
  if (static_cast<int>(dims.size()) != x.dim()) {
    ops::fail("permute",
              fmt::format("[{}] has {} dims but {} has {}", fmt::join(dims, ","), dims.size(),
                          describe(x), x.dim()),
              where);
  }
  return permute_impl("permute", x, dims, where);
}

Tensor transpose(const Tensor& x, int64_t dim0, int64_t dim1, Loc where) {
  ops::require_defined("transpose", x, "the operand", where);
  const int rank = x.dim();
  const int64_t a = ops::normalize_dim("transpose", x, dim0, rank, where);
  const int64_t b = ops::normalize_dim("transpose", x, dim1, rank, where);
  std::vector<int64_t> perm(rank);
  for (int i = 0; i < rank; ++i) perm[i] = i;
  if (rank > 0) std::swap(perm[a], perm[b]);
  return permute_impl("transpose", x, perm, where);
}

Tensor expand(const Tensor& x, std::vector<int64_t> shape, Loc where) {
  ops::require_defined("expand", x, "the operand", where);
  const Shape& in = x.shape();
  const int lead = static_cast<int>(shape.size()) - in.rank();
  auto reject = [&](const std::string& why) {
    ops::fail("expand",
              fmt::format("cannot expand {} to [{}]: {}", describe(x), fmt::join(shape, ","), why),
              where);
  };
  if (lead < 0) reject("the target has fewer dims");
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    const int j = i - lead;
    if (shape[i] == -1) {
      if (j < 0) reject(fmt::format("-1 is not allowed in the new leading dim {}", i));
      shape[i] = in[j];
    } else if (shape[i] < 0) {
      reject(fmt::format("dim {} is negative", i));
    } else if (j >= 0 && in[j] != 1 && in[j] != shape[i]) {
      reject(fmt::format("dim {} has size {}, and only dims of size 1 can grow", i, in[j]));
    }
  }
  Tensor result = ops::make_result(Op::kExpand, x.dtype(), make_shape("expand", shape, where),
                                   Operands{ops::value_as(x, x.dtype(), where)}, x.device(), where);
  if (autograd::should_record(x)) autograd::record(autograd::kExpandBackward, result, {x});
  return result;
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step, Loc where) {
  ops::require_defined("slice", x, "the operand", where);
  if (x.dim() == 0) ops::fail("slice", fmt::format("cannot slice the 0-d {}", describe(x)), where);
  if (step < 1)
    ops::fail("slice", fmt::format("step {} must be >= 1 (slicing {})", step, describe(x)), where);
  const int64_t d = ops::normalize_dim("slice", x, dim, x.dim(), where);
  const int64_t size = x.shape()[static_cast<int>(d)];
  // Python's rules: negative counts from the end, then clamp into [0, size].
  auto clamp = [size](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + size : i, 0, size); };
  const int64_t from = clamp(start);
  const int64_t to = clamp(end);
  const int64_t length = to > from ? (to - from + step - 1) / step : 0;
  Shape out = x.shape();
  out[static_cast<int>(d)] = length;
  Tensor result =
      ops::make_result(Op::kSlice, x.dtype(), out, Operands{ops::value_as(x, x.dtype(), where)},
                       x.device(), where, IntAttrs{d, from, step});
  if (autograd::should_record(x)) {
    autograd::record(autograd::kSliceBackward, result, {x}, IntAttrs{d, from, step});
  }
  return result;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim, Loc where) {
  if (tensors.empty()) ops::fail("cat", "needs at least one tensor", where);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    ops::require_defined("cat", tensors[i], fmt::format("tensor {}", i).c_str(), where);
  }
  const Tensor& first = tensors[0];
  const Shape& shape0 = first.shape();
  if (shape0.rank() == 0) {
    ops::fail("cat", fmt::format("cannot concatenate the 0-d tensor {}", describe(first)), where);
  }
  const int64_t d = ops::normalize_dim("cat", first, dim, shape0.rank(), where);
  Shape out = shape0;
  out[static_cast<int>(d)] = 0;
  DType dtype = first.dtype();
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    ops::common_device("cat", {&first, &t}, where);
    bool fits = t.dim() == shape0.rank();
    for (int j = 0; fits && j < shape0.rank(); ++j) fits = j == d || t.shape()[j] == shape0[j];
    if (!fits) {
      ops::fail("cat",
                fmt::format("tensor {} is {} but tensor 0 is {}; all dims but dim {} must match", i,
                            describe(t), describe(first), d),
                where);
    }
    out[static_cast<int>(d)] += t.shape()[static_cast<int>(d)];
    dtype = promote_types(dtype, t.dtype());
  }
  Operands operands;
  for (const Tensor& t : tensors) operands.push_back(ops::value_as(t, dtype, where));
  Tensor result = ops::make_result(Op::kConcat, dtype, out, std::move(operands), first.device(),
                                   where, IntAttrs{d});
  if (autograd::should_record_list(tensors)) {
    autograd::record(autograd::kCatBackward, result, tensors, IntAttrs{d});
  }
  return result;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim, Loc where) {
  if (tensors.empty()) ops::fail("stack", "needs at least one tensor", where);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    ops::require_defined("stack", tensors[i], fmt::format("tensor {}", i).c_str(), where);
    if (!(tensors[i].shape() == tensors[0].shape())) {
      ops::fail("stack",
                fmt::format("tensor {} is {} but tensor 0 is {}; all must have one shape", i,
                            describe(tensors[i]), describe(tensors[0])),
                where);
    }
  }
  const int64_t d = ops::normalize_dim("stack", tensors[0], dim, tensors[0].dim() + 1, where);
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (const Tensor& t : tensors) parts.push_back(unsqueeze(t, d, where));
  return cat(parts, d, where);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index, Loc where) {
  ops::require_defined("index_select", x, "the operand", where);
  ops::require_defined("index_select", index, "the index", where);
  const Device device = ops::common_device("index_select", {&x, &index}, where);
  require_integer_index("index_select", index, where);
  // torch also takes a 0-d index as a single index.
  if (index.dim() > 1) {
    ops::fail("index_select",
              fmt::format("the index must be 1-d, not {} (selecting from {})", describe(index),
                          describe(x)),
              where);
  }
  const int64_t d = ops::normalize_dim("index_select", x, dim, x.dim(), where);
  Shape out = x.shape();
  if (x.dim() == 0) {
    if (index.numel() != 1) {
      ops::fail(
          "index_select",
          fmt::format("the index {} of a 0-d {} must hold one value", describe(index), describe(x)),
          where);
    }
  } else {
    out[static_cast<int>(d)] = index.numel();
  }
  Tensor result = ops::make_result(
      Op::kIndexSelect, x.dtype(), out,
      Operands{ops::value_as(x, x.dtype(), where), ops::value_as(index, index.dtype(), where)},
      device, where, IntAttrs{d});
  if (autograd::should_record(x)) {
    autograd::record(autograd::kIndexSelectBackward, result, {x, index}, IntAttrs{d});
  }
  return result;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index, Loc where) {
  ops::require_defined("gather", x, "the operand", where);
  ops::require_defined("gather", index, "the index", where);
  const Device device = ops::common_device("gather", {&x, &index}, where);
  require_integer_index("gather", index, where);
  const int64_t d = ops::normalize_dim("gather", x, dim, x.dim(), where);
  if (index.dim() != x.dim()) {
    ops::fail("gather",
              fmt::format("the index {} must have the rank of {}", describe(index), describe(x)),
              where);
  }
  for (int i = 0; i < x.dim(); ++i) {
    if (i != d && index.shape()[i] > x.shape()[i]) {
      ops::fail(
          "gather",
          fmt::format("the index {} is larger than {} in dim {}", describe(index), describe(x), i),
          where);
    }
  }
  Tensor result = ops::make_result(
      Op::kGather, x.dtype(), index.shape(),
      Operands{ops::value_as(x, x.dtype(), where), ops::value_as(index, index.dtype(), where)},
      device, where, IntAttrs{d});
  if (autograd::should_record(x)) {
    autograd::record(autograd::kGatherBackward, result, {x, index}, IntAttrs{d});
  }
  return result;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                   Loc where) {
  ops::require_defined("scatter_add", x, "the operand", where);
  ops::require_defined("scatter_add", index, "the index", where);
  ops::require_defined("scatter_add", src, "the source", where);
  const Device device = ops::common_device("scatter_add", {&x, &index, &src}, where);
  require_integer_index("scatter_add", index, where);
  const int64_t d = ops::normalize_dim("scatter_add", x, dim, x.dim(), where);
  auto reject = [&](const std::string& why) {
    ops::fail("scatter_add",
              fmt::format("cannot add {} at index {} into {}: {}", describe(src), describe(index),
                          describe(x), why),
              where);
  };
  if (src.dtype() != x.dtype()) reject("the source must have the operand's dtype");
  if (x.dtype() == DType::kBool) reject("pred tensors cannot be added to");
  if (!(index.shape() == src.shape())) reject("the index and the source must have one shape");
  if (index.dim() != x.dim()) reject("the index must have the operand's rank");
  for (int i = 0; i < x.dim(); ++i) {
    if (i != d && index.shape()[i] > x.shape()[i]) reject(fmt::format("dim {} is larger", i));
  }
  Tensor result = ops::make_result(
      Op::kScatterAdd, x.dtype(), x.shape(),
      Operands{ops::value_as(x, x.dtype(), where), ops::value_as(index, index.dtype(), where),
               ops::value_as(src, x.dtype(), where)},
      device, where, IntAttrs{d});
  if (autograd::should_record(x, src)) {
    autograd::record(autograd::kScatterAddBackward, result, {x, index, src}, IntAttrs{d});
  }
  return result;
}

Tensor one_hot(const Tensor& index, int64_t num_classes, Loc where) {
  ops::require_defined("one_hot", index, "the index", where);
  require_integer_index("one_hot", index, where);
  // torch infers num_classes = -1 from the data; a trace cannot read data, so it must be given.
  if (num_classes <= 0) {
    ops::fail(
        "one_hot",
        fmt::format("num_classes must be > 0, not {} (index {})", num_classes, describe(index)),
        where);
  }
  std::vector<int64_t> dims(index.shape().dims().begin(), index.shape().dims().end());
  dims.push_back(num_classes);
  return ops::make_result(Op::kOneHot, DType::kInt64, make_shape("one_hot", dims, where),
                          Operands{ops::value_as(index, index.dtype(), where)}, index.device(),
                          where, IntAttrs{num_classes});
}

}  // namespace axle
