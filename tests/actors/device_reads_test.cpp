// Reads through the device actor (actors/host/device_runtime.cpp, ReadToHost and QueryMemory in
// actors/runtime/device_actor.h): a read of a pending result waits for that result only, a ready
// value is read and memory is queried while another execution is held, a failed step's error
// reaches its readers, and step closures read values. Every wait has a deadline, so a regression
// fails instead of hanging.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "tests/actors/testing_system.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

constexpr auto kDeadline = 30s;

// Releases the backend if still alive after `limit`, so that a call that waits for a held
// execution returns (and the test fails on fired()) instead of hanging.
class ReleaseWatchdog {
 public:
  ReleaseWatchdog(TestingBackend& backend, std::chrono::nanoseconds limit)
      : thread_([this, &backend, limit] {
          std::unique_lock lock(mutex_);
          if (!cancelled_.wait_for(lock, limit, [&] { return done_; })) {
            fired_ = true;
            backend.release();
          }
        }) {}
  ~ReleaseWatchdog() { stop(); }
  /// Whether it had to release the backend (what it watched waited for the held execution).
  bool fired() {
    stop();
    return fired_;
  }

 private:
  void stop() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cancelled_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::mutex mutex_;
  std::condition_variable cancelled_;
  bool done_ = false;
  bool fired_ = false;
  std::thread thread_;
};

class DeviceReads : public ::testing::Test {
 protected:
  void SetUp() override { backend_ = &restart_on_testing_backend(); }
  void TearDown() override { backend_->release(); }

  // A tensor already on the device (its upload done).
  static Tensor ready_tensor(std::vector<float> values) {
    const auto n = static_cast<int64_t>(values.size());
    Tensor t = tensor(values, Shape{n});
    wait_device_ops();
    return t;
  }

  TestingBackend* backend_ = nullptr;
};

TEST_F(DeviceReads, AsyncReadsOfAHeldResultReturnAtOnceAndCompleteOnRelease) {
  Tensor x = ready_tensor({1, 2, 3});
  backend_->hold();
  Tensor doubled = x * 2.0;
  Tensor total = sum(doubled);
  mark_step();
  ASSERT_TRUE(backend_->wait_until_held(1, kDeadline));
  ReleaseWatchdog watchdog(*backend_, 5s);
  Future<double> item = total.item_async();
  Future<CpuTensor> values = doubled.to_cpu_async();
  ASSERT_FALSE(watchdog.fired()) << "an async read waited for the held execution";
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(item.ready());
  EXPECT_FALSE(values.ready());
  EXPECT_TRUE(doubled.impl()->data()->pending());
  backend_->release();
  EXPECT_DOUBLE_EQ(item.get(kDeadline), 12.0);
  EXPECT_EQ(values.get(kDeadline).values<float>(), (std::vector<float>{2, 4, 6}));
}

TEST_F(DeviceReads, AnAsyncReadOfPendingIrSyncsItAndWaitsBehindTheHeldStep) {
  Tensor x = ready_tensor({1, 2});
  backend_->hold();
  Tensor first = x + 1.0;
  mark_step();
  ASSERT_TRUE(backend_->wait_until_held(1, kDeadline));
  Tensor second = first * 10.0;  // pending IR: item_async executes it
  ReleaseWatchdog watchdog(*backend_, 5s);
  Future<double> read = sum(second).item_async();
  ASSERT_FALSE(watchdog.fired()) << "item_async waited for the held execution";
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(read.ready());
  backend_->release();
  EXPECT_DOUBLE_EQ(read.get(kDeadline), 50.0);
}

TEST_F(DeviceReads, AReadyTensorIsReadWhileAnotherExecutionIsHeld) {
  Tensor x = ready_tensor({4, 5, 6});
  Tensor scalar = tensor(std::vector<float>{2.5f}, Shape{});
  wait_device_ops();
  backend_->hold();
  Tensor y = x * x;
  mark_step();
  ASSERT_TRUE(backend_->wait_until_held(1, kDeadline));
  const int64_t copies_before = backend_->calls(0).copy_to_host;
  ReleaseWatchdog watchdog(*backend_, 10s);
  const std::vector<float> values = x.to_vector<float>();
  const double item = scalar.item();
  EXPECT_FALSE(watchdog.fired()) << "a blocking read waited for the held execution";
  EXPECT_EQ(values, (std::vector<float>{4, 5, 6}));
  EXPECT_DOUBLE_EQ(item, 2.5);
  Future<CpuTensor> async_values = x.to_cpu_async();
  Future<double> async_item = scalar.item_async();
  EXPECT_TRUE(async_values.wait_for(10s)) << "an async read waited for the held execution";
  EXPECT_TRUE(async_item.wait_for(10s));
  EXPECT_TRUE(y.impl()->data()->pending());  // still held all along
  EXPECT_EQ(async_values.get(kDeadline).values<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_DOUBLE_EQ(async_item.get(kDeadline), 2.5);
  EXPECT_EQ(backend_->calls(0).copy_to_host, copies_before + 4);
  backend_->release();
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{16, 25, 36}));
}

