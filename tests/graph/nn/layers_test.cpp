// graph/nn/layers.h end to end on each runtime: parameter shapes and default initialisation,
// forward values against double-precision reference loops written here, Dropout's and
// BatchNorm2d's training and evaluation modes, and the gradients of a small model against
// central finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <random>
#include <vector>

#include "tests/graph/grad_check.h"
#include "tests/graph/nn_test_util.h"

namespace axle::testing {
namespace {

using Layers = NnTest;

// f32 results of sums of a few products: 1e-5 relative to the result, 1e-5 absolute.
constexpr double kTol = 1e-5;

double max_of(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double e : v) s += e;
  return s / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double e : v) s += (e - m) * (e - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

// Uniform in ±bound and spread over it (not constant, not a narrower range).
void expect_uniform_within(const std::vector<double>& v, double bound) {
  EXPECT_LE(max_of(v), bound);
  EXPECT_GE(min_of(v), -bound);
  EXPECT_GT(max_of(v), 0.7 * bound);
  EXPECT_LT(min_of(v), -0.7 * bound);
  // A uniform distribution on ±bound has standard deviation bound / sqrt(3).
  EXPECT_NEAR(std_of(v), bound / std::sqrt(3.0), 0.2 * bound);
}

TEST_F(Layers, LinearHasTorchsShapesAndInitialisation) {
  const nn::Linear fc(20, 30);
  EXPECT_EQ(fc.weight().shape(), (Shape{30, 20}));
  EXPECT_EQ(fc.bias().shape(), (Shape{30}));
  EXPECT_EQ(fc.weight().dtype(), DType::kFloat32);
  expect_uniform_within(values(fc.weight()), 1 / std::sqrt(20.0));
  expect_uniform_within(values(fc.bias()), 1 / std::sqrt(20.0));
  // Two layers draw different values.
  const nn::Linear other(20, 30);
  EXPECT_NE(values(fc.weight()), values(other.weight()));
}

TEST_F(Layers, Conv2dHasTorchsShapesAndInitialisation) {
  const nn::Conv2d conv(4, 6, {3, 2}, {.groups = 2});
  EXPECT_EQ(conv.weight().shape(), (Shape{6, 2, 3, 2}));
  EXPECT_EQ(conv.bias().shape(), (Shape{6}));
  const double bound = 1 / std::sqrt(2.0 * 3 * 2);  // fan_in = in / groups * kh * kw
  expect_uniform_within(values(conv.weight()), bound);
  const nn::Conv2d square(3, 8, {5});
  EXPECT_EQ(square.weight().shape(), (Shape{8, 3, 5, 5}));
  expect_uniform_within(values(square.weight()), 1 / std::sqrt(3.0 * 25));
}

TEST_F(Layers, ConvTranspose2dHasTorchsShapesAndInitialisation) {
  const nn::ConvTranspose2d up(4, 6, {3, 2}, {.groups = 2});
  EXPECT_EQ(up.weight().shape(), (Shape{4, 3, 3, 2}));
  EXPECT_EQ(up.bias().shape(), (Shape{6}));
  const double bound = 1 / std::sqrt(3.0 * 3 * 2);  // fan_in = out / groups * kh * kw (dim 1)
  expect_uniform_within(values(up.weight()), bound);
  expect_uniform_within(values(up.bias()), bound);
  EXPECT_THROW(nn::ConvTranspose2d(4, 5, {3}, {.groups = 2}), std::invalid_argument);
}

// conv_transpose2d is conv2d's adjoint: <conv_transpose2d(x, w), y> = <x, conv2d(y, w)> for the
// same stride, padding, dilation and groups; the bias adds its value on every output position.
TEST_F(Layers, ConvTranspose2dIsTheAdjointOfConv2d) {
  const std::vector<int64_t> stride{2, 3}, padding{1, 0}, dilation{1, 2}, output_padding{1, 0};
  nn::ConvTranspose2d up(4, 6, {3, 2},
                         {.stride = stride,
                          .padding = padding,
                          .output_padding = output_padding,
                          .groups = 2,
                          .dilation = dilation});
  std::mt19937 rng(3);
  const Shape x_shape{2, 4, 5, 4};
  const Tensor x = f32_tensor(as_f32(uniform_values(rng, x_shape.numel())), x_shape);
  const Tensor out = up(x);
  // (5 - 1) * 2 - 2 + 2 + 1 + 1 and (4 - 1) * 3 - 0 + 2 + 0 + 1.
  ASSERT_EQ(out.shape(), (Shape{2, 6, 10, 12}));
  const Tensor y = f32_tensor(as_f32(uniform_values(rng, out.numel())), out.shape());
  const Tensor back =
      conv2d(y, up.weight(), {},
             {.stride = stride, .padding = padding, .dilation = dilation, .groups = 2});
  ASSERT_EQ(back.shape(), x_shape);
  const Tensor bias_part = reshape(up.bias(), {1, 6, 1, 1});
  const double lhs = sum(mul(out - bias_part, y)).item();
  const double rhs = sum(mul(x, back)).item();
  EXPECT_NEAR(lhs, rhs, 1e-4 * std::max(1.0, std::abs(rhs)));
  const std::vector<double> b = values(up.bias());
  const std::vector<double> with = values(out);
  const std::vector<double> without = values(conv_transpose2d(x, up.weight(), {},
                                                              {.stride = stride,
                                                               .padding = padding,
                                                               .output_padding = output_padding,
                                                               .groups = 2,
                                                               .dilation = dilation}));
  for (std::size_t i = 0; i < with.size(); ++i) {
    ASSERT_NEAR(with[i], without[i] + b[i / (10 * 12) % 6], kTol) << "element " << i;
  }
}

TEST_F(Layers, LinearComputesXTimesWeightTransposedPlusBias) {
  nn::Linear fc(3, 4);
  std::mt19937 rng(1);
  const std::vector<double> x = as_f32(uniform_values(rng, 2 * 5 * 3));  // [2, 5, 3]
  const std::vector<double> w = values(fc.weight()), b = values(fc.bias());
  const Tensor out = fc(f32_tensor(x, {2, 5, 3}));
  EXPECT_EQ(out.shape(), (Shape{2, 5, 4}));
  std::vector<double> want;
  for (int r = 0; r < 10; ++r) {
    for (int o = 0; o < 4; ++o) {
      double acc = b[o];
      for (int i = 0; i < 3; ++i) acc += x[r * 3 + i] * w[o * 3 + i];
      want.push_back(acc);
    }
  }
  EXPECT_TRUE(all_close(values(out), want, kTol, kTol));
  nn::Linear no_bias(3, 4, false);
  const std::vector<double> w2 = values(no_bias.weight());
  const std::vector<double> row = values(no_bias(f32_tensor({1, 0, -1}, {3})));
  for (int o = 0; o < 4; ++o) EXPECT_NEAR(row[o], w2[o * 3] - w2[o * 3 + 2], kTol);
}

TEST_F(Layers, Conv2dMatchesAReferenceConvolution) {
  const int64_t n = 2, c = 4, h = 5, w = 6, out_c = 6, groups = 2, kh = 3, kw = 2;
  const std::vector<int64_t> stride{2, 1}, padding{1, 0}, dilation{1, 2};
  nn::Conv2d conv(c, out_c, {kh, kw},
                  {.stride = stride, .padding = padding, .dilation = dilation, .groups = groups});
  std::mt19937 rng(2);
  const std::vector<double> x = as_f32(uniform_values(rng, n * c * h * w));
  const std::vector<double> k = values(conv.weight()), b = values(conv.bias());
  const Tensor out = conv(f32_tensor(x, {n, c, h, w}));
  const int64_t oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
  const int64_t ow = (w + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
  ASSERT_EQ(out.shape(), (Shape{n, out_c, oh, ow}));
  const int64_t per_group_in = c / groups, per_group_out = out_c / groups;
  std::vector<double> want;
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t o = 0; o < out_c; ++o) {
      const int64_t g = o / per_group_out;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t z = 0; z < ow; ++z) {
          double acc = b[o];
          for (int64_t ci = 0; ci < per_group_in; ++ci) {
            for (int64_t i = 0; i < kh; ++i) {
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t yy = y * stride[0] - padding[0] + i * dilation[0];
                const int64_t zz = z * stride[1] - padding[1] + j * dilation[1];
                if (yy < 0 || yy >= h || zz < 0 || zz >= w) continue;
                const int64_t channel = g * per_group_in + ci;
                acc += x[((s * c + channel) * h + yy) * w + zz] *
                       k[((o * per_group_in + ci) * kh + i) * kw + j];
              }
            }
          }
          want.push_back(acc);
        }
      }
    }
  }
  EXPECT_TRUE(all_close(values(out), want, kTol, kTol));
}

