// graph: the table of sync reasons.
#include "axle/graph/sync_reason.h"

#include <array>
#include <cstddef>

namespace axle {
namespace {

struct ReasonRow {
  SyncReason reason;
  std::string_view name;
  std::string_view cause;
  bool step;
};

// In enum order.
constexpr std::array<ReasonRow, 6> kReasons = {{
    {SyncReason::kMarkStep, "mark_step", "user mark_step", true},
    {SyncReason::kValueAccess, "value access",
     "most likely user code trying to access a tensor value before mark_step", false},
    {SyncReason::kEager, "eager", "eager mode (XLA_USE_EAGER_DEBUG_MODE) runs each op", false},
    {SyncReason::kGraphLimit, "graph node limit", "the pending graph reached AXLE_MAX_GRAPH_NODES",
     false},
    {SyncReason::kCompile, "compile", "axle::compile", true},
    {SyncReason::kLoaderStep, "parallel loader step", "mark_step in parallel loader at step end",
     true},
}};

constexpr bool rows_in_enum_order() {
  for (std::size_t i = 0; i < kReasons.size(); ++i) {
    if (static_cast<std::size_t>(kReasons[i].reason) != i) return false;
  }
  return true;
}
static_assert(rows_in_enum_order(), "kReasons is indexed by SyncReason");

const ReasonRow* row(SyncReason reason) noexcept {
  const auto i = static_cast<std::size_t>(reason);
  return i < kReasons.size() ? &kReasons[i] : nullptr;
}

}  // namespace

std::string_view reason_name(SyncReason reason) noexcept {
  const ReasonRow* r = row(reason);
  return r ? r->name : "sync";
}

std::string_view reason_cause(SyncReason reason) noexcept {
  const ReasonRow* r = row(reason);
  return r ? r->cause : "unknown";
}

bool reason_is_step(SyncReason reason) noexcept {
  const ReasonRow* r = row(reason);
  return r && r->step;
}

}  // namespace axle
