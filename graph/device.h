// graph: which device a tensor lives on.
#pragma once

#include <cstdint>
#include <string>

namespace axle {

/// A device of the process's backend, by ordinal (0 .. device_count() - 1).
struct Device {
  int ordinal = 0;
  friend bool operator==(Device a, Device b) noexcept { return a.ordinal == b.ordinal; }
  /// "xla:0", the name PyTorch/XLA gives it.
  [[nodiscard]] std::string to_string() const { return "xla:" + std::to_string(ordinal); }
};

}  // namespace axle
