// graph: which device a tensor lives on, and which one `Device{}` means on the calling thread.
#pragma once

#include <cstdint>
#include <string>

namespace axle {

namespace device_internal {
// Inline and constinit so that reading it (every `Device{}`) needs no TLS wrapper call.
inline thread_local constinit int t_default_ordinal = 0;
}  // namespace device_internal

/// The calling thread's default device ordinal: 0, or the replica's own device inside spawn.
[[nodiscard]] inline int default_device_ordinal() noexcept {
  return device_internal::t_default_ordinal;
}

/// A device of the process's backend, by ordinal (0 .. device_count() - 1). `Device{}` is the
/// calling thread's default device (xla:0, or the replica's own inside spawn), like torch_xla's
/// per-thread default device, so creation ops and `tensor(...)` land on the replica's device.
struct Device {
  int ordinal = default_device_ordinal();
  friend bool operator==(Device a, Device b) noexcept { return a.ordinal == b.ordinal; }
  /// "xla:0", the name PyTorch/XLA gives it.
  [[nodiscard]] std::string to_string() const { return "xla:" + std::to_string(ordinal); }
};

/// Makes `device` the calling thread's default (what `Device{}` means) for the scope's lifetime;
/// spawn gives each replica thread its own.
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device) noexcept
      : previous_(device_internal::t_default_ordinal) {
    device_internal::t_default_ordinal = device.ordinal;
  }
  ~DefaultDeviceScope() { device_internal::t_default_ordinal = previous_; }
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  int previous_;
};

}  // namespace axle
