// actors: AXLE_CHECK_FINITE. After a step has run, its floating results are read; when one holds
// a NaN or an infinity, the step's graph is evaluated again, op by op, with the reference
// evaluator (graph/reference) on the same inputs, to find the first op whose value is not finite
// though its operands are. Off by default, and then nothing of this runs.
#pragma once

#include <source_location>
#include <span>
#include <stdexcept>

#include "axle/actors/runtime/errors.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/graph/device_data.h"
#include "axle/graph/step_graph.h"

namespace axle {

/// Throws NonFiniteError when a floating output of the step `graph` (already run, its results
/// `outputs` ready, its inputs not donated) holds a NaN or an infinity. `where` is where the
/// step was cut.
void check_step_finite(const StepGraph& graph, std::span<const IntrusivePtr<DeviceData>> outputs,
                       const std::source_location& where);

}  // namespace axle
