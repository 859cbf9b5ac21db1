// graph: post-order collection and hashing of a step's graph.
#include "axle/graph/step_graph.h"

#include "axle/graph/trace_context.h"

#include <algorithm>
#include <utility>

#include "axle/engine/hash.h"

namespace axle {
namespace {

// Node -> post-order index, open addressing: a step of N nodes makes N lookups and N inserts,
// and a node-based map would allocate for each.
class NodeIndex {
 public:
  // Allocates on first insert: most steps have no node from another thread.
  explicit NodeIndex(std::size_t expected) : expected_(expected) {}

  [[nodiscard]] int32_t find(const Node* node) const {
    if (keys_.empty()) return -1;
    for (std::size_t i = slot(node);; i = (i + 1) & mask_) {
      if (keys_[i] == node) return values_[i];
      if (!keys_[i]) return -1;
    }
  }
  void insert(const Node* node, int32_t value) {
    if (keys_.empty()) rehash(expected_ < 16 ? 32 : expected_ * 2);
    if (2 * (size_ + 1) > keys_.size()) rehash(keys_.size() * 2);
    std::size_t i = slot(node);
    while (keys_[i]) i = (i + 1) & mask_;
    keys_[i] = node;
    values_[i] = value;
    ++size_;
  }

 private:
  [[nodiscard]] std::size_t slot(const Node* node) const {
    return static_cast<std::size_t>(hash_combine(0, reinterpret_cast<uintptr_t>(node))) & mask_;
  }
  void rehash(std::size_t capacity) {
    std::size_t n = 1;
    while (n < capacity) n <<= 1;
    std::vector<const Node*> keys = std::move(keys_);
    std::vector<int32_t> values = std::move(values_);
    keys_.assign(n, nullptr);
    values_.assign(n, -1);
    mask_ = n - 1;
    size_ = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i]) insert(keys[i], values[i]);
    }
  }
  std::size_t expected_;
  std::vector<const Node*> keys_;
  std::vector<int32_t> values_;
  std::size_t mask_ = 0;
  std::size_t size_ = 0;
};

// Which nodes this walk has numbered. Nodes created on this thread carry the mark themselves (a
// store into memory the walk reads anyway); others — tensors shared across replica threads — go
// through the map, so no two threads ever write one node's mark.
class Visited {
 public:
  Visited(TraceContext* context, std::size_t expected)
      : walk_(context ? context->next_walk() : 0),
        thread_(context ? context->id() : 0),
        foreign_(expected / 8) {}

  [[nodiscard]] int32_t find(const Node* node) const {
    if (node->creator_id() == thread_) {
      const Node::VisitMark& mark = node->visit_mark();
      return mark.walk == walk_ ? mark.index : -1;
    }
    return foreign_.find(node);
  }
  void insert(const Node* node, int32_t index) {
    if (node->creator_id() == thread_) {
      node->visit_mark() = {walk_, index};
    } else {
      foreign_.insert(node, index);
    }
  }

 private:
  uint32_t walk_;
  uint32_t thread_;
  NodeIndex foreign_;
};

}  // namespace

namespace {

// Appends nodes to a step graph in post-order, recording each node's own hash.
class GraphBuilder {
 public:
  GraphBuilder(StepGraph& graph, StepGraphScratch& scratch, TraceContext* context,
               std::size_t expected)
      : graph_(graph),
        index_(context, expected),
        stack_(scratch.stack),
        node_hashes_(scratch.node_hashes) {
    graph_.nodes.reserve(expected);
    graph_.operand_begin.reserve(expected + 1);
    graph_.operand_ids.reserve(expected * 2);
    graph_.inputs.reserve(expected / 2);
    graph_.operand_begin.push_back(0);
    stack_.clear();
    node_hashes_.clear();
    node_hashes_.reserve(expected);
  }

  [[nodiscard]] bool has(const Node* node) const { return index_.find(node) >= 0; }

  /// Appends `start` after whichever of its operands the graph does not have yet (an explicit
  /// DFS: graphs may be a million nodes deep).
  void append_with_operands(const Node* start) {
    // Most nodes need no walk: each operand is in the graph already or is a leaf.
    const std::span<const NodePtr> operands = start->operands();
    if (std::all_of(operands.begin(), operands.end(), [&](const NodePtr& operand) {
          return operand->operands().empty() || has(operand.get());
        })) {
      for (const NodePtr& operand : operands) {
        if (!has(operand.get())) append(operand.get());
      }
      append(start);
      return;
    }
    stack_.emplace_back(start, 0);
    while (!stack_.empty()) {
      auto& [node, next] = stack_.back();
      if (next < node->operands().size()) {
        const Node* operand = node->operands()[next++].get();
        if (index_.find(operand) < 0) stack_.emplace_back(operand, 0);
        continue;
      }
      append(node);
      stack_.pop_back();
    }
  }

  void add_output(const Node* root) {
    if (index_.find(root) < 0) append_with_operands(root);
    graph_.outputs.push_back(index_.find(root));
  }

  /// The nodes' own hashes, by id.
  [[nodiscard]] std::vector<uint64_t>& node_hashes() { return node_hashes_; }

 private:
  // Appends a node whose operands are all in the graph.
  void append(const Node* node) {
    const auto id = static_cast<int32_t>(graph_.nodes.size());
    index_.insert(node, id);
    for (const NodePtr& operand : node->operands()) {
      graph_.operand_ids.push_back(index_.find(operand.get()));
    }
    graph_.operand_begin.push_back(static_cast<uint32_t>(graph_.operand_ids.size()));
    if (node->is_leaf()) graph_.inputs.push_back(id);
    graph_.nodes.push_back(node);
    node_hashes_.push_back(node->hash());
  }

