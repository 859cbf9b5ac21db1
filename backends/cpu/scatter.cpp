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

template <class I, class T>
void scatter_add_typed(const I* index, const T* src, T* out, const Shape& index_shape,
                       const Shape& out_shape, int dim) {
  const int rank = index_shape.rank();
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
    if (v < 0 || v >= size) {
      throw std::out_of_range(fmt::format(
          "scatter_add: index {} is out of bounds for dimension {} with size {}", v, dim, size));
    }
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
