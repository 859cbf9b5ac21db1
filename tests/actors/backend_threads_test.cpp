// Every call into the backend for one device comes from that device's actor (actors/
// device_actor.h): over a workload of uploads, steps of several graphs, blocking and async reads,
// memory queries, step closures and an all_reduce among spawn's replicas, each device's calls
// come from one actor's handlers, on the device's own thread unless short steps and uploads run
// on the host's (AXLE_RUN_ON_HOST_BELOW_US), and a read is a copy_to_host call of the device the
// tensor lives on. Runs on 1 and on 3 devices.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "tests/actors/testing_system.h"

namespace axle {
namespace {

using namespace std::chrono_literals;

constexpr auto kDeadline = 30s;

class BackendThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    backend_ = &restart_on_testing_backend(GetParam());
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
  [[nodiscard]] int n() const { return GetParam(); }

  // Uploads, steps of several graphs on every device, reads of every kind, memory queries,
  // step closures (both kinds) and a move between devices, from the main thread.
  void run_single_replica_workload() {
    std::vector<Tensor> xs;
    for (int d = 0; d < n(); ++d) {
      xs.push_back(tensor(std::vector<float>{1.0f + d, 2, 3, 4}, {2, 2}, device(d)));
    }
    std::mutex mutex;
    std::vector<double> closure_values;
    for (int step = 0; step < 3; ++step) {
      for (int d = 0; d < n(); ++d) {
        xs[d] = step % 2 == 0 ? xs[d] * 2.0 + 1.0 : matmul(xs[d], xs[d]) * 0.01;
        const Tensor total = sum(xs[d]);
        add_step_closure([&, total] {
          const double value = total.item();
          std::lock_guard lock(mutex);
          closure_values.push_back(value);
        });
        add_step_closure(
            [&, total] {
              const double value = total.to_cpu_async().get(kDeadline).values<float>()[0];
              std::lock_guard lock(mutex);
              closure_values.push_back(value);
            },
            /*run_async=*/true);
      }
      mark_step();
      for (int d = 0; d < n(); ++d) (void)get_memory_info(device(d));
    }
    for (int d = 0; d < n(); ++d) {
      (void)xs[d].to_vector<float>();
      (void)sum(xs[d]).item_async().get(kDeadline);
      (void)xs[d].to_cpu_async().get(kDeadline);
    }
    Tensor moved = xs[0].to(device(n() - 1));
    (void)(moved + 1.0).to_vector<float>();
    wait_device_ops();
    std::lock_guard lock(mutex);
    EXPECT_EQ(closure_values.size(), static_cast<std::size_t>(3 * n() * 2));
  }

  // An all_reduce among spawn's replicas (one per device), read back by each.
  void run_replicated_workload() {
    std::vector<std::vector<float>> results(static_cast<std::size_t>(n()));
    spawn([&](int r) {
      Tensor x = tensor(std::vector<float>{1.0f * (r + 1), 2.0f}, {2});
      for (int step = 0; step < 2; ++step) {
        x = all_reduce(ReduceType::kSum, x) * 0.5;
        mark_step();
      }
      results[r] = x.to_cpu_async().get(kDeadline).values<float>();
      (void)get_memory_info();
      wait_device_ops();
    });
    // Two rounds of summing over n replicas and halving, from replica r's (r + 1, 2).
    const float first = static_cast<float>(n() * (n() + 1) / 2) * 0.5f;
    const float sum_of_first = first * static_cast<float>(n()) * 0.5f;
    const float second = 2.0f * static_cast<float>(n()) * 0.5f * static_cast<float>(n()) * 0.5f;
    for (int r = 0; r < n(); ++r) {
      EXPECT_EQ(results[r], (std::vector<float>{sum_of_first, second})) << "replica " << r;
    }
  }

