// actors: lowering a step graph to an Executable — one buffer slot per IR node, one kernel call
// per non-leaf node. (The compiler's optimising passes and memory planning slot in here.)
#pragma once

#include "backends/executable.h"
#include "graph/step_graph.h"

namespace axle {

/// The program computing `graph`'s outputs from its inputs.
IntrusivePtr<Executable> lower(const StepGraph& graph);

}  // namespace axle
