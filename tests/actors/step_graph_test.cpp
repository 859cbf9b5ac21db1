// Step graphs: collected from the creation log or by walking down from the roots, they hold
// exactly what the roots depend on, hash alike for alike programs, and execute to the same values.
#include "axle/graph/step_graph.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/graph/trace_context.h"

#include <gtest/gtest.h>

#include <thread>

#include "axle/axle.h"

namespace axle {
namespace {

class StepGraphs : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart();
    TraceContext::current().creation_log().clear();
  }
};

StepGraph graph_of(const std::vector<Tensor>& tensors) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : tensors) roots.push_back(t.impl()->ir());
  return build_step_graph(roots);
}

// Built on a thread with an empty log: the walk from the roots alone.
StepGraph graph_of_elsewhere(const std::vector<Tensor>& tensors) {
  StepGraph graph;
  std::thread([&] { graph = graph_of(tensors); }).join();
  return graph;
}

// x -> a chain of ops whose creation order is also their operand order.
Tensor small_program(const Tensor& x) { return sum(exp(x * 2.0) + x, {0}); }

TEST_F(StepGraphs, FromTheLogEqualsTheWalkFromTheRoots) {
  const Tensor x = zeros({3, 2});
  const Tensor y = small_program(x);
  const StepGraph logged = graph_of({y});
  const StepGraph walked = graph_of_elsewhere({y});
  EXPECT_EQ(logged.hash, walked.hash);
  EXPECT_EQ(logged.nodes, walked.nodes);
  EXPECT_EQ(logged.operand_ids, walked.operand_ids);
  EXPECT_EQ(logged.inputs, walked.inputs);
  EXPECT_EQ(logged.outputs, walked.outputs);
}

TEST_F(StepGraphs, LeaveOutWhatTheRootsDoNotNeed) {
  const Tensor x = zeros({3, 2});
  const StepGraph clean = graph_of({small_program(x)});
  TraceContext::current().creation_log().clear();

  const Tensor dropped_before = tanh(x) * 5.0;
  const Tensor y = small_program(x);
  { const Tensor dropped_after = log(y + 1.0); }
  const Tensor unrelated = zeros({7}) - 1.0;  // pending, but not a root here
  const StepGraph with_garbage = graph_of({y});
  EXPECT_EQ(with_garbage.nodes.size(), clean.nodes.size());
  EXPECT_EQ(with_garbage.hash, clean.hash);
  EXPECT_EQ(with_garbage.operand_ids, clean.operand_ids);
  EXPECT_EQ(with_garbage.inputs.size(), clean.inputs.size());
  for (int32_t out : with_garbage.outputs) EXPECT_EQ(with_garbage.nodes[out], y.impl()->ir().get());
}

TEST_F(StepGraphs, HashDiffersWhenOperandsAreSharedDifferently) {
  const Tensor x = zeros({4});
  const Tensor shared = exp(x);
  const StepGraph once = graph_of({shared + shared});
  TraceContext::current().creation_log().clear();
  const StepGraph twice = graph_of({exp(x) + exp(x)});
  EXPECT_NE(once.hash, twice.hash);
  EXPECT_EQ(once.nodes.size() + 1, twice.nodes.size());
}

TEST_F(StepGraphs, HashDependsOnWhichNodesAreOutputs) {
  const Tensor x = zeros({4});
  const Tensor a = exp(x);
  const Tensor b = a * 3.0;
  const StepGraph one = graph_of({b});
  const StepGraph both = graph_of({a, b});
  EXPECT_EQ(one.nodes.size(), both.nodes.size());
  EXPECT_NE(one.hash, both.hash);
}

TEST_F(StepGraphs, PendingNodesFromAnEarlierSyncStillExecute) {
  const Tensor x = tensor(std::vector<float>{1, 2}, {2});
  const Tensor b = x * 2.0;
  const Tensor c = b + 1.0;
  EXPECT_DOUBLE_EQ(sum(b).item(), 6.0);  // syncs only b's graph; c stays pending, out of the log
  const Tensor d = c * 3.0;
  mark_step();
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{9, 15}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{3, 5}));
}

TEST_F(StepGraphs, NodesOfAnotherThreadJoinThisThreadsStep) {
  const Tensor x = tensor(std::vector<float>{1, 2, 3}, {3});
  Tensor from_elsewhere;
  std::thread([&] { from_elsewhere = (x + 1.0) * 2.0; }).join();
  const Tensor mixed = from_elsewhere - x;  // logged here, its operand is not
  const Tensor also = exp(x * 0.0) + mixed;
  mark_step();
  EXPECT_EQ(also.to_vector<float>(), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(from_elsewhere.to_vector<float>(), (std::vector<float>{4, 6, 8}));
}

TEST_F(StepGraphs, InterleavedTracingComputesTheSameValues) {
  const Tensor x = tensor(std::vector<float>{0.5f, -1.0f}, {2});
  // Operands created in the opposite order to how the user consumes them.
  const Tensor late = x * 3.0;
  const Tensor early = x + 2.0;
  const Tensor result = early * late - late;
  mark_step();
  EXPECT_EQ(result.to_vector<float>(),
            (std::vector<float>{2.5f * 1.5f - 1.5f, 1.0f * -3.0f + 3.0f}));
}

TEST_F(StepGraphs, GarbageIsFreedAtTheNextStep) {
  auto data = make_intrusive<DeviceData>(Device{}, DType::kFloat32, Shape{4});
  { const Tensor dropped = exp(Tensor(make_intrusive<TensorImpl>(DType::kFloat32, data))); }
  const Tensor kept = zeros({2}) + 1.0;
  EXPECT_GT(data->use_count(), 1);
  mark_step();
  EXPECT_EQ(data->use_count(), 1);
}

}  // namespace
}  // namespace axle
