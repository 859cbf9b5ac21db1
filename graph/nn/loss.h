// graph/nn: loss functions, as torch.nn.functional's.
#pragma once

#include <cstdint>
#include <source_location>

#include "axle/graph/tensor.h"

namespace axle::nn {

/// How per-sample losses combine.
enum class Reduction {
  kMean,  ///< The mean of the per-sample losses, ignored targets left out (reduction="mean").
  kSum,   ///< Their sum ("sum").
  kNone,  ///< The per-sample losses themselves ("none").
};

/// Negative log-likelihood of class `target` (s32/s64 [N] or [N, d1, ...]) under `log_probs`
/// [N, C] or [N, C, d1, ...]. Targets equal to ignore_index contribute nothing; the mean is over
/// the rest (NaN when every target is ignored), as torch.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target,
                Reduction reduction = Reduction::kMean, int64_t ignore_index = -100,
                std::source_location where = std::source_location::current());

/// log_softmax over the class dim (1) then nll_loss, with label smoothing ε: the target
/// distribution is 1 - ε on the class plus ε / C on every class, as torch's cross_entropy. Shapes
/// and ignore_index as nll_loss.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::kMean, int64_t ignore_index = -100,
                     std::source_location where = std::source_location::current());

/// Squared error, elementwise (shapes broadcast).
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                std::source_location where = std::source_location::current());

// --- the losses as modules, as torch.nn.CrossEntropyLoss, NLLLoss and MSELoss: made with their
// options, called with (input, target) ---

/// torch.nn.CrossEntropyLoss's options, in its order.
struct CrossEntropyLossOptions {
  int64_t ignore_index = -100;             ///< Targets of this value contribute nothing.
  Reduction reduction = Reduction::kMean;  ///< How per-sample losses combine.
  double label_smoothing = 0.0;            ///< The smoothing ε, in [0, 1].
};
/// cross_entropy with fixed options: `nn::CrossEntropyLoss criterion; criterion(logits, target)`.
class CrossEntropyLoss {
 public:
  /// A loss with `options`.
  explicit CrossEntropyLoss(CrossEntropyLossOptions options = {}) : options_(options) {}
  /// cross_entropy(input, target) with the options.
  [[nodiscard]] Tensor forward(const Tensor& input, const Tensor& target,
                               std::source_location where = std::source_location::current()) const {
    return cross_entropy(input, target, options_.label_smoothing, options_.reduction,
                         options_.ignore_index, where);
  }
  /// forward(input, target), as calling a torch loss module.
  [[nodiscard]] Tensor operator()(
      const Tensor& input, const Tensor& target,
      std::source_location where = std::source_location::current()) const {
    return forward(input, target, where);
  }
  /// The options.
  [[nodiscard]] const CrossEntropyLossOptions& options() const noexcept { return options_; }

 private:
  CrossEntropyLossOptions options_;
};

/// torch.nn.NLLLoss's options, in its order.
struct NLLLossOptions {
  int64_t ignore_index = -100;             ///< Targets of this value contribute nothing.
  Reduction reduction = Reduction::kMean;  ///< How per-sample losses combine.
};
/// nll_loss with fixed options, called with (log_probs, target).
class NLLLoss {
 public:
  /// A loss with `options`.
  explicit NLLLoss(NLLLossOptions options = {}) : options_(options) {}
  /// nll_loss(input, target) with the options.
  [[nodiscard]] Tensor forward(const Tensor& input, const Tensor& target,
                               std::source_location where = std::source_location::current()) const {
    return nll_loss(input, target, options_.reduction, options_.ignore_index, where);
  }
  /// forward(input, target), as calling a torch loss module.
  [[nodiscard]] Tensor operator()(
      const Tensor& input, const Tensor& target,
      std::source_location where = std::source_location::current()) const {
    return forward(input, target, where);
  }
  /// The options.
  [[nodiscard]] const NLLLossOptions& options() const noexcept { return options_; }

 private:
  NLLLossOptions options_;
};

/// torch.nn.MSELoss's options.
struct MSELossOptions {
  Reduction reduction = Reduction::kMean;  ///< How per-element losses combine.
};
/// mse_loss with a fixed reduction, called with (input, target).
class MSELoss {
 public:
  /// A loss with `options`.
  explicit MSELoss(MSELossOptions options = {}) : options_(options) {}
  /// mse_loss(input, target) with the options.
  [[nodiscard]] Tensor forward(const Tensor& input, const Tensor& target,
                               std::source_location where = std::source_location::current()) const {
    return mse_loss(input, target, options_.reduction, where);
  }
  /// forward(input, target), as calling a torch loss module.
  [[nodiscard]] Tensor operator()(
      const Tensor& input, const Tensor& target,
      std::source_location where = std::source_location::current()) const {
    return forward(input, target, where);
  }
  /// The options.
  [[nodiscard]] const MSELossOptions& options() const noexcept { return options_; }

 private:
  MSELossOptions options_;
};

}  // namespace axle::nn
