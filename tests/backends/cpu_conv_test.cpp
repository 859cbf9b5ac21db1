// Tests backends/cpu/conv.cpp: kConv2d against plain double loops that follow torch's
// definition, plus the shape and attribute checks.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "tests/backends/conv_reference.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

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

// ---- conv2d ----------------------------------------------------------------------------

TEST(Conv2d, MatchesLoopsOnRandomShapes) {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int64_t> small(1, 4), size(3, 12), kernel(1, 3);
  for (int trial = 0; trial < 15; ++trial) {
    const int64_t c = small(rng);
    expect_conv_matches_loops(DType::kFloat32, {small(rng), c, size(rng), size(rng)},
                              {small(rng), c, kernel(rng), kernel(rng)}, {}, rng);
  }
}

TEST(Conv2d, AppliesStrideAndPadding) {
  std::mt19937 rng(22);
  const ConvParams p{.stride_h = 2, .stride_w = 3, .pad_h = 1, .pad_w = 2};
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 11, 13}, {4, 3, 3, 3}, p, rng);
}

TEST(Conv2d, PaddingWiderThanKernelGivesZeroBorder) {
  std::mt19937 rng(23);
  const ConvParams p{.pad_h = 3, .pad_w = 2};
  expect_conv_matches_loops(DType::kFloat32, {1, 2, 4, 5}, {3, 2, 2, 1}, p, rng);
}

TEST(Conv2d, AppliesDilation) {
  std::mt19937 rng(24);
  const ConvParams p{
      .stride_h = 1, .stride_w = 2, .pad_h = 2, .pad_w = 1, .dilation_h = 2, .dilation_w = 3};
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 12, 14}, {5, 3, 3, 2}, p, rng);
}

TEST(Conv2d, SplitsChannelsIntoGroups) {
  std::mt19937 rng(25);
  const ConvParams p{.pad_h = 1, .pad_w = 1, .groups = 3};
  expect_conv_matches_loops(DType::kFloat32, {2, 6, 9, 8}, {9, 2, 3, 3}, p, rng);
}

TEST(Conv2d, RunsDepthwiseWithGroupsEqualToChannels) {
  std::mt19937 rng(26);
  const ConvParams p{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .groups = 5};
  expect_conv_matches_loops(DType::kFloat32, {3, 5, 10, 9}, {10, 1, 3, 3}, p, rng);
}

TEST(Conv2d, HandlesNonSquareKernels) {
  std::mt19937 rng(27);
  const ConvParams p{.stride_h = 2, .stride_w = 1, .pad_h = 2, .pad_w = 0};
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 10, 7}, {4, 3, 5, 1}, p, rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 7, 10}, {4, 3, 1, 4}, {}, rng);
}

TEST(Conv2d, PointwiseKernelMatchesLoops) {
  std::mt19937 rng(28);
  expect_conv_matches_loops(DType::kFloat32, {3, 8, 5, 6}, {7, 8, 1, 1}, {}, rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 8, 5, 6}, {8, 2, 1, 1}, {.groups = 4}, rng);
}

TEST(Conv2d, RandomAttributesMatchLoops) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int64_t> one_to(1, 3), zero_to(0, 2), size(7, 14);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t groups = one_to(rng), per_group = one_to(rng);
    ConvParams p{one_to(rng), one_to(rng), zero_to(rng), zero_to(rng),
                 one_to(rng), one_to(rng), groups};
    const int64_t kh = one_to(rng), kw = one_to(rng);
    expect_conv_matches_loops(DType::kFloat32,
                              {one_to(rng), groups * per_group, size(rng), size(rng)},
                              {groups * one_to(rng), per_group, kh, kw}, p, rng);
  }
}

