// actors/runtime: reading the collectives' setting.
#include "axle/actors/runtime/collective_settings.h"

#include <fmt/format.h>

#include <chrono>

#include "axle/engine/config.h"

namespace axle::config {

CollectiveSettings read_collective_settings() {
  const double seconds =
      get_double("AXLE_COLLECTIVE_TIMEOUT",
                 std::chrono::duration<double>(CollectiveSettings{}.timeout).count());
  // Over a year is as good as forever, and keeps the conversion in range.
  if (!(seconds > 0) || seconds > 3.2e7) {
    // The value as given: "1e9" rather than the 1000000000 it parsed to.
    throw ConfigError(fmt::format(
        "AXLE_COLLECTIVE_TIMEOUT={} must be a number of seconds above 0 and below 3.2e7",
        get_trimmed("AXLE_COLLECTIVE_TIMEOUT")));
  }
  return {.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
              std::chrono::duration<double>(seconds))};
}

}  // namespace axle::config
