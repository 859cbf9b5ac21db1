// backends/cpu: data-movement kernels (copy, optimization_barrier, permute, expand, slice, concat;
// index_select, gather and one_hot are in indexing.cpp). They move elements without looking at
// their values, so each is written once per element size (1, 2, 4, 8 bytes) and that one instance
// serves every dtype of that size; only a permute with a folded cast rounds f32 to bf16.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/data_movement.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

// Side of the square tile a strided transpose copies at a time: 32 x 32 elements of 8 bytes
// is 8 KiB, so a tile's source lines stay in L1 while the tile's rows are written.
constexpr int64_t kTile = 32;

/// A view of a source buffer in the output's index space: output element (i0, i1, ...) comes
/// from source element sum(i_d * stride[d]). A stride of 0 repeats an element (broadcast).
struct StridedSource {
  int rank = 0;
  Dims size{};
  Dims stride{};
};

// Drops size-1 dims and merges neighbours that step through the source as one dim, so a
// permute that keeps runs together, or a broadcast of a whole row, becomes one memcpy per run.
StridedSource simplify(const StridedSource& in) {
  StridedSource out;
  for (int d = 0; d < in.rank; ++d) {
    if (in.size[d] == 1) continue;
    if (out.rank > 0 && out.stride[out.rank - 1] == in.stride[d] * in.size[d]) {
      out.size[out.rank - 1] *= in.size[d];
      out.stride[out.rank - 1] = in.stride[d];
    } else {
      out.size[out.rank] = in.size[d];
      out.stride[out.rank] = in.stride[d];
      ++out.rank;
    }
  }
  return out;
}

/// Writes the contiguous output of `view` (which must be non-empty) from `src`.
template <std::size_t N>
void strided_copy(std::byte* dst, const std::byte* src, const StridedSource& view) {
  const StridedSource s = simplify(view);
  if (s.rank == 0) {
    copy_element<N>(dst, src);
    return;
  }
  const int last = s.rank - 1;
  const int64_t inner = s.size[last];
  const int64_t inner_stride = s.stride[last];
  Dims dst_stride{};
  dst_stride[last] = 1;
  for (int d = last - 1; d >= 0; --d) dst_stride[d] = dst_stride[d + 1] * s.size[d + 1];

  if (inner_stride == 1) {  // the innermost dim is a contiguous run in both buffers
    for_each_index(last, s.size.data(), s.stride.data(), dst_stride.data(),
                   [&](int64_t a, int64_t b) {
                     std::memcpy(dst + b * N, src + a * N, static_cast<std::size_t>(inner) * N);
                   });
    return;
  }

  // A transpose: some outer dim k is contiguous in the source. Walking the output row by row
  // would touch a new source cache line per element, so copy [size k x inner] in square tiles.
  int k = -1;
  for (int d = 0; d < last; ++d) {
    if (s.stride[d] == 1) k = d;
  }
  if (k >= 0) {
    Dims outer_size{};
    Dims outer_src{};
    Dims outer_dst{};
    int outer_rank = 0;
    for (int d = 0; d < last; ++d) {
      if (d == k) continue;
      outer_size[outer_rank] = s.size[d];
      outer_src[outer_rank] = s.stride[d];
      outer_dst[outer_rank] = dst_stride[d];
      ++outer_rank;
    }
    const int64_t rows = s.size[k];
    const int64_t row_stride = dst_stride[k];
    for_each_index(outer_rank, outer_size.data(), outer_src.data(), outer_dst.data(),
                   [&](int64_t a, int64_t b) {
                     for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
                       const int64_t r1 = std::min(rows, r0 + kTile);
                       for (int64_t c0 = 0; c0 < inner; c0 += kTile) {
                         const int64_t c1 = std::min(inner, c0 + kTile);
                         for (int64_t r = r0; r < r1; ++r) {
                           std::byte* out = dst + (b + r * row_stride) * N;
                           const std::byte* in = src + (a + r) * N;
                           for (int64_t c = c0; c < c1; ++c) {
                             copy_element<N>(out + c * N, in + c * inner_stride * N);
                           }
                         }
                       }
                     }
                   });
    return;
  }

  // General strided or broadcast (stride 0) innermost dim: element by element.
  for_each_index(last, s.size.data(), s.stride.data(), dst_stride.data(),
                 [&](int64_t a, int64_t b) {
                   std::byte* out = dst + b * N;
                   const std::byte* in = src + a * N;
                   for (int64_t c = 0; c < inner; ++c) {
                     copy_element<N>(out + c * N, in + c * inner_stride * N);
                   }
                 });
}

