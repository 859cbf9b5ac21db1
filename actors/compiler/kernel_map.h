// actors: which backend kernel each IR op lowers to — the one fact the compiler's fusion
// planner and its lowering share.
#pragma once

#include "axle/backends/executable.h"
#include "axle/graph/op.h"

namespace axle {

/// The kernel an op lowers to (reshape copies, a constant fills); a leaf has none (logic_error).
[[nodiscard]] Kernel kernel_for(Op op);

}  // namespace axle
