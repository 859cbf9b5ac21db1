// actors: the blocks PT_XLA_DEBUG_LEVEL prints, and the memory of earlier graphs per source line
// that names the reason for a recompilation.
#include "axle/actors/compiler/debug_analysis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "axle/engine/metrics.h"
#include "axle/graph/sharding.h"

namespace axle {
namespace {

constexpr std::size_t kGraphsPerLine = 4;  // earlier graphs remembered per source line

// A graph as the recompile reason compares it: its inputs' types and its nodes.
struct GraphRecord {
  uint64_t hash = 0;
  std::vector<std::string> inputs;  // "f32[128,784]"
  std::vector<int32_t> input_nodes;
  std::vector<std::string> nodes;   // op, type and attributes
  std::vector<std::string> places;  // " (at file:line)" or ""
};

std::string type_of(const Node& node) {
  return fmt::format("{}{}", dtype_name(node.dtype()), node.shape().to_string());
}

GraphRecord record_of(const StepGraph& graph) {
  GraphRecord record;
  record.hash = graph.hash;
  record.nodes.reserve(graph.nodes.size());
  record.places.reserve(graph.nodes.size());
  for (const Node* node : graph.nodes) {
    std::string text = fmt::format("{} {}", op_name(node->op()), type_of(*node));
    if (node->op() == Op::kConstant) text += fmt::format(" {}", node->value());
    if ((node->op() == Op::kCustomSharding || node->op() == Op::kDeviceData) &&
        node->ints().size() == 1) {
      // The one int is a key to the sharding: shown as XLA's text, as the IR dumps show it.
      text += fmt::format(" sharding={}", to_string(interned_sharding(node->ints()[0])));
    } else if (!node->ints().empty()) {
      text += fmt::format(" ints=[{}]", fmt::join(node->ints(), ","));
    }
    if (!node->reals().empty()) text += fmt::format(" reals=[{}]", fmt::join(node->reals(), ","));
    record.nodes.push_back(std::move(text));
    record.places.push_back(node->where().known() ? fmt::format(" (at {}:{})", node->where().file(),
                                                                node->where().line())
                                                  : std::string());
  }
  for (int32_t id : graph.inputs) {
    record.inputs.push_back(type_of(*graph.nodes[id]));
    record.input_nodes.push_back(id);
  }
  return record;
}

std::string line_key(const std::source_location& where) {
  return fmt::format("{}:{}", where.file_name(), where.line());
}

void remember(std::deque<GraphRecord>& records, GraphRecord record) {
  for (auto it = records.begin(); it != records.end(); ++it) {
    if (it->hash == record.hash) {
      records.erase(it);
      break;
    }
  }
  records.push_front(std::move(record));
  if (records.size() > kGraphsPerLine) records.pop_back();
}

std::size_t common_prefix(const GraphRecord& a, const GraphRecord& b) {
  std::size_t k = 0;
  while (k < a.nodes.size() && k < b.nodes.size() && a.nodes[k] == b.nodes[k]) ++k;
  return k;
}

// The first difference between `now` and the nearest of `earlier` (the one agreeing longest).
std::string recompile_reason(const GraphRecord& now, const std::deque<GraphRecord>& earlier) {
  const GraphRecord* nearest = nullptr;
  std::size_t best = 0;
  for (const GraphRecord& record : earlier) {
    if (record.hash == now.hash) continue;
    const std::size_t k = common_prefix(now, record);
    if (!nearest || k > best) {
      nearest = &record;
      best = k;
    }
  }
  if (!nearest) return "none: the first graph synced from this line";
  if (now.inputs.size() == nearest->inputs.size()) {
    for (std::size_t i = 0; i < now.inputs.size(); ++i) {
      if (now.inputs[i] != nearest->inputs[i]) {
        return fmt::format("input {} is {}, was {} in the graph last compiled from this line{}", i,
                           now.inputs[i], nearest->inputs[i],
                           now.places[static_cast<std::size_t>(now.input_nodes[i])]);
      }
    }
  }
  const std::size_t k = best;
  if (k < now.nodes.size() && k < nearest->nodes.size()) {
    return fmt::format("node {} is {}{}, was {} in the graph last compiled from this line", k,
                       now.nodes[k], now.places[k], nearest->nodes[k]);
  }
  if (k < now.nodes.size()) {
    return fmt::format("an op more than the graph last compiled from this line: {}{}", now.nodes[k],
                       now.places[k]);
  }
  if (k < nearest->nodes.size()) {
    return fmt::format(
        "an op fewer than the graph last compiled from this line, which went on "
        "with {}",
        nearest->nodes[k]);
  }
  return "the same ops as the graph last compiled from this line, with other inputs donated "
         "(buffers no tensor holds any more)";
}

std::string block(std::string_view title, const std::vector<std::string>& lines) {
  const std::string rule(80, '=');
  std::string text = fmt::format("{}: {}\n", title, rule);
  for (const std::string& line : lines) text += fmt::format("{}: {}\n", title, line);
  text += fmt::format("{}: {}\n{}: {}\n", title, std::string(80, '-'), title, rule);
  return text;
}

std::vector<std::string> graph_lines(std::string_view cause_heading, const StepGraph& graph,
                                     SyncReason reason, const std::source_location& where) {
  return {std::string(cause_heading),
          fmt::format("  {}", reason_cause(reason)),
          "Graph Info:",
          fmt::format("  Graph Hash: {:016x}", graph.hash),
          fmt::format("  Number of Graph Inputs: {}", graph.inputs.size()),
          fmt::format("  Number of Graph Outputs: {}", graph.outputs.size()),
          "Source Line Triggered Execution:",
          fmt::format("  {} ({}:{})", where.function_name(), where.file_name(), where.line())};
}

std::string gigabytes(uint64_t bytes) {
  return fmt::format("{:.6f} GB ({} bytes)", static_cast<double>(bytes) / 1e9, bytes);
}

}  // namespace

struct CompileHistory::Lines {
  std::unordered_map<std::string, std::deque<GraphRecord>> by_line;
};

CompileHistory::CompileHistory() : lines_(std::make_unique<Lines>()) {}
CompileHistory::~CompileHistory() = default;

std::string CompileHistory::compilation_analysis(const StepGraph& graph, SyncReason reason,
                                                 const std::source_location& where) {
  GraphRecord record = record_of(graph);
  std::deque<GraphRecord>& earlier = lines_->by_line[line_key(where)];
  std::vector<std::string> lines = graph_lines("Compilation Cause", graph, reason, where);
  lines.emplace_back("Recompile Reason:");
  lines.push_back(fmt::format("  {}", recompile_reason(record, earlier)));
  remember(earlier, std::move(record));
  return block("Compilation Analysis", lines);
}

std::string post_compilation_analysis(const Executable& program) {
  uint64_t inputs = 0;
  uint64_t aliased = 0;
  for (std::size_t i = 0; i < program.input_slots.size(); ++i) {
    const uint64_t bytes = program.slots[program.input_slots[i]].bytes();
    inputs += bytes;
    if (program.donated(i)) aliased += bytes;
  }
  uint64_t outputs = 0;
  for (int32_t slot : program.output_slots) outputs += program.slots[slot].bytes();
  uint64_t intermediates = 0;
  if (program.plan.peak_bytes > inputs + outputs) {
    intermediates = program.plan.peak_bytes - inputs - outputs;
  }
  uint64_t program_bytes = sizeof(Executable) + program.slots.size() * sizeof(BufferDesc);
  for (const KernelCall& call : program.calls) {
    program_bytes += sizeof(KernelCall) + call.inputs.size() * sizeof(int32_t) +
                     call.ints.size() * sizeof(int64_t) + call.reals.size() * sizeof(double);
  }
  std::vector<std::string> lines{
      fmt::format("Graph input size: {}", gigabytes(inputs)),
      fmt::format("Graph output size: {}", gigabytes(outputs)),
      fmt::format("Aliased Input size: {}", gigabytes(aliased)),
      fmt::format("Intermediate tensor size: {}", gigabytes(intermediates)),
      fmt::format("Compiled program size: {}", gigabytes(program_bytes))};
  if (program.spmd.devices > 0) {
    // Where the partitioner met the other devices: each collective it inserted, in program order.
    std::vector<const KernelCall*> collectives;
    for (const KernelCall& call : program.calls) {
      if (is_collective(call.kernel)) collectives.push_back(&call);
    }
    lines.push_back(
        fmt::format("SPMD: one program for each of {} devices (sizes above are one device's), {} "
                    "collective{} inserted, moving about {} per device per execution",
                    program.spmd.devices, collectives.size(), collectives.size() == 1 ? "" : "s",
                    gigabytes(static_cast<uint64_t>(program.spmd.collective_bytes))));
    constexpr std::size_t kShown = 24;
    for (std::size_t i = 0; i < collectives.size() && i < kShown; ++i) {
      lines.push_back(fmt::format("  {}", describe_call(program, *collectives[i])));
    }
    if (collectives.size() > kShown) {
      lines.push_back(fmt::format("  ... and {} more", collectives.size() - kShown));
    }
    auto text = [](int64_t key) {
      return key < 0 ? std::string("{replicated}") : to_string(interned_sharding(key));
    };
    for (std::size_t i = 0; i < program.spmd.input_shardings.size(); ++i) {
      if (static_cast<int32_t>(i) == program.spmd.partition_input) continue;
      lines.push_back(
          fmt::format("  input {} sharding {}", i, text(program.spmd.input_shardings[i])));
    }
    for (std::size_t i = 0; i < program.spmd.output_shardings.size(); ++i) {
      lines.push_back(
          fmt::format("  output {} sharding {}", i, text(program.spmd.output_shardings[i])));
    }
  }
  return block("Post Compilation Analysis", lines);
}

MetricsAnalysis::MetricsAnalysis() : last_(now(0)) {}

MetricsAnalysis::Snapshot MetricsAnalysis::now(int64_t steps) {
  auto samples = [](std::string_view name) {
    const std::optional<MetricData> data = metric_data(name);
    return data ? data->total_samples : 0;
  };
  const std::optional<MetricData> wait = metric_data("InputWaitTime");
  return Snapshot{
      steps,
      samples("CompileTime"),
      samples("TransferFromDeviceTime"),
      samples("ExecuteTime"),
      wait ? wait->accumulator : 0.0,
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch())
          .count()};
}

