// engine: the profiler timeline. While a trace runs (start_trace, or AXLE_TRACE_FILE for a whole
// run), every actor records spans of its own work — a host tracing a step, the compiler
// compiling, a device executing, transfers, collectives, loader reads, step closures — into a
// buffer of its thread's, with no lock (one relaxed load when no trace runs, and each buffer holds
// a bounded number of spans). stop_trace writes them as Chrome trace-event JSON, one track per
// actor, with flow arrows from a host's mark_step to the execution it caused; it opens in
// Perfetto (ui.perfetto.dev) or chrome://tracing.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace axle {

namespace trace_internal {
inline constinit std::atomic<bool> g_recording{false};
}  // namespace trace_internal

/// Whether a trace is being recorded.
[[nodiscard]] inline bool trace_recording() noexcept {
  return trace_internal::g_recording.load(std::memory_order_relaxed);
}

/// Starts recording; the trace goes to `path` when stop_trace is called. Throws
/// std::logic_error when a trace is already being recorded.
void start_trace(const std::string& path);

/// Stops recording and writes the trace (atomically: a temporary file renamed into place).
/// Returns the number of spans written; 0 when no trace was running. Throws std::runtime_error
/// naming the file when it cannot be written.
std::size_t stop_trace();

/// Now, in the clock spans use (steady, nanoseconds).
[[nodiscard]] inline int64_t trace_now() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A new id for a flow arrow from one span to another (see record_span).
[[nodiscard]] uint64_t new_trace_flow();

/// Records a finished span [start, end) named `name` on the calling thread's track (its actor's
/// label while a handler runs, else its thread's name). `flow_out` starts an arrow at the span's
/// end, `flow_in` ends one at its start (0: none). Does nothing when no trace runs.
void record_span(std::string_view name, std::string_view category, int64_t start_ns, int64_t end_ns,
                 uint64_t flow_out = 0, uint64_t flow_in = 0);

/// Records the scope as a span (user annotations, as torch_xla's xp.Trace): `Trace t("forward");`.
class Trace {
 public:
  /// Opens the span `name` of `category` (which must outlive the Trace; a literal does). It is
  /// recorded only if a trace runs both now and when the scope ends.
  explicit Trace(std::string name, std::string_view category = "user")
      : name_(std::move(name)), category_(category), start_(trace_recording() ? trace_now() : 0) {}
  /// Records the span.
  ~Trace() {
    if (start_ != 0) record_span(name_, category_, start_, trace_now());
  }
  Trace(const Trace&) = delete;
  Trace& operator=(const Trace&) = delete;

 private:
  std::string name_;
  std::string_view category_;
  int64_t start_;
};

}  // namespace axle
