// Device faults (the testing backend's failing kernels and allocations): a failed step fails its
// own outputs with an error naming the op and shapes, and nothing else — earlier results stay
// readable, the next step runs — a failed upload fails that tensor only, and among spawn's
// replicas a kernel failing before an all_reduce ends the other replica's wait too. Every wait
// has a deadline, so a regression fails instead of hanging.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <new>
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
using Clock = std::chrono::steady_clock;

constexpr auto kDeadline = 30s;
const char* const kMatmulFailure = "kernel matmul(f32[2,3], f32[3,4]) -> f32[2,4] failed";

// `t`'s values, waiting at most kDeadline.
std::vector<float> values_of(const Tensor& t) {
  return t.to_cpu_async().get(kDeadline).values<float>();
}

// The message of what reading `t` throws ("" when the read succeeds).
std::string read_error(const Tensor& t) {
  try {
    (void)values_of(t);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// a (2x3) @ b (3x4) + 1 by plain loops.
std::vector<float> product_plus_one(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> out(8, 1.0f);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 4; ++j) {
      for (int k = 0; k < 3; ++k) out[i * 4 + j] += a[i * 3 + k] * b[k * 4 + j];
    }
  }
  return out;
}

const std::vector<float> kA = {1, -2, 3, 0.5f, 5, -1};
const std::vector<float> kB = {1, 0, 2, -1, 0, 1, 1, 3, -2, 1, 0, 0.5f};

class DeviceFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = &restart_on_testing_backend();
    clear_all();
  }
  void TearDown() override { backend_->release(); }
  TestingBackend* backend_ = nullptr;
};

TEST_F(DeviceFaults, AFailingKernelFailsThatStepsOutputsOnly) {
  Tensor a = tensor(kA, {2, 3});
  Tensor b = tensor(kB, {3, 4});
  Tensor a_relu = relu(a);  // step 1: fine
  mark_step();
  ASSERT_EQ(values_of(a_relu), (std::vector<float>{1, 0, 3, 0.5f, 5, 0}));
  backend_->fail_kernel(Kernel::kMatmul);
  Tensor product = matmul(a_relu, b) + 1.0;  // step 2: fails at its matmul
  Tensor doubled = a_relu * 2.0;             // in the same step's program
  mark_step();
  const std::string error = read_error(product);
  EXPECT_NE(error.find(kMatmulFailure), std::string::npos) << error;
  EXPECT_NE(read_error(doubled).find(kMatmulFailure), std::string::npos);
  // What earlier steps and uploads produced stays readable.
  EXPECT_EQ(values_of(a_relu), (std::vector<float>{1, 0, 3, 0.5f, 5, 0}));
  EXPECT_EQ(values_of(a), kA);
  EXPECT_EQ(values_of(b), kB);
}

TEST_F(DeviceFaults, TheNextStepOfTheSameGraphRunsNormally) {
  Tensor a = tensor(kA, {2, 3});
  Tensor b = tensor(kB, {3, 4});
  wait_device_ops();
  backend_->fail_kernel(Kernel::kMatmul);
  Tensor failed = matmul(a, b) + 1.0;
  mark_step();
  EXPECT_NE(read_error(failed).find(kMatmulFailure), std::string::npos);
  Tensor next = matmul(a, b) + 1.0;
  mark_step();
  EXPECT_EQ(values_of(next), product_plus_one(kA, kB));
  EXPECT_EQ(counter_value("UncachedCompile").value_or(0), 1);
  EXPECT_EQ(counter_value("CachedCompile").value_or(0), 1);  // the same program, from the cache
}

