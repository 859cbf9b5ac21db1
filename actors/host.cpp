// actors: turning a replica's pending IR into executions.
#include "actors/host.h"

#include <algorithm>
#include <chrono>
#include <unordered_map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <string>
#include <unordered_set>

#include "actors/debug_analysis.h"
#include "actors/lazy_system.h"
#include "actors/replicas.h"
#include "actors/step_breakdown.h"
#include "engine/hash.h"
#include "engine/metrics.h"
#include "engine/trace.h"
#include "graph/step_graph.h"
#include "graph/trace_context.h"

namespace axle {
namespace {

// A cache hit needs the graph only until its inputs are read, so each replica thread builds into
// one graph it keeps (its buffers are warm); a miss hands the graph over to the compiler.
thread_local StepGraph tls_step_graph;

Future<IntrusivePtr<Executable>> find_or_compile(LazySystem& system, StepGraph& graph,
                                                 SyncReason reason,
                                                 const std::source_location& where) {
  if (system.debug_level() >= 2) {
    fmt::print(stderr, "{}", execution_analysis(graph, reason, where));
  }
  if (IntrusivePtr<Executable> hit = system.cache().find(graph.hash)) {
    AXLE_COUNTER_INC("CachedCompile", 1);
    auto [promise, future] = make_promise<IntrusivePtr<Executable>>();
    promise.set_value(std::move(hit));
    return future;
  }
  return system.compiler().ask(
      CompileRequest{std::make_shared<const StepGraph>(std::move(graph)), reason, where});
}

// Buffer donation (XLA_ENABLE_PARAM_ALIASING): after a step that syncs every pending tensor of
// this thread, nothing of its graph survives but the outputs, so an input no tensor holds is read
// by this step alone, and the step may overwrite its buffer (parameters and optimizer state
// updated in place, a batch nobody kept). Such an input must appear once and not be an output.
// Which inputs are donated is part of the graph's hash: it depends on the program the user
// wrote, not on timing, so a training loop donates the same inputs every step.
void mark_donations(StepGraph& graph) {
  std::vector<std::pair<const DeviceData*, std::size_t>> candidates;
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    const Node& leaf = *graph.nodes[graph.inputs[i]];
    if (leaf.op() == Op::kDeviceData && leaf.data()->tensor_refs() == 0) {
      candidates.emplace_back(leaf.data().get(), i);
    }
  }
  if (candidates.empty()) return;
  std::ranges::sort(candidates);
  graph.donated.assign(graph.inputs.size(), 0);
  std::size_t donated = 0;
  for (std::size_t k = 0; k < candidates.size(); ++k) {
    const bool repeated =
        (k > 0 && candidates[k - 1].first == candidates[k].first) ||
        (k + 1 < candidates.size() && candidates[k + 1].first == candidates[k].first);
    const std::size_t input = candidates[k].second;
    if (repeated || std::ranges::find(graph.outputs, graph.inputs[input]) != graph.outputs.end()) {
      continue;
    }
    graph.donated[input] = 1;
    ++donated;
  }
  if (donated == 0) {
    graph.donated.clear();
    return;
  }
  uint64_t h = hash_combine(graph.hash, 0x646f6e61746564ULL);  // "donated"
  for (uint8_t d : graph.donated) h = hash_combine(h, d);
  graph.hash = h;
  AXLE_COUNTER_INC("DonatedInputs", static_cast<int64_t>(donated));
}

// Whether any node of `graph` is an in-graph collective (remembered by hash: a training loop
// syncs the same few graphs every step).
bool has_collectives(const StepGraph& graph) {
  thread_local std::unordered_map<uint64_t, bool> known;
  auto [it, inserted] = known.try_emplace(graph.hash, false);
  if (inserted) {
    it->second = std::ranges::any_of(graph.nodes, [](const Node* node) {
      return node->op() >= Op::kAllReduce && node->op() <= Op::kCollectivePermute;
    });
  }
  return it->second;
}

// What a replica brings to the comparison of graphs: the graph's hash, and its nodes described
// for the error that names where two graphs diverge.
struct GraphSignature {
  uint64_t hash = 0;
  std::vector<std::string> nodes;   // what the hash covers: op, type, attributes
  std::vector<std::string> places;  // where each was traced (a leaf: where it was first used)
};

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

// Replicas that trace different graphs around a collective would wait for each other forever
// (the hang PyTorch/XLA users meet most). Before a graph with collectives first runs, every
// replica brings its graph's hash; when they differ, all fail at once, naming who differs from
// replica 0 and where its graph diverged.
void check_replicas_agree(const StepGraph& graph) {
  thread_local std::unordered_set<uint64_t> agreed;
  if (agreed.contains(graph.hash)) return;
  auto mine = std::make_shared<GraphSignature>();
  mine->hash = graph.hash;
  mine->nodes.reserve(graph.nodes.size());
  mine->places.reserve(graph.nodes.size());
  for (const Node* node : graph.nodes) {
    mine->nodes.push_back(describe_node(*node));
    mine->places.push_back(place_of(*node));
  }
  const Gathered all = detail::gather("mark_step", "compare graphs before their collectives run",
                                      std::move(mine), typeid(GraphSignature), {});
  const auto& reference = *static_cast<const GraphSignature*>(all->front().get());
  std::vector<int> differing;
  for (std::size_t r = 1; r < all->size(); ++r) {
    if (static_cast<const GraphSignature*>((*all)[r].get())->hash != reference.hash) {
      differing.push_back(static_cast<int>(r));
    }
  }
  if (differing.empty()) {
    agreed.insert(graph.hash);
    return;
  }
  const auto& other = *static_cast<const GraphSignature*>((*all)[differing.front()].get());
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
          ? fmt::format("diverges at node {}: replica 0 traced {} where replica {} traced {}", at,
                        node_at(reference), differing.front(), node_at(other))
          : std::string("has the same ops but donates other inputs");
  throw CollectiveError(fmt::format(
      "replicas traced different graphs for a step with collectives: replica{} {{{}}} differ{} "
      "from replica 0. Replica {} {}. Every replica must trace the same ops in the same order "
      "between mark_steps (scalars 0 and 1 are graph constants: a scalar that is 0 on one replica "
      "and not on another changes the graph)",
      differing.size() == 1 ? "" : "s", fmt::join(differing, ", "),
      differing.size() == 1 ? "s" : "", differing.front(), where));
}

void sync_device(LazySystem& system, Device device, const std::vector<TensorImpl*>& tensors,
                 bool wait, bool may_donate, SyncReason reason, const std::source_location& where,
                 std::vector<IntrusivePtr<DeviceData>>* step_outputs) {
  // One output per distinct IR node; tensors sharing a node share its placeholder.
  std::vector<NodePtr> roots;
  std::unordered_map<const Node*, std::size_t> root_of;
  std::vector<std::size_t> tensor_root(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const NodePtr& ir = tensors[i]->ir();
    auto [it, inserted] = root_of.try_emplace(ir.get(), roots.size());
    if (inserted) roots.push_back(ir);
    tensor_root[i] = it->second;
  }
  // Each traced op made one node and usually one scalar leaf.
  const std::size_t hint = 2 * TraceContext::current().nodes_since_step();
  StepGraph& graph = tls_step_graph;
  build_step_graph(roots, graph, hint);
  if (may_donate) mark_donations(graph);

  const int64_t sync_start = trace_recording() ? trace_now() : 0;
  auto request = make_intrusive<ExecuteRequest>();
  request->account = this_thread_breakdown();
  if (const detail::ReplicaIdentity* replica = detail::current_replica()) {
    request->replica_group = replica->group;
    request->replica = replica->ordinal;
    if (has_collectives(graph)) {
      request->collective_timeout = detail::collective_timeout();
      try {
        check_replicas_agree(graph);
      } catch (...) {
        graph.clear();
        throw;
      }
    }
  }
  request->inputs.reserve(graph.inputs.size());
  for (int32_t id : graph.inputs) {
    const Node& leaf = *graph.nodes[id];
    if (leaf.op() == Op::kDeviceData) {
      request->inputs.push_back({leaf.data(), leaf.dtype(), 0});
    } else {
      request->inputs.push_back({{}, leaf.dtype(), leaf.value()});
    }
  }
  request->outputs.reserve(roots.size());
  for (const NodePtr& root : roots) {
    request->outputs.push_back(make_intrusive<DeviceData>(device, root->dtype(), root->shape()));
  }
  request->program = find_or_compile(system, graph, reason, where);
  graph.clear();  // drops its references to the roots
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    tensors[i]->set_data(request->outputs[tensor_root[i]]);
  }
  if (step_outputs) {
    step_outputs->insert(step_outputs->end(), request->outputs.begin(), request->outputs.end());
  }
  std::vector<IntrusivePtr<DeviceData>> outputs;
  if (wait) outputs = request->outputs;
  if (sync_start != 0) {
    request->trace_flow = new_trace_flow();
    record_span(fmt::format("{} -> {}", reason_name(reason), device.to_string()), "host",
                sync_start, trace_now(), request->trace_flow);
  }
  system.device_actor(device).tell(Execute{std::move(request)});
  if (wait) {
    for (auto& out : outputs) out->wait();
  }
}

}  // namespace

