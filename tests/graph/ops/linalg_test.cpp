// Tests graph/ops/linalg.cpp by value: matmul (every rank, batch broadcasting), linear, conv2d
// (stride, padding, dilation, groups) and max / avg pooling, executed on each runtime
// (tests/graph/test_runtime.h) and compared with plain double-precision loops; and a small MLP
// forward traced as one graph. Inputs come from std::mt19937 with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

// torch.nn.functional.conv2d in double: x [N, C, H, W], w [O, C / groups, KH, KW].
Ref conv2d_ref(const Ref& x, const Ref& w, const Ref* bias, const Conv2dOptions& o,
               std::vector<double>& scale) {
  const int64_t h = x.dims[2], wd = x.dims[3];
  const int64_t group_in = w.dims[1], kh = w.dims[2], kw = w.dims[3];
  const int64_t group_out = w.dims[0] / o.groups;
  const int64_t oh = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
  const int64_t ow = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
  Ref out{{x.dims[0], w.dims[0], oh, ow}, {}};
  for_each_index(out.dims, [&](const Dims& i) {
    const int64_t group = i[1] / group_out;
    double acc = bias ? bias->values[i[1]] : 0.0;
    double magnitude = std::abs(acc);
    for (int64_t c = 0; c < group_in; ++c) {
      for (int64_t ky = 0; ky < kh; ++ky) {
        for (int64_t kx = 0; kx < kw; ++kx) {
          const int64_t y = i[2] * o.stride[0] - o.padding[0] + ky * o.dilation[0];
          const int64_t xx = i[3] * o.stride[1] - o.padding[1] + kx * o.dilation[1];
          if (y < 0 || y >= h || xx < 0 || xx >= wd) continue;
          const double term = at(x, {i[0], group * group_in + c, y, xx}) * at(w, {i[1], c, ky, kx});
          acc += term;
          magnitude += std::abs(term);
        }
      }
    }
    out.values.push_back(acc);
    scale.push_back(magnitude);
  });
  return out;
}

// torch's pooling_output_shape (the spec; with ceil_mode a last window must start inside the
// input or the left padding).
int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0);
  int64_t out = span / stride + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

// A pooling size given as one value (both dims) or two.
Dims pair_of(const std::vector<int64_t>& v) { return v.size() == 1 ? Dims{v[0], v[0]} : v; }

// max_pool2d (avg = false) or avg_pool2d as torch computes them, windows walked tap by tap.
Ref pool_ref(const Ref& x, const Pool2dOptions& o, bool avg) {
  const Dims k = pair_of(o.kernel_size);
  const Dims s = o.stride.empty() ? k : pair_of(o.stride);
  const Dims p = pair_of(o.padding);
  const Dims d = avg ? Dims{1, 1} : pair_of(o.dilation);
  const int64_t h = x.dims[2], w = x.dims[3];
  Ref out{{x.dims[0], x.dims[1], pool_output_size(h, k[0], p[0], s[0], d[0], o.ceil_mode),
           pool_output_size(w, k[1], p[1], s[1], d[1], o.ceil_mode)},
          {}};
  for_each_index(out.dims, [&](const Dims& i) {
    const int64_t y0 = i[2] * s[0] - p[0], x0 = i[3] * s[1] - p[1];
    double best = -std::numeric_limits<double>::infinity(), total = 0;
    int64_t inside = 0;
    for (int64_t ky = 0; ky < k[0]; ++ky) {
      for (int64_t kx = 0; kx < k[1]; ++kx) {
        const int64_t y = y0 + ky * d[0], xx = x0 + kx * d[1];
        if (y < 0 || y >= h || xx < 0 || xx >= w) continue;
        const double v = at(x, {i[0], i[1], y, xx});
        best = std::max(best, v);
        total += v;
        ++inside;
      }
    }
    // count_include_pad counts the padding but not what lies past it (a ceil_mode window).
    const int64_t padded =
        (std::min(y0 + k[0], h + p[0]) - y0) * (std::min(x0 + k[1], w + p[1]) - x0);
    const double divisor = static_cast<double>(o.count_include_pad ? padded : inside);
    out.values.push_back(avg ? total / divisor : best);
  });
  return out;
}

// ---- Matmul and linear -----------------------------------------------------------------------

