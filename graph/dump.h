// graph: IR dumps of the graph behind some tensors — text for logs and test expectations,
// Graphviz for pictures. PyTorch/XLA's torch_xla._XLAC._get_xla_tensors_text / _dot.
#pragma once

#include <string>
#include <vector>

#include "axle/graph/tensor.h"

namespace axle {

/// The graph computing `tensors`, one line per node in post-order (operands first):
///
///   IR {
///     %0 = f32[2,3] device_data
///     %1 = f32[] constant(1)
///     %2 = f32[2,3] add(%0, %1)
///     %3 = f32[] sum(%2), ints=[0,0,1]
///     outputs: %2, %3
///   }
///
/// A tensor that holds data (no pending IR) is a device_data leaf. Under XLA_IR_DEBUG=1 each
/// node line ends with the user code that traced it ("  # train.cpp:42").
[[nodiscard]] std::string tensors_text(const std::vector<Tensor>& tensors);

/// The same graph as Graphviz: `digraph G { ... }` with a node per IR node, labelled with its op,
/// dtype and shape, and an edge from each operand to its user.
[[nodiscard]] std::string tensors_dot(const std::vector<Tensor>& tensors);

}  // namespace axle
