// Tests graph/autograd/elementwise_grad.cpp: the gradients of the elementwise ops against central
// finite differences in f64 on random inputs (see tests/graph/grad_check.h), broadcasting
// included: one test per op.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "tests/graph/grad_check.h"

namespace axle::testing {
namespace {

using ElementwiseGrad = Autograd;

using Args = const std::vector<Tensor>&;

TEST_F(ElementwiseGrad, AddBroadcasts) {
  std::mt19937 rng(1);
  EXPECT_TRUE(gradients_match([](Args t) { return add(t[0], t[1]); },
                              {random_arg(rng, {3, 1}), random_arg(rng, {4})}));
}

TEST_F(ElementwiseGrad, SubBroadcasts) {
  std::mt19937 rng(2);
  EXPECT_TRUE(gradients_match([](Args t) { return sub(t[0], t[1]); },
                              {random_arg(rng, {2, 3}), random_arg(rng, {3})}));
}

TEST_F(ElementwiseGrad, MulBroadcasts) {
  std::mt19937 rng(3);
  EXPECT_TRUE(gradients_match([](Args t) { return mul(t[0], t[1]); },
                              {random_arg(rng, {2, 3, 4}), random_arg(rng, {3, 1})}));
}

TEST_F(ElementwiseGrad, DivBroadcasts) {
  std::mt19937 rng(4);
  EXPECT_TRUE(gradients_match([](Args t) { return div(t[0], t[1]); },
                              {random_arg(rng, {1, 4}), away_from_zero(rng, {3, 1}, 0.5)}));
}

TEST_F(ElementwiseGrad, PowOfTwoTensorsBroadcasts) {
  std::mt19937 rng(5);
  EXPECT_TRUE(gradients_match([](Args t) { return pow(t[0], t[1]); },
                              {random_arg(rng, {2, 3}, 0.5, 2), random_arg(rng, {3}, -1.5, 1.5)}));
}

TEST_F(ElementwiseGrad, PowWithAScalarExponent) {
  std::mt19937 rng(6);
  EXPECT_TRUE(
      gradients_match([](Args t) { return pow(t[0], 2.5); }, {random_arg(rng, {2, 3}, 0.5, 2)}));
  EXPECT_TRUE(gradients_match([](Args t) { return pow(t[0], 3.0); }, {random_arg(rng, {4})}));
}

TEST_F(ElementwiseGrad, MaximumBroadcasts) {
  std::mt19937 rng(7);
  EXPECT_TRUE(gradients_match([](Args t) { return maximum(t[0], t[1]); },
                              {random_arg(rng, {3, 4}), random_arg(rng, {4})}));
}

TEST_F(ElementwiseGrad, MinimumBroadcasts) {
  std::mt19937 rng(8);
  EXPECT_TRUE(gradients_match([](Args t) { return minimum(t[0], t[1]); },
                              {random_arg(rng, {3, 1}), random_arg(rng, {2, 1, 4})}));
}

TEST_F(ElementwiseGrad, MaximumSplitsTiesEvenly) {
  const Tensor a = tensor(std::vector<double>{1, 2, 3}, {3});
  const Tensor b = tensor(std::vector<double>{1, 5, 0}, {3});
  a.requires_grad_();
  b.requires_grad_();
  sum(maximum(a, b)).backward();
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.5, 0, 1}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 1, 0}));
}

TEST_F(ElementwiseGrad, ScalarOperandsOnEitherSide) {
  std::mt19937 rng(9);
  const GradArg x = away_from_zero(rng, {2, 3}, 0.5);
  EXPECT_TRUE(gradients_match([](Args t) { return t[0] + 2.0; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return t[0] - 2.0; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return 3.0 - t[0]; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return t[0] * 3.0; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return t[0] / 4.0; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return 2.0 / t[0]; }, {x}));
}

TEST_F(ElementwiseGrad, WhereBroadcastsBothValues) {
  std::mt19937 rng(10);
  EXPECT_TRUE(
      gradients_match([](Args t) { return where(t[0], t[1], t[2]); },
                      {mask_arg(rng, {3, 4}), random_arg(rng, {3, 1}), random_arg(rng, {4})}));
}

TEST_F(ElementwiseGrad, Neg) {
  std::mt19937 rng(11);
  EXPECT_TRUE(gradients_match([](Args t) { return neg(t[0]); }, {random_arg(rng, {2, 3})}));
}

TEST_F(ElementwiseGrad, Exp) {
  std::mt19937 rng(12);
  EXPECT_TRUE(gradients_match([](Args t) { return exp(t[0]); }, {random_arg(rng, {2, 3})}));
}

