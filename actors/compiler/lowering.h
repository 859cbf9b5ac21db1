// actors: lowering — the compiler's last stages. A step graph becomes a program, the IR passes
// (graph/passes) run over it, and it is lowered to an Executable: one buffer slot per
// instruction, one kernel call per non-leaf instruction.
#pragma once

#include <string>

#include "axle/backends/executable.h"
#include "axle/graph/passes/passes.h"
#include "axle/graph/step_graph.h"

namespace axle {

/// The program computing `graph`'s outputs from its inputs, after the enabled passes. With
/// `spmd_devices` > 0, the SPMD compile: the passes run on the global program, sharding
/// propagation gives every instruction a sharding, the partitioner makes the one program each of
/// the mesh's `spmd_devices` devices runs on its shards, and the passes run again on that
/// (Executable::spmd says how to feed and bind it). `spmd_dump`, when given, receives the SPMD
/// compile as text (spmd_text: every instruction's sharding, the collectives inserted).
IntrusivePtr<Executable> compile_graph(const StepGraph& graph, const PassSet& passes,
                                       int64_t spmd_devices = 0, std::string* spmd_dump = nullptr);

/// `program` as kernel calls over buffer slots, chains of elementwise ops fused into one kernel
/// each when `fuse` (counted as FusedKernels), and then some producers folded into their one
/// reader's call (actors/compiler/call_folding.h). `donated` marks the inputs the program may
/// overwrite (StepGraph::donated; empty for none).
IntrusivePtr<Executable> lower(const Program& program, uint64_t graph_hash, bool fuse,
                               std::span<const uint8_t> donated = {});

}  // namespace axle
