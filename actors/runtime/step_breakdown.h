// actors: where a replica's step time goes — tracing on the host, waiting for input, waiting
// for values read from the device, waiting for the compiler, the device executing, collectives,
// step closures, and waiting for the devices to catch up. Each replica's host has its own account;
// its device and its closure runner add to it through the requests they get. step_report() prints
// the averages per step since the previous report.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

namespace axle {

/// One replica's account of its steps' time (nanoseconds per part), filled by its thread, its
/// device and its closure runner.
class StepBreakdown {
 public:
  /// The parts a step's time is split into.
  enum Part : int {
    kTracing,       ///< the host between steps, less its waits for input and values
    kInputWait,     ///< waiting for the next batch (ParallelLoader)
    kValueWait,     ///< waiting for values read from the device (item(), cpu())
    kCompilerWait,  ///< the device waiting for its program
    kExecuting,     ///< the device running kernels
    kCollectives,   ///< the device waiting for its group at collectives
    kClosures,      ///< step closures running
    kDeviceWait,    ///< the host waiting for its devices: AXLE_MAX_STEPS_IN_FLIGHT steps queued
    kParts          ///< the number of parts
  };

  /// An account named `owner`; new_step_account makes the ones step_report() lists.
  explicit StepBreakdown(std::string owner) : owner_(std::move(owner)) {}

  /// Adds `ns` nanoseconds to `part` (from any thread).
  void add(Part part, double ns) noexcept {
    ns_[part].fetch_add(static_cast<int64_t>(ns), std::memory_order_relaxed);
  }
  /// A wait of the owner thread itself (kInputWait, kValueWait, kDeviceWait): also taken out of the
  /// host time of the step it falls in.
  void add_host_wait(Part part, double ns) noexcept {
    add(part, ns);
    host_waits_ns_ += ns;
  }
  /// Closes a step of the owner thread that spent `host_ns` on the host since the previous one:
  /// what its waits did not take was tracing.
  void count_step(double host_ns) noexcept {
    add(kTracing, std::max(0.0, host_ns - host_waits_ns_));
    host_waits_ns_ = 0;
    steps_.fetch_add(1, std::memory_order_relaxed);
  }
  /// The account's name ("replica 2", "main").
  [[nodiscard]] const std::string& owner() const noexcept { return owner_; }

  /// Totals so far: per part, then the step count.
  struct Totals {
    /// Nanoseconds in each part, indexed by Part.
    std::array<int64_t, kParts> ns{};
    /// Steps counted (count_step).
    int64_t steps = 0;
  };
  /// The totals so far.
  [[nodiscard]] Totals totals() const noexcept;

 private:
  std::string owner_;
  std::array<std::atomic<int64_t>, kParts> ns_{};
  std::atomic<int64_t> steps_{0};
  double host_waits_ns_ = 0;  // the owner thread's only
};

/// A new account named `owner` ("replica 2", "main"), listed in every report from now on and
/// kept for the life of the process (devices may still add to it after its replica ends).
[[nodiscard]] std::shared_ptr<StepBreakdown> new_step_account(std::string owner);

/// A table of the average milliseconds per step in each part, one row per replica that stepped
/// since the previous report (or since the process started).
[[nodiscard]] std::string step_report();

namespace detail {
/// step_report over its own window: the metrics file's, apart from the user's.
[[nodiscard]] std::string metrics_file_step_report();
}  // namespace detail

}  // namespace axle
