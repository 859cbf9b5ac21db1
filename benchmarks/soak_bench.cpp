// soak_bench: a long run looking for leaks and slowdowns — the sample MLP (784-512-512-10, SGD
// with momentum) trained for --steps steps on FakeData through an MpDeviceLoader, every step's
// loss read by an asynchronous step closure and a checkpoint saved every --checkpoint_every
// steps. Every --report_every steps (and at the last) it prints JSON lines: resident memory (RSS,
// and its anonymous and file-backed parts), live tensors, device bytes in use, the mean step time
// of the interval, glibc's heap (bytes handed out, bytes held free, arenas: a leak grows the
// first, fragmentation the second) and how often the loop waited for its closures
// (XLA_MAX_ASYNC_QUEUE). At the end: rss_growth (RSS at the last report over RSS at the first,
// minus 1: both taken at the same point of the loop) and the last interval's step time over the
// second's. Targets (issue "install and trust"): RSS grows at most 2% after the first interval,
// live tensors and device bytes stay flat, the last interval within 10% of the second.
// On a shared machine an interval's mean follows the machine's load as much as the loop; each
// interval also reports its fastest stretch of --window_steps steps (the loop's own pace, which
// a slowing loop raises too, while load that comes and goes within the interval leaves it), and
// the end the last interval's fastest over the second's.
//
// --malloc_mmap_threshold pins glibc's mmap threshold (as MALLOC_MMAP_THRESHOLD_ does; 0 leaves
// it dynamic). Left dynamic, glibc raises it to the size of each mapped block it frees: the
// checkpoint's host copies of the weights (1.0 and 1.6 MB) lift it past everything a step
// allocates, and those copies, 1,000 steps apart, come from the heap from then on, which keeps
// up to twice the threshold free and grows by what other blocks took of it meanwhile: 1–1.5 MB
// once, after the first checkpoints. That is glibc's policy, not memory axle holds; pinned, RSS
// shows what axle holds. A long job can pin it the same way.
#include <CLI/CLI.hpp>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "axle/axle.h"
#include "axle/engine/metrics.h"
#include "axle/io/checkpoint.h"
#include "axle/io/data_loader.h"
#include "axle/io/fake_data.h"
#include "axle/io/parallel_loader.h"
#include "benchmarks/report.h"
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

// One line's value of /proc/self/status in bytes ("RssAnon:	  1234 kB").
double status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with(key + ":")) return std::stod(line.substr(key.size() + 1)) * 1024;
  }
  return 0;
}

// glibc's view of the heap, to tell a leak (bytes in use grow) from fragmentation (RSS grows, bytes
// in use do not): bytes handed out (small blocks plus mmapped ones), bytes held free inside the
// arenas, and the number of arenas (malloc_info lists one <heap> per arena).
struct HeapInfo {
  double in_use = 0, free = 0;
  int64_t arenas = 0;
};

HeapInfo heap_info() {
  const struct mallinfo2 m = mallinfo2();
  HeapInfo info{.in_use = static_cast<double>(m.uordblks + m.hblkhd),
                .free = static_cast<double>(m.fordblks)};
  char* text = nullptr;
  size_t size = 0;
  if (FILE* out = open_memstream(&text, &size)) {
    malloc_info(0, out);
    std::fclose(out);
    for (const char* at = text; (at = std::strstr(at, "<heap nr=")) != nullptr; ++at) ++info.arenas;
    std::free(text);
  }
  return info;
}

// One interval's figures, at `at`: memory, tensors, the step's mean and fastest-window times.
void report(const std::map<std::string, Param>& at, double rss, double ms, double best_window_ms) {
  emit("soak", "rss_bytes", rss, "bytes", at);
  emit("soak", "live_tensors", static_cast<double>(live_tensor_count()), "tensors", at);
  const MemoryInfo memory = get_memory_info();
  emit("soak", "device_bytes", static_cast<double>(memory.bytes_in_use), "bytes", at);
  emit("soak", "device_peak_bytes", static_cast<double>(memory.peak_bytes), "bytes", at);
  emit("soak", "step_ms", ms, "ms", at);
  emit("soak", "fastest_window_step_ms", best_window_ms, "ms", at);
  emit("soak", "rss_anon_bytes", status_bytes("RssAnon"), "bytes", at);
  emit("soak", "rss_file_bytes", status_bytes("RssFile"), "bytes", at);
  const HeapInfo heap = heap_info();
  emit("soak", "heap_in_use_bytes", heap.in_use, "bytes", at);
  emit("soak", "heap_free_bytes", heap.free, "bytes", at);
  emit("soak", "heap_arenas", static_cast<double>(heap.arenas), "arenas", at);
  emit("soak", "closure_queue_waits", static_cast<double>(counter("AsyncClosureQueueWait").value()),
       "waits", at);
}

// One SGD step of the MLP on `b`; with `losses`, an asynchronous closure reads the loss and
// counts it there.
void train_step(samples::MnistMlp& model, optim::SGD& sgd, const DeviceBatch& b,
                const std::shared_ptr<std::atomic<int64_t>>& losses) {
  sgd.zero_grad();
  const Tensor loss = nn::nll_loss(model(b[0]), b[1]);
  loss.backward();
  sgd.step();
  if (losses) {
    add_step_closure(
        [loss, losses] {
          if (loss.item() > 0) losses->fetch_add(1);
        },
        /*run_async=*/true);
  }
}

