// graph: the Tensor members that need a runtime — creation from host data, value reads and
// moves between devices, written on the runtime interface (graph/tensor_runtime.h). A read
// executes the tensor's pending graph if it has one, then waits for that one value only.
#include <fmt/format.h>

#include <cstring>
#include <memory>

#include "axle/engine/element.h"
#include "axle/graph/op_util.h"
#include "axle/graph/sharding.h"
#include "axle/graph/tensor.h"
#include "axle/graph/tensor_runtime.h"

namespace axle {
namespace {

/// `host` re-encoded as `to` (the storage and logical dtypes differ under XLA_USE_BF16).
CpuTensor convert(CpuTensor host, DType to) {
  if (host.dtype == to) return host;
  std::vector<double> values = host.values<double>();
  CpuTensor out{to, host.shape, std::vector<std::byte>(values.size() * dtype_size(to))};
  for (std::size_t i = 0; i < values.size(); ++i)
    store_element(to, values[i], out.bytes.data() + i * dtype_size(to));
  return out;
}

CpuTensor host_tensor(const DeviceData& data, std::vector<std::byte> bytes, DType logical) {
  return convert(CpuTensor{data.dtype(), data.shape(), std::move(bytes)}, logical);
}

/// The data holding `t`'s value, after executing its pending graph if it has one.
IntrusivePtr<DeviceData> materialize(TensorRuntime& runtime, const Tensor& t,
                                     const std::source_location& where) {
  if (!t.defined()) throw std::invalid_argument("cannot read the value of an undefined tensor");
  if (t.impl()->pending_ir()) {
    const Tensor synced[] = {t};
    runtime.sync(synced, SyncReason::kValueAccess, where);
  }
  return t.impl()->data();
}

/// `t`'s value on the host, waiting for it.
CpuTensor read_now(const Tensor& t, DType logical, const std::source_location& where) {
  TensorRuntime& runtime = require_tensor_runtime("reading a tensor's value");
  const IntrusivePtr<DeviceData> data = materialize(runtime, t, where);
  return host_tensor(*data, runtime.read_blocking(data), logical);
}

/// `t`'s value on the host as a future, converted on the thread that completes the read.
template <class T, class Finish>
Future<T> read_later(const Tensor& t, DType logical, const std::source_location& where,
                     Finish finish) {
  TensorRuntime& runtime = require_tensor_runtime("reading a tensor's value");
  IntrusivePtr<DeviceData> data = materialize(runtime, t, where);
  Future<std::vector<std::byte>> bytes = runtime.read(data);
  auto [promise, future] = make_promise<T>();
  auto state = bytes.state();
  // The callback is kept by the state it reads: it lets go of that state as it runs, or the
  // two would hold each other forever (whoever completes the state holds it during the call).
  state->on_ready([state, data = std::move(data), logical, finish = std::move(finish),
                   p = std::move(promise)]() mutable {
    const auto outcome = std::move(state);
    try {
      p.set_value(finish(host_tensor(*data, std::move(outcome->take().value()), logical)));
    } catch (...) {
      p.set_error(std::current_exception());
    }
  });
  return future;
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

namespace {

void check_host_bytes(std::size_t bytes, DType dtype, const Shape& shape,
                      const std::source_location& where) {
  const std::size_t expected = static_cast<std::size_t>(shape.numel()) * dtype_size(dtype);
  if (bytes != expected) {
    ops::fail("tensor",
              fmt::format("{} values given for a tensor of shape {} ({} needed)",
                          bytes / dtype_size(dtype), ops::describe(dtype, shape), shape.numel()),
              where);
  }
}

// `given` has been checked to hold its shape.
Tensor upload_host(CpuTensor given, Device device, int64_t sharding,
                   const std::source_location& where) {
  TensorRuntime& runtime = require_tensor_runtime("creating a tensor from host data");
  runtime.check_device(device);
  const DType dtype = given.dtype;
  const Shape shape = given.shape;
  const DType storage = ops::storage_dtype(dtype);
  CpuTensor host = convert(std::move(given), storage);
  IntrusivePtr<DeviceData> data =
      sharding < 0
          ? runtime.upload(std::move(host.bytes), storage, shape, device)
          : runtime.upload_sharded(std::move(host.bytes), storage, shape, device, sharding);
  Tensor made(make_intrusive<TensorImpl>(dtype, std::move(data)));
  if (sharding >= 0) made.impl()->set_sharding(sharding);
  return made;
}

Tensor upload_host_bytes(std::span<const std::byte> bytes, DType dtype, const Shape& shape,
                         Device device, int64_t sharding, const std::source_location& where) {
  check_host_bytes(bytes.size(), dtype, shape, where);
  return upload_host(CpuTensor{dtype, shape, std::vector<std::byte>(bytes.begin(), bytes.end())},
                     device, sharding, where);
}

}  // namespace

Tensor tensor_from_bytes(std::span<const std::byte> bytes, DType dtype, const Shape& shape,
                         Device device, std::source_location where) {
  return upload_host_bytes(bytes, dtype, shape, device, -1, where);
}

Tensor tensor_from_host(CpuTensor host, Device device, std::source_location where) {
  check_host_bytes(host.bytes.size(), host.dtype, host.shape, where);
  return upload_host(std::move(host), device, -1, where);
}

Tensor tensor_from_bytes_sharded(std::span<const std::byte> bytes, DType dtype, const Shape& shape,
                                 Device device, int64_t sharding, std::source_location where) {
  if (sharding >= 0) {
    try {
      check_sharding(shape, interned_sharding(sharding), "tensor");
    } catch (const std::exception& e) {
      ops::fail("tensor", e.what(), where);
    }
  }
  return upload_host_bytes(bytes, dtype, shape, device, sharding, where);
}

double Tensor::item(std::source_location where) const {
  check_single(*this, where);
  return read_now(*this, DType::kFloat64, where).values<double>()[0];
}

Future<double> Tensor::item_async(std::source_location where) const {
  check_single(*this, where);
  return read_later<double>(*this, DType::kFloat64, where,
                            [](const CpuTensor& host) { return host.values<double>()[0]; });
}

CpuTensor Tensor::cpu(std::source_location where) const { return read_now(*this, dtype(), where); }

Future<CpuTensor> Tensor::to_cpu_async(std::source_location where) const {
  return read_later<CpuTensor>(*this, dtype(), where, [](CpuTensor host) { return host; });
}

Tensor Tensor::to(Device device, std::source_location where) const {
  if (!defined()) throw std::invalid_argument("cannot move an undefined tensor");
  if (this->device() == device) return *this;
  require_tensor_runtime("moving a tensor to another device").check_device(device);
  const CpuTensor host = cpu(where);
  return tensor_from_bytes(host.bytes, host.dtype, host.shape, device, where);
}

std::string Tensor::to_string() const {
  if (!defined()) return "tensor(undefined)";
  CpuTensor host = cpu();
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
