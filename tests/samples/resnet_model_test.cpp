// samples/resnet_model.h: ResNet-18 and ResNet-50 with torchvision's parameter and buffer names,
// shapes and counts (the expected lists written here from torchvision's definition), its
// initialisation, the Bottleneck's stride on the 3×3 conv, and BatchNorm's running statistics:
// updated in training mode as torch does (against a double-precision reference of the stem),
// used and left alone in eval mode.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "axle/axle.h"
#include "samples/resnet_model.h"

namespace axle::samples {
namespace {

using Entries = std::vector<std::pair<std::string, Shape>>;

// torchvision's resnet18 state_dict, in its order: each module's parameters, then its buffers,
// then its submodules'.
Entries torchvision_resnet18_state() {
  Entries e;
  auto conv = [&](const std::string& name, int64_t out, int64_t in, int64_t k) {
    e.emplace_back(name + ".weight", Shape{out, in, k, k});
  };
  auto bn = [&](const std::string& name, int64_t c) {
    e.emplace_back(name + ".weight", Shape{c});
    e.emplace_back(name + ".bias", Shape{c});
    e.emplace_back(name + ".running_mean", Shape{c});
    e.emplace_back(name + ".running_var", Shape{c});
    e.emplace_back(name + ".num_batches_tracked", Shape{});
  };
  conv("conv1", 64, 3, 7);
  bn("bn1", 64);
  conv("layer1.0.conv1", 64, 64, 3);
  bn("layer1.0.bn1", 64);
  conv("layer1.0.conv2", 64, 64, 3);
  bn("layer1.0.bn2", 64);
  conv("layer1.1.conv1", 64, 64, 3);
  bn("layer1.1.bn1", 64);
  conv("layer1.1.conv2", 64, 64, 3);
  bn("layer1.1.bn2", 64);
  conv("layer2.0.conv1", 128, 64, 3);
  bn("layer2.0.bn1", 128);
  conv("layer2.0.conv2", 128, 128, 3);
  bn("layer2.0.bn2", 128);
  conv("layer2.0.downsample.0", 128, 64, 1);
  bn("layer2.0.downsample.1", 128);
  conv("layer2.1.conv1", 128, 128, 3);
  bn("layer2.1.bn1", 128);
  conv("layer2.1.conv2", 128, 128, 3);
  bn("layer2.1.bn2", 128);
  conv("layer3.0.conv1", 256, 128, 3);
  bn("layer3.0.bn1", 256);
  conv("layer3.0.conv2", 256, 256, 3);
  bn("layer3.0.bn2", 256);
  conv("layer3.0.downsample.0", 256, 128, 1);
  bn("layer3.0.downsample.1", 256);
  conv("layer3.1.conv1", 256, 256, 3);
  bn("layer3.1.bn1", 256);
  conv("layer3.1.conv2", 256, 256, 3);
  bn("layer3.1.bn2", 256);
  conv("layer4.0.conv1", 512, 256, 3);
  bn("layer4.0.bn1", 512);
  conv("layer4.0.conv2", 512, 512, 3);
  bn("layer4.0.bn2", 512);
  conv("layer4.0.downsample.0", 512, 256, 1);
  bn("layer4.0.downsample.1", 512);
  conv("layer4.1.conv1", 512, 512, 3);
  bn("layer4.1.bn1", 512);
  conv("layer4.1.conv2", 512, 512, 3);
  bn("layer4.1.bn2", 512);
  e.emplace_back("fc.weight", Shape{1000, 512});
  e.emplace_back("fc.bias", Shape{1000});
  return e;
}

Entries entries(const nn::StateDict& state) {
  Entries out;
  for (const auto& [name, t] : state) out.emplace_back(name, t.shape());
  return out;
}

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

const Tensor& entry(const nn::StateDict& state, const std::string& name) {
  const Tensor* t = nn::find(state, name);
  if (t == nullptr) throw std::runtime_error("no " + name);
  return *t;
}

std::vector<double> values(const Tensor& t) { return t.cpu().values<double>(); }

double mean_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double std_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(ResNet, ResNet18StateDictIsTorchvisions) {
  const auto model = make_resnet("resnet18");
  const nn::StateDict state = model->state_dict();
  EXPECT_EQ(entries(state), torchvision_resnet18_state());
  for (const auto& [name, t] : state) {
    EXPECT_EQ(t.dtype(), name.ends_with("num_batches_tracked") ? DType::kInt64 : DType::kFloat32)
        << name;
  }
  Entries params;
  for (const auto& [name, shape] : torchvision_resnet18_state()) {
    if (name.ends_with(".weight") || name.ends_with(".bias")) params.emplace_back(name, shape);
  }
  EXPECT_EQ(entries(model->named_parameters()), params);
  EXPECT_EQ(parameter_count(*model), 11'689'512);  // torchvision's resnet18
}

// ResNet-50's blocks (v1.5): conv1 1×1 to planes, conv2 3×3, conv3 1×1 to 4·planes; the first
// block of every stage projects with downsample (layer1's too: 64 → 256 channels).
TEST(ResNet, ResNet50HasTorchvisionsBottlenecks) {
  const auto model = make_resnet("resnet50");
  EXPECT_EQ(parameter_count(*model), 25'557'032);  // torchvision's resnet50
  const nn::StateDict state = model->state_dict();
  EXPECT_EQ(model->named_parameters().size(), 161u);
  EXPECT_EQ(model->named_buffers().size(), 3u * 53u);  // 53 BatchNorms
  EXPECT_EQ(state.size(), 161u + 3u * 53u);
  const Entries expected = {{"layer1.0.conv1.weight", Shape{64, 64, 1, 1}},
                            {"layer1.0.conv2.weight", Shape{64, 64, 3, 3}},
                            {"layer1.0.conv3.weight", Shape{256, 64, 1, 1}},
                            {"layer1.0.bn3.running_var", Shape{256}},
                            {"layer1.0.downsample.0.weight", Shape{256, 64, 1, 1}},
                            {"layer1.0.downsample.1.num_batches_tracked", Shape{}},
                            {"layer1.2.conv1.weight", Shape{64, 256, 1, 1}},
                            {"layer2.0.conv1.weight", Shape{128, 256, 1, 1}},
                            {"layer2.0.conv2.weight", Shape{128, 128, 3, 3}},
                            {"layer2.0.downsample.0.weight", Shape{512, 256, 1, 1}},
                            {"layer2.3.conv3.weight", Shape{512, 128, 1, 1}},
                            {"layer3.5.bn3.weight", Shape{1024}},
                            {"layer4.0.downsample.0.weight", Shape{2048, 1024, 1, 1}},
                            {"layer4.2.conv3.weight", Shape{2048, 512, 1, 1}},
                            {"fc.weight", Shape{1000, 2048}},
                            {"fc.bias", Shape{1000}}};
  for (const auto& [name, shape] : expected) {
    const Tensor* t = nn::find(state, name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->shape(), shape) << name;
  }
  for (const char* absent : {"layer1.1.downsample.0.weight", "layer4.3.conv1.weight",
                             "layer3.6.conv1.weight", "layer2.1.downsample.1.weight"}) {
    EXPECT_EQ(nn::find(state, absent), nullptr) << absent;
  }
}

TEST(ResNet, OtherNamesAreRejected) {
  EXPECT_THROW((void)make_resnet("resnet34"), std::invalid_argument);
}

// kaiming_normal_(mode="fan_out", nonlinearity="relu") on convs: N(0, 2 / (out·kh·kw)); BN 1 and
// 0; fc nn.Linear's default, uniform in ±1/√512.
TEST(ResNet, InitialisationIsTorchvisions) {
  set_rng_state(3);
  const auto model = make_resnet("resnet18");
  mark_step();  // one graph for every parameter, not one per read
  const nn::StateDict state = model->state_dict();
  for (const auto& [name, out, k] : std::vector<std::tuple<std::string, int64_t, int64_t>>{
           {"conv1.weight", 64, 7},
           {"layer2.0.conv1.weight", 128, 3},
           {"layer3.0.downsample.0.weight", 256, 1},
           {"layer4.1.conv2.weight", 512, 3}}) {
    const std::vector<double> w = values(entry(state, name));
    const double want = std::sqrt(2.0 / static_cast<double>(out * k * k));
    EXPECT_NEAR(std_of(w), want, 0.05 * want) << name;
    EXPECT_NEAR(mean_of(w), 0.0, 0.1 * want) << name;
  }
  for (const auto& [name, t] : state) {
    if (name.ends_with("running_mean") ||
        (name.find("bn") != std::string::npos && name.ends_with(".bias"))) {
      for (double v : values(t)) ASSERT_EQ(v, 0.0) << name;
    }
    if (name.ends_with("running_var") ||
        (name.find("bn") != std::string::npos && name.ends_with(".weight"))) {
      for (double v : values(t)) ASSERT_EQ(v, 1.0) << name;
    }
  }
  const double bound = 1 / std::sqrt(512.0);
  for (const char* name : {"fc.weight", "fc.bias"}) {
    const std::vector<double> v = values(entry(state, name));
    EXPECT_LE(*std::max_element(v.begin(), v.end()), bound) << name;
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -bound) << name;
    EXPECT_NEAR(std_of(v), bound / std::sqrt(3.0), 0.1 * bound) << name;
  }
}

TEST(ResNet, ZeroInitResidualZeroesEachBlocksLastBatchNorm) {
  ResNetConfig basic = resnet_config("resnet18");
  basic.zero_init_residual = true;
  const ResNet model(basic);
  mark_step();
  const nn::StateDict state = model.state_dict();
  for (const char* name : {"layer1.0.bn2.weight", "layer4.1.bn2.weight"}) {
    for (double v : values(entry(state, name))) ASSERT_EQ(v, 0.0) << name;
  }
  for (const char* name : {"bn1.weight", "layer1.0.bn1.weight", "layer2.0.downsample.1.weight"}) {
    for (double v : values(entry(state, name))) ASSERT_EQ(v, 1.0) << name;
  }
}

// conv2d in double: x [n, c, h, w], weight [o, c, k, k], stride and padding.
std::vector<double> conv_reference(const std::vector<double>& x, int64_t n, int64_t c, int64_t h,
                                   int64_t w, const std::vector<double>& weight, int64_t o,
                                   int64_t k, int64_t stride, int64_t pad, int64_t& oh,
                                   int64_t& ow) {
  oh = (h + 2 * pad - k) / stride + 1;
  ow = (w + 2 * pad - k) / stride + 1;
  std::vector<double> y(static_cast<std::size_t>(n * o * oh * ow), 0.0);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t f = 0; f < o; ++f) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          double s = 0;
          for (int64_t ch = 0; ch < c; ++ch) {
            for (int64_t u = 0; u < k; ++u) {
              for (int64_t v = 0; v < k; ++v) {
                const int64_t r = i * stride - pad + u, q = j * stride - pad + v;
                if (r < 0 || r >= h || q < 0 || q >= w) continue;
                s += x[((b * c + ch) * h + r) * w + q] * weight[((f * c + ch) * k + u) * k + v];
              }
            }
          }
          y[((b * o + f) * oh + i) * ow + j] = s;
        }
      }
    }
  }
  return y;
}

