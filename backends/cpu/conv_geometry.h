// backends/cpu: what the convolution kernels share (conv.cpp, conv_small_output.cpp): the
// geometry of one conv2d, where its planes lie, and the short copies its layouts make.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"

namespace axle::cpu {

struct KernelArgs;

struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight (its channel dim is c / groups)
  int64_t oh, ow;      // output
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
  int64_t layout = 0;  // which of x (1), w (2), out (4) are stored with dims 0 and 1 swapped
  bool bias = false;   // a third input, b [o] added to each output plane (a folded add)
  // bf16 data widened to f32: the products multiply in bf16 (exact for such values) on the
  // instruction set's bf16 kernels.
  bool bf16_products = false;
};

/// Where plane (i, j) of x [n, c, ...], w [o, c, ...] and out [n, o, ...] starts: i * first +
/// j * second elements in. Without a swapped layout, the planes of NCHW.
struct ConvStrides {
  int64_t x_n, x_c, w_o, w_c, out_n, out_o;
};

/// The planes' strides of `g`'s layout.
ConvStrides strides_of(const ConvGeometry& g);

/// A convolution's ints [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups] named,
/// for errors (the raw list when there are not seven).
std::string conv_attributes(const std::vector<int64_t>& ints);

/// The geometry of the conv2d `args` describe; throws std::invalid_argument naming the kernel,
/// its shapes and attributes, and what is wrong, when they do not make one.
ConvGeometry plan_conv(const KernelArgs& args);

/// d[0, n) = s[0, n) for the short runs the layouts below copy (a row of taps or of output
/// positions): whole 32- and 16-byte moves, then single elements, with no library call.
template <class T>
inline void copy_run(T* __restrict__ d, const T* __restrict__ s, int64_t n) {
  constexpr int64_t kWide = 32 / sizeof(T), kNarrow = 16 / sizeof(T);
  int64_t j = 0;
  for (; j + kWide <= n; j += kWide) std::memcpy(d + j, s + j, 32);
  if (j + kNarrow <= n) std::memcpy(d + j, s + j, 16), j += kNarrow;
  for (; j < n; ++j) d[j] = s[j];
}

/// d[0, n) = 0.
template <class T>
inline void zero_run(T* __restrict__ d, int64_t n) {
  for (int64_t j = 0; j < n; ++j) d[j] = T(0);
}

/// d[0, n) += s[0, n): blocks of a fixed count, which GCC vectorises at -O2, then a tail.
template <class T>
inline void add_run(T* __restrict__ d, const T* __restrict__ s, int64_t n) {
  constexpr int64_t kBlock = 32 / sizeof(T);
  int64_t j = 0;
  for (; j + kBlock <= n; j += kBlock) {
    for (int64_t l = 0; l < kBlock; ++l) d[j + l] += s[j + l];
  }
  for (; j < n; ++j) d[j] += s[j];
}

#if defined(__AVX2__)
/// Whether conv2d_small_output takes `g`: unit steps, output planes of at most 3 x 3 (kept in
/// registers) and so few output rows over all images that a GEMM's rows would be mostly empty —
/// the weight gradient of a layer with few input channels, such as the MNIST CNN's first (its
/// batch as channels, a 28x28 kernel, a 3x3 output, one image).
bool takes_small_output(const ConvGeometry& g);

/// Convolution of a few small output planes by direct sums in f32 (conv_small_output.cpp).
void conv2d_small_output(const float* x, const float* w, float* out, const ConvGeometry& g,
                         const ConvStrides& s, ComputePool& pool);
#endif

}  // namespace axle::cpu
