// graph/nn: layers.
#include "axle/graph/nn/layers.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "axle/graph/autograd.h"
#include "axle/graph/nn/functional.h"
#include "axle/graph/op_util.h"

namespace axle::nn {
namespace {

// Uniform in [-bound, bound) from the device's random stream.
Tensor uniform(const Shape& shape, double bound, Device device) {
  return rand(shape, DType::kFloat32, device) * (2 * bound) - bound;
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Device device) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  register_parameter("weight", uniform(Shape{out_features, in_features}, bound, device));
  register_parameter("bias", bias ? uniform(Shape{out_features}, bound, device) : Tensor());
}

Tensor Linear::forward(const Tensor& input) { return linear(input, weight(), bias()); }

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
               Conv2dOptions options, bool bias, Device device)
    : options_(std::move(options)) {
  if (kernel_size.size() == 1) kernel_size.push_back(kernel_size[0]);
  if (kernel_size.size() != 2 || options_.groups < 1 || in_channels % options_.groups != 0) {
    throw std::invalid_argument(
        fmt::format("Conv2d: kernel_size needs 1 or 2 values and groups must divide in_channels "
                    "({} channels, {} groups)",
                    in_channels, options_.groups));
  }
  const int64_t fan_in = in_channels / options_.groups * kernel_size[0] * kernel_size[1];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  register_parameter("weight", uniform(Shape{out_channels, in_channels / options_.groups,
                                             kernel_size[0], kernel_size[1]},
                                       bound, device));
  register_parameter("bias", bias ? uniform(Shape{out_channels}, bound, device) : Tensor());
}

Tensor Conv2d::forward(const Tensor& input) { return conv2d(input, weight(), bias(), options_); }

ConvTranspose2d::ConvTranspose2d(int64_t in_channels, int64_t out_channels,
                                 std::vector<int64_t> kernel_size, ConvTranspose2dOptions options,
                                 bool bias, Device device)
    : options_(std::move(options)) {
  if (kernel_size.size() == 1) kernel_size.push_back(kernel_size[0]);
  const int64_t groups = options_.groups;
  if (kernel_size.size() != 2 || groups < 1 || in_channels % groups != 0 ||
      out_channels % groups != 0) {
    throw std::invalid_argument(
        fmt::format("ConvTranspose2d: kernel_size needs 1 or 2 values and groups must divide "
                    "in_channels and out_channels ({} and {} channels, {} groups)",
                    in_channels, out_channels, groups));
  }
  // PyTorch's fan_in reads the weight's dim 1, here the output channels of a group.
  const int64_t fan_in = out_channels / groups * kernel_size[0] * kernel_size[1];
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  register_parameter(
      "weight", uniform(Shape{in_channels, out_channels / groups, kernel_size[0], kernel_size[1]},
                        bound, device));
  register_parameter("bias", bias ? uniform(Shape{out_channels}, bound, device) : Tensor());
}

Tensor ConvTranspose2d::forward(const Tensor& input) {
  return conv_transpose2d(input, weight(), bias(), options_);
}

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0 && p <= 1)) throw std::invalid_argument(fmt::format("Dropout: p = {}", p));
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p_, is_training()); }

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, Device device)
    : num_features_(num_features), eps_(eps), momentum_(momentum) {
  register_parameter("weight", ones(Shape{num_features}, DType::kFloat32, device));
  register_parameter("bias", zeros(Shape{num_features}, DType::kFloat32, device));
  register_buffer("running_mean", zeros(Shape{num_features}, DType::kFloat32, device));
  register_buffer("running_var", ones(Shape{num_features}, DType::kFloat32, device));
  register_buffer("num_batches_tracked", zeros(Shape{}, DType::kInt64, device));
}

Tensor BatchNorm2d::forward(const Tensor& given) {
  if (given.dim() != 4 || given.size(1) != num_features_) {
    throw ShapeError(fmt::format("BatchNorm2d({}): expects (N, {}, H, W), got {}", num_features_,
                                 num_features_, given.shape().to_string()));
  }
  const Tensor y = batch_norm(given, buffer(0), buffer(1), parameter(0), parameter(1),
                              is_training(), momentum_, eps_);
  if (is_training()) {
    const NoGradGuard no_grad;
    buffer(2).copy_(buffer(2) + 1.0);
  }
  return y;
}

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double eps, bool elementwise_affine,
                     Device device)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  const Shape shape(normalized_shape_);
  register_parameter("weight",
                     elementwise_affine ? ones(shape, DType::kFloat32, device) : Tensor());
  register_parameter("bias", elementwise_affine ? zeros(shape, DType::kFloat32, device) : Tensor());
}

Tensor LayerNorm::forward(const Tensor& input) {
  return layer_norm(input, normalized_shape_, parameter(0), parameter(1), eps_);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device) {
  register_parameter("weight",
                     randn(Shape{num_embeddings, embedding_dim}, DType::kFloat32, device));
}

Tensor Embedding::forward(const Tensor& indices) { return embedding(indices, weight()); }

}  // namespace axle::nn
