// backends/cpu: kScatterAdd (torch.scatter_add), the gradient of gather and index_select. Unlike
// the data-movement kernels it adds elements, so it is written per dtype, not per element size.
// Elements land in index order, one at a time, so results do not depend on threads or timing.
#include <fmt/format.h>

#include <array>
#include <cstring>
#include <stdexcept>

#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

[[noreturn]] void out_of_bounds(int64_t v, int dim, int64_t size) {
  throw std::out_of_range(fmt::format(
      "scatter_add: index {} is out of bounds for dimension {} with size {}", v, dim, size));
}

// dst[j] += src[j] for j < n: a loop GCC vectorises (the operands do not alias).
template <class T>
void add_row(T* __restrict__ dst, const T* __restrict__ src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dst[j] = store<T>(load(dst[j]) + load(src[j]));
}

// Along dim 0 with index and output alike in every other dim (an embedding's gradient: each
// row of src goes to the row its index names): a row whose indices are all one value is added
// as a whole, on vectors; others element by element. Rows in order, so every output element
// gets its terms in the order the general loop adds them.
template <class I, class T>
void scatter_add_rows(const I* index, const T* src, T* out, int64_t rows, int64_t inner,
                      int64_t size) {
  for (int64_t r = 0; r < rows; ++r) {
    const I* row_index = index + r * inner;
    const T* row_src = src + r * inner;
    const int64_t v = row_index[0];
    bool uniform = true;
    for (int64_t j = 0; j < inner; ++j) uniform &= row_index[j] == row_index[0];
    if (uniform) {
      if (v < 0 || v >= size) out_of_bounds(v, 0, size);
      add_row(out + v * inner, row_src, inner);
      continue;
    }
    for (int64_t j = 0; j < inner; ++j) {
      const int64_t w = row_index[j];
      if (w < 0 || w >= size) out_of_bounds(w, 0, size);
      T& dst = out[w * inner + j];
      dst = store<T>(load(dst) + load(row_src[j]));
    }
  }
}

template <class I, class T>
void scatter_add_typed(const I* index, const T* src, T* out, const Shape& index_shape,
                       const Shape& out_shape, int dim) {
  const int rank = index_shape.rank();
  bool rows = dim == 0;
  for (int d = 1; rows && d < rank; ++d) rows = index_shape[d] == out_shape[d];
  if (rows) {
    const int64_t inner = index_shape.numel() / index_shape[0];
    return scatter_add_rows(index, src, out, index_shape[0], inner, out_shape[0]);
  }
  std::array<int64_t, Shape::kMaxRank> out_stride{};
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    out_stride[d] = stride;
    stride *= out_shape[d];
  }
  const int64_t size = out_shape[dim];
  std::array<int64_t, Shape::kMaxRank> at{};  // the index's odometer
  const int64_t n = index_shape.numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t v = index[i];
    if (v < 0 || v >= size) out_of_bounds(v, dim, size);
    int64_t offset = 0;
    for (int d = 0; d < rank; ++d) offset += (d == dim ? v : at[d]) * out_stride[d];
    out[offset] = store<T>(load(out[offset]) + load(src[i]));
    for (int d = rank - 1; d >= 0; --d) {
      if (++at[d] < index_shape[d]) break;
      at[d] = 0;
    }
  }
}

void scatter_add_kernel(const KernelArgs& args) {
  if (args.inputs.size() != 3 || args.call.ints.size() != 1) {
    throw std::invalid_argument("scatter_add: takes [base, index, src] and ints [dim]");
  }
  const BufferDesc& base = *args.inputs[0].desc;
  const BufferDesc& index = *args.inputs[1].desc;
  const BufferDesc& src = *args.inputs[2].desc;
  const BufferDesc& out = *args.output.desc;
  if (base.dtype != out.dtype || src.dtype != out.dtype || !(base.shape == out.shape) ||
      out.dtype == DType::kBool) {
    throw std::invalid_argument(
        fmt::format("scatter_add: base {}{} and src {}{} must have the output's dtype and base "
                    "its shape ({}{}; pred is not supported)",
                    dtype_name(base.dtype), base.shape.to_string(), dtype_name(src.dtype),
                    src.shape.to_string(), dtype_name(out.dtype), out.shape.to_string()));
  }
  // torch treats 0-d tensors as one element along dim 0.
  const Shape out_shape = out.shape.rank() == 0 ? Shape{1} : out.shape;
  const Shape index_shape = index.shape.rank() == 0 ? Shape{1} : index.shape;
  const int rank = out_shape.rank();
  const int64_t dim = args.call.ints[0];
  bool fits = index_shape.rank() == rank && index.shape == src.shape && dim >= 0 && dim < rank;
  for (int d = 0; fits && d < rank; ++d) fits = d == dim || index_shape[d] <= out_shape[d];
  if (!fits) {
    throw std::invalid_argument(fmt::format(
        "scatter_add: index {} and src {} must have one shape, of base {}'s rank, no larger "
        "than it outside dim {}",
        index.shape.to_string(), src.shape.to_string(), base.shape.to_string(), dim));
  }
  if (args.output.data != args.inputs[0].data && out.bytes() != 0) {
    std::memcpy(args.output.data, args.inputs[0].data, out.bytes());
  }
  if (index_shape.numel() == 0) return;
  auto with_index = [&](auto index_type) {
    using I = decltype(index_type);
    visit_dtype(out.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) {
        scatter_add_typed(args.inputs[1].as<I>(), args.inputs[2].as<T>(), args.output.as<T>(),
                          index_shape, out_shape, static_cast<int>(dim));
      }
    });
  };
  if (index.dtype == DType::kInt32) return with_index(int32_t{});
  if (index.dtype == DType::kInt64) return with_index(int64_t{});
  throw std::invalid_argument(
      fmt::format("scatter_add: indices must be s32 or s64, not {}", dtype_name(index.dtype)));
}

}  // namespace

void register_scatter_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kScatterAdd, scatter_add_kernel);
}

}  // namespace axle::cpu
