// graph/nn: the module tree.
#include "axle/graph/nn/module.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <typeinfo>
#include <unordered_set>

#include "axle/engine/actor.h"
#include "axle/graph/autograd.h"
#include "axle/graph/op_util.h"
#include "axle/graph/ops.h"

namespace axle::nn {

const Tensor* find(const StateDict& state, const std::string& key) {
  for (const auto& [name, tensor] : state) {
    if (name == key) return &tensor;
  }
  return nullptr;
}

// A child registered under "" adds no name of its own (utils::CheckpointModule holds its module
// so).
static std::string child_prefix(const std::string& prefix, const std::string& name) {
  return name.empty() ? prefix : prefix + name + ".";
}

template <class Fn>
void Module::visit(bool buffers, const std::string& prefix, Fn& fn) const {
  for (const auto& [name, tensor] : buffers ? buffers_ : parameters_) {
    if (tensor.defined()) fn(prefix + name, tensor);
  }
  for (const auto& [name, child] : children_) child->visit(buffers, child_prefix(prefix, name), fn);
}

namespace {

// Each tensor once, by its shared value.
StateDict distinct(StateDict all) {
  std::unordered_set<const TensorImpl*> seen;
  StateDict out;
  for (auto& entry : all) {
    if (seen.insert(entry.second.impl()).second) out.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

StateDict Module::named_parameters() const {
  StateDict all;
  auto add = [&](const std::string& name, const Tensor& t) { all.emplace_back(name, t); };
  visit(false, "", add);
  return distinct(std::move(all));
}

StateDict Module::named_buffers() const {
  StateDict all;
  auto add = [&](const std::string& name, const Tensor& t) { all.emplace_back(name, t); };
  visit(true, "", add);
  return distinct(std::move(all));
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters()) out.push_back(std::move(tensor));
  return out;
}

StateDict Module::state_dict() const {
  // As torch: each module's parameters, then its buffers, then its submodules'.
  StateDict all;
  auto walk = [&](auto& self, const Module& m, const std::string& prefix) -> void {
    for (const auto& [name, t] : m.parameters_) {
      if (t.defined()) all.emplace_back(prefix + name, t);
    }
    for (const auto& [name, t] : m.buffers_) {
      if (t.defined()) all.emplace_back(prefix + name, t);
    }
    for (const auto& [name, child] : m.children_) self(self, *child, child_prefix(prefix, name));
  };
  walk(walk, *this, "");
  return all;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.set_grad({});
}

void Module::set_parameter(const std::string& name, const Tensor& value,
                           std::source_location where) {
  for (auto& [own, tensor] : parameters_) {
    if (own != name) continue;
    if (!value.defined() || !(value.shape() == tensor.shape()) || value.dtype() != tensor.dtype()) {
      throw StateDictError(
          fmt::format("set_parameter: \"{}\" is {}; the new value is {} (at {}:{})", name,
                      ops::describe(tensor), value.defined() ? ops::describe(value) : "undefined",
                      where.file_name(), where.line()));
    }
    tensor = value;
    return;
  }
  throw StateDictError(fmt::format("set_parameter: this module has no parameter \"{}\" (at {}:{})",
                                   name, where.file_name(), where.line()));
}

void Module::replace_parameter(const std::string& name, Tensor value, std::source_location where) {
  for (auto& [own, tensor] : parameters_) {
    if (own == name) {
      tensor = std::move(value);
      return;
    }
  }
  throw StateDictError(
      fmt::format("replace_parameter: this module has no parameter \"{}\" (at {}:{})", name,
                  where.file_name(), where.line()));
}

void Module::replace_buffer(const std::string& name, Tensor value, std::source_location where) {
  for (auto& [own, tensor] : buffers_) {
    if (own == name) {
      tensor = std::move(value);
      return;
    }
  }
  throw StateDictError(fmt::format("replace_buffer: this module has no buffer \"{}\" (at {}:{})",
                                   name, where.file_name(), where.line()));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module,
                            std::source_location where) {
  for (auto& [own, child] : children_) {
    if (own == name && module) {
      child = std::move(module);
      return;
    }
  }
  throw StateDictError(fmt::format(
      "replace_module: {} (at {}:{})",
      module ? "this module has no submodule \"" + name + "\"" : std::string("the module is null"),
      where.file_name(), where.line()));
}

std::size_t Module::register_parameter(std::string name, Tensor value, bool requires_grad) {
  if (value.defined() && requires_grad) value.requires_grad_();
  parameters_.emplace_back(std::move(name), std::move(value));
  return parameters_.size() - 1;
}

std::size_t Module::register_buffer(std::string name, Tensor value) {
  buffers_.emplace_back(std::move(name), std::move(value));
  return buffers_.size() - 1;
}

namespace {
[[noreturn]] void forward_not_defined(const Module& module, int called_with) {
  const std::string type = axle::detail::type_name(typeid(module));
  throw ForwardNotDefined(fmt::format(
      "{} was called with {} input{} but does not define forward({}): a module overrides the "
      "forward it is called with",
      type, called_with, called_with == 1 ? "" : "s",
      called_with == 1 ? "const Tensor&" : "const Tensor&, const Tensor&"));
}
}  // namespace

Tensor Module::forward(const Tensor&) { forward_not_defined(*this, 1); }

Tensor Module::forward(const Tensor&, const Tensor&) { forward_not_defined(*this, 2); }

Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  register_module(std::to_string(size()), std::move(module));
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : named_children()) x = child->forward(x);
  return x;
}

// --- loading values and moving between devices (they read values through the runtime) ---
void Module::load_state_dict(const StateDict& state, bool strict, std::source_location where) {
  const StateDict own = state_dict();
  auto fail = [&](const std::string& what) {
    throw StateDictError(
        fmt::format("load_state_dict: {} (at {}:{})", what, where.file_name(), where.line()));
  };
  // As torch's strict load: every key the module has that `state` lacks, and every key of
  // `state` the module does not have, named together (a misspelt key is one of each).
  if (strict) {
    std::vector<std::string> missing, unexpected;
    for (const auto& [name, tensor] : own) {
      if (!find(state, name)) missing.push_back(fmt::format("\"{}\"", name));
    }
    for (const auto& [name, value] : state) {
      if (!find(own, name)) unexpected.push_back(fmt::format("\"{}\"", name));
    }
    std::vector<std::string> errors;
    if (!missing.empty()) {
      errors.push_back(
          fmt::format("missing key{} {}", missing.size() > 1 ? "s" : "", fmt::join(missing, ", ")));
    }
    if (!unexpected.empty()) {
      errors.push_back(fmt::format("unexpected key{} {}", unexpected.size() > 1 ? "s" : "",
                                   fmt::join(unexpected, ", ")));
    }
    if (!errors.empty()) fail(fmt::format("{}", fmt::join(errors, "; ")));
  }
  std::vector<std::pair<const Tensor*, const Tensor*>> loads;  // (destination, value)
  for (const auto& [name, tensor] : own) {
    const Tensor* value = find(state, name);
    if (!value) continue;  // not strict
    if (!value->defined()) fail(fmt::format("key \"{}\" holds an undefined tensor", name));
    // Another dtype is cast by copy_, as torch's load_state_dict does (an f16 checkpoint into
    // an f32 model); another shape is an error.
    if (!(value->shape() == tensor.shape())) {
      fail(fmt::format("key \"{}\" is {}, the module's is {}", name, ops::describe(*value),
                       ops::describe(tensor)));
    }
    loads.emplace_back(&tensor, value);
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
