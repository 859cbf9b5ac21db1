// engine: a block of device memory, opaque to everything but the backend that made it, and a
// device's memory use. Lives in engine so the graph can hold device data without knowing
// backends, and backends can hold it without knowing the graph.
#pragma once

#include <cstddef>

#include "axle/engine/intrusive_ptr.h"

namespace axle {

/// Memory a backend allocated on one of its devices; freed when the last reference goes.
class DeviceMemory : public RefCounted {
 public:
  /// Address the owning backend's kernels read and write (host memory for the CPU backend).
  [[nodiscard]] virtual void* data() noexcept = 0;
  [[nodiscard]] virtual std::size_t bytes() const noexcept = 0;
  /// True when nothing else holds this memory, so its holder may write over it. (A handle on
  /// memory several devices share is exclusive only while no other handle is left.)
  [[nodiscard]] virtual bool exclusive() const noexcept { return use_count() == 1; }
};

/// Memory use of one device (get_memory_info).
struct MemoryInfo {
  std::size_t bytes_in_use = 0;
  std::size_t peak_bytes = 0;
};

}  // namespace axle
