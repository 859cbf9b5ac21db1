// Whole training steps end to end: samples/mnist_models.h's CNN, made small (conv-ReLU-maxpool
// twice, flatten, linear-ReLU-linear, log_softmax, nll_loss), trained for a few steps of
// SGD with momentum — forward, autograd backward, optimizer step, mark_step — against a
// double-precision reference of the same steps written here as plain loops, comparing the loss
// and every parameter after each step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "axle/axle.h"
#include "samples/mnist_models.h"
#include "tests/graph/nn_test_util.h"

namespace axle::testing {
namespace {

using TrainingReference = NnTest;
using Values = std::vector<double>;

constexpr int64_t kBatch = 5, kSide = 8, kClasses = 3;
constexpr int64_t kConv1Channels = 3, kConv2Channels = 4, kHidden = 6;
constexpr int64_t kFlat = kConv2Channels * (kSide / 4) * (kSide / 4);  // after two 2x2 pools
constexpr double kLr = 0.05, kMomentum = 0.9;
constexpr int kSteps = 4;

// The model runs in f32 (modules make f32 parameters, and set_parameter / load_state_dict keep
// the dtype), the reference in double. Four steps stay within a few f32 roundings (2.5e-8 at
// most, on parameters below 0.5), while each step moves the parameters by 1e-4 to 1e-2, so
// these tolerances still see a gradient or update off by a thousandth.
constexpr double kAtol = 2e-7, kRtol = 1e-6;

// ---- the reference: plain loops in double ---------------------------------------------------

// Feature maps [n, c, h, w], row-major as axle's.
struct Maps {
  int64_t n, c, h, w;
  Values v;

