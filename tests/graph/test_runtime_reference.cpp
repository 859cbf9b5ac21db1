// Test support: graph-level tests on the reference runtime (graph/reference), no actors.
#include <memory>

#include "axle/engine/metrics.h"
#include "axle/graph/reference/reference_runtime.h"
#include "axle/graph/trace_context.h"
#include "tests/graph/test_runtime.h"

namespace axle::testing {
namespace {

std::unique_ptr<reference::ReferenceRuntimeScope>& runtime() {
  static std::unique_ptr<reference::ReferenceRuntimeScope> scope;
  return scope;
}

}  // namespace

void fresh_runtime(int devices) {
  runtime().reset();
  runtime() = std::make_unique<reference::ReferenceRuntimeScope>(devices);
  clear_all();
}

void sync_step() {
  TraceContext& context = TraceContext::current();
  const std::vector<Tensor> pending = context.pending_tensors();
  require_tensor_runtime("a test's step")
      .sync(pending, SyncReason::kMarkStep, std::source_location::current());
  context.reset_node_count();
}

void wait_all() {}  // the reference runtime is done when sync returns

const char* runtime_name() { return "reference"; }

}  // namespace axle::testing
