// engine: process-wide configuration. Every setting is an environment variable (PyTorch/XLA's
// names where the meaning is the same) that code may also set; code wins over the environment.
//
// The structs below are the settings of engine and the parts that take their settings through
// it: each field names its variable, its default and its meaning. A part above engine whose
// settings only it applies declares its group beside its code, in a file of its own named
// *_settings.h (graph/passes/pass_settings.h, actors/runtime/transport_settings.h), read by its
// *_settings.cpp with the lookups below; no other file reads variables (a CTest scan checks it,
// and that README.md's table lists exactly the variables these files read). The settings are
// grouped by where they take effect, and each group is read there, when it takes effect: the
// runtime's when a Runtime starts, the lazy system's at LazySystem::restart, the collective timeout
// at every collective, and so on. A value `set` later applies from the next read of its group.
// Every reader validates its group and throws ConfigError naming the variable and the bad value.
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

/// How ops store values (graph/ops): read on first use and by ops::reload_dtype_config.
struct DTypeSettings {
  /// XLA_USE_BF16, default 0: f32 and f64 tensors are stored as bf16 on the device; tensors
  /// still report their logical dtype.
  bool use_bf16 = false;
  /// XLA_DOWNCAST_BF16, default 0: f32 tensors are stored as bf16 and f64 ones as f32.
  bool downcast_bf16 = false;
  /// XLA_NO_SPECIAL_SCALARS, default 0: the scalars 0 and 1 become graph parameters too,
  /// instead of constants.
  bool no_special_scalars = false;
};

/// IR dumps (graph/dump.h): read by every dump.
struct IrDumpSettings {
  /// XLA_IR_DEBUG, default 0: dumps name the source line that created each node.
  bool source_lines = false;
};

/// The backend and its devices: read at LazySystem::restart, unless the options bring a backend.
struct DeviceSettings {
  /// PJRT_DEVICE, default CPU: the backend; CPU (or cpu) is the one there is.
  std::string pjrt_device = "CPU";
  /// CPU_NUM_DEVICES, default 1: virtual CPU devices (at least 1).
  int cpu_num_devices = 1;
  /// AXLE_CPU_INTRA_OP_THREADS, default 0: per CPU device, the threads a large kernel is split
  /// over (the device actor's thread included), 1 to kMostIntraOpThreads; 0 means the usable
  /// cores shared among the CPU devices (at least one each).
  int cpu_intra_op_threads = 0;
  /// AXLE_CPU_BLOCK_CACHE_MB, default 1024: per CPU device, how many MiB of freed memory in
  /// blocks of 64 KiB and more are kept for reuse (a negative value counts as 0).
  int64_t cpu_block_cache_mb = 1024;
  /// AXLE_CPU_ISA, default auto: the instruction set the CPU kernels use; auto is the widest the
  /// processor has (avx512_bf16, avx512, avx2), a narrower one can be forced for comparison or
  /// testing (the backend refuses one the processor lacks).
  std::string cpu_isa = "auto";
  /// AXLE_DEVICE_MEMORY_LIMIT, default 0 (no limit): bytes each CPU device may hold. A step
  /// whose memory plan, with what the device already holds, would exceed it fails before it
  /// runs (DeviceMemoryError).
  int64_t device_memory_limit = 0;
};

/// The largest AXLE_CPU_INTRA_OP_THREADS accepted.
inline constexpr int kMostIntraOpThreads = 256;

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

