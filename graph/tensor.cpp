// graph: tensor handles and their bookkeeping.
#include "graph/tensor.h"

#include <atomic>
#include <cstring>
#include <stdexcept>

#include "engine/element.h"
#include "engine/metrics.h"
#include "graph/trace_context.h"

namespace axle {
namespace {
std::atomic<int64_t> g_live_tensors{0};
}  // namespace

int64_t TensorImpl::live_count() noexcept { return g_live_tensors.load(std::memory_order_relaxed); }

TensorImpl::TensorImpl(DType logical_dtype, NodePtr ir, Device device)
    : dtype_(logical_dtype), shape_(ir->shape()), device_(device) {
  AXLE_COUNTER_INC("CreateTensor", 1);
  g_live_tensors.fetch_add(1, std::memory_order_relaxed);
  set_ir(std::move(ir));
}

TensorImpl::TensorImpl(DType logical_dtype, IntrusivePtr<DeviceData> data)
    : dtype_(logical_dtype), shape_(data->shape()), device_(data->device()) {
  AXLE_COUNTER_INC("CreateTensor", 1);
  g_live_tensors.fetch_add(1, std::memory_order_relaxed);
  set_data(std::move(data));
}

TensorImpl::~TensorImpl() {
  if (context_) context_->untrack(this);
  if (data_) data_->drop_tensor_ref();
  AXLE_COUNTER_INC("DestroyTensor", 1);
  g_live_tensors.fetch_sub(1, std::memory_order_relaxed);
}

NodePtr TensorImpl::value_node(SourceLocation where) {
  if (ir_) return ir_;
  if (!leaf_) leaf_ = Node::device_data(data_, where, sharding_);
  return leaf_;
}

void TensorImpl::set_ir(NodePtr ir) {
  ir_ = std::move(ir);
  if (data_) data_->drop_tensor_ref();
  data_ = {};
  leaf_ = {};
  if (!context_) {
    context_ = IntrusivePtr<TraceContext>(&TraceContext::current());
    context_->track(this);
  }
}

void TensorImpl::set_data(IntrusivePtr<DeviceData> data) {
  if (context_) {
    context_->untrack(this);
    context_ = {};
  }
  ir_ = {};
  leaf_ = {};
  if (data) data->add_tensor_ref();
  if (data_) data_->drop_tensor_ref();
  data_ = std::move(data);
}

void TensorImpl::move_to(IntrusivePtr<DeviceData> data) {
  device_ = data->device();
  set_data(std::move(data));
}

int64_t Tensor::size(int d) const {
  const int rank = dim();
  const int i = d < 0 ? d + rank : d;
  if (i < 0 || i >= rank) {
    throw std::out_of_range("size(" + std::to_string(d) + ") of a tensor of rank " +
                            std::to_string(rank));
  }
  return shape()[i];
}

std::vector<std::byte> CpuTensor::copy_elements(std::span<const std::byte> bytes,
                                                const Shape& shape, std::size_t element_size) {
  const auto count = bytes.size() / element_size;
  if (static_cast<int64_t>(count) != shape.numel()) {
    std::string dims;
    for (int d = 0; d < shape.rank(); ++d) dims += (d ? "," : "") + std::to_string(shape[d]);
    throw std::invalid_argument("CpuTensor: " + std::to_string(count) +
                                " values cannot fill shape [" + dims + "] (" +
                                std::to_string(shape.numel()) + " elements)");
  }
  return {bytes.begin(), bytes.end()};
}

template <class T>
std::vector<T> CpuTensor::values() const {
  const auto n = static_cast<std::size_t>(shape.numel());
  const std::size_t size = dtype_size(dtype);
  std::vector<T> out(n);
  if constexpr (!std::is_same_v<T, uint8_t>) {
    // Same type: copy exactly (a round trip through double would round s64 beyond 2^53).
    if (dtype == dtype_of<T>()) {
      std::memcpy(out.data(), bytes.data(), n * size);
      return out;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<T>(load_element(dtype, bytes.data() + i * size));
  }
  return out;
}

template std::vector<float> CpuTensor::values<float>() const;
template std::vector<double> CpuTensor::values<double>() const;
template std::vector<int32_t> CpuTensor::values<int32_t>() const;
template std::vector<int64_t> CpuTensor::values<int64_t>() const;
template std::vector<uint8_t> CpuTensor::values<uint8_t>() const;

}  // namespace axle