std::string MetricsAnalysis::step(int64_t every) {
  std::lock_guard lock(mutex_);
  if (++steps_ % std::max<int64_t>(every, 1) != 0) return {};
  return look_locked();
}

std::string MetricsAnalysis::look() {
  std::lock_guard lock(mutex_);
  return look_locked();
}

std::string MetricsAnalysis::look_locked() {
  const Snapshot current = now(steps_);
  Snapshot before = std::exchange(last_, current);
  // Metrics cleared since the last look (clear_all) count from zero.
  if (current.compiles < before.compiles) before.compiles = 0;
  if (current.transfers < before.transfers) before.transfers = 0;
  if (current.executions < before.executions) before.executions = 0;
  if (current.input_wait_ns < before.input_wait_ns) before.input_wait_ns = 0;
  const int64_t steps = current.steps - before.steps;
  std::vector<std::string> lines;
  const int64_t compiles = current.compiles - before.compiles;
  if (compiles > std::max<int64_t>(2, steps / 10)) {
    lines.push_back(fmt::format(
        "CompileTime too frequent: {} counts during {} steps. The graph changes from step to "
        "step; PT_XLA_DEBUG_LEVEL=1's Recompile Reason names what changed (often an input shape, "
        "such as a smaller last batch, or a scalar that is 0 or 1 on some steps only)",
        compiles, steps));
  }
  const int64_t transfers = current.transfers - before.transfers;
  if (transfers >= 2 && transfers >= steps) {
    lines.push_back(fmt::format(
        "TransferFromDeviceTime too frequent: {} counts during {} steps. Each value read "
        "(item(), to_vector(), cpu()) waits for the device and cuts the graph; read values "
        "in step closures (add_step_closure) or less often",
        transfers, steps));
  }
  if (const std::optional<MetricData> compile = metric_data("CompileTime"); compile && compiles) {
    const auto recent = std::span(compile->samples)
                            .last(std::min<std::size_t>(compile->samples.size(),
                                                        static_cast<std::size_t>(compiles)));
    for (const auto& [when, ns] : recent) {
      if (ns > 10e9) {
        lines.push_back(fmt::format(
            "A compilation took {}: graphs this large compile slowly; mark_step more often "
            "to cut them into smaller steps",
            format_metric_value(MetricKind::kTime, ns)));
        break;
      }
    }
  }
  const int64_t executions = current.executions - before.executions;
  if (const std::optional<MetricData> execute = metric_data("ExecuteTime");
      execute && executions > 0 && execute->samples.size() >= 8) {
    std::vector<double> all;
    for (const auto& [when, ns] : execute->samples) all.push_back(ns);
    std::vector<double> sorted = all;
    std::ranges::nth_element(sorted,
                             sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2));
    const double median = sorted[sorted.size() / 2];
    const double slowest = *std::ranges::max_element(std::span(all).last(
        std::min<std::size_t>(all.size(), static_cast<std::size_t>(executions))));
    if (slowest > 10 * median && slowest > 10e6) {
      lines.push_back(fmt::format(
          "An execution took {}, {:.0f} times the median {}: a step that differs from the "
          "others (an evaluation, a larger batch) or a device shared with other work",
          format_metric_value(MetricKind::kTime, slowest), slowest / median,
          format_metric_value(MetricKind::kTime, median)));
    }
  }
  const double wall = current.wall_ns - before.wall_ns;
  const double waited = current.input_wait_ns - before.input_wait_ns;
  if (wall > 0 && waited / wall > 0.05) {
    lines.push_back(fmt::format(
        "InputWaitTime is {:.0f}% of the time: replicas wait for their next batch, so the input "
        "pipeline is slower than the devices; give the DataLoader more workers or the "
        "ParallelLoader a deeper loader_prefetch_size",
        100 * waited / wall));
  }
  std::string text;
  for (const std::string& line : lines) text += fmt::format("Metrics Analysis: {}\n", line);
  return text;
}

std::string execution_analysis(const StepGraph& graph, SyncReason reason,
                               const std::source_location& where) {
  return block("Execution Analysis", graph_lines("Execution Cause", graph, reason, where));
}

}  // namespace axle
