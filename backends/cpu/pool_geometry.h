// backends/cpu: the geometry of a pooling kernel (pooling.cpp), read from its arguments and
// checked as torch checks them (pool_geometry.cpp).
#pragma once

#include <cstdint>

namespace axle::cpu {

struct KernelArgs;

struct PoolGeometry {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h = 1, dilation_w = 1;
  bool ceil_mode = false, count_include_pad = false;
  bool relu_first = false;  // max pooling of relu(x): the compiler folds a relu into its pool
};

/// Which kernel a pooling geometry is for: the forward pass, or a gradient (whose output is the
/// forward's input).
enum class PoolPass { kForward, kMaxBackward, kAvgBackward };

/// torch's pooling_output_shape: with ceil_mode a last, partial window is kept only if it
/// starts inside the input or the left padding.
int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode);

/// Reads a pooling kernel's attributes and checks them and the shapes as torch does; throws
/// std::invalid_argument naming the kernel, its shapes and what is wrong.
PoolGeometry plan_pool(const KernelArgs& args, bool is_max, PoolPass pass = PoolPass::kForward);

/// Whether every window lies wholly inside the input (no padding, no dilation), so taps need no
/// bounds: the common case, which gets loops without per-tap index arithmetic.
bool windows_inside(const PoolGeometry& g);

}  // namespace axle::cpu
