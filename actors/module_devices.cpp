// actors: the Module members that need devices — moving parameters and loading values that may
// live on another device (graph/nn only traces).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <string_view>

#include "graph/autograd.h"
#include "graph/nn/module.h"
#include "graph/ops/op_util.h"
#include "graph/optim/optimizer.h"

namespace axle::nn {

void Module::load_state_dict(const StateDict& state, bool strict, std::source_location where) {
  const StateDict own = state_dict();
  auto fail = [&](const std::string& what) {
    throw StateDictError(
        fmt::format("load_state_dict: {} (at {}:{})", what, where.file_name(), where.line()));
  };
  std::vector<std::pair<const Tensor*, const Tensor*>> loads;  // (destination, value)
  for (const auto& [name, tensor] : own) {
    const Tensor* value = find(state, name);
    if (!value) {
      if (strict) fail(fmt::format("key \"{}\" is missing", name));
      continue;
    }
    if (!value->defined()) fail(fmt::format("key \"{}\" holds an undefined tensor", name));
    if (!(value->shape() == tensor.shape()) || value->dtype() != tensor.dtype()) {
      fail(fmt::format("key \"{}\" is {}, the module's is {}", name, ops::describe(*value),
                       ops::describe(tensor)));
    }
    loads.emplace_back(&tensor, value);
  }
  if (strict) {
    for (const auto& [name, value] : state) {
      if (!find(own, name)) fail(fmt::format("unexpected key \"{}\"", name));
    }
  }
  NoGradGuard no_grad;  // loading is not part of any computation to differentiate
  for (const auto& [destination, value] : loads) {
    destination->copy_(
        value->device() == destination->device() ? *value : value->to(destination->device()),
        where);
  }
}

void Module::to(Device device) {
  std::vector<Tensor> all = parameters();
  for (auto& [name, buffer] : named_buffers()) all.push_back(buffer);
  for (const Tensor& t : all) {
    if (t.device() == device) continue;
    const Tensor moved = t.to(device);
    t.set_grad({});  // a gradient on the old device no longer applies
    t.impl()->move_to(moved.impl()->data());
  }
}

}  // namespace axle::nn

namespace axle::optim {

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
