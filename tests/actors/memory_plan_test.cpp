// Memory planning: buffers are released after their last reader and reused, elementwise ops
// write over operands that die with them, and the planned peak (ProgramPeakBytes) is what the
// backend then holds.
#include "axle/actors/compiler/memory_plan.h"
#include "axle/actors/host/lazy_system.h"

#include <gtest/gtest.h>

#include <cmath>

#include "axle/actors/compiler/lowering.h"
#include "axle/axle.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

Tensor input(const Shape& shape) {
  return Tensor(make_intrusive<TensorImpl>(
      DType::kFloat32, make_intrusive<DeviceData>(Device{}, DType::kFloat32, shape)));
}

// The program of `outputs`; the inputs reading `donated` tensors' data are donated.
IntrusivePtr<Executable> compiled(const std::vector<Tensor>& outputs, bool fuse,
                                  const std::vector<Tensor>& donated = {}) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : outputs) roots.push_back(t.impl()->ir());
  PassSet passes;
  if (!fuse) passes.disable(Pass::kFusion);
  StepGraph graph = build_step_graph(roots);
  if (!donated.empty()) {
    graph.donated.assign(graph.inputs.size(), 0);
    for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
      for (const Tensor& t : donated) {
        graph.donated[i] |= graph.nodes[graph.inputs[i]]->data() == t.impl()->data();
      }
    }
  }
  return compile_graph(graph, passes);
}

uint64_t all_slot_bytes(const Executable& program) {
  uint64_t bytes = 0;
  for (const BufferDesc& slot : program.slots) bytes += slot.bytes();
  return bytes;
}

TEST(MemoryPlan, AnElementwiseChainRunsInPlace) {
  const Tensor x = input({1000});
  const Tensor y = relu(tanh(exp(x) * 2.0 + 1.0) - 0.5);
  const IntrusivePtr<Executable> program = compiled({y}, /*fuse=*/false);
  // The input, then one buffer every op after the first writes over.
  // (plus three scalars: the parameters 2 and 0.5 and the constant 1)
  EXPECT_EQ(program->plan.peak_bytes, 4000u * 2 + 3 * 4);
  int in_place = 0;
  for (int32_t s : program->plan.in_place) in_place += s >= 0;
  EXPECT_EQ(in_place, 5);
}

TEST(MemoryPlan, ReleasedBuffersAreReusedBySlotsOfTheSameSize) {
  const Tensor a = input({64, 64});
  // Each matmul's result dies at the next matmul, which cannot run in place: two buffers take
  // turns.
  Tensor h = a;
  for (int i = 0; i < 6; ++i) h = matmul(h, a);
  const IntrusivePtr<Executable> program = compiled({h}, true);
  const uint64_t matrix = 64 * 64 * 4;
  EXPECT_EQ(program->plan.peak_bytes, 3 * matrix);  // a, the operand, the result
  EXPECT_EQ(all_slot_bytes(*program), 7 * matrix);
}

TEST(MemoryPlan, SmallSlotsLeaveLargeReleasedBuffersToLargeOnes) {
  const Tensor a = input({1000});
  // exp's 4000 bytes are released at the sum; the 4-byte copy of the sum does not take them (a
  // buffer more than twice a slot's size stays pooled), so tanh's 4000 bytes do.
  const Tensor s = reshape(sum(exp(a), {0}), {1});
  const Tensor y = tanh(a) * s;
  const IntrusivePtr<Executable> program = compiled({y}, /*fuse=*/false);
  EXPECT_GE(program->plan.peak_bytes, 2 * 4000u);
  EXPECT_LT(program->plan.peak_bytes, 2 * 4000u + 64);
}

// An all-reduce's result its members may share (from kSharedAllReduceBytes) is a new buffer that
// nothing writes over: the op after it takes a buffer of its own. A smaller one is the
// program's like any other.
TEST(MemoryPlan, ASharedAllReduceResultIsNeverWrittenOver) {
  auto in_place_calls = [](const Executable& program) {
    int n = 0;
    for (std::size_t c = 0; c < program.calls.size(); ++c) {
      n += program.plan.in_place[c] >= 0 && program.calls[c].kernel == Kernel::kMul;
    }
    return n;
  };
  const auto shared = static_cast<int64_t>(kSharedAllReduceBytes / sizeof(float));
  const Tensor large = input({shared});
  const IntrusivePtr<Executable> program =
      compiled({all_reduce(ReduceType::kSum, exp(large)) * 2.0}, /*fuse=*/false);
  EXPECT_EQ(in_place_calls(*program), 0);
  // The input, exp's result (released into the pool at the all-reduce), the all-reduce's new
  // result and the product (which takes exp's released buffer); plus the scalar 2.
  EXPECT_EQ(program->plan.peak_bytes, 3 * kSharedAllReduceBytes + 4);

  const Tensor small = input({16});
  const IntrusivePtr<Executable> small_program =
      compiled({all_reduce(ReduceType::kSum, exp(small)) * 2.0}, /*fuse=*/false);
  EXPECT_EQ(in_place_calls(*small_program), 1);
}

