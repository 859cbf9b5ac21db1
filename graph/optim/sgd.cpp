// graph/optim: SGD, step for step as torch.optim.SGD.
#include <cmath>

#include "axle/graph/autograd.h"
#include "axle/graph/ops.h"
#include "axle/graph/optim/optimizer.h"

namespace axle::optim {

SGD::SGD(std::vector<Tensor> params, SgdOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup{.params = std::move(params)}}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SgdOptions options)
    : Optimizer(std::move(groups), options.lr, options.weight_decay), options_(options) {
  if (options_.nesterov && (options_.momentum <= 0 || options_.dampening != 0)) {
    throw std::invalid_argument("SGD: Nesterov momentum needs momentum > 0 and no dampening");
  }
}

std::vector<std::string> SGD::state_names() const { return {"momentum_buffer"}; }

void SGD::step() {
  NoGradGuard no_grad;
  ++steps_;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    Tensor d = p.grad();
    if (!d.defined()) continue;
    const ParamGroupOptions& group = group_of(i);
    if (group.weight_decay != 0) d = d + p * hyperparameter(group.weight_decay, p);
    if (options_.momentum != 0) {
      Tensor& buffer = state(i, "momentum_buffer");
      if (!buffer.defined()) {
        buffer = d;  // the first step starts the buffer at the gradient, as torch
      } else {
        buffer = buffer * options_.momentum +
                 (options_.dampening == 0 ? d : d * (1 - options_.dampening));
      }
      d = options_.nesterov ? d + buffer * options_.momentum : buffer;
    }
    p.copy_(p - d * hyperparameter(group.lr, p));
  }
}

}  // namespace axle::optim
