// actors: IR-to-Executable lowering.
#include "actors/lowering.h"

#include <fmt/format.h>

#include <stdexcept>

namespace axle {
namespace {

Kernel kernel_for(Op op) {
  switch (op) {
#define AXLE_LOWER_OP(name, str) \
  case Op::k##name:              \
    return Kernel::k##name;
    AXLE_KERNEL_OPS(AXLE_LOWER_OP)
#undef AXLE_LOWER_OP
    case Op::kReshape:
      return Kernel::kCopy;
    case Op::kConstant:
      return Kernel::kFill;
    default:
      throw std::logic_error(fmt::format("op {} has no kernel", op_name(op)));
  }
}

}  // namespace

IntrusivePtr<Executable> lower(const StepGraph& graph) {
  auto program = make_intrusive<Executable>();
  program->graph_hash = graph.hash;
  program->slots.reserve(graph.nodes.size());
  for (const Node* node : graph.nodes) program->slots.push_back({node->dtype(), node->shape()});
  program->input_slots = graph.inputs;
  program->output_slots = graph.outputs;
  program->calls.reserve(graph.nodes.size() - graph.inputs.size());
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = *graph.nodes[i];
    if (node.is_leaf()) continue;
    KernelCall call;
    call.kernel = kernel_for(node.op());
    const std::span<const int32_t> operands = graph.operands(i);
    call.inputs.assign(operands.begin(), operands.end());
    call.output = static_cast<int32_t>(i);
    call.ints.assign(node.ints().begin(), node.ints().end());
    call.reals.assign(node.reals().begin(), node.reals().end());
    program->calls.push_back(std::move(call));
  }
  return program;
}

}  // namespace axle
