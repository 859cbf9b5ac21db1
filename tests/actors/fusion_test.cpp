// Elementwise fusion end to end: which chains fuse (FusedKernels), with the reductions that end
// them, and that fused kernels compute the same bits as unfused ones.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <functional>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

std::vector<float> values(std::size_t n, float scale) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>((i * 37) % 101) / 101.0f;
  return v;
}

struct Run {
  std::vector<std::vector<double>> outputs;  // f32 converts exactly
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
  for (const Tensor& t : outputs) result.outputs.push_back(t.to_vector<double>());
  result.fused_kernels = counter_value("FusedKernels").value_or(0);
  config::unset("AXLE_DISABLE_PASSES");
  return result;
}

// The number of fused kernels `step` compiles to; checks fusing changes no bit.
int64_t fused_kernels(const std::function<std::vector<Tensor>()>& step) {
  const Run plain = run(step, false);
  const struct Run fused = run(step, true);
  EXPECT_EQ(plain.fused_kernels, 0);
  EXPECT_EQ(plain.outputs.size(), fused.outputs.size());
  for (std::size_t k = 0; k < plain.outputs.size(); ++k) {
    EXPECT_EQ(plain.outputs[k].size(), fused.outputs[k].size());
    for (std::size_t i = 0; i < plain.outputs[k].size(); ++i) {
      if (std::bit_cast<uint64_t>(plain.outputs[k][i]) !=
          std::bit_cast<uint64_t>(fused.outputs[k][i])) {
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

TEST(Fusion, GeluGradientIsOneKernel) {
  // d/dx gelu(x) = Phi(x) + x phi(x) with Phi from erf: no comparison or select to break the
  // chain, so the derivative and its product by the incoming gradient are one kernel.
  EXPECT_EQ(fused_kernels([] {
              Tensor x = tensor(values(3000, 3.0f), {3000});  // 0 included
              x.requires_grad_();
              const Tensor w = tensor(values(3000, -1.0f), {3000});
              sum(gelu(x) * w).backward();
              return std::vector<Tensor>{x.grad()};
            }),
            1);
}

TEST(Fusion, Bf16ChainsFuseWithTheUnfusedBitsAndTheirReductionsStayApart) {
  EXPECT_EQ(
      fused_kernels([] {
        const Tensor x = cast(tensor(values(3000, 2.0f), {3000}), DType::kBFloat16);
        return std::vector<Tensor>{gelu(tanh(exp(x * 0.5 + 0.25) - 1.5) * 3.0) / (abs(x) + 1.0)};
      }),
      1);
  // The sum is its own kernel; the chain before it still fuses.
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = cast(tensor(values(3000, 2.0f), {3000}), DType::kBFloat16);
              return std::vector<Tensor>{sum(exp(x * 0.5) + 1.0)};
            }),
            1);
}

// A cast to bf16 ends the f32 chain it reads: the chain runs in f32 and is rounded as it is
// stored (as autocast casts a layer norm's affine output for its product), over several blocks
// and threads; a chain whose f32 result is also returned keeps its cast apart.
TEST(Fusion, ACastToBf16EndsTheF32ChainItReads) {
  auto chain = [](const Tensor& x) {
    const Tensor gamma = tensor(values(100, 1.5f), {100});
    const Tensor beta = tensor(values(100, -0.5f), {100});
    return gelu(x * gamma + beta) * 3.0 + 1e-3;
  };
  EXPECT_EQ(fused_kernels([&] {
              const Tensor x = tensor(values(400 * 100, 2.0f), {400, 100});
              return std::vector<Tensor>{cast(chain(x), DType::kBFloat16)};
            }),
            1);
  EXPECT_EQ(fused_kernels([&] {
              const Tensor x = tensor(values(400 * 100, 2.0f), {400, 100});
              const Tensor y = chain(x);
              return std::vector<Tensor>{y, cast(y, DType::kBFloat16) + 1.0};
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
              const Tensor i = cast(m, DType::kInt32) + 1.0;
              return std::vector<Tensor>{s, cast(i, DType::kFloat32)};
            }),
            0);
}

std::vector<double> values64(std::size_t n, double scale) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = scale * static_cast<double>((i * 53) % 97) / 97.0;
  return v;
}

