// backends: the backend's and its devices' settings, declared beside the backend interface
// (engine's config.h holds the lookups; a *_settings.cpp file is where a part reads its variables).
#pragma once

#include <cstdint>
#include <string>

namespace axle::config {

/// The backend and its devices: read at LazySystem::restart, unless the options bring a backend.
struct DeviceSettings {
  /// PJRT_DEVICE, default CPU: the backend; CPU (or cpu) is the one there is.
  std::string pjrt_device = "CPU";
  /// CPU_NUM_DEVICES, default 1: virtual CPU devices (at least 1).
  int cpu_num_devices = 1;
  /// AXLE_CPU_INTRA_OP_THREADS, default 0: per CPU device, the threads a large kernel is split
  /// over (the device actor's thread included), 1 to kMostIntraOpThreads; 0 means the usable
  /// cores shared among the CPU devices (at least one each).
  int cpu_intra_op_threads = 0;
  /// AXLE_CPU_BLOCK_CACHE_MB, default 1024: per CPU device, how many MiB of freed memory in
  /// blocks of 64 KiB and more are kept for reuse (a negative value counts as 0).
  int64_t cpu_block_cache_mb = 1024;
  /// AXLE_CPU_ISA, default auto: the instruction set the CPU kernels use; auto is the widest the
  /// processor has (avx512_bf16, avx512, avx2), a narrower one can be forced for comparison or
  /// testing (the backend refuses one the processor lacks).
  std::string cpu_isa = "auto";
  /// AXLE_DEVICE_MEMORY_LIMIT, default 0 (no limit): bytes each CPU device may hold. A step
  /// whose memory plan, with what the device already holds, would exceed it fails before it
  /// runs (DeviceMemoryError).
  int64_t device_memory_limit = 0;
};

/// The largest AXLE_CPU_INTRA_OP_THREADS accepted.
inline constexpr int kMostIntraOpThreads = 256;

/// Reads the DeviceSettings; throws ConfigError naming the variable and its value.
[[nodiscard]] DeviceSettings read_device_settings();

}  // namespace axle::config
