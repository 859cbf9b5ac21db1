// engine: configuration — the lookup (code's values, then the environment) and the readers of
// engine's settings in config.h; the parts above read their own groups through these lookups.
#include "axle/engine/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <shared_mutex>

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

std::optional<int64_t> get_optional_int(std::string_view name) {
  auto value = get(name);
  if (!value) return std::nullopt;
  std::string_view text = trim(*value);
  if (text.empty()) return std::nullopt;
  return parse_number<int64_t>(name, *value, text, "an integer");
}

int64_t get_int(std::string_view name, int64_t fallback) {
  return get_optional_int(name).value_or(fallback);
}

std::string get_trimmed(std::string_view name) { return std::string(trim(get(name).value_or(""))); }

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
          .processes = read_process_settings()};
}

}  // namespace axle::config
