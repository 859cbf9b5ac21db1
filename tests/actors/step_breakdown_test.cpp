// The step breakdown (actors/runtime/step_breakdown.h): each replica's steps are charged with the
// time its host traced and waited for values, its device executed and waited at collectives, and
// its closures ran; step_report() averages them per step since the previous report, and
// XLA_METRICS_FILE gets the metrics report and the breakdown at every step.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

// The report's row for `owner`: column name -> value ("steps" included); empty when absent.
std::map<std::string, double> row(const std::string& report, const std::string& owner) {
  std::istringstream lines(report);
  std::string header;
  std::getline(lines, header);
  std::vector<std::string> names;
  {
    std::istringstream words(header);
    std::string word;
    words >> word;  // "ms/step"
    while (words >> word) names.push_back(word);
  }
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(owner + " ", 0) != 0 || line.size() < 12) continue;
    std::istringstream values(line.substr(12));
    std::map<std::string, double> out;
    for (const std::string& name : names) values >> out[name];
    return out;
  }
  return {};
}

class StepBreakdownTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart();
    (void)step_report();  // a fresh window
  }
  void TearDown() override {
    config::unset("XLA_METRICS_FILE");
    LazySystem::restart();
  }
};

TEST_F(StepBreakdownTest, StepsAreChargedForTracingValuesExecutionAndClosures) {
  Tensor w = tensor(std::vector<float>(256 * 256, 0.5f), {256, 256});
  for (int i = 0; i < 5; ++i) {
    w = matmul(w, w) * 0.01;
    add_step_closure([] { std::this_thread::sleep_for(2ms); }, /*run_async=*/true);
    mark_step();
    (void)sum(w).item();  // a value read every step
  }
  wait_device_ops();
  const std::string report = step_report();
  const auto main = row(report, "main");
  ASSERT_FALSE(main.empty()) << report;
  EXPECT_EQ(main.at("steps"), 5) << report;
  EXPECT_GT(main.at("tracing"), 0) << report;
  EXPECT_GT(main.at("values"), 0) << report;
  EXPECT_GT(main.at("execute"), 0) << report;
  EXPECT_GT(main.at("closures"), 0) << report;
  EXPECT_EQ(main.at("collect."), 0) << report;
  // The next report covers only the steps since this one: none.
  EXPECT_TRUE(row(step_report(), "main").empty());
}

TEST_F(StepBreakdownTest, EachReplicaHasARowAndWaitsAtCollectivesAreCharged) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  (void)step_report();
  spawn([](int r) {
    Tensor x = tensor(std::vector<float>(64, 1.0f), {64});
    for (int i = 0; i < 3; ++i) {
      // Replica 1 comes late, so replica 0's device waits for it at the all-reduce.
      if (r == 1) std::this_thread::sleep_for(5ms);
      x = all_reduce(ReduceType::kSum, x, 0.5);
      mark_step();
    }
  });
  const std::string report = step_report();
  const auto first = row(report, "replica 0");
  const auto second = row(report, "replica 1");
  ASSERT_FALSE(first.empty()) << report;
  ASSERT_FALSE(second.empty()) << report;
  EXPECT_EQ(first.at("steps"), 3) << report;
  EXPECT_EQ(second.at("steps"), 3) << report;
  EXPECT_GT(first.at("collect."), 0) << report;
}

TEST_F(StepBreakdownTest, TheMetricsFileGetsTheReportAndBreakdownEveryStep) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("axle_step_breakdown_metrics_" + std::to_string(::getpid()) + ".txt");
  std::filesystem::remove(path);
  config::set("XLA_METRICS_FILE", path.string());
  LazySystem::restart();
  Tensor w = tensor(std::vector<float>(4, 1.0f), {4});
  for (int i = 0; i < 3; ++i) {
    w = w + 1.0;
    mark_step();
  }
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("Step 3\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("Step 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Counter: MarkStep"), std::string::npos) << text;
  EXPECT_NE(text.find("Step Breakdown\nms/step"), std::string::npos) << text;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace axle
