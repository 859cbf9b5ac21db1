// graph/reference: the reference runtime.
#include "axle/graph/reference/reference_runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "axle/graph/reference/evaluator.h"
#include "axle/graph/step_graph.h"
#include "axle/graph/tensor.h"
#include "axle/graph/trace_context.h"

namespace axle::reference {
namespace {

// A device buffer of this runtime: host bytes, kept as the evaluator reads them.
class HostMemory final : public DeviceMemory {
 public:
  explicit HostMemory(CpuTensor value) : value_(std::move(value)) {}
  void* data() noexcept override { return value_.bytes.data(); }
  [[nodiscard]] std::size_t bytes() const noexcept override { return value_.bytes.size(); }
  [[nodiscard]] const CpuTensor& value() const noexcept { return value_; }

 private:
  CpuTensor value_;
};

const CpuTensor& value_of(const DeviceData& data) {
  if (data.pending() || !data.memory()) {
    throw std::logic_error(fmt::format("reference runtime: {}{} on {} holds no value yet",
                                       dtype_name(data.dtype()), data.shape().to_string(),
                                       data.device().to_string()));
  }
  const auto* memory = dynamic_cast<const HostMemory*>(data.memory().get());
  if (!memory) {
    throw std::logic_error(
        fmt::format("reference runtime: {}{} on {} was not made by a reference runtime",
                    dtype_name(data.dtype()), data.shape().to_string(), data.device().to_string()));
  }
  return memory->value();
}

IntrusivePtr<DeviceData> ready_data(Device device, CpuTensor value) {
  auto data = make_intrusive<DeviceData>(device, value.dtype, value.shape);
  data->fulfil(make_intrusive<HostMemory>(std::move(value)));
  return data;
}

}  // namespace

ReferenceRuntime::ReferenceRuntime(int devices) : devices_(devices) {
  if (devices < 1) {
    throw std::invalid_argument(
        fmt::format("reference runtime: {} devices; it needs at least one", devices));
  }
}

int64_t ReferenceRuntime::graphs_evaluated() const {
  std::lock_guard lock(mutex_);
  return graphs_;
}

void ReferenceRuntime::after_op(const Tensor&, const SourceLocation&) {}

void ReferenceRuntime::sync(std::span<const Tensor> tensors, SyncReason,
                            const std::source_location&) {
  for (const DeviceSync& sync : pending_by_device(tensors)) {
    const StepGraph graph = build_step_graph(sync.roots);
    std::vector<CpuTensor> values =
        evaluate(graph, [](const DeviceData& data) -> const CpuTensor& { return value_of(data); });
    {
      std::lock_guard lock(mutex_);
      ++graphs_;
    }
    // graph.outputs follow the roots' order, one per root.
    std::vector<IntrusivePtr<DeviceData>> outputs;
    outputs.reserve(values.size());
    for (CpuTensor& value : values) outputs.push_back(ready_data(sync.device, std::move(value)));
    for (std::size_t i = 0; i < sync.tensors.size(); ++i) {
      sync.tensors[i]->set_data(outputs[sync.root_of[i]]);
    }
  }
  // The synced tensors now read data: what the log holds of their graphs is garbage.
  TraceContext::current().creation_log().clear();
}

Future<std::vector<std::byte>> ReferenceRuntime::read(IntrusivePtr<DeviceData> data) {
  auto [promise, future] = make_promise<std::vector<std::byte>>();
  try {
    promise.set_value(value_of(*data).bytes);
  } catch (...) {
    promise.set_error(std::current_exception());
  }
  return future;
}

IntrusivePtr<DeviceData> ReferenceRuntime::upload(std::vector<std::byte> bytes, DType dtype,
                                                  const Shape& shape, Device device) {
  check_device(device);
  return ready_data(device, CpuTensor{dtype, shape, std::move(bytes)});
}

void ReferenceRuntime::check_device(Device device) {
  if (device.ordinal < 0 || device.ordinal >= devices_) {
    throw std::out_of_range(
        fmt::format("device {} does not exist: the reference runtime has {} device{}",
                    device.to_string(), devices_, devices_ == 1 ? "" : "s"));
  }
}

ReferenceRuntimeScope::ReferenceRuntimeScope(int devices)
    : runtime_(devices), previous_(install_tensor_runtime(&runtime_)) {}

ReferenceRuntimeScope::~ReferenceRuntimeScope() { install_tensor_runtime(previous_); }

}  // namespace axle::reference
