// actors: memory planning — when each buffer of a program can be released and reused, from the
// liveness of its slots (see MemoryPlan in backends/executable.h).
#pragma once

#include <cstddef>

#include "axle/backends/executable.h"

namespace axle {

/// From this size, an all-reduce among devices of one process shares one result: each member
/// reduces a stretch of it, then they meet again before reading it
/// (actors/runtime/device_actor.cpp); below it, that second meeting costs more than each member
/// reducing the whole. Each member holds the result as its own new buffer that nothing writes over.
inline constexpr std::size_t kSharedAllReduceBytes = std::size_t{256} << 10;

/// Plans `program`'s memory (fills program.plan). Inputs belong to the caller and outputs
/// outlive the program, so neither is released or written over; donated inputs
/// (Executable::donated_inputs) are the program's own after their last reader. An all-reduce's
/// result of kSharedAllReduceBytes or more is a new buffer, never written over or reused (the
/// members may share it).
void plan_memory(Executable& program);

}  // namespace axle
