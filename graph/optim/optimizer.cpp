// graph/optim: what every optimizer shares, and gradient clipping.
#include "graph/optim/optimizer.h"

#include <fmt/format.h>

#include <cmath>
#include <stdexcept>

#include "graph/autograd.h"
#include "graph/ops.h"

namespace axle::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr)
    : params_(std::move(params)), lr_(lr), param_steps_(params_.size(), 0), state_(params_.size()) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].defined()) {
      throw std::invalid_argument(fmt::format("optimizer: parameter {} is undefined", i));
    }
  }
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) p.set_grad({});
}

Tensor& Optimizer::state(std::size_t i, const std::string& name) {
  for (auto& [key, tensor] : state_[i]) {
    if (key == name) return tensor;
  }
  return state_[i].emplace_back(name, Tensor()).second;
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict out;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (param_steps_[i] > 0) {
      out.emplace_back(
          fmt::format("state.{}.step", i),
          scalar_tensor(static_cast<double>(param_steps_[i]), DType::kI64, params_[i].device()));
    }
    for (const auto& [name, tensor] : state_[i]) {
      if (tensor.defined()) out.emplace_back(fmt::format("state.{}.{}", i, name), tensor);
    }
  }
  const Device device = params_.empty() ? Device{} : params_[0].device();
  out.emplace_back("step", scalar_tensor(static_cast<double>(steps_), DType::kI64, device));
  return out;
}

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       std::source_location where) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (Tensor g = p.grad(); g.defined()) grads.push_back(std::move(g));
  }
  if (grads.empty()) return scalar_tensor(0.0, DType::kF32, Device{}, where);
  Tensor total;
  const bool infinity = std::isinf(norm_type);
  for (const Tensor& g : grads) {
    const Tensor part = infinity ? amax(abs(g, where), {}, false, where)
                                 : sum(pow(abs(g, where), norm_type, where), {}, false, where);
    total = !total.defined() ? part
            : infinity       ? maximum(total, part, where)
                             : add(total, part, where);
  }
  if (!infinity) total = pow(total, 1.0 / norm_type, where);
  const Tensor coef = div(scalar_tensor(max_norm, total.dtype(), total.device(), where),
                          add(total, 1e-6, where), where);
  const Tensor scale = axle::where(lt(coef, 1.0, where), coef, ones_like(coef, where), where);
  for (const Tensor& p : params) {
    if (Tensor g = p.grad(); g.defined()) p.set_grad(mul(g, scale, where), where);
  }
  return total;
}

}  // namespace axle::optim
