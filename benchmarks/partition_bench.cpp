// partition_bench: the SPMD partitioner (graph/passes/partitioner.cpp) on the training step of a
// stack of Megatron MLP blocks (x + linear(gelu(linear(x, w1, b1)), w2, b2) per layer, mean
// squared loss, backward, SGD), traced once. Shardings by the rule the partitioner tests use: the
// batch dim over "data", the hidden dim over "model" (column- then row-parallel weights).
//   partition_ms            — median time of one partition() call
//   partition_ns_per_instr  — the same per instruction of the global program
//   passes_ms               — median time of the other IR passes (run_passes) on the same
//                             program, the yardstick: partition_ms / passes_ms is the figure to
//                             compare across runs
//   collective_bytes        — the partitioner's estimate of what one step brings each device
// JSON lines on stdout (see benchmarks/README.md).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "axle/graph/ops.h"
#include "axle/graph/passes/passes.h"
#include "axle/graph/step_graph.h"
#include "benchmarks/report.h"

namespace axle::bench {
namespace {

using Clock = std::chrono::steady_clock;

Tensor leaf(const Shape& shape, bool requires_grad) {
  Tensor t(make_intrusive<TensorImpl>(
      DType::kFloat32, make_intrusive<DeviceData>(Device{}, DType::kFloat32, shape)));
  if (requires_grad) t.requires_grad_();
  return t;
}

Program megatron_step(int64_t layers, int64_t batch, int64_t width, int64_t hidden) {
  Tensor x = leaf({batch, width}, false);
  const Tensor target = leaf({batch, width}, false);
  std::vector<Tensor> params;
  for (int64_t l = 0; l < layers; ++l) {
    const Tensor w1 = leaf({hidden, width}, true);
    const Tensor b1 = leaf({hidden}, true);
    const Tensor w2 = leaf({width, hidden}, true);
    const Tensor b2 = leaf({width}, true);
    x = x + linear(gelu(linear(x, w1, b1)), w2, b2);
    params.insert(params.end(), {w1, b1, w2, b2});
  }
  const Tensor diff = x - target;
  const Tensor loss = mean(diff * diff);
  loss.backward();
  std::vector<NodePtr> roots{loss.impl()->ir()};
  for (const Tensor& p : params) roots.push_back((p - p.grad() * 0.01).impl()->ir());
  return Program::from(build_step_graph(roots));
}

std::vector<ShardingSpec> shardings(const Program& program, const Mesh& mesh, int64_t batch,
                                    int64_t hidden) {
  std::vector<ShardingSpec> out;
  for (std::size_t id = 0; id < program.size(); ++id) {
    const Shape& shape = program[id].shape;
    PartitionSpec spec;
    bool data = false;
    bool model = false;
    for (int d = 0; d < shape.rank(); ++d) {
      if (!data && shape[d] == batch) {
        spec.emplace_back("data");
        data = true;
      } else if (!model && shape[d] == hidden) {
        spec.emplace_back("model");
        model = true;
      } else {
        spec.emplace_back(std::nullopt);
      }
    }
    out.push_back(mesh.sharding(spec, shape.rank()));
  }
  return out;
}

template <class F>
double median_ms(int rounds, F&& f) {
  std::vector<double> samples;
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    f();
    samples.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  return quantile(samples, 0.5);
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  using namespace axle;
  using namespace axle::bench;
  CLI::App app{"partition_bench: the SPMD partitioner on a Megatron MLP training step"};
  int64_t layers = 24;
  int64_t data = 2;
  int64_t model = 4;
  int rounds = 20;
  bool quick = false;
  app.add_option("--layers", layers, "MLP blocks");
  app.add_option("--data", data, "devices along the mesh's data axis");
  app.add_option("--model", model, "devices along the mesh's model axis");
  app.add_option("--rounds", rounds, "timed calls (median reported)");
  app.add_flag("--quick", quick, "4 layers, 5 rounds");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    layers = 4;
    rounds = 5;
  }
  constexpr int64_t kBatch = 64;
  constexpr int64_t kWidth = 256;
  constexpr int64_t kHidden = 1024;
  const Program program = megatron_step(layers, kBatch, kWidth, kHidden);
  std::vector<int64_t> ids(static_cast<std::size_t>(data * model));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  const Mesh mesh(ids, {data, model}, {"data", "model"});
  const std::vector<ShardingSpec> specs = shardings(program, mesh, kBatch, kHidden);

  PartitionedProgram partitioned;
  const double partition_ms =
      median_ms(rounds, [&] { partitioned = partition(program, specs, data * model); });
  const double passes_ms = median_ms(rounds, [&] { (void)run_passes(program, PassSet{}); });
  const std::map<std::string, Param> params{
      {"layers", layers},
      {"mesh", fmt::format("{}x{}", data, model)},
      {"instructions", static_cast<int64_t>(program.size())},
      {"partitioned_instructions", static_cast<int64_t>(partitioned.program.size())},
      {"rounds", static_cast<int64_t>(rounds)}};
  emit("partition", "partition_ms", partition_ms, "ms", params);
  emit("partition", "partition_ns_per_instr",
       partition_ms * 1e6 / static_cast<double>(program.size()), "ns", params);
  emit("partition", "passes_ms", passes_ms, "ms", params);
  emit("partition", "collective_bytes", static_cast<double>(partitioned.collective_bytes),
       "bytes", params);
  return 0;
}