TEST_F(Layers, PoolingLayersMatchReferenceLoops) {
  std::mt19937 rng(3);
  const std::vector<double> x = as_f32(uniform_values(rng, 2 * 4 * 4));  // [1, 2, 4, 4]
  nn::MaxPool2d max_pool({.kernel_size = {2, 2}});
  nn::AvgPool2d avg_pool({.kernel_size = {3, 3}, .stride = {1, 1}, .padding = {1, 1}});
  const Tensor input = f32_tensor(x, {1, 2, 4, 4});
  std::vector<double> want_max, want_avg;
  for (int ch = 0; ch < 2; ++ch) {
    auto at = [&](int i, int j) { return x[(ch * 4 + i) * 4 + j]; };
    for (int i = 0; i < 2; ++i) {
      for (int j = 0; j < 2; ++j) {
        want_max.push_back(std::max({at(2 * i, 2 * j), at(2 * i, 2 * j + 1), at(2 * i + 1, 2 * j),
                                     at(2 * i + 1, 2 * j + 1)}));
      }
    }
    for (int i = 0; i < 4; ++i) {
      for (int j = 0; j < 4; ++j) {
        double s = 0;
        for (int di = -1; di <= 1; ++di) {
          for (int dj = -1; dj <= 1; ++dj) {
            if (i + di >= 0 && i + di < 4 && j + dj >= 0 && j + dj < 4) s += at(i + di, j + dj);
          }
        }
        want_avg.push_back(s / 9);  // count_include_pad: the padding counts
      }
    }
  }
  EXPECT_TRUE(all_close(values(max_pool(input)), want_max, 0, 0));
  EXPECT_TRUE(all_close(values(avg_pool(input)), want_avg, 1e-6, 1e-6));
}

