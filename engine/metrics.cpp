// engine: metrics registry and PyTorch/XLA-format reports.
#include "axle/engine/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <map>
#include <memory>
#include <shared_mutex>
#include <stdexcept>

namespace axle {
namespace {

// PyTorch/XLA's default XLA_METRICS_PERCENTILES, kept as whole percents so the sample index
// below is exact integer arithmetic rather than a rounded double product.
constexpr std::array<int64_t, 9> kPercentiles = {1, 5, 10, 20, 50, 80, 90, 95, 99};

struct Registry {
  // Shared for lookups and reports, exclusive only to insert a new name.
  std::shared_mutex mutex;
  // unique_ptr keeps each entry at one address forever; std::map keeps reports sorted.
  std::map<std::string, std::unique_ptr<Counter>, std::less<>> counters;
  std::map<std::string, std::unique_ptr<Metric>, std::less<>> metrics;
};

Registry& registry() {
  // Deliberately never destroyed: hot paths cache references in function-local statics, and
  // those may be used by other statics' destructors after this one would have run.
  static Registry* instance = new Registry();
  return *instance;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Snapshots of the registry's entries; the pointers stay valid after the lock is released.
std::vector<std::pair<std::string, const Counter*>> all_counters() {
  auto& r = registry();
  std::shared_lock lock(r.mutex);
  std::vector<std::pair<std::string, const Counter*>> out;
  out.reserve(r.counters.size());
  for (const auto& [name, entry] : r.counters) out.emplace_back(name, entry.get());
  return out;
}

std::vector<std::pair<std::string, const Metric*>> all_metrics() {
  auto& r = registry();
  std::shared_lock lock(r.mutex);
  std::vector<std::pair<std::string, const Metric*>> out;
  out.reserve(r.metrics.size());
  for (const auto& [name, entry] : r.metrics) out.emplace_back(name, entry.get());
  return out;
}

const Counter* find_counter(std::string_view name) {
  auto& r = registry();
  std::shared_lock lock(r.mutex);
  auto it = r.counters.find(name);
  return it == r.counters.end() ? nullptr : it->second.get();
}

const Metric* find_metric(std::string_view name) {
  auto& r = registry();
  std::shared_lock lock(r.mutex);
  auto it = r.metrics.find(name);
  return it == r.metrics.end() ? nullptr : it->second.get();
}

std::string format_duration(double ns) {
  if (std::isnan(ns)) return "nan";
  if (std::isinf(ns)) return ns > 0 ? "inf" : "-inf";
  if (ns < 0) return "-" + format_duration(-ns);
  constexpr int64_t kDayNs = 86'400'000'000'000;
  // Days stay a double so durations beyond int64 nanoseconds still print. The rest is rounded
  // to whole nanoseconds once, up front, so no part can round up to its unit's size (PyTorch/XLA
  // rounds each part separately and prints 1.5 ms as 002ms500.000us).
  double days = std::floor(ns / static_cast<double>(kDayNs));
  int64_t rest = std::llround(ns - days * static_cast<double>(kDayNs));
  if (rest < 0) rest = 0;
  if (rest >= kDayNs) {
    days += 1;
    rest -= kDayNs;
  }
  struct Part {
    const char* suffix;
    int64_t ns;
    int width;
  };
  constexpr std::array<Part, 4> kParts = {{
      {"h", 3'600'000'000'000, 2},
      {"m", 60'000'000'000, 2},
      {"s", 1'000'000'000, 2},
      {"ms", 1'000'000, 3},
  }};
  // As PyTorch/XLA's documented reports (`001ms32.778us`): start at the largest non-zero unit,
  // zero-pad every part above microseconds, always end in us.
  std::string out;
  if (days >= 1) out = fmt::format("{:02.0f}d", days);
  for (const Part& part : kParts) {
    int64_t count = rest / part.ns;
    rest %= part.ns;
    if (count > 0 || !out.empty())
      fmt::format_to(std::back_inserter(out), "{:0{}}{}", count, part.width, part.suffix);
  }
  fmt::format_to(std::back_inserter(out), "{}.{:03}us", rest / 1000, rest % 1000);
  return out;
}

std::string format_bytes(double bytes) {
  constexpr std::array<const char*, 6> kSuffixes = {"B", "KB", "MB", "GB", "TB", "PB"};
  std::size_t suffix = 0;
  for (; suffix + 1 < kSuffixes.size() && bytes >= 1024.0; ++suffix) bytes /= 1024.0;
  return fmt::format("{:.2f}{}", bytes, kSuffixes[suffix]);
}

void append_metric(std::string& out, std::string_view name, const Metric& metric) {
  MetricData data = metric.data();
  if (data.total_samples == 0) return;
  const MetricKind kind = metric.kind();
  auto it = std::back_inserter(out);
  fmt::format_to(it, "Metric: {}\n", name);
  fmt::format_to(it, "  TotalSamples: {}\n", data.total_samples);
  fmt::format_to(it, "  Accumulator: {}\n", format_metric_value(kind, data.accumulator));
  auto& samples = data.samples;
  // Rates cover only the retained samples, over the span between the oldest and newest; with
  // one sample or one timestamp there is no span, so PyTorch/XLA prints neither line.
  const int64_t span_ns = samples.back().first - samples.front().first;
  if (span_ns > 0) {
    double total = 0.0;
    for (const auto& sample : samples) total += sample.second;
    const double span_s = static_cast<double>(span_ns) / 1e9;
    fmt::format_to(it, "  ValueRate: {} / second\n", format_metric_value(kind, total / span_s));
    fmt::format_to(it, "  Rate: {:g} / second\n", static_cast<double>(samples.size()) / span_s);
  }
  std::sort(samples.begin(), samples.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  out += "  Percentiles: ";
  const auto n = static_cast<int64_t>(samples.size());
  for (std::size_t i = 0; i < kPercentiles.size(); ++i) {
    // PyTorch/XLA's rank: index floor(p * n) of the ascending samples.
    const int64_t index = kPercentiles[i] * n / 100;
    fmt::format_to(it, "{}{}%={}", i > 0 ? "; " : "", kPercentiles[i],
                   format_metric_value(kind, samples[static_cast<std::size_t>(index)].second));
  }
  out += '\n';
}

void append_counter(std::string& out, std::string_view name, const Counter& counter) {
  const int64_t value = counter.value();
  // PyTorch/XLA reports only positive counters.
  if (value <= 0) return;
  fmt::format_to(std::back_inserter(out), "Counter: {}\n  Value: {}\n", name, value);
}

}  // namespace

Metric::Metric(MetricKind kind, std::size_t max_samples) : kind_(kind), max_samples_(max_samples) {
  if (max_samples == 0) throw std::invalid_argument("a metric must keep at least one sample");
}

void Metric::add_sample(double value) { add_sample(now_ns(), value); }

void Metric::add_sample(int64_t timestamp_ns, double value) {
  std::lock_guard lock(mutex_);
  const auto slot = static_cast<std::size_t>(total_samples_ % static_cast<int64_t>(max_samples_));
  // The ring grows on demand so rarely-sampled metrics do not hold max_samples_ slots.
  if (slot == ring_.size()) {
    ring_.emplace_back(timestamp_ns, value);
  } else {
    ring_[slot] = {timestamp_ns, value};
  }
  ++total_samples_;
  accumulator_ += value;
}

int64_t Metric::total_samples() const {
  std::lock_guard lock(mutex_);
  return total_samples_;
}

MetricData Metric::data() const {
  MetricData out;
  std::lock_guard lock(mutex_);
  out.total_samples = total_samples_;
  out.accumulator = accumulator_;
  out.samples.reserve(ring_.size());
  const auto oldest =
      ring_.size() < max_samples_
          ? std::size_t{0}
          : static_cast<std::size_t>(total_samples_ % static_cast<int64_t>(max_samples_));
  out.samples.insert(out.samples.end(), ring_.begin() + static_cast<std::ptrdiff_t>(oldest),
                     ring_.end());
  out.samples.insert(out.samples.end(), ring_.begin(),
                     ring_.begin() + static_cast<std::ptrdiff_t>(oldest));
  return out;
}

void Metric::clear() {
  std::lock_guard lock(mutex_);
  ring_.clear();
  total_samples_ = 0;
  accumulator_ = 0.0;
}

ScopedTimer::~ScopedTimer() {
  const auto elapsed = std::chrono::steady_clock::now() - start_;
  metric_.add_sample(
      static_cast<double>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()));
}

Counter& counter(std::string_view name) {
  auto& r = registry();
  {
    std::shared_lock lock(r.mutex);
    if (auto it = r.counters.find(name); it != r.counters.end()) return *it->second;
  }
  std::unique_lock lock(r.mutex);
  auto [it, inserted] = r.counters.try_emplace(std::string(name));
  if (inserted) it->second = std::make_unique<Counter>();
  return *it->second;
}

Metric& metric(std::string_view name, MetricKind kind, std::size_t max_samples) {
  auto& r = registry();
  Metric* found = nullptr;
  {
    std::shared_lock lock(r.mutex);
    if (auto it = r.metrics.find(name); it != r.metrics.end()) found = it->second.get();
  }
  if (found == nullptr) {
    auto created = std::make_unique<Metric>(kind, max_samples);
    std::unique_lock lock(r.mutex);
    // Another thread may have inserted the name meanwhile; its metric wins and ours is dropped.
    found = r.metrics.try_emplace(std::string(name), std::move(created)).first->second.get();
  }
  if (found->kind() != kind) {
    // Two call sites disagree on the unit; one of them would print nonsense.
    throw std::invalid_argument(
        fmt::format("metric '{}' is registered with another kind (time, bytes or value) than "
                    "this lookup asks for; use a different name for each unit",
                    name));
  }
  return *found;
}

std::string metrics_report() {
  std::string out;
  for (const auto& [name, entry] : all_metrics()) append_metric(out, name, *entry);
  for (const auto& [name, entry] : all_counters()) append_counter(out, name, *entry);
  return out;
}

std::string short_metrics_report(const std::vector<std::string>& counter_names,
                                 const std::vector<std::string>& metric_names) {
  std::string out;
  for (const auto& name : metric_names) {
    if (const Metric* entry = find_metric(name)) append_metric(out, name, *entry);
  }
  for (const auto& name : counter_names) {
    if (const Counter* entry = find_counter(name)) append_counter(out, name, *entry);
  }
  return out;
}

std::vector<std::string> counter_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : all_counters()) {
    if (entry->value() > 0) names.push_back(name);
  }
  return names;
}

std::optional<int64_t> counter_value(std::string_view name) {
  const Counter* entry = find_counter(name);
  if (entry == nullptr) return std::nullopt;
  const int64_t value = entry->value();
  if (value <= 0) return std::nullopt;
  return value;
}

std::vector<std::string> metric_names() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : all_metrics()) {
    if (entry->total_samples() > 0) names.push_back(name);
  }
  return names;
}

std::optional<MetricData> metric_data(std::string_view name) {
  const Metric* entry = find_metric(name);
  if (entry == nullptr) return std::nullopt;
  MetricData data = entry->data();
  if (data.total_samples == 0) return std::nullopt;
  return data;
}

void clear_counters() {
  auto& r = registry();
  std::shared_lock lock(r.mutex);
  for (auto& [name, entry] : r.counters) entry->clear();
}

void clear_metrics() {
  auto& r = registry();
  std::shared_lock lock(r.mutex);
  for (auto& [name, entry] : r.metrics) entry->clear();
}

void clear_all() {
  clear_counters();
  clear_metrics();
}

std::string format_metric_value(MetricKind kind, double value) {
  switch (kind) {
    case MetricKind::kTime:
      return format_duration(value);
    case MetricKind::kBytes:
      return format_bytes(value);
    case MetricKind::kValue:
      break;
  }
  return fmt::format("{:.2f}", value);
}

}  // namespace axle
