// actors: post-order collection and hashing of a step's graph.
#include "actors/step_graph.h"

#include <algorithm>
#include <utility>

#include "engine/hash.h"

namespace axle {
namespace {

// Node -> post-order index, open addressing: a step of N nodes makes N lookups and N inserts,
// and a node-based map would allocate for each.
class NodeIndex {
 public:
  explicit NodeIndex(std::size_t expected) { rehash(expected < 16 ? 32 : expected * 2); }

  [[nodiscard]] int32_t find(const Node* node) const {
    for (std::size_t i = slot(node);; i = (i + 1) & mask_) {
      if (keys_[i] == node) return values_[i];
      if (!keys_[i]) return -1;
    }
  }
  void insert(const Node* node, int32_t value) {
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
  explicit Visited(std::size_t expected) : walk_(next_walk()), foreign_(expected / 8) {}

  [[nodiscard]] int32_t find(const Node* node) const {
    if (node->created_on_this_thread()) {
      const Node::VisitMark& mark = node->visit_mark();
      return mark.walk == walk_ ? mark.index : -1;
    }
    return foreign_.find(node);
  }
  void insert(const Node* node, int32_t index) {
    if (node->created_on_this_thread()) {
      node->visit_mark() = {walk_, index};
    } else {
      foreign_.insert(node, index);
    }
  }

 private:
  static uint32_t next_walk() {
    if (++tls_walks_ == 0) ++tls_walks_;  // 0 marks a node no walk has seen
    return tls_walks_;
  }
  static thread_local uint32_t tls_walks_;
  uint32_t walk_;
  NodeIndex foreign_;
};

thread_local uint32_t Visited::tls_walks_ = 0;

}  // namespace

StepGraph build_step_graph(std::span<const NodePtr> roots, std::size_t size_hint) {
  StepGraph graph;
  const std::size_t expected = std::max(size_hint, roots.size() * 8);
  Visited index(expected);
  graph.nodes.reserve(expected);
  graph.operand_begin.reserve(expected + 1);
  graph.operand_ids.reserve(expected * 2);
  graph.operand_begin.push_back(0);
  // Explicit DFS stack of (node, next operand to visit).
  std::vector<std::pair<const Node*, uint32_t>> stack;
  uint64_t hash = hash_combine(0x61786c65ULL, roots.size());
  for (const NodePtr& root : roots) {
    if (index.find(root.get()) < 0) {
      stack.emplace_back(root.get(), 0);
      while (!stack.empty()) {
        auto& [node, next] = stack.back();
        if (next < node->operands().size()) {
          const Node* operand = node->operands()[next++].get();
          if (index.find(operand) < 0) stack.emplace_back(operand, 0);
          continue;
        }
        const auto id = static_cast<int32_t>(graph.nodes.size());
        index.insert(node, id);
        hash = hash_combine(hash, node->hash());
        for (const NodePtr& operand : node->operands()) {
          const int32_t operand_id = index.find(operand.get());
          graph.operand_ids.push_back(operand_id);
          hash = hash_combine(hash, static_cast<uint64_t>(operand_id));
        }
        graph.operand_begin.push_back(static_cast<uint32_t>(graph.operand_ids.size()));
        if (node->is_leaf()) graph.inputs.push_back(id);
        graph.nodes.emplace_back(const_cast<Node*>(node));
        stack.pop_back();
      }
    }
    const int32_t root_id = index.find(root.get());
    graph.outputs.push_back(root_id);
    hash = hash_combine(hash, static_cast<uint64_t>(root_id) | (1ULL << 40));
  }
  graph.hash = hash;
  return graph;
}

}  // namespace axle