TEST_F(Layers, ActivationsAndFlattenMatchTheirDefinitions) {
  const std::vector<double> x{-3, -1.5, -0.25, 0, 0.5, 1, 2.5, 4};
  const Tensor input = f64_tensor(x, {2, 2, 2});
  std::vector<double> relu_want, erf_want, tanh_want;
  for (double v : x) {
    relu_want.push_back(std::max(v, 0.0));
    erf_want.push_back(0.5 * v * (1 + std::erf(v / std::numbers::sqrt2)));
    const double inner = std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v);
    tanh_want.push_back(0.5 * v * (1 + std::tanh(inner)));
  }
  nn::ReLU relu_layer;
  nn::GELU gelu_erf, gelu_tanh("tanh");
  EXPECT_TRUE(all_close(values(relu_layer(input)), relu_want));
  EXPECT_TRUE(all_close(values(gelu_erf(input)), erf_want, 1e-12, 1e-10));
  EXPECT_TRUE(all_close(values(gelu_tanh(input)), tanh_want, 1e-12, 1e-10));
  nn::Flatten flatten_all, flatten_front(0, 1);
  EXPECT_EQ(flatten_all(input).shape(), (Shape{2, 4}));
  EXPECT_EQ(flatten_front(input).shape(), (Shape{4, 2}));
  EXPECT_EQ(values(flatten_all(input)), x);
}

TEST_F(Layers, DropoutIsTheIdentityInEvaluation) {
  nn::Dropout dropout(0.5);
  dropout.eval();
  std::mt19937 rng(4);
  const std::vector<double> x = uniform_values(rng, 1000, 1, 2);
  EXPECT_EQ(values(dropout(f64_tensor(x, {1000}))), x);
}