// `count` values uniform in [0, 1), f32 values held in double.
std::vector<double> random_values(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  std::vector<double> x(static_cast<std::size_t>(count));
  for (double& v : x) v = uniform(rng);
  return x;
}

// An f32 tensor of `v` on the device (device data, so graphs reading it hash by its shape).
Tensor f32(const std::vector<double>& v, const Shape& shape) {
  return tensor(std::vector<float>(v.begin(), v.end()), shape);
}

// Training mode: bn1 normalises conv1's output with the batch's statistics and moves its running
// ones as torch (momentum 0.1, the unbiased variance); every BatchNorm counts the batch.
TEST(ResNet, TrainingUpdatesRunningStatisticsAsTorch) {
  set_rng_state(5);
  ResNetConfig config = resnet_config("resnet18");
  config.num_classes = 10;
  ResNet model(config);
  const int64_t n = 2, side = 20;
  const std::vector<double> x = random_values(n * 3 * side * side, 7);
  const nn::StateDict state = model.state_dict();
  const std::vector<double> weight = values(entry(state, "conv1.weight"));
  int64_t oh = 0, ow = 0;
  const std::vector<double> y = conv_reference(x, n, 3, side, side, weight, 64, 7, 2, 3, oh, ow);
  const int64_t hw = oh * ow;
  const auto count = static_cast<double>(n * hw);
  std::vector<double> want_mean(64), want_var(64);
  for (int64_t ch = 0; ch < 64; ++ch) {
    double s = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < hw; ++k) s += y[(b * 64 + ch) * hw + k];
    }
    const double m = s / count;
    double ss = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t k = 0; k < hw; ++k) {
        const double d = y[(b * 64 + ch) * hw + k] - m;
        ss += d * d;
      }
    }
    want_mean[ch] = 0.1 * m;                        // 0.9 · 0 + 0.1 · mean
    want_var[ch] = 0.9 + 0.1 * ss / (count - 1.0);  // 0.9 · 1 + 0.1 · unbiased variance
  }
  const Tensor logits = model(f32(x, Shape{n, 3, side, side}));
  EXPECT_EQ(logits.shape(), (Shape{n, 10}));
  mark_step();
  const std::vector<double> got_mean = values(entry(state, "bn1.running_mean"));
  const std::vector<double> got_var = values(entry(state, "bn1.running_var"));
  for (int64_t ch = 0; ch < 64; ++ch) {
    EXPECT_NEAR(got_mean[ch], want_mean[ch], 1e-5 + 1e-4 * std::abs(want_mean[ch])) << ch;
    EXPECT_NEAR(got_var[ch], want_var[ch], 1e-5 + 1e-4 * want_var[ch]) << ch;
  }
  // Deeper BatchNorms moved too, and every one counted one batch.
  EXPECT_NE(values(entry(state, "layer4.1.bn2.running_var")), std::vector<double>(512, 1.0));
  int counted = 0;
  for (const auto& [name, t] : state) {
    if (!name.ends_with("num_batches_tracked")) continue;
    EXPECT_EQ(t.item(), 1) << name;
    ++counted;
  }
  EXPECT_EQ(counted, 20);
  (void)model(f32(x, Shape{n, 3, side, side}));
  EXPECT_EQ(entry(state, "layer3.0.downsample.1.num_batches_tracked").item(), 2);
}

