// actors: appending synced graphs to XLA_SAVE_TENSORS_FILE.
#include "axle/actors/compiler/saved_graphs.h"

#include <fmt/format.h>

#include <cstdio>

#include "axle/actors/compiler/lowering.h"
#include "axle/actors/compiler/program_dump.h"
#include "axle/engine/log.h"
#include "axle/graph/dump.h"
#include "axle/graph/step_graph.h"

namespace axle {
namespace {

// The program the compiler makes of the tensors' pending graph (XLA_SAVE_TENSORS_FMT=hlo),
// lowered here for the dump: fused kernels, buffer assignment and sizes.
std::string lowered_text(const std::vector<Tensor>& tensors) {
  std::vector<NodePtr> roots;
  for (const Tensor& t : tensors) {
    if (t.defined() && t.impl()->pending_ir()) roots.push_back(t.impl()->ir());
  }
  if (roots.empty()) return "(nothing pending)\n";
  const StepGraph graph = build_step_graph(roots);
  return program_text(*compile_graph(graph, PassSet::from_config()));
}

}  // namespace

SavedGraphs::SavedGraphs(std::string path, config::SaveTensorsFormat format)
    : path_(std::move(path)), format_(format) {}

void SavedGraphs::append(const std::vector<Tensor>& tensors, std::string_view reason) {
  if (path_.empty()) return;
  using Format = config::SaveTensorsFormat;
  const std::string dump = format_ == Format::kDot   ? tensors_dot(tensors)
                           : format_ == Format::kHlo ? lowered_text(tensors)
                                                     : tensors_text(tensors);
  std::lock_guard lock(mutex_);
  std::FILE* file = std::fopen(path_.c_str(), "a");
  if (!file) {
    AXLE_LOG(ERROR, "XLA_SAVE_TENSORS_FILE={}: cannot open for appending", path_);
    return;
  }
  std::fprintf(file, "[%.*s]\n%s\n", static_cast<int>(reason.size()), reason.data(), dump.c_str());
  std::fclose(file);
}

}  // namespace axle