  Maps(int64_t n, int64_t c, int64_t h, int64_t w)
      : n(n), c(c), h(h), w(w), v(static_cast<std::size_t>(n * c * h * w), 0.0) {}
  [[nodiscard]] std::size_t index(int64_t i, int64_t ch, int64_t y, int64_t x) const {
    return static_cast<std::size_t>(((i * c + ch) * h + y) * w + x);
  }
  double& at(int64_t i, int64_t ch, int64_t y, int64_t x) { return v[index(i, ch, y, x)]; }
  [[nodiscard]] double at(int64_t i, int64_t ch, int64_t y, int64_t x) const {
    return v[index(i, ch, y, x)];
  }
  // Zero outside the map: the convolutions' padding of 1.
  [[nodiscard]] double padded(int64_t i, int64_t ch, int64_t y, int64_t x) const {
    return y < 0 || y >= h || x < 0 || x >= w ? 0.0 : at(i, ch, y, x);
  }
};

// `values` in the shape of `like`.
Maps same_shape(Maps like, Values values) {
  like.v = std::move(values);
  return like;
}

// weight [out, in, 3, 3] flat.
std::size_t kernel_index(int64_t o, int64_t in_channels, int64_t ch, int64_t ky, int64_t kx) {
  return static_cast<std::size_t>(((o * in_channels + ch) * 3 + ky) * 3 + kx);
}

// 3x3 convolution, stride 1, padding 1.
Maps conv3x3(const Maps& in, const Values& weight, const Values& bias, int64_t out_channels) {
  Maps out(in.n, out_channels, in.h, in.w);
  for (int64_t i = 0; i < in.n; ++i) {
    for (int64_t o = 0; o < out_channels; ++o) {
      for (int64_t y = 0; y < in.h; ++y) {
        for (int64_t x = 0; x < in.w; ++x) {
          double s = bias[o];
          for (int64_t ch = 0; ch < in.c; ++ch) {
            for (int64_t ky = 0; ky < 3; ++ky) {
              for (int64_t kx = 0; kx < 3; ++kx) {
                s += weight[kernel_index(o, in.c, ch, ky, kx)] *
                     in.padded(i, ch, y + ky - 1, x + kx - 1);
              }
            }
          }
          out.at(i, o, y, x) = s;
        }
      }
    }
  }
  return out;
}

struct ConvGrads {
  Values weight, bias;
  Maps input;
};

// d(loss)/d(weight, bias, input) of conv3x3 from d(loss)/d(output).
ConvGrads conv3x3_backward(const Maps& in, const Values& weight, const Maps& d_out) {
  ConvGrads g{Values(weight.size(), 0.0), Values(static_cast<std::size_t>(d_out.c), 0.0),
              Maps(in.n, in.c, in.h, in.w)};
  for (int64_t i = 0; i < in.n; ++i) {
    for (int64_t o = 0; o < d_out.c; ++o) {
      for (int64_t y = 0; y < in.h; ++y) {
        for (int64_t x = 0; x < in.w; ++x) {
          const double d = d_out.at(i, o, y, x);
          g.bias[o] += d;
          for (int64_t ch = 0; ch < in.c; ++ch) {
            for (int64_t ky = 0; ky < 3; ++ky) {
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = y + ky - 1, ix = x + kx - 1;
                if (iy < 0 || iy >= in.h || ix < 0 || ix >= in.w) continue;
                g.weight[kernel_index(o, in.c, ch, ky, kx)] += d * in.at(i, ch, iy, ix);
                g.input.at(i, ch, iy, ix) += d * weight[kernel_index(o, in.c, ch, ky, kx)];
              }
            }
          }
        }
      }
    }
  }
  return g;
}

// The reference takes the same ReLU and max-pool branches as the f32 run only if no
// pre-activation is near 0 and no pooling window has a near tie for its maximum; the smallest
// such margin seen is kept, and the test checks it.
struct Margin {
  double smallest = std::numeric_limits<double>::infinity();
  void see(double m) { smallest = std::min(smallest, m); }
};

Values relu(const Values& x, Margin& margin) {
  Values out(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    margin.see(std::abs(x[k]));
    out[k] = std::max(x[k], 0.0);
  }
  return out;
}

// d(loss)/d(x) of relu(x): passes where x > 0.
Values relu_backward(const Values& x, const Values& d_out) {
  Values d(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) d[k] = x[k] > 0 ? d_out[k] : 0.0;
  return d;
}

struct Pooled {
  Maps out;
  std::vector<std::size_t> argmax;  // per output, the input element it took
};

// 2x2 max pool, stride 2; the first maximum in row-major window order wins, as PyTorch's.
Pooled max_pool2x2(const Maps& in, Margin& margin) {
  Pooled p{Maps(in.n, in.c, in.h / 2, in.w / 2), {}};
  for (int64_t i = 0; i < in.n; ++i) {
    for (int64_t ch = 0; ch < in.c; ++ch) {
      for (int64_t y = 0; y < in.h / 2; ++y) {
        for (int64_t x = 0; x < in.w / 2; ++x) {
          double best = -std::numeric_limits<double>::infinity();
          double second = best;
          std::size_t best_at = 0;
          for (int64_t dy = 0; dy < 2; ++dy) {
            for (int64_t dx = 0; dx < 2; ++dx) {
              const double v = in.at(i, ch, 2 * y + dy, 2 * x + dx);
              if (v > best) {
                second = best;
                best = v;
                best_at = in.index(i, ch, 2 * y + dy, 2 * x + dx);
              } else {
                second = std::max(second, v);
              }
            }
          }
          // A window of ReLU zeros may tie: its gradient is zero whichever element takes it.
          if (best > 0) margin.see(best - second);
          p.out.at(i, ch, y, x) = best;
          p.argmax.push_back(best_at);
        }
      }
    }
  }
  return p;
}

// d(loss)/d(input) of max_pool2x2: each output's gradient goes to the element it took.
Maps max_pool2x2_backward(const Maps& in, const Pooled& p, const Maps& d_out) {
  Maps d(in.n, in.c, in.h, in.w);
  for (std::size_t k = 0; k < p.argmax.size(); ++k) d.v[p.argmax[k]] += d_out.v[k];
  return d;
}

// x [n, in] @ weight^T [in, out] + bias.
Values linear(const Values& x, const Values& weight, const Values& bias, int64_t n,
              int64_t in_features, int64_t out_features) {
  Values y(static_cast<std::size_t>(n * out_features));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out_features; ++o) {
      double s = bias[o];
      for (int64_t k = 0; k < in_features; ++k) {
        s += x[i * in_features + k] * weight[o * in_features + k];
      }
      y[i * out_features + o] = s;
    }
  }
  return y;
}

