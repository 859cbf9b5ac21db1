// backends/cpu: data-movement kernels (copy, optimization_barrier, permute, expand, slice, concat,
// index_select, gather, one_hot). They move elements without looking at their values, so each is
// written once per element size (1, 2, 4, 8 bytes) and that one instance serves every dtype of that
// size.
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

#include "backends/cpu/compute_pool.h"
#include "backends/cpu/element.h"
#include "backends/cpu/kernel.h"

namespace axle::cpu {
namespace {

using Dims = std::array<int64_t, Shape::kMaxRank>;

// Side of the square tile a strided transpose copies at a time: 32 x 32 elements of 8 bytes
// is 8 KiB, so a tile's source lines stay in L1 while the tile's rows are written.
constexpr int64_t kTile = 32;

template <std::size_t N>
using Size = std::integral_constant<std::size_t, N>;

// A fixed-size memcpy compiles to one load and one store, and unlike a cast to uint32_t* it is
// well defined whatever type the other kernels store in the buffer.
template <std::size_t N>
inline void copy_element(std::byte* dst, const std::byte* src) noexcept {
  std::memcpy(dst, src, N);
}

template <class F>
void with_element_size(std::size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f(Size<1>{});
    case 2:
      return f(Size<2>{});
    case 4:
      return f(Size<4>{});
    case 8:
      return f(Size<8>{});
  }
  throw std::logic_error(fmt::format("no element type is {} bytes wide", bytes));
}

template <class F>
void with_index_type(DType dtype, std::string_view kernel, F&& f) {
  if (dtype == DType::kI32) return f(int32_t{});
  if (dtype == DType::kI64) return f(int64_t{});
  throw std::invalid_argument(
      fmt::format("{}: indices must be s32 or s64, not {}", kernel, dtype_name(dtype)));
}

[[noreturn]] void throw_index_out_of_range(std::string_view kernel, int64_t index, int64_t dim,
                                           int64_t size) {
  throw std::out_of_range(fmt::format("{}: index {} is out of bounds for dimension {} with size {}",
                                      kernel, index, dim, size));
}

void expect_inputs(const KernelArgs& args, std::size_t n, std::string_view kernel) {
  if (args.inputs.size() != n) {
    throw std::invalid_argument(
        fmt::format("{}: takes {} inputs, got {}", kernel, n, args.inputs.size()));
  }
}

void expect_ints(const KernelArgs& args, std::size_t n, std::string_view kernel) {
  if (args.call.ints.size() != n) {
    throw std::invalid_argument(
        fmt::format("{}: takes {} int attributes, got {}", kernel, n, args.call.ints.size()));
  }
}

// Data movement never converts, so a dtype mismatch is a compiler bug worth reporting.
void expect_same_dtype(const BufferDesc& in, const BufferDesc& out, std::string_view kernel) {
  if (in.dtype != out.dtype) {
    throw std::invalid_argument(fmt::format("{}: input is {} but output is {}", kernel,
                                            dtype_name(in.dtype), dtype_name(out.dtype)));
  }
}

int64_t checked_dim(int64_t dim, int rank, std::string_view kernel) {
  if (dim < 0 || dim >= rank) {
    throw std::invalid_argument(
        fmt::format("{}: dim {} is out of range for rank {}", kernel, dim, rank));
  }
  return dim;
}

// Product of dims [begin, end) of `shape`.
int64_t span_numel(const Shape& shape, int begin, int end) {
  int64_t n = 1;
  for (int d = begin; d < end; ++d) n *= shape[d];
  return n;
}

/// Visits every index of a `rank`-d box in row-major order, passing its offsets into two strided
/// arrays. Offsets move incrementally, so a step costs O(1) amortised and nothing recurses.
template <class Body>
void for_each_index(int rank, const int64_t* size, const int64_t* a_stride, const int64_t* b_stride,
                    Body&& body) {
  int64_t count = 1;
  for (int d = 0; d < rank; ++d) count *= size[d];
  Dims index{};
  int64_t a = 0;
  int64_t b = 0;
  for (int64_t n = 0; n < count; ++n) {
    body(a, b);
    for (int d = rank - 1; d >= 0; --d) {
      a += a_stride[d];
      b += b_stride[d];
      if (++index[d] < size[d]) break;
      a -= a_stride[d] * size[d];
      b -= b_stride[d] * size[d];
      index[d] = 0;
    }
  }
}

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

// Copies of fewer bytes than this run on the calling thread: below it, waking the pool's other
// threads costs about what they would save.
constexpr int64_t kParallelCopyBytes = int64_t{256} << 10;

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

void permute_kernel(const KernelArgs& args) {
  expect_inputs(args, 1, "permute");
  const BufferDesc& in = *args.inputs[0].desc;
  const BufferDesc& out = *args.output.desc;
  expect_same_dtype(in, out, "permute");
  const std::vector<int64_t>& perm = args.call.ints;
  const int rank = in.shape.rank();
  if (static_cast<int>(perm.size()) != rank || out.shape.rank() != rank) {
    throw std::invalid_argument(fmt::format("permute: {} dims in the permutation for {} -> {}",
                                            perm.size(), in.shape.to_string(),
                                            out.shape.to_string()));
  }
  const auto in_stride = contiguous_strides(in.shape);
  StridedSource view{rank};
  std::array<bool, Shape::kMaxRank> seen{};
  for (int i = 0; i < rank; ++i) {
    const int64_t p = perm[i];
    if (p < 0 || p >= rank || seen[p] || out.shape[i] != in.shape[static_cast<int>(p)]) {
      throw std::invalid_argument(fmt::format("permute: [{}] is not a permutation taking {} to {}",
                                              fmt::join(perm, ","), in.shape.to_string(),
                                              out.shape.to_string()));
    }
    seen[p] = true;
    view.size[i] = out.shape[i];
    view.stride[i] = in_stride[p];
  }
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
        for (int64_t o = first; o < last; ++o) {
          const std::byte* base = src + o * size * inner * N;
          for (int64_t j = 0; j < n; ++j, to += run) {
            const std::byte* from = base + idx[j] * inner * N;
            if (inner == 1) {
              copy_element<N>(to, from);
            } else {
              std::memcpy(to, from, run);
            }
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
  visit_dtype(dtype, [&](auto tag) {
    const auto one = store<typename decltype(tag)::type>(1.0);
    std::memcpy(bytes.data(), &one, sizeof(one));
  });
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

void register_data_movement_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kCopy, copy_kernel);
  set_kernel(table, Kernel::kOptimizationBarrier, optimization_barrier_kernel);
  set_kernel(table, Kernel::kPermute, permute_kernel);
  set_kernel(table, Kernel::kExpand, expand_kernel);
  set_kernel(table, Kernel::kSlice, slice_kernel);
  set_kernel(table, Kernel::kConcat, concat_kernel);
  set_kernel(table, Kernel::kIndexSelect, index_select_kernel);
  set_kernel(table, Kernel::kGather, gather_kernel);
  set_kernel(table, Kernel::kOneHot, one_hot_kernel);
}

}  // namespace axle::cpu
