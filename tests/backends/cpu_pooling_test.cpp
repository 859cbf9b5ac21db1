// Tests backends/cpu/pooling.cpp's forward kernels, kMaxPool2d and kAvgPool2d, against plain
// double loops that follow torch's definitions, plus the shape and attribute checks. The
// gradients are tested in cpu_pooling_backward_test.cpp.
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

/// Max over the window's taps inside the input, NaN if one is; padding is -infinity so it never
/// wins.
Reference reference_max_pool(const HostTensor& x, const PoolParams& p) {
  Reference ref{pool_output_shape(x.shape, p), {}, {}};
  const int64_t h = x.shape[2], w = x.shape[3];
  for (int64_t plane = 0; plane < x.shape[0] * x.shape[1]; ++plane) {
    for (int64_t y = 0; y < ref.shape[2]; ++y) {
      for (int64_t xo = 0; xo < ref.shape[3]; ++xo) {
        double best = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < p.kh; ++i) {
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iy = y * p.stride_h - p.pad_h + i * p.dilation_h;
            const int64_t ix = xo * p.stride_w - p.pad_w + j * p.dilation_w;
            if (iy >= 0 && iy < h && ix >= 0 && ix < w) {
              const double v = x.values[(plane * h + iy) * w + ix];
              if (v > best || std::isnan(v)) best = v;  // a NaN wins, as in torch
            }
          }
        }
        ref.values.push_back(best);
        ref.scale.push_back(std::abs(best));
      }
    }
  }
  return ref;
}

/// Mean over the window. The divisor counts the window's positions inside the padded input
/// (count_include_pad) or inside the input; positions a ceil_mode window has past the padding
/// never count.
Reference reference_avg_pool(const HostTensor& x, const PoolParams& p) {
  Reference ref{pool_output_shape(x.shape, p), {}, {}};
  const int64_t h = x.shape[2], w = x.shape[3];
  for (int64_t plane = 0; plane < x.shape[0] * x.shape[1]; ++plane) {
    for (int64_t y = 0; y < ref.shape[2]; ++y) {
      for (int64_t xo = 0; xo < ref.shape[3]; ++xo) {
        double sum = 0, scale = 0;
        int64_t in_padded = 0, in_input = 0;
        for (int64_t i = 0; i < p.kh; ++i) {
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iy = y * p.stride_h - p.pad_h + i;
            const int64_t ix = xo * p.stride_w - p.pad_w + j;
            if (iy < -p.pad_h || iy >= h + p.pad_h || ix < -p.pad_w || ix >= w + p.pad_w) continue;
            ++in_padded;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            ++in_input;
            sum += x.values[(plane * h + iy) * w + ix];
            scale += std::abs(x.values[(plane * h + iy) * w + ix]);
          }
        }
        const int64_t divisor = p.count_include_pad ? in_padded : in_input;
        ref.values.push_back(in_input == 0 ? 0.0 : sum / divisor);
        ref.scale.push_back(in_input == 0 ? 0.0 : scale / divisor);
      }
    }
  }
  return ref;
}

void expect_max_pool_matches_loops(const HostTensor& x, const PoolParams& p) {
  const Reference ref = reference_max_pool(x, p);
  const HostTensor out = run_kernel(Kernel::kMaxPool2d, {x}, x.dtype, ref.shape, max_pool_ints(p));
  expect_close(out, ref, x.dtype,
               "max_pool2d x " + x.shape.to_string() + ", ints " +
                   ::testing::PrintToString(max_pool_ints(p)));
}

void expect_avg_pool_matches_loops(const HostTensor& x, const PoolParams& p) {
  const Reference ref = reference_avg_pool(x, p);
  const HostTensor out = run_kernel(Kernel::kAvgPool2d, {x}, x.dtype, ref.shape, avg_pool_ints(p));
  expect_close(out, ref, x.dtype,
               "avg_pool2d x " + x.shape.to_string() + ", ints " +
                   ::testing::PrintToString(avg_pool_ints(p)));
}

// ---- max_pool2d ------------------------------------------------------------------------

