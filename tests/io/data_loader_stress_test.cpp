// Stress tests of io/data_loader.h: stopping epochs early, destroying loaders with busy and
// blocked workers, under random delays. Run under ThreadSanitizer as well (build-thread/).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "axle/io/data_loader.h"
#include "axle/io/splitmix.h"

namespace axle {
namespace {

// Sample i is {s64 i}, after a pseudo-random pause of up to `max_pause_us` microseconds; index
// `fail_at` throws. Counts live get() calls to check that none outlives its loader.
class SlowDataset final : public Dataset {
 public:
  SlowDataset(int64_t n, int max_pause_us, int64_t fail_at = -1)
      : n_(n), max_pause_us_(max_pause_us), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override {
    in_flight_.fetch_add(1);
    detail::SplitMix64 stream(7, static_cast<uint64_t>(i));
    if (max_pause_us_ > 0) {
      std::this_thread::sleep_for(
          std::chrono::microseconds(stream.next_below(static_cast<uint64_t>(max_pause_us_))));
    }
    in_flight_.fetch_sub(1);
    if (i == fail_at_) throw std::runtime_error("broken sample");
    CpuTensor t{DType::kInt64, Shape{}, std::vector<std::byte>(8)};
    std::memcpy(t.bytes.data(), &i, 8);
    return {std::move(t)};
  }
  [[nodiscard]] int in_flight() const { return in_flight_.load(); }

 private:
  int64_t n_;
  int max_pause_us_;
  int64_t fail_at_;
  mutable std::atomic<int> in_flight_{0};
};

TEST(DataLoaderStress, LeavingEpochsEarlyNeverHangs) {
  auto data = std::make_shared<SlowDataset>(400, 200);
  for (int round = 0; round < 60; ++round) {
    DataLoader loader(data, {.batch_size = 3,
                             .shuffle = true,
                             .seed = static_cast<uint64_t>(round),
                             .num_workers = 1 + round % 4,
                             .prefetch_factor = 1 + round % 3});
    int64_t expected = 0;
    for (const Batch& batch : loader) {
      ASSERT_EQ(batch[0].shape, (Shape{3}));
      if (++expected > round % 7) break;
    }
  }
  EXPECT_EQ(data->in_flight(), 0);
}

TEST(DataLoaderStress, DestroyingTheLoaderWithBlockedWorkersReturns) {
  // The caller never takes a batch past the first, so the workers fill the window and wait.
  auto data = std::make_shared<SlowDataset>(1000, 0);
  for (int round = 0; round < 50; ++round) {
    auto loader = std::make_unique<DataLoader>(
        data, DataLoaderOptions{.batch_size = 2, .num_workers = 3, .prefetch_factor = 2});
    auto it = loader->begin();
    if (round % 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    loader.reset();
  }
  EXPECT_EQ(data->in_flight(), 0);
}

TEST(DataLoaderStress, DestroyingTheLoaderWhileWorkersAssembleReturnsSoon) {
  // Big batches of slow samples: workers are inside assemble when the loader goes away.
  auto data = std::make_shared<SlowDataset>(100000, 100);
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 10; ++round) {
    DataLoader loader(data, {.batch_size = 1000, .num_workers = 3, .prefetch_factor = 4});
    auto it = loader.begin();
  }
  // Ten full windows would take minutes; stopping between samples takes milliseconds.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(data->in_flight(), 0);
}

TEST(DataLoaderStress, RestartingEpochsMidwayKeepsOrder) {
  auto data = std::make_shared<SlowDataset>(60, 50);
  DataLoader loader(data, {.batch_size = 4, .num_workers = 3});
  for (int round = 0; round < 40; ++round) {
    int64_t next = 0;
    for (const Batch& batch : loader) {
      const std::vector<int64_t> indices = batch[0].values<int64_t>();
      for (int64_t i : indices) ASSERT_EQ(i, next++);
      if (next > round % 30) break;
    }
  }
}

TEST(DataLoaderStress, ErrorsAmidRandomDelaysArriveInOrder) {
  auto data = std::make_shared<SlowDataset>(200, 100, /*fail_at=*/101);
  for (int workers : {1, 2, 4}) {
    DataLoader loader(data, {.batch_size = 5, .num_workers = workers, .prefetch_factor = 3});
    auto it = loader.begin();
    int64_t batches = 1;
    bool failed = false;
    while (!(it == loader.end())) {
      try {
        ++it;
        if (!(it == loader.end())) ++batches;
      } catch (const std::runtime_error&) {
        failed = true;
        EXPECT_EQ(it.index(), 20);  // batch 20 holds sample 101
      }
    }
    EXPECT_TRUE(failed);
    EXPECT_EQ(batches, 39);
  }
}

}  // namespace
}  // namespace axle
