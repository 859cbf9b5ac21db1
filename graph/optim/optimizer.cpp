// graph/optim: what every optimizer shares, and gradient clipping.
#include "axle/graph/optim/optimizer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string_view>

#include "axle/graph/autograd.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle::optim {

Optimizer::Optimizer(std::vector<Tensor> params, double lr, double weight_decay)
    : Optimizer(std::vector<ParamGroup>{ParamGroup{.params = std::move(params)}}, lr,
                weight_decay) {}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay) {
  if (groups.empty()) throw std::invalid_argument("optimizer: no parameter groups");
  for (std::size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    for (const Tensor& p : group.params) {
      if (!p.defined()) {
        throw std::invalid_argument(
            fmt::format("optimizer: parameter {} is undefined (group {})", params_.size(), g));
      }
      for (std::size_t i = 0; i < params_.size(); ++i) {
        if (params_[i].impl() == p.impl()) {
          throw std::invalid_argument(
              fmt::format("optimizer: parameter {} of group {} is also parameter {} (group {}); a "
                          "parameter may be in one group only",
                          params_.size(), g, i, group_index_[i]));
        }
      }
      params_.push_back(p);
      group_index_.push_back(g);
    }
    groups_.push_back(ParamGroupOptions{.params = std::move(group.params),
                                        .lr = group.lr.value_or(lr),
                                        .weight_decay = group.weight_decay.value_or(weight_decay)});
  }
  param_steps_.assign(params_.size(), 0);
  state_.resize(params_.size());
}

Tensor Optimizer::hyperparameter(double value, const Tensor& like) {
  return Tensor(
      make_intrusive<TensorImpl>(like.dtype(), ops::parameter(value, like.dtype()), like.device()));
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
          scalar_tensor(static_cast<double>(param_steps_[i]), DType::kInt64, params_[i].device()));
    }
    for (const auto& [name, tensor] : state_[i]) {
      if (tensor.defined()) out.emplace_back(fmt::format("state.{}.{}", i, name), tensor);
    }
  }
  const Device device = params_.empty() ? Device{} : params_[0].device();
  out.emplace_back("step", scalar_tensor(static_cast<double>(steps_), DType::kInt64, device));
  return out;
}

void Optimizer::load_state_dict(const nn::StateDict& state, std::source_location where) {
  auto fail = [&](const std::string& what) {
    throw nn::StateDictError(fmt::format("optimizer load_state_dict: {} (at {}:{})", what,
                                         where.file_name(), where.line()));
  };
  const Tensor* step = nn::find(state, "step");
  if (!step || !step->defined() || step->numel() != 1) fail("key \"step\" is missing");
  const std::vector<std::string> names = state_names();
  std::vector<std::pair<std::size_t, std::pair<std::string, Tensor>>> loads;
  std::vector<std::pair<std::size_t, const Tensor*>> param_steps;  // "state.<i>.step"
  for (const auto& [key, value] : state) {
    if (key == "step") continue;
    std::size_t i = 0;
    char name[64] = {};
    if (std::sscanf(key.c_str(), "state.%zu.%63s", &i, name) != 2 || i >= params_.size() ||
        std::find(names.begin(), names.end(), name) == names.end()) {
      fail(fmt::format("unexpected key \"{}\"", key));
    }
    if (std::string_view(name) == "step") {
      if (!value.defined() || value.numel() != 1) {
        fail(fmt::format("key \"{}\" is {}, not a single step count", key,
                         value.defined() ? ops::describe(value) : "undefined"));
      }
      param_steps.emplace_back(i, &value);
      continue;
    }
    if (!value.defined() || !(value.shape() == params_[i].shape()) ||
        value.dtype() != params_[i].dtype()) {
      fail(fmt::format("key \"{}\" is {}, its parameter {}", key,
                       value.defined() ? ops::describe(value) : "undefined",
                       ops::describe(params_[i])));
    }
    loads.push_back({i, {name, value.to(params_[i].device())}});
  }
  steps_ = static_cast<int64_t>(step->item(where));
  // A parameter with state but no step count of its own (a state saved before per-parameter
  // counts) took every step.
  std::fill(param_steps_.begin(), param_steps_.end(), 0);
  if (std::find(names.begin(), names.end(), "step") != names.end()) {
    for (const auto& [i, entry] : loads) param_steps_[i] = steps_;
  }
  for (const auto& [i, count] : param_steps) {
    param_steps_[i] = static_cast<int64_t>(count->item(where));
  }
  for (auto& own : state_) own.clear();
  for (auto& [i, entry] : loads) state_[i].push_back(std::move(entry));
}

}  // namespace axle::optim