TEST_F(ElementwiseGrad, Log) {
  std::mt19937 rng(13);
  EXPECT_TRUE(gradients_match([](Args t) { return log(t[0]); }, {random_arg(rng, {5}, 0.2, 3)}));
}

TEST_F(ElementwiseGrad, Sqrt) {
  std::mt19937 rng(14);
  EXPECT_TRUE(gradients_match([](Args t) { return sqrt(t[0]); }, {random_arg(rng, {5}, 0.2, 3)}));
}

TEST_F(ElementwiseGrad, Rsqrt) {
  std::mt19937 rng(15);
  EXPECT_TRUE(gradients_match([](Args t) { return rsqrt(t[0]); }, {random_arg(rng, {5}, 0.2, 3)}));
}

TEST_F(ElementwiseGrad, Tanh) {
  std::mt19937 rng(16);
  EXPECT_TRUE(gradients_match([](Args t) { return tanh(t[0]); }, {random_arg(rng, {2, 4})}));
}

TEST_F(ElementwiseGrad, Sigmoid) {
  std::mt19937 rng(17);
  EXPECT_TRUE(gradients_match([](Args t) { return sigmoid(t[0]); }, {random_arg(rng, {2, 4})}));
}

TEST_F(ElementwiseGrad, Relu) {
  std::mt19937 rng(18);
  EXPECT_TRUE(gradients_match([](Args t) { return relu(t[0]); }, {away_from_zero(rng, {3, 4})}));
}

TEST_F(ElementwiseGrad, GeluWithErf) {
  std::mt19937 rng(19);
  GradArg x = random_arg(rng, {2, 5}, -4, 4);
  x.values[0] = 0;
  EXPECT_TRUE(gradients_match([](Args t) { return gelu(t[0]); }, {x}));
}

TEST_F(ElementwiseGrad, GeluWithTanh) {
  std::mt19937 rng(20);
  EXPECT_TRUE(
      gradients_match([](Args t) { return gelu(t[0], "tanh"); }, {random_arg(rng, {2, 5}, -4, 4)}));
}

// gelu_backward (the op gelu's gradient is) has gradients of its own, for both operands.
TEST_F(ElementwiseGrad, GeluBackwardInBothForms) {
  std::mt19937 rng(31);
  for (const char* form : {"none", "tanh"}) {
    EXPECT_TRUE(gradients_match([&](Args t) { return gelu_backward(t[0], t[1], form); },
                                {random_arg(rng, {2, 5}), random_arg(rng, {2, 5}, -4, 4)}))
        << form;
  }
}

TEST_F(ElementwiseGrad, Abs) {
  std::mt19937 rng(21);
  EXPECT_TRUE(gradients_match([](Args t) { return abs(t[0]); }, {away_from_zero(rng, {3, 4})}));
}

TEST_F(ElementwiseGrad, CastGivesTheGradientInTheOperandsDtype) {
  std::mt19937 rng(22);
  GradArg x = random_arg(rng, {2, 3});
  x.dtype = DType::kFloat32;  // f32 -> f64 -> f32: f32 rounding limits the finite differences
  EXPECT_TRUE(gradients_match([](Args t) { return mul(cast(t[0], DType::kFloat64), 3.0); }, {x},
                              {.eps = 1e-2, .atol = 1e-4, .rtol = 1e-4}));
}

TEST_F(ElementwiseGrad, ChainOfElementwiseOps) {
  std::mt19937 rng(23);
  EXPECT_TRUE(
      gradients_match([](Args t) { return tanh(t[0] * t[1] + exp(t[0]) / (t[1] * t[1] + 1.0)); },
                      {random_arg(rng, {2, 3}), random_arg(rng, {3})}));
}

// ---- sin, cos, silu, clamp, masked_fill, tril, triu ----

