// Tests graph/autograd/conv_grad.cpp: the gradients of conv2d (stride, padding, dilation,
// groups), max_pool2d and avg_pool2d against central finite differences in f64 on random inputs
// (see tests/graph/grad_check.h); relu followed by max_pool2d (whose gradient is masked on the
// pooled output) against finite differences and, bit for bit, a double reference loop.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "axle/graph/dump.h"

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

// ResNet's strided forms on even sizes, where the stride skips the padded input's last row and
// column: the weight gradient's convolution takes the input cut (1x1), or padded more before
// than after (3x3, 7x7), to give the kernel's taps alone.
TEST_F(LinalgGrad, Conv2dWithStridesThatSkipThePaddedInputsLastRows) {
  struct Form {
    int64_t kernel, pad, dilation;
  };
  unsigned seed = 20;
  for (const Form& f : {Form{1, 0, 1}, Form{3, 1, 1}, Form{7, 3, 1}, Form{3, 2, 2}}) {
    Conv2dOptions options;
    options.stride = {2, 2};
    options.padding = {f.pad, f.pad};
    options.dilation = {f.dilation, f.dilation};
    expect_conv_gradients({2, 2, 8, 10}, {3, 2, f.kernel, f.kernel}, options, false, seed++);
  }
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

void expect_conv_transpose_gradients(const Shape& x, const Shape& w,
                                     const ConvTranspose2dOptions& options, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<GradArg> args{random_arg(rng, x), random_arg(rng, w),
                            random_arg(rng, {w[1] * options.groups})};
  EXPECT_TRUE(
      gradients_match([&](Args t) { return conv_transpose2d(t[0], t[1], t[2], options); }, args))
      << "x " << x.to_string() << ", w " << w.to_string();
}

// Strides with output padding, groups, and an output padding of the dilation or more (x's
// gradient then has windows past x's end, and w's gradient taps past the kernel's).
TEST_F(LinalgGrad, ConvTranspose2d) {
  expect_conv_transpose_gradients({2, 3, 4, 5}, {3, 2, 3, 3},
                                  {.stride = {2}, .padding = {1}, .output_padding = {1, 0}}, 30);
  expect_conv_transpose_gradients({1, 4, 3, 4}, {4, 3, 3, 2},
                                  {.stride = {2, 3}, .padding = {0, 1}, .groups = 2}, 31);
  expect_conv_transpose_gradients({1, 2, 4, 4}, {2, 2, 2, 3},
                                  {.stride = {3, 1}, .output_padding = {2, 1}, .dilation = {1, 2}},
                                  32);
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

TEST_F(LinalgGrad, MaxPool2dOfRelu) {
  std::mt19937 rng(17);
  Pool2dOptions options;
  options.kernel_size = {2, 2};
  EXPECT_TRUE(gradients_match([&](Args t) { return max_pool2d(relu(t[0] * 1.5), options); },
                              {away_from_zero(rng, {2, 3, 4, 6})}));
}

TEST_F(LinalgGrad, MaxPool2dOfReluWithOverlapAndPadding) {
  std::mt19937 rng(18);
  Pool2dOptions options;
  options.kernel_size = {3, 3};
  options.stride = {2, 2};
  options.padding = {1, 1};
  options.ceil_mode = true;
  EXPECT_TRUE(gradients_match([&](Args t) { return max_pool2d(relu(t[0]), options); },
                              {away_from_zero(rng, {1, 2, 7, 6})}));
}

// A conv bias under relu and pooling (the CNN's layers): its gradient is summed over the pooled
// gradient, with and without relu, overlapping windows too.
TEST_F(LinalgGrad, Conv2dBiasUnderReluAndMaxPool2d) {
  std::mt19937 rng(22);
  Conv2dOptions conv;
  conv.padding = {1, 1};
  Pool2dOptions two;
  two.kernel_size = {2, 2};
  Pool2dOptions overlapping;
  overlapping.kernel_size = {3, 3};
  overlapping.stride = {2, 2};
  overlapping.padding = {1, 1};
  for (const Pool2dOptions& pool : {two, overlapping}) {
    for (bool with_relu : {true, false}) {
      EXPECT_TRUE(gradients_match(
          [&](Args t) {
            const Tensor y = conv2d(t[0], t[1], t[2], conv);
            return max_pool2d(with_relu ? relu(y) : y, pool);
          },
          {random_arg(rng, {2, 2, 6, 5}), random_arg(rng, {3, 2, 3, 3}), random_arg(rng, {3})}));
    }
  }
}

TEST_F(LinalgGrad, Conv2dBiasGradientUnderMaxPool2dSumsThePooledGradient) {
  std::mt19937 rng(23);
  const Tensor x = make_arg(random_arg(rng, {2, 3, 8, 8}));
  const Tensor w = make_arg(random_arg(rng, {4, 3, 3, 3}));
  const Tensor b = make_arg(random_arg(rng, {4}));
  b.requires_grad_();
  Conv2dOptions conv;
  conv.padding = {1, 1};
  Pool2dOptions pool;
  pool.kernel_size = {2, 2};
  sum(max_pool2d(relu(conv2d(x, w, b, conv)), pool)).backward();
  const std::string graph = tensors_text({b.grad()});
  // It needs neither the full-size gradient nor anything of the activation's size but the
  // forward's own nodes.
  EXPECT_EQ(graph.find("max_pool2d_backward("), std::string::npos) << graph;
  EXPECT_NE(graph.find("[2,4,4,4] max_pool2d("), std::string::npos) << graph;
}

// relu's gradient times max_pool2d's, from plain loops over relu(x): each window's gradient goes
// to its first maximum (or last NaN; padding never wins), then is kept where x > 0.
std::vector<float> relu_pool_grad_reference(const std::vector<float>& x, const Shape& shape,
                                            const std::vector<float>& g, const Shape& out,
                                            const Pool2dOptions& o) {
  const int64_t planes = shape[0] * shape[1], h = shape[2], w = shape[3];
  const int64_t oh = out[2], ow = out[3];
  const std::vector<int64_t> stride = o.stride.empty() ? o.kernel_size : o.stride;
  std::vector<double> sums(x.size(), 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t at = -1;
        for (int64_t a = 0; a < o.kernel_size[0]; ++a) {
          for (int64_t b = 0; b < o.kernel_size[1]; ++b) {
            const int64_t r = i * stride[0] - o.padding[0] + a;
            const int64_t c = j * stride[1] - o.padding[1] + b;
            if (r < 0 || r >= h || c < 0 || c >= w) continue;
            const int64_t k = (p * h + r) * w + c;
            const double v = x[k] < 0 ? 0.0 : x[k];
            if (at < 0 || v > best || std::isnan(v)) best = v, at = k;
          }
        }
        sums[at] += g[(p * oh + i) * ow + j];
      }
    }
  }
  std::vector<float> grad(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    grad[k] = x[k] > 0 ? static_cast<float>(sums[k]) : 0.0f;
  }
  return grad;
}

