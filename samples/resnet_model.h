// samples: ResNet-18 and ResNet-50 as torchvision.models.resnet builds them (v1.5: a Bottleneck
// strides on its 3×3 conv), with torchvision's module names, layouts and initialisation, so state
// dicts move between axle and PyTorch: conv1.weight [64, 3, 7, 7], bn1.{weight, bias,
// running_mean, running_var, num_batches_tracked}, layer1.0.conv1.weight, ...,
// layer2.0.downsample.0.weight (the 1×1 projection) and downsample.1.* (its BatchNorm), fc.weight
// [1000, 512·expansion], fc.bias. Modules only trace, as every axle module.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "axle/axle.h"

namespace axle::samples {

/// What torchvision's resnet18 / resnet50 take: the block kind, the blocks per stage, the classes
/// and zero_init_residual (the last BatchNorm of each block starts at gamma 0; off by default, as
/// in torchvision).
struct ResNetConfig {
  bool bottleneck = false;                  ///< Bottleneck blocks (ResNet-50) or BasicBlocks
  std::vector<int64_t> layers{2, 2, 2, 2};  ///< blocks in layer1 … layer4
  int64_t num_classes = 1000;
  bool zero_init_residual = false;
};

/// torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]) and resnet50 (Bottleneck, [3, 4, 6, 3]);
/// throws std::invalid_argument for another name.
inline ResNetConfig resnet_config(const std::string& name) {
  if (name == "resnet18") return ResNetConfig{};
  if (name == "resnet50") return ResNetConfig{.bottleneck = true, .layers = {3, 4, 6, 3}};
  throw std::invalid_argument("the model must be resnet18 or resnet50, not '" + name + "'");
}

namespace resnet_detail {

inline std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                        int64_t padding, Device device) {
  return std::make_shared<nn::Conv2d>(
      in, out, std::vector<int64_t>{kernel},
      Conv2dOptions{.stride = {stride, stride}, .padding = {padding, padding}}, /*bias=*/false,
      device);
}

inline std::shared_ptr<nn::BatchNorm2d> bn(int64_t channels, Device device) {
  return std::make_shared<nn::BatchNorm2d>(channels, 1e-5, 0.1, device);
}

}  // namespace resnet_detail

/// torchvision's BasicBlock: 3×3 conv (stride) - BN - ReLU - 3×3 conv - BN, plus the input (or
/// its `downsample` projection), then ReLU. Output channels: planes.
class BasicBlock : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  /// `downsample` may be null (the identity).
  BasicBlock(int64_t inplanes, int64_t planes, int64_t stride,
             std::shared_ptr<nn::Sequential> downsample, Device device)
      : conv1_(
            register_module("conv1", resnet_detail::conv(inplanes, planes, 3, stride, 1, device))),
        bn1_(register_module("bn1", resnet_detail::bn(planes, device))),
        conv2_(register_module("conv2", resnet_detail::conv(planes, planes, 3, 1, 1, device))),
        bn2_(register_module("bn2", resnet_detail::bn(planes, device))),
        downsample_(downsample ? register_module("downsample", std::move(downsample)) : nullptr) {}

  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1_->forward(conv1_->forward(x)));
    out = bn2_->forward(conv2_->forward(out));
    return relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::Conv2d> conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn2_;
  std::shared_ptr<nn::Sequential> downsample_;
};

/// torchvision's Bottleneck (ResNet v1.5): 1×1 conv to `planes` - BN - ReLU - 3×3 conv (stride)
/// - BN - ReLU - 1×1 conv to 4·planes - BN, plus the input (or its `downsample` projection), then
/// ReLU.
class Bottleneck : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  Bottleneck(int64_t inplanes, int64_t planes, int64_t stride,
             std::shared_ptr<nn::Sequential> downsample, Device device)
      : conv1_(register_module("conv1", resnet_detail::conv(inplanes, planes, 1, 1, 0, device))),
        bn1_(register_module("bn1", resnet_detail::bn(planes, device))),
        conv2_(register_module("conv2", resnet_detail::conv(planes, planes, 3, stride, 1, device))),
        bn2_(register_module("bn2", resnet_detail::bn(planes, device))),
        conv3_(register_module("conv3",
                               resnet_detail::conv(planes, planes * kExpansion, 1, 1, 0, device))),
        bn3_(register_module("bn3", resnet_detail::bn(planes * kExpansion, device))),
        downsample_(downsample ? register_module("downsample", std::move(downsample)) : nullptr) {}

  Tensor forward(const Tensor& x) override {
    Tensor out = relu(bn1_->forward(conv1_->forward(x)));
    out = relu(bn2_->forward(conv2_->forward(out)));
    out = bn3_->forward(conv3_->forward(out));
    return relu(out + (downsample_ ? downsample_->forward(x) : x));
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::shared_ptr<nn::Conv2d> conv2_;
  std::shared_ptr<nn::BatchNorm2d> bn2_;
  std::shared_ptr<nn::Conv2d> conv3_;
  std::shared_ptr<nn::BatchNorm2d> bn3_;
  std::shared_ptr<nn::Sequential> downsample_;
};