TEST(Conv2d, SameWidthConvolutionsMatchLoops) {
  // Unit strides and an output as wide as the input: each column-matrix row is the input
  // shifted, its padding zeroed after (im2col_shifted), including dilated and taller kernels,
  // kernels wider than the plane, and outputs shorter than the input.
  std::mt19937 rng(33);
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 12, 11}, {4, 3, 3, 3},
                            {.pad_h = 2, .pad_w = 2, .dilation_h = 2, .dilation_w = 2}, rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 9, 10}, {5, 3, 5, 3}, {.pad_h = 2, .pad_w = 1},
                            rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 2, 6, 5}, {3, 2, 3, 3}, {.pad_h = 0, .pad_w = 1},
                            rng);
  expect_conv_matches_loops(DType::kFloat32, {3, 4, 1, 17}, {6, 4, 1, 3}, {.pad_w = 1}, rng);
  expect_conv_matches_loops(DType::kFloat64, {2, 3, 8, 8}, {4, 3, 3, 3}, {.pad_h = 1, .pad_w = 1},
                            rng);
}

TEST(Conv2d, LargePlanesAreLaidOutInBlocksOfOutputRows) {
  // Column matrices past 2^19 floats are laid out and multiplied a block of output rows at a
  // time: same-width (shifted), strided, grouped, blocks that do not divide the rows evenly.
  std::mt19937 rng(38);
  expect_conv_matches_loops(DType::kFloat32, {1, 16, 48, 90}, {16, 16, 3, 3},
                            {.pad_h = 1, .pad_w = 1}, rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 64, 60, 80}, {4, 64, 3, 3},
                            {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}, rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 32, 44, 90}, {32, 16, 3, 3},
                            {.pad_h = 1, .pad_w = 1, .groups = 2}, rng);
}

TEST(Conv2d, FewerOutputThanInputChannelsMatchesLoops) {
  // The input gradient's form (tap planes summed shifted), for outputs the input's size (one run
  // over the plane per tap, the columns no output reads zeroed) and not.
  std::mt19937 rng(34);
  expect_conv_matches_loops(DType::kFloat32, {2, 8, 9, 7}, {3, 8, 5, 5}, {.pad_h = 2, .pad_w = 2},
                            rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 8, 6, 9}, {3, 8, 3, 3}, {.pad_h = 1, .pad_w = 1},
                            rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 6, 5, 5}, {2, 6, 3, 3}, {.pad_h = 1, .pad_w = 0},
                            rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 8, 7, 7}, {4, 4, 3, 3},
                            {.pad_h = 1, .pad_w = 1, .groups = 2}, rng);
}

TEST(Conv2d, SmallOutputsOfLargeKernelsMatchLoops) {
  // A weight gradient's form with few rows (the MNIST CNN's first layer: the batch as channels,
  // one image, a 3x3 output): direct sums over padded planes, every output shape up to 3x3,
  // kernel rows that end in a partial block of eight or not, groups.
  std::mt19937 rng(35);
  expect_conv_matches_loops(DType::kFloat32, {1, 6, 13, 13}, {4, 6, 13, 13},
                            {.pad_h = 1, .pad_w = 1}, rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 4, 16, 16}, {3, 4, 16, 16},
                            {.pad_h = 1, .pad_w = 1}, rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 3, 9, 20}, {3, 3, 8, 18}, {}, rng);  // 2x3
  expect_conv_matches_loops(DType::kFloat32, {3, 2, 12, 9}, {2, 2, 12, 8}, {}, rng);  // 1x2
  expect_conv_matches_loops(DType::kFloat32, {1, 5, 11, 10}, {2, 5, 9, 10},
                            {.pad_h = 0, .pad_w = 0},
                            rng);  // 3x1
  expect_conv_matches_loops(DType::kFloat32, {1, 6, 10, 10}, {4, 3, 10, 10},
                            {.pad_h = 1, .pad_w = 1, .groups = 2}, rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 64, 28, 28}, {8, 64, 28, 28},
                            {.pad_h = 1, .pad_w = 1}, rng);
}

