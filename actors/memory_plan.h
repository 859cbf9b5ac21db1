// actors: memory planning — when each buffer of a program can be released and reused, from the
// liveness of its slots (see MemoryPlan in backends/executable.h).
#pragma once

#include "backends/executable.h"

namespace axle {

/// Plans `program`'s memory (fills program.plan). Inputs belong to the caller and outputs
/// outlive the program, so neither is released or written over; donated inputs
/// (Executable::donated_inputs) are the program's own after their last reader.
void plan_memory(Executable& program);

}  // namespace axle
