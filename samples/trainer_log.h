// samples: what the trainers' log lines share — the clock, PyTorch/XLA's RateTracker and the
// time stamp of train_mnist's `| Training ... Time=...` lines.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>

namespace axle::samples {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Samples per second since the last report, smoothed, and since the start (PyTorch/XLA's
/// RateTracker). Used from one thread (the step closures') only.
class RateTracker {
 public:
  /// `samples` were processed since the last call (or since construction).
  void add(int64_t samples) {
    const double elapsed = seconds_since(last_);
    last_ = Clock::now();
    total_ += samples;
    const double rate = static_cast<double>(samples) / std::max(elapsed, 1e-9);
    rate_ = rate_ < 0 ? rate : 0.6 * rate_ + 0.4 * rate;
  }
  [[nodiscard]] double rate() const { return rate_; }
  [[nodiscard]] double global_rate() const {
    return static_cast<double>(total_) / std::max(seconds_since(start_), 1e-9);
  }

 private:
  Clock::time_point start_ = Clock::now(), last_ = Clock::now();
  int64_t total_ = 0;
  double rate_ = -1;
};

/// The local time as the log lines print it.
inline std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char text[64];
  std::strftime(text, sizeof text, "%a %b %e %H:%M:%S %Y", std::localtime(&t));
  return text;
}

}  // namespace axle::samples