TEST(MaxPool2d, MatchesLoopsWithoutPadding) {
  std::mt19937 rng(41);
  expect_max_pool_matches_loops(random_tensor(DType::kFloat32, {2, 3, 8, 9}, rng), {});
  expect_max_pool_matches_loops(random_tensor(DType::kFloat32, {1, 2, 7, 10}, rng),
                                {.kh = 3, .kw = 2, .stride_h = 1, .stride_w = 3});
}

// The 2x2 kernel's rows of 1 to 17 windows: whole blocks of eight, and partial ones of every
// length, which store their lanes one by one (the 7-window rows of a 14-wide plane).
TEST(MaxPool2d, TwoByTwoRowsOfEveryLengthMatchLoops) {
  std::mt19937 rng(47);
  for (int64_t w = 2; w <= 35; ++w) {
    expect_max_pool_matches_loops(random_tensor(DType::kFloat32, {1, 2, 5, w}, rng), {});
  }
}

TEST(MaxPool2d, PaddingNeverWins) {
  // All inputs negative: a zero-padded max would put 0 on the border.
  std::mt19937 rng(42);
  const HostTensor x = random_tensor(DType::kFloat32, {2, 2, 6, 7}, rng, -3.0, -1.0);
  expect_max_pool_matches_loops(
      x, {.kh = 3, .kw = 3, .stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1});
}

TEST(MaxPool2d, AppliesDilation) {
  std::mt19937 rng(43);
  expect_max_pool_matches_loops(random_tensor(DType::kFloat32, {1, 3, 11, 12}, rng),
                                {.kh = 3,
                                 .kw = 2,
                                 .stride_h = 2,
                                 .stride_w = 1,
                                 .pad_h = 1,
                                 .pad_w = 1,
                                 .dilation_h = 2,
                                 .dilation_w = 3});
}

TEST(MaxPool2d, CeilModeKeepsPartialLastWindow) {
  const HostTensor x{DType::kFloat32, {1, 1, 1, 5}, {1, 5, 2, 4, 3}};
  const PoolParams p{.kh = 1, .kw = 2, .stride_h = 1, .stride_w = 2, .ceil_mode = true};
  const HostTensor out =
      run_kernel(Kernel::kMaxPool2d, {x}, DType::kFloat32, {1, 1, 1, 3}, max_pool_ints(p));
  EXPECT_EQ(out.values, (std::vector<double>{5, 4, 3}));
}

TEST(MaxPool2d, CeilModeDropsWindowStartingInRightPadding) {
  // W=3, k=2, s=2, p=1: ceil would give 3 windows, but the third starts at 3, past the input.
  const PoolParams p{
      .kh = 1, .kw = 2, .stride_h = 1, .stride_w = 2, .pad_h = 0, .pad_w = 1, .ceil_mode = true};
  const HostTensor x{DType::kFloat32, {1, 1, 1, 3}, {7, 8, 9}};
  const HostTensor out =
      run_kernel(Kernel::kMaxPool2d, {x}, DType::kFloat32, {1, 1, 1, 2}, max_pool_ints(p));
  EXPECT_EQ(out.values, (std::vector<double>{7, 9}));
  EXPECT_FALSE(
      rejection(Kernel::kMaxPool2d, {{1, 1, 1, 3}}, {1, 1, 1, 3}, max_pool_ints(p)).empty());
}

TEST(MaxPool2d, RandomAttributesMatchLoops) {
  std::mt19937 rng(44);
  std::uniform_int_distribution<int64_t> kernel(1, 4), stride(1, 3), dilation(1, 2), size(8, 13);
  std::bernoulli_distribution coin(0.5);
  for (int trial = 0; trial < 30; ++trial) {
    PoolParams p{
        .kh = kernel(rng), .kw = kernel(rng), .stride_h = stride(rng), .stride_w = stride(rng)};
    p.pad_h = std::uniform_int_distribution<int64_t>(0, p.kh / 2)(rng);
    p.pad_w = std::uniform_int_distribution<int64_t>(0, p.kw / 2)(rng);
    p.dilation_h = dilation(rng), p.dilation_w = dilation(rng), p.ceil_mode = coin(rng);
    expect_max_pool_matches_loops(random_tensor(DType::kFloat32, {2, 2, size(rng), size(rng)}, rng),
                                  p);
  }
}

