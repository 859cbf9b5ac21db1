// checkpoint_bench: what an asynchronous checkpoint costs the steps around it. train_gpt's step
// (its default model, AdamW) runs --steps times, each timed to its end on the device, with
// CheckpointManager.save_async of the model and the optimizer after every --every-th:
//   step_ms              — the median step, those right after a save left out
//   step_after_save_ms   — the median of the steps right after a save (the writer thread writes
//                          and fsyncs while they run)
//   save_call_ms         — the median time of the save_async call itself: the master waits there
//                          for the step's values to reach the host (the device-to-host copy)
//   after_save_excess_over_copy — (step_after_save_ms - step_ms) / save_call_ms; the target is
//                          at most 1: the step after a save is slower by no more than the copy
//   save_bytes           — host bytes of one save (CheckpointAsyncHostBytes)
// Then the loop as training runs it (no wait between steps), --steps steps with a save every
// --every and --steps without, alternated --rounds times (ABBA, so that drift falls on both):
//   loop_step_ms_saving, loop_step_ms_plain — the mean step of each (wall time / steps; the
//                          last save's disk work after the loop is not the steps')
//   loop_saving_over_plain — their ratio over all rounds; the target is at most 1.05
// JSON lines on stdout (see benchmarks/README.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/io/checkpoint_manager.h"
#include "benchmarks/gpt_step.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Timings {
  std::vector<double> steps, after_save, save_calls;
  double saving_loops_ms = 0, plain_loops_ms = 0;  // summed over the rounds
};

Timings run(const std::filesystem::path& dir, int steps, int every, int rounds) {
  GptTrainingStep step(/*amp=*/false);
  for (int i = 0; i < 3; ++i) step();  // compiles; AdamW's state starts
  wait_device_ops();
  CheckpointManager manager(dir, every, /*max_to_keep=*/2);
  const TrainingState state = step.state();
  Timings t;
  int64_t i = 0;  // the step count, on across the passes: every save is a new step
  bool saved_before = false;
  for (int k = 0; k < steps; ++k) {
    const auto start = Clock::now();
    step();
    wait_device_ops();
    (saved_before ? t.after_save : t.steps).push_back(ms_since(start));
    const auto save_start = Clock::now();
    saved_before = manager.save_async(++i, state);
    if (saved_before) t.save_calls.push_back(ms_since(save_start));
  }
  manager.join();
  for (int round = 0; round < rounds; ++round) {
    for (const bool saving : {round % 2 == 0, round % 2 != 0}) {
      const auto start = Clock::now();
      for (int k = 0; k < steps; ++k) {
        step();
        ++i;
        if (saving) (void)manager.save_async(i, state);
      }
      wait_device_ops();
      (saving ? t.saving_loops_ms : t.plain_loops_ms) += ms_since(start);
      manager.join();
    }
  }
  return t;
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  bool quick = false;
  int steps = 200;
  int every = 20;
  int rounds = 3;
  std::string dir = (std::filesystem::temp_directory_path() / "axle_checkpoint_bench").string();
  CLI::App app{"checkpoint_bench: what an asynchronous checkpoint costs the steps around it"};
  app.add_flag("--quick", quick, "a short run (60 steps, a save every 10, one round)");
  app.add_option("--steps", steps, "steps timed")->check(CLI::PositiveNumber);
  app.add_option("--every", every, "steps between saves")->check(CLI::PositiveNumber);
  app.add_option("--rounds", rounds, "alternated loops with and without saves, each")
      ->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "the checkpoint directory (emptied first and removed after)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    steps = 60;
    every = 10;
    rounds = 1;
  }
  try {
    std::filesystem::remove_all(dir);
    LazySystem::restart();
    clear_all();
    Timings t = run(dir, steps, every, rounds);
    std::filesystem::remove_all(dir);
    const double step_ms = quantile(t.steps, 0.5);
    const double after = quantile(t.after_save, 0.5);
    const double copy = quantile(t.save_calls, 0.5);
    const std::map<std::string, Param> labels{{"model", std::string("gpt")},
                                              {"steps", int64_t{steps}},
                                              {"every", int64_t{every}},
                                              {"rounds", int64_t{rounds}}};
    emit("checkpoint", "step_ms", step_ms, "ms", labels);
    emit("checkpoint", "step_after_save_ms", after, "ms", labels);
    emit("checkpoint", "save_call_ms", copy, "ms", labels);
    emit("checkpoint", "after_save_excess_over_copy", (after - step_ms) / copy, "ratio", labels);
    const double loop_steps = static_cast<double>(steps) * rounds;
    emit("checkpoint", "loop_step_ms_saving", t.saving_loops_ms / loop_steps, "ms", labels);
    emit("checkpoint", "loop_step_ms_plain", t.plain_loops_ms / loop_steps, "ms", labels);
    emit("checkpoint", "loop_saving_over_plain", t.saving_loops_ms / t.plain_loops_ms, "ratio",
         labels);
    if (const std::optional<MetricData> bytes = metric_data("CheckpointAsyncHostBytes")) {
      emit("checkpoint", "save_bytes",
           bytes->accumulator / static_cast<double>(bytes->total_samples), "bytes", labels);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