TEST_F(DeviceReads, MemoryIsQueriedWhileAnExecutionIsHeld) {
  Tensor x = ready_tensor(std::vector<float>(1024, 1.0f));
  backend_->hold();
  Tensor y = x + 1.0;
  mark_step();
  ASSERT_TRUE(backend_->wait_until_held(1, kDeadline));
  const int64_t queries_before = backend_->calls(0).memory_info;
  ReleaseWatchdog watchdog(*backend_, 10s);
  const MemoryInfo memory = get_memory_info(Device{0});
  EXPECT_FALSE(watchdog.fired()) << "get_memory_info waited for the held execution";
  EXPECT_GE(memory.bytes_in_use, 1024 * sizeof(float));  // x at least
  EXPECT_GE(memory.peak_bytes, memory.bytes_in_use);
  EXPECT_EQ(backend_->calls(0).memory_info, queries_before + 1);
  backend_->release();
  EXPECT_FLOAT_EQ(y.to_vector<float>()[1023], 2.0f);
}

TEST_F(DeviceReads, ReadingAFailedStepsResultRethrowsItsError) {
  Tensor a = ready_tensor({1, 2, 3, 4, 5, 6});
  Tensor b = ready_tensor({1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1, 1});
  backend_->fail_kernel(Kernel::kMatmul);
  Tensor product = matmul(reshape(a, {2, 3}), reshape(b, {3, 4}));
  mark_step();
  const auto message_of = [](auto read) -> std::string {
    try {
      read();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  const std::string sync_error = message_of([&] { (void)product.to_vector<float>(); });
  EXPECT_NE(sync_error.find("kernel matmul(f32[2,3], f32[3,4]) -> f32[2,4] failed"),
            std::string::npos)
      << sync_error;
  const std::string async_error = message_of([&] { (void)product.to_cpu_async().get(kDeadline); });
  EXPECT_EQ(async_error, sync_error);
  const std::string item_error =
      message_of([&] { (void)sum(product).item_async().get(kDeadline); });
  EXPECT_NE(item_error.find("kernel matmul"), std::string::npos) << item_error;
}

TEST_F(DeviceReads, AStepClosureReadsTheStepsValues) {
  Tensor x = ready_tensor({1, 2, 3});
  std::vector<double> seen;
  for (int step = 1; step <= 3; ++step) {
    x = x * 2.0;
    const Tensor total = sum(x);
    add_step_closure([&seen, total, x] {
      seen.push_back(total.item());
      seen.push_back(x.to_vector<float>()[2]);
    });
    mark_step();
  }
  EXPECT_EQ(seen, (std::vector<double>{12, 6, 24, 12, 48, 24}));
}

TEST_F(DeviceReads, AnAsynchronousStepClosureReadsTheStepsValues) {
  Tensor x = ready_tensor({1, 2, 3});
  std::mutex mutex;
  std::vector<double> seen;
  backend_->hold();
  // Two steps: AXLE_MAX_STEPS_IN_FLIGHT (2) would make a third wait for the held device.
  for (int step = 1; step <= 2; ++step) {
    x = x + 1.0;
    const Tensor total = sum(x);
    add_step_closure(
        [&, total, x] {
          const double value = total.item();
          const double async_value = x.to_cpu_async().get(kDeadline).values<float>()[0];
          std::lock_guard lock(mutex);
          seen.push_back(value);
          seen.push_back(async_value);
        },
        /*run_async=*/true);
    mark_step();
  }
  ASSERT_TRUE(backend_->wait_until_held(1, kDeadline));
  backend_->release();
  wait_device_ops();
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<double>{9, 2, 12, 3}));
}

}  // namespace
}  // namespace axle
