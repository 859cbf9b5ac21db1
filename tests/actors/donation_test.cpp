// Buffer donation end to end: a mark_step overwrites the inputs nothing else will read
// (parameters and optimizer state a training step replaces), and only those.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

class Donation : public ::testing::Test {
 protected:
  void SetUp() override {
    config::unset("XLA_ENABLE_PARAM_ALIASING");
    LazySystem::restart();
    clear_all();
  }
  void TearDown() override { config::unset("XLA_ENABLE_PARAM_ALIASING"); }
};

int64_t count(const char* name) { return counter_value(name).value_or(0); }

double last_planned_peak() {
  const std::optional<MetricData> peak = metric_data("ProgramPeakBytes");
  return peak ? peak->samples.back().second : -1;
}

std::vector<float> ramp(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i % 13) - 1.0f;
  return v;
}

constexpr int64_t kSize = 256;
constexpr int kSteps = 5;

// SGD with momentum on w, with gradient w * x: the same float operations as the step traces.
struct Reference {
  std::vector<float> w, m;
  void step(const std::vector<float>& x) {
    for (std::size_t i = 0; i < w.size(); ++i) {
      const float g = w[i] * x[i];
      m[i] = m[i] * 0.9f + g;
      w[i] = w[i] - m[i] * 0.1f;
    }
  }
};

void momentum_step(Tensor& w, Tensor& m, const Tensor& x) {
  const Tensor g = w * x;
  m = m * 0.9 + g;
  w = w - m * 0.1;
  mark_step();
}

TEST_F(Donation, ATrainingLoopUpdatesItsStateInPlaceAndCompilesOnce) {
  const std::vector<float> xs = ramp(kSize, 0.01f);
  const Tensor x = tensor(xs, {kSize});
  Tensor w = tensor(ramp(kSize, 0.2f), {kSize});
  Tensor m = zeros({kSize});
  mark_step();
  Reference ref{ramp(kSize, 0.2f), std::vector<float>(kSize, 0.0f)};
  wait_device_ops();  // the compiler counts on its own thread
  const int64_t compiles = count("UncachedCompile");
  for (int s = 0; s < kSteps; ++s) {
    momentum_step(w, m, x);
    ref.step(xs);
  }
  wait_device_ops();
  // w and m each step; x is held by this test, so it is never donated.
  EXPECT_EQ(count("DonatedInputs"), 2 * kSteps);
  EXPECT_EQ(count("UncachedCompile") - compiles, 1);
  EXPECT_EQ(count("DonatedInputCopies"), 0);
  const std::vector<float> w_values = w.to_vector<float>(), m_values = m.to_vector<float>();
  for (int64_t i = 0; i < kSize; ++i) {
    EXPECT_FLOAT_EQ(w_values[i], ref.w[i]) << i;
    EXPECT_FLOAT_EQ(m_values[i], ref.m[i]) << i;
  }
  EXPECT_EQ(x.to_vector<float>(), xs);
}

TEST_F(Donation, TheStateIsWrittenOverInsteadOfBesideItself) {
  auto planned_peak = [] {
    clear_all();
    const Tensor x = tensor(ramp(kSize, 0.01f), {kSize});
    Tensor w = tensor(ramp(kSize, 0.2f), {kSize});
    Tensor m = tensor(std::vector<float>(kSize, 0.0f), {kSize});
    momentum_step(w, m, x);
    wait_device_ops();  // the compiler reports the peak before the device runs the program
    return last_planned_peak();
  };
  const double donating = planned_peak();
  config::set("XLA_ENABLE_PARAM_ALIASING", "0");
  LazySystem::restart();
  const double keeping = planned_peak();
  EXPECT_EQ(count("DonatedInputs"), 0);
  // Without donation the new w and m need buffers of their own.
  const double state_bytes = 2 * kSize * 4;
  EXPECT_LE(donating + state_bytes, keeping) << donating << " vs " << keeping;
}

TEST_F(Donation, TurnedOffTheLoopComputesTheSame) {
  config::set("XLA_ENABLE_PARAM_ALIASING", "0");
  LazySystem::restart();
  const std::vector<float> xs = ramp(kSize, 0.01f);
  const Tensor x = tensor(xs, {kSize});
  Tensor w = tensor(ramp(kSize, 0.2f), {kSize});
  Tensor m = tensor(std::vector<float>(kSize, 0.0f), {kSize});
  Reference ref{ramp(kSize, 0.2f), std::vector<float>(kSize, 0.0f)};
  for (int s = 0; s < kSteps; ++s) {
    momentum_step(w, m, x);
    ref.step(xs);
  }
  EXPECT_EQ(count("DonatedInputs"), 0);
  const std::vector<float> w_values = w.to_vector<float>();
  for (int64_t i = 0; i < kSize; ++i) EXPECT_FLOAT_EQ(w_values[i], ref.w[i]) << i;
}

TEST_F(Donation, ATensorStillHoldingTheOldValueKeepsIt) {
  const std::vector<float> values = ramp(kSize, 0.5f);
  Tensor w = tensor(values, {kSize});
  const Tensor before = w;  // the same data: the step must not overwrite it
  w = w * 2.0;
  mark_step();
  EXPECT_EQ(count("DonatedInputs"), 0);
  EXPECT_EQ(before.to_vector<float>(), values);
  const std::vector<float> doubled = w.to_vector<float>();
  for (int64_t i = 0; i < kSize; ++i) EXPECT_EQ(doubled[i], values[i] * 2.0f);
}

TEST_F(Donation, AValueReadNeverDonatesWhatPendingTensorsStillRead) {
  const std::vector<float> values = ramp(kSize, 0.5f);
  Tensor x = tensor(values, {kSize});
  const Tensor y = x + 1.0;
  const Tensor z = x * 3.0;
  x = Tensor();  // only the pending graphs of y and z read its data now
  const std::vector<float> y_values = y.to_vector<float>();  // executes y's graph alone
  const std::vector<float> z_values = z.to_vector<float>();
  for (int64_t i = 0; i < kSize; ++i) {
    EXPECT_EQ(y_values[i], values[i] + 1.0f);
    EXPECT_EQ(z_values[i], values[i] * 3.0f);
  }
  EXPECT_EQ(count("DonatedInputs"), 0);
}

TEST_F(Donation, DataNoTensorHoldsIsDonatedWhateverItsRole) {
  // A batch the loop dropped before mark_step is as free as a parameter being replaced.
  const std::vector<float> values = ramp(kSize, 0.5f);
  Tensor batch = tensor(values, {kSize});
  const Tensor total = sum(exp(batch) * 2.0);
  batch = Tensor();
  mark_step();
  EXPECT_EQ(count("DonatedInputs"), 1);
  double expected = 0;
  for (float v : values) expected += 2.0 * std::exp(static_cast<double>(v));
  EXPECT_NEAR(total.item(), expected, 1e-4 * expected);
}

TEST_F(Donation, DataReadTwiceInOneStepIsDonatedOnce) {
  Tensor w = tensor(ramp(kSize, 0.5f), {kSize});
  Tensor v = tensor(ramp(kSize, 0.25f), {kSize});
  w = w + v * w;  // w's data is read by two ops of the step, through one leaf
  v = Tensor();
  mark_step();
  EXPECT_EQ(count("DonatedInputs"), 2);
  const std::vector<float> a = ramp(kSize, 0.5f), b = ramp(kSize, 0.25f);
  const std::vector<float> got = w.to_vector<float>();
  for (int64_t i = 0; i < kSize; ++i) EXPECT_EQ(got[i], a[i] + b[i] * a[i]) << i;
}

}  // namespace
}  // namespace axle