std::string_view reason_name(SyncReason reason) {
  switch (reason) {
    case SyncReason::kMarkStep:
      return "mark_step";
    case SyncReason::kValueAccess:
      return "value access";
    case SyncReason::kEager:
      return "eager";
    case SyncReason::kGraphLimit:
      return "graph node limit";
    case SyncReason::kCompile:
      return "compile";
    case SyncReason::kLoaderStep:
      return "parallel loader step";
  }
  return "sync";
}

void sync_tensors(const std::vector<Tensor>& tensors, bool wait, SyncReason reason,
                  const std::source_location& where,
                  std::vector<IntrusivePtr<DeviceData>>* step_outputs) {
  LazySystem& system = LazySystem::get();
  system.save_graph(tensors, reason_name(reason));
  std::vector<std::pair<int, std::vector<TensorImpl*>>> by_device;
  for (const Tensor& t : tensors) {
    if (!t.defined() || !t.impl()->pending_ir()) continue;
    const int ordinal = t.device().ordinal;
    auto it = std::find_if(by_device.begin(), by_device.end(),
                           [&](const auto& group) { return group.first == ordinal; });
    if (it == by_device.end()) {
      by_device.emplace_back(ordinal, std::vector<TensorImpl*>{});
      it = std::prev(by_device.end());
    }
    TensorImpl* impl = t.impl();
    if (std::find(it->second.begin(), it->second.end(), impl) == it->second.end()) {
      it->second.push_back(impl);
    }
  }
  // Only a mark_step syncs every pending tensor of the thread (see mark_donations).
  const bool steps = reason == SyncReason::kMarkStep || reason == SyncReason::kCompile ||
                     reason == SyncReason::kLoaderStep;
  const bool may_donate = steps && system.param_aliasing() && !Node::ir_shared_across_threads();
  for (auto& [ordinal, impls] : by_device) {
    sync_device(system, Device{ordinal}, impls, wait, may_donate, reason, where, step_outputs);
  }
  // The synced tensors now read device data: what the log holds of their graphs is garbage
  // (and anything still pending is held by its tensors).
  CreationLog::this_thread().clear();
}

}  // namespace axle
