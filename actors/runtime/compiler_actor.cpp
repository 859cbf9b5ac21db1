// actors: compiling step graphs.
#include "axle/actors/runtime/compiler_actor.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "axle/actors/compiler/debug_analysis.h"
#include "axle/actors/compiler/lowering.h"
#include "axle/actors/compiler/program_dump.h"
#include "axle/engine/log.h"
#include "axle/engine/metrics.h"
#include "axle/engine/trace.h"

namespace axle {
namespace {

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

// XLA_FLAGS=--xla_dump_to=DIR: each compiled program before (the step graph) and after the
// compiler's passes and lowering; an SPMD one also after sharding propagation and partitioning.
void dump(const std::string& dir, const StepGraph& graph, const Executable& program,
          const std::string& spmd) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  const std::string stem = fmt::format("{}/axle_{:016x}", dir, graph.hash);
  std::ofstream(stem + ".before.txt") << step_graph_text(graph);
  if (!spmd.empty()) std::ofstream(stem + ".spmd.txt") << spmd;
  std::ofstream after(stem + ".after.txt");
  after << program_text(program);
  if (!after) AXLE_LOG(WARNING, "--xla_dump_to={}: could not write {}.after.txt", dir, stem);
}

}  // namespace

void CompilerActor::handle(CompileRequest& request, Promise<IntrusivePtr<Executable>>&& reply) {
  // Handlers run one at a time, so a request for a hash compiled by an earlier request (or by a
  // concurrent replica's) finds it in the cache here: that is the de-duplication.
  const uint64_t hash = request.graph->hash;
  const auto start = std::chrono::steady_clock::now();
  if (IntrusivePtr<Executable> done = cache_.find(hash)) {
    const Span lookup{start, observer_now()};
    observers_.tell(
        [&](ActorObserver& o) { o.program_found(ProgramSource::kMemoryCache, lookup); });
    reply.set_value(std::move(done));
    return;
  }
  // SPMD programs stay in memory: an entry on disk does not keep how shards are fed and bound.
  const std::shared_ptr<const PersistentCache> persistent =
      persistent_ && request.spmd_devices == 0 ? persistent_() : nullptr;
  if (persistent) {
    const ProgramInterface expected = interface_of(*request.graph);
    if (IntrusivePtr<Executable> loaded = persistent->load(hash, &expected)) {
      const Span lookup{start, observer_now()};
      observers_.tell(
          [&](ActorObserver& o) { o.program_found(ProgramSource::kPersistentCache, lookup); });
      cache_.insert(hash, loaded);
      reply.set_value(std::move(loaded));
      return;
    }
    observers_.tell([&](ActorObserver& o) { o.program_not_persisted(); });
  }
  if (debug_level_ >= 1) {
    fmt::print(stderr, "{}",
               history_.compilation_analysis(*request.graph, request.reason, request.where));
  }
  const auto compile_start = std::chrono::steady_clock::now();
  IntrusivePtr<Executable> program;
  const std::string dump_dir = xla_dump_dir();
  std::string spmd_dump;
  try {
    program = compile_graph(*request.graph, passes_, request.spmd_devices,
                            dump_dir.empty() ? nullptr : &spmd_dump);
  } catch (const std::exception& e) {
    save_failed_program(fmt::format("compilation failed: {}", e.what()),
                        step_graph_text(*request.graph));
    throw;
  }
  if (!dump_dir.empty()) dump(dump_dir, *request.graph, *program, spmd_dump);
  const Span compiled{compile_start, observer_now()};
  observers_.tell(
      [&](ActorObserver& o) { o.program_compiled(*request.graph, *program, compiled); });
  if (debug_level_ >= 1) fmt::print(stderr, "{}", post_compilation_analysis(*program));
  cache_.insert(hash, program);
  reply.set_value(program);
  // After replying, so the device need not wait for the disk.
  if (persistent) persistent->store(hash, *program);
}

}  // namespace axle
