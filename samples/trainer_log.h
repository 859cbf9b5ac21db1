// samples: what the trainers' log lines share — the clock and the time stamp of the
// `| Training ... Time=...` lines.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <string>

namespace axle::samples {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The local time as the log lines print it.
inline std::string now_text() {
  const std::time_t t = std::time(nullptr);
  char text[64];
  std::strftime(text, sizeof text, "%a %b %e %H:%M:%S %Y", std::localtime(&t));
  return text;
}

}  // namespace axle::samples