  TestingBackend* backend_ = nullptr;
};

INSTANTIATE_TEST_SUITE_P(Devices, BackendThreads, ::testing::Values(1, 3),
                         [](const auto& info) { return std::to_string(info.param) + "devices"; });

TEST_P(BackendThreads, EachDevicesCallsComeFromItsActor) {
  run_single_replica_workload();
  run_replicated_workload();
  for (int d = 0; d < n(); ++d) {
    const TestingBackend::Calls calls = backend_->calls(d);
    EXPECT_EQ(calls.actors, 1) << "device " << d;
    // The workload reached every kind of call on every device.
    EXPECT_GT(calls.allocate, 0) << "device " << d;
    EXPECT_GT(calls.copy_to_device, 0) << "device " << d;
    EXPECT_GT(calls.copy_to_host, 0) << "device " << d;
    EXPECT_GT(calls.start, 0) << "device " << d;
    EXPECT_GT(calls.memory_info, 0) << "device " << d;
    if (n() > 1) {
      EXPECT_GT(calls.collective, 0) << "device " << d;
    }
  }
}

TEST_P(BackendThreads, WithoutShortStepsOnTheHostEachDevicesCallsComeFromOneThread) {
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "0");
  backend_ = &restart_on_testing_backend(GetParam());
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  run_single_replica_workload();
  run_replicated_workload();
  for (int d = 0; d < n(); ++d) {
    EXPECT_EQ(backend_->calls(d).threads, 1) << "device " << d;
    EXPECT_EQ(backend_->calls(d).actors, 1) << "device " << d;
  }
}

// A short step run on its replica's thread waits at its meeting there, also where threads do not
// spin (AXLE_SPIN_US=0, the default with more of a job's processes on a host than cores):
// parking at once would hand the rest of the step to the device's thread. Replica 0 comes to
// each step's meeting first (the others trace theirs 300 us later), waits there, and reduces its
// collective on its own thread.
TEST_P(BackendThreads, ShortStepsWaitAtTheirMeetingsOnTheReplicasThreadsWithoutSpinning) {
  config::set("AXLE_SPIN_US", "0");
  config::set("AXLE_RUN_ON_HOST_BELOW_US", "1000000");
  backend_ = &restart_on_testing_backend(GetParam());
  config::unset("AXLE_SPIN_US");
  config::unset("AXLE_RUN_ON_HOST_BELOW_US");
  constexpr int kSteps = 32;
  std::vector<std::thread::id> replica_threads(static_cast<std::size_t>(n()));
  std::vector<float> firsts(static_cast<std::size_t>(n()));
  spawn([&](int r) {
    replica_threads[r] = std::this_thread::get_id();
    Tensor x = tensor(std::vector<float>{1.0f * static_cast<float>(r + 1), 2.0f}, {2});
    for (int step = 0; step < kSteps; ++step) {
      x = all_reduce(ReduceType::kSum, x, 1.0 / n()) + 1.0;
      if (r > 0) std::this_thread::sleep_for(300us);
      mark_step();
    }
    firsts[r] = x.to_vector<float>().at(0);
  });
  // Each member reduces every stretch of a small all-reduce (one call each); alone, it copies.
  const int64_t calls_per_step = n() == 1 ? 1 : n();
  for (int d = 0; d < n(); ++d) {
    // The mean of 1..n, then one more each step.
    EXPECT_FLOAT_EQ(firsts[d], static_cast<float>(n() + 1) / 2.0f + kSteps) << "replica " << d;
    EXPECT_EQ(backend_->calls(d).collective, kSteps * calls_per_step) << "device " << d;
  }
  if (n() == 1) return;  // one device meets no one
  // The first step runs on the device's thread, which times it; the others, on the replica's,
  // unless the machine is loaded (on a machine running two stress tests beside it, a quarter or
  // more of them; parking at once, none without load and up to 2 of 16 with).
  EXPECT_GE(backend_->collective_calls_from(0, replica_threads[0]), kSteps / 4 * calls_per_step);
}

TEST_P(BackendThreads, AReadIsACopyToHostOfTheTensorsOwnDevice) {
  std::vector<Tensor> xs;
  for (int d = 0; d < n(); ++d) {
    xs.push_back(tensor(std::vector<float>{static_cast<float>(d), 1, 2}, {3}, device(d)) * 3.0);
  }
  mark_step();
  wait_device_ops();
  const auto copies = [&] {
    std::vector<int64_t> out;
    for (int d = 0; d < n(); ++d) out.push_back(backend_->calls(d).copy_to_host);
    return out;
  };
  for (int d = 0; d < n(); ++d) {
    const std::vector<int64_t> before = copies();
    EXPECT_EQ(xs[d].to_vector<float>(), (std::vector<float>{3.0f * static_cast<float>(d), 3, 6}));
    std::vector<int64_t> expected = before;
    ++expected[d];
    EXPECT_EQ(copies(), expected) << "a blocking read of a tensor on device " << d;
    (void)xs[d].to_cpu_async().get(kDeadline);
    (void)sum(xs[d]).item_async().get(kDeadline);  // executes the sum, then reads it
    expected[d] += 2;
    EXPECT_EQ(copies(), expected) << "an async read of a tensor on device " << d;
  }
}

}  // namespace
}  // namespace axle