TEST(MaxPool2d, PropagatesNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor x{DType::kFloat32, {1, 1, 2, 2}, {1, nan, 3, 2}};
  const HostTensor out =
      run_kernel(Kernel::kMaxPool2d, {x}, DType::kFloat32, {1, 1, 1, 1}, max_pool_ints({}));
  EXPECT_TRUE(std::isnan(out.values[0]));
}

/// x with ties (values rounded to quarters, exact in f32), and a NaN or -inf at about one place in
/// `every`.
HostTensor tied_with_specials(const Shape& shape, std::mt19937& rng, int every) {
  HostTensor x = random_tensor(DType::kFloat32, shape, rng);
  std::uniform_int_distribution<int> pick(0, every - 1);
  for (double& v : x.values) {
    v = std::round(v * 4) / 4;
    const int k = pick(rng);
    if (k == 0) v = std::numeric_limits<double>::quiet_NaN();
    if (k == 1) v = -std::numeric_limits<double>::infinity();
  }
  return x;
}

// Windows two columns apart (ResNet's 3x3 stride-2 pool; max_pool_strided.cpp, eight windows a
// vector): rows of 1 to 20 windows, whole vectors and partial ones, padded and not, ceil_mode,
// NaN in some windows (NaN out exactly there) and -inf.
TEST(MaxPool2d, WindowsTwoColumnsApartMatchLoopsOnRowsOfEveryLength) {
  std::mt19937 rng(49);
  for (const PoolParams& p : windows_two_columns_apart()) {
    for (int64_t w = 5; w <= 44; w += 3) {
      const HostTensor x = tied_with_specials({2, 3, 9, w}, rng, 40);
      const Shape out_shape = pool_output_shape(x.shape, p);
      const HostTensor got =
          run_kernel(Kernel::kMaxPool2d, {x}, DType::kFloat32, out_shape, max_pool_ints(p));
      const Reference want = reference_max_pool(x, p);
      ASSERT_EQ(got.values.size(), want.values.size());
      for (std::size_t i = 0; i < want.values.size(); ++i) {
        const std::string at = "output " + std::to_string(i) + " of " + x.shape.to_string() +
                               ", ints " + ::testing::PrintToString(max_pool_ints(p));
        if (std::isnan(want.values[i])) {
          EXPECT_TRUE(std::isnan(got.values[i])) << at;
        } else {
          EXPECT_EQ(got.values[i], want.values[i]) << at;
        }
      }
    }
  }
}

/// kMaxPool2d with relu_first on x gives what kRelu then kMaxPool2d give, bit for bit: the same
/// values, zeros of the same sign, NaN where that gives NaN. x holds zeros of both signs,
/// negatives and NaNs.
void expect_relu_first_is_relu_then_pool(DType dtype, const Shape& shape, const PoolParams& p,
                                         std::mt19937& rng) {
  HostTensor x = random_tensor(dtype, shape, rng, -1.0, 1.0);
  std::uniform_int_distribution<int> pick(0, 9);
  for (double& v : x.values) {
    const int k = pick(rng);
    if (k == 0) v = -0.0;
    if (k == 1) v = 0.0;
    if (k == 2 && dtype != DType::kBFloat16) v = std::numeric_limits<double>::quiet_NaN();
  }
  const Shape out_shape = pool_output_shape(shape, p);
  const HostTensor relu = run_kernel(Kernel::kRelu, {x}, dtype, shape);
  const HostTensor want = run_kernel(Kernel::kMaxPool2d, {relu}, dtype, out_shape, max_pool_ints(p));
  std::vector<int64_t> ints = max_pool_ints(p);
  ints.push_back(1);
  const HostTensor got = run_kernel(Kernel::kMaxPool2d, {x}, dtype, out_shape, ints);
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    const double g = got.values[i], w = want.values[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << "output " << i << " of " << shape.to_string();
    } else {
      EXPECT_EQ(g, w) << "output " << i << " of " << shape.to_string();
      EXPECT_EQ(std::signbit(g), std::signbit(w)) << "output " << i << " of " << shape.to_string();
    }
  }
}

