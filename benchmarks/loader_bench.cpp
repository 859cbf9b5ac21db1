// loader_bench: does the parallel loader hide input loading behind compute?
//   input_wait_share — time the training loop waited for its next batch / the loop's time, with
//                      the batches from an MpDeviceLoader ("prefetch": true, InputWaitTime) and
//                      from the DataLoader on the loop's own thread, moved to the device there
//                      ("prefetch": false)
//   step_ms          — the loop's time per step, both ways, and ("source": "resident") with one
//                      batch already on the device and no loader at all
//   step_overhead_share — (step_ms - the resident step_ms) / step_ms: everything loading adds to
//                      a step, waiting included
//   input_wait_p50_us, input_wait_p99_us — quantiles of the single waits, both ways
//   device_queue_depth — with prefetch, the mean number of batches on (or on the way to) the
//                      device when the loop asked for one (DeviceQueueDepth)
// The loop's compute is fixed: each step traces a small op on the batch, marks the step and then
// spins for --compute_ms on the host. Reading a batch costs --read_ms (a sleep, as waiting on a
// disk would, plus making 64 FakeData samples), so the reader is faster than compute by default.
// JSON lines on stdout (see benchmarks/README.md).
#include <CLI/CLI.hpp>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "axle/axle.h"
#include "axle/io/data_loader.h"
#include "axle/io/fake_data.h"
#include "axle/io/parallel_loader.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// FakeData whose first sample of each batch also waits `read_ms`, like a read from storage.
class SlowFakeData final : public Dataset {
 public:
  SlowFakeData(int64_t size, int64_t batch_size, double read_ms)
      : data_(FakeDataOptions{.size = size}), batch_size_(batch_size), read_ms_(read_ms) {}
  int64_t size() const override { return data_.size(); }
  Sample get(int64_t index) const override {
    if (index % batch_size_ == 0) {
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(read_ms_));
    }
    return data_.get(index);
  }

 private:
  FakeData data_;
  int64_t batch_size_;
  double read_ms_;
};

void spin_for(double ms) {
  const auto until = Clock::now() + std::chrono::duration<double, std::milli>(ms);
  while (Clock::now() < until) {
  }
}

// One step of the loop on `batch`: trace, mark, then the fixed compute.
void step(const DeviceBatch& batch, Tensor& total, double compute_ms) {
  total = total + sum(batch[0]);
  mark_step();
  spin_for(compute_ms);
}

struct Run {
  double wait_ms = 0;
  double loop_ms = 0;
  double device_queue_depth = 0;  // mean batches ready or on the way when the loop asked
  int64_t steps = 0;
  std::vector<double> waits_us;  // each wait for a batch, the first (a cold start) included
};

Run with_prefetch(DataLoader& loader, double compute_ms) {
  MpDeviceLoader device_loader(loader, device(0));
  Tensor total = zeros(Shape{});
  clear_metrics();
  Run run;
  const auto start = Clock::now();
  // batches_per_execution = 1 marks each step on ++; step() marks it too, which costs nothing.
  for (const DeviceBatch& batch : device_loader) {
    step(batch, total, compute_ms);
    ++run.steps;
  }
  run.loop_ms = ms_since(start);
  const MetricData waits = *metric_data("InputWaitTime");
  run.wait_ms = waits.accumulator / 1e6;
  for (const auto& [time, ns] : waits.samples) run.waits_us.push_back(ns / 1e3);
  const MetricData depth = *metric_data("DeviceQueueDepth");
  run.device_queue_depth = depth.accumulator / static_cast<double>(depth.total_samples);
  (void)total.item();
  return run;
}

// The same loop on one batch already on the device: the step time with no loading at all.
double resident_step_ms(DataLoader& loader, double compute_ms, int64_t steps) {
  DeviceBatch batch;
  const auto first = loader.begin();
  for (const CpuTensor& field : *first) {
    batch.push_back(tensor_from_bytes(field.bytes, field.dtype, field.shape, device(0)));
  }
  Tensor total = zeros(Shape{});
  const auto start = Clock::now();
  for (int64_t i = 0; i < steps; ++i) step(batch, total, compute_ms);
  const double ms = ms_since(start);
  (void)total.item();
  return ms / static_cast<double>(steps);
}

Run without_prefetch(DataLoader& loader, double compute_ms) {
  Tensor total = zeros(Shape{});
  Run run;
  const auto start = Clock::now();
  auto wait_start = Clock::now();
  for (auto it = loader.begin(); it != loader.end(); ++it) {
    DeviceBatch batch;
    for (const CpuTensor& field : *it) {
      batch.push_back(tensor_from_bytes(field.bytes, field.dtype, field.shape, device(0)));
    }
    const double waited_ms = ms_since(wait_start);
    run.wait_ms += waited_ms;
    run.waits_us.push_back(waited_ms * 1e3);
    step(batch, total, compute_ms);
    ++run.steps;
    wait_start = Clock::now();
  }
  run.loop_ms = ms_since(start);
  (void)total.item();
  return run;
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  CLI::App app{"loader_bench: input wait of a fixed-compute loop with and without prefetching"};
  bool quick = false;
  double compute_ms = 5, read_ms = 2;
  int64_t steps = 200;
  app.add_flag("--quick", quick, "a short run (40 steps)");
  app.add_option("--compute_ms", compute_ms, "host compute per step");
  app.add_option("--read_ms", read_ms, "storage wait per batch read");
  app.add_option("--steps", steps, "steps per run");
  CLI11_PARSE(app, argc, argv);
  if (quick) steps = 40;
  constexpr int64_t kBatch = 64;
  const auto data = std::make_shared<SlowFakeData>(steps * kBatch, kBatch, read_ms);
  DataLoader loader(data, DataLoaderOptions{.batch_size = kBatch});
  const double resident_ms = resident_step_ms(loader, compute_ms, steps);
  emit("loader", "step_ms", resident_ms, "ms",
       {{"source", std::string("resident")}, {"compute_ms", compute_ms}, {"batch", kBatch}});
  for (const bool prefetch : {true, false}) {
    const Run run =
        prefetch ? with_prefetch(loader, compute_ms) : without_prefetch(loader, compute_ms);
    const std::map<std::string, Param> params{{"prefetch", prefetch},
                                              {"compute_ms", compute_ms},
                                              {"read_ms", read_ms},
                                              {"batch", kBatch},
                                              {"steps", run.steps}};
    emit("loader", "input_wait_share", run.wait_ms / run.loop_ms, "ratio", params);
    const double step_ms = run.loop_ms / static_cast<double>(run.steps);
    emit("loader", "step_ms", step_ms, "ms", params);
    emit("loader", "step_overhead_share", (step_ms - resident_ms) / step_ms, "ratio", params);
    std::vector<double> waits = run.waits_us;
    emit("loader", "input_wait_p50_us", quantile(waits, 0.5), "us", params);
    emit("loader", "input_wait_p99_us", quantile(waits, 0.99), "us", params);
    if (prefetch) emit("loader", "device_queue_depth", run.device_queue_depth, "batches", params);
  }
  return 0;
}
