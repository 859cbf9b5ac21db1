// Elementwise fusion end to end: which chains fuse (FusedKernels), and that fused steps compute
// the same bits as unfused ones.
#include <gtest/gtest.h>

#include <bit>
#include <functional>

#include "axle.h"
#include "engine/config.h"

namespace axle {
namespace {

std::vector<float> values(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 101) / 101.0f;
  return v;
}

struct Run {
  std::vector<std::vector<float>> outputs;
  int64_t fused_kernels = 0;
};

// Runs `step` in a fresh system with fusion on or off.
Run run(const std::function<std::vector<Tensor>()>& step, bool fuse) {
  if (fuse) {
    config::unset("AXLE_DISABLE_PASSES");
  } else {
    config::set("AXLE_DISABLE_PASSES", "fusion");
  }
  LazySystem::restart();
  clear_all();
  const std::vector<Tensor> outputs = step();
  mark_step();
  Run result;
  for (const Tensor& t : outputs) result.outputs.push_back(t.to_vector<float>());
  result.fused_kernels = counter_value("FusedKernels").value_or(0);
  config::unset("AXLE_DISABLE_PASSES");
  return result;
}

// The number of fused kernels `step` compiles to; checks fusing changes no bit.
int64_t fused_kernels(const std::function<std::vector<Tensor>()>& step) {
  const Run plain = run(step, false);
  const Run fused = run(step, true);
  EXPECT_EQ(plain.fused_kernels, 0);
  EXPECT_EQ(plain.outputs.size(), fused.outputs.size());
  for (std::size_t k = 0; k < plain.outputs.size(); ++k) {
    EXPECT_EQ(plain.outputs[k].size(), fused.outputs[k].size());
    for (std::size_t i = 0; i < plain.outputs[k].size(); ++i) {
      if (std::bit_cast<uint32_t>(plain.outputs[k][i]) !=
          std::bit_cast<uint32_t>(fused.outputs[k][i])) {
        ADD_FAILURE() << "output " << k << " element " << i << ": unfused " << plain.outputs[k][i]
                      << ", fused " << fused.outputs[k][i];
        break;
      }
    }
  }
  return fused.fused_kernels;
}

TEST(Fusion, AChainOfEightElementwiseOpsIsOneKernel) {
  EXPECT_EQ(
      fused_kernels([] {
        const Tensor x = tensor(values(3000, 2.0f), {3000});
        return std::vector<Tensor>{sigmoid(tanh(exp(x * 0.5 + 0.25) - 1.5) * 3.0) / (abs(x) + 1.0)};
      }),
      1);
}

TEST(Fusion, BroadcastingInsideTheChainStaysFused) {
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = tensor(values(40 * 50, 1.0f), {40, 50});
              const Tensor row = tensor(values(50, 3.0f), {50});
              const Tensor column = tensor(values(40, -1.0f), {40, 1});
              return std::vector<Tensor>{gelu(relu((x + row) * column - 0.5) + abs(row))};
            }),
            1);
}

TEST(Fusion, ValuesReadTwiceOrReturnedAreStored) {
  // t is read by two ops and u is an output: each is its own kernel's result, and the ops
  // around them fuse into what is left.
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = tensor(values(500, 1.0f), {500});
              const Tensor t = exp(x);
              const Tensor u = t * 2.0;
              const Tensor v = (u + 1.0) * t - x;
              return std::vector<Tensor>{u, v};
            }),
            1);
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = tensor(values(500, 1.0f), {500});
              const Tensor u = x * 2.0;
              return std::vector<Tensor>{u, u + 1.0};
            }),
            0);
}

TEST(Fusion, ApproximatedFunctionsOfASmallerShapeAreNotFused) {
  // exp or sqrt of the row would run at different vector positions inside the [40, 50] chain
  // (50 is not a multiple of the vector width: its last two run in the scalar tail alone).
  for (const auto& f : {exp, sqrt, tanh}) {
    EXPECT_EQ(fused_kernels([&] {
                const Tensor x = tensor(values(40 * 50, 1.0f), {40, 50});
                const Tensor row = tensor(values(50, 3.0f), {50});
                return std::vector<Tensor>{f(row, Loc::current()) + x};
              }),
              0);
  }
}

TEST(Fusion, OtherDtypesAndNonElementwiseOpsAreLeftAlone) {
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = tensor(values(64, 1.0f), {8, 8});
              const Tensor m = matmul(x, x);
              const Tensor s = sum(m, {1});
              const Tensor i = cast(m, DType::kI32) + 1.0;
              return std::vector<Tensor>{s, cast(i, DType::kF32)};
            }),
            0);
}

}  // namespace
}  // namespace axle