TEST(Conv2d, SmallOutputSumsOnlyTheWindow) {
  // An infinity just past some windows' right edge, inside a kernel row's last block of eight:
  // the outputs whose windows miss it stay finite (a masked lane read as 0 would give inf * 0 =
  // NaN), the one whose window holds it is infinite, as the loops say.
  std::mt19937 rng(36);
  HostTensor x = random_tensor(DType::kFloat32, {1, 1, 10, 12}, rng);
  const HostTensor w = random_tensor(DType::kFloat32, {1, 1, 8, 10}, rng);
  x.values[11] = kInf;  // row 0, column 11: only output column 2's windows reach it
  const ConvParams p{};
  const Reference ref = reference_conv(x, w, p);
  const HostTensor out = run_kernel(Kernel::kConv2d, {x, w}, DType::kFloat32, ref.shape, p.ints());
  expect_close(out, ref, DType::kFloat32, "an infinity outside most windows");
  for (int64_t y = 0; y < 3; ++y) {
    for (int64_t col = 0; col < 3; ++col) {
      EXPECT_EQ(std::isfinite(out.values[static_cast<std::size_t>(y * 3 + col)]), col < 2 || y > 0)
          << "output " << y << ", " << col;
    }
  }
}

TEST(Conv2d, KernelsWiderThanTheirOutputMatchLoops) {
  // Receptive fields as rows (by_rows), laid out a block of kernel rows at a time: many blocks,
  // strides and dilation (which the direct small-output sums do not take), larger outputs.
  std::mt19937 rng(37);
  expect_conv_matches_loops(DType::kFloat32, {4, 24, 20, 20}, {8, 24, 18, 18}, {}, rng);
  expect_conv_matches_loops(DType::kFloat32, {1, 16, 21, 21}, {32, 16, 15, 15},
                            {.stride_h = 2, .stride_w = 2}, rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 4, 16, 16}, {4, 4, 6, 6},
                            {.pad_h = 2, .pad_w = 2, .dilation_h = 3, .dilation_w = 3}, rng);
  expect_conv_matches_loops(DType::kFloat64, {2, 6, 13, 13}, {4, 6, 13, 13},
                            {.pad_h = 1, .pad_w = 1}, rng);
  // Kernels the input plane's size (a "same" convolution's weight gradient): rows laid out as
  // shifted planes, a block of whole channels at a time.
  expect_conv_matches_loops(DType::kFloat32, {4, 24, 13, 13}, {4, 24, 13, 13},
                            {.pad_h = 1, .pad_w = 1}, rng);
  expect_conv_matches_loops(DType::kFloat32, {2, 5, 9, 11}, {3, 5, 9, 11}, {.pad_h = 2, .pad_w = 1},
                            rng);
  expect_conv_matches_loops(DType::kFloat32, {4, 4, 6, 6}, {6, 2, 6, 6},
                            {.pad_h = 1, .pad_w = 1, .groups = 2}, rng);
}

/// t [a, b, ...] as [b, a, ...].
HostTensor swap_first_dims(const HostTensor& t) {
  HostTensor out{t.dtype, t.shape, std::vector<double>(t.values.size())};
  std::swap(out.shape[0], out.shape[1]);
  const int64_t a = t.shape[0], b = t.shape[1], plane = t.shape.numel() / (a * b);
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      for (int64_t k = 0; k < plane; ++k) {
        out.values[static_cast<std::size_t>((j * a + i) * plane + k)] =
            t.values[static_cast<std::size_t>((i * b + j) * plane + k)];
      }
    }
  }
  return out;
}

/// kConv2d with `layout` (x, w and the output stored with dims 0 and 1 swapped for bits 1, 2 and
/// 4) against the loops on the values as they are meant.
void expect_swapped_conv_matches_loops(DType dtype, const Shape& x_shape, const Shape& w_shape,
                                       const ConvParams& p, int64_t layout, std::mt19937& rng) {
  const HostTensor x = random_tensor(dtype, x_shape, rng);
  const HostTensor w = random_tensor(dtype, w_shape, rng);
  const Reference ref = reference_conv(x, w, p);
  std::vector<int64_t> ints = p.ints();
  ints.push_back(layout);
  Shape out_shape = ref.shape;
  if (layout & 4) std::swap(out_shape[0], out_shape[1]);
  HostTensor out = run_kernel(Kernel::kConv2d,
                              {layout & 1 ? swap_first_dims(x) : x,
                               layout & 2 ? swap_first_dims(w) : w},
                              dtype, out_shape, ints);
  if (layout & 4) out = swap_first_dims(out);
  expect_close(out, ref, dtype,
               "layout " + std::to_string(layout) + ", x " + x_shape.to_string() + ", w " +
                   w_shape.to_string());
}

