// graph: why a graph is being executed — one table of the reasons, with their short names (for
// metrics, dumps and the timeline) and their causes in PyTorch/XLA's words (for
// PT_XLA_DEBUG_LEVEL's analysis).
#pragma once

#include <string_view>

namespace axle {

enum class SyncReason { kMarkStep, kValueAccess, kEager, kGraphLimit, kCompile, kLoaderStep };

/// Short name of a reason: "mark_step", "value access", ...
[[nodiscard]] std::string_view reason_name(SyncReason reason) noexcept;
/// Why a graph with this reason runs, as the debug analysis says it: "user mark_step", ...
[[nodiscard]] std::string_view reason_cause(SyncReason reason) noexcept;
/// Whether the reason is a step: every pending tensor of the replica is synced, so a buffer no
/// tensor holds is read by this step alone (see buffer donation).
[[nodiscard]] bool reason_is_step(SyncReason reason) noexcept;

}  // namespace axle
