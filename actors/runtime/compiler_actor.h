// actors: the CompilerActor — lowers step graphs to executables, one process-wide. Requests for a
// hash already being compiled join that compile instead of starting another, so N replicas
// tracing the same step compile it once. After a miss in memory it looks in the persistent
// cache (initialize_cache), and stores what it compiles there.
#pragma once

#include <functional>
#include <memory>
#include <source_location>
#include <unordered_map>
#include <vector>

#include "axle/actors/compiler/compile_cache.h"
#include "axle/actors/compiler/compiler_settings.h"
#include "axle/actors/compiler/debug_analysis.h"
#include "axle/actors/compiler/persistent_cache.h"
#include "axle/actors/runtime/observer.h"
#include "axle/engine/actor.h"
#include "axle/graph/passes/passes.h"
#include "axle/graph/step_graph.h"
#include "axle/graph/sync_reason.h"

namespace axle {

/// Compile `graph` (or find it compiled); replies with the program.
struct CompileRequest {
  using Reply = IntrusivePtr<Executable>;
  std::shared_ptr<const StepGraph> graph;
  SyncReason reason = SyncReason::kMarkStep;  ///< for PT_XLA_DEBUG_LEVEL's analysis
  std::source_location where;                 ///< the line that synced the graph
  /// > 0: an SPMD step over this many mesh devices (compile_graph's spmd_devices).
  int64_t spmd_devices = 0;
};

/// The persistent cache in force when asked (initialize_cache may open one at any time), or null.
using PersistentCacheSource = std::function<std::shared_ptr<const PersistentCache>()>;

class CompilerActor : public Actor<CompilerActor, CompileRequest> {
 public:
  /// Runs the passes AXLE_DISABLE_PASSES leaves on (a bad value throws ConfigError here).
  CompilerActor(CompileCache& cache, PersistentCacheSource persistent, const Observers& observers)
      : cache_(cache),
        passes_(PassSet::from_config()),
        persistent_(std::move(persistent)),
        observers_(observers),
        debug_level_(config::read_analysis_settings().debug_level) {}
  void handle(CompileRequest& request, Promise<IntrusivePtr<Executable>>&& reply);

 private:
  CompileCache& cache_;
  PassSet passes_;
  PersistentCacheSource persistent_;
  const Observers& observers_;
  int debug_level_;  // PT_XLA_DEBUG_LEVEL: 1 analyses each compilation
  CompileHistory history_;
};

}  // namespace axle
