// graph/optim: optimizers, as torch.optim's. A step only traces: the updates join the pending
// graph and run with the next mark_step, and nothing is read back to the host. The learning rate
// and the step count enter the graph as parameters, so a scheduler changing them never
// recompiles.
#pragma once

#include <deque>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "axle/graph/nn/module.h"
#include "axle/graph/nn/utils.h"

namespace axle::optim {

/// Parameters with options of their own, as an entry of torch.optim's `params` list of dicts:
/// an option left unset takes the optimizer's.
struct ParamGroup {
  std::vector<Tensor> params;          ///< The group's parameters.
  std::optional<double> lr;            ///< The group's learning rate, if not the optimizer's.
  std::optional<double> weight_decay;  ///< The group's weight decay, if not the optimizer's.
};

/// A group as the optimizer holds it (torch's `optimizer.param_groups[g]`): its learning rate and
/// weight decay may change between steps (a scheduler sets `lr`) without recompiling; its
/// parameters are fixed.
struct ParamGroupOptions {
  std::vector<Tensor> params;  ///< The group's parameters.
  double lr = 0;               ///< The group's learning rate.
  double weight_decay = 0;     ///< The group's weight decay (L2 penalty).
  /// The lr a scheduler started from (torch's group["initial_lr"]); set by the first scheduler.
  std::optional<double> initial_lr;
};

/// Base of the optimizers, as torch.optim.Optimizer: parameter groups, per-parameter state,
/// zero_grad, and state_dict / load_state_dict.
class Optimizer {
 public:
  /// One group of `params` with the optimizer's options.
  Optimizer(std::vector<Tensor> params, double lr, double weight_decay = 0);
  /// Groups whose unset lr and weight_decay are `lr` and `weight_decay`; throws
  /// std::invalid_argument if there are no groups, a parameter is undefined, or a parameter is in
  /// more than one group.
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay = 0);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  /// Updates every parameter that has a gradient, in place (Tensor::copy_).
  virtual void step() = 0;
  /// Resets every parameter's gradient (to undefined, as zero_grad(set_to_none=True)).
  void zero_grad();

  /// The first group's learning rate; set_lr sets every group's.
  [[nodiscard]] double lr() const noexcept { return groups_.front().lr; }
  /// Sets every group's learning rate to `lr`.
  void set_lr(double lr) noexcept {
    for (ParamGroupOptions& group : groups_) group.lr = lr;
  }
  /// The parameter groups, as torch's optimizer.param_groups; a group's lr and weight_decay may
  /// be changed between steps.
  [[nodiscard]] std::vector<ParamGroupOptions>& param_groups() noexcept { return groups_; }
  /// As above, read-only.
  [[nodiscard]] const std::vector<ParamGroupOptions>& param_groups() const noexcept {
    return groups_;
  }
  /// Every group's parameters, in order (state_dict's parameter numbers).
  [[nodiscard]] const std::vector<Tensor>& params() const noexcept { return params_; }
  /// Steps taken so far.
  [[nodiscard]] int64_t steps() const noexcept { return steps_; }

  /// The optimizer's state: "state.<i>.<name>" per parameter i (momentum buffers, moment
  /// estimates; "state.<i>.step", a 0-d s64, for an optimizer that counts each parameter's
  /// steps) and "step" (a 0-d s64), as device tensors.
  [[nodiscard]] nn::StateDict state_dict() const;
  /// Loads a state_dict() of an optimizer of the same kind over the same parameters; throws
  /// nn::StateDictError naming the key that does not fit, before changing anything (defined in
  /// actors/: it reads the step count).
  void load_state_dict(const nn::StateDict& state,
                       std::source_location where = std::source_location::current());

 protected:
  /// Parameter i's state tensor `name` (undefined until first set).
  Tensor& state(std::size_t i, const std::string& name);
  /// Names of the per-parameter state, for state_dict().
  [[nodiscard]] virtual std::vector<std::string> state_names() const = 0;
  /// Parameter i's group.
  [[nodiscard]] const ParamGroupOptions& group_of(std::size_t i) const {
    return groups_[group_index_[i]];
  }
  /// A 0-d tensor of `like`'s dtype and device holding `value` as a graph parameter, even when it
  /// is 0 or 1: a value that changes from step to step (a scheduled lr, what is computed from it)
  /// must never change the graph.
  [[nodiscard]] static Tensor hyperparameter(double value, const Tensor& like);

