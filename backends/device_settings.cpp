// backends: reading the backend's and its devices' settings.
#include "axle/backends/device_settings.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <optional>

#include "axle/engine/config.h"

namespace axle::config {

DeviceSettings read_device_settings() {
  const DeviceSettings defaults;
  DeviceSettings s;
  s.pjrt_device = get_string("PJRT_DEVICE", defaults.pjrt_device);
  if (s.pjrt_device != "CPU" && s.pjrt_device != "cpu") {
    throw ConfigError(
        fmt::format("PJRT_DEVICE={} is not available: axle has a CPU backend only", s.pjrt_device));
  }
  const int64_t devices = get_int("CPU_NUM_DEVICES", defaults.cpu_num_devices);
  if (devices < 1) throw ConfigError(fmt::format("CPU_NUM_DEVICES={} must be at least 1", devices));
  if (devices > std::numeric_limits<int>::max()) {
    throw ConfigError(fmt::format("CPU_NUM_DEVICES='{}' is out of range", devices));
  }
  s.cpu_num_devices = static_cast<int>(devices);
  if (const std::optional<int64_t> threads = get_optional_int("AXLE_CPU_INTRA_OP_THREADS")) {
    if (*threads < 1 || *threads > kMostIntraOpThreads) {
      throw ConfigError(fmt::format("AXLE_CPU_INTRA_OP_THREADS={} must be between 1 and {}",
                                    *threads, kMostIntraOpThreads));
    }
    s.cpu_intra_op_threads = static_cast<int>(*threads);
  }
  s.cpu_block_cache_mb = get_int("AXLE_CPU_BLOCK_CACHE_MB", defaults.cpu_block_cache_mb);
  s.cpu_isa = get_string("AXLE_CPU_ISA", defaults.cpu_isa);
  s.device_memory_limit = get_int("AXLE_DEVICE_MEMORY_LIMIT", defaults.device_memory_limit);
  if (s.device_memory_limit < 0) {
    throw ConfigError(
        fmt::format("AXLE_DEVICE_MEMORY_LIMIT={} must be a number of bytes (0: no limit)",
                    get_trimmed("AXLE_DEVICE_MEMORY_LIMIT")));
  }
  return s;
}

}  // namespace axle::config
