// Tests graph/autograd.h and Tensor's autograd members without devices: what ops record, what
// backward() traces (shapes, dtypes, accumulation), the errors, and graphs 100,000 ops deep.
// Values are checked end to end in tests/graph/autograd/.
#include <gtest/gtest.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "axle/graph/autograd.h"
#include "axle/graph/autograd/function.h"
#include "axle/graph/ops.h"

namespace axle {
namespace {

Tensor leaf(const Shape& shape, DType dtype = DType::kFloat32) {
  Tensor t = full(shape, 0.5, dtype);
  t.requires_grad_();
  return t;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Autograd, TensorsDoNotRequireGradByDefault) {
  const Tensor t = zeros({2, 3});
  EXPECT_FALSE(t.requires_grad());
  EXPECT_TRUE(t.is_leaf());
  EXPECT_FALSE(t.grad().defined());
  EXPECT_EQ(t.impl()->autograd(), nullptr);
}

TEST(Autograd, OpsWithoutGradOperandsKeepNoAutogradState) {
  const Tensor y = exp(zeros({2}) + 1.0);
  EXPECT_EQ(y.impl()->autograd(), nullptr);
}

TEST(Autograd, RequiresGradMarksALeaf) {
  const Tensor x = leaf({2, 3});
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(x.grad().defined());
  x.requires_grad_(false);
  EXPECT_FALSE(x.requires_grad());
}

TEST(Autograd, OpsOnATensorRequiringGradRecordTheirBackward) {
  const Tensor x = leaf({2, 3});
  const Tensor y = x * 2.0;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(autograd::grad_fn_name(y), "MulBackward");
  EXPECT_EQ(autograd::grad_fn_name(sum(y)), "SumBackward");
  EXPECT_EQ(autograd::grad_fn_name(x), "");
}

TEST(Autograd, IntegerAndBoolResultsDoNotRequireGrad) {
  const Tensor x = leaf({2, 3});
  EXPECT_FALSE(gt(x, 0.0).requires_grad());
  EXPECT_FALSE(argmax(x, 1).requires_grad());
  EXPECT_FALSE(cast(x, DType::kInt64).requires_grad());
  EXPECT_TRUE(cast(x, DType::kFloat64).requires_grad());
}

TEST(Autograd, RequiresGradOnAnIntegerTensorIsAnError) {
  const Tensor i = zeros({3}, DType::kInt64);
  const std::string message = error_of([&] { i.requires_grad_(); });
  EXPECT_NE(message.find("only floating-point tensors can require gradients"), std::string::npos)
      << message;
  EXPECT_NE(message.find("s64[3]"), std::string::npos) << message;
  EXPECT_NE(message.find("autograd_test.cpp"), std::string::npos) << message;
}

TEST(Autograd, NonLeavesCannotStopRequiringGrad) {
  const Tensor y = leaf({2}) + 1.0;
  const std::string message = error_of([&] { y.requires_grad_(false); });
  EXPECT_NE(message.find("detach()"), std::string::npos) << message;
}

TEST(Autograd, NoGradGuardStopsRecordingForItsScope) {
  const Tensor x = leaf({2});
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradMode::is_enabled());
    EXPECT_FALSE((x * 2.0).requires_grad());
    {
      AutoGradMode enabled(true);
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, GradModeIsPerThread) {
  NoGradGuard no_grad;
  bool other_thread_enabled = false;
  std::thread([&] { other_thread_enabled = GradMode::is_enabled(); }).join();
  EXPECT_TRUE(other_thread_enabled);
}

TEST(Autograd, DetachCutsTheGraph) {
  const Tensor x = leaf({2});
  const Tensor y = x * 3.0;
  const Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  EXPECT_EQ(d.impl()->ir(), y.impl()->ir());  // the same value, nothing traced
  EXPECT_FALSE((d * 2.0).requires_grad());
}

TEST(Autograd, BackwardGivesLeavesPendingGradientsOfTheirShapeAndDtype) {
  const Tensor a = leaf({3, 1});
  const Tensor b = leaf({4}, DType::kFloat64);
  const Tensor y = sum(a * b);  // [3, 4] in f64
  y.backward();
  ASSERT_TRUE(a.grad().defined());
  EXPECT_EQ(a.grad().shape(), (Shape{3, 1}));
  EXPECT_EQ(a.grad().dtype(), DType::kFloat32);
  EXPECT_EQ(b.grad().shape(), (Shape{4}));
  EXPECT_EQ(b.grad().dtype(), DType::kFloat64);
  EXPECT_TRUE(a.grad().impl()->pending_ir());
  EXPECT_FALSE(a.grad().requires_grad());
}

TEST(Autograd, NonLeavesKeepNoGrad) {
  const Tensor x = leaf({2});
  const Tensor y = x * 2.0;
  sum(y).backward();
  EXPECT_FALSE(y.grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  const Tensor x = leaf({2});
  sum(x * 2.0).backward();
  const Tensor first = x.grad();
  sum(x * 3.0).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_NE(x.grad().impl(), first.impl());
  EXPECT_EQ(x.grad().impl()->ir()->op(), Op::kAdd);  // first + second, traced
}

TEST(Autograd, SetGradReplacesOrResetsTheGradient) {
  const Tensor x = leaf({2});
  sum(x).backward();
  x.set_grad({});
  EXPECT_FALSE(x.grad().defined());
  x.set_grad(zeros({2}));
  EXPECT_TRUE(x.grad().defined());
  const std::string message = error_of([&] { x.set_grad(zeros({3})); });
  EXPECT_NE(message.find("f32[3]"), std::string::npos) << message;
}

TEST(Autograd, BackwardOfANonScalarNeedsAGradient) {
  const Tensor y = leaf({2, 3}) * 2.0;
  const std::string message = error_of([&] { y.backward(); });
  EXPECT_NE(message.find("f32[2,3] needs an explicit gradient"), std::string::npos) << message;
  y.backward(ones_like(y));  // with one, it goes through
}

TEST(Autograd, BackwardOfATensorNotRequiringGradIsAnError) {
  const Tensor y = sum(zeros({2}));
  EXPECT_NE(error_of([&] { y.backward(); }).find("does not require grad"), std::string::npos);
}

TEST(Autograd, BackwardRejectsAGradientOfAnotherShape) {
  const Tensor y = leaf({2, 3}) * 2.0;
  const std::string message = error_of([&] { y.backward(ones({3, 2})); });
  EXPECT_NE(message.find("f32[3,2]"), std::string::npos) << message;
}

TEST(Autograd, ASecondBackwardNeedsTheFirstToRetainTheGraph) {
  const Tensor x = leaf({2});
  const Tensor y = sum(exp(x));
  y.backward({}, /*retain_graph=*/true);
  y.backward();
  const std::string message = error_of([&] { y.backward(); });
  EXPECT_NE(message.find("retain_graph"), std::string::npos) << message;
}

TEST(Autograd, BackwardOfALeafAddsTheGradientToIt) {
  const Tensor x = leaf({2});
  const Tensor g = ones({2});
  x.backward(g);
  ASSERT_TRUE(x.grad().defined());
  EXPECT_NE(x.grad().impl(), g.impl());  // its own handle on the same value
}

TEST(Autograd, GradientsStopAtTensorsNotRequiringGrad) {
  const Tensor x = leaf({2});
  const Tensor c = zeros({2});
  sum(x * c + c).backward();
  EXPECT_TRUE(x.grad().defined());
  EXPECT_FALSE(c.grad().defined());
}

TEST(Autograd, BackwardThroughA100kOpChain) {
  const Tensor x = leaf({4});
  Tensor y = x;
  for (int i = 0; i < 100'000; ++i) y = (i % 2 == 0) ? y * 1.0001 : y + 0.5;
  sum(y).backward();
  EXPECT_TRUE(x.grad().defined());
}

TEST(Autograd, DroppingA100kOpGraphDoesNotRecurse) {
  const Tensor x = leaf({4});
  Tensor y = x;
  for (int i = 0; i < 100'000; ++i) y = exp(y);
  y = Tensor();  // frees the chain of GradFns and saved tensors
  EXPECT_TRUE(x.requires_grad());
}

}  // namespace
}  // namespace axle

namespace axle {
namespace {

// A post-accumulate-grad hook sees the leaf's final gradient of the backward: a leaf used in two
// places runs its hook once, after both gradients are in, and nothing is added after it ran.
TEST(AutogradHooks, APostAccumulateGradHookRunsOnceWithTheFinalGradient) {
  const Tensor w = leaf({3});
  const Tensor x = leaf({3});
  std::vector<const TensorImpl*> seen;
  (void)autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& t) {
    EXPECT_EQ(t.impl(), w.impl());
    seen.push_back(t.grad().impl());
  });
  sum(exp(w * x) + w).backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], w.grad().impl());
  sum(w).backward();  // a second backward runs it again, on the accumulated gradient
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], w.grad().impl());
}

