// Step closures (add_step_closure): they run after their step's device work, in the order they
// were added; asynchronous ones never hold up the host, and failures name the line that added
// the closure.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replica_host.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/engine/metrics.h"
#include "tests/actors/testing_system.h"

namespace axle {
namespace {

class StepClosures : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart();
    clear_all();
  }
};

TEST_F(StepClosures, RunAtMarkStepWithTheStepsValuesInTheOrderAdded) {
  Tensor x = tensor(std::vector<float>{1, 2, 3}, {3});
  std::vector<double> seen;
  for (int step = 1; step <= 3; ++step) {
    x = x * 2.0;
    const Tensor total = sum(x);
    add_step_closure([&seen, total] { seen.push_back(total.item()); });
    add_step_closure([&seen, step] { seen.push_back(-step); });
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(2 * (step - 1)));  // not before mark_step
    mark_step();
  }
  EXPECT_EQ(seen, (std::vector<double>{12, -1, 24, -2, 48, -3}));
}

TEST_F(StepClosures, AsynchronousOnesRunAfterTheDeviceWithoutHoldingUpTheHost) {
  TestingBackend& backend = restart_on_testing_backend();
  Tensor x = tensor(std::vector<float>{1, 2, 3}, {3});
  mark_step();
  wait_device_ops();
  std::mutex mutex;
  std::vector<double> seen;
  backend.hold();
  // Two steps: AXLE_MAX_STEPS_IN_FLIGHT (2) would make a third wait for the held device.
  for (int step = 0; step < 2; ++step) {
    x = x + 1.0;
    const Tensor total = sum(x);
    add_step_closure(
        [&, total] {
          const double value = total.item();
          std::lock_guard lock(mutex);
          seen.push_back(value);
        },
        /*run_async=*/true);
    mark_step();  // returns although the device is held
  }
  ASSERT_TRUE(backend.wait_until_held(1));
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(seen.empty());
  }
  backend.release();
  wait_device_ops();
  std::lock_guard lock(mutex);
  EXPECT_EQ(seen, (std::vector<double>{9, 12}));
}

// A closure that falls behind its steps holds only what tells it that its step is done: the
// steps' other results (here 1 MiB each, dropped by the loop) go as soon as nothing else reads
// them.
TEST_F(StepClosures, AClosureFallingBehindHoldsNoneOfItsStepsResults) {
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  Tensor x = tensor(std::vector<float>{0}, {1});
  mark_step();
  wait_device_ops();
  const uint64_t before = get_memory_info(device(0)).bytes_in_use;
  constexpr int kSteps = 10;
  constexpr int64_t kResultBytes = 256 * 1024 * 4;
  std::atomic<int> ran{0};
  for (int step = 0; step < kSteps; ++step) {
    x = x + 1.0;
    Tensor big = full({256, 1024}, static_cast<double>(step)) + x;  // a result of the step
    add_step_closure(
        [gate, &ran] {
          gate.wait();
          ++ran;
        },
        /*run_async=*/true);
    mark_step();
  }
  EXPECT_EQ(x.item(), static_cast<double>(kSteps));  // the device is done with every step
  EXPECT_EQ(ran, 0);                                 // while the closures still wait
  EXPECT_LT(get_memory_info(device(0)).bytes_in_use, before + 2 * kResultBytes);
  go.set_value();
  wait_device_ops();
  EXPECT_EQ(ran, kSteps);
}

