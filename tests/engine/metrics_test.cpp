// Tests for engine/metrics.h: the registry, the PyTorch/XLA report format, and thread safety.
#include "axle/engine/metrics.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace axle {
namespace {

// An arbitrary wall-clock instant (late 2023) so timestamps look like real ones.
constexpr int64_t kT0 = 1'700'000'000'000'000'000;
constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kMillisecond = 1'000'000;

// The registry is process-wide, so every test starts from a cleared one.
class Metrics : public ::testing::Test {
 protected:
  void SetUp() override { clear_all(); }
};

std::string percentiles_line(const std::string& report) {
  const auto begin = report.find("  Percentiles: ");
  if (begin == std::string::npos) return {};
  return report.substr(begin, report.find('\n', begin) - begin);
}

TEST_F(Metrics, TimeMetricReportMatchesPyTorchXlaFormat) {
  Metric& m = metric("report.time", MetricKind::kTime);
  m.add_sample(kT0, 1'032'778);
  m.add_sample(kT0 + 1 * kSecond, 2'131'143'520);
  m.add_sample(kT0 + 2 * kSecond, 999);
  m.add_sample(kT0 + 4 * kSecond, 3'723'000'004'000);
  // Sum 3'725'132'181'297 ns; over a 4 s span that is 931'283'045'324.25 ns per second.
  const std::string large = "01h02m03s000ms4.000us";
  const std::string expected =
      "Metric: report.time\n"
      "  TotalSamples: 4\n"
      "  Accumulator: 01h02m05s132ms181.297us\n"
      "  ValueRate: 15m31s283ms45.324us / second\n"
      "  Rate: 1 / second\n"
      "  Percentiles: 1%=0.999us; 5%=0.999us; 10%=0.999us; 20%=0.999us; "
      "50%=02s131ms143.520us; 80%=" +
      large + "; 90%=" + large + "; 95%=" + large + "; 99%=" + large + "\n";
  EXPECT_EQ(metrics_report(), expected);
}

TEST_F(Metrics, BytesMetricReportMatchesPyTorchXlaFormat) {
  Metric& m = metric("report.bytes", MetricKind::kBytes);
  m.add_sample(kT0, 512);
  m.add_sample(kT0 + 1 * kSecond, 1'048'576);
  m.add_sample(kT0 + 2 * kSecond, 1536);
  // Sum 1'050'624 B = 1.0019 MB; over 2 s that is 525'312 B/s = 513 KB/s.
  const std::string expected =
      "Metric: report.bytes\n"
      "  TotalSamples: 3\n"
      "  Accumulator: 1.00MB\n"
      "  ValueRate: 513.00KB / second\n"
      "  Rate: 1.5 / second\n"
      "  Percentiles: 1%=512.00B; 5%=512.00B; 10%=512.00B; 20%=512.00B; 50%=1.50KB; "
      "80%=1.00MB; 90%=1.00MB; 95%=1.00MB; 99%=1.00MB\n";
  EXPECT_EQ(metrics_report(), expected);
}

TEST_F(Metrics, ValueMetricReportMatchesPyTorchXlaFormat) {
  Metric& m = metric("report.value", MetricKind::kValue);
  m.add_sample(kT0, 2.5);
  m.add_sample(kT0 + 250 * kMillisecond, 10);
  m.add_sample(kT0 + 500 * kMillisecond, 0.25);
  const std::string expected =
      "Metric: report.value\n"
      "  TotalSamples: 3\n"
      "  Accumulator: 12.75\n"
      "  ValueRate: 25.50 / second\n"
      "  Rate: 6 / second\n"
      "  Percentiles: 1%=0.25; 5%=0.25; 10%=0.25; 20%=0.25; 50%=2.50; 80%=10.00; 90%=10.00; "
      "95%=10.00; 99%=10.00\n";
  EXPECT_EQ(metrics_report(), expected);
}

TEST_F(Metrics, CounterReportMatchesPyTorchXlaFormat) {
  counter("report.counter").add(42);
  EXPECT_EQ(metrics_report(), "Counter: report.counter\n  Value: 42\n");
}

TEST_F(Metrics, RatesAreOmittedWhenSamplesSpanNoTime) {
  Metric& m = metric("report.single", MetricKind::kValue);
  m.add_sample(kT0, 1);
  EXPECT_EQ(metrics_report(),
            "Metric: report.single\n"
            "  TotalSamples: 1\n"
            "  Accumulator: 1.00\n"
            "  Percentiles: 1%=1.00; 5%=1.00; 10%=1.00; 20%=1.00; 50%=1.00; 80%=1.00; 90%=1.00; "
            "95%=1.00; 99%=1.00\n");
}

TEST_F(Metrics, ReportListsMetricsThenCountersEachSortedByName) {
  counter("order.z").add(1);
  counter("order.c").add(2);
  metric("order.b", MetricKind::kValue).add_sample(kT0, 1);
  metric("order.a", MetricKind::kValue).add_sample(kT0, 1);
  const std::string report = metrics_report();
  const auto a = report.find("Metric: order.a\n");
  const auto b = report.find("Metric: order.b\n");
  const auto c = report.find("Counter: order.c\n");
  const auto z = report.find("Counter: order.z\n");
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(c, std::string::npos);
  ASSERT_NE(z, std::string::npos);
  EXPECT_LT(a, b);
  EXPECT_LT(b, c);
  EXPECT_LT(c, z);
}

TEST_F(Metrics, PercentilesTakeIndexFloorOfPTimesCountOverSortedSamples) {
  Metric& m = metric("percentiles", MetricKind::kValue);
  // Values 1..100 in a scrambled order (37 is coprime with 100, so each value appears once).
  for (int i = 0; i < 100; ++i) m.add_sample(kT0 + i * kMillisecond, (i * 37) % 100 + 1);
  // PyTorch/XLA reads index floor(p * n), so with n = 100 the p-th percentile is value p + 1.
  EXPECT_EQ(percentiles_line(short_metrics_report({}, {"percentiles"})),
            "  Percentiles: 1%=2.00; 5%=6.00; 10%=11.00; 20%=21.00; 50%=51.00; 80%=81.00; "
            "90%=91.00; 95%=96.00; 99%=100.00");
}

TEST_F(Metrics, RingBufferKeepsNewestSamplesWhileTotalsCountAll) {
  Metric& m = metric("ring", MetricKind::kValue);
  ASSERT_EQ(m.max_samples(), kDefaultMetricSamples);
  const int count = static_cast<int>(kDefaultMetricSamples) + 6;
  for (int i = 1; i <= count; ++i) m.add_sample(kT0 + i, i);
  const auto data = metric_data("ring");
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(data->total_samples, count);
  EXPECT_EQ(data->accumulator, static_cast<double>(count) * (count + 1) / 2);
  ASSERT_EQ(data->samples.size(), kDefaultMetricSamples);
  EXPECT_EQ(data->samples.front().second, 7);  // 1..6 were overwritten
  EXPECT_EQ(data->samples.back().second, count);
  EXPECT_NE(metrics_report().find("  TotalSamples: " + std::to_string(count) + "\n"),
            std::string::npos);
}

TEST_F(Metrics, ZeroCountersAreOmitted) {
  Counter& zero = counter("omitted.zero");
  zero.add(3);
  zero.add(-3);
  (void)counter("omitted.never_incremented");
  counter("omitted.one").add(1);
  EXPECT_EQ(metrics_report(), "Counter: omitted.one\n  Value: 1\n");
  EXPECT_EQ(counter_names(), std::vector<std::string>{"omitted.one"});
  EXPECT_FALSE(counter_value("omitted.zero").has_value());
  EXPECT_EQ(counter_value("omitted.one"), 1);
}

TEST_F(Metrics, ShortReportHasOnlyNamedEntriesInGivenOrder) {
  counter("short.kept").add(5);
  counter("short.dropped").add(6);
  (void)counter("short.zero");
  metric("short.second", MetricKind::kValue).add_sample(kT0, 2);
  metric("short.first", MetricKind::kValue).add_sample(kT0, 1);
  metric("short.unnamed", MetricKind::kValue).add_sample(kT0, 3);
  const std::string report = short_metrics_report({"short.kept", "short.zero", "short.unknown"},
                                                  {"short.second", "short.unknown", "short.first"});
  const auto second = report.find("Metric: short.second\n");
  const auto first = report.find("Metric: short.first\n");
  ASSERT_NE(second, std::string::npos);
  ASSERT_NE(first, std::string::npos);
  EXPECT_LT(second, first);
  EXPECT_NE(report.find("Counter: short.kept\n  Value: 5\n"), std::string::npos);
  EXPECT_EQ(report.find("short.dropped"), std::string::npos);
  EXPECT_EQ(report.find("short.zero"), std::string::npos);
  EXPECT_EQ(report.find("short.unknown"), std::string::npos);
  EXPECT_EQ(report.find("short.unnamed"), std::string::npos);
}

void bump_cached_counter() { AXLE_COUNTER_INC("cleared.counter", 1); }
void sample_cached_metric(double value) {
  AXLE_METRIC_ADD("cleared.metric", MetricKind::kValue, value);
}

TEST_F(Metrics, ClearAllResetsEverythingButCachedReferencesKeepWorking) {
  bump_cached_counter();
  sample_cached_metric(4);
  Counter& c = counter("cleared.counter");
  Metric& m = metric("cleared.metric", MetricKind::kValue);
  clear_all();
  EXPECT_EQ(c.value(), 0);
  EXPECT_EQ(m.total_samples(), 0);
  EXPECT_EQ(metrics_report(), "");
  EXPECT_FALSE(counter_value("cleared.counter").has_value());
  EXPECT_FALSE(metric_data("cleared.metric").has_value());
  bump_cached_counter();
  sample_cached_metric(8);
  EXPECT_EQ(&counter("cleared.counter"), &c);
  EXPECT_EQ(&metric("cleared.metric", MetricKind::kValue), &m);
  EXPECT_EQ(counter_value("cleared.counter"), 1);
  const auto data = metric_data("cleared.metric");
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(data->total_samples, 1);
  EXPECT_EQ(data->accumulator, 8);
}

TEST_F(Metrics, CounterIncrementsFromManyThreadsAddUpExactly) {
  constexpr int kThreads = 4;
  constexpr int kIncrements = 100'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kIncrements; ++i) AXLE_COUNTER_INC("concurrent.counter", 1);
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter_value("concurrent.counter"), int64_t{kThreads} * kIncrements);
}

TEST_F(Metrics, ConcurrentSamplesAndReportsAreSafe) {
  constexpr int kThreads = 4;
  constexpr int kSamples = 5'000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < kSamples; ++i) AXLE_METRIC_ADD("concurrent.metric", MetricKind::kTime, i);
    });
  }
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(metrics_report().find("Counter:"), std::string::npos);
    (void)metric_data("concurrent.metric");
    (void)metric_names();
  }
  for (auto& thread : threads) thread.join();
  const auto data = metric_data("concurrent.metric");
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(data->total_samples, kThreads * kSamples);
  EXPECT_EQ(data->accumulator, kThreads * (kSamples * (kSamples - 1.0) / 2));
}

