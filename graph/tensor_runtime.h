// graph: the runtime interface — what the graph layer needs from whoever executes its graphs:
// a look at every traced op, executing pending IR, reading a device value back as a future and
// putting host bytes on a device. actors/ implements it on devices (its replica hosts and device
// actors); graph/reference/ implements it with plain loops, so graph-level code and tests link
// without actors. Tensor's value reads, creation from host data and moves between devices, and
// Module's and Optimizer's loading, are written on top of it.
#pragma once

#include <atomic>
#include <cstddef>
#include <source_location>
#include <span>
#include <vector>

#include "axle/engine/dtype.h"
#include "axle/engine/future.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/shape.h"
#include "axle/graph/device.h"
#include "axle/graph/device_data.h"
#include "axle/graph/ir.h"
#include "axle/graph/sync_reason.h"

namespace axle {

class Tensor;
class TensorImpl;

/// The pending tensors of one device in a sync, as every runtime's sync starts from them: the
/// tensors (each once, in the order given), the distinct IR nodes whose values they are (one
/// output of the device's graph each), and per tensor the index of its node among those.
struct DeviceSync {
  Device device;
  std::vector<TensorImpl*> tensors;
  std::vector<NodePtr> roots;
  std::vector<std::size_t> root_of;
};

/// `tensors`' pending ones grouped by device, in the order the devices first appear.
[[nodiscard]] std::vector<DeviceSync> pending_by_device(std::span<const Tensor> tensors);

/// Executes traced graphs. Called from the tracing (replica) thread unless a method says so.
class TensorRuntime {
 public:
  virtual ~TensorRuntime() = default;

  /// Sees every op as it is traced (eager mode executes it; a runaway graph is cut).
  virtual void after_op(const Tensor& result, const SourceLocation& where) = 0;

  /// Executes the pending IR of `tensors` (those without pending IR are skipped) and binds each
  /// to the device data its value will be in; returns without waiting for the device.
  virtual void sync(std::span<const Tensor> tensors, SyncReason reason,
                    const std::source_location& where) = 0;

  /// `data`'s bytes (its storage dtype, row-major) on the host once it is ready; the future
  /// fails with the error of the execution that failed to produce it. Never blocks: the caller
  /// blocks, if at all, when it asks the future for the value.
  [[nodiscard]] virtual Future<std::vector<std::byte>> read(IntrusivePtr<DeviceData> data) = 0;
  /// read(), waiting for the bytes on the calling thread (a replica waiting for a value: the
  /// runtime may account for the wait).
  [[nodiscard]] virtual std::vector<std::byte> read_blocking(IntrusivePtr<DeviceData> data) {
    return read(std::move(data)).get();
  }

  /// New device data on `device` holding `bytes` (storage dtype `dtype`, `shape`); the copy
  /// to the device may still be under way (the data is pending until it is done).
  [[nodiscard]] virtual IntrusivePtr<DeviceData> upload(std::vector<std::byte> bytes, DType dtype,
                                                        const Shape& shape, Device device) = 0;

  /// Throws std::out_of_range naming the devices there are when `device` is not one of them.
  virtual void check_device(Device device) = 0;

  /// upload(), laid out over the SPMD mesh by `sharding` (a key of intern_sharding): each device
  /// receives only its tile. Runtimes without a mesh upload the whole value.
  [[nodiscard]] virtual IntrusivePtr<DeviceData> upload_sharded(std::vector<std::byte> bytes,
                                                                DType dtype, const Shape& shape,
                                                                Device device, int64_t sharding) {
    (void)sharding;
    return upload(std::move(bytes), dtype, shape, device);
  }

  /// SPMD (mark_sharding and clear_sharding on device data): the data laid out over the mesh by
  /// `sharding` (a key of intern_sharding; -1 replicated), as new data, or `data` itself when the
  /// runtime does not lay out data over devices (one device, the reference runtime) or it is
  /// laid out so already.
  [[nodiscard]] virtual IntrusivePtr<DeviceData> reshard(IntrusivePtr<DeviceData> data,
                                                         int64_t sharding) {
    (void)sharding;
    return data;
  }
};

namespace tensor_runtime_internal {
// Read after every traced op: one relaxed-acquire load, inline.
inline constinit std::atomic<TensorRuntime*> g_installed{nullptr};
[[nodiscard]] TensorRuntime* from_provider();
}  // namespace tensor_runtime_internal

/// The runtime in use: the one installed, else the one the default provider makes (on first
/// use); null when there is neither (a program that only traces). Throws what the provider
/// throws (a runtime that cannot start, e.g. on a bad configuration).
[[nodiscard]] inline TensorRuntime* tensor_runtime() {
  if (TensorRuntime* runtime = tensor_runtime_internal::g_installed.load(std::memory_order_acquire))
      [[likely]] {
    return runtime;
  }
  return tensor_runtime_internal::from_provider();
}

/// tensor_runtime(), or std::logic_error naming `what` needed one when there is none.
[[nodiscard]] TensorRuntime& require_tensor_runtime(std::string_view what);

/// Makes `runtime` the one in use (null: none; the default provider may then make one) and
/// returns the one installed before. The caller keeps it alive while installed.
TensorRuntime* install_tensor_runtime(TensorRuntime* runtime) noexcept;

/// Sets what tensor_runtime() calls when no runtime is installed; it returns the runtime to
/// install (which must outlive its use), or null.
void set_default_tensor_runtime(TensorRuntime* (*provider)()) noexcept;

}  // namespace axle
