// graph/passes: which passes run, and in what order.
#include "axle/graph/passes/passes.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "axle/graph/passes/pass_settings.h"

namespace axle {

// A name for every pass, as AXLE_DISABLE_PASSES names them (pass_settings.h).
static_assert(config::kPassNames.size() == static_cast<std::size_t>(Pass::kCount));

std::string_view pass_name(Pass pass) noexcept {
  return config::kPassNames[static_cast<std::size_t>(pass)];
}

PassSet PassSet::from_config() {
  PassSet passes;
  for (const std::string& name : config::read_pass_settings().disabled) {
    const auto at = std::find(config::kPassNames.begin(), config::kPassNames.end(), name);
    passes.disable(static_cast<Pass>(at - config::kPassNames.begin()));
  }
  return passes;
}

Program run_passes(Program program, const PassSet& passes) {
  program = widen_storage_only_dtypes(std::move(program));
  if (passes.enabled(Pass::kCanonicalize)) program = canonicalize(program);
  if (passes.enabled(Pass::kCse)) program = eliminate_common_subexpressions(program);
  if (passes.enabled(Pass::kConstantFolding)) program = fold_constants(program);
  if (passes.enabled(Pass::kDce)) program = eliminate_dead_code(program);
  if (passes.enabled(Pass::kAllReduceCombiner)) program = combine_all_reduces(std::move(program));
  return program;
}

}  // namespace axle
