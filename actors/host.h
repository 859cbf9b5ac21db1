// actors: the host side of a replica — on the replica's own thread, it turns pending IR into
// step graphs and sends them off: compile requests to the compiler (cache misses only) and
// execute requests to the devices, then re-points the tensors at the output placeholders.
#pragma once

#include <source_location>
#include <string_view>
#include <vector>

#include "graph/tensor.h"

namespace axle {

/// Why a graph is being executed (for metrics and, later, debug analysis).
enum class SyncReason { kMarkStep, kValueAccess, kEager, kGraphLimit, kCompile, kLoaderStep };

/// Short name of a reason ("mark_step", "value access", ...).
std::string_view reason_name(SyncReason reason);

/// Executes the pending IR of `tensors` (those without pending IR are skipped); returns at once
/// unless `wait`, in which case it waits for the results. The results' placeholders (on every
/// device) are appended to `step_outputs` when given.
void sync_tensors(const std::vector<Tensor>& tensors, bool wait, SyncReason reason,
                  const std::source_location& where,
                  std::vector<IntrusivePtr<DeviceData>>* step_outputs = nullptr);

}  // namespace axle
