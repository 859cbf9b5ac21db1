// actors/host: replicas agree on a graph before its collectives run — each brings its graph's
// signature (hash, nodes, where each was traced) to the others; when they differ, all fail
// together naming the first node where a replica's graph left replica 0's.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/actors/host/replica_host.h"
#include "axle/engine/hash.h"
#include "axle/graph/sharding.h"

namespace axle {
namespace {

// What a replica brings to the comparison of graphs: the graph's hash, and its nodes described
// for the error that names where two graphs diverge.
struct GraphSignature {
  uint64_t hash = 0;
  std::vector<std::string> nodes;   // what the hash covers: op, type, attributes
  std::vector<std::string> places;  // where each was traced (a leaf: where it was first used)
};

// How a signature crosses processes.
constexpr ValueCodec kSignatureCodec{
    [](const void* value, WireWriter& out, int) {
      const auto& signature = *static_cast<const GraphSignature*>(value);
      out.put(signature.hash);
      out.put<uint64_t>(signature.nodes.size());
      for (std::size_t i = 0; i < signature.nodes.size(); ++i) {
        out.put_string(signature.nodes[i]);
        out.put_string(signature.places[i]);
      }
    },
    [](WireReader& in, const ProcessMessage&) -> std::shared_ptr<const void> {
      auto signature = std::make_shared<GraphSignature>();
      signature->hash = in.get<uint64_t>("a graph's hash");
      const auto nodes = in.get<uint64_t>("a graph's node count");
      for (uint64_t i = 0; i < nodes; ++i) {
        signature->nodes.push_back(in.get_string("a node"));
        signature->places.push_back(in.get_string("a node's place"));
      }
      return signature;
    }};

std::string describe_node(const Node& node) {
  std::string text = fmt::format("{} {}{}", op_name(node.op()), dtype_name(node.dtype()),
                                 node.shape().to_string());
  if (node.op() == Op::kConstant) text += fmt::format(" {}", node.value());
  if (!node.ints().empty()) text += fmt::format(" {}", fmt::join(node.ints(), ","));
  if (!node.reals().empty()) text += fmt::format(" {}", fmt::join(node.reals(), ","));
  return text;
}

std::string place_of(const Node& node) {
  return node.where().known() ? fmt::format(" (at {}:{})", node.where().file(), node.where().line())
                              : std::string();
}

// The error naming who traced a different graph from replica 0, and where it diverged.
CollectiveError divergence_error(const GraphSignature& reference, const GraphSignature& other,
                                 const std::vector<int>& differing, bool spmd) {
  std::size_t at = 0;
  while (at < reference.nodes.size() && at < other.nodes.size() &&
         reference.nodes[at] == other.nodes[at]) {
    ++at;
  }
  auto node_at = [&](const GraphSignature& g) {
    return at < g.nodes.size() ? g.nodes[at] + g.places[at] : std::string("nothing more");
  };
  const std::string where =
      at < reference.nodes.size() || at < other.nodes.size()
          ? fmt::format("diverges at node {}: {} 0 traced {} where {} {} traced {}", at,
                        spmd ? "process" : "replica", node_at(reference),
                        spmd ? "process" : "replica", differing.front(), node_at(other))
          : std::string("has the same ops but donates other inputs");
  if (spmd) {
    return CollectiveError(fmt::format(
        "use_spmd: the processes of the job traced different SPMD programs: process{} {{{}}} "
        "differ{} from process 0. Process {} {}. Every process must run the same program over "
        "the same mesh (Mesh device ids are the job's global ordinals) and the same shardings",
        differing.size() == 1 ? "" : "es", fmt::join(differing, ", "),
        differing.size() == 1 ? "s" : "", differing.front(), where));
  }
  return CollectiveError(fmt::format(
      "replicas traced different graphs for a step with collectives: replica{} {{{}}} differ{} "
      "from replica 0. Replica {} {}. Every replica must trace the same ops in the same order "
      "between mark_steps (scalars 0 and 1 are graph constants: a scalar that is 0 on one replica "
      "and not on another changes the graph)",
      differing.size() == 1 ? "" : "s", fmt::join(differing, ", "),
      differing.size() == 1 ? "s" : "", differing.front(), where));
}

}  // namespace

bool ReplicaHost::has_collectives(const StepGraph& graph) {
  auto [it, inserted] = has_collectives_.try_emplace(graph.hash, false);
  if (inserted) {
    it->second = std::ranges::any_of(graph.nodes, [](const Node* node) {
      return node->op() >= Op::kAllReduce && node->op() <= Op::kCollectivePermute;
    });
  }
  return it->second;
}

// Replicas that trace different graphs around a collective would wait for each other forever
// (the hang PyTorch/XLA users meet most). Before a graph with collectives first runs, every
// replica brings its graph's hash; when they differ, all fail at once, naming who differs from
// replica 0 and where its graph diverged.
void ReplicaHost::check_replicas_agree(const StepGraph& graph) {
  if (agreed_.contains(graph.hash)) return;
  auto mine = std::make_shared<GraphSignature>();
  mine->hash = graph.hash;
  mine->nodes.reserve(graph.nodes.size());
  mine->places.reserve(graph.nodes.size());
  // Under SPMD the processes of the job compare their global programs. A sharding is named by a
  // key of the process's own (intern_sharding), so they compare its text instead, and the hash
  // of what they compare.
  const bool spmd = LazySystem::get().spmd();
  if (spmd) mine->hash = LazySystem::get().spmd_device_count();
  for (const Node* node : graph.nodes) {
    std::string text = describe_node(*node);
    if (spmd && (node->op() == Op::kCustomSharding || node->op() == Op::kDeviceData) &&
        !node->ints().empty() && node->ints()[0] >= 0) {
      text += " sharding " + to_string(interned_sharding(node->ints()[0]));
    }
    if (spmd) mine->hash = hash_combine(mine->hash, std::hash<std::string>{}(text));
    mine->nodes.push_back(std::move(text));
    mine->places.push_back(place_of(*node));
  }
  const Gathered all =
      exchange_with_replicas(LazySystem::get().rendezvous_actor(), *replica_, "mark_step",
                             "compare graphs before their collectives run", std::move(mine),
                             typeid(GraphSignature), {}, &kSignatureCodec);
  const auto& reference = *static_cast<const GraphSignature*>(all->front().get());
  std::vector<int> differing;
  for (std::size_t r = 1; r < all->size(); ++r) {
    if (static_cast<const GraphSignature*>((*all)[r].get())->hash != reference.hash) {
      differing.push_back(static_cast<int>(r));
    }
  }
  if (differing.empty()) {
    agreed_.insert(graph.hash);
    return;
  }
  throw divergence_error(reference,
                         *static_cast<const GraphSignature*>((*all)[differing.front()].get()),
                         differing, spmd);
}

}  // namespace axle
