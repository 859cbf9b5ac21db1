// actors: the lowered program as text — what the compiler made of a graph after its passes:
// buffer slots with types and sizes, which inputs are donated, each kernel call (fused kernels
// included), where the memory plan writes in place and releases buffers, and its peak memory.
// For XLA_SAVE_TENSORS_FMT=hlo, XLA_FLAGS=--xla_dump_to=DIR and XLA_SAVE_HLO_FILE.
#pragma once

#include <string>

#include "axle/backends/executable.h"
#include "axle/graph/step_graph.h"

namespace axle {

/// The program as text (one line per slot and per call).
[[nodiscard]] std::string program_text(const Executable& program);

/// A step graph as text (one line per node, in post-order, with its source line when known).
[[nodiscard]] std::string step_graph_text(const StepGraph& graph);

/// The directory XLA_FLAGS names with --xla_dump_to=DIR, or empty.
[[nodiscard]] std::string xla_dump_dir();

/// Appends `text` to XLA_SAVE_HLO_FILE when it is set (a graph that failed to compile or run).
void save_failed_program(const std::string& what, const std::string& text);

}  // namespace axle