void run_strided_copy(const KernelArgs& args, const StridedSource& view, int64_t base) {
  const int64_t numel = args.output.desc->shape.numel();
  if (numel == 0) return;
  const std::size_t size = dtype_size(args.output.desc->dtype);
  const auto* src = static_cast<const std::byte*>(args.inputs[0].data) + base * size;
  auto* dst = static_cast<std::byte*>(args.output.data);
  const StridedSource s = simplify(view);
  if (s.rank == 0 || numel * static_cast<int64_t>(size) < kParallelCopyBytes) {
    with_element_size(size, [&](auto n) { strided_copy<decltype(n)::value>(dst, src, s); });
    return;
  }
  // Split along the outermost dim: each part is the same kind of copy over a shorter box.
  const int64_t outer_dst_stride = numel / s.size[0];
  with_element_size(size, [&](auto n) {
    constexpr std::size_t kN = decltype(n)::value;
    parallel_for(args.pool, s.size[0], 1, [&](int64_t first, int64_t last, int) {
      StridedSource part = s;
      part.size[0] = last - first;
      strided_copy<kN>(dst + first * outer_dst_stride * kN, src + first * s.stride[0] * kN, part);
    });
  });
}

void copy_kernel(const KernelArgs& args) {
  expect_inputs(args, 1, "copy");
  const BufferDesc& in = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(in, out, "copy");
  if (in.shape.numel() != out.shape.numel()) {
    throw std::invalid_argument(fmt::format("copy: {} has {} elements but {} has {}",
                                            in.shape.to_string(), in.shape.numel(),
                                            out.shape.to_string(), out.shape.numel()));
  }
  if (out.bytes() != 0) std::memcpy(args.output.data, args.inputs[0].data, out.bytes());
}

// Output = operand ints[0]; the other operands are there to be waited for. The memory plan may
// give the output that operand's own buffer, and then there is nothing to copy.
void optimization_barrier_kernel(const KernelArgs& args) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.size() != 1 || ints[0] < 0 || static_cast<std::size_t>(ints[0]) >= args.inputs.size()) {
    throw std::invalid_argument(
        fmt::format("optimization_barrier: ints {} do not name one of its {} operands",
                    fmt::join(ints, ","), args.inputs.size()));
  }
  const ConstView& in = args.inputs[static_cast<std::size_t>(ints[0])];
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(*in.desc, out, "optimization_barrier");
  if (!(in.desc->shape == out.shape)) {
    throw std::invalid_argument(fmt::format("optimization_barrier: operand {} is {}, output {}",
                                            ints[0], in.desc->shape.to_string(),
                                            out.shape.to_string()));
  }
  if (out.bytes() != 0 && args.output.data != in.data) {
    std::memcpy(args.output.data, in.data, out.bytes());
  }
}

// The view's elements of an f32 source rounded into a contiguous bf16 output (a permute with a
// folded cast), split along the outermost dim like run_strided_copy.
void run_narrowing_copy(const KernelArgs& args, const StridedSource& view) {
  const int64_t numel = args.output.desc->shape.numel();
  if (numel == 0) return;
  const StridedSource s = simplify(view);
  const float* src = args.inputs[0].as<float>();
  Bf16* dst = args.output.as<Bf16>();
  if (s.rank == 0) {
    dst[0] = narrow(src[0]);
    return;
  }
  const int last = s.rank - 1;
  const int64_t inner = s.size[last], inner_stride = s.stride[last];
  auto copy_box = [&](const StridedSource& box, const float* from, Bf16* to) {
    Dims to_stride{};
    to_stride[last] = 1;
    for (int d = last - 1; d >= 0; --d) to_stride[d] = to_stride[d + 1] * box.size[d + 1];
    for_each_index(last, box.size.data(), box.stride.data(), to_stride.data(),
                   [&](int64_t a, int64_t b) {
                     if (inner_stride == 1) return narrow_block(from + a, to + b, inner);
                     for (int64_t c = 0; c < inner; ++c)
                       to[b + c] = narrow(from[a + c * inner_stride]);
                   });
  };
  if (numel * static_cast<int64_t>(sizeof(Bf16)) < kParallelCopyBytes || last == 0) {
    return copy_box(s, src, dst);
  }
  const int64_t outer_dst_stride = numel / s.size[0];
  parallel_for(args.pool, s.size[0], 1, [&](int64_t first, int64_t end, int) {
    StridedSource part = s;
    part.size[0] = end - first;
    copy_box(part, src + first * s.stride[0], dst + first * outer_dst_stride);
  });
}

