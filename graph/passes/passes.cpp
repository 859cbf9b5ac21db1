// graph/passes: which passes run, and in what order.
#include "graph/passes/passes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <string>

#include "engine/config.h"

namespace axle {
namespace {

constexpr std::array<std::string_view, static_cast<std::size_t>(Pass::kCount)> kPassNames = {
    "canonicalize", "cse", "constant_folding", "dce", "fusion"};

}  // namespace

std::string_view pass_name(Pass pass) noexcept {
  return kPassNames[static_cast<std::size_t>(pass)];
}

PassSet PassSet::from_config() {
  PassSet passes;
  const std::string names = config::get_string("AXLE_DISABLE_PASSES", "");
  std::size_t begin = 0;
  while (begin <= names.size()) {
    std::size_t end = names.find(',', begin);
    if (end == std::string::npos) end = names.size();
    std::string_view name(names.data() + begin, end - begin);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (!name.empty()) {
      std::size_t i = 0;
      while (i < kPassNames.size() && kPassNames[i] != name) ++i;
      if (i == kPassNames.size()) {
        throw ConfigError(fmt::format("AXLE_DISABLE_PASSES={}: unknown pass '{}' (known: {})",
                                      names, name, fmt::join(kPassNames, ", ")));
      }
      passes.disable(static_cast<Pass>(i));
    }
    begin = end + 1;
  }
  return passes;
}

Program run_passes(Program program, const PassSet& passes) {
  if (passes.enabled(Pass::kCanonicalize)) program = canonicalize(program);
  if (passes.enabled(Pass::kCse)) program = eliminate_common_subexpressions(program);
  if (passes.enabled(Pass::kConstantFolding)) program = fold_constants(program);
  if (passes.enabled(Pass::kDce)) program = eliminate_dead_code(program);
  return program;
}

}  // namespace axle
