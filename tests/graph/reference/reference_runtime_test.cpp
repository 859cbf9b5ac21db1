// graph/reference/reference_runtime.h: graph code runs with axle::graph and the reference
// evaluator alone — this program links no actors, no backends — as far as training a model.
#include "axle/graph/reference/reference_runtime.h"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <stdexcept>
#include <vector>

#include "axle/graph/autograd.h"
#include "axle/graph/nn/layers.h"
#include "axle/graph/nn/loss.h"
#include "axle/graph/nn/module.h"
#include "axle/graph/ops.h"
#include "axle/graph/optim/optimizer.h"
#include "axle/graph/trace_context.h"

namespace axle::reference {
namespace {

// A mark_step on the reference runtime: every pending tensor of this thread, as one graph.
void sync_pending(ReferenceRuntime& runtime) {
  const std::vector<Tensor> pending = TraceContext::current().pending_tensors();
  runtime.sync(pending, SyncReason::kMarkStep, std::source_location::current());
}

TEST(ReferenceRuntime, TrainsASmallMlpToALowerLoss) {
  ReferenceRuntimeScope scope;
  set_rng_state(3);
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 3)});
  // Three separable classes: the label is the input's largest of its first three features.
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> inputs(32 * 4);
  std::vector<int64_t> labels(32);
  for (std::size_t i = 0; i < labels.size(); ++i) {
    for (std::size_t j = 0; j < 4; ++j) inputs[i * 4 + j] = normal(rng);
    labels[i] = std::max_element(&inputs[i * 4], &inputs[i * 4 + 3]) - &inputs[i * 4];
  }
  const Tensor x = tensor(inputs, {32, 4});
  const Tensor y = tensor(labels, {32});
  optim::SGD sgd(model->parameters(), {.lr = 0.5, .momentum = 0.9});
  std::vector<double> losses;
  for (int step = 0; step < 30; ++step) {
    sgd.zero_grad();
    const Tensor loss = nn::cross_entropy(model->forward(x), y);
    loss.backward();
    sgd.step();
    sync_pending(scope.runtime());
    losses.push_back(loss.item());
  }
  EXPECT_LT(losses.back(), 0.5 * losses.front())
      << "first " << losses.front() << ", last " << losses.back();
  // Every step was evaluated here: one graph per step, and one for each value read before it.
  EXPECT_GE(scope.runtime().graphs_evaluated(), 30);
}

TEST(ReferenceRuntime, SyncedValuesAreReadyAndReadsNeverWait) {
  ReferenceRuntimeScope scope;
  const Tensor a = tensor(std::vector<float>{1, 2, 3}, {3});
  const Tensor b = a * 2.0 + 1.0;
  const Future<CpuTensor> later = b.to_cpu_async();  // evaluates b's graph at once
  EXPECT_TRUE(later.ready());
  EXPECT_FALSE(b.impl()->pending_ir());
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{3, 5, 7}));
  EXPECT_DOUBLE_EQ(sum(b).item(), 15.0);
}

TEST(ReferenceRuntime, TensorsMoveBetweenItsDevices) {
  ReferenceRuntimeScope scope(2);
  const Tensor a = tensor(std::vector<float>{1, 2}, {2}, Device{1});
  EXPECT_EQ(a.device(), Device{1});
  const Tensor moved = (a + 1.0).to(Device{0});
  EXPECT_EQ(moved.device(), Device{0});
  EXPECT_EQ(moved.to_vector<float>(), (std::vector<float>{2, 3}));
}

TEST(ReferenceRuntime, ADeviceItDoesNotHaveIsAnErrorNamingTheDevices) {
  ReferenceRuntimeScope scope(2);
  try {
    (void)tensor(std::vector<float>{1}, {1}, Device{2});
    FAIL() << "expected std::out_of_range";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("xla:2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("2 devices"), std::string::npos) << e.what();
  }
}

TEST(ReferenceRuntime, ReadingWithoutARuntimeSaysOneIsNeeded) {
  // No scope: this program has no default runtime (it links no actors).
  const Tensor t = zeros({2});
  try {
    (void)t.cpu();
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a runtime"), std::string::npos) << e.what();
  }
}

TEST(ReferenceRuntime, TheScopeRestoresTheRuntimeBeforeIt) {
  EXPECT_EQ(tensor_runtime(), nullptr);
  {
    ReferenceRuntimeScope outer;
    {
      ReferenceRuntimeScope inner;
      EXPECT_EQ(tensor_runtime(), &inner.runtime());
    }
    EXPECT_EQ(tensor_runtime(), &outer.runtime());
  }
  EXPECT_EQ(tensor_runtime(), nullptr);
}

}  // namespace
}  // namespace axle::reference
