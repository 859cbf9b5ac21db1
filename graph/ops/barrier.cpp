// graph/ops: optimization_barrier_, as torch_xla's xm.optimization_barrier_. The IR's nodes have
// one result each, so a barrier of n tensors is n kOptimizationBarrier nodes, node i giving
// operand i and taking all n as operands: each result waits for the whole list, as XLA's tuple
// does.
#include <fmt/format.h>

#include "axle/graph/op_util.h"

namespace axle {

void optimization_barrier_(std::span<const Tensor> tensors, Loc where) {
  constexpr std::string_view kOp = "optimization_barrier_";
  if (tensors.empty()) ops::fail(kOp, "needs at least one tensor", where);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    if (!tensors[i].defined()) {
      ops::fail(kOp, fmt::format("tensor {} of {} is undefined", i, tensors.size()), where);
    }
    if (!(tensors[i].device() == tensors[0].device())) {
      ops::fail(kOp,
                fmt::format("tensor {} ({}) is on {} but tensor 0 ({}) is on {}", i,
                            ops::describe(tensors[i]), tensors[i].device().to_string(),
                            ops::describe(tensors[0]), tensors[0].device().to_string()),
                where);
    }
  }
  Operands operands;
  for (const Tensor& t : tensors) operands.push_back(ops::value_as(t, t.dtype(), where));
  // Every result is built before any tensor changes: a tensor listed twice must not wait for its
  // own barrier.
  std::vector<Tensor> results;
  results.reserve(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    results.push_back(ops::make_result(Op::kOptimizationBarrier, t.dtype(), t.shape(), operands,
                                       t.device(), where, IntAttrs{static_cast<int64_t>(i)}));
  }
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    TensorImpl& result = *results[i].impl();
    // (In eager mode the barrier has run already and the result holds data.)
    if (result.pending_ir()) {
      tensors[i].impl()->set_ir(result.ir());
    } else {
      tensors[i].impl()->set_data(result.data());
    }
  }
}

}  // namespace axle
