// graph/nn: torch.nn.utils.
#include "axle/graph/nn/utils.h"

#include <cmath>

#include "axle/graph/autograd.h"
#include "axle/graph/ops.h"

namespace axle::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       std::source_location where) {
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (Tensor g = p.grad(); g.defined()) grads.push_back(std::move(g));
  }
  if (grads.empty()) return scalar_tensor(0.0, DType::kFloat32, Device{}, where);
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

}  // namespace axle::nn::utils
