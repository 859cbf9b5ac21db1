// graph/passes: which passes run, and in what order.
#include "axle/graph/passes/passes.h"

#include <algorithm>
#include <array>
#include <string>
#include <utility>

#include "axle/engine/config.h"

namespace axle {
namespace {

constexpr std::array<std::string_view, static_cast<std::size_t>(Pass::kCount)> kPassNames = {
    "canonicalize", "cse", "constant_folding", "dce", "all_reduce_combiner", "fusion"};
// AXLE_DISABLE_PASSES accepts config::kPassNames; they must be these.
static_assert(std::ranges::equal(kPassNames, config::kPassNames));

}  // namespace

std::string_view pass_name(Pass pass) noexcept {
  return kPassNames[static_cast<std::size_t>(pass)];
}

PassSet PassSet::from_config() {
  PassSet passes;
  for (const std::string& name : config::read_pass_settings().disabled) {
    const auto at = std::find(kPassNames.begin(), kPassNames.end(), name);
    passes.disable(static_cast<Pass>(at - kPassNames.begin()));
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
