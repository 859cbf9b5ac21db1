// engine: configuration — the lookup (code's values, then the environment) and the readers of
// the settings table in config.h. This is the one file of axle that reads environment variables.
#include "axle/engine/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include "axle/engine/cores.h"

namespace axle::config {
namespace {

struct Overrides {
  std::shared_mutex mutex;
  std::map<std::string, std::string, std::less<>> values;
};

Overrides& overrides() {
  static Overrides instance;
  return instance;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string text(s);
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// Parses all of `text` as a T, for value `value` of variable `name`. std::from_chars rather than
// strtod: strtod follows the C locale (after setlocale, "0.5" may fail where ',' is the decimal
// point) and turns an overflow such as "1e999" into inf without complaint. A leading '+', which
// strtod accepted, is still accepted.
template <typename T>
T parse_number(std::string_view name, const std::string& value, std::string_view text,
               std::string_view kind) {
  if (text.size() > 1 && text.front() == '+' && text[1] != '-') text.remove_prefix(1);
  T result{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), result);
  if (ec == std::errc::result_out_of_range) {
    throw ConfigError(fmt::format("{}='{}' is out of range", name, value));
  }
  if (ec != std::errc() || end != text.data() + text.size()) {
    throw ConfigError(fmt::format("{}='{}' is not {}", name, value, kind));
  }
  return result;
}

// The integer value of `name`, or nothing when it is unset or blank.
std::optional<int64_t> optional_int(std::string_view name) {
  auto value = get(name);
  if (!value) return std::nullopt;
  std::string_view text = trim(*value);
  if (text.empty()) return std::nullopt;
  return parse_number<int64_t>(name, *value, text, "an integer");
}

// Values that must fit an int, as the settings that count things keep them.
int get_small_int(std::string_view name, int64_t fallback) {
  const int64_t value = get_int(name, fallback);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max()) {
    throw ConfigError(fmt::format("{}='{}' is out of range", name, value));
  }
  return static_cast<int>(value);
}

// ---- Parsers of the values that have a syntax of their own ----

constexpr std::string_view kLogLevel = "AXLE_LOG_LEVEL";
constexpr std::string_view kVlogLevel = "AXLE_VLOG_LEVEL";
constexpr std::string_view kVmodule = "AXLE_VMODULE";

LogLevel parse_log_level() {
  const std::string raw = get_string(kLogLevel, "");
  const std::string text = lower(trim(raw));
  if (text.empty()) return LogSettings{}.min_level;
  static constexpr std::array<std::string_view, 4> kNames = {"debug", "info", "warning", "error"};
  for (size_t i = 0; i < kNames.size(); ++i) {
    if (text == kNames[i]) return static_cast<LogLevel>(i);
  }
  if (text == "warn") return LogLevel::kWarning;
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') return LogLevel{text[0] - '0'};
  throw ConfigError(fmt::format(
      "{}='{}' is not a log level (use debug, info, warning, error or 0-3)", kLogLevel, raw));
}

std::vector<VmoduleRule> parse_vmodule() {
  const std::string raw = get_string(kVmodule, "");
  std::vector<VmoduleRule> rules;
  std::string_view rest = raw;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view entry = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (entry.empty()) continue;
    const size_t equals = entry.find('=');
    const std::string_view pattern = trim(entry.substr(0, equals));
    const std::string_view number =
        equals == std::string_view::npos ? std::string_view() : trim(entry.substr(equals + 1));
    int64_t verbosity = 0;
    const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), verbosity);
    if (pattern.empty() || number.empty() || ec != std::errc() ||
        end != number.data() + number.size()) {
      throw ConfigError(fmt::format(
          "{}='{}' has a malformed entry '{}' (expected module=verbosity)", kVmodule, raw, entry));
    }
    rules.push_back({std::string(pattern), verbosity});
  }
  return rules;
}

SaveTensorsFormat parse_save_tensors_format() {
  const std::string format = get_string("XLA_SAVE_TENSORS_FMT", "text");
  if (format == "text") return SaveTensorsFormat::kText;
  if (format == "dot") return SaveTensorsFormat::kDot;
  if (format == "hlo") return SaveTensorsFormat::kHlo;
  throw ConfigError(fmt::format("XLA_SAVE_TENSORS_FMT={} is not one of text, dot, hlo", format));
}

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

