// Test helpers for the CPU pooling kernels (backends/cpu/pooling.cpp): a pooling call's
// attributes, and the output shape torch gives them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "axle/engine/shape.h"

namespace axle::testing {

struct PoolParams {
  int64_t kh = 2, kw = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;            // max pool only
  bool ceil_mode = false, count_include_pad = true;  // count_include_pad: avg pool only
};

/// torch's pooling_output_shape, ceil_mode rule included.
inline int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                                int64_t dilation, bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride - pad >= size) --out;  // last window starts past the input
  return out;
}

inline Shape pool_output_shape(const Shape& x, const PoolParams& p) {
  return {x[0], x[1], pool_output_size(x[2], p.kh, p.pad_h, p.stride_h, p.dilation_h, p.ceil_mode),
          pool_output_size(x[3], p.kw, p.pad_w, p.stride_w, p.dilation_w, p.ceil_mode)};
}

inline std::vector<int64_t> max_pool_ints(const PoolParams& p) {
  return {p.kh,    p.kw,         p.stride_h,   p.stride_w, p.pad_h,
          p.pad_w, p.dilation_h, p.dilation_w, p.ceil_mode};
}
inline std::vector<int64_t> avg_pool_ints(const PoolParams& p) {
  return {p.kh, p.kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.ceil_mode, p.count_include_pad};
}

/// Max pools with windows two columns apart (backends/cpu/max_pool_strided.cpp): ResNet's 3x3
/// stride 2 padded and not, overlapping rows with ceil_mode, and a wider window.
inline std::array<PoolParams, 4> windows_two_columns_apart() {
  return {PoolParams{.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
          PoolParams{.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2},
          PoolParams{.kh = 2, .kw = 3, .stride_h = 1, .stride_w = 2, .pad_w = 1, .ceil_mode = true},
          PoolParams{.kh = 5, .kw = 4, .stride_h = 3, .stride_w = 2, .pad_h = 2, .pad_w = 2}};
}

}  // namespace axle::testing
