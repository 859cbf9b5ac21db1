// actors/compiler: reading the compiler's settings.
#include "axle/actors/compiler/compiler_settings.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <sstream>
#include <string_view>

#include "axle/engine/config.h"

namespace axle::config {

namespace {

std::string parse_dump_to() {
  std::istringstream words(get_string("XLA_FLAGS", ""));
  std::string word;
  constexpr std::string_view kFlag = "--xla_dump_to=";
  while (words >> word) {
    if (word.starts_with(kFlag)) return word.substr(kFlag.size());
  }
  return {};
}

}  // namespace

PersistentCacheSettings read_persistent_cache_settings() {
  const PersistentCacheSettings defaults;
  return {.path = get_string("XLA_PERSISTENT_CACHE_PATH", defaults.path),
          .read_only = get_bool("XLA_PERSISTENT_CACHE_READ_ONLY", defaults.read_only)};
}

AnalysisSettings read_analysis_settings() {
  const AnalysisSettings defaults;
  const int64_t debug_level = get_int("PT_XLA_DEBUG_LEVEL", defaults.debug_level);
  if (debug_level < 0 || debug_level > std::numeric_limits<int>::max()) {
    throw ConfigError(fmt::format("PT_XLA_DEBUG_LEVEL='{}' is out of range", debug_level));
  }
  return {.debug_level = static_cast<int>(debug_level),
          .metrics_analysis_steps =
              get_int("AXLE_METRICS_ANALYSIS_STEPS", defaults.metrics_analysis_steps),
          .metrics_file = get_string("XLA_METRICS_FILE", defaults.metrics_file)};
}

ProgramDumpSettings read_program_dump_settings() {
  return {.dump_to = parse_dump_to(), .save_hlo_file = get_string("XLA_SAVE_HLO_FILE", "")};
}

}  // namespace axle::config
