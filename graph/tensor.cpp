// graph: tensor handles and their bookkeeping.
#include "axle/graph/tensor.h"

#include <atomic>
#include <cstring>
#include <stdexcept>

#include "axle/engine/element.h"
#include "axle/engine/metrics.h"
#include "axle/engine/thread_binding.h"

namespace axle {
namespace {
std::atomic<int64_t> g_live_tensors{0};
}  // namespace

PendingTensors& PendingTensors::make_current() {
  return bind_until_thread_exit(new PendingTensors());
}

void PendingTensors::track(TensorImpl* impl) {
  std::lock_guard lock(mutex_);
  impl->prev_ = tail_;
  impl->next_ = nullptr;
  if (tail_)
    tail_->next_ = impl;
  else
    head_ = impl;
  tail_ = impl;
  ++count_;
}

void PendingTensors::untrack(TensorImpl* impl) {
  std::lock_guard lock(mutex_);
  if (impl->prev_)
    impl->prev_->next_ = impl->next_;
  else
    head_ = impl->next_;
  if (impl->next_)
    impl->next_->prev_ = impl->prev_;
  else
    tail_ = impl->prev_;
  impl->prev_ = impl->next_ = nullptr;
  --count_;
}

std::vector<Tensor> PendingTensors::tensors(const Device* device) {
  std::vector<Tensor> out;
  std::lock_guard lock(mutex_);
  out.reserve(count_);
  // Oldest first, so graphs list their outputs in creation order.
  for (TensorImpl* t = head_; t; t = t->next_) {
    if (device && !(t->device() == *device)) continue;
    // A tensor whose last handle is going away on another thread is skipped: its destructor is
    // waiting on this lock to leave the list.
    if (t->try_add_ref()) out.emplace_back(IntrusivePtr<TensorImpl>::adopt(t));
  }
  return out;
}

std::size_t PendingTensors::count() {
  std::lock_guard lock(mutex_);
  return count_;
}

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
  if (pending_) pending_->untrack(this);
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
  if (!pending_) {
    pending_ = IntrusivePtr<PendingTensors>(&PendingTensors::current());
    pending_->track(this);
  }
}

void TensorImpl::set_data(IntrusivePtr<DeviceData> data) {
  if (pending_) {
    pending_->untrack(this);
    pending_ = {};
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
  // Same type: copy exactly (a round trip through double would round s64 beyond 2^53).
  if (dtype == dtype_of<T>()) {
    std::memcpy(out.data(), bytes.data(), n * size);
    return out;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const double value = load_element(dtype, bytes.data() + i * size);
    if constexpr (std::is_same_v<T, Half>) {
      out[i] = Half(static_cast<float>(value));
    } else {
      out[i] = static_cast<T>(value);
    }
  }
  return out;
}

template std::vector<float> CpuTensor::values<float>() const;
template std::vector<double> CpuTensor::values<double>() const;
template std::vector<int32_t> CpuTensor::values<int32_t>() const;
template std::vector<int64_t> CpuTensor::values<int64_t>() const;
template std::vector<uint8_t> CpuTensor::values<uint8_t>() const;
template std::vector<int8_t> CpuTensor::values<int8_t>() const;
template std::vector<int16_t> CpuTensor::values<int16_t>() const;
template std::vector<Half> CpuTensor::values<Half>() const;

}  // namespace axle
