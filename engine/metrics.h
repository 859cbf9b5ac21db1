// engine: the process-wide metrics registry (counters and sampled metrics) and its report, in
// PyTorch/XLA's report format so people who read `met.metrics_report()` output feel at home.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace axle {

/// How a metric's values are printed in reports: the unit its samples are recorded in.
enum class MetricKind {
  kValue,  ///< Plain numbers, two decimals (`12.50`).
  kBytes,  ///< Byte counts, scaled by 1024 (`1.00MB`).
  kTime,   ///< Durations in nanoseconds (`02s131ms143.520us`).
};

/// How many recent samples a metric keeps for percentiles and rates, as in PyTorch/XLA.
inline constexpr std::size_t kDefaultMetricSamples = 1024;

/// A named integer for hot paths: incrementing it is one relaxed atomic add, never a lock.
class Counter {
 public:
  /// A counter at zero, unregistered; `axle::counter()` gives one that appears in reports.
  Counter() = default;
  Counter(const Counter&) = delete;
  Counter& operator=(const Counter&) = delete;

  /// Adds `n` (may be negative) to the counter.
  void add(int64_t n = 1) noexcept { value_.fetch_add(n, std::memory_order_relaxed); }

  /// The current value; concurrent adds may or may not be visible yet.
  [[nodiscard]] int64_t value() const noexcept { return value_.load(std::memory_order_relaxed); }

  /// Sets the counter back to zero.
  void clear() noexcept { value_.store(0, std::memory_order_relaxed); }

 private:
  // Each counter gets its own cache line so two hot counters never share one.
  alignas(64) std::atomic<int64_t> value_{0};
};

/// A copy of a metric's state, taken atomically with respect to `Metric::add_sample`.
struct MetricData {
  int64_t total_samples = 0;  ///< Every sample ever added since the last clear.
  double accumulator = 0.0;   ///< Sum of every sample ever added since the last clear.
  /// The most recent samples (at most the metric's capacity), oldest first, as
  /// (timestamp in nanoseconds since the Unix epoch, value).
  std::vector<std::pair<int64_t, double>> samples;
};

/// A named series of samples for timings and sizes: keeps the newest N for percentiles and
/// rates, while the total count and sum cover every sample.
class Metric {
 public:
  /// Creates an unregistered metric; use `axle::metric()` to get one that appears in reports.
  Metric(MetricKind kind, std::size_t max_samples);
  Metric(const Metric&) = delete;
  Metric& operator=(const Metric&) = delete;

  /// Records `value` stamped with the current wall-clock time.
  void add_sample(double value);

  /// Records `value` stamped with `timestamp_ns` (nanoseconds since the Unix epoch); lets
  /// callers that already read the clock, and tests, choose the timestamp.
  void add_sample(int64_t timestamp_ns, double value);

  /// The unit the samples are in, which decides how reports print them.
  [[nodiscard]] MetricKind kind() const noexcept { return kind_; }

  /// How many recent samples the ring buffer keeps.
  [[nodiscard]] std::size_t max_samples() const noexcept { return max_samples_; }

  /// How many samples were added since the last clear, including those the ring dropped.
  [[nodiscard]] int64_t total_samples() const;

  /// A consistent copy of the totals and the retained samples, oldest first.
  [[nodiscard]] MetricData data() const;

  /// Forgets every sample and zeroes the totals; the metric stays usable.
  void clear();

 private:
  const MetricKind kind_;
  const std::size_t max_samples_;
  // Held only for a few stores per sample; contention is rare because reports copy and leave.
  mutable std::mutex mutex_;
  // Grows up to max_samples_, then slot (total_samples_ % max_samples_) is the oldest.
  std::vector<std::pair<int64_t, double>> ring_;
  int64_t total_samples_ = 0;
  double accumulator_ = 0.0;
};

/// Adds the elapsed time of a scope, in nanoseconds, to a time metric when the scope ends.
class ScopedTimer {
 public:
  /// Starts timing into `metric`.
  [[nodiscard]] explicit ScopedTimer(Metric& metric) noexcept
      : metric_(metric), start_(std::chrono::steady_clock::now()) {}
  ScopedTimer(const ScopedTimer&) = delete;
  ScopedTimer& operator=(const ScopedTimer&) = delete;
  /// Adds the elapsed time since construction to the metric.
  ~ScopedTimer();

