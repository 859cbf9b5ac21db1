// Helpers for the ParallelLoader tests: a dataset that records which samples were read, and
// reading a device batch's sample indices back.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "axle/io/dataset.h"
#include "axle/io/parallel_loader.h"
#include "axle/io/splitmix.h"

namespace axle::testing {

/// Sample i is {s64 i, f32 [2] {i, -i}}, after a pseudo-random pause of up to `max_pause_us`
/// microseconds; sample `fail_at` throws. Records every get(), in order.
class RecordingDataset final : public Dataset {
 public:
  explicit RecordingDataset(int64_t n, int64_t fail_at = -1, int max_pause_us = 0)
      : n_(n), fail_at_(fail_at), max_pause_us_(max_pause_us) {}

  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    if (max_pause_us_ > 0) {
      detail::SplitMix64 stream(11, static_cast<uint64_t>(i));
      std::this_thread::sleep_for(
          std::chrono::microseconds(stream.next_below(static_cast<uint64_t>(max_pause_us_))));
    }
    {
      std::lock_guard lock(mutex_);
      reads_.push_back(i);
    }
    read_cv_.notify_all();
    if (i == fail_at_) throw std::runtime_error("sample " + std::to_string(i) + " is broken");
    CpuTensor index{DType::kInt64, Shape{}, std::vector<std::byte>(8)};
    std::memcpy(index.bytes.data(), &i, 8);
    CpuTensor pair{DType::kFloat32, Shape{2}, std::vector<std::byte>(8)};
    const float values[2] = {static_cast<float>(i), static_cast<float>(-i)};
    std::memcpy(pair.bytes.data(), values, 8);
    return {std::move(index), std::move(pair)};
  }

  /// Every sample index read so far, in the order of the reads.
  [[nodiscard]] std::vector<int64_t> reads() const {
    std::lock_guard lock(mutex_);
    return reads_;
  }
  [[nodiscard]] std::size_t read_count() const {
    std::lock_guard lock(mutex_);
    return reads_.size();
  }
  /// Waits until at least `count` samples were read; false if that takes over a minute (a hang
  /// guard: the test then fails instead of stalling the suite).
  bool wait_for_reads(std::size_t count) const {
    std::unique_lock lock(mutex_);
    return read_cv_.wait_for(lock, std::chrono::minutes(1), [&] { return reads_.size() >= count; });
  }

 private:
  int64_t n_, fail_at_;
  int max_pause_us_;
  mutable std::mutex mutex_;
  mutable std::condition_variable read_cv_;
  mutable std::vector<int64_t> reads_;
};

/// The sample indices of a device batch (its first field), read from the device.
inline std::vector<int64_t> sample_indices(const DeviceBatch& batch) {
  return batch.at(0).to_vector<int64_t>();
}

}  // namespace axle::testing