TEST(MemoryPlan, InputsAndOutputsAreNeverReleasedOrWrittenOver) {
  const Tensor x = input({256});
  const Tensor kept = exp(x);
  const Tensor y = kept * 3.0;
  const IntrusivePtr<Executable> program = compiled({kept, y}, false);
  for (int32_t s : program->plan.release_slots) {
    EXPECT_EQ(std::ranges::count(program->input_slots, s), 0);
    EXPECT_EQ(std::ranges::count(program->output_slots, s), 0);
  }
  for (int32_t s : program->plan.in_place) EXPECT_LT(s, 0);
}

// A fused kernel ending in a reduction reads many elements of an operand for each element it
// writes, so the plan never gives it an operand's buffer, even one of the output's shape and dtype
// that dies with the call.
TEST(MemoryPlan, FusedReductionsNeverWriteOverTheirOperands) {
  constexpr int64_t kN = 48;
  auto step = [](const Tensor& x) {
    const Tensor m = sum(x, {1}, /*keepdim=*/true);  // [kN, 1]: the keepdim output's shape
    const Tensor v = amax(x, {0});                   // [kN]: the shape of a sum over dim 1
    return std::vector<Tensor>{sum(exp(x - m) * 2.0, {1}, /*keepdim=*/true), sum(abs(x * v), {1})};
  };
  const IntrusivePtr<Executable> program = compiled(step(input({kN, kN})), true);
  int fused = 0;
  for (std::size_t c = 0; c < program->calls.size(); ++c) {
    if (program->calls[c].kernel != Kernel::kFused) continue;
    ++fused;
    EXPECT_LT(program->plan.in_place[c], 0) << "call " << c;
  }
  EXPECT_EQ(fused, 2);
  EXPECT_EQ(program_error(*program), "");

  LazySystem::restart();
  std::vector<float> xs(kN * kN);
  for (int64_t i = 0; i < kN * kN; ++i) xs[i] = static_cast<float>(((i * 37) % 101) / 50.0 - 1.0);
  const std::vector<float> b = step(tensor(xs, {kN, kN}))[1].to_vector<float>();
  for (int64_t r = 0; r < kN; ++r) {
    double want = 0;
    for (int64_t c = 0; c < kN; ++c) {
      double v = -1e30;
      for (int64_t k = 0; k < kN; ++k) v = std::max(v, double(xs[k * kN + c]));
      want += std::abs(xs[r * kN + c] * v);
    }
    EXPECT_NEAR(b[r], want, 1e-5 * want) << "row " << r;
  }
}

// A gather's gradient is a scatter_add into zeros the program makes: the sums are added into that
// buffer, not into a copy of it, and come out as the reference's.
TEST(MemoryPlan, AScatterAddWritesOverTheBaseItMade) {
  auto step = [](const Tensor& x, const Tensor& index) {
    return scatter_add(zeros({4, 6}, DType::kFloat32), 1, index, x);
  };
  const Tensor index = tensor(std::vector<int64_t>{5, 0, 0, 2, 3, 3}, {2, 3});
  const IntrusivePtr<Executable> program = compiled({step(input({2, 3}), index)}, true);
  int scatters = 0;
  for (std::size_t c = 0; c < program->calls.size(); ++c) {
    if (program->calls[c].kernel != Kernel::kScatterAdd) continue;
    ++scatters;
    EXPECT_EQ(program->plan.in_place[c], program->calls[c].inputs[0]);
  }
  EXPECT_EQ(scatters, 1);
  EXPECT_EQ(program_error(*program), "");

  LazySystem::restart();
  const std::vector<float> xs = {1, 2, 3, 4, 5, 6};
  const std::vector<float> got =
      step(tensor(xs, {2, 3}), tensor(std::vector<int64_t>{5, 0, 0, 2, 3, 3}, {2, 3}))
          .to_vector<float>();
  const std::vector<float> want = {5, 0, 0, 0, 0, 1, 0, 0, 4, 11, 0, 0,
                                   0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  0, 0};
  EXPECT_EQ(got, want);
}

