// graph: device data placeholders.
#include "graph/device_data.h"

#include "engine/metrics.h"

namespace axle {

DeviceData::DeviceData(Device device, DType dtype, Shape shape)
    : device_(device), dtype_(dtype), shape_(shape) {
  AXLE_COUNTER_INC("DeviceDataCount", 1);
}

void DeviceData::fulfil(IntrusivePtr<DeviceMemory> memory) {
  memory_ = std::move(memory);
  complete(kReady);
}

void DeviceData::fail(std::exception_ptr error) {
  error_ = std::move(error);
  complete(kFailed);
}

void DeviceData::complete(int state) {
  std::vector<UniqueFunction> waiters;
  {
    std::lock_guard lock(mutex_);
    state_.store(state, std::memory_order_release);
    waiters.swap(waiters_);
  }
  done_.notify_all();
  for (auto& fn : waiters) fn();
}

const IntrusivePtr<DeviceMemory>& DeviceData::wait() {
  if (pending()) {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return !pending(); });
  }
  if (failed()) std::rethrow_exception(error_);
  return memory_;
}

void DeviceData::when_done(UniqueFunction fn) {
  {
    std::lock_guard lock(mutex_);
    if (pending()) {
      waiters_.push_back(std::move(fn));
      return;
    }
  }
  fn();
}

}  // namespace axle
