// backends/cpu: the broadcast loop nest of the elementwise kernels (elementwise.cpp) — an output
// walked as rows, each operand with its own strides (0 where it broadcasts), rows spread over the
// device's threads.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <stdexcept>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {

// The output walked as rows: `dims` after dropping size-1 dims and merging dims every operand
// walks contiguously; strides[k][d] is input k's stride (elements) along dim d, 0 where it
// broadcasts. The last dim is the row.
template <int N>
struct LoopNest {
  int rank = 0;
  std::array<int64_t, Shape::kMaxRank> dims{};
  std::array<std::array<int64_t, Shape::kMaxRank>, N> strides{};
};

template <int N>
LoopNest<N> plan_loops(Kernel kernel, const Shape& out, const std::array<const Shape*, N>& ins) {
  const int rank = out.rank();
  std::array<std::array<int64_t, Shape::kMaxRank>, N> in_strides;
  for (int k = 0; k < N; ++k) {
    if (!broadcasts_to(*ins[k], out)) {
      throw std::invalid_argument(fmt::format("{}: cannot broadcast {} to {}", kernel_name(kernel),
                                              ins[k]->to_string(), out.to_string()));
    }
    in_strides[k] = broadcast_strides(*ins[k], out);
  }
  LoopNest<N> nest;
  for (int d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;  // moves no operand
    std::array<int64_t, N> stride{};
    for (int k = 0; k < N; ++k) stride[k] = in_strides[k][d];
    const int prev = nest.rank - 1;
    bool merge = prev >= 0;
    for (int k = 0; merge && k < N; ++k) merge = nest.strides[k][prev] == stride[k] * out[d];
    const int at = merge ? prev : nest.rank++;
    nest.dims[at] = merge ? nest.dims[at] * out[d] : out[d];
    for (int k = 0; k < N; ++k) nest.strides[k][at] = stride[k];
  }
  if (nest.rank == 0) nest.dims[nest.rank++] = 1;  // a one-element output
  return nest;
}

// Calls row(out_offset, in_offsets, in_steps, n) for rows [first, last) of the nest, in output
// order. The outer dims advance as an odometer, so no element index is divided past the first.
template <int N, class Row>
void for_rows(const LoopNest<N>& nest, int64_t first, int64_t last_row, Row&& row) {
  const int last = nest.rank - 1;
  const int64_t n = nest.dims[last];
  std::array<int64_t, N> step{};
  for (int k = 0; k < N; ++k) step[k] = nest.strides[k][last];
  std::array<int64_t, Shape::kMaxRank> index{};
  std::array<int64_t, N> offset{};
  for (int64_t d = last - 1, rest = first; d >= 0; --d) {
    index[d] = rest % nest.dims[d];
    rest /= nest.dims[d];
    for (int k = 0; k < N; ++k) offset[k] += index[d] * nest.strides[k][d];
  }
  for (int64_t r = first, out = first * n; r < last_row; ++r, out += n) {
    row(out, offset, step, n);
    for (int d = last - 1; d >= 0; --d) {
      for (int k = 0; k < N; ++k) offset[k] += nest.strides[k][d];
      if (++index[d] < nest.dims[d]) break;
      index[d] = 0;
      for (int k = 0; k < N; ++k) offset[k] -= nest.strides[k][d] * nest.dims[d];
    }
  }
}

// Elements per unrolled step: a multiple of every vector width.
inline constexpr int64_t kBlock = 16;

// Outputs smaller than this stay on one thread: waking another costs about as much as a few
// tens of thousands of simple element operations.
constexpr int64_t kParallelElements = int64_t{1} << 15;

// for_rows over the whole nest, on the pool's threads when the output is large: in parts of
// whole rows, or of one row's elements (kBlock-aligned, so every part's blocks start where a
// single thread's would) when there are fewer rows than threads. Each element is computed alone,
// so the split never changes a result.
template <int N, class Row>
void for_each_row(ComputePool& pool, const LoopNest<N>& nest, Row&& row) {
  const int last = nest.rank - 1;
  const int64_t n = nest.dims[last];
  int64_t rows = 1;
  for (int d = 0; d < last; ++d) rows *= nest.dims[d];
  if (pool.threads() == 1 || rows * n < kParallelElements) return for_rows(nest, 0, rows, row);
  if (rows >= pool.threads()) {
    return parallel_for(pool, rows, std::max<int64_t>(1, kParallelElements / 4 / n),
                        [&](int64_t first, int64_t end, int) { for_rows(nest, first, end, row); });
  }
  for_rows(nest, 0, rows, [&](int64_t out, const auto& offset, const auto& step, int64_t) {
    parallel_for(
        pool, n, kParallelElements / 4,
        [&](int64_t begin, int64_t end, int) {
          auto at = offset;
          for (int k = 0; k < N; ++k) at[k] += begin * step[k];
          row(out + begin, at, step, end - begin);
        },
        kBlock);
  });
}

}  // namespace axle::cpu