 private:
  Metric& metric_;
  std::chrono::steady_clock::time_point start_;
};

/// The process-wide counter called `name`, created on first use; the reference stays valid for
/// the life of the process, so hot paths look it up once and cache it (see AXLE_COUNTER_INC).
[[nodiscard]] Counter& counter(std::string_view name);

/// The process-wide metric called `name`, created on first use with `kind` and `max_samples`;
/// the reference stays valid for the life of the process. Throws std::invalid_argument when the
/// metric exists with another kind, or when `max_samples` is zero. An existing metric keeps the
/// capacity it was created with.
[[nodiscard]] Metric& metric(std::string_view name, MetricKind kind,
                             std::size_t max_samples = kDefaultMetricSamples);

/// The full report, PyTorch/XLA's format: every metric with samples, then every positive
/// counter, each group sorted by name.
[[nodiscard]] std::string metrics_report();

/// A report of just the named metrics, then the named counters, in the order given; names that
/// are unknown, have no samples, or are not positive are skipped.
[[nodiscard]] std::string short_metrics_report(const std::vector<std::string>& counter_names,
                                               const std::vector<std::string>& metric_names);

/// Names of the counters with a positive value, sorted (PyTorch/XLA hides the others).
[[nodiscard]] std::vector<std::string> counter_names();

/// The value of counter `name`, or nothing when it is unknown or not positive, as in PyTorch/XLA.
[[nodiscard]] std::optional<int64_t> counter_value(std::string_view name);

/// Names of the metrics with at least one sample, sorted.
[[nodiscard]] std::vector<std::string> metric_names();

/// A copy of metric `name`, or nothing when it is unknown or has no samples.
[[nodiscard]] std::optional<MetricData> metric_data(std::string_view name);

/// Zeroes every counter; cached references stay valid.
void clear_counters();

/// Empties every metric; cached references stay valid.
void clear_metrics();

/// Zeroes every counter and empties every metric, e.g. between training phases or tests;
/// references cached by hot paths stay valid.
void clear_all();

/// Prints `value` the way reports print samples of `kind` (PyTorch/XLA's MetricFnValue,
/// MetricFnBytes and MetricFnTime).
[[nodiscard]] std::string format_metric_value(MetricKind kind, double value);

/// The report and its queries under torch_xla.debug.metrics' module name:
/// axle::metrics::metrics_report(), as `met.metrics_report()`.
namespace metrics {
using axle::clear_all;
using axle::clear_counters;
using axle::clear_metrics;
using axle::counter_names;
using axle::counter_value;
using axle::metric_data;
using axle::metric_names;
using axle::metrics_report;
using axle::short_metrics_report;
}  // namespace metrics

}  // namespace axle

/// Pastes `a` and `b` into one token as they are.
#define AXLE_METRICS_CONCAT_INNER(a, b) a##b
/// Pastes `a` and `b` into one token after expanding them (AXLE_TIMED's unique names).
#define AXLE_METRICS_CONCAT(a, b) AXLE_METRICS_CONCAT_INNER(a, b)

/// Adds `n` to counter `name`, looking the counter up only the first time this line runs.
/// `name` must be the same on every run of the line (it is read once).
#define AXLE_COUNTER_INC(name, n)                                        \
  do {                                                                   \
    static ::axle::Counter& axle_cached_counter = ::axle::counter(name); \
    axle_cached_counter.add(n);                                          \
  } while (false)

/// Adds `value` to metric `name` of `kind`, looking the metric up only the first time this line
/// runs. `name` and `kind` must be the same on every run of the line.
#define AXLE_METRIC_ADD(name, kind, value)                                      \
  do {                                                                          \
    static ::axle::Metric& axle_cached_metric = ::axle::metric((name), (kind)); \
    axle_cached_metric.add_sample(value);                                       \
  } while (false)

/// Times the rest of the enclosing scope into time metric `name`, looked up once per line.
#define AXLE_TIMED(name)                                                     \
  static ::axle::Metric& AXLE_METRICS_CONCAT(axle_timed_metric_, __LINE__) = \
      ::axle::metric((name), ::axle::MetricKind::kTime);                     \
  ::axle::ScopedTimer AXLE_METRICS_CONCAT(                                   \
      axle_scoped_timer_, __LINE__)(AXLE_METRICS_CONCAT(axle_timed_metric_, __LINE__))
