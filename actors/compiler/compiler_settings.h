// actors/compiler: the compiler's settings (the persistent cache, program dumps, the debug
// analysis, the graphs saved for XLA_SAVE_TENSORS_FILE), declared beside it (engine's config.h
// holds the lookups; a *_settings.cpp file is where a part reads its variables).
#pragma once

#include <cstdint>
#include <string>

namespace axle::config {

/// The persistent compile cache: read once, by the first LazySystem that is not given one, when
/// initialize_cache has not opened one.
struct PersistentCacheSettings {
  /// XLA_PERSISTENT_CACHE_PATH, default none: the directory of the persistent compile cache.
  std::string path;
  /// XLA_PERSISTENT_CACHE_READ_ONLY, default 0: that cache is read, never written.
  bool read_only = false;
};

/// The formats XLA_SAVE_TENSORS_FMT accepts.
enum class SaveTensorsFormat {
  kText,  ///< text
  kDot,   ///< dot (Graphviz)
  kHlo    ///< hlo: the lowered program after the compiler's passes
};

/// The debug analysis and the metrics reports: read at LazySystem::restart and by its compiler.
struct AnalysisSettings {
  /// PT_XLA_DEBUG_LEVEL, default 0: 1 prints an analysis of every compilation and metrics that
  /// point at a problem to stderr; 2 an analysis of every execution too.
  int debug_level = 0;
  /// AXLE_METRICS_ANALYSIS_STEPS, default 100: steps between two looks of that metrics analysis.
  int64_t metrics_analysis_steps = 100;
  /// XLA_METRICS_FILE, default none: the metrics report and step breakdown are appended to this
  /// file at every step.
  std::string metrics_file;
};

/// Dumps of compiled programs (actors/compiler/program_dump.h): read by every compilation and
/// failure.
struct ProgramDumpSettings {
  /// XLA_FLAGS, default none: of its flags, --xla_dump_to=DIR names the directory each compiled
  /// program is written to, before and after the compiler (empty: none).
  std::string dump_to;
  /// XLA_SAVE_HLO_FILE, default none: the graph of a compilation, or the program of an execution,
  /// that failed is appended to this file.
  std::string save_hlo_file;
};

/// Reads the PersistentCacheSettings; throws ConfigError naming the variable and its value.
[[nodiscard]] PersistentCacheSettings read_persistent_cache_settings();
/// Reads the AnalysisSettings.
[[nodiscard]] AnalysisSettings read_analysis_settings();
/// Reads the ProgramDumpSettings.
[[nodiscard]] ProgramDumpSettings read_program_dump_settings();

}  // namespace axle::config
