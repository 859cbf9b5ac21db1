// actors: RateTracker.
#include "axle/actors/host/rate_tracker.h"

#include "axle/actors/runtime/closure_runner.h"
#include "axle/engine/this_thread.h"

namespace axle {

RateTracker::RateTracker(double smooth_factor)
    : smooth_factor_(smooth_factor), start_(now()), partial_time_(start_) {}

RateTracker::Clock::time_point RateTracker::now() {
  if (const StepDone* done = ThisThread<StepDone>::get()) return done->at;
  return Clock::now();
}

double RateTracker::rate() {
  const Clock::time_point at = now();
  const double seconds = std::chrono::duration<double>(at - partial_time_).count();
  if (seconds <= 0) return partial_rate_.value_or(0.0);
  const double current = count_ / seconds;
  const double smoothed =
      partial_rate_ ? (1 - smooth_factor_) * current + smooth_factor_ * *partial_rate_ : current;
  partial_count_ += count_;
  count_ = 0;
  partial_time_ = at;
  partial_rate_ = smoothed;
  return smoothed;
}

double RateTracker::global_rate() const {
  const double seconds = std::chrono::duration<double>(now() - start_).count();
  return seconds > 0 ? (partial_count_ + count_) / seconds : 0.0;
}

}  // namespace axle
