// Tests graph/autograd/reduce_grad.cpp: the gradients of the reductions and softmax against
// central finite differences in f64 on random inputs (see tests/graph/grad_check.h): one test per
// op, over some dims, every dim, with and without keepdim.
#include <gtest/gtest.h>

#include <random>

#include "tests/graph/grad_check.h"

namespace axle::testing {
namespace {

using ReductionGrad = Autograd;

using Args = const std::vector<Tensor>&;

TEST_F(ReductionGrad, Sum) {
  std::mt19937 rng(1);
  const GradArg x = random_arg(rng, {2, 3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return sum(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return sum(t[0], {1}); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return sum(t[0], {0, -1}, true); }, {x}));
}

TEST_F(ReductionGrad, SumOfAZeroDimTensor) {
  std::mt19937 rng(2);
  EXPECT_TRUE(gradients_match([](Args t) { return sum(t[0]) * 3.0; }, {random_arg(rng, {})}));
}

TEST_F(ReductionGrad, Mean) {
  std::mt19937 rng(3);
  const GradArg x = random_arg(rng, {2, 3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return mean(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return mean(t[0], {2}); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return mean(t[0], {0, 1}, true); }, {x}));
}

TEST_F(ReductionGrad, Amax) {
  std::mt19937 rng(4);
  const GradArg x = random_arg(rng, {3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return amax(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return amax(t[0], {1}); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return amax(t[0], {0}, true); }, {x}));
}

TEST_F(ReductionGrad, Amin) {
  std::mt19937 rng(5);
  const GradArg x = random_arg(rng, {3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return amin(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return amin(t[0], {-1}, true); }, {x}));
}

TEST_F(ReductionGrad, AmaxSharesTheGradientAmongTies) {
  const Tensor x = tensor(std::vector<double>{1, 3, 3, 2}, {4});
  x.requires_grad_();
  amax(x).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0.5, 0.5, 0}));
}

TEST_F(ReductionGrad, LogSumExp) {
  std::mt19937 rng(6);
  const GradArg x = random_arg(rng, {2, 3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return logsumexp(t[0], {1}); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return logsumexp(t[0], {0, 2}, true); }, {x}));
}

TEST_F(ReductionGrad, Softmax) {
  std::mt19937 rng(7);
  const GradArg x = random_arg(rng, {3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return softmax(t[0], 1); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return softmax(t[0], 0); }, {x}));
}

TEST_F(ReductionGrad, LogSoftmax) {
  std::mt19937 rng(8);
  const GradArg x = random_arg(rng, {3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return log_softmax(t[0], -1); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return log_softmax(t[0], 0); }, {x}));
}

TEST_F(ReductionGrad, SoftmaxOfAZeroDimTensor) {
  std::mt19937 rng(9);
  EXPECT_TRUE(gradients_match([](Args t) { return softmax(t[0], 0) + log_softmax(t[0], 0); },
                              {random_arg(rng, {})}));
}

TEST_F(ReductionGrad, CrossEntropyFromLogSoftmaxAndGather) {
  std::mt19937 rng(10);
  EXPECT_TRUE(
      gradients_match([](Args t) { return neg(mean(gather(log_softmax(t[0], 1), 1, t[1]))); },
                      {random_arg(rng, {4, 5}), index_arg({4, 1}, {2, 0, 4, 2})}));
}

// ---- var, std, cumsum, topk ----

TEST_F(ReductionGrad, VarAndStd) {
  std::mt19937 rng(20);
  const GradArg x = random_arg(rng, {3, 4, 2});
  EXPECT_TRUE(gradients_match([](Args t) { return var(t[0]); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return var(t[0], {1}, false, true); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return std(t[0], {0, 2}); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return std(t[0], {-1}, false); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return var(t[0], {0, 1}, {.correction = 2}); }, {x}));
}

TEST_F(ReductionGrad, CumsumAlongEachDim) {
  std::mt19937 rng(21);
  const GradArg x = random_arg(rng, {3, 4, 2});
  EXPECT_TRUE(gradients_match([](Args t) { return cumsum(t[0], 0); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return cumsum(t[0], 1); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return cumsum(t[0], -1); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return cumsum(t[0], 0); }, {random_arg(rng, {})}));
}

// Distinct random values, so a small step never changes which elements are on top.
TEST_F(ReductionGrad, TopkValuesScatterIntoTheirPositions) {
  std::mt19937 rng(22);
  const GradArg x = random_arg(rng, {3, 6});
  EXPECT_TRUE(gradients_match([](Args t) { return topk(t[0], 2).values; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return topk(t[0], 3, 0, false).values; }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return topk(t[0], 6, 1).values * 2.0; }, {x}));
}

}  // namespace
}  // namespace axle::testing