TEST_F(ElementwiseGrad, SinCosAndSilu) {
  std::mt19937 rng(40);
  const GradArg x = random_arg(rng, {3, 4}, -4, 4);
  EXPECT_TRUE(gradients_match([](Args t) { return sin(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return cos(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return silu(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return sin(t[0]) * cos(t[0]); }, {x}));
}

TEST_F(ElementwiseGrad, Erf) {
  std::mt19937 rng(43);
  const GradArg x = random_arg(rng, {3, 4}, -3, 3);
  EXPECT_TRUE(gradients_match([](Args t) { return erf(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return erf(t[0] * t[0]) * t[0]; }, {x}));
}

TEST_F(ElementwiseGrad, Log1pAndSoftplus) {
  std::mt19937 rng(46);
  const GradArg x = random_arg(rng, {3, 4}, -0.9, 3);
  const GradArg wide = random_arg(rng, {3, 4}, -6, 6);
  EXPECT_TRUE(gradients_match([](Args t) { return log1p(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return softplus(t[0]); }, {wide}));
  EXPECT_TRUE(gradients_match([](Args t) { return softplus(t[0], 2, 5); }, {wide}));
  EXPECT_TRUE(gradients_match([](Args t) { return softplus(t[0], 0.5); }, {wide}));
  EXPECT_TRUE(gradients_match([](Args t) { return log1p(softplus(t[0])) * t[0]; }, {wide}));
}

// Past the threshold softplus is x itself, so its gradient is exactly the incoming one (as
// torch's), not sigmoid(x) times it; composed with other parameters no inf or NaN leaks from
// the branch where does not take.
TEST_F(ElementwiseGrad, SoftplusGradientPastTheThresholdIsExactlyOne) {
  for (auto [beta, threshold] : {std::pair{1.0, 20.0}, std::pair{2.0, 5.0}}) {
    const Tensor x = tensor(std::vector<double>{25, 400, -400, 0}, {4});
    x.requires_grad_();
    sum(softplus(x, beta, threshold)).backward();
    const std::vector<double> grad = x.grad().to_vector<double>();
    EXPECT_EQ(grad[0], 1.0) << beta;
    EXPECT_EQ(grad[1], 1.0) << beta;
    EXPECT_GE(grad[2], 0.0) << beta;  // sigmoid(-400): 1.9e-174, as torch's
    EXPECT_LT(grad[2], 1e-150) << beta;
    EXPECT_DOUBLE_EQ(grad[3], 0.5) << beta;
  }
}

TEST_F(ElementwiseGrad, ClampWithScalarBounds) {
  std::mt19937 rng(41);
  const GradArg x = random_arg(rng, {4, 5}, -2, 2);
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], -0.5, 0.7); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], -0.5); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], std::nullopt, 0.3); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], 1.0, -1.0); }, {x}));
}

TEST_F(ElementwiseGrad, ClampWithTensorBounds) {
  std::mt19937 rng(42);
  const GradArg x = random_arg(rng, {3, 4}, -2, 2);
  const GradArg lo = random_arg(rng, {4}, -1.5, 0);
  const GradArg hi = random_arg(rng, {3, 1}, 0, 1.5);
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], t[1], t[2]); }, {x, lo, hi}));
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], t[1], Tensor()); }, {x, lo}));
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], Tensor(), t[1]); }, {x, hi}));
  // min > max: every element is max, whose gradient it takes.
  EXPECT_TRUE(gradients_match([](Args t) { return clamp(t[0], t[1], t[2]); },
                              {x, random_arg(rng, {4}, 1, 2), random_arg(rng, {4}, -2, -1)}));
}

// At a bound the gradient passes to x, as torch (maximum and minimum would split it).
TEST_F(ElementwiseGrad, ClampPassesTheGradientAtTheBounds) {
  const Tensor x = tensor(std::vector<double>{-1, -0.5, 0, 0.5, 1, NAN}, {6});
  x.requires_grad_();
  sum(clamp(x, -0.5, 0.5)).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 1, 0, 0}));
  const Tensor y = tensor(std::vector<double>{-1, -0.5, 0, 0.5, 1}, {5});
  const Tensor lo = tensor(std::vector<double>{-0.5}, {1});
  const Tensor hi = tensor(std::vector<double>{0.5}, {1});
  y.requires_grad_();
  lo.requires_grad_();
  hi.requires_grad_();
  sum(clamp(y, lo, hi)).backward();
  EXPECT_EQ(y.grad().to_vector<double>(), (std::vector<double>{0, 1, 1, 1, 0}));
  EXPECT_EQ(lo.grad().to_vector<double>(), (std::vector<double>{1}));
  EXPECT_EQ(hi.grad().to_vector<double>(), (std::vector<double>{1}));
}

TEST_F(ElementwiseGrad, MaskedFillZeroesTheFilledGradient) {
  std::mt19937 rng(43);
  const GradArg x = random_arg(rng, {2, 3, 4});
  const GradArg mask = mask_arg(rng, {3, 1});
  EXPECT_TRUE(gradients_match([](Args t) { return masked_fill(t[0], t[1], -3.5); }, {x, mask}));
}

TEST_F(ElementwiseGrad, TrilAndTriu) {
  std::mt19937 rng(44);
  const GradArg x = random_arg(rng, {2, 3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return tril(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return tril(t[0], -1); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return triu(t[0], 1); }, {x}));
}

}  // namespace
}  // namespace axle::testing
