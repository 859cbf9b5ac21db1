// actors: the Tensor members that need devices — creation from host data and value reads. A read
// executes the tensor's pending graph if it has one, then waits for that one value only.
#include <fmt/format.h>

#include <chrono>
#include <cstring>

#include "actors/host.h"
#include "actors/lazy_system.h"
#include "actors/step_breakdown.h"
#include "engine/element.h"
#include "engine/metrics.h"
#include "graph/ops/op_util.h"
#include "graph/tensor.h"

namespace axle {
namespace {

/// `host` re-encoded as `to` (the storage and logical dtypes differ under XLA_USE_BF16).
CpuTensor convert(const CpuTensor& host, DType to) {
  if (host.dtype == to) return host;
  std::vector<double> values = host.values<double>();
  CpuTensor out{to, host.shape, std::vector<std::byte>(values.size() * dtype_size(to))};
  for (std::size_t i = 0; i < values.size(); ++i)
    store_element(to, values[i], out.bytes.data() + i * dtype_size(to));
  return out;
}

CpuTensor read(const IntrusivePtr<DeviceData>& data, DType logical) {
  const auto asked = std::chrono::steady_clock::now();
  const IntrusivePtr<DeviceMemory>& memory = data->wait();
  const auto start = std::chrono::steady_clock::now();
  CpuTensor host{data->dtype(), data->shape(), std::vector<std::byte>(data->bytes())};
  LazySystem::get().backend().copy_to_host(data->device().ordinal, *memory, host.bytes.data(),
                                           host.bytes.size());
  const double transfer_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  AXLE_METRIC_ADD("TransferFromDeviceTime", MetricKind::kTime, transfer_ns);
  this_thread_breakdown()->add_host_wait(
      StepBreakdown::kValueWait,
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - asked).count());
  return convert(host, logical);
}

const IntrusivePtr<DeviceData>& materialize(const Tensor& t, const std::source_location& where) {
  if (!t.defined()) throw std::invalid_argument("cannot read the value of an undefined tensor");
  if (t.impl()->pending_ir()) sync_tensors({t}, false, SyncReason::kValueAccess, where);
  return t.impl()->data();
}

void check_single(const Tensor& t, const std::source_location& where) {
  if (t.numel() != 1) {
    ops::fail(
        "item",
        fmt::format("a tensor of shape {} has {} elements, not one", ops::describe(t), t.numel()),
        where);
  }
}

}  // namespace

Tensor tensor_from_bytes(std::span<const std::byte> bytes, DType dtype, const Shape& shape,
                         Device device, std::source_location where) {
  const std::size_t expected = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  if (bytes.size() != expected) {
    ops::fail(
        "tensor",
        fmt::format("{} values given for a tensor of shape {} ({} needed)",
                    bytes.size() / dtype_size(dtype), ops::describe(dtype, shape), shape.numel()),
        where);
  }
  LazySystem& system = LazySystem::get();
  const ActorRef<DeviceActor>& actor = system.device_actor(device);
  CpuTensor host{dtype, shape, std::vector<std::byte>(bytes.begin(), bytes.end())};
  const DType storage = ops::storage_dtype(dtype);
  auto payload = std::make_shared<const std::vector<std::byte>>(convert(host, storage).bytes);
  auto data = make_intrusive<DeviceData>(device, storage, shape);
  actor.tell(TransferToDevice{std::move(payload), data});
  return Tensor(make_intrusive<TensorImpl>(dtype, std::move(data)));
}

double Tensor::item(std::source_location where) const {
  check_single(*this, where);
  return read(materialize(*this, where), DType::kF64).values<double>()[0];
}

Future<double> Tensor::item_async(std::source_location where) const {
  check_single(*this, where);
  IntrusivePtr<DeviceData> data = materialize(*this, where);
  auto [promise, future] = make_promise<double>();
  data->when_done([data, p = std::move(promise)]() mutable {
    try {
      p.set_value(read(data, DType::kF64).values<double>()[0]);
    } catch (...) {
      p.set_error(std::current_exception());
    }
  });
  return future;
}

CpuTensor Tensor::to_cpu(std::source_location where) const {
  return read(materialize(*this, where), dtype());
}

Tensor Tensor::to(Device device, std::source_location where) const {
  if (!defined()) throw std::invalid_argument("cannot move an undefined tensor");
  if (this->device() == device) return *this;
  (void)LazySystem::get().device_actor(device);  // validates
  const CpuTensor host = to_cpu(where);
  return tensor_from_bytes(host.bytes, host.dtype, host.shape, device, where);
}

Future<CpuTensor> Tensor::to_cpu_async(std::source_location where) const {
  IntrusivePtr<DeviceData> data = materialize(*this, where);
  auto [promise, future] = make_promise<CpuTensor>();
  data->when_done([data, logical = dtype(), p = std::move(promise)]() mutable {
    try {
      p.set_value(read(data, logical));
    } catch (...) {
      p.set_error(std::current_exception());
    }
  });
  return future;
}

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  CpuTensor host = to_cpu();
  std::vector<double> values = host.values<double>();
  std::string body;
  const Shape& s = host.shape;
  if (s.rank() == 0) {
    body = fmt::format("{}", values.empty() ? 0.0 : values[0]);
  } else {
    // Brackets open where an index wraps to zero and close where it reaches its end.
    std::vector<int64_t> index(s.rank(), 0);
    for (std::size_t i = 0; i < values.size(); ++i) {
      int opening = 0;
      for (int d = s.rank() - 1; d >= 0 && index[d] == 0; --d) ++opening;
      if (i > 0) body += ", ";
      body.append(opening, '[');
      body += fmt::format("{}", values[i]);
      int closing = 0;
      for (int d = s.rank() - 1; d >= 0; --d) {
        if (++index[d] < s[d]) break;
        index[d] = 0;
        ++closing;
      }
      body.append(closing, ']');
    }
    if (values.empty()) body = std::string(s.rank(), '[') + std::string(s.rank(), ']');
  }
  return fmt::format("tensor({}, device='{}', dtype={})", body, device().to_string(),
                     dtype_name(dtype()));
}

}  // namespace axle
