// backends/cpu: the elementwise functions vector_math.h maps over arrays, apart from it so that
// the lane algorithms (vector_math_lane.h) sit below the dispatch that uses them.
#pragma once

#include <cstdint>

namespace axle::cpu {

/// Elementwise functions of f32 arrays on vector_math's kernels.
enum class VectorFunction : uint8_t {
  kExp,   ///< as exp_shifted_sum's exp
  kErf,   ///< Eigen's rational approximation (within a few ulps of erff; exactly +-1 past 4)
  kGelu,  ///< 0.5 x (1 + erf(x / sqrt 2)), as Eigen evaluates that expression
};

}  // namespace axle::cpu
