// benchmarks/checkpoint_bench, a short run: each figure once, the ratios those of the figures
// printed, one save's bytes those of the model and AdamW's state, the directory gone.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "../samples/trainer_run.h"
#include "bench_lines.h"

namespace {

TEST(CheckpointBench, ReportsTheStepsAroundASaveAndCleansUp) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("axle_checkpoint_bench_test_" + std::to_string(::getpid()));
  const axle::testing::TrainerRun run =
      axle::testing::run_trainer(std::string(AXLE_CHECKPOINT_BENCH) +
                                 " --steps 12 --every 4 --rounds 1 --dir " + dir.string());
  ASSERT_EQ(run.status, 0) << run.output;
  std::map<std::string, std::vector<double>> figures =
      axle::testing::bench_figures(run.output, "checkpoint");
  for (const char* metric :
       {"step_ms", "step_after_save_ms", "save_call_ms", "after_save_excess_over_copy",
        "save_bytes", "loop_step_ms_saving", "loop_step_ms_plain", "loop_saving_over_plain"}) {
    ASSERT_EQ(figures[metric].size(), 1u) << metric << "\n" << run.output;
  }
  EXPECT_GT(figures["step_ms"][0], 0);
  EXPECT_GT(figures["save_call_ms"][0], 0);
  EXPECT_NEAR(
      figures["after_save_excess_over_copy"][0],
      (figures["step_after_save_ms"][0] - figures["step_ms"][0]) / figures["save_call_ms"][0],
      1e-6 * std::abs(figures["after_save_excess_over_copy"][0]) + 1e-9);
  // train_gpt's default model: 3,369,984 bytes of parameters; AdamW keeps two moments of
  // each, and a step count per parameter.
  EXPECT_GE(figures["save_bytes"][0], 3 * 3'369'984.0);
  EXPECT_LT(figures["save_bytes"][0], 3 * 3'369'984.0 + 200'000);
  EXPECT_GT(figures["loop_step_ms_plain"][0], 0);
  EXPECT_NEAR(figures["loop_saving_over_plain"][0],
              figures["loop_step_ms_saving"][0] / figures["loop_step_ms_plain"][0],
              1e-6 * figures["loop_saving_over_plain"][0]);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

}  // namespace
