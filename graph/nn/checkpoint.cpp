// graph/nn: checkpoint_module — a module's forward through checkpoint().
#include "graph/nn/checkpoint.h"

#include "graph/ops/op_util.h"

namespace axle::utils {

CheckpointModule::CheckpointModule(std::shared_ptr<nn::Module> module) {
  register_module("", std::move(module));  // "": the names stay the module's
}

Tensor CheckpointModule::forward(const Tensor& input) {
  // Through the child list, so a wrapper put in the module's place (an FSDP auto-wrap policy,
  // Module::replace_module) is what runs.
  nn::Module* module = named_children().front().second.get();
  return checkpoint([module](const Tensor& x) { return module->forward(x); }, input);
}

std::shared_ptr<CheckpointModule> checkpoint_module(std::shared_ptr<nn::Module> module,
                                                    std::source_location where) {
  if (!module) ops::fail("checkpoint_module", "the module is null", where);
  return std::make_shared<CheckpointModule>(std::move(module));
}

}  // namespace axle::utils