// AXLE_MAX_STEPS_IN_FLIGHT: a host runs at most that many steps ahead of its device; the next
// mark_step waits for the oldest, and the wait is the step breakdown's "device" part.
TEST_F(StepClosures, MarkStepWaitsWhileTooManyStepsAreInFlight) {
  config::set("AXLE_MAX_STEPS_IN_FLIGHT", "2");
  TestingBackend& backend = restart_on_testing_backend();
  config::unset("AXLE_MAX_STEPS_IN_FLIGHT");
  backend.hold();
  std::atomic<int> returned{0};
  double device_wait_ns = 0, last = 0;
  std::thread host([&] {
    Tensor x = tensor(std::vector<float>{0}, {1});
    for (int step = 0; step < 4; ++step) {
      x = x + 1.0;
      mark_step();
      ++returned;
    }
    last = x.item();
    device_wait_ns = static_cast<double>(
        ReplicaHost::current().account()->totals().ns[StepBreakdown::kDeviceWait]);
  });
  ASSERT_TRUE(backend.wait_until_held(1));
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (returned < 2 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  // Time for the third mark_step to return, were it not waiting for the held first step.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(returned, 2);
  backend.release();
  host.join();
  EXPECT_EQ(returned, 4);
  EXPECT_EQ(last, 4.0);
  EXPECT_GT(device_wait_ns, 0.0);
}

TEST_F(StepClosures, AMaxStepsInFlightBelowZeroIsAConfigError) {
  config::set("AXLE_MAX_STEPS_IN_FLIGHT", "-1");
  try {
    LazySystem::restart();
    ADD_FAILURE() << "AXLE_MAX_STEPS_IN_FLIGHT=-1 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("AXLE_MAX_STEPS_IN_FLIGHT='-1'"), std::string::npos)
        << e.what();
  }
  config::unset("AXLE_MAX_STEPS_IN_FLIGHT");
}

// XLA_MAX_ASYNC_QUEUE (torch_xla's bound on its asynchronous closure queue): a host whose
// asynchronous closures have fallen that many behind waits at its next mark_step with closures
// until the runner catches up, so the steps they hold cannot pile up.
TEST_F(StepClosures, MarkStepWaitsWhileTooManyAsynchronousClosuresArePending) {
  config::set("XLA_MAX_ASYNC_QUEUE", "3");
  LazySystem::restart();
  config::unset("XLA_MAX_ASYNC_QUEUE");
  const int64_t waits_before = counter("AsyncClosureQueueWait").value();
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  std::atomic<int> returned{0}, ran{0};
  std::thread host([&] {
    Tensor x = tensor(std::vector<float>{0}, {1});
    for (int step = 0; step < 5; ++step) {
      x = x + 1.0;
      add_step_closure(
          [gate, &ran] {
            gate.wait();
            ++ran;
          },
          /*run_async=*/true);
      mark_step();
      ++returned;
    }
    wait_device_ops();
  });
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (returned < 3 && std::chrono::steady_clock::now() < give_up) std::this_thread::yield();
  // Time for the fourth mark_step to return, were it not waiting for the runner.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(returned, 3);
  EXPECT_EQ(ran, 0);
  go.set_value();
  host.join();
  EXPECT_EQ(returned, 5);
  EXPECT_EQ(ran, 5);
  EXPECT_GE(counter("AsyncClosureQueueWait").value(), waits_before + 1);
}

TEST_F(StepClosures, AMaxAsyncQueueBelowZeroIsAConfigError) {
  config::set("XLA_MAX_ASYNC_QUEUE", "-1");
  try {
    LazySystem::restart();
    ADD_FAILURE() << "XLA_MAX_ASYNC_QUEUE=-1 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("XLA_MAX_ASYNC_QUEUE='-1'"), std::string::npos)
        << e.what();
  }
  config::unset("XLA_MAX_ASYNC_QUEUE");
}

TEST_F(StepClosures, AsynchronousOnesSeeTheAddingReplicasDeviceAsTheDefault) {
  LazySystem::restart(LazySystemOptions{.cpu_devices = 3});
  std::vector<int> seen(3, -1);  // one element per replica, each written by its own closure
  spawn([&](int replica) {
    Tensor x = tensor(std::vector<float>{1}, {1}) + 1.0;
    add_step_closure(
        [&seen, replica] { seen[static_cast<std::size_t>(replica)] = Device{}.ordinal; },
        /*run_async=*/true);
    mark_step();
    wait_device_ops();
  });
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
}

// A replica's wait_device_ops drains its own closures only: another replica's closure may wait
// for a step that needs this replica at a collective, which it reaches only after the wait.
TEST_F(StepClosures, AReplicaWaitingForItsDeviceDoesNotWaitForAnotherReplicasLaterStep) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "30");  // the deadlock fails the test instead of hanging
  LazySystem::restart(LazySystemOptions{.cpu_devices = 2});
  std::atomic<bool> ahead_queued{false};
  std::vector<double> sums(2, 0);  // each replica's last all-reduced sum, from its own closure
  spawn([&](int replica) {
    Tensor x = tensor(std::vector<float>{static_cast<float>(replica + 1)}, {1});
    // Steps 1 and 2 compile (the replicas compare their graphs then); 3 and 4 run cached.
    for (int step = 1; step <= 4; ++step) {
      x = all_reduce(ReduceType::kSum, x + 1.0);
      add_step_closure([&sums, replica, x] { sums[static_cast<std::size_t>(replica)] = x.item(); },
                       /*run_async=*/true);
      mark_step();
      if (replica == 1 && step == 4) ahead_queued = true;
      if (replica == 0 && step == 3) {
        // Replica 1 has queued its fourth step's closure, which waits for this replica's fourth
        // all-reduce: waiting for this device must not wait for it.
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!ahead_queued && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::yield();
        }
        wait_device_ops({xla_device()});
        EXPECT_EQ(sums[0], 26.0);  // 5, 12, 26: twice the last sum plus one
      }
    }
    wait_device_ops({xla_device()});
  });
  config::unset("AXLE_COLLECTIVE_TIMEOUT");
  EXPECT_TRUE(ahead_queued);
  EXPECT_EQ(sums, (std::vector<double>{54.0, 54.0}));
}