TEST(Fusion, AChainEndingInASumIsOneKernel) {
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = tensor(values(30000, 2.0f), {30000});
              return std::vector<Tensor>{sum(tanh(exp(x * 0.5 + 0.25) - 1.5) * 3.0)};
            }),
            1);
}

TEST(Fusion, ReductionsOverTrailingDimsOfBroadcastingChainsFuse) {
  // The common loss and normalisation shapes: each of [rows, cols] reduced over its last dim (or
  // all dims), the chain reading a row and a column broadcast along it.
  using Reduce = std::function<Tensor(const Tensor&)>;
  const std::vector<Reduce> reductions = {
      [](const Tensor& t) { return sum(t, {1}); },
      [](const Tensor& t) { return mean(t, {1}, /*keepdim=*/true); },
      [](const Tensor& t) { return amax(t, {1}); },
      [](const Tensor& t) {
        return amin(t, {0, 1}, /*keepdim=*/true);
      },
      [](const Tensor& t) { return mean(t); },
  };
  for (const Reduce& reduce : reductions) {
    EXPECT_EQ(fused_kernels([&] {
                const Tensor x = tensor(values(40 * 1030, 1.0f), {40, 1030});
                const Tensor row = tensor(values(1030, 3.0f), {1030});
                const Tensor column = tensor(values(40, -1.0f), {40, 1});
                return std::vector<Tensor>{reduce(gelu(relu((x + row) * column - 0.5) + abs(row)))};
              }),
              1);
  }
}

TEST(Fusion, F64ChainsEndingInAReductionFuse) {
  EXPECT_EQ(fused_kernels([] {
              const Tensor x = tensor(values64(33 * 700, 1.5), {33, 700});
              const Tensor y = tensor(values64(700, -2.0), {700});
              const Tensor d = x - y;
              return std::vector<Tensor>{sum(exp(x * -0.5) * 2.0, {1}, /*keepdim=*/true),
                                         mean(d * d), amax(sqrt(abs(x) + 1.0), {0})};
            }),
            3);
}

TEST(Fusion, FusedLossMatchesADoubleLoop) {
  // Mean squared error per row: mean((x * w - t)^2) over the last dim.
  constexpr int64_t kRows = 17, kCols = 2500;
  const std::vector<float> xs = values(kRows * kCols, 2.0f), ws = values(kCols, 0.5f);
  const std::vector<float> ts = values(kRows, 1.0f);
  const struct Run fused = run(
      [&] {
        const Tensor d = tensor(xs, {kRows, kCols}) * tensor(ws, {kCols}) - tensor(ts, {kRows, 1});
        return std::vector<Tensor>{mean(d * d, {1})};
      },
      true);
  // d is read twice, so stored: x * w - t is one fused kernel, d * d and its mean another.
  EXPECT_EQ(fused.fused_kernels, 2);
  for (int64_t r = 0; r < kRows; ++r) {
    double want = 0, bound = 0;
    for (int64_t c = 0; c < kCols; ++c) {
      const double product = static_cast<double>(xs[r * kCols + c]) * ws[c];
      const double d = product - ts[r];
      want += d * d;
      // The f32 product, difference and square each round once (2^-24 relative).
      bound += 2 * std::abs(d) * (std::abs(product) + std::abs(d)) + d * d;
    }
    want /= kCols;
    // ... and the mean once more, to f32.
    EXPECT_NEAR(fused.outputs[0][r], want, 0x1p-23 * bound / kCols + 0x1p-23 * want) << "row " << r;
  }
}

}  // namespace
}  // namespace axle
