// samples: the MNIST models of PyTorch/XLA's samples, with PyTorch's parameter names and layouts
// (fc1.weight [512, 784], ...), so state dicts move between axle and PyTorch.
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "axle/axle.h"

namespace axle::samples {

/// 784-512-512-10 with ReLU, ending in log_softmax.
class MnistMlp : public nn::Module {
 public:
  explicit MnistMlp(Device device = {})
      : fc1_(register_module("fc1", std::make_shared<nn::Linear>(784, 512, true, device))),
        fc2_(register_module("fc2", std::make_shared<nn::Linear>(512, 512, true, device))),
        fc3_(register_module("fc3", std::make_shared<nn::Linear>(512, 10, true, device))) {}

  Tensor forward(const Tensor& images) override {
    Tensor x = flatten(images, 1);
    x = relu(fc1_->forward(x));
    x = relu(fc2_->forward(x));
    return log_softmax(fc3_->forward(x), 1);
  }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_, fc3_;
};

/// The CNN's widths; the defaults are the sample's, smaller ones let a test train it against a
/// plain-loop reference.
struct MnistCnnSizes {
  int64_t image_side = 28;  ///< square images of one channel
  int64_t conv1_channels = 32;
  int64_t conv2_channels = 64;
  int64_t hidden = 128;
  int64_t classes = 10;
};

/// conv(1→32, 3×3, pad 1)-ReLU-maxpool 2-conv(32→64, 3×3, pad 1)-ReLU-maxpool 2-fc(3136→128)-ReLU-
/// fc(128→10), ending in log_softmax.
class MnistCnn : public nn::Module {
 public:
  explicit MnistCnn(Device device = {}, const MnistCnnSizes& sizes = {})
      : conv1_(register_module(
            "conv1", std::make_shared<nn::Conv2d>(1, sizes.conv1_channels, std::vector<int64_t>{3},
                                                  Conv2dOptions{.padding = {1, 1}}, true, device))),
        conv2_(register_module(
            "conv2", std::make_shared<nn::Conv2d>(sizes.conv1_channels, sizes.conv2_channels,
                                                  std::vector<int64_t>{3},
                                                  Conv2dOptions{.padding = {1, 1}}, true, device))),
        // Two 2×2 pools leave a quarter of the side.
        fc1_(register_module(
            "fc1", std::make_shared<nn::Linear>(
                       sizes.conv2_channels * (sizes.image_side / 4) * (sizes.image_side / 4),
                       sizes.hidden, true, device))),
        fc2_(register_module(
            "fc2", std::make_shared<nn::Linear>(sizes.hidden, sizes.classes, true, device))) {}

  Tensor forward(const Tensor& images) override {
    const Pool2dOptions pool{.kernel_size = {2, 2}};
    Tensor x = max_pool2d(relu(conv1_->forward(images)), pool);
    x = max_pool2d(relu(conv2_->forward(x)), pool);
    x = relu(fc1_->forward(flatten(x, 1)));
    return log_softmax(fc2_->forward(x), 1);
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

/// "mlp" or "cnn".
inline std::shared_ptr<nn::Module> make_mnist_model(const std::string& name, Device device = {}) {
  if (name == "mlp") return std::make_shared<MnistMlp>(device);
  if (name == "cnn") return std::make_shared<MnistCnn>(device);
  throw std::invalid_argument("--model must be mlp or cnn, not '" + name + "'");
}

}  // namespace axle::samples
