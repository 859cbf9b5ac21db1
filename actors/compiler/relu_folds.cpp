// actors: lowering's folds of relu and its backward (fold_context.h).
#include <cstddef>
#include <cstdint>
#include <utility>

#include "axle/actors/compiler/fold_context.h"

namespace axle {

void relu_into_pool(FoldContext& f, std::size_t pool) {
  KernelCall& call = f.calls[pool];
  const int32_t relu = call.inputs[0];
  if (f.program[relu].op == Op::kRelu && f.foldable(relu) &&
      f.program[relu].dtype == f.program[pool].dtype) {
    call.inputs[0] = f.program.operands(relu)[0];
    call.ints.push_back(1);  // relu_first
    f.absorbed[relu] = 1;
  }
}

void product_into_relu_backward(FoldContext& f, std::size_t where) {
  const Program& program = f.program;
  const KernelCall& call = f.calls[where];
  const int32_t mask = call.inputs[0], product = call.inputs[1];
  const KernelCall& compared = f.calls[mask];
  if (!f.foldable(mask) || compared.kernel != Kernel::kGt || compared.output != mask ||
      compared.inputs.size() != 2 || !program.is_zero(compared.inputs[1]) ||
      !program.is_zero(call.inputs[2], true) ||
      program[call.inputs[2]].dtype != program[where].dtype) {
    return;
  }
  const int32_t x = compared.inputs[0];
  if (!f.plain_product_for(product, where) || program[x].dtype != program[where].dtype ||
      !(program[x].shape == program[where].shape)) {
    return;
  }
  // A relu of x that keeps a call of its own stores its result.
  const int32_t relu = f.relu_of[static_cast<std::size_t>(x)];
  const bool relu_stored = relu >= 0 && f.calls[relu].kernel == Kernel::kRelu &&
                           f.calls[relu].output == relu && f.root_of[relu] < 0 && !f.absorbed[relu];
  if (relu_stored) {
    --f.uses[static_cast<std::size_t>(x)];
    ++f.uses[static_cast<std::size_t>(relu)];
  }
  f.product_into(product, where, {0, 0, 0, 1}, relu_stored ? relu : x);
  f.absorbed[mask] = 1;
}

void product_into_relu(FoldContext& f, std::size_t relu) {
  const KernelCall& call = f.calls[relu];
  const DType dtype = f.program[relu].dtype;
  if (call.kernel != Kernel::kRelu || call.output != static_cast<int32_t>(relu) ||
      call.inputs.size() != 1 || (dtype != DType::kFloat32 && dtype != DType::kBFloat16)) {
    return;
  }
  if (f.plain_product_for(call.inputs[0], relu)) {
    f.product_into(call.inputs[0], relu, {0, 0, 0, 0, 1});
  }
}

}  // namespace axle
