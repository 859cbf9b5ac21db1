// graph: device data placeholders.
#include "axle/graph/device_data.h"

#include <fmt/format.h>

#include <stdexcept>

#include "axle/engine/metrics.h"

namespace axle {

DeviceData::DeviceData(Device device, DType dtype, Shape shape)
    : device_(device), dtype_(dtype), shape_(shape) {
  AXLE_COUNTER_INC("DeviceDataCount", 1);
}

IntrusivePtr<DeviceData> DeviceData::from_shards(Device device, DType dtype, Shape shape,
                                                 int64_t sharding,
                                                 std::vector<IntrusivePtr<DeviceData>> shards,
                                                 int first_shard) {
  if (shards.empty()) throw std::invalid_argument("sharded device data needs at least one shard");
  auto whole = make_intrusive<DeviceData>(device, dtype, shape);
  whole->sharding_ = sharding;
  whole->first_shard_ = first_shard;
  whole->shards_ = std::move(shards);
  whole->shards_pending_.store(static_cast<int>(whole->shards_.size()), std::memory_order_relaxed);
  // Each shard tells the whole when it is done: the first failure fails it (later ones are
  // ignored), the last success makes it ready. The callbacks hold the whole until they run.
  for (const IntrusivePtr<DeviceData>& shard : whole->shards_) {
    shard->when_done([whole, shard = shard.get()] {
      if (shard->failed()) {
        if (whole->shards_pending_.exchange(-1, std::memory_order_acq_rel) > 0) {
          whole->fail(shard->error());
        }
        return;
      }
      if (whole->shards_pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        whole->complete(kReady);
      }
    });
  }
  return whole;
}

void DeviceData::fulfil(IntrusivePtr<DeviceMemory> memory) {
  memory_ = std::move(memory);
  complete(kReady);
}

void DeviceData::fail(std::exception_ptr error) {
  error_ = std::move(error);
  complete(kFailed);
}

IntrusivePtr<DeviceMemory> DeviceData::donate() {
  IntrusivePtr<DeviceMemory> memory = std::move(memory_);
  error_ = std::make_exception_ptr(std::logic_error(
      fmt::format("device data {}{} on {} was donated to a step that overwrote it in place, yet "
                  "something still reads it (set XLA_ENABLE_PARAM_ALIASING=0 to rule donation out)",
                  dtype_name(dtype_), shape_.to_string(), device_.to_string())));
  state_.store(kFailed, std::memory_order_release);
  return memory;
}

void DeviceData::complete(int state) {
  done_at_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                 std::memory_order_release);
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
