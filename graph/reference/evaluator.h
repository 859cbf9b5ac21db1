// graph/reference: a plain-loop evaluator of step graphs, so that graph-level tests (ops,
// autograd, nn, optim) can check values with axle::graph alone, without actors or backends. It
// gives every op the meaning the compiler and the CPU backend give it; it is slow on purpose and
// is not a backend.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "axle/graph/device_data.h"
#include "axle/graph/step_graph.h"
#include "axle/graph/tensor.h"

namespace axle::reference {

/// The value of a device-data leaf in its storage dtype and shape (row-major bytes).
using LeafValue = std::function<const CpuTensor&(const DeviceData& data)>;

/// `graph`'s outputs, in graph.outputs order, each in its node's storage dtype and shape,
/// computed with plain loops: every element in double precision, rounded to the node's
/// storage dtype as each op's result is stored. Parameters and constants come from the
/// leaves' values (Node::value()); device-data leaves from `leaf_value`.
///
/// Integer and bool elements are computed exactly in 64 bits and wrap to their dtype's width
/// as C++ would. Random ops are deterministic in their seed and offset operands and the
/// element index, with the CPU backend's ranges and distributions but not its bits.
/// Collectives run as a group of one replica. Throws std::invalid_argument naming the op,
/// the shapes and the source line that traced it for anything it cannot evaluate.
[[nodiscard]] std::vector<CpuTensor> evaluate(const StepGraph& graph, const LeafValue& leaf_value);

/// Sees each op's value as the evaluator computes it (leaves excluded), by node id; returning
/// false stops the evaluation.
using ValueVisitor = std::function<bool(std::size_t id, const CpuTensor& value)>;
/// As evaluate, showing `visit` every op's value in order; returns nothing when `visit` stopped
/// it, else the outputs.
std::vector<CpuTensor> evaluate(const StepGraph& graph, const LeafValue& leaf_value,
                                const ValueVisitor& visit);

/// One op node's value from its operands' values (in operand order), as evaluate() computes it,
/// for walks over programs of other shapes (the SPMD tests run per-device programs on several
/// devices in lockstep). Leaves are the caller's to give; collectives run as a group of one.
[[nodiscard]] CpuTensor evaluate_node(const Node& node, std::span<const CpuTensor* const> operands);

}  // namespace axle::reference