std::optional<std::string> get(std::string_view name) {
  {
    auto& o = overrides();
    std::shared_lock lock(o.mutex);
    if (auto it = o.values.find(name); it != o.values.end()) return it->second;
  }
  if (const char* env = std::getenv(std::string(name).c_str())) return std::string(env);
  return std::nullopt;
}

int64_t get_int(std::string_view name, int64_t fallback) {
  return optional_int(name).value_or(fallback);
}

double get_double(std::string_view name, double fallback) {
  auto value = get(name);
  if (!value) return fallback;
  std::string_view text = trim(*value);
  if (text.empty()) return fallback;
  return parse_number<double>(name, *value, text, "a number");
}

bool get_bool(std::string_view name, bool fallback) {
  auto value = get(name);
  if (!value) return fallback;
  const std::string text = lower(trim(*value));
  if (text.empty()) return fallback;
  if (text == "1" || text == "true" || text == "yes" || text == "on") return true;
  if (text == "0" || text == "false" || text == "no" || text == "off") return false;
  throw ConfigError(fmt::format("{}='{}' is not a boolean (use 1 or 0)", name, *value));
}

std::string get_string(std::string_view name, std::string_view fallback) {
  auto value = get(name);
  return value ? *value : std::string(fallback);
}

void set(std::string_view name, std::string value) {
  auto& o = overrides();
  std::unique_lock lock(o.mutex);
  o.values.insert_or_assign(std::string(name), std::move(value));
}

void unset(std::string_view name) {
  auto& o = overrides();
  std::unique_lock lock(o.mutex);
  if (auto it = o.values.find(name); it != o.values.end()) o.values.erase(it);
}

// ---- The readers, one per group of config.h; defaults come from the structs themselves ----

namespace {

// More of a job's processes on this host (mpirun sets OMPI_COMM_WORLD_LOCAL_SIZE) than cores.
bool processes_outnumber_cores() {
  return get_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1) > usable_cores();
}

}  // namespace

RuntimeSettings read_runtime_settings() {
  RuntimeSettings defaults;
  // Processes outnumbering cores: a thread spinning for work keeps the core from another
  // process's thread that would bring it, so threads park at once (as Open MPI yields when
  // oversubscribed). 4 processes on 2 cores: a 4 KiB all_reduce among them 300 -> 100 us
  // (benchmarks/README.md).
  if (processes_outnumber_cores()) defaults.spin = std::chrono::microseconds(0);
  RuntimeSettings s;
  s.threads = get_int("AXLE_THREADS", defaults.threads);
  s.spin = std::chrono::microseconds(get_int("AXLE_SPIN_US", defaults.spin.count()));
  s.shutdown_timeout = std::chrono::milliseconds(
      get_int("AXLE_SHUTDOWN_TIMEOUT_MS", defaults.shutdown_timeout.count()));
  return s;
}

LogSettings read_log_settings(std::vector<std::string>* errors) {
  LogSettings s;
  // Each value on its own: with `errors`, a malformed one keeps its default and the rest apply.
  auto read = [errors](auto& field, auto parse) {
    try {
      field = parse();
    } catch (const ConfigError& error) {
      if (!errors) throw;
      errors->emplace_back(error.what());
    }
  };
  read(s.min_level, parse_log_level);
  read(s.vlog_level, [&] { return get_int(kVlogLevel, s.vlog_level); });
  read(s.vmodule, parse_vmodule);
  return s;
}

DTypeSettings read_dtype_settings() {
  const DTypeSettings defaults;
  return {.use_bf16 = get_bool("XLA_USE_BF16", defaults.use_bf16),
          .downcast_bf16 = get_bool("XLA_DOWNCAST_BF16", defaults.downcast_bf16),
          .no_special_scalars = get_bool("XLA_NO_SPECIAL_SCALARS", defaults.no_special_scalars)};
}

IrDumpSettings read_ir_dump_settings() {
  return {.source_lines = get_bool("XLA_IR_DEBUG", IrDumpSettings{}.source_lines)};
}

