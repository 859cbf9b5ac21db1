// graph: IR dumps. Graphs run to millions of nodes in a chain, so the walk keeps its own stack;
// recursion would overflow the thread's.
#include "axle/graph/dump.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <unordered_map>

#include "axle/graph/graph_settings.h"
#include "axle/graph/sharding.h"

namespace axle {
namespace {

/// The nodes computing some tensors, in post-order, and which of them the tensors are.
struct Graph {
  std::vector<const Node*> nodes;
  std::unordered_map<const Node*, int64_t> ids;  // index into nodes; -1 while being visited
  std::vector<std::optional<int64_t>> outputs;   // nullopt for an undefined tensor
  std::vector<NodePtr> roots;                    // keeps device-data leaves alive
};

Graph post_order(const std::vector<Tensor>& tensors) {
  Graph g;
  struct Frame {
    const Node* node;
    std::size_t next_operand;
  };
  std::vector<Frame> stack;
  for (const Tensor& t : tensors) {
    if (!t.defined()) {
      g.outputs.emplace_back();
      continue;
    }
    // The tensor's own leaf when it holds data, so a graph that also reads it shows one leaf.
    NodePtr root = t.impl()->value_node(SourceLocation{});
    if (!g.ids.contains(root.get())) {
      g.ids.emplace(root.get(), -1);
      stack.push_back({root.get(), 0});
    }
    while (!stack.empty()) {
      Frame& top = stack.back();
      const std::span<const NodePtr> operands = top.node->operands();
      if (top.next_operand < operands.size()) {
        const Node* operand = operands[top.next_operand++].get();
        // A node already seen is finished: in a DAG none of a node's operands leads back to it.
        if (g.ids.emplace(operand, -1).second) stack.push_back({operand, 0});
        continue;
      }
      g.ids[top.node] = static_cast<int64_t>(g.nodes.size());
      g.nodes.push_back(top.node);
      stack.pop_back();
    }
    g.outputs.emplace_back(g.ids.at(root.get()));
    g.roots.push_back(std::move(root));
  }
  return g;
}

const char* basename(const char* path) {
  const char* base = path;
  for (const char* p = path; *p; ++p) {
    if (*p == '/') base = p + 1;
  }
  return base;
}

// "add", "constant(1)", "device_data".
std::string op_text(const Node& node) {
  if (node.op() == Op::kConstant) return fmt::format("constant({})", node.value());
  return std::string(op_name(node.op()));
}

// ", ints=[0,1], reals=[0.5]" (a constant's value is in op_text instead); a sharding annotation
// or a sharded leaf shows its sharding in XLA's text: ", sharding={devices=[2,1]0,1}".
std::string attributes_text(const Node& node) {
  std::string s;
  if ((node.op() == Op::kCustomSharding || node.op() == Op::kDeviceData) &&
      node.ints().size() == 1) {
    return fmt::format(", sharding={}", to_string(interned_sharding(node.ints()[0])));
  }
  if (!node.ints().empty()) s += fmt::format(", ints=[{}]", fmt::join(node.ints(), ","));
  if (!node.reals().empty() && node.op() != Op::kConstant) {
    s += fmt::format(", reals=[{}]", fmt::join(node.reals(), ","));
  }
  return s;
}

std::string location_text(const Node& node) {
  const SourceLocation& where = node.where();
  if (where.line() == 0 && *where.file() == '\0') return "?";
  return fmt::format("{}:{}", basename(where.file()), where.line());
}

std::string type_text(const Node& node) {
  return fmt::format("{}{}", dtype_name(node.dtype()), node.shape().to_string());
}

}  // namespace

std::string tensors_text(const std::vector<Tensor>& tensors) {
  const bool debug = config::read_ir_dump_settings().source_lines;
  const Graph g = post_order(tensors);
  std::string out = "IR {\n";
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = *g.nodes[i];
    out += fmt::format("  %{} = {} {}", i, type_text(node), op_text(node));
    if (!node.operands().empty()) {
      out += '(';
      for (std::size_t j = 0; j < node.operands().size(); ++j) {
        out += fmt::format("{}%{}", j ? ", " : "", g.ids.at(node.operands()[j].get()));
      }
      out += ')';
    }
    out += attributes_text(node);
    if (debug) out += fmt::format("  # {}", location_text(node));
    out += '\n';
  }
  out += "  outputs: ";
  for (std::size_t i = 0; i < g.outputs.size(); ++i) {
    if (i) out += ", ";
    out += g.outputs[i] ? fmt::format("%{}", *g.outputs[i]) : std::string("undefined");
  }
  out += "\n}\n";
  return out;
}

std::string tensors_dot(const std::vector<Tensor>& tensors) {
  const bool debug = config::read_ir_dump_settings().source_lines;
  const Graph g = post_order(tensors);
  std::vector<std::string> roots(g.nodes.size());
  for (std::size_t i = 0; i < g.outputs.size(); ++i) {
    if (!g.outputs[i]) continue;
    std::string& r = roots[static_cast<std::size_t>(*g.outputs[i])];
    r += fmt::format("{}ROOT={}", r.empty() ? "\\n" : ",", i);
  }
  std::string out = "digraph G {\n";
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& node = *g.nodes[i];
    std::string attributes = attributes_text(node);
    if (!attributes.empty()) attributes = "\\n" + attributes.substr(2);  // drop the ", "
    out += fmt::format("  node{} [label=\"{}\\n{}{}{}{}\"];\n", i, op_text(node), type_text(node),
                       attributes, roots[i],
                       debug ? fmt::format("\\n{}", location_text(node)) : std::string());
  }
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const std::span<const NodePtr> operands = g.nodes[i]->operands();
    for (std::size_t j = 0; j < operands.size(); ++j) {
      const int64_t from = g.ids.at(operands[j].get());
      // Operand order matters (sub, div, where), so a node with several operands numbers them.
      if (operands.size() > 1) {
        out += fmt::format("  node{} -> node{} [label=\"i={}\"];\n", from, i, j);
      } else {
        out += fmt::format("  node{} -> node{};\n", from, i);
      }
    }
  }
  out += "}\n";
  return out;
}

}  // namespace axle
