// actors/host: the lazy system's settings, declared beside it (engine's config.h holds the
// lookups; a *_settings.cpp file is where a part reads its variables).
#pragma once

#include <cstdint>
#include <string>

#include "axle/actors/compiler/compiler_settings.h"

namespace axle::config {

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

/// Reads the LazySettings; throws ConfigError naming the variable and its value.
[[nodiscard]] LazySettings read_lazy_settings();

}  // namespace axle::config