TEST(Conv2d, SwappedLayoutsMatchLoops) {
  // The weight gradient's transposes folded into the call: its forms (receptive fields as rows,
  // plane-sized kernels as shifted planes, direct sums for small outputs) read and write the
  // swapped buffers in place; other forms lay them out first.
  std::mt19937 rng(38);
  for (int64_t layout = 0; layout < 8; ++layout) {
    expect_swapped_conv_matches_loops(DType::kFloat32, {6, 5, 9, 9}, {4, 5, 9, 9},
                                      {.pad_h = 1, .pad_w = 1}, layout, rng);
    expect_swapped_conv_matches_loops(DType::kFloat32, {4, 6, 12, 12}, {3, 6, 8, 10},
                                      {.pad_h = 1, .pad_w = 0}, layout, rng);
    expect_swapped_conv_matches_loops(DType::kFloat32, {1, 8, 12, 12}, {5, 8, 12, 12},
                                      {.pad_h = 1, .pad_w = 1}, layout, rng);
    expect_swapped_conv_matches_loops(DType::kFloat32, {2, 3, 7, 8}, {4, 3, 3, 3},
                                      {.stride_h = 2, .pad_h = 1, .pad_w = 1}, layout, rng);
    expect_swapped_conv_matches_loops(DType::kFloat64, {3, 4, 7, 7}, {2, 4, 7, 7},
                                      {.pad_h = 1, .pad_w = 1}, layout, rng);
  }
}

TEST(Conv2d, RejectsSwappedLayoutWithGroupsOrUnknownBits) {
  const std::string msg = rejection(Kernel::kConv2d, {{4, 1, 5, 5}, {4, 2, 3, 3}}, {1, 4, 3, 3},
                                    {1, 1, 0, 0, 1, 1, 2, 1});
  EXPECT_TRUE(contains(msg, "groups = 1")) << msg;
  EXPECT_FALSE(rejection(Kernel::kConv2d, {{1, 4, 5, 5}, {4, 4, 3, 3}}, {1, 4, 3, 3},
                         {1, 1, 0, 0, 1, 1, 1, 8})
                   .empty());
}

/// kConv2d with a bias b (a folded add) gives kConv2d then kAdd of b as [1, O, 1, 1], bit for bit.
void expect_bias_is_conv_then_add(DType dtype, const Shape& x_shape, const Shape& w_shape,
                                  const ConvParams& p, int64_t layout, std::mt19937& rng) {
  const HostTensor x = random_tensor(dtype, x_shape, rng);
  const HostTensor w = random_tensor(dtype, w_shape, rng);
  const HostTensor b = random_tensor(dtype, {w_shape[0]}, rng);
  const Shape out_shape = reference_conv(x, w, p).shape;
  std::vector<int64_t> ints = p.ints();
  if (layout != 0) ints.push_back(layout);
  Shape stored = out_shape;
  if (layout & 4) std::swap(stored[0], stored[1]);
  const HostTensor x_in = layout & 1 ? swap_first_dims(x) : x;
  const HostTensor w_in = layout & 2 ? swap_first_dims(w) : w;
  const HostTensor conv = run_kernel(Kernel::kConv2d, {x_in, w_in}, dtype, stored, ints);
  const HostTensor b_planes{dtype, layout & 4 ? Shape{w_shape[0], 1, 1, 1} : Shape{1, w_shape[0], 1, 1},
                            b.values};
  const HostTensor want = run_kernel(Kernel::kAdd, {conv, b_planes}, dtype, stored);
  const HostTensor got = run_kernel(Kernel::kConv2d, {x_in, w_in, b}, dtype, stored, ints);
  EXPECT_EQ(got.values, want.values) << "x " << x_shape.to_string() << ", w "
                                     << w_shape.to_string() << ", layout " << layout;
}

