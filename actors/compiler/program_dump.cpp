// actors: program and graph dumps.
#include "axle/actors/compiler/program_dump.h"
#include "axle/actors/compiler/compiler_settings.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <mutex>

#include "axle/engine/log.h"
#include "axle/graph/sharding.h"

namespace axle {

std::string program_text(const Executable& program) {
  std::string text =
      fmt::format("program {:016x}: {} slots, {} calls, peak {} bytes\n", program.graph_hash,
                  program.slots.size(), program.calls.size(), program.plan.peak_bytes);
  auto slot = [&](int32_t s) {
    const BufferDesc& d = program.slots.at(static_cast<std::size_t>(s));
    return fmt::format("%{} {}{}", s, dtype_name(d.dtype), d.shape.to_string());
  };
  for (std::size_t i = 0; i < program.input_slots.size(); ++i) {
    const int32_t s = program.input_slots[i];
    text += fmt::format("  input {}: {} ({} bytes){}\n", i, slot(s), program.slots[s].bytes(),
                        program.donated(i) ? " donated" : "");
  }
  const bool planned = !program.plan.empty();
  for (std::size_t c = 0; c < program.calls.size(); ++c) {
    const KernelCall& call = program.calls[c];
    std::vector<std::string> operands;
    for (int32_t in : call.inputs) operands.push_back(fmt::format("%{}", in));
    text += fmt::format("  {} = {}({})", slot(call.output), kernel_name(call.kernel),
                        fmt::join(operands, ", "));
    if (!call.ints.empty()) text += fmt::format(" ints=[{}]", fmt::join(call.ints, ","));
    if (!call.reals.empty()) text += fmt::format(" reals=[{}]", fmt::join(call.reals, ","));
    if (planned) {
      if (program.plan.in_place[c] >= 0)
        text += fmt::format(" in place of %{}", program.plan.in_place[c]);
      std::vector<std::string> released;
      for (uint32_t r = program.plan.release_begin[c]; r < program.plan.release_begin[c + 1]; ++r) {
        released.push_back(fmt::format("%{}", program.plan.release_slots[r]));
      }
      if (!released.empty()) text += fmt::format(" releases {}", fmt::join(released, " "));
    }
    text += '\n';
  }
  std::vector<std::string> outputs;
  for (int32_t s : program.output_slots) outputs.push_back(fmt::format("%{}", s));
  return text + fmt::format("  outputs: {}\n", fmt::join(outputs, ", "));
}

std::string step_graph_text(const StepGraph& graph) {
  std::string text = fmt::format("graph {:016x}: {} nodes, {} inputs, {} outputs\n", graph.hash,
                                 graph.nodes.size(), graph.inputs.size(), graph.outputs.size());
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& node = *graph.nodes[i];
    std::vector<std::string> operands;
    for (uint32_t k = graph.operand_begin[i]; k < graph.operand_begin[i + 1]; ++k) {
      operands.push_back(fmt::format("%{}", graph.operand_ids[k]));
    }
    text += fmt::format("  %{} = {} {}{}({})", i, op_name(node.op()), dtype_name(node.dtype()),
                        node.shape().to_string(), fmt::join(operands, ", "));
    if ((node.op() == Op::kCustomSharding || node.op() == Op::kDeviceData) &&
        node.ints().size() == 1) {
      text += fmt::format(" sharding={}", to_string(interned_sharding(node.ints()[0])));
    } else if (!node.ints().empty()) {
      text += fmt::format(" ints=[{}]", fmt::join(node.ints(), ","));
    }
    if (node.where().known())
      text += fmt::format(" at {}:{}", node.where().file(), node.where().line());
    text += '\n';
  }
  return text;
}

std::string xla_dump_dir() { return config::read_program_dump_settings().dump_to; }

void save_failed_program(const std::string& what, const std::string& text) {
  const std::string path = config::read_program_dump_settings().save_hlo_file;
  if (path.empty()) return;
  static std::mutex mutex;
  std::lock_guard lock(mutex);
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (!file) {
    AXLE_LOG(ERROR, "XLA_SAVE_HLO_FILE={}: cannot open for appending", path);
    return;
  }
  std::fprintf(file, "[%s]\n%s\n", what.c_str(), text.c_str());
  std::fclose(file);
}

}  // namespace axle
