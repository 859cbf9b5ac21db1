// actors: compiling step graphs.
#include "actors/compiler_actor.h"

#include <fmt/format.h>

#include "actors/debug_analysis.h"

#include <chrono>

#include "actors/lowering.h"
#include "engine/metrics.h"
#include "engine/trace.h"

namespace axle {
namespace {

double elapsed_ns(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
}

// What the host binds and the device hands back for `graph`: a program from disk must agree.
ProgramInterface interface_of(const StepGraph& graph) {
  ProgramInterface interface;
  interface.inputs.reserve(graph.inputs.size());
  for (int32_t id : graph.inputs) {
    interface.inputs.push_back({graph.nodes[id]->dtype(), graph.nodes[id]->shape()});
  }
  interface.outputs.reserve(graph.outputs.size());
  for (int32_t id : graph.outputs) {
    interface.outputs.push_back({graph.nodes[id]->dtype(), graph.nodes[id]->shape()});
  }
  interface.donated_inputs = graph.donated;
  return interface;
}

}  // namespace

void CompilerActor::handle(CompileRequest& request, Promise<IntrusivePtr<Executable>>&& reply) {
  // Handlers run one at a time, so a request for a hash compiled by an earlier request (or by a
  // concurrent replica's) finds it in the cache here: that is the de-duplication.
  const uint64_t hash = request.graph->hash;
  if (IntrusivePtr<Executable> done = cache_.find(hash)) {
    AXLE_COUNTER_INC("CachedCompile", 1);
    reply.set_value(std::move(done));
    return;
  }
  const std::shared_ptr<const PersistentCache> persistent = persistent_ ? persistent_() : nullptr;
  if (persistent) {
    const auto start = std::chrono::steady_clock::now();
    const ProgramInterface expected = interface_of(*request.graph);
    if (IntrusivePtr<Executable> loaded = persistent->load(hash, &expected)) {
      AXLE_METRIC_ADD("PersistentCacheLoadTime", MetricKind::kTime, elapsed_ns(start));
      AXLE_COUNTER_INC("PersistentCacheHit", 1);
      cache_.insert(hash, loaded);
      reply.set_value(std::move(loaded));
      return;
    }
    AXLE_COUNTER_INC("PersistentCacheMiss", 1);
  }
  if (debug_level_ >= 1) {
    fmt::print(stderr, "{}",
               history_.compilation_analysis(*request.graph, request.reason, request.where));
  }
  const auto start = std::chrono::steady_clock::now();
  const Trace span("compile", "compiler");
  IntrusivePtr<Executable> program = compile_graph(*request.graph, passes_);
  AXLE_METRIC_ADD("CompileTime", MetricKind::kTime, elapsed_ns(start));
  AXLE_COUNTER_INC("UncachedCompile", 1);
  if (debug_level_ >= 1) fmt::print(stderr, "{}", post_compilation_analysis(*program));
  cache_.insert(hash, program);
  reply.set_value(program);
  // After replying, so the device need not wait for the disk.
  if (persistent) persistent->store(hash, *program);
}

}  // namespace axle