TEST_F(Layers, DropoutZeroesAboutPAndScalesTheRestInTraining) {
  const double p = 0.3;
  nn::Dropout dropout(p);
  const int64_t n = 100'000;
  std::mt19937 rng(5);
  const std::vector<double> x = uniform_values(rng, n, 1, 2);
  const Tensor input = f64_tensor(x, {200, 500});
  const std::vector<double> first = values(dropout(input)), second = values(dropout(input));
  int64_t zeros = 0, scaled = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (first[i] == 0) {
      ++zeros;
    } else if (std::abs(first[i] - x[i] / (1 - p)) <= 1e-12) {
      ++scaled;
    }
  }
  EXPECT_EQ(zeros + scaled, n);
  // The zero fraction has standard deviation sqrt(p (1 - p) / n) = 0.0015.
  EXPECT_NEAR(static_cast<double>(zeros) / n, p, 0.01);
  EXPECT_NE(first, second);  // each call draws a new mask
  EXPECT_EQ(values(nn::Dropout(1.0)(input)), std::vector<double>(n, 0.0));
  EXPECT_EQ(values(nn::Dropout(0.0)(input)), x);
}

TEST_F(Layers, DropoutGradientIsTheScaledMask) {
  nn::Dropout dropout(0.25);
  std::mt19937 rng(12);
  const std::vector<double> x = uniform_values(rng, 1000, 1, 2);
  const Tensor input = f64_tensor(x, {1000});
  input.requires_grad_();
  const Tensor out = dropout(input);
  sum(out).backward();
  const std::vector<double> kept = values(out), grad = values(input.grad());
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_DOUBLE_EQ(grad[i], kept[i] == 0 ? 0.0 : 1 / 0.75) << i;
  }
}

// Per-channel batch statistics of an (N, C, H, W) array: mean and biased variance.
struct ChannelStats {
  std::vector<double> mean, var;
};

ChannelStats channel_stats(const std::vector<double>& x, int64_t n, int64_t c, int64_t hw) {
  ChannelStats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  const auto count = static_cast<double>(n * hw);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t k = 0; k < hw; ++k) s.mean[ch] += x[(i * c + ch) * hw + k] / count;
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t k = 0; k < hw; ++k) {
        const double d = x[(i * c + ch) * hw + k] - s.mean[ch];
        s.var[ch] += d * d / count;
      }
    }
  }
  return s;
}

std::vector<double> batch_norm(const std::vector<double>& x, int64_t n, int64_t c, int64_t hw,
                               const std::vector<double>& mean, const std::vector<double>& var,
                               const std::vector<double>& weight, const std::vector<double>& bias) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t k = 0; k < hw; ++k) {
        const int64_t at = (i * c + ch) * hw + k;
        y[at] = (x[at] - mean[ch]) / std::sqrt(var[ch] + 1e-5) * weight[ch] + bias[ch];
      }
    }
  }
  return y;
}

TEST_F(Layers, BatchNorm2dTrainsOnBatchStatisticsAndTracksRunningOnes) {
  const int64_t n = 4, c = 3, h = 2, w = 5;
  nn::BatchNorm2d bn(c);
  const std::vector<double> weight{1.5, -0.5, 2}, bias{0.25, 1, -3};
  bn.load_state_dict({{"weight", f32_tensor(weight, {c})}, {"bias", f32_tensor(bias, {c})}}, false);
  std::mt19937 rng(6);
  std::vector<double> running_mean(c, 0.0), running_var(c, 1.0);
  for (int step = 0; step < 2; ++step) {
    std::vector<double> x = as_f32(uniform_values(rng, n * c * h * w, -1, 3));
    const ChannelStats stats = channel_stats(x, n, c, h * w);
    const Tensor out = bn(f32_tensor(x, {n, c, h, w}));
    EXPECT_TRUE(all_close(
        values(out), batch_norm(x, n, c, h * w, stats.mean, stats.var, weight, bias), 1e-4, 1e-4))
        << step;
    // Running statistics: momentum 0.1, the unbiased variance.
    const auto count = static_cast<double>(n * h * w);
    for (int64_t ch = 0; ch < c; ++ch) {
      running_mean[ch] = 0.9 * running_mean[ch] + 0.1 * stats.mean[ch];
      running_var[ch] = 0.9 * running_var[ch] + 0.1 * stats.var[ch] * count / (count - 1);
    }
    const nn::StateDict state = bn.state_dict();
    EXPECT_TRUE(all_close(values(*nn::find(state, "running_mean")), running_mean, 1e-6, 1e-5));
    EXPECT_TRUE(all_close(values(*nn::find(state, "running_var")), running_var, 1e-6, 1e-5));
    const Tensor& tracked = *nn::find(state, "num_batches_tracked");
    EXPECT_EQ(tracked.dtype(), DType::kInt64);
    EXPECT_EQ(tracked.item(), step + 1);
  }
}