struct LinearGrads {
  Values weight, bias, input;
};

LinearGrads linear_backward(const Values& x, const Values& weight, const Values& d_out, int64_t n,
                            int64_t in_features, int64_t out_features) {
  LinearGrads g{Values(weight.size(), 0.0), Values(static_cast<std::size_t>(out_features), 0.0),
                Values(x.size(), 0.0)};
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t o = 0; o < out_features; ++o) {
      const double d = d_out[i * out_features + o];
      g.bias[o] += d;
      for (int64_t k = 0; k < in_features; ++k) {
        g.weight[o * in_features + k] += d * x[i * in_features + k];
        g.input[i * in_features + k] += d * weight[o * in_features + k];
      }
    }
  }
  return g;
}

// The parameters in the model's named_parameters() order.
enum Param {
  kConv1Weight,
  kConv1Bias,
  kConv2Weight,
  kConv2Bias,
  kFc1Weight,
  kFc1Bias,
  kFc2Weight,
  kFc2Bias,
  kParamCount
};

const char* const kParamNames[kParamCount] = {"conv1.weight", "conv1.bias", "conv2.weight",
                                              "conv2.bias",   "fc1.weight", "fc1.bias",
                                              "fc2.weight",   "fc2.bias"};

struct Reference {
  std::vector<Values> params;
  std::vector<Values> momentum;  // torch's momentum_buffer per parameter, empty before step 1
  Margin margin;

  // One training step on `images` [kBatch, 1, kSide, kSide]: forward, backward, SGD with
  // momentum. Returns the loss before the update.
  double step(const Maps& images, const std::vector<int64_t>& labels) {
    // Forward.
    const Maps a1 = conv3x3(images, params[kConv1Weight], params[kConv1Bias], kConv1Channels);
    const Maps r1 = same_shape(a1, relu(a1.v, margin));
    const Pooled p1 = max_pool2x2(r1, margin);
    const Maps a2 = conv3x3(p1.out, params[kConv2Weight], params[kConv2Bias], kConv2Channels);
    const Maps r2 = same_shape(a2, relu(a2.v, margin));
    const Pooled p2 = max_pool2x2(r2, margin);
    const Values& flat = p2.out.v;  // [kBatch, kFlat]: flatten keeps the (c, h, w) order
    const Values z3 = linear(flat, params[kFc1Weight], params[kFc1Bias], kBatch, kFlat, kHidden);
    const Values h3 = relu(z3, margin);
    const Values z4 = linear(h3, params[kFc2Weight], params[kFc2Bias], kBatch, kHidden, kClasses);

    // log_softmax + nll_loss (mean); d(loss)/d(z4) = (softmax - one_hot(label)) / batch.
    double loss = 0;
    Values d_z4(z4.size());
    for (int64_t i = 0; i < kBatch; ++i) {
      const double* row = &z4[i * kClasses];
      const double top = *std::max_element(row, row + kClasses);
      double z = 0;
      for (int64_t k = 0; k < kClasses; ++k) z += std::exp(row[k] - top);
      const double log_z = top + std::log(z);
      loss -= (row[labels[i]] - log_z) / kBatch;
      for (int64_t k = 0; k < kClasses; ++k) {
        d_z4[i * kClasses + k] = (std::exp(row[k] - log_z) - (k == labels[i] ? 1.0 : 0.0)) / kBatch;
      }
    }

    // Backward.
    const LinearGrads g4 = linear_backward(h3, params[kFc2Weight], d_z4, kBatch, kHidden, kClasses);
    const LinearGrads g3 = linear_backward(flat, params[kFc1Weight], relu_backward(z3, g4.input),
                                           kBatch, kFlat, kHidden);
    const Maps d_r2 = max_pool2x2_backward(r2, p2, same_shape(p2.out, g3.input));
    const ConvGrads g2 =
        conv3x3_backward(p1.out, params[kConv2Weight], same_shape(a2, relu_backward(a2.v, d_r2.v)));
    const Maps d_r1 = max_pool2x2_backward(r1, p1, g2.input);
    const ConvGrads g1 =
        conv3x3_backward(images, params[kConv1Weight], same_shape(a1, relu_backward(a1.v, d_r1.v)));
    const std::vector<Values> grads = {g1.weight, g1.bias, g2.weight, g2.bias,
                                       g3.weight, g3.bias, g4.weight, g4.bias};  // Param order

    // torch.optim.SGD with momentum: buf = g on the first step, then momentum * buf + g;
    // p -= lr * buf.
    if (momentum.empty()) {
      momentum = grads;
    } else {
      for (int k = 0; k < kParamCount; ++k) {
        for (std::size_t e = 0; e < grads[k].size(); ++e) {
          momentum[k][e] = kMomentum * momentum[k][e] + grads[k][e];
        }
      }
    }
    for (int k = 0; k < kParamCount; ++k) {
      for (std::size_t e = 0; e < params[k].size(); ++e) params[k][e] -= kLr * momentum[k][e];
    }
    return loss;
  }
};

