// graph/nn: the layers of torch.nn that axle's models use, with PyTorch's parameter names,
// layouts and default initialisations (drawn from the device's random stream, so set_rng_state
// makes a model reproducible).
#pragma once

#include <string>
#include <vector>

#include "axle/graph/nn/functional.h"
#include "axle/graph/nn/module.h"
#include "axle/graph/ops.h"

namespace axle::nn {

/// y = x W^T + b, weight [out, in], bias [out]; both uniform in ±1/sqrt(in) (PyTorch's
/// kaiming_uniform with a = sqrt(5)).
class Linear : public Module {
 public:
  /// torch.nn.Linear(in_features, out_features, bias), its parameters made on `device`.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Device device = {});
  Tensor forward(const Tensor& input) override;
  /// The weight, [out_features, in_features].
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
  /// The bias, [out_features]; undefined when made without one.
  [[nodiscard]] const Tensor& bias() const { return parameter(1); }
};

/// 2-d convolution, weight [out, in / groups, kh, kw], bias [out]; uniform in ±1/sqrt(fan_in).
class Conv2d : public Module {
 public:
  /// torch.nn.Conv2d, its parameters made on `device`; kernel_size is {kh, kw} or {k} for both.
  /// Throws std::invalid_argument for another kernel_size or groups not dividing in_channels.
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         Conv2dOptions options = {}, bool bias = true, Device device = {});
  Tensor forward(const Tensor& input) override;
  /// The weight, [out_channels, in_channels / groups, kh, kw].
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
  /// The bias, [out_channels]; undefined when made without one.
  [[nodiscard]] const Tensor& bias() const { return parameter(1); }

 private:
  Conv2dOptions options_;
};

/// 2-d transposed convolution, weight [in, out / groups, kh, kw], bias [out]; uniform in
/// ±1/sqrt(fan_in), where fan_in is PyTorch's for this layout (out / groups * kh * kw).
class ConvTranspose2d : public Module {
 public:
  /// torch.nn.ConvTranspose2d, its parameters made on `device`; kernel_size is {kh, kw} or {k}
  /// for both. Throws std::invalid_argument for another kernel_size or groups not dividing
  /// in_channels and out_channels.
  ConvTranspose2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
                  ConvTranspose2dOptions options = {}, bool bias = true, Device device = {});
  Tensor forward(const Tensor& input) override;
  /// The weight, [in_channels, out_channels / groups, kh, kw].
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
  /// The bias, [out_channels]; undefined when made without one.
  [[nodiscard]] const Tensor& bias() const { return parameter(1); }

 private:
  ConvTranspose2dOptions options_;
};

/// 2-d max pooling, as torch.nn.MaxPool2d (max_pool2d).
class MaxPool2d : public Module {
 public:
  /// Pools with `options` (kernel_size, stride, padding, dilation, ceil_mode).
  explicit MaxPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& input) override { return max_pool2d(input, options_); }

 private:
  Pool2dOptions options_;
};

/// 2-d average pooling, as torch.nn.AvgPool2d (avg_pool2d).
class AvgPool2d : public Module {
 public:
  /// Pools with `options` (kernel_size, stride, padding, ceil_mode, count_include_pad).
  explicit AvgPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& input) override { return avg_pool2d(input, options_); }

 private:
  Pool2dOptions options_;
};

/// torch.nn.ReLU: max(x, 0) elementwise.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override { return relu(input); }
};

/// torch.nn.GELU: x * Φ(x) elementwise, exact (erf) or with the tanh approximation.
class GELU : public Module {
 public:
  /// "none" (erf) or "tanh".
  explicit GELU(std::string approximate = "none") : approximate_(std::move(approximate)) {}
  Tensor forward(const Tensor& input) override { return gelu(input, approximate_.c_str()); }

 private:
  std::string approximate_;
};

/// Zeroes each element with probability p in training mode (from the device's random stream)
/// and scales the rest by 1 / (1 - p); the identity in evaluation mode.
class Dropout : public Module {
 public:
  /// Drops with probability `p`; throws std::invalid_argument unless 0 <= p <= 1.
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override;

 private:
  double p_;
};

/// Flattens dims start_dim..end_dim into one, as torch.nn.Flatten (default: all but the batch).
class Flatten : public Module {
 public:
  /// Flattens dims start_dim..end_dim (negative ones count from the end).
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim_(start_dim), end_dim_(end_dim) {}
  Tensor forward(const Tensor& input) override { return flatten(input, start_dim_, end_dim_); }

 private:
  int64_t start_dim_, end_dim_;
};

/// Batch normalisation over (N, H, W) per channel of an (N, C, H, W) input, as torch's: batch
/// statistics (the biased variance, plus eps) in training mode, which also update the running
/// statistics (running = (1 - momentum) · running + momentum · batch, with the unbiased variance)
/// and count the batch; running statistics in evaluation mode. weight (ones) and bias (zeros)
/// [C]; buffers running_mean (zeros), running_var (ones) [C] and num_batches_tracked (s64).
/// Training on one value per channel (N·H·W = 1) throws ShapeError, as torch does.
class BatchNorm2d : public Module {
 public:
  /// torch.nn.BatchNorm2d(num_features, eps, momentum), its parameters and buffers on `device`.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       Device device = {});
  Tensor forward(const Tensor& input) override;

 private:
  int64_t num_features_;
  double eps_, momentum_;
};

/// Normalises over the trailing dims `normalized_shape`, then scales by weight (ones) and shifts
/// by bias (zeros) of that shape.
class LayerNorm : public Module {
 public:
  /// torch.nn.LayerNorm, its parameters on `device`; without `elementwise_affine`, weight and
  /// bias are undefined (no scale or shift).
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, Device device = {});
  Tensor forward(const Tensor& input) override;

 private:
  std::vector<int64_t> normalized_shape_;
  double eps_;
};

/// A table of `num_embeddings` vectors of `embedding_dim`, weight drawn from N(0, 1); the
/// forward pass looks up integer indices of any shape.
class Embedding : public Module {
 public:
  /// torch.nn.Embedding(num_embeddings, embedding_dim), its weight made on `device`.
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device = {});
  Tensor forward(const Tensor& indices) override;
  /// The table, [num_embeddings, embedding_dim].
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
};

}  // namespace axle::nn
