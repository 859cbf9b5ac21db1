// actors: the graph one mark_step executes — the pending IR of the tensors being synced, in
// post-order, with its inputs and outputs. Its hash keys the compile cache: it covers every
// node's own hash and how nodes share operands, but no input's value.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "graph/ir.h"

namespace axle {

struct StepGraph {
  std::vector<NodePtr> nodes;  ///< post-order, each node once
  /// Node i's operands are operand_ids[operand_begin[i] .. operand_begin[i + 1]), as indices.
  std::vector<uint32_t> operand_begin;
  std::vector<int32_t> operand_ids;
  std::vector<int32_t> inputs;   ///< leaf nodes (device data, parameters), in first-use order
  std::vector<int32_t> outputs;  ///< the roots' indices, in the order given (duplicates kept)
  uint64_t hash = 0;

  [[nodiscard]] std::span<const int32_t> operands(std::size_t i) const {
    return {operand_ids.data() + operand_begin[i], operand_begin[i + 1] - operand_begin[i]};
  }
};

/// Builds the step graph of `roots` (iteratively: graphs may be a million nodes deep).
/// `size_hint` is the expected node count (it only sizes buffers).
StepGraph build_step_graph(std::span<const NodePtr> roots, std::size_t size_hint = 0);

}  // namespace axle
