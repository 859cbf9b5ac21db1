// graph/reference: graph's runtime interface on the reference evaluator. Each sync evaluates the
// synced tensors' graph with plain loops at once, so device data made here is ready when sync
// returns and lives in host memory. Graph-level tests and programs run on it with axle::graph
// alone; it is slow on purpose and has no compiler, caches or collectives among replicas.
#pragma once

#include <mutex>

#include "axle/graph/tensor_runtime.h"

namespace axle::reference {

class ReferenceRuntime final : public TensorRuntime {
 public:
  /// A runtime of `devices` devices (xla:0 .. xla:devices-1), all in host memory.
  explicit ReferenceRuntime(int devices = 1);

  /// Graphs it has evaluated (one per device per sync).
  [[nodiscard]] int64_t graphs_evaluated() const;

  void after_op(const Tensor& result, const SourceLocation& where) override;
  void sync(std::span<const Tensor> tensors, SyncReason reason,
            const std::source_location& where) override;
  [[nodiscard]] Future<std::vector<std::byte>> read(IntrusivePtr<DeviceData> data) override;
  [[nodiscard]] IntrusivePtr<DeviceData> upload(std::vector<std::byte> bytes, DType dtype,
                                                const Shape& shape, Device device) override;
  void check_device(Device device) override;

 private:
  int devices_;
  mutable std::mutex mutex_;  // replicas may sync from several threads
  int64_t graphs_ = 0;
};

/// Installs a ReferenceRuntime of `devices` devices for the scope's lifetime (the previous
/// runtime, if any, comes back after it).
class ReferenceRuntimeScope {
 public:
  explicit ReferenceRuntimeScope(int devices = 1);
  ~ReferenceRuntimeScope();
  ReferenceRuntimeScope(const ReferenceRuntimeScope&) = delete;
  ReferenceRuntimeScope& operator=(const ReferenceRuntimeScope&) = delete;

  [[nodiscard]] ReferenceRuntime& runtime() noexcept { return runtime_; }

 private:
  ReferenceRuntime runtime_;
  TensorRuntime* previous_;
};

}  // namespace axle::reference
