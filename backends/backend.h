// backends: what a device can do — allocate memory, move data in and out, run an Executable.
// The CPU backend implements it on Eigen; tests wrap it to hold execution at will.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "backends/executable.h"
#include "engine/device_memory.h"

namespace axle {

/// Memory use of one device.
struct MemoryInfo {
  std::size_t bytes_in_use = 0;
  std::size_t peak_bytes = 0;
};

/// A kind of device and its instances. Calls for one device come from that device's actor, one
/// at a time; calls for different devices may run concurrently.
class Backend {
 public:
  virtual ~Backend() = default;

  /// Hardware name as `xla_device_hw` reports it: "CPU".
  [[nodiscard]] virtual std::string_view hardware() const noexcept = 0;
  [[nodiscard]] virtual int device_count() const noexcept = 0;

  virtual IntrusivePtr<DeviceMemory> allocate(int device, std::size_t bytes) = 0;
  virtual void copy_to_device(int device, const void* host, DeviceMemory& dst,
                              std::size_t bytes) = 0;
  virtual void copy_to_host(int device, DeviceMemory& src, void* host, std::size_t bytes) = 0;

  /// Runs `program` on `device`. `inputs` match program.input_slots; returns one buffer per
  /// output slot. A donated input (program.donated(i)) is the program's to overwrite and reuse
  /// when `inputs` holds its only reference; one referenced elsewhere too is copied first, so
  /// the other holders never see it change. Throws (with the kernel's name and shapes) when a
  /// kernel fails.
  virtual std::vector<IntrusivePtr<DeviceMemory>> execute(
      int device, const Executable& program, std::vector<IntrusivePtr<DeviceMemory>> inputs) = 0;

  [[nodiscard]] virtual MemoryInfo memory_info(int device) const = 0;
};

/// The CPU backend with `devices` virtual devices.
std::unique_ptr<Backend> make_cpu_backend(int devices);

}  // namespace axle
