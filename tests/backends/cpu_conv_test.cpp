// Tests backends/cpu/conv.cpp: kConv2d, kMaxPool2d and kAvgPool2d against plain double loops
// that follow torch's definitions, plus the shape and attribute checks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

struct ConvParams {
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  [[nodiscard]] std::vector<int64_t> ints() const {
    return {stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups};
  }
};

int64_t conv_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation) {
  return (size + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

Reference reference_conv(const HostTensor& x, const HostTensor& w, const ConvParams& p) {
  const int64_t n = x.shape[0], c = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t o = w.shape[0], cg = w.shape[1], kh = w.shape[2], kw = w.shape[3];
  const int64_t oh = conv_output_size(h, kh, p.pad_h, p.stride_h, p.dilation_h);
  const int64_t ow = conv_output_size(wd, kw, p.pad_w, p.stride_w, p.dilation_w);
  const int64_t og = o / p.groups;
  Reference ref{{n, o, oh, ow}, {}, {}};
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t oc = 0; oc < o; ++oc) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t xo = 0; xo < ow; ++xo) {
          double sum = 0, scale = 0;
          for (int64_t ic = 0; ic < cg; ++ic) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t iy = y * p.stride_h - p.pad_h + i * p.dilation_h;
                const int64_t ix = xo * p.stride_w - p.pad_w + j * p.dilation_w;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t channel = (oc / og) * cg + ic;
                const double term = x.values[((b * c + channel) * h + iy) * wd + ix] *
                                    w.values[((oc * cg + ic) * kh + i) * kw + j];
                sum += term;
                scale += std::abs(term);
              }
            }
          }
          ref.values.push_back(sum);
          ref.scale.push_back(scale);
        }
      }
    }
  }
  return ref;
}

/// Runs kConv2d on random x [n, c, h, w] and w [o, c / groups, kh, kw] and compares with loops.
void expect_conv_matches_loops(DType dtype, const Shape& x_shape, const Shape& w_shape,
                               const ConvParams& p, std::mt19937& rng) {
  const HostTensor x = random_tensor(dtype, x_shape, rng);
  const HostTensor w = random_tensor(dtype, w_shape, rng);
  const Reference ref = reference_conv(x, w, p);
  const HostTensor out = run_kernel(Kernel::kConv2d, {x, w}, dtype, ref.shape, p.ints());
  expect_close(out, ref, dtype,
               "x " + x_shape.to_string() + ", w " + w_shape.to_string() + ", ints " +
                   ::testing::PrintToString(p.ints()));
}

/// torch's pooling_output_shape, ceil_mode rule included.
int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride - pad >= size) --out;  // last window starts past the input
  return out;
}

struct PoolParams {
  int64_t kh = 2, kw = 2, stride_h = 2, stride_w = 2, pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;            // max pool only
  bool ceil_mode = false, count_include_pad = true;  // count_include_pad: avg pool only
};

Shape pool_output_shape(const Shape& x, const PoolParams& p) {
  return {x[0], x[1], pool_output_size(x[2], p.kh, p.pad_h, p.stride_h, p.dilation_h, p.ceil_mode),
          pool_output_size(x[3], p.kw, p.pad_w, p.stride_w, p.dilation_w, p.ceil_mode)};
}

/// Max over the window's taps inside the input; padding is -infinity so it never wins.
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
              best = std::max(best, x.values[(plane * h + iy) * w + ix]);
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

std::vector<int64_t> max_pool_ints(const PoolParams& p) {
  return {p.kh,    p.kw,         p.stride_h,   p.stride_w, p.pad_h,
          p.pad_w, p.dilation_h, p.dilation_w, p.ceil_mode};
}
std::vector<int64_t> avg_pool_ints(const PoolParams& p) {
  return {p.kh, p.kw, p.stride_h, p.stride_w, p.pad_h, p.pad_w, p.ceil_mode, p.count_include_pad};
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

/// The std::invalid_argument message the kernel gives for all-zero inputs of these shapes, called
/// straight from the kernel table so the backend does not wrap it ("" if the kernel accepts the
/// call).
std::string rejection(Kernel kernel, const std::vector<Shape>& inputs, const Shape& out,
                      std::vector<int64_t> ints, DType dtype = DType::kF32) {
  std::vector<HostTensor> zeros;
  for (const Shape& s : inputs) zeros.push_back({dtype, s, std::vector<double>(s.numel(), 0.0)});
  return invalid_argument_message(kernel, zeros, dtype, out, std::move(ints));
}

// ---- conv2d ----------------------------------------------------------------------------

TEST(Conv2d, MatchesLoopsOnRandomShapes) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int64_t> small(1, 4), size(3, 12), kernel(1, 3);
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t c = small(rng);
    expect_conv_matches_loops(DType::kF32, {small(rng), c, size(rng), size(rng)},
                              {small(rng), c, kernel(rng), kernel(rng)}, {}, rng);
  }
}

