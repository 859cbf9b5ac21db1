// Tests backends/cpu/pooling.cpp's gradients (kMaxPool2dBackward, kAvgPool2dBackward)
// against plain loops written from torch's definitions: max pooling hands each window's gradient
// to the position of its first maximum (the last NaN when there is one); average pooling spreads
// it evenly over the window's in-bounds positions, divided by the forward's divisor.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"
#include "tests/backends/pooling_test_util.h"

namespace axle::testing {
namespace {

std::vector<double> reference_max_backward(const HostTensor& x, const HostTensor& g,
                                           const PoolParams& p) {
  std::vector<double> grad(x.values.size(), 0.0);
  const int64_t h = x.shape[2], w = x.shape[3];
  for (int64_t plane = 0; plane < x.shape[0] * x.shape[1]; ++plane) {
    for (int64_t y = 0; y < g.shape[2]; ++y) {
      for (int64_t xo = 0; xo < g.shape[3]; ++xo) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t at = -1;
        for (int64_t i = 0; i < p.kh; ++i) {
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iy = y * p.stride_h - p.pad_h + i * p.dilation_h;
            const int64_t ix = xo * p.stride_w - p.pad_w + j * p.dilation_w;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t k = (plane * h + iy) * w + ix;
            if (at < 0) at = k;  // torch starts from the first in-bounds tap
            if (x.values[k] > best || std::isnan(x.values[k])) best = x.values[k], at = k;
          }
        }
        if (at >= 0) grad[at] += g.values[(plane * g.shape[2] + y) * g.shape[3] + xo];
      }
    }
  }
  return grad;
}

std::vector<double> reference_avg_backward(const Shape& x_shape, const HostTensor& g,
                                           const PoolParams& p) {
  std::vector<double> grad(static_cast<std::size_t>(x_shape.numel()), 0.0);
  const int64_t h = x_shape[2], w = x_shape[3];
  for (int64_t plane = 0; plane < x_shape[0] * x_shape[1]; ++plane) {
    for (int64_t y = 0; y < g.shape[2]; ++y) {
      for (int64_t xo = 0; xo < g.shape[3]; ++xo) {
        std::vector<int64_t> inside;
        int64_t in_padded = 0;
        for (int64_t i = 0; i < p.kh; ++i) {
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iy = y * p.stride_h - p.pad_h + i;
            const int64_t ix = xo * p.stride_w - p.pad_w + j;
            if (iy < -p.pad_h || iy >= h + p.pad_h || ix < -p.pad_w || ix >= w + p.pad_w) continue;
            ++in_padded;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w) inside.push_back((plane * h + iy) * w + ix);
          }
        }
        if (inside.empty()) continue;
        const auto divisor = static_cast<double>(
            p.count_include_pad ? in_padded : static_cast<int64_t>(inside.size()));
        const double share = g.values[(plane * g.shape[2] + y) * g.shape[3] + xo] / divisor;
        for (int64_t k : inside) grad[k] += share;
      }
    }
  }
  return grad;
}

void expect_max_backward_matches_loops(const HostTensor& x, const PoolParams& p,
                                       std::mt19937& rng) {
  const HostTensor g = random_tensor(x.dtype, pool_output_shape(x.shape, p), rng);
  const HostTensor got =
      run_kernel(Kernel::kMaxPool2dBackward, {x, g}, x.dtype, x.shape, max_pool_ints(p));
  expect_values(got.values, reference_max_backward(x, g, p), tolerance(x.dtype),
                "max_pool2d_backward x " + x.shape.to_string() + ", ints " +
                    ::testing::PrintToString(max_pool_ints(p)));
}

void expect_avg_backward_matches_loops(DType dtype, const Shape& x_shape, const PoolParams& p,
                                       std::mt19937& rng) {
  const HostTensor g = random_tensor(dtype, pool_output_shape(x_shape, p), rng);
  const HostTensor got =
      run_kernel(Kernel::kAvgPool2dBackward, {g}, dtype, x_shape, avg_pool_ints(p));
  expect_values(got.values, reference_avg_backward(x_shape, g, p), tolerance(dtype),
                "avg_pool2d_backward x " + x_shape.to_string() + ", ints " +
                    ::testing::PrintToString(avg_pool_ints(p)));
}