// Hooks run in backward order (the leaf nearest the loss first), each as soon as its gradient
// is complete; queued callbacks run after every hook, in the order queued.
TEST(AutogradHooks, HooksRunInBackwardOrderAndCallbacksAfterThem) {
  const Tensor first = leaf({2});
  const Tensor second = leaf({2});
  const Tensor third = leaf({2});
  std::vector<std::string> events;
  const auto hook = [&](std::string name) {
    return [&events, name](const Tensor&) {
      if (events.empty()) {
        autograd::queue_callback([&events] {
          events.push_back("callback");
          autograd::queue_callback([&events] { events.push_back("queued by a callback"); });
        });
      }
      events.push_back(name);
    };
  };
  (void)autograd::register_post_accumulate_grad_hook(first, hook("first"));
  (void)autograd::register_post_accumulate_grad_hook(second, hook("second"));
  (void)autograd::register_post_accumulate_grad_hook(third, hook("third"));
  sum(tanh(tanh(first * 2.0) * second) * third).backward();
  EXPECT_EQ(events, (std::vector<std::string>{"third", "second", "first", "callback",
                                              "queued by a callback"}));
}

TEST(AutogradHooks, ARemovedHookDoesNotRun) {
  const Tensor w = leaf({2});
  int runs = 0;
  const std::size_t handle =
      autograd::register_post_accumulate_grad_hook(w, [&](const Tensor&) { ++runs; });
  sum(w * 3.0).backward();
  autograd::remove_post_accumulate_grad_hook(w, handle);
  sum(w * 3.0).backward();
  EXPECT_EQ(runs, 1);
}

