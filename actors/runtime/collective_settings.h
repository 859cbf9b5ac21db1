// actors/runtime: the collectives' setting, declared beside the meetings that apply it
// (engine's config.h holds the lookups; a *_settings.cpp file is where a part reads its variables).
#pragma once

#include <chrono>

namespace axle::config {

/// Collectives across replicas: read by every rendezvous, mesh_reduce and in-graph collective.
struct CollectiveSettings {
  /// AXLE_COLLECTIVE_TIMEOUT, default 300: seconds a collective waits for every replica before it
  /// fails (above 0 and below 3.2e7).
  std::chrono::nanoseconds timeout = std::chrono::seconds(300);
};

/// Reads the CollectiveSettings; throws ConfigError naming the variable and its value.
[[nodiscard]] CollectiveSettings read_collective_settings();

}  // namespace axle::config
