// tests/backends: conv2d computed by plain loops in double, the reference the kernel tests of
// convolutions (cpu_conv_test.cpp, cpu_thread_count_test.cpp) compare with.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {

/// A convolution's geometry, in the order of the kernel's integer attributes.
struct ConvParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  [[nodiscard]] std::vector<int64_t> ints() const {
    return {stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups};
  }
};

/// The output size along one image dim.
inline int64_t conv_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                                int64_t dilation) {
  return (size + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

/// x [N, C, H, W] convolved with w [O, C / groups, kh, kw], with each element's sum of
/// absolute terms (the scale its rounding error is judged against).
inline Reference reference_conv(const HostTensor& x, const HostTensor& w, const ConvParams& p) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t o = w.shape[0], cg = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  const int64_t oh = conv_output_size(h, kh, p.pad_h, p.stride_h, p.dilation_h);
  const int64_t ow = conv_output_size(wd, kw, p.pad_w, p.stride_w, p.dilation_w);
  const int64_t og = o / p.groups;
  Reference ref{{n, o, oh, ow}, {}, {}};
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oc = 0; oc < o; ++oc) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t xo = 0; xo < ow; ++xo) {
          double sum = 0, scale = 0;
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * p.stride_h - p.pad_h + i * p.dilation_h;
                const int64_t ix = xo * p.stride_w - p.pad_w + j * p.dilation_w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t channel = (oc / og) * cg + ic;
                const double term = x.values[((b * c + channel) * h + iy) * wd + ix] *
                                    w.values[((oc * cg + ic) * kh + i) * kw + j];
                sum += term;
                scale += std::abs(term);
              }
            }
          }
          ref.values.push_back(sum);
          ref.scale.push_back(scale);
        }
      }
    }
  }
  return ref;
}

}  // namespace axle::testing