// Eval mode: the running statistics normalise, so each image's logits are the same alone or in a
// batch (in training mode they are not), and nothing in the state moves.
TEST(ResNet, EvalModeUsesTheRunningStatisticsAndKeepsThem) {
  set_rng_state(9);
  ResNetConfig config = resnet_config("resnet18");
  config.num_classes = 10;
  ResNet model(config);
  const int64_t n = 3, side = 32, image = 3 * side * side;
  const std::vector<double> x = random_values(n * image, 11);
  const Tensor images = f32(x, Shape{n, 3, side, side});
  for (int i = 0; i < 3; ++i) (void)model(images * (1.0 + i));  // running statistics move
  mark_step();  // one graph for the whole state, not one per tensor read
  const nn::StateDict state = model.state_dict();
  std::vector<std::vector<double>> before;
  for (const auto& [name, t] : state) before.push_back(values(t));

  model.eval();
  const NoGradGuard no_grad;
  const std::vector<double> batch = values(model(images));
  std::vector<double> alone;
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<double> one =
        values(model(f32(std::vector<double>(x.begin() + b * image, x.begin() + (b + 1) * image),
                         Shape{1, 3, side, side})));
    alone.insert(alone.end(), one.begin(), one.end());
  }
  ASSERT_EQ(batch.size(), alone.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    EXPECT_NEAR(batch[i], alone[i], 1e-4 * (1 + std::abs(batch[i]))) << i;
  }
  for (std::size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(values(state[i].second), before[i]) << state[i].first;
  }

  model.train();
  const std::vector<double> trained = values(model(images));
  const std::vector<double> pair = values(
      model(f32(std::vector<double>(x.begin(), x.begin() + 2 * image), Shape{2, 3, side, side})));
  double differs = 0;
  for (std::size_t i = 0; i < pair.size(); ++i) differs += std::abs(pair[i] - trained[i]);
  EXPECT_GT(differs, 1e-3);  // batch statistics: the batch changes each image's logits
}

