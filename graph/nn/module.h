// graph/nn: modules, as torch.nn.Module — parameters, buffers and submodules by name, train and
// eval modes, moving to a device, state dicts. Modules only trace: calling one adds its ops to
// the pending graph.
#pragma once

#include <memory>
#include <source_location>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle::nn {

/// Named tensors in a fixed order: a module's or an optimizer's state ("fc1.weight", ...).
using StateDict = std::vector<std::pair<std::string, Tensor>>;

/// The state dict entry named `key`, or nullptr.
[[nodiscard]] const Tensor* find(const StateDict& state, const std::string& key);

/// A load_state_dict or set_parameter that does not fit: names the key and what is wrong.
class StateDictError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// A module called with a number of inputs its forward does not take (torch raises
/// NotImplementedError for a missing forward); the message names the module's type.
class ForwardNotDefined : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

/// A building block of models. Parameters are shared tensor handles: a parameter registered in
/// two modules (tied weights) is one tensor, before and after to(device), and optimizers update
/// it in place (Tensor::copy_), so every module sees the update.
class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The module's computation on one input. A module overrides the forward (or forwards) it is
  /// called with; the default throws ForwardNotDefined, as torch's Module does for a missing
  /// forward.
  virtual Tensor forward(const Tensor& input);
  /// The module's computation on two inputs, as `model(x, y)` in PyTorch (a model that takes
  /// its targets, say). The default throws ForwardNotDefined. A subclass defining one forward
  /// hides the other from calls through the subclass's own type; calls through operator() or
  /// a Module reach both (add `using Module::forward;` to call both on the subclass).
  virtual Tensor forward(const Tensor& input, const Tensor& other);
  /// Calls forward(input), as calling a torch module.
  Tensor operator()(const Tensor& input) { return forward(input); }
  /// Calls forward(input, other), as calling a torch module with two arguments.
  Tensor operator()(const Tensor& input, const Tensor& other) { return forward(input, other); }

  /// Every parameter of this module and its submodules, each once (tied ones once), in
  /// registration order.
  [[nodiscard]] std::vector<Tensor> parameters() const;
  /// Parameters by dotted name ("fc1.weight"), each tensor once.
  [[nodiscard]] StateDict named_parameters() const;
  /// Buffers (state that is not trained, such as BatchNorm's running statistics) by name.
  [[nodiscard]] StateDict named_buffers() const;
  /// The direct submodules by name.
  [[nodiscard]] const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children()
      const noexcept {
    return children_;
  }

  /// Parameters and buffers by name, tied ones under each of their names, as torch's
  /// state_dict(). The tensors are the module's own handles.
  [[nodiscard]] StateDict state_dict() const;
  /// Gives each parameter and buffer the value of the entry of its name (Tensor::copy_, so tied
  /// and shared handles see it). Every entry is checked before any is loaded: a missing or
  /// unexpected key (when `strict`), or a shape that differs, throws StateDictError naming the
  /// key, and nothing changes. A value of another dtype is cast to the module's, as torch's
  /// (an f16 checkpoint loads into an f32 model). Values on another device are copied over
  /// (defined in actors/).
  void load_state_dict(const StateDict& state, bool strict = true,
                       std::source_location where = std::source_location::current());

  /// Training mode (the default) or evaluation mode, for this module and its submodules: Dropout
  /// and BatchNorm behave differently.
  void train(bool on = true);
  /// Evaluation mode, as train(false).
  void eval() { train(false); }
  /// Whether this module is in training mode.
  [[nodiscard]] bool is_training() const noexcept { return training_; }

  /// Moves every parameter and buffer to `device`, in place (each tensor once; defined in
  /// actors/).
  void to(Device device);
  /// Resets every parameter's gradient (to undefined, as zero_grad(set_to_none=True)).
  void zero_grad();

  /// Replaces parameter `name` of this module with `value` (same shape and dtype), to tie it to
  /// another module's: `decoder.set_parameter("weight", encoder.named_parameters()[0].second)`.
  void set_parameter(const std::string& name, const Tensor& value,
                     std::source_location where = std::source_location::current());

  /// This module's own parameters by name (not its submodules'), including optional ones
  /// registered as undefined, as torch's named_parameters(recurse=False).
  [[nodiscard]] const StateDict& own_parameters() const noexcept { return parameters_; }
  /// Puts `value` (any shape, or undefined) in this module's parameter slot `name`, for wrappers
  /// that keep a parameter's storage elsewhere: FullyShardedDataParallel leaves the slot
  /// undefined and fills it with the gathered value only while the module runs. Unlike
  /// set_parameter it checks nothing but the name.
  void replace_parameter(const std::string& name, Tensor value,
                         std::source_location where = std::source_location::current());
  /// This module's own buffers by name (not its submodules').
  [[nodiscard]] const StateDict& own_buffers() const noexcept { return buffers_; }
  /// Puts `value` (any shape or dtype) in this module's buffer slot `name`: a wrapper casting
  /// buffers (FullyShardedDataParallel's buffer_dtype). Checks nothing but the name.
  void replace_buffer(const std::string& name, Tensor value,
                      std::source_location where = std::source_location::current());
  /// Puts `module` where submodule `name` was (an auto-wrap policy wrapping it); it is what
  /// forward reaches only for modules that call their children through named_children(), as
  /// Sequential does.
  void replace_module(const std::string& name, std::shared_ptr<Module> module,
                      std::source_location where = std::source_location::current());

 protected:
  /// Registers a parameter (marked requires_grad when `requires_grad`); returns its index for
  /// parameter().
  std::size_t register_parameter(std::string name, Tensor value, bool requires_grad = true);
  /// Registers a buffer; returns its index for buffer().
  std::size_t register_buffer(std::string name, Tensor value);
  /// Registers a submodule.
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    children_.emplace_back(std::move(name), module);
    return module;
  }

  /// This module's own parameters and buffers, by registration index (undefined for an optional
  /// one registered as undefined, e.g. a bias turned off).
  [[nodiscard]] const Tensor& parameter(std::size_t index) const {
    return parameters_[index].second;
  }
  /// As above, for buffers (register_buffer's index).
  [[nodiscard]] const Tensor& buffer(std::size_t index) const { return buffers_[index].second; }

 private:
  // Visits every (dotted name, tensor) of parameters (or buffers) of the module tree.
  template <class Fn>
  void visit(bool buffers, const std::string& prefix, Fn& fn) const;

  StateDict parameters_;
  StateDict buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

/// Modules run one after another, named "0", "1", ... as torch.nn.Sequential.
class Sequential : public Module {
 public:
  Sequential() = default;
  /// The modules, in order.
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  /// Appends a module.
  void push_back(std::shared_ptr<Module> module);
  Tensor forward(const Tensor& input) override;
  /// The number of modules.
  [[nodiscard]] std::size_t size() const noexcept { return named_children().size(); }
};

}  // namespace axle::nn
