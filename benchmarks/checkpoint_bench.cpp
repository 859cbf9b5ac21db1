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
// JSON lines on stdout (see benchmarks/README.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/host/lazy_system.h"
#include "axle.h"
#include "benchmarks/gpt_step.h"
#include "benchmarks/report.h"
#include "io/checkpoint_manager.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct Timings {
  std::vector<double> steps, after_save, save_calls;
};

Timings run(const std::filesystem::path& dir, int steps, int every) {
  GptTrainingStep step(/*amp=*/false);
  for (int i = 0; i < 3; ++i) step();  // compiles; AdamW's state starts
  wait_device_ops();
  CheckpointManager manager(dir, every);
  const TrainingState state = step.state();
  Timings t;
  bool saved_before = false;
  for (int i = 1; i <= steps; ++i) {
    const auto start = Clock::now();
    step();
    wait_device_ops();
    (saved_before ? t.after_save : t.steps).push_back(ms_since(start));
    const auto save_start = Clock::now();
    saved_before = manager.save_async(i, state);
    if (saved_before) t.save_calls.push_back(ms_since(save_start));
  }
  manager.join();
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
  std::string dir = (std::filesystem::temp_directory_path() / "axle_checkpoint_bench").string();
  CLI::App app{"checkpoint_bench: what an asynchronous checkpoint costs the steps around it"};
  app.add_flag("--quick", quick, "a short run (60 steps, a save every 10)");
  app.add_option("--steps", steps, "steps timed")->check(CLI::PositiveNumber);
  app.add_option("--every", every, "steps between saves")->check(CLI::PositiveNumber);
  app.add_option("--dir", dir, "the checkpoint directory (emptied first and removed after)");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    steps = 60;
    every = 10;
  }
  try {
    std::filesystem::remove_all(dir);
    LazySystem::restart();
    clear_all();
    Timings t = run(dir, steps, every);
    std::filesystem::remove_all(dir);
    const double step_ms = quantile(t.steps, 0.5);
    const double after = quantile(t.after_save, 0.5);
    const double copy = quantile(t.save_calls, 0.5);
    const std::map<std::string, Param> labels{
        {"model", std::string("gpt")}, {"steps", int64_t{steps}}, {"every", int64_t{every}}};
    emit("checkpoint", "step_ms", step_ms, "ms", labels);
    emit("checkpoint", "step_after_save_ms", after, "ms", labels);
    emit("checkpoint", "save_call_ms", copy, "ms", labels);
    emit("checkpoint", "after_save_excess_over_copy", (after - step_ms) / copy, "ratio", labels);
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