  /// The parameter groups, in order.
  std::vector<ParamGroupOptions> groups_;
  /// Every group's parameters, in order.
  std::vector<Tensor> params_;
  /// Per parameter, the index of its group in groups_.
  std::vector<std::size_t> group_index_;  // by parameter
  /// step() calls so far (state_dict's "step").
  int64_t steps_ = 0;
  /// Per parameter, the steps in which it had a gradient, as torch's state["step"] (Adam's bias
  /// corrections count those, not step() calls). Kept on the host, so reading it costs nothing.
  std::vector<int64_t> param_steps_;

 private:
  // Per parameter, its state tensors by name. A deque, because state() hands out references
  // that must stay valid while another name is added (Adam holds exp_avg while it adds
  // exp_avg_sq).
  std::vector<std::deque<std::pair<std::string, Tensor>>> state_;
};

/// SGD's options, as torch.optim.SGD's arguments.
struct SgdOptions {
  double lr = 0.01;         ///< The learning rate.
  double momentum = 0;      ///< The momentum factor (0: no momentum buffer).
  double dampening = 0;     ///< Dampening of the momentum: the gradient adds in scaled by 1 - this.
  double weight_decay = 0;  ///< Weight decay (L2 penalty), added to the gradient.
  bool nesterov = false;    ///< Nesterov momentum; needs momentum > 0 and no dampening.
};

/// Stochastic gradient descent with momentum, dampening, Nesterov momentum and weight decay,
/// step for step as torch.optim.SGD.
class SGD : public Optimizer {
 public:
  /// One group of `params`; throws std::invalid_argument if `options` asks for Nesterov
  /// momentum without momentum or with dampening.
  SGD(std::vector<Tensor> params, SgdOptions options);
  /// Groups whose unset lr and weight_decay are `options`'.
  SGD(std::vector<ParamGroup> groups, SgdOptions options);
  void step() override;

 private:
  std::vector<std::string> state_names() const override;
  SgdOptions options_;
};

/// Adam's options, as torch.optim.Adam's arguments (`betas` split into beta1 and beta2).
struct AdamOptions {
  double lr = 1e-3;         ///< The learning rate.
  double beta1 = 0.9;       ///< Decay rate of the gradient's running average (exp_avg).
  double beta2 = 0.999;     ///< Decay rate of the squared gradient's running average (exp_avg_sq).
  double eps = 1e-8;        ///< Added to the denominator for numerical stability.
  double weight_decay = 0;  ///< Weight decay: an L2 penalty, or decoupled with `decoupled`.
};

/// Adam (weight decay added to the gradient), as torch.optim.Adam; with `decoupled`, AdamW
/// (weights decay by lr * weight_decay before the update).
class Adam : public Optimizer {
 public:
  /// One group of `params`.
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled = false);
  /// Groups whose unset lr and weight_decay are `options`'.
  Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled = false);
  void step() override;

 private:
  std::vector<std::string> state_names() const override;
  AdamOptions options_;
  bool decoupled_;
};

/// AdamW's options: Adam's, with torch.optim.AdamW's default weight decay (0.01), which also
/// holds when only some options are given (`{.lr = 1e-2}`).
struct AdamWOptions {
  double lr = 1e-3;            ///< The learning rate.
  double beta1 = 0.9;          ///< Decay rate of the gradient's running average (exp_avg).
  double beta2 = 0.999;        ///< Decay rate of the squared gradient's running average.
  double eps = 1e-8;           ///< Added to the denominator for numerical stability.
  double weight_decay = 0.01;  ///< Decoupled weight decay: weights shrink by lr * weight_decay.
};

/// AdamW: Adam with decoupled weight decay, as torch.optim.AdamW.
class AdamW : public Adam {
 public:
  /// One group of `params`.
  explicit AdamW(std::vector<Tensor> params, AdamWOptions options = {})
      : Adam(std::move(params), adam_options(options), true) {}
  /// Groups whose unset lr and weight_decay are `options`' (e.g. no decay for biases and norms).
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions options = {})
      : Adam(std::move(groups), adam_options(options), true) {}

 private:
  static AdamOptions adam_options(const AdamWOptions& o) {
    return {.lr = o.lr,
            .beta1 = o.beta1,
            .beta2 = o.beta2,
            .eps = o.eps,
            .weight_decay = o.weight_decay};
  }
};

/// nn::utils::clip_grad_norm_ (graph/nn/utils.h), where torch has it.
[[deprecated("use nn::utils::clip_grad_norm_ (graph/nn/utils.h)")]] inline Tensor clip_grad_norm_(
    const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
    std::source_location where = std::source_location::current()) {
  return nn::utils::clip_grad_norm_(params, max_norm, norm_type, where);
}

}  // namespace axle::optim