void permute_kernel(const KernelArgs& args) {
  expect_inputs(args, 1, "permute");
  const BufferDesc& in = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  const std::vector<int64_t>& ints = args.call.ints;
  const int rank = in.shape.rank();
  const bool sliced = static_cast<int>(ints.size()) == rank + 1;
  const bool narrowing = in.dtype == DType::kFloat32 && out.dtype == DType::kBFloat16;
  if (!narrowing) expect_same_dtype(in, out, "permute");
  if (!(static_cast<int>(ints.size()) == rank || sliced) || out.shape.rank() != rank) {
    throw std::invalid_argument(fmt::format("permute: {} dims in the permutation for {} -> {}",
                                            ints.size(), in.shape.to_string(),
                                            out.shape.to_string()));
  }
  if (sliced && (rank == 0 || ints[rank] != in.shape[rank - 1])) {
    throw std::invalid_argument(fmt::format("permute: rows of {} elements do not match {}",
                                            ints[rank], in.shape.to_string()));
  }
  const auto in_stride = contiguous_strides(in.shape);
  StridedSource view{rank};
  std::array<bool, Shape::kMaxRank> seen{};
  for (int i = 0; i < rank; ++i) {
    const int64_t p = ints[i];
    // A folded slice keeps the first columns of the last dim; every other dim is whole.
    const bool fits = p >= 0 && p < rank &&
                      (out.shape[i] == in.shape[static_cast<int>(p)] ||
                       (sliced && p == rank - 1 && out.shape[i] <= in.shape[rank - 1]));
    if (!fits || seen[p]) {
      throw std::invalid_argument(fmt::format("permute: [{}] is not a permutation taking {} to {}",
                                              fmt::join(ints.begin(), ints.begin() + rank, ","),
                                              in.shape.to_string(), out.shape.to_string()));
    }
    seen[p] = true;
    view.size[i] = out.shape[i];
    view.stride[i] = in_stride[p];
  }
  if (narrowing) return run_narrowing_copy(args, view);
  run_strided_copy(args, view, 0);
}

void expand_kernel(const KernelArgs& args) {
  expect_inputs(args, 1, "expand");
  const BufferDesc& in = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(in, out, "expand");
  const int lead = out.shape.rank() - in.shape.rank();
  if (lead < 0) {
    throw std::invalid_argument(fmt::format("expand: cannot broadcast {} to the lower rank {}",
                                            in.shape.to_string(), out.shape.to_string()));
  }
  const auto in_stride = contiguous_strides(in.shape);
  StridedSource view{out.shape.rank()};
  for (int i = 0; i < out.shape.rank(); ++i) {
    view.size[i] = out.shape[i];
    const int j = i - lead;
    if (j < 0 || (in.shape[j] == 1 && out.shape[i] != 1)) {
      view.stride[i] = 0;
    } else if (in.shape[j] == out.shape[i]) {
      view.stride[i] = in_stride[j];
    } else {
      throw std::invalid_argument(fmt::format("expand: cannot broadcast {} to {}",
                                              in.shape.to_string(), out.shape.to_string()));
    }
  }
  run_strided_copy(args, view, 0);
}

