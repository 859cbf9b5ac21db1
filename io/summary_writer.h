// io: SummaryWriter, as torch.utils.tensorboard's — scalars and histograms written to a
// TensorBoard event file (graph/formats/event_file.h) in a log directory, for `tensorboard
// --logdir`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle {

class EventFileWriter;

/// torch.utils.tensorboard.SummaryWriter: scalars and histograms appended to one TensorBoard event
/// file of a log directory.
class SummaryWriter {
 public:
  /// Writes into `log_dir` (created if missing; default `runs/<date>_<host>`, as PyTorch's), to
  /// `events.out.tfevents.<seconds>.<host>.<pid>.<n>`. Throws FileError when it cannot.
  explicit SummaryWriter(std::filesystem::path log_dir = {});
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  /// A scalar at `global_step` (safe from any thread, e.g. an asynchronous step closure).
  void add_scalar(const std::string& tag, double scalar_value, int64_t global_step = 0);
  /// A one-element tensor's value (read now: it waits for the device).
  void add_scalar(const std::string& tag, const Tensor& scalar_value, int64_t global_step = 0);
  /// A histogram of `values` (every element, read now) over `bins` equal buckets.
  void add_histogram(const std::string& tag, const Tensor& values, int64_t global_step = 0,
                     int bins = 30);
  /// The calling replica's step breakdown (actors/runtime/step_breakdown.h) since the writer's last
  /// call from it: the mean milliseconds per step of each part, as "step_breakdown/<part>_ms"
  /// scalars (tracing, input_wait, value_wait, compiler_wait, executing, collectives,
  /// closures, device_wait). Call it from the training loop's thread; nothing is written before a
  /// step.
  void add_step_breakdown(int64_t global_step);
  /// Makes everything added so far reach the file.
  void flush();
  /// flush(); later adds throw std::logic_error.
  void close();

  /// The log directory (the default one when none was given).
  [[nodiscard]] const std::filesystem::path& log_dir() const noexcept { return log_dir_; }
  /// The event file being written.
  [[nodiscard]] std::filesystem::path file() const;

 private:
  std::filesystem::path log_dir_;
  std::mutex mutex_;
  std::unique_ptr<EventFileWriter> writer_;
  std::vector<int64_t> breakdown_ns_;  // totals at the last add_step_breakdown, then the steps
};

}  // namespace axle
