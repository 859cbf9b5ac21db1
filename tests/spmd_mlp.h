// tests: a two-layer MLP trained a few steps under SPMD, Megatron's layout over a mesh's "model"
// axis and the batch over its "data" axis — what the in-process and MPI forms of the SPMD tests
// (tests/actors/spmd_runtime_test.cpp, tests/mpi/spmd_test.cpp) share, so that both compare a
// mesh's training with one device's the same way. An axis of size 1 leaves what it lays out
// whole, so one mesh shape covers data, model and data-and-model parallelism.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "axle/axle.h"

namespace axle::spmd_mlp {

/// The value of metrics counter `name` (0 before its first count).
inline int64_t count(const char* name) { return counter_value(name).value_or(0); }

/// `n` values uniform in [-scale, scale).
inline std::vector<float> random_values(std::mt19937& rng, int64_t n, float scale = 1) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> values(static_cast<std::size_t>(n));
  for (float& v : values) v = u(rng);
  return values;
}

/// A two-layer MLP written as plain ops, so every run starts from the same weights.
struct Mlp {
  Tensor w1, b1, w2, b2;
  Mlp(const std::vector<std::vector<float>>& init, int64_t in, int64_t hidden, int64_t out)
      : w1(tensor(init[0], {hidden, in})),
        b1(tensor(init[1], {hidden})),
        w2(tensor(init[2], {out, hidden})),
        b2(tensor(init[3], {out})) {
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->requires_grad_();
  }
  [[nodiscard]] std::vector<Tensor> parameters() const { return {w1, b1, w2, b2}; }
  Tensor forward(const Tensor& x) const {
    const Tensor h = relu(matmul(x, transpose(w1, 0, 1)) + b1);
    return matmul(h, transpose(w2, 0, 1)) + b2;
  }
};

/// What a run leaves: its losses and weights, the compiles it took, and how w1 is held.
struct TrainingRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> weights;
  int64_t compiles = 0;
  std::size_t w1_shards = 0;  // the pieces of w1 this process holds
  int w1_first = 0;           // the mesh position of the first
  Shape w1_shard;             // the first piece's shape (w1's own when whole)
};

/// Trains the MLP for `steps` SGD steps with momentum on two batches taking turns (a new upload
/// every step, and a loss that falls); with a mesh, w1's rows, b1 and w2's columns over "model"
/// and the batch over "data".
inline TrainingRun train(const std::optional<Mesh>& mesh, int steps) {
  constexpr int64_t kIn = 12, kHidden = 16, kOut = 8, kBatch = 8;
  constexpr auto kWhole = std::nullopt;
  std::mt19937 rng(7);
  std::vector<std::vector<float>> init{
      random_values(rng, kHidden * kIn, 0.3f), random_values(rng, kHidden, 0.1f),
      random_values(rng, kOut * kHidden, 0.3f), random_values(rng, kOut, 0.1f)};
  Mlp mlp(init, kIn, kHidden, kOut);
  if (mesh) {
    spmd::mark_sharding(mlp.w1, *mesh, {"model", kWhole});
    spmd::mark_sharding(mlp.b1, *mesh, {"model"});
    spmd::mark_sharding(mlp.w2, *mesh, {kWhole, "model"});
  }
  optim::SGD sgd(mlp.parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t compiles_before = count("UncachedCompile");
  std::mt19937 data_rng(11);
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int64_t>> targets;
  for (int b = 0; b < 2; ++b) {
    inputs.push_back(random_values(data_rng, kBatch * kIn));
    targets.emplace_back(kBatch);
    for (auto& l : targets.back()) l = static_cast<int64_t>(data_rng() % kOut);
  }
  std::vector<Tensor> losses;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = tensor(inputs[step % 2], {kBatch, kIn});
    const Tensor y = tensor(targets[step % 2], {kBatch});
    if (mesh) {
      spmd::mark_sharding(x, *mesh, {"data", kWhole});
      spmd::mark_sharding(y, *mesh, {"data"});
    }
    sgd.zero_grad();
    const Tensor loss = nn::cross_entropy(mlp.forward(x), y);
    loss.backward();
    sgd.step();
    mark_step();
    losses.push_back(loss);
  }
  TrainingRun run;
  for (const Tensor& loss : losses) run.losses.push_back(loss.item());
  for (const Tensor& p : mlp.parameters()) run.weights.push_back(p.to_vector<float>());
  run.compiles = count("UncachedCompile") - compiles_before;
  const DeviceData& w1 = *mlp.w1.impl()->data();
  run.w1_shards = w1.sharded() ? w1.shards().size() : 1;
  run.w1_first = w1.first_shard();
  run.w1_shard = w1.sharded() ? w1.shards()[0]->shape() : w1.shape();
  return run;
}

}  // namespace axle::spmd_mlp