// What the command line asked for.
struct Options {
  int64_t steps = 20000, report_every = 1000, checkpoint_every = 1000, batch = 64;
  int64_t closure_every = 1;
  int64_t window_steps = 100;
  int64_t mmap_threshold = 128 * 1024;
};

// Reads the command line into `o` and pins glibc's mmap threshold: -1 when the run goes on,
// else the exit code.
int parse(int argc, char** argv, Options& o) {
  CLI::App app{"soak_bench: the MLP for many steps, watching memory, tensors and step time"};
  app.add_option("--steps", o.steps);
  app.add_option("--report_every", o.report_every);
  app.add_option("--checkpoint_every", o.checkpoint_every);
  app.add_option("--batch", o.batch);
  app.add_option("--closure_every", o.closure_every,
                 "steps between asynchronous closures reading the loss (0: none)");
  app.add_option("--malloc_mmap_threshold", o.mmap_threshold,
                 "glibc's mmap threshold in bytes, pinned (0: glibc's dynamic threshold)")
      ->check(CLI::Range(int64_t{0}, int64_t{32} << 20));
  app.add_option("--window_steps", o.window_steps,
                 "steps in each stretch whose time is kept when it is the interval's fastest")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (o.mmap_threshold > 0 && mallopt(M_MMAP_THRESHOLD, static_cast<int>(o.mmap_threshold)) != 1) {
    std::fprintf(stderr, "soak_bench: glibc refused --malloc_mmap_threshold %lld\n",
                 static_cast<long long>(o.mmap_threshold));
    return 2;
  }
  if (o.report_every < 1 || o.steps < 2 * o.report_every) {
    std::fprintf(stderr, "soak_bench: --steps must cover at least two --report_every intervals\n");
    return 2;
  }
  return -1;
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  Options options;
  if (const int failed = parse(argc, argv, options); failed >= 0) return failed;
  const auto [steps, report_every, checkpoint_every, batch, closure_every, window_steps,
              mmap_threshold] = options;
  const std::filesystem::path checkpoint = std::filesystem::temp_directory_path() /
                                           ("axle_soak_" + std::to_string(::getpid()) + ".ckpt");
  samples::MnistMlp model;
  optim::SGD sgd(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  DataLoader loader(std::make_shared<FakeData>(FakeDataOptions{.size = 60000, .seed = 1}),
                    {.batch_size = batch, .shuffle = true, .drop_last = true});
  auto losses = std::make_shared<std::atomic<int64_t>>(0);
  int64_t step = 0, reported = 0;
  auto interval_start = Clock::now();
  double rss_first = 0, rss_last = 0, second_ms = 0, last_ms = 0;
  // The fastest stretch of window_steps steps in the interval (ms a step), and in the second and
  // last intervals.
  auto window_start = Clock::now();
  double best_window_ms = 0, second_best_ms = 0, last_best_ms = 0;
  // One loader for the run, as the samples keep theirs: its threads live as long.
  MpDeviceLoader device_loader(loader, Device{});
  for (int64_t epoch = 0; step < steps; ++epoch) {
    loader.set_epoch(epoch);
    for (const DeviceBatch& b : device_loader) {
      train_step(model, sgd, b, closure_every > 0 && step % closure_every == 0 ? losses : nullptr);
      ++step;
      if (step % window_steps == 0) {
        const auto now = Clock::now();
        const double ms = std::chrono::duration<double, std::milli>(now - window_start).count() /
                          static_cast<double>(window_steps);
        if (best_window_ms == 0 || ms < best_window_ms) best_window_ms = ms;
        window_start = now;
      }
      if (checkpoint_every > 0 && step % checkpoint_every == 0) {
        mark_step();
        save(model.state_dict(), checkpoint);
      }
      if (step % report_every == 0 || step == steps) {
        mark_step();
        wait_device_ops();
        const double ms =
            std::chrono::duration<double, std::milli>(Clock::now() - interval_start).count() /
            static_cast<double>(step - reported);
        reported = step;
        const double rss = rss_bytes();
        if (step == report_every) rss_first = rss;
        rss_last = rss;
        if (step == 2 * report_every) {
          second_ms = ms;
          second_best_ms = best_window_ms;
        }
        last_ms = ms;
        last_best_ms = best_window_ms;
        report({{"step", step}, {"batch", batch}}, rss, ms, best_window_ms);
        best_window_ms = 0;
        interval_start = Clock::now();
        // The report's own work (the wait, the figures) stays out of the next stretch.
        window_start = interval_start;
      }
      if (step >= steps) break;
    }
  }
  mark_step();
  wait_device_ops();
  std::filesystem::remove(checkpoint);
  const std::map<std::string, Param> all{
      {"steps", steps}, {"batch", batch}, {"malloc_mmap_threshold", mmap_threshold}};
  emit("soak", "rss_growth", rss_last / rss_first - 1, "ratio", all);
  emit("soak", "last_over_second_step_time", last_ms / second_ms, "ratio", all);
  if (second_best_ms > 0 && last_best_ms > 0) {
    emit("soak", "last_over_second_fastest_window", last_best_ms / second_best_ms, "ratio", all);
  }
  emit("soak", "losses_read", static_cast<double>(losses->load()), "steps", all);
  return 0;
}
