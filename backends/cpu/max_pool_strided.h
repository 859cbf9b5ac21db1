// backends/cpu: f32 max pooling and its gradient for windows two columns apart (ResNet's 3x3
// stride-2 pool over a padded plane), eight windows at a time (max_pool_strided.cpp). The plane
// is first copied into a frame of -inf as wide as the windows reach, so no tap is tested for the
// padding; the picks are pooling.cpp's: the first maximum in row-major tap order, or the last NaN.
#pragma once

#include <cstdint>

#include "axle/backends/cpu/pool_geometry.h"

namespace axle::cpu {

/// Whether the strided kernels below take `g`: a column stride of 2, no dilation, at most 64
/// taps, on a processor the build's AVX2 baseline runs.
bool takes_strided_max_pool(const PoolGeometry& g);

/// The floats of scratch one thread's call below needs (the framed plane).
int64_t strided_max_pool_scratch_floats(const PoolGeometry& g);

/// max_pool2d over g.planes planes of x into out (relu first with g.relu_first).
void strided_max_pool(const float* x, float* out, const PoolGeometry& g, float* scratch);

/// Its gradient: grad_x (the planes of x) gets each window's gradient at the tap it picked,
/// summed in window order where windows overlap.
void strided_max_pool_backward(const float* x, const float* grad_out, float* grad_x,
                               const PoolGeometry& g, float* scratch);

}  // namespace axle::cpu