void slice_kernel(const KernelArgs& args) {
  expect_inputs(args, 1, "slice");
  expect_ints(args, 3, "slice");
  const BufferDesc& in = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(in, out, "slice");
  const int rank = in.shape.rank();
  const int dim = static_cast<int>(checked_dim(args.call.ints[0], rank, "slice"));
  const int64_t start = args.call.ints[1];
  const int64_t step = args.call.ints[2];
  if (step < 1) throw std::invalid_argument(fmt::format("slice: step {} is not >= 1", step));
  bool shapes_match = out.shape.rank() == rank;
  for (int d = 0; shapes_match && d < rank; ++d)
    shapes_match = d == dim || out.shape[d] == in.shape[d];
  if (!shapes_match) {
    throw std::invalid_argument(fmt::format("slice: along dim {}, {} cannot become {}", dim,
                                            in.shape.to_string(), out.shape.to_string()));
  }
  const int64_t length = out.shape[dim];
  if (length > 0 && (start < 0 || start + (length - 1) * step >= in.shape[dim])) {
    throw std::out_of_range(
        fmt::format("slice: {} elements from {} in steps of {} run past dim {} of size {}", length,
                    start, step, dim, in.shape[dim]));
  }
  const auto in_stride = contiguous_strides(in.shape);
  StridedSource view{rank};
  for (int d = 0; d < rank; ++d) {
    view.size[d] = out.shape[d];
    view.stride[d] = d == dim ? in_stride[d] * step : in_stride[d];
  }
  run_strided_copy(args, view, length > 0 ? start * in_stride[dim] : 0);
}

void concat_kernel(const KernelArgs& args) {
  expect_ints(args, 1, "concat");
  const BufferDesc& out = *args.output.desc;
  const int rank = out.shape.rank();
  const int dim = static_cast<int>(checked_dim(args.call.ints[0], rank, "concat"));
  if (args.inputs.empty()) throw std::invalid_argument("concat: needs at least one input");
  int64_t total = 0;
  for (const ConstView& input : args.inputs) {
    const BufferDesc& in = *input.desc;
    expect_same_dtype(in, out, "concat");
    bool fits = in.shape.rank() == rank;
    for (int d = 0; fits && d < rank; ++d) fits = d == dim || in.shape[d] == out.shape[d];
    if (!fits) {
      throw std::invalid_argument(
          fmt::format("concat: input {} does not fit output {} along dim {}", in.shape.to_string(),
                      out.shape.to_string(), dim));
    }
    total += in.shape[dim];
  }
  if (total != out.shape[dim]) {
    throw std::invalid_argument(fmt::format(
        "concat: inputs add up to {} along dim {}, output has {}", total, dim, out.shape[dim]));
  }
  // Each input contributes one contiguous block per outer index, so whole blocks are memcpy'd.
  const int64_t outer = span_numel(out.shape, 0, dim);
  const std::size_t inner_bytes =
      static_cast<std::size_t>(span_numel(out.shape, dim + 1, rank)) * dtype_size(out.dtype);
  const std::size_t outer_bytes = static_cast<std::size_t>(out.shape[dim]) * inner_bytes;
  auto copy_outer = [&](int64_t first, int64_t last, int) {
    auto* dst = static_cast<std::byte*>(args.output.data) + first * outer_bytes;
    for (int64_t o = first; o < last; ++o) {
      for (const ConstView& input : args.inputs) {
        const std::size_t block = static_cast<std::size_t>(input.desc->shape[dim]) * inner_bytes;
        const std::byte* from = static_cast<const std::byte*>(input.data) + o * block;
        // Blocks of one element (a stride-2 gradient's interleaving) as one move, not a call.
        switch (block) {
          case 0:
            continue;
          case 4:
            copy_element<4>(dst, from);
            break;
          case 8:
            copy_element<8>(dst, from);
            break;
          default:
            std::memcpy(dst, from, block);
        }
        dst += block;
      }
    }
  };
  if (outer > 1 && static_cast<int64_t>(out.bytes()) >= kParallelCopyBytes) {
    parallel_for(args.pool, outer, 1, copy_outer);
  } else {
    copy_outer(0, outer, 0);
  }
}

}  // namespace

void register_data_movement_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kCopy, copy_kernel);
  set_kernel(table, Kernel::kOptimizationBarrier, optimization_barrier_kernel);
  set_kernel(table, Kernel::kPermute, permute_kernel);
  set_kernel(table, Kernel::kExpand, expand_kernel);
  set_kernel(table, Kernel::kSlice, slice_kernel);
  set_kernel(table, Kernel::kConcat, concat_kernel);
  register_indexing_kernels(table);
}

}  // namespace axle::cpu
