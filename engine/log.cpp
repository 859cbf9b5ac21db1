// engine: logging — settings, per-call-site verbosity, line layout and output.
#include "axle/engine/log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "axle/engine/config.h"

namespace axle::log_internal {
namespace {

constexpr int kDefaultMinLevel = static_cast<int>(LogLevel::kWarning);

struct VmoduleRule {
  std::string pattern;
  int verbosity;
};

// The settings as the logger uses them: verbosities clamped (see clamp_verbosity).
struct ActiveSettings {
  int min_level = kDefaultMinLevel;
  int default_verbosity = 0;
  std::vector<VmoduleRule> vmodule;
};

// Verbosities are kept below VlogSite::kUnregistered, which marks a site not yet looked up.
int clamp_verbosity(int64_t verbosity, int unregistered) {
  if (verbosity >= unregistered) return unregistered - 1;
  if (verbosity < std::numeric_limits<int>::min()) return std::numeric_limits<int>::min();
  return static_cast<int>(verbosity);
}

ActiveSettings activate(const config::LogSettings& settings, int unregistered) {
  ActiveSettings active;
  active.min_level = static_cast<int>(settings.min_level);
  active.default_verbosity = clamp_verbosity(settings.vlog_level, unregistered);
  for (const config::VmoduleRule& rule : settings.vmodule) {
    active.vmodule.push_back({rule.pattern, clamp_verbosity(rule.verbosity, unregistered)});
  }
  return active;
}

// Glob with * and ?, as glog's --vmodule accepts.
bool glob_match(std::string_view pattern, std::string_view text) {
  size_t p = 0;
  size_t t = 0;
  size_t star = std::string_view::npos;
  size_t star_text = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::string_view file_name(std::string_view path) {
  const size_t slash = path.find_last_of("/\\");
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string_view module_of(std::string_view path) {
  const std::string_view name = file_name(path);
  return name.substr(0, name.rfind('.'));
}

}  // namespace

// The loaded settings and every AXLE_VLOG call site that has looked up its verbosity, so that a
// reload can update the sites' cached values. Only slow paths come here.
class LogState {
 public:
  static LogState& instance() {
    static LogState state;
    return state;
  }

  // Loads the settings on first use, tolerating malformed values (see log.h).
  void ensure_loaded() {
    std::vector<std::string> errors;
    {
      std::lock_guard lock(mutex_);
      if (loaded_) return;
      apply_locked(activate(config::read_log_settings(&errors), VlogSite::kUnregistered));
    }
    // Written after unlocking: the line goes through the sink, which may itself log.
    for (const std::string& error : errors) {
      write(LogLevel::kError, __FILE__, __LINE__, "{}; using its default", error);
    }
  }

  void reload() {
    ActiveSettings settings = activate(config::read_log_settings(), VlogSite::kUnregistered);
    std::lock_guard lock(mutex_);
    apply_locked(std::move(settings));
  }

  int register_site(VlogSite& site) {
    ensure_loaded();
    std::lock_guard lock(mutex_);
    if (site.module_verbosity_.load(std::memory_order_relaxed) == VlogSite::kUnregistered) {
      site.module_verbosity_.store(verbosity_for(site.file_), std::memory_order_relaxed);
      site.next_ = sites_;
      sites_ = &site;
    }
    return site.module_verbosity_.load(std::memory_order_relaxed);
  }

 private:
  void apply_locked(ActiveSettings settings) {
    settings_ = std::move(settings);
    loaded_ = true;
    g_min_level.store(settings_.min_level, std::memory_order_relaxed);
    for (VlogSite* site = sites_; site != nullptr; site = site->next_) {
      site->module_verbosity_.store(verbosity_for(site->file_), std::memory_order_relaxed);
    }
  }

  int verbosity_for(const char* file) const {
    const std::string_view module = module_of(file);
    for (const VmoduleRule& rule : settings_.vmodule) {
      if (glob_match(rule.pattern, module)) return rule.verbosity;
    }
    return settings_.default_verbosity;
  }

  std::mutex mutex_;
  bool loaded_ = false;
  ActiveSettings settings_;
  VlogSite* sites_ = nullptr;
};

bool load_config_and_check(LogLevel level) {
  LogState::instance().ensure_loaded();
  return static_cast<int>(level) >= g_min_level.load(std::memory_order_relaxed);
}

bool VlogSite::register_and_check(int verbosity) noexcept {
  return verbosity <= LogState::instance().register_site(*this);
}

namespace {

struct SinkSlot {
  std::mutex mutex;
  std::shared_ptr<const LogSink> sink;  // null: stderr
};

SinkSlot& sink_slot() {
  static SinkSlot slot;
  return slot;
}

std::atomic<int> g_unnamed_threads{0};
thread_local std::string t_thread_name;

void append_prefix(fmt::memory_buffer& buffer, LogLevel level, const char* file, int line) {
  using std::chrono::system_clock;
  const system_clock::time_point now = system_clock::now();
  const std::time_t seconds = system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
                          now - system_clock::from_time_t(seconds))
                          .count();
  std::tm local{};
  localtime_r(&seconds, &local);
  constexpr std::string_view kLetters = "DIWE";
  fmt::format_to(fmt::appender(buffer), "{}{:02}{:02} {:02}:{:02}:{:02}.{:06} {} {}:{}] ",
                 kLetters[static_cast<size_t>(level)], local.tm_mon + 1, local.tm_mday,
                 local.tm_hour, local.tm_min, local.tm_sec, micros, thread_label(), file_name(file),
                 line);
}

// One write() per line: the kernel keeps a single write to stderr whole, so lines from
// concurrent threads never interleave and no lock is needed.
void write_to_stderr(const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(STDERR_FILENO, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return;  // nowhere left to report a failure to write the log
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
}

}  // namespace

void vwrite(LogLevel level, const char* file, int line, fmt::string_view format,
            fmt::format_args args) {
  fmt::memory_buffer buffer;
  append_prefix(buffer, level, file, line);
  fmt::vformat_to(fmt::appender(buffer), format, args);
  std::shared_ptr<const LogSink> sink;
  {
    SinkSlot& slot = sink_slot();
    std::lock_guard lock(slot.mutex);
    sink = slot.sink;
  }
  if (sink) {
    (*sink)(level, std::string_view(buffer.data(), buffer.size()));
    return;
  }
  buffer.push_back('\n');
  write_to_stderr(buffer.data(), buffer.size());
}

std::string_view thread_label() {
  if (t_actor_label != nullptr && !t_actor_label->empty()) return *t_actor_label;
  if (t_thread_name.empty()) {
    t_thread_name = fmt::format("thread-{}", g_unnamed_threads.fetch_add(1) + 1);
  }
  return t_thread_name;
}

}  // namespace axle::log_internal

namespace axle {

void set_log_sink(LogSink sink) {
  std::shared_ptr<const LogSink> previous =
      sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  auto& slot = log_internal::sink_slot();
  {
    std::lock_guard lock(slot.mutex);
    slot.sink.swap(previous);
  }
  // `previous` is destroyed here, outside the lock, in case its destructor logs.
}

void reload_log_config() { log_internal::LogState::instance().reload(); }

void set_thread_name(std::string name) { log_internal::t_thread_name = std::move(name); }

}  // namespace axle
