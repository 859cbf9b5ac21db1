// actors: RateTracker, as torch_xla's xm.RateTracker — counts per second since the last report,
// smoothed, and since the start; timed by the steps' completion inside step closures.
#pragma once

#include <chrono>
#include <optional>

namespace axle {

/// Samples (or tokens, images) per second, as torch_xla's RateTracker: add() counts, rate()
/// reports the count since the previous rate() over the time since it, smoothed with the rate
/// before it, and global_rate() the whole count over the time since construction.
///
/// Its clock is now(): inside a step closure, the time the closure's step completed on its
/// devices; elsewhere, the steady clock. So closures that run late, several at once, report the
/// rate the devices stepped at, not the rate the closures ran at. Not thread-safe: use one
/// tracker from one thread (a replica's closures run on one thread).
class RateTracker {
 public:
  /// The clock rates are measured on.
  using Clock = std::chrono::steady_clock;

  /// `smooth_factor`: the previous rate's weight in each new one (torch_xla's default 0.4).
  explicit RateTracker(double smooth_factor = 0.4);

  /// Counts `count` more since the last rate().
  void add(double count) noexcept { count_ += count; }
  /// The count since the previous rate() per second since it, smoothed; the previous report
  /// again when no time has passed (a second read in the same step closure), 0 before any.
  double rate();
  /// The whole count per second since the tracker was made.
  [[nodiscard]] double global_rate() const;

  /// The tracker's clock: the current step closure's step completion, or Clock::now().
  [[nodiscard]] static Clock::time_point now();

 private:
  double smooth_factor_;
  Clock::time_point start_;
  Clock::time_point partial_time_;
  double partial_count_ = 0;  // counted up to the last rate()
  double count_ = 0;          // counted since it
  std::optional<double> partial_rate_;
};

}  // namespace axle
