// graph/reference: the evaluator's walk over a step graph — leaves, dispatch to the op families,
// and releasing each value after its last reader.
#include "axle/graph/reference/evaluator.h"

#include <fmt/format.h>

#include <stdexcept>

#include "axle/graph/reference/op_families.h"

namespace axle::reference {
namespace {

using detail::OpCall;

CpuTensor evaluate_op(const OpCall& call) {
  switch (op_family(call.node.op())) {
    case OpFamily::kElementwise:
    case OpFamily::kFloatFunction:
    case OpFamily::kGenerator:
      return detail::evaluate_elementwise(call);
    case OpFamily::kReduction:
      return detail::evaluate_reduction(call);
    case OpFamily::kLinalg:
      return detail::evaluate_linalg(call);
    case OpFamily::kPooling:
      return detail::evaluate_pooling(call);
    case OpFamily::kDataMovement:
      return detail::evaluate_data_movement(call);
    case OpFamily::kRandom:
      return detail::evaluate_random(call);
    case OpFamily::kAttention:
      return detail::evaluate_attention(call);
    case OpFamily::kCollective:
      return detail::evaluate_collective(call);
    case OpFamily::kBarrier:
      // Operand ints[0], as it is; the others are only waited for.
      detail::expect_ints(call, 1, "[operand]");
      if (call.ints()[0] < 0 || static_cast<std::size_t>(call.ints()[0]) >= call.operands.size()) {
        detail::fail(call, "ints[0] names no operand");
      }
      return call.operand(static_cast<std::size_t>(call.ints()[0]));
    case OpFamily::kAnnotation:
      // A sharding annotation: the value is its operand's (one device holds all of it).
      return call.operand(0);
    case OpFamily::kLeaf:
      break;  // leaves are handled by the caller
  }
  detail::fail(call, "is not an op the reference evaluator knows");
}

// A parameter's or constant's value: one element (or the node's shape, filled) in its dtype,
// rounded as the device stores a fed scalar.
CpuTensor scalar_leaf(const Node& node) {
  CpuTensor value = detail::zeros(node.dtype(), node.shape());
  for (int64_t i = 0; i < node.shape().numel(); ++i) detail::store_real(value, i, node.value());
  return value;
}

CpuTensor device_leaf(const Node& node, const LeafValue& leaf_value) {
  const OpCall call{node, {}};
  if (!node.data()) detail::fail(call, "the device-data leaf holds no data");
  const CpuTensor& value = leaf_value(*node.data());
  if (value.dtype != node.dtype() || !(value.shape == node.shape()) ||
      value.bytes.size() !=
          static_cast<std::size_t>(node.shape().numel()) * dtype_size(node.dtype())) {
    detail::fail(
        call, fmt::format("leaf_value gave {}{} ({} bytes) for this leaf", dtype_name(value.dtype),
                          value.shape.to_string(), value.bytes.size()));
  }
  return value;
}

}  // namespace

CpuTensor evaluate_node(const Node& node, std::span<const CpuTensor* const> operands) {
  const OpCall call{node, operands};
  if (node.op() == Op::kDeviceData || node.op() == Op::kParameter || node.op() == Op::kConstant) {
    detail::fail(call, "is a leaf: its value is the caller's to give");
  }
  CpuTensor value = evaluate_op(call);
  if (value.dtype != node.dtype() || !(value.shape == node.shape())) {
    detail::fail(call, fmt::format("the reference computed {}{} instead", dtype_name(value.dtype),
                                   value.shape.to_string()));
  }
  return value;
}

std::vector<CpuTensor> evaluate(const StepGraph& graph, const LeafValue& leaf_value) {
  return evaluate(graph, leaf_value, ValueVisitor{});
}

std::vector<CpuTensor> evaluate(const StepGraph& graph, const LeafValue& leaf_value,
                                const ValueVisitor& visit) {
  const std::size_t count = graph.nodes.size();
  if (graph.operand_begin.size() != count + 1) {
    throw std::invalid_argument(fmt::format(
        "reference evaluator: the step graph has {} nodes but {} operand ranges (expected {})",
        count, graph.operand_begin.size(), count + 1));
  }
  // Readers left per value (outputs count as one more), so a value goes once nothing reads it.
  std::vector<int64_t> readers(count, 0);
  for (int32_t id : graph.operand_ids) ++readers.at(static_cast<std::size_t>(id));
  for (int32_t id : graph.outputs) ++readers.at(static_cast<std::size_t>(id));

  std::vector<CpuTensor> values(count);
  std::vector<const CpuTensor*> operands;
  for (std::size_t id = 0; id < count; ++id) {
    const Node& node = *graph.nodes[id];
    const std::span<const int32_t> operand_ids = graph.operands(id);
    if (node.op() == Op::kDeviceData) {
      values[id] = device_leaf(node, leaf_value);
    } else if (node.op() == Op::kParameter || node.op() == Op::kConstant) {
      values[id] = scalar_leaf(node);
    } else {
      operands.clear();
      for (int32_t operand : operand_ids) {
        if (operand < 0 || static_cast<std::size_t>(operand) >= id) {
          detail::fail(OpCall{node, {}},
                       fmt::format("operand id {} does not come before node {}", operand, id));
        }
        operands.push_back(&values[static_cast<std::size_t>(operand)]);
      }
      const OpCall call{node, operands};
      values[id] = evaluate_op(call);
      if (values[id].dtype != node.dtype() || !(values[id].shape == node.shape())) {
        detail::fail(call, fmt::format("the reference computed {}{} instead",
                                       dtype_name(values[id].dtype), values[id].shape.to_string()));
      }
      if (visit && !visit(id, values[id])) return {};
    }
    for (int32_t operand : operand_ids) {
      if (--readers[static_cast<std::size_t>(operand)] == 0) values[operand] = CpuTensor{};
    }
  }

  std::vector<CpuTensor> outputs;
  outputs.reserve(graph.outputs.size());
  for (int32_t id : graph.outputs) outputs.push_back(values[static_cast<std::size_t>(id)]);
  return outputs;
}

}  // namespace axle::reference
