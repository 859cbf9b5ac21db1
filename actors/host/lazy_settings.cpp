// actors/host: reading the lazy system's settings.
#include "axle/actors/host/lazy_settings.h"

#include <fmt/format.h>

#include "axle/engine/config.h"

namespace axle::config {

namespace {

SaveTensorsFormat parse_save_tensors_format() {
  const std::string format = get_string("XLA_SAVE_TENSORS_FMT", "text");
  if (format == "text") return SaveTensorsFormat::kText;
  if (format == "dot") return SaveTensorsFormat::kDot;
  if (format == "hlo") return SaveTensorsFormat::kHlo;
  throw ConfigError(fmt::format("XLA_SAVE_TENSORS_FMT={} is not one of text, dot, hlo", format));
}

}  // namespace

LazySettings read_lazy_settings() {
  LazySettings defaults;
  // Also with more processes than cores, where threads do not spin (AXLE_SPIN_US): a host running
  // its step waits at the step's meetings yielding its core, as Open MPI's ranks do there. 4
  // processes on 2 cores: a 4 KiB all_reduce 30-37 -> 12-13 us (benchmarks/README.md).
  LazySettings s;
  s.compilation_cache_size = get_int("XLA_COMPILATION_CACHE_SIZE", defaults.compilation_cache_size);
  s.max_graph_nodes = get_int("AXLE_MAX_GRAPH_NODES", defaults.max_graph_nodes);
  s.eager_debug_mode = get_bool("XLA_USE_EAGER_DEBUG_MODE", defaults.eager_debug_mode);
  s.sync_wait = get_bool("XLA_SYNC_WAIT", defaults.sync_wait);
  s.max_steps_in_flight = get_int("AXLE_MAX_STEPS_IN_FLIGHT", defaults.max_steps_in_flight);
  if (s.max_steps_in_flight < 0) {
    throw ConfigError(fmt::format(
        "AXLE_MAX_STEPS_IN_FLIGHT='{}' must be 0 (no bound) or a number of steps of at least 1",
        get_string("AXLE_MAX_STEPS_IN_FLIGHT", "")));
  }
  s.run_on_host_below_us = get_int("AXLE_RUN_ON_HOST_BELOW_US", defaults.run_on_host_below_us);
  if (s.run_on_host_below_us < 0) {
    throw ConfigError(
        fmt::format("AXLE_RUN_ON_HOST_BELOW_US='{}' must be 0 (never) or a number of microseconds",
                    get_string("AXLE_RUN_ON_HOST_BELOW_US", "")));
  }
  s.max_async_closures = get_int("XLA_MAX_ASYNC_QUEUE", defaults.max_async_closures);
  if (s.max_async_closures < 0) {
    throw ConfigError(fmt::format(
        "XLA_MAX_ASYNC_QUEUE='{}' must be 0 (no bound) or a number of closures of at least 1",
        get_string("XLA_MAX_ASYNC_QUEUE", "")));
  }
  s.param_aliasing = get_bool("XLA_ENABLE_PARAM_ALIASING", defaults.param_aliasing);
  s.check_finite = get_bool("AXLE_CHECK_FINITE", defaults.check_finite);
  s.use_spmd = get_bool("XLA_USE_SPMD", defaults.use_spmd);
  s.save_tensors_file = get_string("XLA_SAVE_TENSORS_FILE", defaults.save_tensors_file);
  s.save_tensors_format = parse_save_tensors_format();
  s.trace_file = get_string("AXLE_TRACE_FILE", defaults.trace_file);
  return s;
}

}  // namespace axle::config
