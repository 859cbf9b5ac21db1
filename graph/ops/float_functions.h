// graph/ops: the floating-point functions of one tensor (backends/float_functions.h lists them),
// each one a row of float_functions.cpp: how autocast treats it, its derivative and its exact
// value in double. The traced functions (axle::exp, ...) read their row; so does the reference
// evaluator.
#pragma once

#include "axle/graph/autograd/function.h"
#include "axle/graph/op.h"

namespace axle::ops {

/// One float function's row.
struct FloatFunction {
  Op op;
  /// On autocast's f32 list (PyTorch's): a bf16 operand is computed in f32 under autocast.
  bool autocast_f32;
  autograd::Derivative derivative;
  /// The function in double, for graph/reference (what the kernels are checked against).
  double (*reference)(double x);
};

/// The row of float function `op` (op_family(op) is OpFamily::kFloatFunction); throws
/// std::logic_error for another op.
[[nodiscard]] const FloatFunction& float_function(Op op);

}  // namespace axle::ops
