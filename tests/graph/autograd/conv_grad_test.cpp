// Tests graph/autograd/conv_grad.cpp: the gradients of conv2d (stride, padding, dilation,
// groups), max_pool2d and avg_pool2d against central finite differences in f64 on random inputs
// (see tests/graph/grad_check.h).
#include <gtest/gtest.h>

#include <random>

#include "tests/graph/grad_check.h"

namespace axle::testing {
namespace {

using LinalgGrad = Autograd;

using Args = const std::vector<Tensor>&;

void expect_conv_gradients(const Shape& x, const Shape& w, const Conv2dOptions& options,
                           bool with_bias, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<GradArg> args{random_arg(rng, x), random_arg(rng, w)};
  if (with_bias) args.push_back(random_arg(rng, {w[0]}));
  EXPECT_TRUE(gradients_match(
      [&](Args t) { return conv2d(t[0], t[1], t.size() > 2 ? t[2] : Tensor(), options); }, args))
      << "x " << x.to_string() << ", w " << w.to_string();
}

TEST_F(LinalgGrad, Conv2d) { expect_conv_gradients({2, 3, 5, 6}, {4, 3, 3, 2}, {}, true, 6); }

TEST_F(LinalgGrad, Conv2dWithStrideAndPadding) {
  Conv2dOptions options;
  options.stride = {2, 3};
  options.padding = {1, 2};
  expect_conv_gradients({1, 2, 7, 8}, {3, 2, 3, 3}, options, false, 7);
}

TEST_F(LinalgGrad, Conv2dWithAStrideThatSkipsTheLastRows) {
  Conv2dOptions options;
  options.stride = {2, 2};
  expect_conv_gradients({1, 2, 6, 7}, {2, 2, 3, 2}, options, false, 8);
}

TEST_F(LinalgGrad, Conv2dWithDilation) {
  Conv2dOptions options;
  options.dilation = {2, 1};
  options.padding = {1, 0};
  expect_conv_gradients({2, 1, 7, 5}, {2, 1, 3, 2}, options, true, 9);
}

TEST_F(LinalgGrad, Conv2dWithPaddingWiderThanTheKernel) {
  Conv2dOptions options;
  options.padding = {2, 3};
  expect_conv_gradients({1, 2, 3, 3}, {2, 2, 2, 2}, options, false, 10);
}

TEST_F(LinalgGrad, Conv2dWithGroups) {
  Conv2dOptions options;
  options.groups = 2;
  options.stride = {2, 1};
  options.padding = {1, 1};
  expect_conv_gradients({2, 4, 5, 5}, {6, 2, 3, 3}, options, true, 11);
}

TEST_F(LinalgGrad, Conv2dDepthwise) {
  Conv2dOptions options;
  options.groups = 3;
  options.dilation = {2, 2};
  expect_conv_gradients({1, 3, 6, 6}, {3, 1, 2, 2}, options, false, 12);
}

TEST_F(LinalgGrad, MaxPool2d) {
  std::mt19937 rng(13);
  Pool2dOptions options;
  options.kernel_size = {2, 2};
  EXPECT_TRUE(gradients_match([&](Args t) { return max_pool2d(t[0], options); },
                              {random_arg(rng, {2, 2, 4, 6})}));
}

TEST_F(LinalgGrad, MaxPool2dWithOverlapPaddingAndDilation) {
  std::mt19937 rng(14);
  Pool2dOptions options;
  options.kernel_size = {3, 3};
  options.stride = {2, 1};
  options.padding = {1, 1};
  options.dilation = {1, 2};
  options.ceil_mode = true;
  EXPECT_TRUE(gradients_match([&](Args t) { return max_pool2d(t[0], options); },
                              {random_arg(rng, {1, 2, 6, 7})}));
}

TEST_F(LinalgGrad, AvgPool2d) {
  std::mt19937 rng(15);
  Pool2dOptions options;
  options.kernel_size = {2, 3};
  EXPECT_TRUE(gradients_match([&](Args t) { return avg_pool2d(t[0], options); },
                              {random_arg(rng, {2, 2, 4, 6})}));
}

TEST_F(LinalgGrad, AvgPool2dWithPaddingAndCeilMode) {
  std::mt19937 rng(16);
  for (bool include_pad : {true, false}) {
    Pool2dOptions options;
    options.kernel_size = {3, 3};
    options.stride = {2, 2};
    options.padding = {1, 1};
    options.ceil_mode = true;
    options.count_include_pad = include_pad;
    EXPECT_TRUE(gradients_match([&](Args t) { return avg_pool2d(t[0], options); },
                                {random_arg(rng, {1, 2, 6, 7})}));
  }
}

}  // namespace
}  // namespace axle::testing
