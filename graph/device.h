// graph: which device a tensor lives on, and which one `Device{}` means on the calling thread.
#pragma once

#include <cstdint>
#include <string>

namespace axle {

/// Replicas taking part in the calling thread's collectives: spawn's replica count inside spawn,
/// else 1. Collectives check their groups against it as they trace.
[[nodiscard]] int replica_world_size() noexcept;

/// The calling thread's default device ordinal: 0, or the replica's own inside spawn.
[[nodiscard]] int default_device_ordinal() noexcept;

/// A device of the process's backend, by ordinal (0 .. device_count() - 1). `Device{}` is the
/// calling thread's default device (xla:0, or the replica's own inside spawn), like torch_xla's
/// per-thread default device, so creation ops and `tensor(...)` land on the replica's device.
struct Device {
  int ordinal = default_device_ordinal();  ///< the device's index in the backend
  /// Whether `a` and `b` are the same device.
  friend bool operator==(Device a, Device b) noexcept { return a.ordinal == b.ordinal; }
  /// "xla:0", the name PyTorch/XLA gives it.
  [[nodiscard]] std::string to_string() const { return "xla:" + std::to_string(ordinal); }
};

/// Makes `device` the calling thread's default (what `Device{}` means) for the scope's lifetime;
/// spawn gives each replica thread its own.
class DefaultDeviceScope {
 public:
  /// Makes `device` the default until the scope ends.
  explicit DefaultDeviceScope(Device device);
  /// Restores the previous default.
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  int previous_;
};

/// Makes the calling thread replica `device.ordinal` of `world_size` for the scope's lifetime:
/// its default device and the replica count its collectives span (spawn's replicas).
class ReplicaScope {
 public:
  /// Makes the thread replica `device.ordinal` of `world_size` until the scope ends.
  ReplicaScope(Device device, int world_size);
  /// Restores the previous default device and replica count.
  ~ReplicaScope();
  ReplicaScope(const ReplicaScope&) = delete;
  ReplicaScope& operator=(const ReplicaScope&) = delete;

 private:
  DefaultDeviceScope default_device_;
  int previous_world_size_;
};

}  // namespace axle
