// Tests graph/autograd/shape_grad.cpp: the gradients of the shape and data-movement ops against
// central finite differences in f64 on random inputs (see tests/graph/grad_check.h): one test per
// op.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/graph/grad_check.h"

namespace axle::testing {
namespace {

using ShapeGrad = Autograd;

using Args = const std::vector<Tensor>&;

TEST_F(ShapeGrad, ReshapeAndView) {
  std::mt19937 rng(1);
  const GradArg x = random_arg(rng, {2, 3, 4});
  EXPECT_TRUE(gradients_match([](Args t) { return reshape(t[0], {4, -1}); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return view(t[0], {6, 4}); }, {x}));
}

TEST_F(ShapeGrad, Flatten) {
  std::mt19937 rng(2);
  EXPECT_TRUE(
      gradients_match([](Args t) { return flatten(t[0], 1); }, {random_arg(rng, {2, 3, 4})}));
}

TEST_F(ShapeGrad, SqueezeAndUnsqueeze) {
  std::mt19937 rng(3);
  const GradArg x = random_arg(rng, {2, 1, 3});
  EXPECT_TRUE(gradients_match([](Args t) { return squeeze(t[0], 1); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return unsqueeze(t[0], -1); }, {x}));
}

TEST_F(ShapeGrad, Permute) {
  std::mt19937 rng(4);
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        return permute(t[0], {2, 0, 1});
      },
      {random_arg(rng, {2, 3, 4})}));
}

TEST_F(ShapeGrad, Transpose) {
  std::mt19937 rng(5);
  EXPECT_TRUE(
      gradients_match([](Args t) { return transpose(t[0], 0, -1); }, {random_arg(rng, {2, 3, 4})}));
}

TEST_F(ShapeGrad, ExpandSumsOverTheExpandedDims) {
  std::mt19937 rng(6);
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        return expand(t[0], {2, 3, -1});
      },
      {random_arg(rng, {3, 1})}));
}

TEST_F(ShapeGrad, Slice) {
  std::mt19937 rng(7);
  const GradArg x = random_arg(rng, {3, 7});
  EXPECT_TRUE(gradients_match([](Args t) { return slice(t[0], 1, 2, 5); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return slice(t[0], 1, 1, 7, 2); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return slice(t[0], 0, -2, 3, 3); }, {x}));
  EXPECT_TRUE(gradients_match([](Args t) { return slice(t[0], 1, 0, 7, 3); }, {x}));
}

TEST_F(ShapeGrad, SliceToNothingHasAZeroGradient) {
  std::mt19937 rng(8);
  EXPECT_TRUE(
      gradients_match([](Args t) { return slice(t[0], 0, 2, 2); }, {random_arg(rng, {3, 2})}));
}

TEST_F(ShapeGrad, CatSplitsTheGradient) {
  std::mt19937 rng(9);
  GradArg fixed = random_arg(rng, {2, 1});
  fixed.differentiable = false;
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        return cat({t[0], t[1], t[2]}, 1);
      },
      {random_arg(rng, {2, 3}), fixed, random_arg(rng, {2, 2})}));
}

TEST_F(ShapeGrad, Stack) {
  std::mt19937 rng(10);
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        return stack({t[0], t[1]}, 1);
      },
      {random_arg(rng, {2, 3}), random_arg(rng, {2, 3})}));
}

TEST_F(ShapeGrad, IndexSelectAddsUpRepeatedIndices) {
  std::mt19937 rng(11);
  EXPECT_TRUE(gradients_match([](Args t) { return index_select(t[0], 0, t[1]); },
                              {random_arg(rng, {4, 3}), index_arg({5}, {2, 0, 2, 3, 2})}));
  EXPECT_TRUE(gradients_match([](Args t) { return index_select(t[0], 1, t[1]); },
                              {random_arg(rng, {2, 4, 3}), index_arg({2}, {3, 3})}));
}

TEST_F(ShapeGrad, Gather) {
  std::mt19937 rng(12);
  EXPECT_TRUE(gradients_match([](Args t) { return gather(t[0], 1, t[1]); },
                              {random_arg(rng, {3, 4}), index_arg({3, 2}, {0, 3, 1, 1, 2, 0})}));
  EXPECT_TRUE(gradients_match([](Args t) { return gather(t[0], 0, t[1]); },
                              {random_arg(rng, {3, 4}), index_arg({2, 3}, {2, 2, 0, 1, 0, 2})}));
}

TEST_F(ShapeGrad, ScatterAdd) {
  std::mt19937 rng(13);
  EXPECT_TRUE(gradients_match(
      [](Args t) { return scatter_add(t[0], 1, t[1], t[2]); },
      {random_arg(rng, {2, 4}), index_arg({2, 3}, {3, 0, 3, 1, 1, 2}), random_arg(rng, {2, 3})}));
}

TEST_F(ShapeGrad, SplitAndChunkPadEachPieceBack) {
  std::mt19937 rng(30);
  const GradArg x = random_arg(rng, {5, 4});
  // Pieces weighted differently, so a piece put back in the wrong place shows.
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        const std::vector<Tensor> p = split(t[0], 2);
        return cat({p[0] * 3.0, p[2], p[1] * -1.0}, 0);
      },
      {x}));
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        const std::vector<Tensor> p = split(t[0], std::vector<int64_t>{1, 3}, 1);
        return p[1] * 2.0;
      },
      {x}));
  EXPECT_TRUE(gradients_match(
      [](Args t) {
        const std::vector<Tensor> p = chunk(t[0], 3, 1);
        return cat({p[1], p[0] * 0.5}, 1);
      },
      {x}));
}

}  // namespace
}  // namespace axle::testing
