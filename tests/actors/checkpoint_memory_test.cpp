// Activation checkpointing as the compiler sees it (graph/nn/checkpoint.h): the compiled step
// holds the recomputation, in the backward pass after the barrier that waits for the gradient,
// and the memory plan's peak for a deep stack of checkpointed layers is lower than without, by
// about the activations no longer kept. No pass or fusion looks through a barrier.
#include <gtest/gtest.h>

#include <algorithm>

#include "axle/actors/compiler/fusion.h"
#include "axle/actors/compiler/lowering.h"
#include "axle/axle.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

// Device data without a device (compilation never reads it).
Tensor input(const Shape& shape) {
  return Tensor(make_intrusive<TensorImpl>(
      DType::kFloat32, make_intrusive<DeviceData>(Device{}, DType::kFloat32, shape)));
}

IntrusivePtr<Executable> compiled(const std::vector<Tensor>& outputs) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : outputs) roots.push_back(t.impl()->ir());
  return compile_graph(build_step_graph(roots), PassSet());
}

// A wide MLP layer, [batch, width] → [batch, width] through [batch, 4·width].
struct Layer {
  explicit Layer(int64_t width)
      : w1(input({4 * width, width})),
        b1(input({4 * width})),
        w2(input({width, 4 * width})),
        b2(input({width})) {
    for (const Tensor& p : {w1, b1, w2, b2}) p.requires_grad_();
  }
  [[nodiscard]] Tensor operator()(const Tensor& x) const {
    return linear(relu(linear(x, w1, b1)), w2, b2);
  }
  Tensor w1, b1, w2, b2;
};

struct Step {
  IntrusivePtr<Executable> program;
  int32_t loss_slot = -1;
};

// One training step's gradients of `layers` stacked layers, checkpointed or not; the loss is an
// output too, so its call marks where the backward pass begins.
Step training_step(int layers, int64_t batch, int64_t width, bool checkpointed) {
  std::vector<Layer> stack;
  for (int i = 0; i < layers; ++i) stack.emplace_back(width);
  Tensor h = input({batch, width});
  for (const Layer& layer : stack) {
    h = checkpointed ? utils::checkpoint([&layer](const Tensor& x) { return layer(x); }, h)
                     : layer(h);
  }
  const Tensor loss = mean(h * h);
  loss.backward();
  std::vector<Tensor> outputs = {loss};
  for (const Layer& layer : stack) {
    for (const Tensor& p : {layer.w1, layer.b1, layer.w2, layer.b2}) outputs.push_back(p.grad());
  }
  Step step;
  step.program = compiled(outputs);
  step.loss_slot = step.program->output_slots[0];
  return step;
}

// The calls of `kernel`, and how many of them come after the loss's call (in the backward pass).
std::pair<int, int> count_calls(const Step& step, Kernel kernel) {
  const auto& calls = step.program->calls;
  const auto loss_call =
      std::ranges::find_if(calls, [&](const KernelCall& c) { return c.output == step.loss_slot; });
  EXPECT_NE(loss_call, calls.end());
  int all = 0, after = 0;
  for (auto it = calls.begin(); it != calls.end(); ++it) {
    if (it->kernel != kernel) continue;
    ++all;
    after += it > loss_call;
  }
  return {all, after};
}

TEST(CheckpointProgram, HoldsTheRecomputationInTheBackwardPass) {
  constexpr int kLayers = 4;
  const Step plain = training_step(kLayers, 16, 8, false);
  const Step with = training_step(kLayers, 16, 8, true);
  const auto [plain_matmuls, plain_after] = count_calls(plain, Kernel::kMatmul);
  const auto [with_matmuls, with_after] = count_calls(with, Kernel::kMatmul);
  // Forward: two per layer. Backward: two per linear (input and weight), but the first layer's
  // input needs none.
  EXPECT_EQ(plain_matmuls, 2 * kLayers + 4 * kLayers - 1);
  EXPECT_EQ(plain_after, 4 * kLayers - 1);
  // Checkpointed, every layer's forward runs again in the backward pass, and CSE did not merge it
  // with the first run: one more matmul per layer, after the loss. (The first linear's: the
  // second's result is what no gradient reads, only its operand, so DCE drops it.)
  EXPECT_EQ(with_matmuls, plain_matmuls + kLayers);
  EXPECT_EQ(with_after, plain_after + kLayers);
  // A barrier per layer for its input and one for its incoming gradient, all in the backward
  // pass; none in the plain program.
  EXPECT_EQ(count_calls(plain, Kernel::kOptimizationBarrier).first, 0);
  EXPECT_EQ(count_calls(with, Kernel::kOptimizationBarrier),
            std::make_pair(2 * kLayers, 2 * kLayers));
}

TEST(CheckpointProgram, DeepStackPeaksLowerByTheActivationsNotKept) {
  constexpr int kLayers = 8;
  constexpr int64_t kBatch = 256, kWidth = 128;
  const uint64_t plain = training_step(kLayers, kBatch, kWidth, false).program->plan.peak_bytes;
  const uint64_t with = training_step(kLayers, kBatch, kWidth, true).program->plan.peak_bytes;
  // Without checkpoints each layer keeps at least its [batch, 4·width] hidden activation for the
  // backward pass; with them, one layer's at a time (the one being recomputed). Allow two
  // layers' worth for the recomputation and what the barriers copy.
  const uint64_t hidden = kBatch * 4 * kWidth * sizeof(float);
  RecordProperty("peak_bytes_plain", std::to_string(plain));
  RecordProperty("peak_bytes_checkpointed", std::to_string(with));
  EXPECT_LT(with + (kLayers - 2) * hidden, plain) << "plain " << plain << ", checkpointed " << with;
}

TEST(CheckpointProgram, FusionDoesNotReachThroughABarrier) {
  const Tensor a = input({64});
  Tensor e = exp(a) * 2.0;
  optimization_barrier_({e});
  const Tensor y = tanh(e + 1.0);
  std::vector<NodePtr> roots = {y.impl()->ir()};
  const Program program = run_passes(Program::from(build_step_graph(roots)), PassSet());
  const std::vector<int32_t> root_of = plan_fusion(program);
  int32_t barrier = -1;
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (program[id].op == Op::kOptimizationBarrier) barrier = static_cast<int32_t>(id);
  }
  ASSERT_GE(barrier, 0) << program.to_text();
  EXPECT_EQ(root_of[barrier], -1);  // runs on its own
  // The chains on either side fuse, each apart: exp·2 below the barrier, (+1, tanh) above it.
  const int32_t below = program.operands(barrier)[0];
  EXPECT_GE(root_of[below], 0);
  int32_t above = -1;
  for (std::size_t id = 0; id < program.size(); ++id) {
    if (program[id].op == Op::kTanh) above = root_of[id];
  }
  EXPECT_GE(above, 0);
  EXPECT_NE(root_of[below], above);
}

}  // namespace
}  // namespace axle