TEST_F(Layers, BatchNorm2dEvaluatesWithRunningStatisticsAndLeavesThemAlone) {
  const int64_t n = 2, c = 2, hw = 6;
  nn::BatchNorm2d bn(c);
  const std::vector<double> weight{0.5, 2}, bias{-1, 0.5}, mean{0.25, -2}, var{4, 0.5};
  bn.load_state_dict({{"weight", f32_tensor(weight, {c})},
                      {"bias", f32_tensor(bias, {c})},
                      {"running_mean", f32_tensor(mean, {c})},
                      {"running_var", f32_tensor(var, {c})},
                      {"num_batches_tracked", scalar_tensor(7, DType::kInt64)}});
  bn.eval();
  std::mt19937 rng(7);
  const std::vector<double> x = as_f32(uniform_values(rng, n * c * hw, -3, 3));
  const Tensor out = bn(f32_tensor(x, {n, c, 2, 3}));
  EXPECT_TRUE(all_close(values(out), batch_norm(x, n, c, hw, mean, var, weight, bias), 1e-5, 1e-5));
  const nn::StateDict state = bn.state_dict();
  EXPECT_EQ(values(*nn::find(state, "running_mean")), mean);
  EXPECT_EQ(values(*nn::find(state, "running_var")), var);
  EXPECT_EQ(nn::find(state, "num_batches_tracked")->item(), 7);
}

TEST_F(Layers, BatchNorm2dRejectsAnInputWithOtherChannels) {
  nn::BatchNorm2d bn(3);
  const std::string what = error_message<ShapeError>([&] { (void)bn(zeros({2, 4, 1, 1})); });
  EXPECT_TRUE(contains(what, "BatchNorm2d")) << what;
}

// As torch: one value per channel has no unbiased variance; eval mode takes it.
TEST_F(Layers, BatchNorm2dRejectsOneValuePerChannelWhenTraining) {
  nn::BatchNorm2d bn(3);
  const std::string what = error_message<ShapeError>([&] { (void)bn(zeros({1, 3, 1, 1})); });
  EXPECT_TRUE(contains(what, "more than 1 value per channel")) << what;
  EXPECT_TRUE(contains(what, "[1,3,1,1]")) << what;
  (void)bn(zeros({2, 3, 1, 1}));
  bn.eval();
  EXPECT_EQ(bn(zeros({1, 3, 1, 1})).shape(), (Shape{1, 3, 1, 1}));
}

TEST_F(Layers, LayerNormNormalisesTheTrailingDims) {
  nn::LayerNorm norm({3, 4});
  std::mt19937 rng(8);
  const std::vector<double> weight = as_f32(uniform_values(rng, 12, 0.5, 2));
  const std::vector<double> bias = as_f32(uniform_values(rng, 12));
  norm.load_state_dict(
      {{"weight", f32_tensor(weight, {3, 4})}, {"bias", f32_tensor(bias, {3, 4})}});
  const std::vector<double> x = as_f32(uniform_values(rng, 2 * 12, -2, 5));
  std::vector<double> want, plain;
  for (int r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 12; ++k) m += x[r * 12 + k] / 12;
    for (int k = 0; k < 12; ++k) v += (x[r * 12 + k] - m) * (x[r * 12 + k] - m) / 12;
    for (int k = 0; k < 12; ++k) {
      const double normalised = (x[r * 12 + k] - m) / std::sqrt(v + 1e-5);
      plain.push_back(normalised);
      want.push_back(normalised * weight[k] + bias[k]);
    }
  }
  EXPECT_TRUE(all_close(values(norm(f32_tensor(x, {2, 3, 4}))), want, 1e-5, 1e-5));
  nn::LayerNorm bare({4}, 1e-5, false);
  EXPECT_TRUE(bare.named_parameters().empty());
  // Over the last dim only: rows of 4.
  std::vector<double> want_rows;
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 4; ++k) m += x[r * 4 + k] / 4;
    for (int k = 0; k < 4; ++k) v += (x[r * 4 + k] - m) * (x[r * 4 + k] - m) / 4;
    for (int k = 0; k < 4; ++k) want_rows.push_back((x[r * 4 + k] - m) / std::sqrt(v + 1e-5));
  }
  EXPECT_TRUE(all_close(values(bare(f32_tensor(x, {2, 3, 4}))), want_rows, 1e-5, 1e-5));
}

