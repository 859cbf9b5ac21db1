// Tests actors/runtime/loader_actor.h through DeviceFeed, on a BatchSource of its own (no io/):
// what the LoaderActor asks of its source — one begin and one end per epoch, never the uneven rest,
// no read once every device has left — and that replicas' batches come back in order.
#include "axle/actors/runtime/loader_actor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/runtime/device_feed.h"
#include "axle/axle.h"

namespace axle {
namespace {

// The calls a source received, in order ("begin", "next 3", "end"); outlives the source, which
// the feed lets go of when it closes.
class CallLog {
 public:
  void add(std::string call) {
    std::lock_guard lock(mutex_);
    calls_.push_back(std::move(call));
  }
  [[nodiscard]] std::vector<std::string> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> calls_;
};

// Batch i is {s64 [1] {i}}.
class ScriptedSource final : public BatchSource {
 public:
  ScriptedSource(int64_t size, std::shared_ptr<CallLog> log) : size_(size), log_(std::move(log)) {}
  int64_t size() const override { return size_; }
  void begin_epoch() override {
    log_->add("begin");
    next_ = 0;
  }
  HostBatch next() override {
    log_->add("next " + std::to_string(next_));
    CpuTensor t{DType::kInt64, Shape{1}, std::vector<std::byte>(8)};
    std::memcpy(t.bytes.data(), &next_, 8);
    ++next_;
    return {std::move(t)};
  }
  void end_epoch() override { log_->add("end"); }

 private:
  int64_t size_;
  int64_t next_ = 0;
  std::shared_ptr<CallLog> log_;
};

class LoaderActorTest : public ::testing::Test {
 protected:
  void SetUp() override { LazySystem::restart(LazySystemOptions{.cpu_devices = 2}); }
};

TEST_F(LoaderActorTest, ReadsEachEpochOnceAndNeverTheUnevenRest) {
  auto log = std::make_shared<CallLog>();
  // With 2 devices, batches 0-3 are used and batch 4 is left out.
  DeviceFeed feed(std::make_unique<ScriptedSource>(5, log), {device(0), device(1)}, {}, 2);
  EXPECT_EQ(feed.per_device_size(), 2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    EXPECT_EQ(feed.begin_epoch(0), epoch);
    EXPECT_EQ(feed.begin_epoch(1), epoch);
    std::vector<std::vector<int64_t>> got(2);
    for (int k = 0; k < 3; ++k) {
      for (int slot = 0; slot < 2; ++slot) {
        if (std::optional<DeviceBatch> batch = feed.next(slot)) {
          EXPECT_EQ(batch->at(0).device(), device(slot));
          got[slot].push_back(batch->at(0).item<int64_t>());
        }
      }
    }
    EXPECT_EQ(got, (std::vector<std::vector<int64_t>>{{0, 2}, {1, 3}})) << "epoch " << epoch;
  }
  feed.close();
  const std::vector<std::string> epoch = {"begin", "next 0", "next 1", "next 2", "next 3", "end"};
  std::vector<std::string> expected = epoch;
  expected.insert(expected.end(), epoch.begin(), epoch.end());
  EXPECT_EQ(log->calls(), expected);
}

TEST_F(LoaderActorTest, EndsTheSourcesEpochOnceEveryDeviceHasLeft) {
  auto log = std::make_shared<CallLog>();
  DeviceFeed feed(std::make_unique<ScriptedSource>(1000, log), {device(0), device(1)},
                  {.loader_prefetch_size = 1, .device_prefetch_size = 1}, 1);
  const int64_t epoch = feed.begin_epoch(0);
  ASSERT_EQ(feed.begin_epoch(1), epoch);
  ASSERT_TRUE(feed.next(0) && feed.next(1));
  feed.leave(0, epoch);
  feed.leave(1, epoch);
  EXPECT_EQ(feed.begin_epoch(0), epoch + 1);  // waits for the epoch to end
  feed.close();
  const std::vector<std::string> calls = log->calls();
  const auto end = std::find(calls.begin(), calls.end(), "end");
  ASSERT_NE(end, calls.end());
  // Reads before the end: the two batches handed out and the two asked for ahead, one per device
  // queue, one in the host queue, and — while the devices leave one after the other — up to a
  // host queue's worth and one more for the device still in the epoch.
  EXPECT_LE(end - calls.begin() - 1, 4 + 2 + 1 + 2);
  EXPECT_EQ(*(end + 1), "begin");
}

}  // namespace
}  // namespace axle
