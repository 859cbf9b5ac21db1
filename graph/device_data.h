// graph: data on a device, or the placeholder for data a device has yet to produce. Readers wait
// on the one placeholder they need; a failed execution fails its placeholders, and the error
// flows to whatever reads them.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <utility>
#include <vector>

#include "axle/engine/device_memory.h"
#include "axle/engine/dtype.h"
#include "axle/engine/intrusive_ptr.h"
#include "axle/engine/shape.h"
#include "axle/engine/unique_function.h"
#include "axle/graph/device.h"

namespace axle {

/// A buffer on a device (storage dtype and shape) that is pending, ready or failed. Under SPMD
/// (actors/host/spmd_runtime.h) it may instead be a global value held in pieces, one per device of
/// the mesh: it is then ready once every piece is, and fails with the first piece that fails.
class DeviceData final : public RefCounted {
 public:
  /// Counted as `DeviceDataCount`.
  DeviceData(Device device, DType dtype, Shape shape);
  /// A global value of `shape` on the SPMD virtual device `device`, held as `shards`: shards[d]
  /// is mesh device `first_shard + d`'s tile of it under the sharding `sharding` (a key of
  /// intern_sharding, graph/sharding.h; -1: replicated, each shard the whole value). In a job of
  /// several processes a process holds only its own devices' shards: `first_shard` is the global
  /// ordinal of its first device (0 when the process is the whole job).
  [[nodiscard]] static IntrusivePtr<DeviceData> from_shards(
      Device device, DType dtype, Shape shape, int64_t sharding,
      std::vector<IntrusivePtr<DeviceData>> shards, int first_shard = 0);

  [[nodiscard]] Device device() const noexcept { return device_; }
  [[nodiscard]] DType dtype() const noexcept { return dtype_; }
  [[nodiscard]] const Shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t bytes() const noexcept {
    return static_cast<std::size_t>(shape_.numel()) * dtype_size(dtype_);
  }

  /// True for a global value held in shards (then memory() is null: the shards hold it).
  [[nodiscard]] bool sharded() const noexcept { return !shards_.empty(); }
  /// One per mesh device this process holds, in device position order from first_shard();
  /// empty unless sharded().
  [[nodiscard]] const std::vector<IntrusivePtr<DeviceData>>& shards() const noexcept {
    return shards_;
  }
  /// The mesh position (global device ordinal) of shards()[0].
  [[nodiscard]] int first_shard() const noexcept { return first_shard_; }
  /// How the shards divide the value: a key of intern_sharding, or -1 for replicated.
  [[nodiscard]] int64_t sharding() const noexcept { return sharding_; }

  [[nodiscard]] bool pending() const noexcept {
    return state_.load(std::memory_order_acquire) == kPending;
  }
  [[nodiscard]] bool failed() const noexcept {
    return state_.load(std::memory_order_acquire) == kFailed;
  }

  /// Makes the data ready; runs the waiters on this thread.
  void fulfil(IntrusivePtr<DeviceMemory> memory);
  /// Fails the data; readers get `error`.
  void fail(std::exception_ptr error);

  /// Blocks until the data is ready or failed; returns the memory or rethrows the error.
  const IntrusivePtr<DeviceMemory>& wait();
  /// The memory; only once ready.
  [[nodiscard]] const IntrusivePtr<DeviceMemory>& memory() const noexcept { return memory_; }
  [[nodiscard]] std::exception_ptr error() const noexcept { return error_; }

  /// Runs `fn` once the data is ready or failed: now, or on the thread that completes it.
  void when_done(UniqueFunction fn);
  /// When the data became ready or failed (steady clock); the clock's epoch while pending.
  [[nodiscard]] std::chrono::steady_clock::time_point done_at() const noexcept {
    return std::chrono::steady_clock::time_point(
        std::chrono::steady_clock::duration(done_at_.load(std::memory_order_acquire)));
  }

  /// Tensors bound to this data, and reads in flight (TensorImpl and DataHold keep the count).
  /// Only they can ask for the data after the step being traced, so a step may donate the
  /// buffer of data nothing holds.
  [[nodiscard]] int32_t tensor_refs() const noexcept {
    return tensor_refs_.load(std::memory_order_acquire);
  }
  void add_tensor_ref() noexcept { tensor_refs_.fetch_add(1, std::memory_order_relaxed); }
  void drop_tensor_ref() noexcept { tensor_refs_.fetch_sub(1, std::memory_order_acq_rel); }

  /// Hands the ready memory to a step that overwrites it (buffer donation); the data reads as
  /// failed from then on, with an error saying so.
  [[nodiscard]] IntrusivePtr<DeviceMemory> donate();

 private:
  enum : int { kPending, kReady, kFailed };
  void complete(int state);

  Device device_;
  DType dtype_;
  Shape shape_;
  int64_t sharding_ = -1;
  int first_shard_ = 0;
  std::vector<IntrusivePtr<DeviceData>> shards_;
  std::atomic<int> shards_pending_{0};
  std::atomic<int> state_{kPending};
  std::atomic<int32_t> tensor_refs_{0};
  std::atomic<std::chrono::steady_clock::rep> done_at_{0};  // a step's time, for its closures
  IntrusivePtr<DeviceMemory> memory_;
  std::exception_ptr error_;
  std::mutex mutex_;
  std::condition_variable done_;
  std::vector<UniqueFunction> waiters_;
};

/// Holds `data` as a tensor bound to it does (DeviceData::tensor_refs): while held, no step may
/// donate (overwrite) its buffer. A read in flight holds the data it reads.
class DataHold {
 public:
  DataHold() noexcept = default;
  explicit DataHold(IntrusivePtr<DeviceData> data) noexcept : data_(std::move(data)) {
    if (data_) data_->add_tensor_ref();
  }
  DataHold(DataHold&& other) noexcept : data_(std::move(other.data_)) {}
  DataHold& operator=(DataHold&& other) noexcept {
    if (this != &other) {
      drop();
      data_ = std::move(other.data_);
    }
    return *this;
  }
  ~DataHold() { drop(); }
  DataHold(const DataHold&) = delete;
  DataHold& operator=(const DataHold&) = delete;

  [[nodiscard]] DeviceData* get() const noexcept { return data_.get(); }
  DeviceData* operator->() const noexcept { return data_.get(); }
  [[nodiscard]] const IntrusivePtr<DeviceData>& data() const noexcept { return data_; }

 private:
  void drop() noexcept {
    if (data_) std::exchange(data_, {})->drop_tensor_ref();
  }
  IntrusivePtr<DeviceData> data_;
};

}  // namespace axle