TEST(Conv2d, AppliesStrideAndPadding) {
  std::mt19937 rng(22);
  const ConvParams p{.stride_h = 2, .stride_w = 3, .pad_h = 1, .pad_w = 2};
  expect_conv_matches_loops(DType::kF32, {2, 3, 11, 13}, {4, 3, 3, 3}, p, rng);
}

TEST(Conv2d, PaddingWiderThanKernelGivesZeroBorder) {
  std::mt19937 rng(23);
  const ConvParams p{.pad_h = 3, .pad_w = 2};
  expect_conv_matches_loops(DType::kF32, {1, 2, 4, 5}, {3, 2, 2, 1}, p, rng);
}

TEST(Conv2d, AppliesDilation) {
  std::mt19937 rng(24);
  const ConvParams p{
      .stride_h = 1, .stride_w = 2, .pad_h = 2, .pad_w = 1, .dilation_h = 2, .dilation_w = 3};
  expect_conv_matches_loops(DType::kF32, {2, 3, 12, 14}, {5, 3, 3, 2}, p, rng);
}

TEST(Conv2d, SplitsChannelsIntoGroups) {
  std::mt19937 rng(25);
  const ConvParams p{.pad_h = 1, .pad_w = 1, .groups = 3};
  expect_conv_matches_loops(DType::kF32, {2, 6, 9, 8}, {9, 2, 3, 3}, p, rng);
}

TEST(Conv2d, RunsDepthwiseWithGroupsEqualToChannels) {
  std::mt19937 rng(26);
  const ConvParams p{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .groups = 5};
  expect_conv_matches_loops(DType::kF32, {3, 5, 10, 9}, {10, 1, 3, 3}, p, rng);
}

TEST(Conv2d, HandlesNonSquareKernels) {
  std::mt19937 rng(27);
  const ConvParams p{.stride_h = 2, .stride_w = 1, .pad_h = 2, .pad_w = 0};
  expect_conv_matches_loops(DType::kF32, {2, 3, 10, 7}, {4, 3, 5, 1}, p, rng);
  expect_conv_matches_loops(DType::kF32, {2, 3, 7, 10}, {4, 3, 1, 4}, {}, rng);
}

TEST(Conv2d, PointwiseKernelMatchesLoops) {
  std::mt19937 rng(28);
  expect_conv_matches_loops(DType::kF32, {3, 8, 5, 6}, {7, 8, 1, 1}, {}, rng);
  expect_conv_matches_loops(DType::kF32, {2, 8, 5, 6}, {8, 2, 1, 1}, {.groups = 4}, rng);
}

TEST(Conv2d, RandomAttributesMatchLoops) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int64_t> one_to(1, 3), zero_to(0, 2), size(7, 14);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t groups = one_to(rng), per_group = one_to(rng);
    ConvParams p{one_to(rng), one_to(rng), zero_to(rng), zero_to(rng),
                 one_to(rng), one_to(rng), groups};
    const int64_t kh = one_to(rng), kw = one_to(rng);
    expect_conv_matches_loops(DType::kF32, {one_to(rng), groups * per_group, size(rng), size(rng)},
                              {groups * one_to(rng), per_group, kh, kw}, p, rng);
  }
}

TEST(Conv2d, MatchesLoopsInF64) {
  std::mt19937 rng(30);
  const ConvParams p{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1, .groups = 2};
  expect_conv_matches_loops(DType::kF64, {2, 4, 9, 11}, {6, 2, 3, 3}, p, rng);
}

TEST(Conv2d, MatchesLoopsInBf16) {
  std::mt19937 rng(31);
  const ConvParams p{.stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1, .dilation_h = 2};
  expect_conv_matches_loops(DType::kBF16, {2, 16, 9, 11}, {6, 16, 3, 3}, p, rng);
}

TEST(Conv2d, Bf16AccumulatesInF32) {
  // 1000 channels of 1 * (1 + 2^-7): exact in f32 (1007.8125, stored as bf16 1008); a bf16
  // running sum would lose the 2^-7 terms once past 64.
  const HostTensor x{DType::kBF16, {1, 1000, 1, 1}, std::vector<double>(1000, 1.0)};
  const HostTensor w{DType::kBF16, {2, 1000, 1, 1}, std::vector<double>(2000, 1.0 + 1.0 / 128)};
  const HostTensor out =
      run_kernel(Kernel::kConv2d, {x, w}, DType::kBF16, {1, 2, 1, 1}, ConvParams{}.ints());
  EXPECT_EQ(out.values, (std::vector<double>{1008.0, 1008.0}));
}

