// graph: the graph one mark_step executes — the pending IR of the tensors being synced, in
// post-order, with its inputs and outputs. Its hash keys the compile cache: it covers every
// node's own hash and how nodes share operands, but no input's value.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "axle/graph/ir.h"

namespace axle {

struct StepGraph {
  /// The roots, as given; they keep every node of the graph alive, so `nodes` need not (a
  /// reference count per node would cost two atomic operations per node per step).
  std::vector<NodePtr> roots;
  std::vector<const Node*> nodes;  ///< post-order, each node once
  /// Node i's operands are operand_ids[operand_begin[i] .. operand_begin[i + 1]), as indices.
  std::vector<uint32_t> operand_begin;
  std::vector<int32_t> operand_ids;
  std::vector<int32_t> inputs;   ///< leaf nodes (device data, parameters), in first-use order
  std::vector<int32_t> outputs;  ///< the roots' indices, in the order given (duplicates kept)
  /// Per input, 1 when the step may overwrite its buffer (buffer donation: nothing reads the
  /// input after the step); empty when none is. Part of `hash`, set by whoever syncs the graph.
  std::vector<uint8_t> donated;
  uint64_t hash = 0;

  /// Empties the graph, keeping its buffers.
  void clear() {
    roots.clear();
    nodes.clear();
    operand_begin.clear();
    operand_ids.clear();
    inputs.clear();
    outputs.clear();
    donated.clear();
    hash = 0;
  }

  [[nodiscard]] std::span<const int32_t> operands(std::size_t i) const {
    return {operand_ids.data() + operand_begin[i], operand_begin[i + 1] - operand_begin[i]};
  }
};

/// Working memory of graph building, kept between steps by whoever builds graphs every step (a
/// replica's host): fresh buffers of a large graph's size would be fresh pages to fault in.
struct StepGraphScratch {
  std::vector<uint64_t> node_hashes;
  std::vector<std::pair<const Node*, uint32_t>> stack;
  std::vector<uint8_t> live;
  std::vector<int32_t> new_id;
};

/// Builds the step graph of `roots` (iteratively: graphs may be a million nodes deep). When a
/// root is in the calling thread's CreationLog (its TraceContext's), the log is scanned in
/// creation order and what the roots do not need is dropped afterwards; the rest is found by
/// walking down from the roots. Nodes come in post-order either way; equal programs traced in
/// the same order hash alike. `size_hint` is the expected node count (it only sizes buffers).
StepGraph build_step_graph(std::span<const NodePtr> roots, std::size_t size_hint = 0);
/// The same, into `graph` (cleared first), reusing its buffers and `scratch`'s.
void build_step_graph(std::span<const NodePtr> roots, StepGraph& graph, StepGraphScratch& scratch,
                      std::size_t size_hint = 0);

}  // namespace axle
