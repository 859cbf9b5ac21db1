// backends/cpu: what the convolution and pooling kernels (conv.cpp, pooling.cpp) share: the
// in-bounds taps of a window sliding over a padded axis, and the text naming a rejected call.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {

// Division rounding toward -infinity (b > 0); window starts in the padding are negative.
inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/// Taps [lo, hi) of a window starting at `start` (taps at start + t * dilation) that land in
/// [0, size). lo == hi when the window misses the input.
inline std::pair<int64_t, int64_t> taps_inside(int64_t start, int64_t size, int64_t taps,
                                               int64_t dilation) {
  const int64_t lo = std::clamp<int64_t>(ceil_div(-start, dilation), 0, taps);
  const int64_t hi = std::clamp<int64_t>(floor_div(size - 1 - start, dilation) + 1, lo, taps);
  return {lo, hi};
}

/// "ints=[1, 2, 3]": how a call with the wrong number of attributes shows them.
inline std::string raw_ints(const std::vector<int64_t>& ints) {
  std::string s = "ints=[";
  for (std::size_t i = 0; i < ints.size(); ++i) s += fmt::format("{}{}", i ? ", " : "", ints[i]);
  return s + "]";
}

/// "conv2d(f32[1,2,3,4], ...; <attributes>) -> f32[...]": the call a rejection names.
inline std::string describe(const KernelArgs& args, std::string_view attributes) {
  std::string s = fmt::format("{}(", kernel_name(args.call.kernel));
  for (std::size_t i = 0; i < args.inputs.size(); ++i) {
    const BufferDesc& d = *args.inputs[i].desc;
    s += fmt::format("{}{}{}", i ? ", " : "", dtype_name(d.dtype), d.shape.to_string());
  }
  return s + fmt::format("; {}) -> {}{}", attributes, dtype_name(args.output.desc->dtype),
                         args.output.desc->shape.to_string());
}

}  // namespace axle::cpu
