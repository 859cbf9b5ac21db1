// graph/optim: Adam and AdamW, step for step as torch.optim's. The bias corrections are computed
// on the host from each parameter's step count and enter the graph as parameters.
#include <cmath>

#include "graph/autograd.h"
#include "graph/ops.h"
#include "graph/optim/optimizer.h"

namespace axle::optim {

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), options.lr), options_(options), decoupled_(decoupled) {}

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
    const double step_size = lr_ / correction1;
    const double inverse_sqrt_correction2 = 1 / std::sqrt(correction2);
    Tensor value = p;
    if (options_.weight_decay != 0) {
      if (decoupled_) {
        value = value * (1 - lr_ * options_.weight_decay);
      } else {
        g = g + p * options_.weight_decay;
      }
    }
    Tensor& m = state(i, "exp_avg");
    Tensor& v = state(i, "exp_avg_sq");
    if (!m.defined()) {
      m = zeros_like(p);
      v = zeros_like(p);
    }
    m = m * options_.beta1 + g * (1 - options_.beta1);
    v = v * options_.beta2 + g * g * (1 - options_.beta2);
    const Tensor denominator = sqrt(v) * inverse_sqrt_correction2 + options_.eps;
    p.copy_(value - m / denominator * step_size);
  }
}

}  // namespace axle::optim
