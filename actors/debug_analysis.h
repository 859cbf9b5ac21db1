// actors: debug analysis, as PyTorch/XLA's PT_XLA_DEBUG_LEVEL. At level 1 every compilation (by
// the compiler, so a graph that several replicas sync compiles, and prints, once) prints a
// "Compilation Analysis" block (its cause, the graph's hash, inputs and outputs, the
// source line that triggered it, and — when an earlier graph synced from the same line differs —
// the first difference, the reason it recompiles) and, once compiled, a "Post Compilation
// Analysis" block of sizes. Level 2 adds an "Execution Analysis" block per execution. Blocks go
// to stderr. At level 0 nothing is recorded.
#pragma once

#include <memory>
#include <source_location>
#include <string>
#include <string_view>

#include "actors/host.h"
#include "backends/executable.h"
#include "graph/step_graph.h"

namespace axle {

/// Why a graph runs, in PyTorch/XLA's words ("user mark_step", ...).
[[nodiscard]] std::string_view analysis_cause(SyncReason reason);

/// The graphs compiled lately, by the source line that synced them: what a recompilation is
/// compared with. Owned by the compiler.
class CompileHistory {
 public:
  CompileHistory();
  ~CompileHistory();
  CompileHistory(const CompileHistory&) = delete;
  CompileHistory& operator=(const CompileHistory&) = delete;

  /// The Compilation Analysis block for `graph`, synced for `reason` at `where` and about to be
  /// compiled; remembers the graph for later recompilations from that line.
  [[nodiscard]] std::string compilation_analysis(const StepGraph& graph, SyncReason reason,
                                                 const std::source_location& where);

 private:
  struct Lines;
  std::unique_ptr<Lines> lines_;
};

/// The Post Compilation Analysis block: input, output, aliased-input, intermediate and program
/// sizes.
[[nodiscard]] std::string post_compilation_analysis(const Executable& program);

/// The Execution Analysis block (level 2).
[[nodiscard]] std::string execution_analysis(const StepGraph& graph, SyncReason reason,
                                             const std::source_location& where);

}  // namespace axle
