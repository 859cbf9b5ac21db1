// Tests graph/autograd/linalg_grad.cpp: the gradients of matmul and linear against central
// finite differences in f64 on random inputs (see tests/graph/grad_check.h): batched and
// broadcast matmuls and 1-d promotion.
#include <gtest/gtest.h>

#include <random>

#include "tests/graph/grad_check.h"

namespace axle::testing {
namespace {

using LinalgGrad = Autograd;

using Args = const std::vector<Tensor>&;

Tensor matmul_of(Args t) { return matmul(t[0], t[1]); }

TEST_F(LinalgGrad, MatmulOfMatrices) {
  std::mt19937 rng(1);
  EXPECT_TRUE(gradients_match(matmul_of, {random_arg(rng, {3, 4}), random_arg(rng, {4, 2})}));
}

TEST_F(LinalgGrad, MatmulBroadcastsBatchDims) {
  std::mt19937 rng(2);
  EXPECT_TRUE(
      gradients_match(matmul_of, {random_arg(rng, {2, 1, 3, 4}), random_arg(rng, {3, 4, 2})}));
}

TEST_F(LinalgGrad, MatmulOfABatchAndAMatrix) {
  std::mt19937 rng(3);
  EXPECT_TRUE(gradients_match(matmul_of, {random_arg(rng, {2, 3, 4}), random_arg(rng, {4, 5})}));
  EXPECT_TRUE(gradients_match(matmul_of, {random_arg(rng, {3, 4}), random_arg(rng, {2, 4, 5})}));
}

TEST_F(LinalgGrad, MatmulPromotesOneDimOperands) {
  std::mt19937 rng(4);
  EXPECT_TRUE(gradients_match(matmul_of, {random_arg(rng, {4}), random_arg(rng, {2, 4, 3})}));
  EXPECT_TRUE(gradients_match(matmul_of, {random_arg(rng, {2, 3, 4}), random_arg(rng, {4})}));
  EXPECT_TRUE(gradients_match(matmul_of, {random_arg(rng, {4}), random_arg(rng, {4})}));
}

TEST_F(LinalgGrad, Linear) {
  std::mt19937 rng(5);
  EXPECT_TRUE(
      gradients_match([](Args t) { return linear(t[0], t[1], t[2]); },
                      {random_arg(rng, {2, 3, 4}), random_arg(rng, {5, 4}), random_arg(rng, {5})}));
  EXPECT_TRUE(gradients_match([](Args t) { return linear(t[0], t[1]); },
                              {random_arg(rng, {3, 4}), random_arg(rng, {4})}));
}

}  // namespace
}  // namespace axle::testing