TEST(Conv2d, EmptyBatchGivesEmptyOutput) {
  std::mt19937 rng(32);
  expect_conv_matches_loops(DType::kF32, {0, 3, 5, 5}, {2, 3, 3, 3}, {}, rng);
}

TEST(Conv2d, RejectsChannelsNotDivisibleByGroups) {
  const std::string msg =
      rejection(Kernel::kConv2d, {{1, 5, 6, 6}, {4, 2, 3, 3}}, {1, 4, 4, 4}, {1, 1, 0, 0, 1, 1, 2});
  EXPECT_TRUE(contains(msg, "conv2d")) << msg;
  EXPECT_TRUE(contains(msg, "groups")) << msg;
  EXPECT_TRUE(contains(msg, "[1,5,6,6]")) << msg;
}

TEST(Conv2d, RejectsWeightChannelsThatDisagreeWithGroups) {
  EXPECT_FALSE(
      rejection(Kernel::kConv2d, {{1, 4, 6, 6}, {4, 4, 3, 3}}, {1, 4, 4, 4}, {1, 1, 0, 0, 1, 1, 2})
          .empty());
}

TEST(Conv2d, RejectsOutputShapeTheAttributesDoNotGive) {
  const std::string msg =
      rejection(Kernel::kConv2d, {{1, 2, 7, 7}, {3, 2, 3, 3}}, {1, 3, 5, 5}, {2, 2, 1, 1, 1, 1, 1});
  EXPECT_TRUE(contains(msg, "[1,3,4,4]")) << msg;  // what stride 2, pad 1 gives
  EXPECT_TRUE(contains(msg, "stride=(2,2)")) << msg;
}

TEST(Conv2d, RejectsKernelLargerThanPaddedInput) {
  EXPECT_FALSE(
      rejection(Kernel::kConv2d, {{1, 1, 2, 2}, {1, 1, 3, 3}}, {1, 1, 1, 1}, {1, 1, 0, 0, 1, 1, 1})
          .empty());
}

// ---- max_pool2d ------------------------------------------------------------------------

TEST(MaxPool2d, MatchesLoopsWithoutPadding) {
  std::mt19937 rng(41);
  expect_max_pool_matches_loops(random_tensor(DType::kF32, {2, 3, 8, 9}, rng), {});
  expect_max_pool_matches_loops(random_tensor(DType::kF32, {1, 2, 7, 10}, rng),
                                {.kh = 3, .kw = 2, .stride_h = 1, .stride_w = 3});
}

TEST(MaxPool2d, PaddingNeverWins) {
  // All inputs negative: a zero-padded max would put 0 on the border.
  std::mt19937 rng(42);
  const HostTensor x = random_tensor(DType::kF32, {2, 2, 6, 7}, rng, -3.0, -1.0);
  expect_max_pool_matches_loops(
      x, {.kh = 3, .kw = 3, .stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1});
}

TEST(MaxPool2d, AppliesDilation) {
  std::mt19937 rng(43);
  expect_max_pool_matches_loops(random_tensor(DType::kF32, {1, 3, 11, 12}, rng), {.kh = 3,
                                                                                  .kw = 2,
                                                                                  .stride_h = 2,
                                                                                  .stride_w = 1,
                                                                                  .pad_h = 1,
                                                                                  .pad_w = 1,
                                                                                  .dilation_h = 2,
                                                                                  .dilation_w = 3});
}

TEST(MaxPool2d, CeilModeKeepsPartialLastWindow) {
  const HostTensor x{DType::kF32, {1, 1, 1, 5}, {1, 5, 2, 4, 3}};
  const PoolParams p{.kh = 1, .kw = 2, .stride_h = 1, .stride_w = 2, .ceil_mode = true};
  const HostTensor out =
      run_kernel(Kernel::kMaxPool2d, {x}, DType::kF32, {1, 1, 1, 3}, max_pool_ints(p));
  EXPECT_EQ(out.values, (std::vector<double>{5, 4, 3}));
}

TEST(MaxPool2d, CeilModeDropsWindowStartingInRightPadding) {
  // W=3, k=2, s=2, p=1: ceil would give 3 windows, but the third starts at 3, past the input.
  const PoolParams p{
      .kh = 1, .kw = 2, .stride_h = 1, .stride_w = 2, .pad_h = 0, .pad_w = 1, .ceil_mode = true};
  const HostTensor x{DType::kF32, {1, 1, 1, 3}, {7, 8, 9}};
  const HostTensor out =
      run_kernel(Kernel::kMaxPool2d, {x}, DType::kF32, {1, 1, 1, 2}, max_pool_ints(p));
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
    expect_max_pool_matches_loops(random_tensor(DType::kF32, {2, 2, size(rng), size(rng)}, rng), p);
  }
}

