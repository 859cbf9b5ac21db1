// actors: memory planning — when each buffer of a program can be released and reused, from the
// liveness of its slots (see MemoryPlan in backends/executable.h).
#pragma once

#include "backends/executable.h"

namespace axle {

/// Whether `call` may write its output over an operand with the output's shape and dtype: it
/// reads each element of that operand only before writing the same element of the output.
[[nodiscard]] bool writes_in_place_safely(Kernel kernel) noexcept;

/// Plans `program`'s memory (fills program.plan). Inputs belong to the caller and outputs
/// outlive the program, so neither is released or written over.
void plan_memory(Executable& program);

}  // namespace axle