::testing::AssertionResult matmul_matches(std::mt19937& rng, const Dims& da, const Dims& db,
                                          DType dtype = DType::kFloat32, Tolerance tol = kTolF32) {
  const Ref a = random_ref(rng, da, -1, 1, dtype);
  const Ref b = random_ref(rng, db, -1, 1, dtype);
  std::vector<double> scale;
  const Ref want = matmul_ref(a, b, scale);
  return matches(matmul(on_device(a, dtype), on_device(b, dtype)), dtype, want, tol, scale);
}

TEST_F(OpsValue, MatmulOfTwoVectorsIsTheirDotProduct) {
  std::mt19937 rng(71);
  EXPECT_TRUE(matmul_matches(rng, {7}, {7}));
}

TEST_F(OpsValue, MatmulPromotesAVectorOperandAndDropsItsDim) {
  std::mt19937 rng(72);
  EXPECT_TRUE(matmul_matches(rng, {4}, {4, 3}));
  EXPECT_TRUE(matmul_matches(rng, {3, 4}, {4}));
  EXPECT_TRUE(matmul_matches(rng, {2, 3, 4}, {4}));
  EXPECT_TRUE(matmul_matches(rng, {4}, {2, 4, 3}));
}

TEST_F(OpsValue, MatmulOfRandomMatrices) {
  std::mt19937 rng(73);
  for (int trial = 0; trial < 4; ++trial) {
    const Dims d = random_dims(rng, 3, 9);
    EXPECT_TRUE(matmul_matches(rng, {d[0], d[1]}, {d[1], d[2]}));
  }
  EXPECT_TRUE(matmul_matches(rng, {33, 65}, {65, 17}));  // past Eigen's small-size paths
}

TEST_F(OpsValue, MatmulBroadcastsBatchDims) {
  std::mt19937 rng(74);
  EXPECT_TRUE(matmul_matches(rng, {2, 1, 3, 4}, {5, 4, 2}));
  EXPECT_TRUE(matmul_matches(rng, {3, 4}, {2, 4, 5}));
  EXPECT_TRUE(matmul_matches(rng, {3, 2, 4}, {4, 5}));
}