  StepGraph& graph_;
  Visited index_;
  std::vector<std::pair<const Node*, uint32_t>>& stack_;
  std::vector<uint64_t>& node_hashes_;
};

// Appends every node in this thread's creation log, in creation order (a topological order), with
// any operands from outside the log (leaves, nodes of other threads or of earlier syncs) through
// the DFS. The log's addresses are known up front, so the loads overlap (and are prefetched)
// instead of forming a chain of dependent misses as a walk down from the roots would.
void append_logged(GraphBuilder& builder, std::span<const Node* const> logged) {
  constexpr std::size_t kAhead = 16;  // about a cache miss's latency, in nodes
  for (std::size_t i = 0; i < logged.size(); ++i) {
    if (i + kAhead < logged.size()) __builtin_prefetch(logged[i + kAhead]);
    if (!builder.has(logged[i])) builder.append_with_operands(logged[i]);
  }
}

// Removes the nodes no output depends on (log entries that were garbage, or belong to tensors
// not being synced), renumbering the rest. Works on the graph's arrays only: no node is read.
void drop_unreachable(StepGraph& graph, StepGraphScratch& scratch,
                      std::vector<uint64_t>& node_hashes) {
  const std::size_t n = graph.nodes.size();
  std::vector<uint8_t>& live = scratch.live;
  live.assign(n, 0);
  for (int32_t out : graph.outputs) live[out] = 1;
  std::size_t live_count = 0;
  for (std::size_t id = n; id-- > 0;) {
    if (!live[id]) continue;
    ++live_count;
    for (int32_t operand : graph.operands(id)) live[operand] = 1;
  }
  if (live_count == n) return;

  std::vector<int32_t>& new_id = scratch.new_id;
  new_id.assign(n, -1);
  StepGraph kept;
  kept.nodes.reserve(live_count);
  kept.operand_begin.reserve(live_count + 1);
  kept.operand_begin.push_back(0);
  std::vector<uint64_t> kept_hashes;
  kept_hashes.reserve(live_count);
  for (std::size_t id = 0; id < n; ++id) {
    if (!live[id]) continue;
    new_id[id] = static_cast<int32_t>(kept.nodes.size());
    for (int32_t operand : graph.operands(id)) kept.operand_ids.push_back(new_id[operand]);
    kept.operand_begin.push_back(static_cast<uint32_t>(kept.operand_ids.size()));
    kept.nodes.push_back(graph.nodes[id]);
    kept_hashes.push_back(node_hashes[id]);
  }
  for (int32_t input : graph.inputs) {
    if (live[input]) kept.inputs.push_back(new_id[input]);
  }
  for (int32_t out : graph.outputs) kept.outputs.push_back(new_id[out]);
  kept.roots = std::move(graph.roots);
  graph = std::move(kept);
  node_hashes = std::move(kept_hashes);
}

// A polynomial in per-node terms, each mixed on its own, so consecutive nodes' mixing overlaps
// instead of forming one long dependency chain; finished with a full mix.
uint64_t graph_hash(const StepGraph& graph, std::span<const uint64_t> node_hashes) {
  constexpr uint64_t kTermMultiplier = 0x9e3779b97f4a7c15ULL;
  constexpr uint64_t kHashMultiplier = 0xd6e8feb86659fd93ULL;
  uint64_t h = hash_combine(0x61786c65ULL, graph.outputs.size());
  for (std::size_t id = 0; id < graph.nodes.size(); ++id) {
    const std::span<const int32_t> operands = graph.operands(id);
    uint64_t term = node_hashes[id];
    for (int32_t operand : operands) term = term * kTermMultiplier + static_cast<uint32_t>(operand);
    h = h * kHashMultiplier + hash_combine(term, operands.size());
  }
  for (int32_t out : graph.outputs) {
    h = h * kHashMultiplier + hash_combine(static_cast<uint64_t>(out), 0x6f7574ULL);
  }
  return hash_combine(h, graph.nodes.size());
}

}  // namespace

StepGraph build_step_graph(std::span<const NodePtr> roots, std::size_t size_hint) {
  StepGraph graph;
  StepGraphScratch scratch;
  build_step_graph(roots, graph, scratch, size_hint);
  return graph;
}

void build_step_graph(std::span<const NodePtr> roots, StepGraph& graph, StepGraphScratch& scratch,
                      std::size_t size_hint) {
  graph.clear();
  graph.roots.assign(roots.begin(), roots.end());
  TraceContext* context = TraceContext::current_if_any();
  // Some slack over the hint: growing these vectors would copy them and fault in fresh pages.
  GraphBuilder builder(graph, scratch, context,
                       std::max(size_hint + size_hint / 8 + 16, roots.size() * 8));
  const CreationLog* log = context ? &context->creation_log() : nullptr;
  const bool from_log = log && std::any_of(roots.begin(), roots.end(), [&](const NodePtr& root) {
                          return log->contains(root.get());
                        });
  if (from_log) append_logged(builder, log->nodes());
  for (const NodePtr& root : roots) builder.add_output(root.get());
  if (from_log) drop_unreachable(graph, scratch, builder.node_hashes());
  graph.hash = graph_hash(graph, builder.node_hashes());
}

}  // namespace axle