TEST(Conv2d, BiasIsTheConvolutionThenTheAdd) {
  // Every form: im2col (the bias added per image), shifted tap sums, receptive fields as rows,
  // small outputs, swapped layouts, f64.
  std::mt19937 rng(40);
  expect_bias_is_conv_then_add(DType::kFloat32, {3, 2, 10, 10}, {5, 2, 3, 3},
                               {.pad_h = 1, .pad_w = 1}, 0, rng);
  expect_bias_is_conv_then_add(DType::kFloat32, {2, 6, 7, 9}, {4, 6, 3, 3}, {.stride_h = 2}, 0,
                               rng);
  expect_bias_is_conv_then_add(DType::kFloat32, {2, 8, 6, 6}, {3, 8, 3, 3},
                               {.pad_h = 1, .pad_w = 1}, 0, rng);
  expect_bias_is_conv_then_add(DType::kFloat32, {4, 5, 9, 9}, {3, 5, 9, 9},
                               {.pad_h = 1, .pad_w = 1}, 7, rng);
  expect_bias_is_conv_then_add(DType::kFloat32, {1, 6, 12, 12}, {3, 6, 12, 12},
                               {.pad_h = 1, .pad_w = 1}, 0, rng);
  expect_bias_is_conv_then_add(DType::kFloat32, {2, 3, 7, 8}, {4, 3, 3, 3}, {.pad_h = 1}, 5, rng);
  expect_bias_is_conv_then_add(DType::kFloat64, {2, 3, 8, 8}, {4, 3, 3, 3},
                               {.pad_h = 1, .pad_w = 1}, 0, rng);
}

TEST(Conv2d, RejectsBiasOfOtherSizeOrBf16) {
  EXPECT_TRUE(contains(rejection(Kernel::kConv2d, {{1, 2, 5, 5}, {4, 2, 3, 3}, {3}}, {1, 4, 3, 3},
                                 {1, 1, 0, 0, 1, 1, 1}),
                       "one value per output channel"));
  EXPECT_FALSE(rejection(Kernel::kConv2d, {{1, 2, 5, 5}, {4, 2, 3, 3}, {4}}, {1, 4, 3, 3},
                         {1, 1, 0, 0, 1, 1, 1}, DType::kBFloat16)
                   .empty());
}

TEST(Conv2d, MatchesLoopsInF64) {
  std::mt19937 rng(30);
  const ConvParams p{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1, .groups = 2};
  expect_conv_matches_loops(DType::kFloat64, {2, 4, 9, 11}, {6, 2, 3, 3}, p, rng);
}

TEST(Conv2d, MatchesLoopsInBf16) {
  std::mt19937 rng(31);
  const ConvParams p{.stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 1, .dilation_h = 2};
  expect_conv_matches_loops(DType::kBFloat16, {2, 16, 9, 11}, {6, 16, 3, 3}, p, rng);
}

TEST(Conv2d, Bf16AccumulatesInF32) {
  // 1000 channels of 1 * (1 + 2^-7): exact in f32 (1007.8125, stored as bf16 1008); a bf16
  // running sum would lose the 2^-7 terms once past 64.
  const HostTensor x{DType::kBFloat16, {1, 1000, 1, 1}, std::vector<double>(1000, 1.0)};
  const HostTensor w{DType::kBFloat16, {2, 1000, 1, 1}, std::vector<double>(2000, 1.0 + 1.0 / 128)};
  const HostTensor out =
      run_kernel(Kernel::kConv2d, {x, w}, DType::kBFloat16, {1, 2, 1, 1}, ConvParams{}.ints());
  EXPECT_EQ(out.values, (std::vector<double>{1008.0, 1008.0}));
}

TEST(Conv2d, EmptyBatchGivesEmptyOutput) {
  std::mt19937 rng(32);
  expect_conv_matches_loops(DType::kFloat32, {0, 3, 5, 5}, {2, 3, 3, 3}, {}, rng);
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

}  // namespace
}  // namespace axle::testing