TEST_F(DeviceFaults, SeveralFailuresInARowEachFailTheirStep) {
  Tensor b = tensor(kB, {3, 4});
  backend_->fail_kernel(Kernel::kMatmul, 3);
  std::vector<Tensor> results;
  std::vector<std::vector<float>> inputs;
  for (int step = 0; step < 5; ++step) {
    std::vector<float> a = kA;
    for (float& v : a) v += static_cast<float>(step);
    inputs.push_back(a);
    results.push_back(matmul(tensor(a, {2, 3}), b) + 1.0);
    mark_step();
  }
  for (int step = 0; step < 5; ++step) {
    if (step < 3) {
      const std::string error = read_error(results[step]);
      EXPECT_NE(error.find(kMatmulFailure), std::string::npos) << "step " << step << ": " << error;
    } else {
      EXPECT_EQ(values_of(results[step]), product_plus_one(inputs[step], kB)) << "step " << step;
    }
  }
}

TEST_F(DeviceFaults, AResultOfAFailedStepFailsTheStepsThatReadIt) {
  Tensor a = tensor(kA, {2, 3});
  Tensor b = tensor(kB, {3, 4});
  backend_->fail_kernel(Kernel::kMatmul);
  Tensor product = matmul(a, b);
  mark_step();
  Tensor later = product * 2.0;  // the error flows on to it
  mark_step();
  Tensor unrelated = a * 2.0;  // the next step, which reads no failed value, runs
  mark_step();
  EXPECT_NE(read_error(later).find(kMatmulFailure), std::string::npos);
  EXPECT_EQ(values_of(unrelated), (std::vector<float>{2, -4, 6, 1, 10, -2}));
}

TEST_F(DeviceFaults, AFailedUploadFailsReadsOfThatTensorOnly) {
  Tensor before = tensor(std::vector<float>{1, 2}, {2});
  wait_device_ops();
  backend_->fail_allocations(1);
  Tensor lost = tensor(std::vector<float>{3, 4, 5}, {3});  // its transfer cannot allocate
  Tensor after = tensor(std::vector<float>{6}, {1});
  EXPECT_THROW((void)lost.to_cpu_async().get(kDeadline), std::bad_alloc);
  EXPECT_THROW((void)lost.to_vector<float>(), std::bad_alloc);
  EXPECT_EQ(values_of(before), (std::vector<float>{1, 2}));
  EXPECT_EQ(values_of(after), (std::vector<float>{6}));
  // A step reading it fails; one that does not runs.
  Tensor from_lost = lost + 1.0;
  mark_step();
  Tensor from_others = before + after;
  mark_step();
  EXPECT_THROW((void)from_lost.to_cpu_async().get(kDeadline), std::bad_alloc);
  EXPECT_EQ(values_of(from_others), (std::vector<float>{7, 8}));
}

// --- replicas ---------------------------------------------------------------------------------

constexpr double kCollectiveTimeoutSeconds = 3;

class ReplicaFaults : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = &restart_on_testing_backend(2);
    config::set("AXLE_COLLECTIVE_TIMEOUT", std::to_string(kCollectiveTimeoutSeconds));
  }
  void TearDown() override {
    config::unset("AXLE_COLLECTIVE_TIMEOUT");
    backend_->release();
  }

  // Replica r's a at `step`: different on every replica and step, so a sum that mixes steps
  // shows.
  static std::vector<float> a_of(int replica, int step) {
    std::vector<float> a = kA;
    for (float& v : a) v = v * static_cast<float>(replica + 1) + static_cast<float>(10 * step);
    return a;
  }
  // The all_reduce of matmul(a, kB) + 1 over both replicas at `step`.
  static std::vector<float> expected_sum(int step) {
    std::vector<float> out(8, 0.0f);
    for (int r = 0; r < 2; ++r) {
      const std::vector<float> part = product_plus_one(a_of(r, step), kB);
      for (std::size_t i = 0; i < out.size(); ++i) out[i] += part[i];
    }
    return out;
  }
  // One step of the graph every replica runs: all_reduce(matmul(a, b) + 1).
  static Tensor reduced_step(int replica, int step) {
    Tensor y = all_reduce(ReduceType::kSum,
                          matmul(tensor(a_of(replica, step), {2, 3}), tensor(kB, {3, 4})) + 1.0);
    mark_step();
    return y;
  }
  // Runs step 0 on both replicas (so their graphs are known to agree), then arms one matmul
  // failure: whichever replica's device starts step 1 first fails there, before its all_reduce.
  void run_then_arm_failure(int replica) {
    EXPECT_EQ(values_of(reduced_step(replica, 0)), expected_sum(0));
    (void)rendezvous("step 0 done");
    if (replica == 0) backend_->fail_kernel(Kernel::kMatmul);
    (void)rendezvous("failure armed");
  }

  TestingBackend* backend_ = nullptr;
};

