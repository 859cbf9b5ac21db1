// backends/cpu: the step list of a fused kernel (kFused; the encoding is documented in
// backends/executable.h) as the CPU kernel reads it. Everything is checked, so that a malformed
// program (from disk, or a bug) gets an error, never an out-of-bounds access.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "axle/backends/cpu/kernel.h"

namespace axle::cpu {

/// One elementwise step of a fused kernel.
struct FusedStep {
  Kernel kernel;
  int32_t destination;  ///< scratch buffer, or -1 for the output
  int32_t a;            ///< >= 0 external operand, < 0 scratch buffer -a - 1
  int32_t b;            ///< as a; 0 for unary steps
  bool tanh_form;       ///< gelu's approximate flag
};

/// The reduction a fused kernel may end in: operand a (as FusedStep::a), reduced over `dims`
/// of the chain's shape.
struct FusedReduction {
  Kernel kernel;
  int32_t a;
  Shape shape;
  bool keepdim;
  std::vector<int64_t> dims;
};

struct FusedSteps {
  int32_t buffers = 0;
  std::vector<FusedStep> steps;
  std::optional<FusedReduction> reduction;
};

/// The steps of the kFused call `args.call`, their operands checked against `args.inputs`. Throws
/// std::invalid_argument ("fused: ...") when they are malformed. The reduction's dims and shapes
/// are checked when it is planned (plan_reduction).
[[nodiscard]] FusedSteps parse_fused_steps(const KernelArgs& args);

/// Throws std::invalid_argument("fused: " + what).
[[noreturn]] void fused_malformed(const std::string& what);

}  // namespace axle::cpu
