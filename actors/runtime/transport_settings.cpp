// actors/runtime: reading the transport's setting.
#include "axle/actors/runtime/transport_settings.h"

#include <fmt/format.h>

#include <cstdint>

#include "axle/engine/config.h"

namespace axle::config {

TransportSettings read_transport_settings() {
  const TransportSettings defaults;
  const int64_t shared_mb =
      get_int("AXLE_SHARED_MEMORY_MB", static_cast<int64_t>(defaults.shared_memory_bytes >> 20));
  if (shared_mb < 0 || shared_mb > (int64_t{1} << 30)) {
    throw ConfigError(fmt::format(
        "AXLE_SHARED_MEMORY_MB='{}' must be a number of MiB (0: messages go through MPI's sends)",
        get_string("AXLE_SHARED_MEMORY_MB", "")));
  }
  return {.shared_memory_bytes = static_cast<std::size_t>(shared_mb) << 20};
}

}  // namespace axle::config
