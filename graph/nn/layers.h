// graph/nn: the layers of torch.nn that axle's models use, with PyTorch's parameter names,
// layouts and default initialisations (drawn from the device's random stream, so set_rng_state
// makes a model reproducible).
#pragma once

#include <string>
#include <vector>

#include "graph/nn/functional.h"
#include "graph/nn/module.h"
#include "graph/ops.h"

namespace axle::nn {

/// y = x W^T + b, weight [out, in], bias [out]; both uniform in ±1/sqrt(in) (PyTorch's
/// kaiming_uniform with a = sqrt(5)).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Device device = {});
  Tensor forward(const Tensor& input) override;
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
  [[nodiscard]] const Tensor& bias() const { return parameter(1); }
};

/// 2-d convolution, weight [out, in / groups, kh, kw], bias [out]; uniform in ±1/sqrt(fan_in).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size,
         Conv2dOptions options = {}, bool bias = true, Device device = {});
  Tensor forward(const Tensor& input) override;
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
  [[nodiscard]] const Tensor& bias() const { return parameter(1); }

 private:
  Conv2dOptions options_;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& input) override { return max_pool2d(input, options_); }

 private:
  Pool2dOptions options_;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options_(std::move(options)) {}
  Tensor forward(const Tensor& input) override { return avg_pool2d(input, options_); }

 private:
  Pool2dOptions options_;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override { return relu(input); }
};

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
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& input) override;

 private:
  double p_;
};

/// Flattens dims start_dim..end_dim into one, as torch.nn.Flatten (default: all but the batch).
class Flatten : public Module {
 public:
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
  Embedding(int64_t num_embeddings, int64_t embedding_dim, Device device = {});
  Tensor forward(const Tensor& indices) override;
  [[nodiscard]] const Tensor& weight() const { return parameter(0); }
};

}  // namespace axle::nn