// One training step of a two-layer MLP with its backward pass written out, and SGD.
std::vector<Tensor> mlp_step(const Tensor& x, const Tensor& y, const Tensor& w1, const Tensor& w2,
                             double lr) {
  const Tensor h = relu(matmul(x, w1));
  const Tensor o = matmul(h, w2);
  const Tensor diff = o - y;
  const Tensor loss = mean(diff * diff);
  const Tensor d_o = diff * (2.0 / static_cast<double>(o.shape().numel()));
  const Tensor d_w2 = matmul(transpose(h, 0, 1), d_o);
  const Tensor d_h = where(gt(h, 0.0), matmul(d_o, transpose(w2, 0, 1)), zeros_like(h));
  const Tensor d_w1 = matmul(transpose(x, 0, 1), d_h);
  return {loss, w1 - d_w1 * lr, w2 - d_w2 * lr};
}

TEST(MemoryPlan, AnMlpStepPeaksNearItsParametersGradientsAndActivations) {
  constexpr int64_t kBatch = 64, kIn = 32, kHidden = 128, kOut = 10;
  const Tensor x = input({kBatch, kIn});
  const Tensor y = input({kBatch, kOut});
  const Tensor w1 = input({kIn, kHidden});
  const Tensor w2 = input({kHidden, kOut});
  const IntrusivePtr<Executable> program = compiled(mlp_step(x, y, w1, w2, 0.1), true);
  const uint64_t f = 4;
  const uint64_t data = (kBatch * kIn + kBatch * kOut) * f;
  const uint64_t params = (kIn * kHidden + kHidden * kOut) * f;
  const uint64_t grads = params;                     // one per parameter
  const uint64_t activation = kBatch * kHidden * f;  // the largest, [batch, hidden]
  const uint64_t scalars = 64;
  // Hand count: data, parameters and gradients (the new parameters are written over the
  // gradients, which die with the update), plus at most three [batch, hidden] activations at
  // once (h, the pre-activation or d_h, and its masked form).
  const uint64_t bound = data + params + grads + 3 * activation + scalars;
  EXPECT_LE(program->plan.peak_bytes, bound) << "all slots: " << all_slot_bytes(*program);
  EXPECT_LT(program->plan.peak_bytes, all_slot_bytes(*program) * 3 / 4);
}

TEST(MemoryPlan, DonatedInputsAreReleasedAndWrittenOverLikeTheProgramsOwn) {
  const Tensor x = input({1000});
  const Tensor y = relu(tanh(exp(x) * 2.0 + 1.0) - 0.5);
  const IntrusivePtr<Executable> program = compiled({y}, /*fuse=*/false, {x});
  // The first op writes over x, and every later op over that.
  EXPECT_EQ(program->plan.peak_bytes, 4000u + 3 * 4);
  EXPECT_EQ(program->plan.in_place.front(), program->input_slots.front());
  EXPECT_EQ(program->donated_inputs.size(), program->input_slots.size());
  EXPECT_EQ(program_error(*program), "");
}

// The MLP step with SGD momentum: the new parameters and momenta replace the old ones.
TEST(MemoryPlan, AnMlpStepWithDonatedStatePeaksNearStateGradientsAndActivations) {
  constexpr int64_t kBatch = 64, kIn = 32, kHidden = 128, kOut = 10;
  const Tensor x = input({kBatch, kIn});
  const Tensor y = input({kBatch, kOut});
  const Tensor w1 = input({kIn, kHidden});
  const Tensor w2 = input({kHidden, kOut});
  const Tensor m1 = input({kIn, kHidden});
  const Tensor m2 = input({kHidden, kOut});
  // Gradients as mlp_step computes them: its new parameters are w - lr * grad.
  const std::vector<Tensor> sgd = mlp_step(x, y, w1, w2, 1.0);
  const Tensor g1 = w1 - sgd[1], g2 = w2 - sgd[2];
  const Tensor m1_new = m1 * 0.9 + g1, m2_new = m2 * 0.9 + g2;
  const std::vector<Tensor> outputs = {sgd[0], w1 - m1_new * 0.1, w2 - m2_new * 0.1, m1_new,
                                       m2_new};
  const IntrusivePtr<Executable> kept = compiled(outputs, true);
  const IntrusivePtr<Executable> donated = compiled(outputs, true, {w1, w2, m1, m2});
  const uint64_t f = 4;
  const uint64_t data = (kBatch * kIn + kBatch * kOut) * f;
  const uint64_t params = (kIn * kHidden + kHidden * kOut) * f;
  const uint64_t state = params;                     // one momentum per parameter
  const uint64_t grads = params;                     // one per parameter
  const uint64_t activation = kBatch * kHidden * f;  // the largest, [batch, hidden]
  const uint64_t scalars = 64;
  // Hand count: data, parameters, momenta, gradients, and at most three [batch, hidden]
  // activations at once; nothing for the new parameters and momenta, which are written over
  // the old.
  const uint64_t bound = data + params + state + grads + 3 * activation + scalars;
  EXPECT_LE(donated->plan.peak_bytes, bound);
  // Kept, the new state needs buffers beside the old (not all of them live at the peak).
  EXPECT_LE(donated->plan.peak_bytes + params, kept->plan.peak_bytes)
      << "donated " << donated->plan.peak_bytes << ", kept " << kept->plan.peak_bytes;
}

