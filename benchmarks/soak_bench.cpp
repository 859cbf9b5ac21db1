// soak_bench: a long run looking for leaks and slowdowns — the sample MLP (784-512-512-10, SGD
// with momentum) trained for --steps steps on FakeData through an MpDeviceLoader, every step's
// loss read by an asynchronous step closure and a checkpoint saved every --checkpoint_every
// steps. Every --report_every steps it prints one JSON line: resident memory (RSS), live tensors,
// device bytes in use, and the mean step time of the last interval; at the end, rss_growth (RSS
// at the end over RSS after the first interval, minus 1) and the last interval's step time over
// the second's. Targets (issue "install and trust"): RSS grows at most 2% after the first
// interval, live tensors and device bytes stay flat, the last interval within 10% of the second.
// glibc's malloc raises its mmap threshold each time it frees a mapped block larger than the
// threshold (a checkpoint's tensor, a batch), after which such blocks come from the heap and RSS
// climbs for a few thousand steps before it levels off; --malloc_mmap_threshold pins the
// threshold (as MALLOC_MMAP_THRESHOLD_ does), so the RSS figure shows axle's memory rather than
// that policy. 0 leaves glibc's dynamic threshold.
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "axle.h"
#include "benchmarks/report.h"
#include "io/checkpoint.h"
#include "io/data_loader.h"
#include "io/fake_data.h"
#include "io/parallel_loader.h"
#include "samples/mnist_models.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Resident set size in bytes, from /proc/self/statm.
double rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  int64_t steps = 20000, report_every = 1000, checkpoint_every = 1000, batch = 64;
  int64_t closure_every = 1;
  int64_t mmap_threshold = 128 * 1024;
  CLI::App app{"soak_bench: the MLP for many steps, watching memory, tensors and step time"};
  app.add_option("--steps", steps);
  app.add_option("--report_every", report_every);
  app.add_option("--checkpoint_every", checkpoint_every);
  app.add_option("--batch", batch);
  app.add_option("--closure_every", closure_every,
                 "steps between asynchronous closures reading the loss (0: none)");
  app.add_option("--malloc_mmap_threshold", mmap_threshold,
                 "glibc's mmap threshold in bytes, pinned (0: glibc's dynamic threshold)")
      ->check(CLI::Range(int64_t{0}, int64_t{32} << 20));
  CLI11_PARSE(app, argc, argv);
  if (mmap_threshold > 0 && mallopt(M_MMAP_THRESHOLD, static_cast<int>(mmap_threshold)) != 1) {
    std::fprintf(stderr, "soak_bench: glibc refused --malloc_mmap_threshold %lld\n",
                 static_cast<long long>(mmap_threshold));
    return 2;
  }
  if (report_every < 1 || steps < 2 * report_every) {
    std::fprintf(stderr, "soak_bench: --steps must cover at least two --report_every intervals\n");
    return 2;
  }
  const std::filesystem::path checkpoint = std::filesystem::temp_directory_path() /
                                           ("axle_soak_" + std::to_string(::getpid()) + ".ckpt");
  samples::MnistMlp model;
  optim::SGD sgd(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  DataLoader loader(std::make_shared<FakeData>(FakeDataOptions{.size = 60000, .seed = 1}),
                    {.batch_size = batch, .shuffle = true, .drop_last = true});
  auto losses = std::make_shared<std::atomic<int64_t>>(0);
  int64_t step = 0;
  auto interval_start = Clock::now();
  double rss_first = 0, second_ms = 0, last_ms = 0;
  // One loader for the run, as the samples keep theirs: its threads live as long.
  MpDeviceLoader device_loader(loader, Device{});
  for (int64_t epoch = 0; step < steps; ++epoch) {
    loader.set_epoch(epoch);
    for (const DeviceBatch& b : device_loader) {
      sgd.zero_grad();
      const Tensor loss = nn::nll_loss(model(b[0]), b[1]);
      loss.backward();
      sgd.step();
      if (closure_every > 0 && step % closure_every == 0) {
        add_step_closure(
            [loss, losses] {
              if (loss.item() > 0) losses->fetch_add(1);
            },
            /*run_async=*/true);
      }
      ++step;
      if (checkpoint_every > 0 && step % checkpoint_every == 0) {
        mark_step();
        save(model.state_dict(), checkpoint);
      }
      if (step % report_every == 0) {
        mark_step();
        wait_device_ops();
        const double ms =
            std::chrono::duration<double, std::milli>(Clock::now() - interval_start).count() /
            static_cast<double>(report_every);
        const double rss = rss_bytes();
        if (step == report_every) rss_first = rss;
        if (step == 2 * report_every) second_ms = ms;
        last_ms = ms;
        const std::map<std::string, Param> at{{"step", step}, {"batch", batch}};
        emit("soak", "rss_bytes", rss, "bytes", at);
        emit("soak", "live_tensors", static_cast<double>(live_tensor_count()), "tensors", at);
        const MemoryInfo memory = get_memory_info();
        emit("soak", "device_bytes", static_cast<double>(memory.bytes_in_use), "bytes", at);
        emit("soak", "device_peak_bytes", static_cast<double>(memory.peak_bytes), "bytes", at);
        emit("soak", "step_ms", ms, "ms", at);
        interval_start = Clock::now();
      }
      if (step >= steps) break;
    }
  }
  mark_step();
  wait_device_ops();
  std::filesystem::remove(checkpoint);
  const std::map<std::string, Param> all{
      {"steps", steps}, {"batch", batch}, {"malloc_mmap_threshold", mmap_threshold}};
  emit("soak", "rss_growth", rss_bytes() / rss_first - 1, "ratio", all);
  emit("soak", "last_over_second_step_time", last_ms / second_ms, "ratio", all);
  emit("soak", "losses_read", static_cast<double>(losses->load()), "steps", all);
  return 0;
}
