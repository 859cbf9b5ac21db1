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
  const KernelCall& produced = f.calls[product];
  if (produced.kernel != Kernel::kMatmul || produced.output != product ||
      produced.ints.size() != 2 || !f.foldable(product) ||
      program[product].dtype != program[where].dtype ||
      !(program[product].shape == program[where].shape) ||
      program[x].dtype != program[where].dtype || !(program[x].shape == program[where].shape)) {
    return;
  }
  // A relu of x that keeps a call of its own stores its result.
  const int32_t relu = f.relu_of[static_cast<std::size_t>(x)];
  const bool relu_stored = relu >= 0 && f.calls[relu].kernel == Kernel::kRelu &&
                           f.calls[relu].output == relu && f.root_of[relu] < 0 && !f.absorbed[relu];
  KernelCall folded = produced;
  folded.ints.insert(folded.ints.end(), {0, 0, 0, 1});
  folded.inputs.push_back(relu_stored ? relu : x);
  if (relu_stored) {
    --f.uses[static_cast<std::size_t>(x)];
    ++f.uses[static_cast<std::size_t>(relu)];
  }
  folded.output = static_cast<int32_t>(where);
  f.calls[where] = std::move(folded);
  f.absorbed[product] = 1;
  f.absorbed[mask] = 1;
}

void product_into_relu(FoldContext& f, std::size_t relu) {
  const Program& program = f.program;
  const KernelCall& call = f.calls[relu];
  const DType dtype = program[relu].dtype;
  if (call.kernel != Kernel::kRelu || call.output != static_cast<int32_t>(relu) ||
      call.inputs.size() != 1 || (dtype != DType::kFloat32 && dtype != DType::kBFloat16)) {
    return;
  }
  const int32_t product = call.inputs[0];
  const KernelCall& produced = f.calls[product];
  if (produced.kernel != Kernel::kMatmul || produced.output != product ||
      produced.ints.size() != 2 || !f.foldable(product) || program[product].dtype != dtype ||
      !(program[product].shape == program[relu].shape)) {
    return;
  }
  KernelCall folded = produced;
  folded.ints.insert(folded.ints.end(), {0, 0, 0, 0, 1});
  folded.output = static_cast<int32_t>(relu);
  f.calls[relu] = std::move(folded);
  f.absorbed[product] = 1;
}

}  // namespace axle