TEST_F(OpsValue, MmMultipliesMatricesAndRefusesOtherRanks) {
  std::mt19937 rng(76);
  const Ref a = random_ref(rng, {5, 7}, -1, 1), b = random_ref(rng, {7, 3}, -1, 1);
  std::vector<double> scale;
  const Ref want = matmul_ref(a, b, scale);
  EXPECT_TRUE(matches(mm(on_device(a), on_device(b)), DType::kFloat32, want, kTolF32, scale));
  EXPECT_TRUE(matches(on_device(a).mm(on_device(b)), DType::kFloat32, want, kTolF32, scale));
  const Ref batch = random_ref(rng, {2, 5, 7}, -1, 1);
  try {
    (void)mm(on_device(batch), on_device(b));
    ADD_FAILURE() << "mm of a 3-d operand did not throw";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("mm"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32[2,5,7]"), std::string::npos) << e.what();
  }
}

// libtorch's methods trace the free functions of their names: the same values, shapes, dtypes.
TEST_F(OpsValue, TensorMethodsAreTheFreeFunctions) {
  std::mt19937 rng(77);
  const Tensor x = on_device(random_ref(rng, {3, 4, 2}, -1, 1));
  const Tensor m = on_device(random_ref(rng, {4, 5}, -1, 1));
  const auto same = [](const Tensor& got, const Tensor& want) {
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_EQ(got.dtype(), want.dtype());
    EXPECT_EQ(got.to_vector<double>(), want.to_vector<double>());
  };
  same(x.transpose(0, 2), transpose(x, 0, 2));
  same(m.t(), transpose(m, 0, 1));
  same(x.permute({2, 0, 1}), permute(x, {2, 0, 1}));
  same(x.reshape({6, 4}), reshape(x, {6, 4}));
  same(x.view({-1, 2}), view(x, {-1, 2}));
  same(x.flatten(1), flatten(x, 1));
  same(x.unsqueeze(1), unsqueeze(x, 1));
  same(x.unsqueeze(0).squeeze(0), x);
  same(x.sum(), sum(x));
  same(x.sum({1}, true), sum(x, {1}, true));
  same(x.mean({0, 2}), mean(x, {0, 2}));
  same(x.argmax(1), argmax(x, 1));
  same(m.matmul(m.t()), matmul(m, transpose(m, 0, 1)));
  same(x.amax({1}), amax(x, {1}));
  same(x.amin({}, true), amin(x, {}, true));
  same(x.softmax(-1), softmax(x, -1));
  same(x.log_softmax(1), log_softmax(x, 1));
  same(x.abs().log(), log(abs(x)));
  same(x.exp(), exp(x));
  same(x.abs().sqrt(), sqrt(abs(x)));
  same(x.neg(), neg(x));
  same(x.relu(), relu(x));
  same(x.sigmoid(), sigmoid(x));
  same(x.tanh(), tanh(x));
  same(x.pow(3.0), pow(x, 3.0));
  same(x.eq(x), eq(x, x));
  EXPECT_EQ(x.contiguous().impl(), x.impl());
  EXPECT_EQ(x.sizes(), x.shape());
  EXPECT_EQ(x.scalar_type(), kFloat32);
  const Tensor counts = cast(x.argmax(1), kInt32);
  EXPECT_EQ(counts.pow(2).dtype(), kInt32);      // an integer power keeps the integers
  EXPECT_EQ(counts.pow(2.0).dtype(), kFloat32);  // a floating one makes them f32, as torch
  same(counts.pow(2), pow(counts, 2));
  same(x.to(kFloat64), cast(x, DType::kFloat64));
  same(x.to(DType::kBFloat16), cast(x, DType::kBFloat16));
  EXPECT_EQ(x.to(kFloat32).impl(), x.impl());  // already f32: the tensor itself
  EXPECT_EQ(x.cpu().values<double>(), x.to_vector<double>());
  const Tensor v = on_device(random_ref(rng, {4}, -1, 1));
  same(v.t(), v);  // as torch: t() of a vector is the vector
  EXPECT_THROW((void)x.t(), ShapeError);
}

// libtorch's dtype names are axle's dtypes; the deprecated short names still name them.
TEST(DTypeNames, LibtorchNamesAreTheSameTypes) {
  static_assert(kFloat32 == DType::kFloat32 && kFloat == kFloat32 && DType::kFloat == kFloat32);
  static_assert(kFloat64 == DType::kFloat64 && kDouble == kFloat64);
  static_assert(kBFloat16 == DType::kBFloat16);
  static_assert(kInt32 == DType::kInt32 && kInt == kInt32);
  static_assert(kInt64 == DType::kInt64 && kLong == kInt64 && DType::kLong == kInt64);
  static_assert(kBool == DType::kBool);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  static_assert(DType::kF32 == kFloat32 && DType::kF64 == kFloat64 && DType::kBF16 == kBFloat16 &&
                DType::kI32 == kInt32 && DType::kI64 == kInt64);
#pragma GCC diagnostic pop
  EXPECT_EQ(dtype_name(kLong), "s64");
  EXPECT_EQ(dtype_name(DType::kBFloat16), "bf16");
}

TEST_F(OpsValue, MatmulInF64) {
  std::mt19937 rng(75);
  EXPECT_TRUE(matmul_matches(rng, {2, 3, 6}, {6, 4}, DType::kFloat64, kTolF64));
}

TEST_F(OpsValue, LinearIsXTimesWeightTransposedPlusBias) {
  std::mt19937 rng(76);
  const Ref x = random_ref(rng, {2, 3, 6}, -1, 1);
  const Ref w = random_ref(rng, {5, 6}, -1, 1);
  const Ref b = random_ref(rng, {5}, -1, 1);
  std::vector<double> scale;
  const Ref product = matmul_ref(x, permute_ref(w, {1, 0}), scale);
  EXPECT_TRUE(
      matches(linear(on_device(x), on_device(w)), DType::kFloat32, product, kTolF32, scale));
  for (std::size_t i = 0; i < scale.size(); ++i) scale[i] += std::abs(b.values[i % 5]);
  EXPECT_TRUE(matches(linear(on_device(x), on_device(w), on_device(b)), DType::kFloat32,
                      zip(product, b, std::plus<>()), kTolF32, scale));
}

// ---- Convolution and pooling -----------------------------------------------------------------

// conv2d of random x [n, c, h, w] and weight [o, c / groups, kh, kw] (and bias [o]) against the
// reference.
::testing::AssertionResult conv_matches(uint32_t seed, const Dims& x_dims, const Dims& w_dims,
                                        const Conv2dOptions& options, bool with_bias) {
  std::mt19937 rng(seed);
  const Ref x = random_ref(rng, x_dims, -1, 1);
  const Ref w = random_ref(rng, w_dims, -1, 1);
  const Ref b = random_ref(rng, {w_dims[0]}, -1, 1);
  std::vector<double> scale;
  const Ref want = conv2d_ref(x, w, with_bias ? &b : nullptr, options, scale);
  const Tensor got =
      conv2d(on_device(x), on_device(w), with_bias ? on_device(b) : Tensor{}, options);
  return matches(got, DType::kFloat32, want, kTolF32, scale);
}

TEST_F(OpsValue, Conv2dWithDefaultOptionsAndBias) {
  EXPECT_TRUE(conv_matches(81, {2, 3, 7, 6}, {4, 3, 3, 3}, {}, true));
}

TEST_F(OpsValue, Conv2dAppliesStrideAndPadding) {
  Conv2dOptions options;
  options.stride = {2, 3};
  options.padding = {1, 2};
  EXPECT_TRUE(conv_matches(82, {2, 3, 9, 8}, {4, 3, 3, 2}, options, false));
}

TEST_F(OpsValue, Conv2dAppliesDilation) {
  Conv2dOptions options;
  options.dilation = {2, 3};
  options.padding = {2, 1};
  EXPECT_TRUE(conv_matches(83, {1, 2, 8, 9}, {3, 2, 3, 2}, options, true));
}

TEST_F(OpsValue, Conv2dSplitsChannelsIntoGroups) {
  Conv2dOptions options;
  options.groups = 2;
  options.padding = {1, 1};
  EXPECT_TRUE(conv_matches(84, {2, 4, 5, 5}, {6, 2, 3, 3}, options, true));
}

TEST_F(OpsValue, Conv2dDepthwiseWithStride) {
  Conv2dOptions options;
  options.groups = 3;
  options.stride = {2, 2};
  EXPECT_TRUE(conv_matches(85, {1, 3, 7, 7}, {3, 1, 3, 3}, options, false));
}

::testing::AssertionResult pool_matches(uint32_t seed, const Dims& x_dims, const Pool2dOptions& o,
                                        bool avg) {
  std::mt19937 rng(seed);
  const Ref x = random_ref(rng, x_dims, -3, 3);
  const Tensor got = avg ? avg_pool2d(on_device(x), o) : max_pool2d(on_device(x), o);
  return matches(got, DType::kFloat32, pool_ref(x, o, avg), avg ? kTolF32 : kExact);
}

TEST_F(OpsValue, MaxPool2dTakesEachWindowsMaximum) {
  EXPECT_TRUE(pool_matches(91, {2, 3, 6, 8}, {.kernel_size = {2}}, false));
  EXPECT_TRUE(pool_matches(92, {1, 2, 7, 7}, {.kernel_size = {3, 2}, .stride = {1, 2}}, false));
}

TEST_F(OpsValue, MaxPool2dWithPaddingAndDilation) {
  EXPECT_TRUE(pool_matches(93, {2, 2, 9, 8},
                           {.kernel_size = {3}, .stride = {2}, .padding = {1}, .dilation = {2, 1}},
                           false));
}

TEST_F(OpsValue, MaxPool2dCeilModeKeepsTheLastPartialWindow) {
  EXPECT_TRUE(pool_matches(94, {1, 2, 7, 6}, {.kernel_size = {2}, .ceil_mode = true}, false));
  EXPECT_TRUE(pool_matches(95, {1, 1, 6, 6},
                           {.kernel_size = {3}, .stride = {2}, .padding = {1}, .ceil_mode = true},
                           false));
}

TEST_F(OpsValue, AvgPool2dCountsPaddingByDefault) {
  EXPECT_TRUE(
      pool_matches(96, {2, 3, 7, 6}, {.kernel_size = {3}, .stride = {2}, .padding = {1}}, true));
}

// torch's avg_pool2d of an int64 tensor sums in int64 and divides toward zero; the expected
// values are what torch 1.13 gives.
TEST_F(OpsValue, AvgPool2dOfS64DividesTowardZeroAsTorch) {
  const auto pool = [&](const Ref& x, const Pool2dOptions& o) {
    return avg_pool2d(on_device(x, DType::kInt64), o);
  };
  EXPECT_TRUE(matches(pool(Ref{{1, 1, 2, 2}, {1, 2, 3, 4}}, {.kernel_size = {2}}), DType::kInt64,
                      Ref{{1, 1, 1, 1}, {2}}, kExact));  // 10 / 4
  EXPECT_TRUE(matches(pool(Ref{{1, 1, 2, 2}, {-1, -2, -3, -4}}, {.kernel_size = {2}}),
                      DType::kInt64, Ref{{1, 1, 1, 1}, {-2}}, kExact));  // -10 / 4
  EXPECT_TRUE(
      matches(pool(Ref{{1, 1, 2, 3}, {1, 2, 3, 4, 5, 7}}, {.kernel_size = {2}, .stride = {1}}),
              DType::kInt64, Ref{{1, 1, 1, 2}, {3, 4}}, kExact));
  EXPECT_TRUE(
      matches(pool(Ref{{1, 1, 2, 2}, {-1, -2, -3, -5}}, {.kernel_size = {2}, .padding = {1}}),
              DType::kInt64, Ref{{1, 1, 2, 2}, {0, 0, 0, -1}}, kExact));
  EXPECT_TRUE(matches(pool(Ref{{1, 1, 2, 2}, {1, 2, 3, 5}},
                           {.kernel_size = {2}, .padding = {1}, .count_include_pad = false}),
                      DType::kInt64, Ref{{1, 1, 2, 2}, {1, 2, 3, 5}}, kExact));
}

TEST_F(OpsValue, AvgPool2dExcludesPaddingWhenAsked) {
  EXPECT_TRUE(pool_matches(
      97, {2, 3, 7, 6},
      {.kernel_size = {3}, .stride = {2}, .padding = {1}, .count_include_pad = false}, true));
}

// H = W = 6, kernel 3, stride 2, padding 1: the last ceil_mode window starts at 5 and covers 5..7,
// of which 5..6 are input or padding and 7 is past the padding; torch divides by 2 x 2, not 3 x 3.
TEST_F(OpsValue, AvgPool2dCeilModeWindowsCountPaddingButNotBeyond) {
  for (bool include_pad : {true, false}) {
    EXPECT_TRUE(pool_matches(98, {1, 2, 6, 6},
                             {.kernel_size = {3},
                              .stride = {2},
                              .padding = {1},
                              .ceil_mode = true,
                              .count_include_pad = include_pad},
                             true))
        << "count_include_pad " << include_pad;
  }
}

// ---- A long mixed graph ----------------------------------------------------------------------

// linear -> relu -> linear -> log_softmax -> gather of the targets -> mean, traced as one graph,
// run by mark_step, every stage compared with the reference.
void check_mlp_forward(DType dtype, Tolerance tol) {
  std::mt19937 rng(121);
  const Ref x = random_ref(rng, {8, 6}, -1, 1, dtype);
  const Ref w1 = random_ref(rng, {10, 6}, -0.5, 0.5, dtype);
  const Ref b1 = random_ref(rng, {10}, -0.5, 0.5, dtype);
  const Ref w2 = random_ref(rng, {4, 10}, -0.5, 0.5, dtype);
  const Ref b2 = random_ref(rng, {4}, -0.5, 0.5, dtype);
  const Ref targets = random_ints(rng, {8, 1}, 0, 3);

  const Tensor hidden =
      relu(linear(on_device(x, dtype), on_device(w1, dtype), on_device(b1, dtype)));
  const Tensor logits = linear(hidden, on_device(w2, dtype), on_device(b2, dtype));
  const Tensor picked = gather(log_softmax(logits, 1), 1, on_device(targets, DType::kInt64));
  const Tensor loss = mean(picked);
  sync_step();

  // Compared on |result| alone: with these ranges the products do not cancel enough to need the
  // sum of |terms| that matmul_ref also returns.
  std::vector<double> unused_scale;
  const Ref ref_hidden =
      map(zip(matmul_ref(x, permute_ref(w1, {1, 0}), unused_scale), b1, std::plus<>()),
          [](double v) { return std::max(v, 0.0); });
  const Ref ref_logits =
      zip(matmul_ref(ref_hidden, permute_ref(w2, {1, 0}), unused_scale), b2, std::plus<>());
  const Ref ref_picked = gather_ref(softmax_ref(ref_logits, 1, true), 1, targets);
  EXPECT_TRUE(matches(logits, dtype, ref_logits, tol));
  EXPECT_TRUE(matches(picked, dtype, ref_picked, tol));
  EXPECT_TRUE(matches(loss, dtype, Ref{{}, {mean_of(ref_picked.values)}}, tol));
}

TEST_F(OpsValue, MlpForwardMatchesReferenceInF32) { check_mlp_forward(DType::kFloat32, kTolF32); }

TEST_F(OpsValue, MlpForwardMatchesReferenceInF64) { check_mlp_forward(DType::kFloat64, kTolF64); }

}  // namespace
}  // namespace axle::testing