// ResNet v1.5: a Bottleneck that strides puts the stride on its 3×3 conv, so (in eval mode,
// where positions do not mix through batch statistics) the output sees the input's odd
// positions; with the stride on the 1×1 convs (v1) it would not.
TEST(ResNet, BottleneckStridesOnItsThreeByThreeConv) {
  set_rng_state(13);
  auto downsample = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(8, 16, std::vector<int64_t>{1}, Conv2dOptions{.stride = {2, 2}},
                                   false),
      std::make_shared<nn::BatchNorm2d>(16)});
  Bottleneck block(8, 4, 2, downsample, Device{});
  block.eval();
  const NoGradGuard no_grad;
  std::vector<double> x = random_values(8 * 4 * 4, 17);
  const std::vector<double> out = values(block(f32(x, Shape{1, 8, 4, 4})));
  for (int64_t ch = 0; ch < 8; ++ch) x[(ch * 4 + 1) * 4 + 1] += 1.0;  // position (1, 1)
  const std::vector<double> moved = values(block(f32(x, Shape{1, 8, 4, 4})));
  ASSERT_EQ(out.size(), 16u * 2 * 2);
  double change = 0;
  for (std::size_t i = 0; i < out.size(); ++i) change += std::abs(moved[i] - out[i]);
  EXPECT_GT(change, 1e-3);
}

}  // namespace
}  // namespace axle::samples
