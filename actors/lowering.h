// actors: lowering — the compiler's last stages. A step graph becomes a program, the IR passes
// (graph/passes) run over it, and it is lowered to an Executable: one buffer slot per
// instruction, one kernel call per non-leaf instruction.
#pragma once

#include "backends/executable.h"
#include "graph/passes/passes.h"
#include "graph/step_graph.h"

namespace axle {

/// The program computing `graph`'s outputs from its inputs, after the enabled passes.
IntrusivePtr<Executable> compile_graph(const StepGraph& graph, const PassSet& passes);

/// `program` as kernel calls over buffer slots, chains of elementwise ops fused into one kernel
/// each when `fuse` (counted as FusedKernels). `donated` marks the inputs the program may
/// overwrite (StepGraph::donated; empty for none).
IntrusivePtr<Executable> lower(const Program& program, uint64_t graph_hash, bool fuse,
                               std::span<const uint8_t> donated = {});

}  // namespace axle