TEST_F(ReplicaFaults, AKernelFailingBeforeAnAllReduceFailsTheOtherReplicaPromptly) {
  struct Outcome {
    std::string error;
    double seconds = 0;
  };
  std::vector<Outcome> outcomes(2);
  std::atomic<int> reads_done{0};
  spawn([&](int r) {
    run_then_arm_failure(r);
    const auto start = Clock::now();
    Tensor y = reduced_step(r, 1);
    outcomes[r].error = read_error(y);
    outcomes[r].seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // Neither replica leaves before both have read, so only the failure itself can end the
    // other's wait (not the failed replica returning from its function).
    ++reads_done;
    const auto give_up = Clock::now() + kDeadline;
    while (reads_done < 2 && Clock::now() < give_up) std::this_thread::sleep_for(1ms);
  });
  // The failed replica's error is the kernel's own; the other's names the all_reduce, then quotes
  // it.
  const int failed = outcomes[0].error.rfind("kernel matmul", 0) == 0 ? 0 : 1;
  const int other = 1 - failed;
  EXPECT_NE(outcomes[failed].error.find(kMatmulFailure), std::string::npos)
      << outcomes[failed].error;
  EXPECT_NE(outcomes[other].error, "") << "replica " << other << " read a value";
  EXPECT_NE(outcomes[other].error.find("all_reduce"), std::string::npos) << outcomes[other].error;
  EXPECT_LT(outcomes[other].seconds, kCollectiveTimeoutSeconds / 2)
      << "replica " << other << " failed only after " << outcomes[other].seconds
      << " s (AXLE_COLLECTIVE_TIMEOUT is " << kCollectiveTimeoutSeconds
      << " s): " << outcomes[other].error;
}

TEST_F(ReplicaFaults, AfterAReplicaFailedBeforeAnAllReduceNoReplicaReadsAWrongSum) {
  // Each replica's result of each step: the right sum or an error, never another value.
  const auto text = [](const std::vector<float>& values) {
    std::string out;
    for (float v : values) out += std::to_string(v) + " ";
    return out;
  };
  std::vector<std::vector<std::string>> wrong(2);
  spawn([&](int r) {
    run_then_arm_failure(r);
    Tensor y1 = reduced_step(r, 1);
    const std::string error = read_error(y1);
    if (error.find("kernel matmul") != std::string::npos) {
      // The failed replica goes on to its next step at once (its loop does not read every
      // step's value, or caught the error).
      Tensor y2 = reduced_step(r, 2);
      try {
        const std::vector<float> sum = values_of(y2);
        if (sum != expected_sum(2)) wrong[r].push_back("step 2 read a wrong sum: " + text(sum));
      } catch (const std::exception&) {
        // an error is a right answer here
      }
    } else if (error.empty() && values_of(y1) != expected_sum(1)) {
      wrong[r].push_back("step 1 read a wrong sum: " + text(values_of(y1)));
    }
  });
  EXPECT_TRUE(wrong[0].empty()) << "replica 0: " << wrong[0].front();
  EXPECT_TRUE(wrong[1].empty()) << "replica 1: " << wrong[1].front();
}

}  // namespace
}  // namespace axle
