// spmd_bench: the sample GPT (samples/gpt_model.h, train_gpt's defaults) trained under use_spmd()
// on four CPU devices, one mesh shape after another — 4x1 (data), 2x2 and 1x4 (model,
// Megatron-style as train_gpt --spmd) — against the same model on one device. Per mesh: the
// median step time (AdamW, waiting for each step), the bytes the partitioner estimates each
// device's collectives move per step (SpmdCollectiveBytes) and the parameter bytes one device
// holds.
#include <CLI/CLI.hpp>

#include <chrono>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "benchmarks/report.h"
#include "samples/gpt_model.h"

namespace axle::bench {
namespace {

struct Options {
  int64_t n_layer = 4;
  int64_t n_embd = 128;
  int64_t block_size = 128;
  int64_t batch = 32;
  int steps = 8;
};

void run(const Options& o, std::optional<std::vector<int64_t>> mesh_shape) {
  LazySystem::restart({.cpu_devices = mesh_shape ? 4 : 1});
  if (mesh_shape) use_spmd();
  const Device device{0};
  set_rng_state(1, device);
  samples::Gpt gpt(
      samples::GptConfig{
          .block_size = o.block_size, .n_layer = o.n_layer, .n_head = 4, .n_embd = o.n_embd},
      device);
  std::optional<spmd::Mesh> mesh;
  constexpr auto None = std::nullopt;
  if (mesh_shape) {
    mesh.emplace(std::vector<int64_t>{0, 1, 2, 3}, *mesh_shape,
                 std::vector<std::string>{"data", "model"});
    for (const auto& [name, p] : gpt.named_parameters()) {
      if (name.ends_with("attn.c_attn.weight") || name.ends_with("mlp.c_fc.weight")) {
        spmd::mark_sharding(p, *mesh, {"model", None});
      } else if (name.ends_with("attn.c_attn.bias") || name.ends_with("mlp.c_fc.bias")) {
        spmd::mark_sharding(p, *mesh, {"model"});
      } else if (name.ends_with("c_proj.weight")) {
        spmd::mark_sharding(p, *mesh, {None, "model"});
      }
    }
  }
  optim::AdamW adam(gpt.parameters(), {.lr = 1e-3});
  std::vector<int64_t> tokens(static_cast<std::size_t>(o.batch * o.block_size));
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>(i * 7 % 256);
  const Shape shape{o.batch, o.block_size};
  std::vector<double> ms;
  int64_t bytes_before = 0;
  for (int step = 0; step < o.steps + 2; ++step) {
    if (step == 2) bytes_before = counter_value("SpmdCollectiveBytes").value_or(0);
    const auto start = std::chrono::steady_clock::now();
    Tensor x = tensor(tokens, shape, device);
    Tensor y = tensor(tokens, shape, device);
    if (mesh) {
      spmd::mark_sharding(x, *mesh, {"data", None});
      spmd::mark_sharding(y, *mesh, {"data", None});
    }
    adam.zero_grad();
    const Tensor logits = gpt(x);
    const Tensor loss = nn::cross_entropy(reshape(logits, {o.batch * o.block_size, 256}),
                                          reshape(y, {o.batch * o.block_size}));
    loss.backward();
    adam.step();
    mark_step(/*wait=*/true);
    if (step >= 2) {
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
  }
  const double collective =
      static_cast<double>(counter_value("SpmdCollectiveBytes").value_or(0) - bytes_before) /
      o.steps;
  int64_t whole = 0, held = 0;
  for (const Tensor& p : gpt.parameters()) {
    const DeviceData& data = *p.impl()->data();
    whole += static_cast<int64_t>(data.bytes());
    held += static_cast<int64_t>(data.sharded() ? data.shards()[0]->bytes() : data.bytes());
  }
  const std::string name =
      mesh_shape ? std::to_string((*mesh_shape)[0]) + "x" + std::to_string((*mesh_shape)[1])
                 : "1 device";
  const std::map<std::string, Param> labels{
      {"mesh", name}, {"batch", o.batch}, {"n_layer", o.n_layer}, {"n_embd", o.n_embd}};
  emit("spmd", "step_ms", quantile(ms, 0.5), "ms", labels);
  emit("spmd", "collective_bytes_per_step", collective, "bytes", labels);
  emit("spmd", "parameter_bytes_per_device_ratio",
       static_cast<double>(held) / static_cast<double>(whole), "ratio", labels);
}

}  // namespace
}  // namespace axle::bench

int main(int argc, char** argv) {
  axle::bench::Options o;
  CLI::App app{"spmd_bench: the GPT's step on SPMD meshes 4x1, 2x2 and 1x4 against one device"};
  app.add_option("--n_layer", o.n_layer);
  app.add_option("--n_embd", o.n_embd);
  app.add_option("--block_size", o.block_size);
  app.add_option("--batch", o.batch, "the global batch");
  app.add_option("--steps", o.steps, "timed steps per mesh (after two that compile)");
  CLI11_PARSE(app, argc, argv);
  axle::bench::run(o, std::nullopt);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{4, 1}, {2, 2}, {1, 4}}) {
    axle::bench::run(o, shape);
  }
  axle::LazySystem::restart();
  return 0;
}