// A relu folded into its max pool (actors/compiler/call_folding.h): the 2x2 kernel's AVX2 lanes and
// scalar tails, f64 and bf16, and other windows (inside the input or padded, each tap relu'd as
// it is read).
TEST(MaxPool2d, ReluFirstIsReluThenPool) {
  std::mt19937 rng(48);
  for (int64_t w = 2; w <= 19; ++w) {
    expect_relu_first_is_relu_then_pool(DType::kFloat32, {2, 3, 6, w}, {}, rng);
  }
  expect_relu_first_is_relu_then_pool(DType::kFloat64, {2, 3, 8, 14}, {}, rng);
  expect_relu_first_is_relu_then_pool(DType::kBFloat16, {2, 3, 8, 14}, {}, rng);
  const PoolParams p{.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  expect_relu_first_is_relu_then_pool(DType::kFloat32, {2, 3, 9, 11}, p, rng);
  expect_relu_first_is_relu_then_pool(DType::kBFloat16, {2, 3, 9, 11}, p, rng);
  expect_relu_first_is_relu_then_pool(DType::kFloat32, {2, 3, 9, 37}, p, rng);
  const PoolParams inside{.kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2};
  expect_relu_first_is_relu_then_pool(DType::kFloat32, {2, 3, 9, 11}, inside, rng);
  const PoolParams overlapping{.kh = 2, .kw = 2, .stride_h = 1, .stride_w = 1};
  expect_relu_first_is_relu_then_pool(DType::kFloat64, {2, 3, 7, 10}, overlapping, rng);
}

TEST(MaxPool2d, MatchesLoopsInF64AndBf16) {
  std::mt19937 rng(45);
  const PoolParams p{
      .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .ceil_mode = true};
  expect_max_pool_matches_loops(random_tensor(DType::kFloat64, {2, 3, 8, 9}, rng), p);
  expect_max_pool_matches_loops(random_tensor(DType::kBFloat16, {2, 3, 8, 9}, rng), p);
}

TEST(MaxPool2d, RejectsOutputShapeTheAttributesDoNotGive) {
  const std::string msg =
      rejection(Kernel::kMaxPool2d, {{1, 2, 8, 8}}, {1, 2, 3, 3}, {2, 2, 2, 2, 0, 0, 1, 1, 0});
  EXPECT_TRUE(contains(msg, "max_pool2d")) << msg;
  EXPECT_TRUE(contains(msg, "[1,2,8,8]")) << msg;
  EXPECT_TRUE(contains(msg, "[1,2,4,4]")) << msg;
  EXPECT_TRUE(contains(msg, "kernel=(2,2)")) << msg;
}

TEST(MaxPool2d, RejectsPaddingOverHalfTheKernel) {
  EXPECT_FALSE(
      rejection(Kernel::kMaxPool2d, {{1, 1, 8, 8}}, {1, 1, 5, 5}, {2, 2, 2, 2, 2, 2, 1, 1, 0})
          .empty());
}

// ---- avg_pool2d ------------------------------------------------------------------------

TEST(AvgPool2d, MatchesLoopsWithoutPadding) {
  std::mt19937 rng(51);
  expect_avg_pool_matches_loops(random_tensor(DType::kFloat32, {2, 3, 8, 9}, rng), {});
  expect_avg_pool_matches_loops(random_tensor(DType::kFloat32, {1, 2, 7, 10}, rng),
                                {.kh = 3, .kw = 2, .stride_h = 1, .stride_w = 3});
}

TEST(AvgPool2d, CountIncludePadDividesByWholeWindow) {
  // Ones everywhere: a corner window holding 4 real ones out of 9 averages to 4/9.
  const HostTensor x{DType::kFloat32, {1, 1, 4, 4}, std::vector<double>(16, 1.0)};
  const PoolParams p{.kh = 3,
                     .kw = 3,
                     .stride_h = 1,
                     .stride_w = 1,
                     .pad_h = 1,
                     .pad_w = 1,
                     .count_include_pad = true};
  const HostTensor out =
      run_kernel(Kernel::kAvgPool2d, {x}, DType::kFloat32, {1, 1, 4, 4}, avg_pool_ints(p));
  EXPECT_NEAR(out.values[0], 4.0 / 9.0, 1e-6);
  EXPECT_NEAR(out.values[1], 6.0 / 9.0, 1e-6);
  EXPECT_NEAR(out.values[5], 1.0, 1e-6);
}

TEST(AvgPool2d, ExcludingPadDividesByPositionsInsideInput) {
  const HostTensor x{DType::kFloat32, {1, 1, 4, 4}, std::vector<double>(16, 1.0)};
  const PoolParams p{.kh = 3,
                     .kw = 3,
                     .stride_h = 1,
                     .stride_w = 1,
                     .pad_h = 1,
                     .pad_w = 1,
                     .count_include_pad = false};
  const HostTensor out =
      run_kernel(Kernel::kAvgPool2d, {x}, DType::kFloat32, {1, 1, 4, 4}, avg_pool_ints(p));
  for (double v : out.values) EXPECT_NEAR(v, 1.0, 1e-6);
}

TEST(AvgPool2d, CeilModeWindowPastPaddingIsNotCounted) {
  // W=6, k=3, s=2, p=1, ceil_mode: windows start at -1, 1, 3, 5. The last covers 5 (input),
  // 6 (padding) and 7 (past the padding); torch divides by 2 with count_include_pad, by 1
  // without.
  const HostTensor x{DType::kFloat32, {1, 1, 1, 6}, {1, 2, 3, 4, 5, 6}};
  PoolParams p{.kh = 1,
               .kw = 3,
               .stride_h = 1,
               .stride_w = 2,
               .pad_h = 0,
               .pad_w = 1,
               .ceil_mode = true,
               .count_include_pad = true};
  EXPECT_EQ(
      run_kernel(Kernel::kAvgPool2d, {x}, DType::kFloat32, {1, 1, 1, 4}, avg_pool_ints(p)).values,
      (std::vector<double>{1, 3, 5, 3}));
  p.count_include_pad = false;
  EXPECT_EQ(
      run_kernel(Kernel::kAvgPool2d, {x}, DType::kFloat32, {1, 1, 1, 4}, avg_pool_ints(p)).values,
      (std::vector<double>{1.5, 3, 5, 6}));
}

TEST(AvgPool2d, RandomAttributesMatchLoops) {
  std::mt19937 rng(52);
  std::uniform_int_distribution<int64_t> kernel(1, 4), stride(1, 3), size(5, 13);
  std::bernoulli_distribution coin(0.5);
  for (int trial = 0; trial < 40; ++trial) {
    PoolParams p{
        .kh = kernel(rng), .kw = kernel(rng), .stride_h = stride(rng), .stride_w = stride(rng)};
    p.pad_h = std::uniform_int_distribution<int64_t>(0, p.kh / 2)(rng);
    p.pad_w = std::uniform_int_distribution<int64_t>(0, p.kw / 2)(rng);
    p.ceil_mode = coin(rng), p.count_include_pad = coin(rng);
    expect_avg_pool_matches_loops(random_tensor(DType::kFloat32, {2, 2, size(rng), size(rng)}, rng),
                                  p);
  }
}

TEST(AvgPool2d, MatchesLoopsInF64AndBf16) {
  std::mt19937 rng(53);
  const PoolParams p{.kh = 3,
                     .kw = 2,
                     .stride_h = 2,
                     .stride_w = 2,
                     .pad_h = 1,
                     .pad_w = 1,
                     .ceil_mode = true,
                     .count_include_pad = false};
  expect_avg_pool_matches_loops(random_tensor(DType::kFloat64, {2, 3, 8, 9}, rng), p);
  expect_avg_pool_matches_loops(random_tensor(DType::kBFloat16, {2, 3, 8, 9}, rng), p);
}

TEST(AvgPool2d, RejectsOutputShapeTheAttributesDoNotGive) {
  const std::string msg =
      rejection(Kernel::kAvgPool2d, {{1, 2, 7, 7}}, {1, 2, 3, 3}, {2, 2, 2, 2, 0, 0, 1, 1});
  EXPECT_TRUE(contains(msg, "avg_pool2d")) << msg;
  EXPECT_TRUE(contains(msg, "[1,2,4,4]")) << msg;  // ceil_mode keeps the partial window
  EXPECT_TRUE(contains(msg, "ceil_mode=1")) << msg;
}

TEST(AvgPool2d, RejectsWrongNumberOfAttributes) {
  EXPECT_FALSE(
      rejection(Kernel::kAvgPool2d, {{1, 1, 4, 4}}, {1, 1, 2, 2}, {2, 2, 2, 2, 0, 0, 0}).empty());
}

}  // namespace
}  // namespace axle::testing