TEST(MaxPool2dBackward, RoutesEachGradientToItsWindowsMaximum) {
  std::mt19937 rng(1);
  expect_max_backward_matches_loops(random_tensor(DType::kFloat32, {2, 3, 8, 9}, rng), {}, rng);
  expect_max_backward_matches_loops(random_tensor(DType::kFloat64, {1, 2, 7, 10}, rng),
                                    {.kh = 3, .kw = 2, .stride_h = 1, .stride_w = 3}, rng);
}

// The 2x2 kernel's rows of 1 to 17 windows, partial blocks of every length included.
TEST(MaxPool2dBackward, TwoByTwoRowsOfEveryLengthMatchLoops) {
  std::mt19937 rng(48);
  for (int64_t w = 2; w <= 35; ++w) {
    expect_max_backward_matches_loops(random_tensor(DType::kFloat32, {1, 2, 5, w}, rng), {}, rng);
  }
}

TEST(MaxPool2dBackward, SumsWhereWindowsOverlap) {
  std::mt19937 rng(2);
  expect_max_backward_matches_loops(random_tensor(DType::kFloat64, {2, 2, 6, 7}, rng),
                                    {.kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1}, rng);
}

TEST(MaxPool2dBackward, HandlesPaddingDilationAndCeilMode) {
  std::mt19937 rng(3);
  const HostTensor x = random_tensor(DType::kFloat64, {1, 3, 11, 12}, rng, -3.0, -1.0);
  expect_max_backward_matches_loops(
      x, {.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, rng);
  expect_max_backward_matches_loops(
      x, {.kh = 3, .kw = 2, .stride_h = 2, .stride_w = 3, .dilation_h = 2, .dilation_w = 3}, rng);
  expect_max_backward_matches_loops(
      x, {.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .ceil_mode = true}, rng);
}

TEST(MaxPool2dBackward, TiesGoToTheFirstMaximumAndNaNToTheLast) {
  std::mt19937 rng(4);
  HostTensor x{DType::kFloat32, {1, 1, 2, 4}, {1, 1, 5, 5, 2, 1, 5, 5}};
  expect_max_backward_matches_loops(x, {}, rng);
  x.values = {kNaN, 1, 5, kNaN, 2, kNaN, 5, kNaN};
  expect_max_backward_matches_loops(x, {}, rng);
}

TEST(MaxPool2dBackward, WorksInBf16) {
  std::mt19937 rng(5);
  expect_max_backward_matches_loops(random_tensor(DType::kBFloat16, {2, 2, 6, 6}, rng),
                                    {.kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1}, rng);
}

TEST(AvgPool2dBackward, SpreadsEachGradientOverItsWindow) {
  std::mt19937 rng(6);
  expect_avg_backward_matches_loops(DType::kFloat32, {2, 3, 8, 9}, {}, rng);
  expect_avg_backward_matches_loops(DType::kFloat64, {1, 2, 7, 10},
                                    {.kh = 3, .kw = 2, .stride_h = 1, .stride_w = 3}, rng);
}

TEST(AvgPool2dBackward, UsesTheForwardsDivisors) {
  std::mt19937 rng(7);
  for (bool include : {true, false}) {
    for (bool ceil : {false, true}) {
      expect_avg_backward_matches_loops(DType::kFloat64, {1, 2, 7, 8},
                                        {.kh = 3,
                                         .kw = 2,
                                         .stride_h = 2,
                                         .stride_w = 2,
                                         .pad_h = 1,
                                         .pad_w = 1,
                                         .ceil_mode = ceil,
                                         .count_include_pad = include},
                                        rng);
    }
  }
}

TEST(AvgPool2dBackward, WorksInBf16) {
  std::mt19937 rng(8);
  expect_avg_backward_matches_loops(DType::kBFloat16, {2, 2, 6, 6},
                                    {.kh = 3, .kw = 3, .stride_h = 1, .stride_w = 1}, rng);
}

TEST(PoolBackward, RejectsAnOutputOtherThanTheInputsShape) {
  const HostTensor x{DType::kFloat32, {1, 1, 4, 4}, std::vector<double>(16, 1.0)};
  const HostTensor g{DType::kFloat32, {1, 1, 2, 2}, std::vector<double>(4, 1.0)};
  EXPECT_FALSE(invalid_argument_message(Kernel::kMaxPool2dBackward, {x, g}, DType::kFloat32,
                                        {1, 1, 4, 5}, max_pool_ints({}))
                   .empty());
  EXPECT_FALSE(invalid_argument_message(Kernel::kAvgPool2dBackward, {g}, DType::kFloat32,
                                        {1, 1, 6, 6}, avg_pool_ints({}))
                   .empty());
}

}  // namespace
}  // namespace axle::testing
