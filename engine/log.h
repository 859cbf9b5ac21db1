// engine: logging. glog-style lines formatted with fmt, filtered by a minimum level
// (AXLE_LOG_LEVEL) and by per-module verbosity (AXLE_VMODULE, AXLE_VLOG_LEVEL), each carrying the
// actor or thread that wrote it. A disabled line costs one relaxed load and a compare, and its
// arguments are never evaluated, so log statements can stay on hot paths.
//
// Settings, read on first use and again by reload_log_config:
// - AXLE_LOG_LEVEL: minimum level, debug, info, warning or error (any case) or 0..3;
//   default warning.
// - AXLE_VLOG_LEVEL: verbosity of the modules AXLE_VMODULE does not name; default 0.
// - AXLE_VMODULE: per-module verbosity, e.g. "compiler=2,device_*=1". A module is a source file's
//   basename without extension; patterns may use * and ?; the first match wins.
// A malformed value never makes a log statement throw: on first use the logger writes one ERROR
// line naming the variable and value and uses that setting's default. reload_log_config, which
// callers invoke on purpose, throws ConfigError instead and keeps the previous settings.
#pragma once

#include <fmt/core.h>

#include <atomic>
#include <climits>
#include <functional>
#include <string>
#include <string_view>

#include "axle/engine/log_level.h"

namespace axle {

/// Receives each whole line (no trailing newline); called from any thread, concurrently.
using LogSink = std::function<void(LogLevel level, std::string_view line)>;

/// Sends every line to `sink` instead of stderr (nullptr restores stderr). Lines being written
/// while the sink changes may still reach the previous one, so join writers before destroying it.
void set_log_sink(LogSink sink);

/// Re-reads AXLE_LOG_LEVEL, AXLE_VMODULE and AXLE_VLOG_LEVEL, including for call sites that already
/// cached their verbosity. Throws ConfigError naming a malformed value and then changes nothing.
void reload_log_config();

/// Names the calling thread in log lines (e.g. "worker-0", "device-1") when no actor label is set;
/// threads never named show as "thread-<n>", numbered in the order they first log.
void set_thread_name(std::string name);

namespace log_internal {

// The actor label is a pointer to a view owned by a ScopedLogLabel on this thread's stack, so
// entering and leaving a handler batch is one pointer store each way. Inline and constinit so
// that access needs no TLS wrapper call.
inline thread_local constinit const std::string_view* t_actor_label = nullptr;

/// The calling thread's name in logs (and its track in traces): the running actor's label, else
/// the thread's name.
[[nodiscard]] std::string_view thread_label();

// Cached minimum level; kNotLoaded lets every level through to the slow path, which loads the
// settings once and then checks again.
inline constexpr int kNotLoaded = -1;
inline constinit std::atomic<int> g_min_level{kNotLoaded};
[[nodiscard]] bool load_config_and_check(LogLevel level);

// Names for AXLE_LOG's first argument. The level is token-pasted onto a prefix, so a stray
// `#define DEBUG` or `ERROR` elsewhere cannot break the macro.
inline constexpr LogLevel kLevelDEBUG = LogLevel::kDebug;
inline constexpr LogLevel kLevelINFO = LogLevel::kInfo;
inline constexpr LogLevel kLevelWARNING = LogLevel::kWarning;
inline constexpr LogLevel kLevelERROR = LogLevel::kError;

// One per AXLE_VLOG call site, constant-initialised so the function-local static has no guard.
// The site's module verbosity is computed on first use and recomputed by reload_log_config.
class VlogSite {
 public:
  constexpr explicit VlogSite(const char* file) noexcept : file_(file) {}
  VlogSite(const VlogSite&) = delete;
  VlogSite& operator=(const VlogSite&) = delete;

  [[nodiscard]] bool enabled(int verbosity) noexcept {
    const int module_verbosity = module_verbosity_.load(std::memory_order_relaxed);
    return verbosity <= module_verbosity &&
           (module_verbosity != kUnregistered || register_and_check(verbosity));
  }

 private:
  friend class LogState;
  // Above any verbosity a caller can ask for, so the first call always takes the slow path.
  static constexpr int kUnregistered = INT_MAX;
  bool register_and_check(int verbosity) noexcept;

  std::atomic<int> module_verbosity_{kUnregistered};
  const char* file_;
  VlogSite* next_ = nullptr;  // intrusive list of registered sites, guarded by the registry
};

// Out of line so that each log statement instantiates only a tiny forwarding template.
void vwrite(LogLevel level, const char* file, int line, fmt::string_view format,
            fmt::format_args args);

template <typename... Args>
void write(LogLevel level, const char* file, int line, fmt::format_string<Args...> format,
           Args&&... args) {
  vwrite(level, file, line, format, fmt::make_format_args(args...));
}

}  // namespace log_internal

/// Whether a line at `level` would be written; for guarding work done only to build a message.
[[nodiscard]] inline bool log_enabled(LogLevel level) {
  const int min_level = log_internal::g_min_level.load(std::memory_order_relaxed);
  return static_cast<int>(level) >= min_level &&
         (min_level != log_internal::kNotLoaded || log_internal::load_config_and_check(level));
}

/// Names the actor running on this thread in log lines while it handles a batch of messages,
/// restoring the previous label afterwards. `label` must outlive this object.
class ScopedLogLabel {
 public:
  explicit ScopedLogLabel(std::string_view label) noexcept
      : label_(label), previous_(log_internal::t_actor_label) {
    log_internal::t_actor_label = &label_;
  }
  ~ScopedLogLabel() { log_internal::t_actor_label = previous_; }
  ScopedLogLabel(const ScopedLogLabel&) = delete;
  ScopedLogLabel& operator=(const ScopedLogLabel&) = delete;

 private:
  std::string_view label_;
  const std::string_view* previous_;
};

}  // namespace axle

/// Writes a line at `level` (DEBUG, INFO, WARNING or ERROR) formatted by fmt, e.g.
/// `AXLE_LOG(INFO, "compiled {} nodes", n)`. Arguments are not evaluated when the level is off.
#define AXLE_LOG(level, ...)                                                               \
  do {                                                                                     \
    if (::axle::log_enabled(::axle::log_internal::kLevel##level)) {                        \
      ::axle::log_internal::write(::axle::log_internal::kLevel##level, __FILE__, __LINE__, \
                                  __VA_ARGS__);                                            \
    }                                                                                      \
  } while (false)

/// Whether AXLE_VLOG(verbosity, ...) at this point would write; the module lookup is done once
/// per call site, so afterwards this is one relaxed load and a compare.
#define AXLE_VLOG_IS_ON(verbosity)                                            \
  ([](int axle_verbosity) noexcept {                                          \
    static constinit ::axle::log_internal::VlogSite axle_vlog_site{__FILE__}; \
    return axle_vlog_site.enabled(axle_verbosity);                            \
  }(verbosity))

/// Writes an INFO line when `verbosity` is at most this source file's module verbosity
/// (AXLE_VMODULE, else AXLE_VLOG_LEVEL). Asking for verbosity is itself the request to see these
/// lines, so they are written whatever AXLE_LOG_LEVEL says.
#define AXLE_VLOG(verbosity, ...)                                                            \
  do {                                                                                       \
    if (AXLE_VLOG_IS_ON(verbosity)) {                                                        \
      ::axle::log_internal::write(::axle::LogLevel::kInfo, __FILE__, __LINE__, __VA_ARGS__); \
    }                                                                                        \
  } while (false)