/// torchvision's ResNet: images [N, 3, H, W] → logits [N, num_classes]. The stem (7×7 conv stride
/// 2, BN, ReLU, 3×3 max pool stride 2 padding 1), four stages of blocks (64, 128, 256, 512 planes;
/// the first block of stages 2-4 strides 2), a global average pool and fc. BatchNorms use batch
/// statistics and update their running ones in training mode, and use the running ones in eval().
class ResNet : public nn::Module {
 public:
  explicit ResNet(ResNetConfig config, Device device = {})
      : config_(std::move(config)),
        conv1_(register_module("conv1", resnet_detail::conv(3, 64, 7, 2, 3, device))),
        bn1_(register_module("bn1", resnet_detail::bn(64, device))) {
    if (config_.layers.size() != 4 || config_.num_classes < 1) {
      throw std::invalid_argument("ResNet: needs 4 stages and at least one class");
    }
    const int64_t expansion = config_.bottleneck ? Bottleneck::kExpansion : BasicBlock::kExpansion;
    int64_t inplanes = 64;
    for (int64_t stage = 0; stage < 4; ++stage) {
      const int64_t planes = int64_t{64} << stage;
      auto layer =
          register_module("layer" + std::to_string(stage + 1), std::make_shared<nn::Sequential>());
      for (int64_t b = 0; b < config_.layers[static_cast<std::size_t>(stage)]; ++b) {
        const int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
        std::shared_ptr<nn::Sequential> downsample;
        if (stride != 1 || inplanes != planes * expansion) {
          downsample = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
              resnet_detail::conv(inplanes, planes * expansion, 1, stride, 0, device),
              resnet_detail::bn(planes * expansion, device)});
        }
        if (config_.bottleneck) {
          layer->push_back(std::make_shared<Bottleneck>(inplanes, planes, stride,
                                                        std::move(downsample), device));
        } else {
          layer->push_back(std::make_shared<BasicBlock>(inplanes, planes, stride,
                                                        std::move(downsample), device));
        }
        inplanes = planes * expansion;
      }
      layers_.push_back(std::move(layer));
    }
    fc_ = register_module(
        "fc", std::make_shared<nn::Linear>(inplanes, config_.num_classes, true, device));
    init_weights(device);
  }

  Tensor forward(const Tensor& images) override {
    Tensor x = relu(bn1_->forward(conv1_->forward(images)));
    x = max_pool2d(x, Pool2dOptions{.kernel_size = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    for (const auto& layer : layers_) x = layer->forward(x);
    // AdaptiveAvgPool2d((1, 1)) and flatten: the mean over each channel's positions.
    return fc_->forward(mean(x, {2, 3}));
  }

  [[nodiscard]] const ResNetConfig& config() const noexcept { return config_; }

 private:
  // torchvision's initialisation: every conv weight kaiming_normal_(mode="fan_out",
  // nonlinearity="relu"), i.e. N(0, 2 / (out_channels·kh·kw)); BatchNorms weight 1, bias 0 (as
  // built); fc keeps nn.Linear's default; with zero_init_residual each block's last BN weight 0.
  // Drawn from the device's random stream in parameter order, so set_rng_state reproduces it.
  void init_weights(Device device) {
    const NoGradGuard no_grad;
    const std::string last_bn = config_.bottleneck ? ".bn3.weight" : ".bn2.weight";
    for (const auto& [name, p] : named_parameters()) {
      if (p.dim() == 4) {
        const double fan_out = static_cast<double>(p.size(0) * p.size(2) * p.size(3));
        p.copy_(randn(p.shape(), DType::kFloat32, device) * std::sqrt(2.0 / fan_out));
      } else if (config_.zero_init_residual && name.starts_with("layer") &&
                 name.ends_with(last_bn)) {
        p.copy_(zeros(p.shape(), DType::kFloat32, device));
      }
    }
  }

  ResNetConfig config_;
  std::shared_ptr<nn::Conv2d> conv1_;
  std::shared_ptr<nn::BatchNorm2d> bn1_;
  std::vector<std::shared_ptr<nn::Sequential>> layers_;
  std::shared_ptr<nn::Linear> fc_;
};

/// "resnet18" or "resnet50" (torchvision's), with 1000 classes.
inline std::shared_ptr<ResNet> make_resnet(const std::string& name, Device device = {}) {
  return std::make_shared<ResNet>(resnet_config(name), device);
}

}  // namespace axle::samples
