// engine: process-wide configuration. Every setting is an environment variable (PyTorch/XLA's
// names where the meaning is the same) that code may also set; code wins over the environment.
//
// The structs below are engine's own settings. Every part above engine declares its groups
// beside its code, in a file of its own named *_settings.h, read by its *_settings.cpp with the
// lookups below: graph/graph_settings.h (how ops store values, IR dumps),
// graph/passes/pass_settings.h, backends/device_settings.h (the backend and its devices),
// actors/compiler/compiler_settings.h (the caches, program dumps, the debug analysis),
// actors/runtime/transport_settings.h and collective_settings.h, actors/host/lazy_settings.h.
// Each field names its variable, its default and its meaning. No other file reads variables (a
// CTest scan checks it, and that README.md's table lists exactly the variables these files read).
// Each group is read where and when it takes effect: the runtime's when a Runtime starts, the lazy
// system's at LazySystem::restart, the collective timeout at every collective, and so on. A value
// `set` later applies from the next read of its group. Every reader validates its group and
// throws ConfigError naming the variable and the bad value.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "axle/engine/log_level.h"

namespace axle {

/// Thrown when a configuration value cannot be parsed; the message names the variable and value.
class ConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace config {

/// Sets `name` for this process, overriding the environment.
void set(std::string_view name, std::string value);

/// Removes a value given by `set`; the environment applies again.
void unset(std::string_view name);

/// The value of `name`: what `set` gave it, else the environment, else nothing. The readers
/// below are how axle reads its settings; these lookups are their parts.
[[nodiscard]] std::optional<std::string> get(std::string_view name);

/// Integer value of `name`, or `fallback` when unset; throws ConfigError when not an integer.
[[nodiscard]] int64_t get_int(std::string_view name, int64_t fallback);

/// Integer value of `name`, or nothing when it is unset or blank; throws ConfigError when not an
/// integer. For settings whose default is not a value one may give.
[[nodiscard]] std::optional<int64_t> get_optional_int(std::string_view name);

/// The value of `name` without its surrounding blanks, or "" when unset: a bad value as given,
/// for the message that refuses it.
[[nodiscard]] std::string get_trimmed(std::string_view name);

/// Floating-point value of `name`, or `fallback` when unset; throws ConfigError when malformed.
[[nodiscard]] double get_double(std::string_view name, double fallback);

/// Boolean value of `name` (1/0, true/false, yes/no, on/off), or `fallback` when unset.
[[nodiscard]] bool get_bool(std::string_view name, bool fallback);

/// String value of `name`, or `fallback` when unset.
[[nodiscard]] std::string get_string(std::string_view name, std::string_view fallback);

// ---- The settings. Numbers and booleans left blank take their default. ----

/// The actor runtime's threads (engine/runtime.h): read by a Runtime made without them.
struct RuntimeSettings {
  /// AXLE_THREADS, default 0: pool worker threads; 0 or less means one per usable core.
  int64_t threads = 0;
  /// AXLE_SPIN_US, default 50: how long an idle worker spins before parking, and a device waits
  /// at a collective for the other members before it parks. The default is 0 when mpirun put
  /// more of the job's processes on this host than it has cores.
  std::chrono::microseconds spin{50};
  /// AXLE_SHUTDOWN_TIMEOUT_MS, default 10000: the longest shutdown() waits for in-flight messages.
  std::chrono::milliseconds shutdown_timeout{10000};
};

/// One entry of AXLE_VMODULE: the modules matching `pattern` log AXLE_VLOG lines up to
/// `verbosity`.
struct VmoduleRule {
  std::string pattern;    ///< a source file's basename without extension; * and ? match any
  int64_t verbosity = 0;  ///< the highest AXLE_VLOG level they write
};

/// Logging (engine/log.h): read on the first log line and by reload_log_config.
struct LogSettings {
  /// AXLE_LOG_LEVEL, default warning: the lowest level written — debug, info, warning (or warn)
  /// or error in any case, or 0-3.
  LogLevel min_level = LogLevel::kWarning;
  /// AXLE_VLOG_LEVEL, default 0: the verbosity of the modules AXLE_VMODULE does not name.
  int64_t vlog_level = 0;
  /// AXLE_VMODULE, default none: per-module verbosity, "module=verbosity" entries separated by
  /// commas, e.g. "compiler=2,device*=1"; the first matching entry wins.
  std::vector<VmoduleRule> vmodule;
};

/// The job's processes: read once, when the process first needs to know its place in the job.
struct ProcessSettings {
  /// OMPI_COMM_WORLD_SIZE (or PMIX_RANK), set by mpirun for each process it starts: the process
  /// is one of a job's processes and joins the others through MPI. Unset: the process is the
  /// whole job and never initialises MPI.
  bool launched_by_mpi = false;
  /// OMPI_COMM_WORLD_LOCAL_SIZE, set by mpirun: how many of the job's processes run on this host
  /// (1 outside mpirun). They share its cores (process_share_of_cores).
  int host_processes = 1;
};

/// Every setting of engine (the parts above read their own groups: see the top of this file).
struct Settings {
  RuntimeSettings runtime;    ///< the actor runtime's threads
  LogSettings log;            ///< logging
  ProcessSettings processes;  ///< the job's processes
};

/// Reads engine's settings (code's values, then the environment), throwing ConfigError for the
/// first malformed one.
[[nodiscard]] Settings read_settings();

/// Readers of one group each, for the code that applies it, at the moment it applies.
[[nodiscard]] RuntimeSettings read_runtime_settings();
/// With `errors`, a malformed value is described there and its default kept instead of thrown.
[[nodiscard]] LogSettings read_log_settings(std::vector<std::string>* errors = nullptr);
/// Reads the ProcessSettings.
[[nodiscard]] ProcessSettings read_process_settings();

}  // namespace config
}  // namespace axle