TEST(MemoryPlan, TheStepReportsItsPlannedPeak) {
  LazySystem::restart();
  clear_all();
  const Tensor x = tensor(std::vector<float>(1000, 0.5f), {1000});
  mark_step();
  const Tensor y = relu(tanh(exp(x) * 2.0 + 1.0) - 0.5);
  mark_step();
  EXPECT_NEAR(y.to_vector<float>()[0], std::tanh(std::exp(0.5) * 2.0 + 1.0) - 0.5, 1e-6);
  const std::optional<MetricData> peak = metric_data("ProgramPeakBytes");
  ASSERT_TRUE(peak.has_value());
  EXPECT_EQ(peak->samples.back().second, 4000.0 * 2 + 3 * 4);
}

// The MLP step, executed with its planned reuse and in-place writes, against plain loops.
TEST(MemoryPlan, AnMlpStepComputesTheSameWithItsBuffersReused) {
  LazySystem::restart();
  constexpr int64_t B = 8, I = 5, H = 16, O = 3;
  auto fill = [](int64_t n, double scale) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(scale * (((i * 29) % 17) - 8) / 8.0);
    return v;
  };
  const std::vector<float> xs = fill(B * I, 1.0), ys = fill(B * O, 0.5), w1s = fill(I * H, 0.3),
                           w2s = fill(H * O, 0.2);
  const std::vector<Tensor> out = mlp_step(tensor(xs, {B, I}), tensor(ys, {B, O}),
                                           tensor(w1s, {I, H}), tensor(w2s, {H, O}), 0.1);
  mark_step();
  // Reference in double.
  std::vector<double> h(B * H), o(B * O), d_o(B * O), d_h(B * H), d_w1(I * H, 0), d_w2(H * O, 0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      double acc = 0;
      for (int64_t i = 0; i < I; ++i) acc += double(xs[b * I + i]) * w1s[i * H + j];
      h[b * H + j] = std::max(acc, 0.0);
    }
  }
  double loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t k = 0; k < O; ++k) {
      double acc = 0;
      for (int64_t j = 0; j < H; ++j) acc += h[b * H + j] * w2s[j * O + k];
      const double diff = acc - ys[b * O + k];
      loss += diff * diff / (B * O);
      d_o[b * O + k] = diff * 2.0 / (B * O);
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = 0; j < H; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < O; ++k) acc += d_o[b * O + k] * w2s[j * O + k];
      d_h[b * H + j] = h[b * H + j] > 0 ? acc : 0;
      for (int64_t k = 0; k < O; ++k) d_w2[j * O + k] += h[b * H + j] * d_o[b * O + k];
      for (int64_t i = 0; i < I; ++i) d_w1[i * H + j] += double(xs[b * I + i]) * d_h[b * H + j];
    }
  }
  EXPECT_NEAR(out[0].item(), loss, 1e-5);
  const std::vector<float> w1_new = out[1].to_vector<float>(), w2_new = out[2].to_vector<float>();
  for (int64_t i = 0; i < I * H; ++i) EXPECT_NEAR(w1_new[i], w1s[i] - 0.1 * d_w1[i], 1e-5) << i;
  for (int64_t i = 0; i < H * O; ++i) EXPECT_NEAR(w2_new[i], w2s[i] - 0.1 * d_w2[i], 1e-5) << i;
}

}  // namespace
}  // namespace axle
