// backends/cpu: what the data-movement kernels (data_movement.cpp, indexing.cpp) share — one
// instance per element size, the checks of their arguments, and an index walk over strided boxes.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {

using Dims = std::array<int64_t, Shape::kMaxRank>;

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
  if (dtype == DType::kInt32) return f(int32_t{});
  if (dtype == DType::kInt64) return f(int64_t{});
  throw std::invalid_argument(
      fmt::format("{}: indices must be s32 or s64, not {}", kernel, dtype_name(dtype)));
}

[[noreturn]] inline void throw_index_out_of_range(std::string_view kernel, int64_t index,
                                                  int64_t dim, int64_t size) {
  throw std::out_of_range(fmt::format("{}: index {} is out of bounds for dimension {} with size {}",
                                      kernel, index, dim, size));
}

inline void expect_inputs(const KernelArgs& args, std::size_t n, std::string_view kernel) {
  if (args.inputs.size() != n) {
    throw std::invalid_argument(
        fmt::format("{}: takes {} inputs, got {}", kernel, n, args.inputs.size()));
  }
}

inline void expect_ints(const KernelArgs& args, std::size_t n, std::string_view kernel) {
  if (args.call.ints.size() != n) {
    throw std::invalid_argument(
        fmt::format("{}: takes {} int attributes, got {}", kernel, n, args.call.ints.size()));
  }
}

// Data movement never converts, so a dtype mismatch is a compiler bug worth reporting.
inline void expect_same_dtype(const BufferDesc& in, const BufferDesc& out,
                              std::string_view kernel) {
  if (in.dtype != out.dtype) {
    throw std::invalid_argument(fmt::format("{}: input is {} but output is {}", kernel,
                                            dtype_name(in.dtype), dtype_name(out.dtype)));
  }
}

inline int64_t checked_dim(int64_t dim, int rank, std::string_view kernel) {
  if (dim < 0 || dim >= rank) {
    throw std::invalid_argument(
        fmt::format("{}: dim {} is out of range for rank {}", kernel, dim, rank));
  }
  return dim;
}

// Product of dims [begin, end) of `shape`.
inline int64_t span_numel(const Shape& shape, int begin, int end) {
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

// Copies of fewer bytes than this run on the calling thread: below it, waking the pool's other
// threads costs about what they would save.
inline constexpr int64_t kParallelCopyBytes = int64_t{256} << 10;

/// Registers index_select, gather and one_hot (indexing.cpp).
void register_indexing_kernels(KernelTable& table);

}  // namespace axle::cpu
