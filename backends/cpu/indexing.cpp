// backends/cpu: the kernels that pick elements by index — index_select, gather, one_hot — each
// written once per element size, as the other data-movement kernels (data_movement.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/data_movement.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/engine/element.h"

namespace axle::cpu {
namespace {

void index_select_kernel(const KernelArgs& args) {
  expect_inputs(args, 2, "index_select");
  expect_ints(args, 1, "index_select");
  const BufferDesc& x = *args.inputs[0].desc;
  const BufferDesc& index = *args.inputs[1].desc;
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(x, out, "index_select");
  if (index.shape.rank() > 1) {
    throw std::invalid_argument(
        fmt::format("index_select: the index must be 1-d, not {}", index.shape.to_string()));
  }
  // torch treats a 0-d x as one element along dim 0.
  const Shape x_shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  const int rank = x_shape.rank();
  const int dim = static_cast<int>(checked_dim(args.call.ints[0], rank, "index_select"));
  const int64_t n = index.shape.numel();
  bool shapes_match = x.shape.rank() == 0 ? out.shape.numel() == n : out.shape.rank() == rank;
  for (int d = 0; shapes_match && x.shape.rank() > 0 && d < rank; ++d) {
    shapes_match = out.shape[d] == (d == dim ? n : x_shape[d]);
  }
  if (!shapes_match) {
    throw std::invalid_argument(
        fmt::format("index_select: {} indices along dim {} of {} cannot give {}", n, dim,
                    x.shape.to_string(), out.shape.to_string()));
  }
  const int64_t size = x_shape[dim];
  const int64_t outer = span_numel(x_shape, 0, dim);
  const int64_t inner = span_numel(x_shape, dim + 1, rank);
  const std::size_t elem = dtype_size(x.dtype);
  const auto* src = static_cast<const std::byte*>(args.inputs[0].data);
  auto* dst = static_cast<std::byte*>(args.output.data);
  with_index_type(index.dtype, "index_select", [&](auto index_type) {
    using I = decltype(index_type);
    const I* idx = args.inputs[1].as<I>();
    // Checked up front so the copy loop below stays branch-free.
    for (int64_t j = 0; j < n; ++j) {
      if (idx[j] < 0 || idx[j] >= size) throw_index_out_of_range("index_select", idx[j], dim, size);
    }
    if (out.shape.numel() == 0) return;
    with_element_size(elem, [&](auto width) {
      constexpr std::size_t N = decltype(width)::value;
      const std::size_t run = static_cast<std::size_t>(inner) * N;
      auto select_outer = [&](int64_t first, int64_t last, int) {
        std::byte* to = dst + first * n * static_cast<int64_t>(run);
        if (inner == 1) {
          // One element per index (a conv kernel's taps reversed): the loop over rows without
          // a call or a branch per element.
          for (int64_t o = first; o < last; ++o) {
            const std::byte* base = src + o * size * static_cast<int64_t>(N);
            for (int64_t j = 0; j < n; ++j, to += N) {
              copy_element<N>(to, base + static_cast<int64_t>(idx[j]) * static_cast<int64_t>(N));
            }
          }
          return;
        }
        for (int64_t o = first; o < last; ++o) {
          const std::byte* base = src + o * size * inner * N;
          for (int64_t j = 0; j < n; ++j, to += run) {
            std::memcpy(to, base + idx[j] * inner * N, run);
          }
        }
      };
      if (outer > 1 && static_cast<int64_t>(out.bytes()) >= kParallelCopyBytes) {
        parallel_for(args.pool, outer, 1, select_outer);
      } else {
        select_outer(0, outer, 0);
      }
    });
  });
}

void gather_kernel(const KernelArgs& args) {
  expect_inputs(args, 2, "gather");
  expect_ints(args, 1, "gather");
  const BufferDesc& x = *args.inputs[0].desc;
  const BufferDesc& index = *args.inputs[1].desc;
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(x, out, "gather");
  if (index.shape.rank() != x.shape.rank() || !(out.shape == index.shape)) {
    throw std::invalid_argument(
        fmt::format("gather: x {} and index {} must have the same rank and "
                    "the output the index's shape, not {}",
                    x.shape.to_string(), index.shape.to_string(), out.shape.to_string()));
  }
  // torch treats 0-d x and index as one element along dim 0.
  const Shape x_shape = x.shape.rank() == 0 ? Shape{1} : x.shape;
  const Shape i_shape = index.shape.rank() == 0 ? Shape{1} : index.shape;
  const int rank = x_shape.rank();
  const int dim = static_cast<int>(checked_dim(args.call.ints[0], rank, "gather"));
  for (int d = 0; d < rank; ++d) {
    if (d != dim && i_shape[d] > x_shape[d]) {
      throw std::invalid_argument(fmt::format("gather: index {} is larger than x {} in dim {}",
                                              index.shape.to_string(), x.shape.to_string(), d));
    }
  }
  if (i_shape.numel() == 0) return;
  const auto x_stride = contiguous_strides(x_shape);
  const auto i_stride = contiguous_strides(i_shape);
  // The odometer walks the index; x's offset gets every coordinate but `dim`, which the index
  // value supplies.
  Dims src_stride = x_stride;
  src_stride[dim] = 0;
  const int last = rank - 1;
  const int64_t inner = i_shape[last];
  const int64_t inner_src = src_stride[last];
  const int64_t size = x_shape[dim];
  const int64_t dim_stride = x_stride[dim];
  const auto* src = static_cast<const std::byte*>(args.inputs[0].data);
  auto* dst = static_cast<std::byte*>(args.output.data);
  with_index_type(index.dtype, "gather", [&](auto index_type) {
    using I = decltype(index_type);
    const I* idx = args.inputs[1].as<I>();
    with_element_size(dtype_size(x.dtype), [&](auto width) {
      constexpr std::size_t N = decltype(width)::value;
      for_each_index(last, i_shape.dims().data(), src_stride.data(), i_stride.data(),
                     [&](int64_t a, int64_t b) {
                       for (int64_t c = 0; c < inner; ++c) {
                         const int64_t v = idx[b + c];
                         if (v < 0 || v >= size) throw_index_out_of_range("gather", v, dim, size);
                         copy_element<N>(dst + (b + c) * N,
                                         src + (a + c * inner_src + v * dim_stride) * N);
                       }
                     });
    });
  });
}

// The bytes of 1 in `dtype`; 0 is all-zero bytes in every dtype, so a memset clears.
std::array<std::byte, 8> one_in(DType dtype) {
  std::array<std::byte, 8> bytes{};
  store_element(dtype, 1.0, bytes.data());
  return bytes;
}

void one_hot_kernel(const KernelArgs& args) {
  expect_inputs(args, 1, "one_hot");
  expect_ints(args, 1, "one_hot");
  const BufferDesc& index = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  const int64_t classes = args.call.ints[0];
  bool shapes_match = classes >= 0 && out.shape.rank() == index.shape.rank() + 1 &&
                      out.shape[index.shape.rank()] == classes;
  for (int d = 0; shapes_match && d < index.shape.rank(); ++d) {
    shapes_match = out.shape[d] == index.shape[d];
  }
  if (!shapes_match) {
    throw std::invalid_argument(fmt::format("one_hot: index {} with {} classes cannot give {}",
                                            index.shape.to_string(), classes,
                                            out.shape.to_string()));
  }
  const std::size_t elem = dtype_size(out.dtype);
  const std::array<std::byte, 8> one = one_in(out.dtype);
  auto* dst = static_cast<std::byte*>(args.output.data);
  if (out.bytes() != 0) std::memset(dst, 0, out.bytes());
  with_index_type(index.dtype, "one_hot", [&](auto index_type) {
    using I = decltype(index_type);
    const I* idx = args.inputs[0].as<I>();
    const int64_t n = index.shape.numel();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = idx[i];
      if (c < 0 || c >= classes) {
        throw std::out_of_range(
            fmt::format("one_hot: class {} is out of range for {} classes", c, classes));
      }
      std::memcpy(dst + (i * classes + c) * elem, one.data(), elem);
    }
  });
}

}  // namespace

void register_indexing_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kIndexSelect, index_select_kernel);
  set_kernel(table, Kernel::kGather, gather_kernel);
  set_kernel(table, Kernel::kOneHot, one_hot_kernel);
}

}  // namespace axle::cpu
