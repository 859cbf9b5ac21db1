// actors: debug analysis, as PyTorch/XLA's PT_XLA_DEBUG_LEVEL. At level 1 every compilation (by
// the compiler, so a graph that several replicas sync compiles, and prints, once) prints a
// "Compilation Analysis" block (its cause, the graph's hash, inputs and outputs, the
// source line that triggered it, and — when an earlier graph synced from the same line differs —
// the first difference, the reason it recompiles) and, once compiled, a "Post Compilation
// Analysis" block of sizes. Level 2 adds an "Execution Analysis" block per execution. Blocks go
// to stderr. At level 0 nothing is recorded.
#pragma once

#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <string_view>

#include "axle/backends/executable.h"
#include "axle/graph/step_graph.h"
#include "axle/graph/sync_reason.h"

namespace axle {

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

/// Auto-metrics analysis: every AXLE_METRICS_ANALYSIS_STEPS steps and when the system shuts
/// down (at PT_XLA_DEBUG_LEVEL 1 and above), a line for each metric that points at a problem
/// over the steps since the last look — compilations or value reads too frequent, a compilation
/// or execution unusually long, replicas waiting for input — each with its likely cause and fix.
class MetricsAnalysis {
 public:
  MetricsAnalysis();
  /// Counts a step; every `every` steps, returns a look's lines (empty when all is well).
  [[nodiscard]] std::string step(int64_t every);
  /// A look at everything since the last one.
  [[nodiscard]] std::string look();

 private:
  struct Snapshot {
    int64_t steps = 0;
    int64_t compiles = 0;
    int64_t transfers = 0;
    int64_t executions = 0;
    double input_wait_ns = 0;
    double wall_ns = 0;
  };
  [[nodiscard]] static Snapshot now(int64_t steps);
  [[nodiscard]] std::string look_locked();

  std::mutex mutex_;
  int64_t steps_ = 0;
  Snapshot last_;
};

/// The Execution Analysis block (level 2).
[[nodiscard]] std::string execution_analysis(const StepGraph& graph, SyncReason reason,
                                             const std::source_location& where);

}  // namespace axle
