// actors: the observers a system attaches unless told otherwise — the metrics of
// metrics_report(), the profiler timeline (start_trace) and the per-replica step breakdown
// (step_report()).
#pragma once

#include <memory>
#include <vector>

#include "axle/actors/runtime/observer.h"

namespace axle {

/// Metrics: ExecuteTime, TransferToDeviceTime, TransferFromDeviceTime, CompileTime,
/// UncachedCompile, CachedCompile, PersistentCache{Hit,Miss,LoadTime}, FusedKernels,
/// ProgramPeakBytes, TraceTime, MarkStep, DonatedInputs, StepClosures.
[[nodiscard]] std::shared_ptr<ActorObserver> metrics_observer();
/// Spans on the timeline while a trace records: executions, collective waits, transfers,
/// compiles, traced steps, syncs (with the arrow from a sync to its execution), closures.
[[nodiscard]] std::shared_ptr<ActorObserver> timeline_observer();
/// The replicas' step accounts: tracing, compiler waits, execution, collectives, closures.
[[nodiscard]] std::shared_ptr<ActorObserver> breakdown_observer();

/// The three above.
[[nodiscard]] std::vector<std::shared_ptr<ActorObserver>> standard_observers();

}  // namespace axle
