// graph/nn: activation checkpointing, as torch.utils.checkpoint.checkpoint (use_reentrant=False)
// and torch_xla's checkpoint_module: a function's activations are not kept for the backward
// pass, which computes them again from the function's inputs. The recomputation reads its inputs
// through an optimization barrier that also waits for the incoming gradient (as
// torch_xla.utils.checkpoint does), so the compiler can neither run it early nor merge it back
// into the forward pass.
#pragma once

#include <functional>
#include <memory>
#include <source_location>
#include <vector>

#include "axle/graph/nn/module.h"
#include "axle/graph/tensor.h"

namespace axle::utils {

/// A function checkpoint() runs: inputs in, one tensor out.
using CheckpointFunction = std::function<Tensor(const std::vector<Tensor>&)>;

/// `fn(inputs)`, computed so that the backward pass keeps none of fn's intermediate values: it
/// runs fn again on its inputs and backpropagates through that recomputation, as
/// torch.utils.checkpoint.checkpoint(fn, *inputs, use_reentrant=False). Gradients reach the
/// inputs that require grad and whatever fn reads besides them (a module's parameters, tensors it
/// captured), whether or not an input requires grad. fn must compute the same thing both times;
/// with `preserve_rng_state` the recomputation draws the same random numbers (dropout masks) as
/// the first run. Under NoGradGuard (or when nothing fn reads requires grad) it is fn(inputs).
/// The memory saved is the device memory of fn's intermediates, traded for running fn twice.
Tensor checkpoint(CheckpointFunction fn, const std::vector<Tensor>& inputs,
                  bool preserve_rng_state = true,
                  std::source_location where = std::source_location::current());
/// The same for a function of one tensor.
Tensor checkpoint(std::function<Tensor(const Tensor&)> fn, const Tensor& input,
                  bool preserve_rng_state = true,
                  std::source_location where = std::source_location::current());

/// A module whose forward is `module`'s, checkpointed (see checkpoint()). It holds `module`
/// without a name of its own, so parameter and state-dict names stay `module`'s; train() and
/// eval() reach it.
class CheckpointModule : public nn::Module {
 public:
  /// Wraps `module`.
  explicit CheckpointModule(std::shared_ptr<nn::Module> module);
  Tensor forward(const Tensor& input) override;
  /// The module's two-input forward, checkpointed over both inputs.
  Tensor forward(const Tensor& input, const Tensor& other) override;
  /// The module checkpointed (or what replace_module put in its place).
  [[nodiscard]] const std::shared_ptr<nn::Module>& module() const noexcept {
    return named_children().front().second;
  }
};

/// `module` with its forward checkpointed, as torch_xla's checkpoint_module: put it where the
/// module was (a Sequential's entry, a block of a model) and the names of its parameters stay
/// the same.
[[nodiscard]] std::shared_ptr<CheckpointModule> checkpoint_module(
    std::shared_ptr<nn::Module> module,
    std::source_location where = std::source_location::current());

}  // namespace axle::utils