TEST(AutogradHooks, HooksGoOnLeavesThatRequireGradOnly) {
  const Tensor w = leaf({2});
  const std::string non_leaf =
      error_of([&] { (void)autograd::register_post_accumulate_grad_hook(w * 2.0, {}); });
  EXPECT_NE(non_leaf.find("register_post_accumulate_grad_hook"), std::string::npos) << non_leaf;
  EXPECT_NE(non_leaf.find("MulBackward"), std::string::npos) << non_leaf;
  const std::string no_grad =
      error_of([&] { (void)autograd::register_post_accumulate_grad_hook(zeros({2}), {}); });
  EXPECT_NE(no_grad.find("requires_grad_()"), std::string::npos) << no_grad;
}

TEST(AutogradHooks, QueueCallbackOutsideBackwardIsAnError) {
  const std::string what = error_of([] { autograd::queue_callback([] {}); });
  EXPECT_NE(what.find("no backward() is running"), std::string::npos) << what;
  EXPECT_NE(what.find("autograd_test.cpp"), std::string::npos) << what;
}

// A hook that throws ends backward() with its exception.
TEST(AutogradHooks, AThrowingHookEndsBackward) {
  const Tensor w = leaf({2});
  (void)autograd::register_post_accumulate_grad_hook(
      w, [](const Tensor&) { throw std::runtime_error("hook failed"); });
  EXPECT_EQ(error_of([&] { sum(w).backward(); }), "hook failed");
}

}  // namespace
}  // namespace axle