TEST_F(Layers, EmbeddingLooksUpRowsOfItsStandardNormalTable) {
  nn::Embedding table(10, 3);
  EXPECT_EQ(table.weight().shape(), (Shape{10, 3}));
  const std::vector<double> w = values(table.weight());
  const Tensor out = table(tensor(std::vector<int64_t>{1, 9, 0, 1}, {2, 2}));
  EXPECT_EQ(out.shape(), (Shape{2, 2, 3}));
  std::vector<double> want;
  for (int64_t row : {1, 9, 0, 1}) {
    for (int k = 0; k < 3; ++k) want.push_back(w[row * 3 + k]);
  }
  EXPECT_EQ(values(out), want);
  const nn::Embedding big(100, 50);
  const std::vector<double> v = values(big.weight());
  EXPECT_NEAR(mean_of(v), 0, 0.1);
  EXPECT_NEAR(std_of(v), 1, 0.1);
}

TEST_F(Layers, EmbeddingGradientAddsUpOverRepeatedIndices) {
  nn::Embedding table(4, 2);
  const std::vector<double> c{1, 2, 3, 4, 5, 6};
  sum(table(tensor(std::vector<int64_t>{2, 0, 2}, {3})) * f32_tensor(c, {3, 2})).backward();
  EXPECT_EQ(values(table.weight().grad()), (std::vector<double>{3, 4, 0, 0, 6, 8, 0, 0}));
}

// ---- gradients ------------------------------------------------------------------------------

// The loss of Linear(4, 5) -> ReLU -> Linear(5, 3) -> cross_entropy, in double on the host.
// params: w1 [5, 4], b1 [5], w2 [3, 5], b2 [3], one after another.
double mlp_loss(const std::vector<double>& p, const std::vector<double>& x,
                const std::vector<int64_t>& target) {
  const double* w1 = p.data();
  const double* b1 = w1 + 20;
  const double* w2 = b1 + 5;
  const double* b2 = w2 + 15;
  const auto n = static_cast<int64_t>(target.size());
  double total = 0;
  for (int64_t s = 0; s < n; ++s) {
    double h[5], logits[3];
    for (int j = 0; j < 5; ++j) {
      h[j] = b1[j];
      for (int i = 0; i < 4; ++i) h[j] += w1[j * 4 + i] * x[s * 4 + i];
      h[j] = std::max(h[j], 0.0);
    }
    double top = -1e300;
    for (int k = 0; k < 3; ++k) {
      logits[k] = b2[k];
      for (int j = 0; j < 5; ++j) logits[k] += w2[k * 5 + j] * h[j];
      top = std::max(top, logits[k]);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l - top);
    total += -(logits[target[s]] - top - std::log(z));
  }
  return total / static_cast<double>(n);
}

