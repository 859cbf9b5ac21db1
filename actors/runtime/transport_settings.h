// actors/runtime: the process transport's own setting, declared beside the transport. engine's
// config.h holds the lookup and the settings of the parts below (a *_settings.cpp file is where
// a part reads its variables).
#pragma once

#include <cstddef>

namespace axle::config {

/// The transport between a job's processes: read when the transport starts (process_transport.h).
struct TransportSettings {
  /// AXLE_SHARED_MEMORY_MB, default 128: the shared memory each process of a job offers the
  /// others on its host for its messages to them (an MPI shared window); large messages between
  /// them are written there once and read in place. 0: every message goes through MPI's sends.
  std::size_t shared_memory_bytes = std::size_t{128} << 20;
};

/// Reads the TransportSettings; throws ConfigError naming the variable and its value.
[[nodiscard]] TransportSettings read_transport_settings();

}  // namespace axle::config
