// graph/optim: Adam and AdamW, step for step as torch.optim's. The bias corrections are computed
// on the host from each parameter's step count and enter the graph as parameters.
#include <cmath>

#include "axle/graph/autograd.h"
#include "axle/graph/ops.h"
#include "axle/graph/optim/optimizer.h"

namespace axle::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Adam(std::vector<ParamGroup>{ParamGroup{.params = std::move(params)}}, options, decoupled) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions options, bool decoupled)
    : Optimizer(std::move(groups), options.lr, options.weight_decay),
      options_(options),
      decoupled_(decoupled) {}

std::vector<std::string> Adam::state_names() const { return {"step", "exp_avg", "exp_avg_sq"}; }

void Adam::step() {
  NoGradGuard no_grad;
  ++steps_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    // As torch, a parameter's bias corrections count the steps in which it had a gradient.
    const auto t = static_cast<double>(++param_steps_[i]);
    const double correction1 = 1 - std::pow(options_.beta1, t);
    const double correction2 = 1 - std::pow(options_.beta2, t);
    const ParamGroupOptions& group = group_of(i);
    const double step_size = group.lr / correction1;
    const double inverse_sqrt_correction2 = 1 / std::sqrt(correction2);
    Tensor value = p;
    if (group.weight_decay != 0) {
      if (decoupled_) {
        value = value * hyperparameter(1 - group.lr * group.weight_decay, p);
      } else {
        g = g + p * hyperparameter(group.weight_decay, p);
      }
    }
    Tensor& m = state(i, "exp_avg");
    Tensor& v = state(i, "exp_avg_sq");
    if (!m.defined()) {
      m = zeros_like(p);
      v = zeros_like(p);
    }
    // In place, as torch's: the state tensors live on, with their SPMD layout.
    m.copy_(m * options_.beta1 + g * (1 - options_.beta1));
    v.copy_(v * options_.beta2 + g * g * (1 - options_.beta2));
    const Tensor denominator = sqrt(v) * hyperparameter(inverse_sqrt_correction2, p) + options_.eps;
    p.copy_(value - m / denominator * hyperparameter(step_size, p));
  }
}

}  // namespace axle::optim