void expect_relu_pool_grad_exact(const Shape& shape, const Pool2dOptions& options, unsigned seed) {
  // Few distinct values, so windows tie; zeros of both signs, negative windows and NaNs.
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, 9);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float values[] = {-2.0f, -1.0f, -0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 3.0f, nan};
  std::vector<double> host(static_cast<std::size_t>(shape.numel()));
  for (double& v : host) v = values[pick(rng)];
  for (std::size_t k = 0; k < 8 && k < host.size(); ++k) host[k] = -1.0;  // a negative window
  const Tensor x = cast(tensor(host, shape), DType::kFloat32);
  x.requires_grad_();
  const Tensor out = max_pool2d(relu(x), options);
  // Integer weights keep the reference's double sums exact in f32.
  std::uniform_int_distribution<int> weight(-3, 3);
  std::vector<double> w(static_cast<std::size_t>(out.numel()));
  for (double& v : w) v = weight(rng);
  sum(mul(out, cast(tensor(w, out.shape()), DType::kFloat32))).backward();

  // The backward graph masks the pooled gradient: no comparison of x's size is left.
  const std::string graph = tensors_text({x.grad()});
  EXPECT_EQ(graph.find(shape.to_string() + " gt("), std::string::npos) << graph;

  std::vector<float> xf(host.begin(), host.end()), wf(w.begin(), w.end());
  const std::vector<float> expected = relu_pool_grad_reference(xf, shape, wf, out.shape(), options);
  const std::vector<float> got = x.grad().to_vector<float>();
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(expected[k]))
        << "element " << k << ": " << got[k] << ", expected " << expected[k] << " (x " << xf[k]
        << ")";
  }
}

TEST_F(LinalgGrad, MaxPool2dOfReluMatchesReluTimesPoolGradientExactly) {
  Pool2dOptions options;
  options.kernel_size = {2, 2};
  expect_relu_pool_grad_exact({2, 3, 6, 10}, options, 19);
  expect_relu_pool_grad_exact({1, 2, 5, 7}, options, 20);  // odd sides: the last row is no window's
}

TEST_F(LinalgGrad, MaxPool2dOfReluWithOverlapMatchesReluTimesPoolGradientExactly) {
  Pool2dOptions options;
  options.kernel_size = {3, 3};
  options.stride = {2, 1};
  options.padding = {1, 1};
  expect_relu_pool_grad_exact({2, 2, 7, 6}, options, 21);
}

}  // namespace
}  // namespace axle::testing