/// The lazy system (actors/host/lazy_system.h): read at LazySystem::restart.
struct LazySettings {
  /// XLA_COMPILATION_CACHE_SIZE, default 2048: compiled programs kept in memory (the least
  /// recently used go first).
  int64_t compilation_cache_size = 2048;
  /// AXLE_MAX_GRAPH_NODES, default 1000000: ops traced without a mark_step before the step is
  /// cut (with a warning naming the line).
  int64_t max_graph_nodes = 1'000'000;
  /// XLA_USE_EAGER_DEBUG_MODE, default 0: every op runs as it is traced.
  bool eager_debug_mode = false;
  /// XLA_SYNC_WAIT, default 0: mark_step waits for the device.
  bool sync_wait = false;
  /// AXLE_MAX_STEPS_IN_FLIGHT, default 2: graphs a host thread may have sent to its devices and
  /// not yet seen done; the next one waits for the oldest (0: no bound). It bounds how far
  /// tracing runs ahead of the devices, and with it the memory the queued steps hold.
  int64_t max_steps_in_flight = 2;
  /// AXLE_RUN_ON_HOST_BELOW_US, default 20: a step whose device work took less than this (its
  /// fastest run, less its waits at collectives) runs on the thread that traced it, in
  /// mark_step, sparing the hand-off to the device's thread and back (at a meeting it waits
  /// there up to 1 ms, yielding, whatever AXLE_SPIN_US); small uploads to an idle device are
  /// copied on the uploading thread (0: neither).
  int64_t run_on_host_below_us = 20;
  /// XLA_MAX_ASYNC_QUEUE, default 100 (torch_xla's): asynchronous step closures a host thread
  /// may have handed on and not yet seen run; the next mark_step with such closures waits for
  /// the runner first (0: no bound). Every pending closure holds what it captured.
  int64_t max_async_closures = 100;
  /// XLA_ENABLE_PARAM_ALIASING, default 1: mark_step may overwrite input buffers no tensor holds
  /// (buffer donation).
  bool param_aliasing = true;
  /// AXLE_CHECK_FINITE, default 0: every step waits for the device and checks its floating
  /// results; a NaN or infinity makes it throw NonFiniteError naming the first op that produced
  /// one and the line that traced it.
  bool check_finite = false;
  /// XLA_USE_SPMD, default 0: one virtual device over every device of the process; each step is
  /// one program partitioned over them by its sharding annotations (use_spmd()).
  bool use_spmd = false;
  /// XLA_SAVE_TENSORS_FILE, default none: every executed graph is appended to this file.
  std::string save_tensors_file;
  /// XLA_SAVE_TENSORS_FMT, default text: how: text, dot (Graphviz) or hlo (the lowered program
  /// after the compiler's passes).
  SaveTensorsFormat save_tensors_format = SaveTensorsFormat::kText;
  /// AXLE_TRACE_FILE, default none: a timeline of the whole run is recorded into this file
  /// (Chrome trace-event JSON).
  std::string trace_file;
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

/// Collectives across replicas: read by every rendezvous, mesh_reduce and in-graph collective.
struct CollectiveSettings {
  /// AXLE_COLLECTIVE_TIMEOUT, default 300: seconds a collective waits for every replica before it
  /// fails (above 0 and below 3.2e7).
  std::chrono::nanoseconds timeout = std::chrono::seconds(300);
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

/// Every setting.
struct Settings {
  RuntimeSettings runtime;                   ///< the actor runtime's threads
  LogSettings log;                           ///< logging
  DTypeSettings dtype;                       ///< how ops store values
  IrDumpSettings ir_dump;                    ///< IR dumps
  DeviceSettings devices;                    ///< the backend and its devices
  PersistentCacheSettings persistent_cache;  ///< the persistent compile cache
  LazySettings lazy;                         ///< the lazy system
  AnalysisSettings analysis;                 ///< the debug analysis and the metrics reports
  ProgramDumpSettings program_dump;          ///< dumps of compiled programs
  CollectiveSettings collectives;            ///< collectives across replicas
  ProcessSettings processes;                 ///< the job's processes
};

/// Reads every setting (code's values, then the environment), throwing ConfigError for the
/// first malformed one.
[[nodiscard]] Settings read_settings();

/// Readers of one group each, for the code that applies it, at the moment it applies.
[[nodiscard]] RuntimeSettings read_runtime_settings();
/// With `errors`, a malformed value is described there and its default kept instead of thrown.
[[nodiscard]] LogSettings read_log_settings(std::vector<std::string>* errors = nullptr);
/// Reads the DTypeSettings.
[[nodiscard]] DTypeSettings read_dtype_settings();
/// Reads the IrDumpSettings.
[[nodiscard]] IrDumpSettings read_ir_dump_settings();
/// Reads the DeviceSettings.
[[nodiscard]] DeviceSettings read_device_settings();
/// Reads the PersistentCacheSettings.
[[nodiscard]] PersistentCacheSettings read_persistent_cache_settings();
/// Reads the LazySettings.
[[nodiscard]] LazySettings read_lazy_settings();
/// Reads the AnalysisSettings.
[[nodiscard]] AnalysisSettings read_analysis_settings();
/// Reads the ProgramDumpSettings.
[[nodiscard]] ProgramDumpSettings read_program_dump_settings();
/// Reads the CollectiveSettings.
[[nodiscard]] CollectiveSettings read_collective_settings();
/// Reads the ProcessSettings.
[[nodiscard]] ProcessSettings read_process_settings();

}  // namespace config
}  // namespace axle