TEST(MaxPool2d, PropagatesNaN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const HostTensor x{DType::kF32, {1, 1, 2, 2}, {1, nan, 3, 2}};
  const HostTensor out =
      run_kernel(Kernel::kMaxPool2d, {x}, DType::kF32, {1, 1, 1, 1}, max_pool_ints({}));
  EXPECT_TRUE(std::isnan(out.values[0]));
}

TEST(MaxPool2d, MatchesLoopsInF64AndBf16) {
  std::mt19937 rng(45);
  const PoolParams p{
      .kh = 3, .kw = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .ceil_mode = true};
  expect_max_pool_matches_loops(random_tensor(DType::kF64, {2, 3, 8, 9}, rng), p);
  expect_max_pool_matches_loops(random_tensor(DType::kBF16, {2, 3, 8, 9}, rng), p);
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
  expect_avg_pool_matches_loops(random_tensor(DType::kF32, {2, 3, 8, 9}, rng), {});
  expect_avg_pool_matches_loops(random_tensor(DType::kF32, {1, 2, 7, 10}, rng),
                                {.kh = 3, .kw = 2, .stride_h = 1, .stride_w = 3});
}

TEST(AvgPool2d, CountIncludePadDividesByWholeWindow) {
  // Ones everywhere: a corner window holding 4 real ones out of 9 averages to 4/9.
  const HostTensor x{DType::kF32, {1, 1, 4, 4}, std::vector<double>(16, 1.0)};
  const PoolParams p{.kh = 3,
                     .kw = 3,
                     .stride_h = 1,
                     .stride_w = 1,
                     .pad_h = 1,
                     .pad_w = 1,
                     .count_include_pad = true};
  const HostTensor out =
      run_kernel(Kernel::kAvgPool2d, {x}, DType::kF32, {1, 1, 4, 4}, avg_pool_ints(p));
  EXPECT_NEAR(out.values[0], 4.0 / 9.0, 1e-6);
  EXPECT_NEAR(out.values[1], 6.0 / 9.0, 1e-6);
  EXPECT_NEAR(out.values[5], 1.0, 1e-6);
}

TEST(AvgPool2d, ExcludingPadDividesByPositionsInsideInput) {
  const HostTensor x{DType::kF32, {1, 1, 4, 4}, std::vector<double>(16, 1.0)};
  const PoolParams p{.kh = 3,
                     .kw = 3,
                     .stride_h = 1,
                     .stride_w = 1,
                     .pad_h = 1,
                     .pad_w = 1,
                     .count_include_pad = false};
  const HostTensor out =
      run_kernel(Kernel::kAvgPool2d, {x}, DType::kF32, {1, 1, 4, 4}, avg_pool_ints(p));
  for (double v : out.values) EXPECT_NEAR(v, 1.0, 1e-6);
}

TEST(AvgPool2d, CeilModeWindowPastPaddingIsNotCounted) {
  // W=6, k=3, s=2, p=1, ceil_mode: windows start at -1, 1, 3, 5. The last covers 5 (input),
  // 6 (padding) and 7 (past the padding); torch divides by 2 with count_include_pad, by 1
  // without.
  const HostTensor x{DType::kF32, {1, 1, 1, 6}, {1, 2, 3, 4, 5, 6}};
  PoolParams p{.kh = 1,
               .kw = 3,
               .stride_h = 1,
               .stride_w = 2,
               .pad_h = 0,
               .pad_w = 1,
               .ceil_mode = true,
               .count_include_pad = true};
  EXPECT_EQ(run_kernel(Kernel::kAvgPool2d, {x}, DType::kF32, {1, 1, 1, 4}, avg_pool_ints(p)).values,
            (std::vector<double>{1, 3, 5, 3}));
  p.count_include_pad = false;
  EXPECT_EQ(run_kernel(Kernel::kAvgPool2d, {x}, DType::kF32, {1, 1, 1, 4}, avg_pool_ints(p)).values,
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
    expect_avg_pool_matches_loops(random_tensor(DType::kF32, {2, 2, size(rng), size(rng)}, rng), p);
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
  expect_avg_pool_matches_loops(random_tensor(DType::kF64, {2, 3, 8, 9}, rng), p);
  expect_avg_pool_matches_loops(random_tensor(DType::kBF16, {2, 3, 8, 9}, rng), p);
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