TEST_F(Layers, SmallModelGradientsMatchFiniteDifferences) {
  nn::Sequential model({std::make_shared<nn::Linear>(4, 5), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(5, 3)});
  std::mt19937 rng(9);
  const std::vector<double> x = as_f32(uniform_values(rng, 6 * 4, -2, 2));
  const std::vector<int64_t> target{0, 2, 1, 1, 0, 2};
  const Tensor loss = nn::cross_entropy(model(f32_tensor(x, {6, 4})), tensor(target, {6}));
  loss.backward();
  std::vector<double> p, grads;
  for (const Tensor& param : model.parameters()) {
    for (double v : values(param)) p.push_back(v);
    ASSERT_TRUE(param.grad().defined());
    for (double g : values(param.grad())) grads.push_back(g);
  }
  ASSERT_EQ(p.size(), 43u);
  EXPECT_NEAR(loss.item(), mlp_loss(p, x, target), 1e-6);
  std::vector<double> want;
  for (std::size_t k = 0; k < p.size(); ++k) {
    std::vector<double> plus = p, minus = p;
    plus[k] += 1e-6;
    minus[k] -= 1e-6;
    want.push_back((mlp_loss(plus, x, target) - mlp_loss(minus, x, target)) / 2e-6);
  }
  EXPECT_TRUE(all_close(grads, want, 1e-5, 1e-4));
}

TEST_F(Layers, BatchNorm2dTrainingInputGradientMatchesFiniteDifferences) {
  nn::BatchNorm2d bn(2);
  bn.load_state_dict(
      {{"weight", f32_tensor({1.5, -0.75}, {2})}, {"bias", f32_tensor({0.5, 1}, {2})}}, false);
  std::mt19937 rng(10);
  // In f64: the f32 weight and bias promote the result.
  EXPECT_TRUE(gradients_match([&](const std::vector<Tensor>& t) { return bn(t[0]); },
                              {random_arg(rng, {3, 2, 2, 2})}));
}

// The functional form's derivative in training (two sums and one elementwise pass) for the
// input, weight and bias, over 2-, 3- and 4-d inputs; and its refusals.
TEST_F(Layers, BatchNormTrainingGradientsMatchFiniteDifferences) {
  std::mt19937 rng(12);
  for (const Shape& x : {Shape{5, 3}, Shape{2, 3, 4}, Shape{3, 2, 2, 3}}) {
    const int64_t c = x[1];
    EXPECT_TRUE(gradients_match(
        [&](const std::vector<Tensor>& t) {
          return nn::batch_norm(t[0], {}, {}, t[1], t[2], /*training=*/true);
        },
        {random_arg(rng, x), random_arg(rng, {c}, 0.5, 2), random_arg(rng, {c})}))
        << x.to_string();
    EXPECT_TRUE(gradients_match(
        [&](const std::vector<Tensor>& t) { return nn::batch_norm(t[0], {}, {}, {}, {}, true); },
        {random_arg(rng, x)}))
        << x.to_string() << " without weight and bias";
  }
  const Tensor x = zeros({2, 3, 4});
  const Tensor three = zeros({3});
  EXPECT_EQ(nn::batch_norm(x, three, ones({3})).shape(), x.shape());  // evaluation
  EXPECT_TRUE(contains(error_message<ShapeError>([&] { (void)nn::batch_norm(x, {}, {}); }),
                       "needs running_mean and running_var"));
  EXPECT_TRUE(contains(
      error_message<ShapeError>([&] { (void)nn::batch_norm(x, zeros({4}), three, {}, {}, true); }),
      "the running_mean is f32[4], expected [3]"));
  EXPECT_TRUE(contains(error_message<ShapeError>([&] { (void)nn::batch_norm(zeros({3}), {}, {}); }),
                       "must be [N, C, ...]"));
  EXPECT_TRUE(contains(error_message<ShapeError>([&] {
                         (void)nn::batch_norm(zeros({1, 3}), {}, {}, {}, {}, true);
                       }),
                       "more than 1 value per channel"));
}

TEST_F(Layers, LayerNormInputGradientMatchesFiniteDifferences) {
  nn::LayerNorm norm({2, 3});
  norm.load_state_dict({{"weight", f32_tensor({1, 2, -1, 0.5, 1.5, 3}, {2, 3})},
                        {"bias", f32_tensor({0, 1, 2, 3, 4, 5}, {2, 3})}});
  std::mt19937 rng(11);
  EXPECT_TRUE(gradients_match([&](const std::vector<Tensor>& t) { return norm(t[0]); },
                              {random_arg(rng, {2, 2, 3})}));
}

}  // namespace
}  // namespace axle::testing