// ---- the test -------------------------------------------------------------------------------

TEST_F(TrainingReference, CnnStepsMatchAPlainLoopReference) {
  std::mt19937 rng(7);
  // Starting values chosen here (uniform in ±1/sqrt(fan_in), as the layers' own initialisation)
  // and rounded to f32, so the model and the reference start from the same numbers.
  const std::vector<Shape> shapes = {
      {kConv1Channels, 1, 3, 3}, {kConv1Channels}, {kConv2Channels, kConv1Channels, 3, 3},
      {kConv2Channels},          {kHidden, kFlat}, {kHidden},
      {kClasses, kHidden},       {kClasses}};
  const double fan_in[kParamCount] = {9, 9, 27, 27, kFlat, kFlat, kHidden, kHidden};
  Reference ref;
  nn::StateDict start;
  for (int k = 0; k < kParamCount; ++k) {
    const double bound = 1 / std::sqrt(fan_in[k]);
    ref.params.push_back(as_f32(uniform_values(rng, shapes[k].numel(), -bound, bound)));
    start.emplace_back(kParamNames[k], f32_tensor(ref.params.back(), shapes[k]));
  }
  samples::MnistCnn model({}, samples::MnistCnnSizes{.image_side = kSide,
                                                     .conv1_channels = kConv1Channels,
                                                     .conv2_channels = kConv2Channels,
                                                     .hidden = kHidden,
                                                     .classes = kClasses});
  model.load_state_dict(start);
  const nn::StateDict params = model.named_parameters();
  ASSERT_EQ(params.size(), static_cast<std::size_t>(kParamCount));
  for (int k = 0; k < kParamCount; ++k) ASSERT_EQ(params[k].first, kParamNames[k]);

  // Continuous random pixels, all distinct, so pooling windows do not tie (the margin check at
  // the end confirms it for every window), and random labels.
  Maps images(kBatch, 1, kSide, kSide);
  images.v = as_f32(uniform_values(rng, kBatch * kSide * kSide, -1, 1));
  std::vector<int64_t> labels(kBatch);
  std::uniform_int_distribution<int64_t> label_dist(0, kClasses - 1);
  for (int64_t& label : labels) label = label_dist(rng);
  const Tensor image_tensor = f32_tensor(images.v, {kBatch, 1, kSide, kSide});
  const Tensor label_tensor = tensor(labels, {kBatch});

  optim::SGD sgd(model.parameters(), {.lr = kLr, .momentum = kMomentum});
  for (int s = 0; s < kSteps; ++s) {
    sgd.zero_grad();
    const Tensor loss = nn::nll_loss(model(image_tensor), label_tensor);
    loss.backward();
    sgd.step();
    mark_step();

    const double ref_loss = ref.step(images, labels);
    EXPECT_TRUE(all_close({loss.item()}, {ref_loss}, kAtol, kRtol)) << "loss of step " << s + 1;
    for (int k = 0; k < kParamCount; ++k) {
      EXPECT_TRUE(all_close(values(params[k].second), ref.params[k], kAtol, kRtol))
          << kParamNames[k] << " after step " << s + 1;
    }
  }
  // A hundred times f32 rounding: the f32 run took the reference's ReLU and max-pool branches.
  EXPECT_GT(ref.margin.smallest, 1e-5) << "another seed keeps clear of ReLU kinks and pool ties";
}

}  // namespace
}  // namespace axle::testing
