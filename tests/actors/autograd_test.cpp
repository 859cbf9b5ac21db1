// Autograd end to end on the CPU backend: backward() traces without executing, gradients
// accumulate across backward calls, detach() and NoGradGuard stop gradients, a 100,000-op chain
// differentiates to the right value, and a few SGD steps of a small MLP lower its loss while
// compiling the training step once.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "axle/axle.h"
#include "tests/graph/grad_check.h"

namespace axle::testing {
namespace {

using AutogradEndToEnd = Autograd;

int64_t count(const char* name) { return counter_value(name).value_or(0); }
std::size_t executions() {
  const auto data = metric_data("ExecuteTime");
  return data ? static_cast<std::size_t>(data->total_samples) : 0;
}

Tensor values(std::vector<double> v, const Shape& shape) { return tensor(v, shape); }

TEST_F(AutogradEndToEnd, GradientCheckCatchesAWrongGradient) {
  // x * detach(x) has backward gradient x but finite differences 2x: the helper must notice.
  std::mt19937 rng(1);
  const GradArg x = random_arg(rng, {3});
  EXPECT_FALSE(
      gradients_match([](const std::vector<Tensor>& t) { return t[0] * t[0].detach(); }, {x}));
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& t) { return t[0] * t[0]; }, {x}));
}

TEST_F(AutogradEndToEnd, BackwardTracesWithoutExecuting) {
  const Tensor x = values({1, 2, 3}, {3});
  x.requires_grad_();
  const Tensor loss = sum(exp(x) * x);
  mark_step();
  wait_device_ops();
  const int64_t compiles = count("UncachedCompile") + count("CachedCompile");
  const int64_t steps = count("MarkStep");
  const std::size_t executed = executions();
  loss.backward();
  EXPECT_EQ(count("UncachedCompile") + count("CachedCompile"), compiles);
  EXPECT_EQ(count("MarkStep"), steps);
  EXPECT_EQ(executions(), executed);
  ASSERT_TRUE(x.grad().impl()->pending_ir());
  const std::vector<double> grad = x.grad().to_vector<double>();  // now it runs
  EXPECT_GT(executions(), executed);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(grad[i], std::exp(i + 1.0) * (i + 2.0), 1e-12);
}

TEST_F(AutogradEndToEnd, GradientsAccumulateOverTwoBackwardCalls) {
  const Tensor x = values({1, -2}, {2});
  x.requires_grad_();
  sum(x * x).backward();
  mark_step();  // the first gradient is data by now; the second adds to it
  sum(x * 3.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, -1}));
}

TEST_F(AutogradEndToEnd, ResettingTheGradientStartsAccumulationAfresh) {
  const Tensor x = values({1, 2}, {2});
  x.requires_grad_();
  sum(x * 2.0).backward();
  x.set_grad({});
  sum(x * 5.0).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{5, 5}));
}

TEST_F(AutogradEndToEnd, DetachStopsGradients) {
  const Tensor x = values({1, 2}, {2});
  x.requires_grad_();
  const Tensor y = x * x;
  sum(y.detach() * x).backward();  // d/dx (c * x) with c = x^2 held constant
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 4}));
}

TEST_F(AutogradEndToEnd, NoGradGuardStopsGradients) {
  const Tensor x = values({1, 2}, {2});
  x.requires_grad_();
  Tensor c;
  {
    NoGradGuard no_grad;
    c = x * 10.0;
  }
  sum(c * x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{10, 20}));
}

TEST_F(AutogradEndToEnd, ExplicitGradientOfANonScalar) {
  const Tensor x = values({1, 2, 3}, {3});
  x.requires_grad_();
  (x * x).backward(values({1, 10, 100}, {3}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{2, 40, 600}));
}

TEST_F(AutogradEndToEnd, ATensorUsedTwiceGetsBothGradients) {
  const Tensor x = values({3}, {});
  x.requires_grad_();
  const Tensor y = x * 2.0;
  (y * y + y).backward();  // 4x^2 + 2x
  EXPECT_DOUBLE_EQ(x.grad().item(), 8 * 3 + 2);
}

TEST_F(AutogradEndToEnd, BackwardThroughA100kOpChainGivesTheProductOfItsFactors) {
  const Tensor x = values({1, 2}, {2});
  x.requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100'000; ++i) y = (i % 2 == 0) ? y * 1.00001 : y + 0.5;
  sum(y).backward();
  const double want = std::pow(1.00001, 50'000);
  for (double g : x.grad().to_vector<double>()) EXPECT_NEAR(g, want, 1e-9 * want);
}

TEST_F(AutogradEndToEnd, SgdStepsLowerTheLossOfASmallMlp) {
  std::mt19937 rng(7);
  std::normal_distribution<double> normal(0, 0.5);
  auto random = [&](const Shape& shape) {
    std::vector<double> v(static_cast<std::size_t>(shape.numel()));
    for (double& e : v) e = normal(rng);
    return tensor(v, shape);
  };
  const Tensor w1 = random({8, 4}), b1 = random({8}), w2 = random({3, 8}), b2 = random({3});
  for (const Tensor& p : {w1, b1, w2, b2}) p.requires_grad_();
  const Tensor inputs = random({16, 4});
  const Tensor labels = cast(tensor(std::vector<double>(16, 1), {16, 1}), DType::kInt64);
  auto loss_of = [&] {
    const Tensor logits = linear(relu(linear(inputs, w1, b1)), w2, b2);
    return neg(mean(gather(log_softmax(logits, 1), 1, labels)));
  };
  std::vector<double> losses;
  int64_t compiles_after_two_steps = 0;
  for (int step = 0; step < 5; ++step) {
    if (step == 2) compiles_after_two_steps = count("UncachedCompile");
    const Tensor loss = loss_of();
    loss.backward();
    {
      NoGradGuard no_grad;
      for (const Tensor& p : {w1, b1, w2, b2}) {
        p.impl()->set_ir(sub(p, mul(p.grad(), 0.5)).impl()->value_node({}));
        p.set_grad({});
      }
    }
    mark_step();
    losses.push_back(loss.item());
  }
  for (std::size_t i = 1; i < losses.size(); ++i) EXPECT_LT(losses[i], losses[i - 1]) << i;
  // backward() traces the same graph every step, so later steps reuse the compiled program.
  EXPECT_EQ(count("UncachedCompile"), compiles_after_two_steps);
}

}  // namespace
}  // namespace axle::testing
