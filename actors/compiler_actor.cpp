// actors: compiling step graphs.
#include "actors/compiler_actor.h"

#include <chrono>

#include "actors/lowering.h"
#include "engine/metrics.h"

namespace axle {

void CompilerActor::handle(CompileRequest& request, Promise<IntrusivePtr<Executable>>&& reply) {
  // Handlers run one at a time, so a request for a hash compiled by an earlier request (or by a
  // concurrent replica's) finds it in the cache here: that is the de-duplication.
  const uint64_t hash = request.graph->hash;
  if (IntrusivePtr<Executable> done = cache_.find(hash)) {
    AXLE_COUNTER_INC("CachedCompile", 1);
    reply.set_value(std::move(done));
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  IntrusivePtr<Executable> program = compile_graph(*request.graph, passes_);
  const double compile_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  AXLE_METRIC_ADD("CompileTime", MetricKind::kTime, compile_ns);
  AXLE_COUNTER_INC("UncachedCompile", 1);
  cache_.insert(hash, program);
  reply.set_value(std::move(program));
}

}  // namespace axle
