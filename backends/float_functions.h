// backends: the list of floating-point functions of one tensor, apart so that graph's op table
// can read it without the program format.
#pragma once

/// The floating-point functions of one tensor, one row each: X(Name, "name") gives the kernel
/// kName and the IR op kName (graph/op.h) of that name. Each takes [x], no attributes, and is
/// defined for floating dtypes only (bf16 computed in f32, rounded once); a row's math is in
/// backends/cpu/float_math.h, its tracing, derivative and f64 reference in
/// graph/ops/float_functions.cpp, so adding one touches those files, this row and graph/ops.h.
/// The kernel table (executable.h), the CPU kernels, the IR's op table and the passes read it.
// clang-format off
#define AXLE_FLOAT_FUNCTIONS(X) \
  X(Exp, "exp")                 \
  X(Log, "log")                 \
  X(Sqrt, "sqrt")               \
  X(Rsqrt, "rsqrt")             \
  X(Tanh, "tanh")               \
  X(Sigmoid, "sigmoid")         \
  X(Sin, "sin")                 \
  X(Cos, "cos")                 \
  X(Erf, "erf")                 \
  X(Log1p, "log1p")             \
  X(Softplus, "softplus")
// clang-format on
