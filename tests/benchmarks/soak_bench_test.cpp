// benchmarks/soak_bench, a short run: every interval reports its figures as JSON lines (RSS, live
// tensors, device bytes, the mean step time and the fastest stretch of steps), live tensors and
// device bytes stay the same from report to report, each interval's fastest stretch is no slower
// than its mean, and the closing ratios are those of the intervals reported.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../samples/trainer_run.h"
#include "bench_lines.h"

namespace {

TEST(SoakBench, ReportsEveryIntervalAndClosesWithTheRatiosOfThoseReported) {
  const axle::testing::TrainerRun run = axle::testing::run_trainer(
      std::string(AXLE_SOAK_BENCH) +
      " --steps 600 --report_every 200 --checkpoint_every 200 --window_steps 20");
  ASSERT_EQ(run.status, 0) << run.output;
  // metric -> values, in the order printed.
  std::map<std::string, std::vector<double>> figures =
      axle::testing::bench_figures(run.output, "soak");
  for (const char* metric :
       {"rss_bytes", "live_tensors", "device_bytes", "step_ms", "fastest_window_step_ms"}) {
    ASSERT_EQ(figures[metric].size(), 3u) << metric << "\n" << run.output;
  }
  const auto& tensors = figures["live_tensors"];
  const auto& device_bytes = figures["device_bytes"];
  EXPECT_GT(tensors[0], 0);
  EXPECT_GT(device_bytes[0], 0);
  for (std::size_t i = 1; i < 3; ++i) {
    EXPECT_EQ(tensors[i], tensors[0]) << "report " << i;
    EXPECT_EQ(device_bytes[i], device_bytes[0]) << "report " << i;
  }
  const auto& mean = figures["step_ms"];
  const auto& fastest = figures["fastest_window_step_ms"];
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_GT(fastest[i], 0) << "report " << i;
    EXPECT_LE(fastest[i], mean[i]) << "report " << i;
  }
  ASSERT_EQ(figures["last_over_second_step_time"].size(), 1u) << run.output;
  EXPECT_DOUBLE_EQ(figures["last_over_second_step_time"][0], mean[2] / mean[1]);
  ASSERT_EQ(figures["last_over_second_fastest_window"].size(), 1u) << run.output;
  EXPECT_DOUBLE_EQ(figures["last_over_second_fastest_window"][0], fastest[2] / fastest[1]);
  ASSERT_EQ(figures["rss_growth"].size(), 1u) << run.output;
  EXPECT_DOUBLE_EQ(figures["rss_growth"][0], figures["rss_bytes"][2] / figures["rss_bytes"][0] - 1);
}

}  // namespace
