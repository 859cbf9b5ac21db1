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

// Windows two columns apart (max_pool_strided.cpp, eight windows a vector): rows of 1 to 20
// windows, padded and not, overlapping rows and ceil_mode, over values with ties, NaNs and -inf
// (a window of -inf alone hands its gradient to its first in-bounds tap).
TEST(MaxPool2dBackward, WindowsTwoColumnsApartMatchLoopsOnRowsOfEveryLength) {
  std::mt19937 rng(6);
  std::uniform_int_distribution<int> pick(0, 29);
  for (const PoolParams& p : windows_two_columns_apart()) {
    for (int64_t w = 5; w <= 44; w += 3) {
      HostTensor x = random_tensor(DType::kFloat32, {2, 3, 9, w}, rng);
      for (double& v : x.values) {
        v = std::round(v * 4) / 4;  // ties, exact in f32
        const int k = pick(rng);
        if (k == 0) v = kNaN;
        if (k == 1 || k == 2) v = -std::numeric_limits<double>::infinity();
      }
      expect_max_backward_matches_loops(x, p, rng);
    }
  }
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

// bf16 pooling runs the f32 kernels over runs of planes that each thread widens and rounds back
// itself: on three threads over many runs, every value is the f32 kernels' on the widened
// operands, rounded once to bf16 (2x2 max pools take the vector loops, 3x3 windows the others).
TEST(PoolBf16, RunsOfPlanesOnThreadsGiveTheF32KernelsValuesRounded) {
  std::mt19937 rng(9);
  const Shape x_shape{8, 32, 28, 28};
  const HostTensor x = random_tensor(DType::kBFloat16, x_shape, rng);
  HostTensor x_f32 = x;
  x_f32.dtype = DType::kFloat32;  // the same values, exact in f32
  auto rounded = [](std::vector<double> v) {
    for (double& e : v) e = round_to(DType::kBFloat16, e);
    return v;
  };
  for (const PoolParams& p :
       {PoolParams{},
        PoolParams{.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}}) {
    const Shape out_shape = pool_output_shape(x_shape, p);
    HostTensor g = random_tensor(DType::kBFloat16, out_shape, rng);
    HostTensor g_f32 = g;
    g_f32.dtype = DType::kFloat32;
    for (const bool max : {true, false}) {
      const std::vector<int64_t> ints = max ? max_pool_ints(p) : avg_pool_ints(p);
      const Kernel forward = max ? Kernel::kMaxPool2d : Kernel::kAvgPool2d;
      const Kernel backward = max ? Kernel::kMaxPool2dBackward : Kernel::kAvgPool2dBackward;
      const std::vector<HostTensor> operands = max ? std::vector{x, g} : std::vector{g};
      const std::vector<HostTensor> operands_f32 =
          max ? std::vector{x_f32, g_f32} : std::vector{g_f32};
      EXPECT_EQ(
          call_kernel_directly(forward, {x}, DType::kBFloat16, out_shape, ints, 3).values,
          rounded(call_kernel_directly(forward, {x_f32}, DType::kFloat32, out_shape, ints).values))
          << kernel_name(forward) << " " << p.kh << "x" << p.kw;
      EXPECT_EQ(
          call_kernel_directly(backward, operands, DType::kBFloat16, x_shape, ints, 3).values,
          rounded(
              call_kernel_directly(backward, operands_f32, DType::kFloat32, x_shape, ints).values))
          << kernel_name(backward) << " " << p.kh << "x" << p.kw;
    }
  }
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