TEST_F(Metrics, MetricDataReturnsSamplesOldestFirst) {
  Metric& m = metric("data", MetricKind::kBytes);
  m.add_sample(kT0, 10);
  m.add_sample(kT0 + 5, 20);
  const auto data = metric_data("data");
  ASSERT_TRUE(data.has_value());
  EXPECT_EQ(data->total_samples, 2);
  EXPECT_EQ(data->accumulator, 30);
  const std::vector<std::pair<int64_t, double>> expected = {{kT0, 10}, {kT0 + 5, 20}};
  EXPECT_EQ(data->samples, expected);
  EXPECT_EQ(metric_names(), std::vector<std::string>{"data"});
  EXPECT_FALSE(metric_data("data.unknown").has_value());
}

TEST_F(Metrics, AddSampleWithoutTimestampUsesWallClock) {
  const auto before = std::chrono::system_clock::now();
  metric("wall_clock", MetricKind::kValue).add_sample(1);
  const auto after = std::chrono::system_clock::now();
  const auto ns = [](auto t) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  };
  const int64_t stamp = metric_data("wall_clock")->samples.at(0).first;
  EXPECT_LE(ns(before), stamp);
  EXPECT_LE(stamp, ns(after));
}

TEST_F(Metrics, ScopedTimerAddsElapsedNanoseconds) {
  Metric& m = metric("timer", MetricKind::kTime);
  {
    ScopedTimer timer(m);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  {
    AXLE_TIMED("timer");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const auto data = metric_data("timer");
  ASSERT_TRUE(data.has_value());
  ASSERT_EQ(data->total_samples, 2);
  for (const auto& sample : data->samples) EXPECT_GE(sample.second, 2e6);
}

TEST_F(Metrics, LookupWithAnotherKindThrows) {
  (void)metric("kind.clash", MetricKind::kTime);
  EXPECT_THROW((void)metric("kind.clash", MetricKind::kBytes), std::invalid_argument);
}

TEST_F(Metrics, DurationsPrintLikePyTorchXla) {
  const auto time = [](double ns) { return format_metric_value(MetricKind::kTime, ns); };
  EXPECT_EQ(time(0), "0.000us");
  EXPECT_EQ(time(0.4), "0.000us");
  EXPECT_EQ(time(1), "0.001us");
  EXPECT_EQ(time(999), "0.999us");
  EXPECT_EQ(time(1'000), "1.000us");
  EXPECT_EQ(time(999'999), "999.999us");
  EXPECT_EQ(time(1'000'000), "001ms0.000us");
  EXPECT_EQ(time(1'032'778), "001ms32.778us");
  EXPECT_EQ(time(2'131'143'520), "02s131ms143.520us");
  EXPECT_EQ(time(60.0 * kSecond), "01m00s000ms0.000us");
  EXPECT_EQ(time(3'723'000'004'000), "01h02m03s000ms4.000us");
  EXPECT_EQ(time(90'061.0 * kSecond + 500'000), "01d01h01m01s000ms500.000us");
  EXPECT_EQ(time(150 * 86'400.0 * kSecond), "150d00h00m00s000ms0.000us");
}

TEST_F(Metrics, DurationsRoundToWholeNanosecondsOnce) {
  const auto time = [](double ns) { return format_metric_value(MetricKind::kTime, ns); };
  // PyTorch/XLA rounds each part on its own and prints these as 002ms500.000us and
  // 1000.000us; rounding once keeps every part below its unit.
  EXPECT_EQ(time(1'500'000), "001ms500.000us");
  EXPECT_EQ(time(999'999.9996), "001ms0.000us");
  EXPECT_EQ(time(-1'500), "-1.500us");
  EXPECT_EQ(time(std::nan("")), "nan");
}

TEST_F(Metrics, BytesAndValuesPrintLikePyTorchXla) {
  const auto bytes = [](double b) { return format_metric_value(MetricKind::kBytes, b); };
  EXPECT_EQ(bytes(0), "0.00B");
  EXPECT_EQ(bytes(1023), "1023.00B");
  EXPECT_EQ(bytes(1024), "1.00KB");
  EXPECT_EQ(bytes(1'048'576), "1.00MB");
  EXPECT_EQ(bytes(1.5 * 1024 * 1024 * 1024), "1.50GB");
  EXPECT_EQ(bytes(std::pow(2.0, 60)), "1024.00PB");
  EXPECT_EQ(format_metric_value(MetricKind::kValue, 3), "3.00");
  EXPECT_EQ(format_metric_value(MetricKind::kValue, -0.5), "-0.50");
}

}  // namespace
}  // namespace axle