TEST_F(StepClosures, RunEvenWhenTheStepHasNothingToExecute) {
  bool ran = false, ran_async = false;
  add_step_closure([&] { ran = true; });
  add_step_closure([&] { ran_async = true; }, true);
  mark_step();
  EXPECT_TRUE(ran);
  wait_device_ops();
  EXPECT_TRUE(ran_async);
}

TEST_F(StepClosures, AFailureNamesTheLineThatAddedTheClosure) {
  const int line = __LINE__ + 1;
  add_step_closure([] { throw std::runtime_error("loss is NaN"); });
  try {
    mark_step();
    FAIL() << "mark_step did not rethrow";
  } catch (const StepClosureError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("step_closure_test.cpp:" + std::to_string(line)), std::string::npos)
        << what;
    EXPECT_NE(what.find("loss is NaN"), std::string::npos) << what;
  }
}

TEST_F(StepClosures, AnAsynchronousFailureIsRethrownByTheNextMarkStepOrWait) {
  add_step_closure([] { throw std::runtime_error("logger gone"); }, true);
  std::atomic<bool> later_ran{false};
  add_step_closure([&] { later_ran = true; }, true);
  // The runner may run the closures before this mark_step returns or after: the failure
  // surfaces at whichever of the two calls comes after it.
  try {
    mark_step();
    wait_device_ops();
    FAIL() << "neither mark_step nor wait_device_ops rethrew";
  } catch (const StepClosureError& e) {
    EXPECT_NE(std::string(e.what()).find("logger gone"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(wait_device_ops());  // reported once
  EXPECT_TRUE(later_ran);              // one failure does not stop the closures after it
}

// A StepScope's end marks the step: a closure failing there leaves the scope as a
// StepClosureError the caller catches; while another exception leaves the scope, the step is
// still marked and that exception is the one the caller sees (two would end the program).
TEST_F(StepClosures, AStepScopeLetsAFailureOfItsStepOutAndNeverASecondOne) {
  Tensor x = tensor(std::vector<float>{1}, Shape{1});
  Tensor y;
  bool caught = false;
  try {
    const StepScope step;
    y = x * 2.0;
    add_step_closure([] { throw std::runtime_error("closure gave up"); });
  } catch (const StepClosureError& e) {
    caught = true;
    EXPECT_NE(std::string(e.what()).find("closure gave up"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(caught);
  EXPECT_FALSE(y.impl()->pending_ir());
  EXPECT_FLOAT_EQ(y.item<float>(), 2.0f);

  Tensor z;
  try {
    const StepScope step;
    z = x * 3.0;
    add_step_closure([] { throw std::runtime_error("closure gave up too"); });
    throw std::logic_error("the loop's own error");
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "the loop's own error");
  }
  EXPECT_FALSE(z.impl()->pending_ir());  // the step was marked all the same
  EXPECT_FLOAT_EQ(z.item<float>(), 3.0f);
}

// RateTracker's clock inside a step closure is its step's completion on the device, so closures
// held back and then run in a burst time the steps as the device ran them, not as they ran.
TEST(RateTrackerClock, LateClosuresSeeTheTimesTheirStepsCompleted) {
  LazySystem::restart();
  std::promise<void> go;
  std::shared_future<void> gate = go.get_future().share();
  Tensor x = tensor(std::vector<float>{0}, {1});
  mark_step();
  wait_device_ops();
  constexpr int kSteps = 6;
  std::vector<RateTracker::Clock::time_point> seen(kSteps), ran_at(kSteps);
  const auto before = RateTracker::Clock::now();
  for (int step = 0; step < kSteps; ++step) {
    x = x + 1.0;
    add_step_closure(
        [&, gate, step] {
          if (step == 0) gate.wait();
          seen[step] = RateTracker::now();
          ran_at[step] = RateTracker::Clock::now();
        },
        /*run_async=*/true);
    mark_step();
  }
  EXPECT_EQ(x.item(), static_cast<double>(kSteps));  // every step is done
  const auto steps_done = RateTracker::Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  go.set_value();
  wait_device_ops();
  for (int step = 0; step < kSteps; ++step) {
    SCOPED_TRACE(step);
    EXPECT_GT(seen[step], before);
    EXPECT_LE(seen[step], steps_done);    // the step's completion...
    EXPECT_GT(ran_at[step], steps_done);  // ...though its closure ran after the wait
    if (step > 0) {
      EXPECT_GE(seen[step], seen[step - 1]);  // in the device's order
    }
  }
  const auto outside = RateTracker::now();  // outside closures: the steady clock
  EXPECT_GT(outside, steps_done);
  EXPECT_LE(outside, RateTracker::Clock::now());
}

TEST(RateTrackerClock, ASynchronousClosureSeesItsStepsCompletion) {
  LazySystem::restart();
  Tensor x = tensor(std::vector<float>{1}, {1});
  x = x * 3.0;
  const auto before = RateTracker::Clock::now();
  RateTracker::Clock::time_point seen{}, ran_at{};
  add_step_closure([&] {
    seen = RateTracker::now();
    ran_at = RateTracker::Clock::now();
  });
  mark_step();
  EXPECT_GT(seen, before);
  EXPECT_LE(seen, ran_at);
}

// torch_xla's RateTracker: the count since the last rate() over the time since it, smoothed
// 0.6 new / 0.4 old; the whole count over the time since construction.
TEST(RateTrackerRates, CountPerSecondSmoothedWithThePreviousRate) {
  const auto t0 = RateTracker::Clock::now();  // before the tracker's own start
  RateTracker tracker;
  EXPECT_EQ(tracker.global_rate(), 0.0);
  tracker.add(100);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const double first = tracker.rate();
  const double first_seconds =
      std::chrono::duration<double>(RateTracker::Clock::now() - t0).count();
  EXPECT_LE(first, 100 / 0.040);
  EXPECT_GE(first, 100 / first_seconds);
  tracker.add(300);
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const double second = tracker.rate();
  // 0.6 * (300 / >= 40 ms) + 0.4 * first
  EXPECT_LE(second, 0.6 * 300 / 0.040 + 0.4 * first);
  EXPECT_GT(second, 0.4 * first);
  EXPECT_LE(tracker.global_rate(), 400 / 0.080);
  EXPECT_GT(tracker.global_rate(), 0.0);
  RateTracker unsmoothed(/*smooth_factor=*/0.0);
  unsmoothed.add(50);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_LE(unsmoothed.rate(), 50 / 0.020);
}

TEST(RateTrackerRates, ASecondRateInTheSameStepClosureRepeatsTheFirst) {
  LazySystem::restart();
  RateTracker tracker;
  Tensor x = tensor(std::vector<float>{1}, {1});
  double first = -1, second = -2;
  for (int step = 0; step < 3; ++step) {
    x = x + 1.0;
    add_step_closure([&] {
      tracker.add(10);
      first = tracker.rate();
      second = tracker.rate();
    });
    mark_step();
    EXPECT_GT(first, 0);
    EXPECT_EQ(first, second);
  }
}

}  // namespace
}  // namespace axle