DeviceSettings read_device_settings() {
  const DeviceSettings defaults;
  DeviceSettings s;
  s.pjrt_device = get_string("PJRT_DEVICE", defaults.pjrt_device);
  if (s.pjrt_device != "CPU" && s.pjrt_device != "cpu") {
    throw ConfigError(
        fmt::format("PJRT_DEVICE={} is not available: axle has a CPU backend only", s.pjrt_device));
  }
  const int64_t devices = get_int("CPU_NUM_DEVICES", defaults.cpu_num_devices);
  if (devices < 1) throw ConfigError(fmt::format("CPU_NUM_DEVICES={} must be at least 1", devices));
  if (devices > std::numeric_limits<int>::max()) {
    throw ConfigError(fmt::format("CPU_NUM_DEVICES='{}' is out of range", devices));
  }
  s.cpu_num_devices = static_cast<int>(devices);
  if (const std::optional<int64_t> threads = optional_int("AXLE_CPU_INTRA_OP_THREADS")) {
    if (*threads < 1 || *threads > kMostIntraOpThreads) {
      throw ConfigError(fmt::format("AXLE_CPU_INTRA_OP_THREADS={} must be between 1 and {}",
                                    *threads, kMostIntraOpThreads));
    }
    s.cpu_intra_op_threads = static_cast<int>(*threads);
  }
  s.cpu_block_cache_mb = get_int("AXLE_CPU_BLOCK_CACHE_MB", defaults.cpu_block_cache_mb);
  s.cpu_isa = get_string("AXLE_CPU_ISA", defaults.cpu_isa);
  s.device_memory_limit = get_int("AXLE_DEVICE_MEMORY_LIMIT", defaults.device_memory_limit);
  if (s.device_memory_limit < 0) {
    throw ConfigError(
        fmt::format("AXLE_DEVICE_MEMORY_LIMIT={} must be a number of bytes (0: no limit)",
                    trim(get("AXLE_DEVICE_MEMORY_LIMIT").value_or(""))));
  }
  return s;
}

PersistentCacheSettings read_persistent_cache_settings() {
  const PersistentCacheSettings defaults;
  return {.path = get_string("XLA_PERSISTENT_CACHE_PATH", defaults.path),
          .read_only = get_bool("XLA_PERSISTENT_CACHE_READ_ONLY", defaults.read_only)};
}

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

AnalysisSettings read_analysis_settings() {
  const AnalysisSettings defaults;
  return {.debug_level = get_small_int("PT_XLA_DEBUG_LEVEL", defaults.debug_level),
          .metrics_analysis_steps =
              get_int("AXLE_METRICS_ANALYSIS_STEPS", defaults.metrics_analysis_steps),
          .metrics_file = get_string("XLA_METRICS_FILE", defaults.metrics_file)};
}

ProgramDumpSettings read_program_dump_settings() {
  return {.dump_to = parse_dump_to(), .save_hlo_file = get_string("XLA_SAVE_HLO_FILE", "")};
}

CollectiveSettings read_collective_settings() {
  const double seconds =
      get_double("AXLE_COLLECTIVE_TIMEOUT",
                 std::chrono::duration<double>(CollectiveSettings{}.timeout).count());
  // Over a year is as good as forever, and keeps the conversion in range.
  if (!(seconds > 0) || seconds > 3.2e7) {
    // The value as given: "1e9" rather than the 1000000000 it parsed to.
    throw ConfigError(fmt::format(
        "AXLE_COLLECTIVE_TIMEOUT={} must be a number of seconds above 0 and below 3.2e7",
        trim(get("AXLE_COLLECTIVE_TIMEOUT").value_or(""))));
  }
  return {.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
              std::chrono::duration<double>(seconds))};
}

ProcessSettings read_process_settings() {
  ProcessSettings s;
  s.launched_by_mpi = get("OMPI_COMM_WORLD_SIZE").has_value() || get("PMIX_RANK").has_value();
  s.host_processes =
      static_cast<int>(std::clamp<int64_t>(get_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1), 1, 1 << 20));
  return s;
}

Settings read_settings() {
  return {.runtime = read_runtime_settings(),
          .log = read_log_settings(),
          .dtype = read_dtype_settings(),
          .ir_dump = read_ir_dump_settings(),
          .devices = read_device_settings(),
          .persistent_cache = read_persistent_cache_settings(),
          .lazy = read_lazy_settings(),
          .analysis = read_analysis_settings(),
          .program_dump = read_program_dump_settings(),
          .collectives = read_collective_settings(),
          .processes = read_process_settings()};
}

}  // namespace axle::config
