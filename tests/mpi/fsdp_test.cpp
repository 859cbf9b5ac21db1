// FullyShardedDataParallel (actors/parallel/fully_sharded_data_parallel.h) in a job of several
// processes, run under mpirun by CTest (2 processes of 2 devices): a small GPT trained on every
// replica of the job, blocks nested and resharded, gives the losses one device gives on the whole
// global batch; each replica's shards, saved by global ordinal, consolidate in any process into the
// model without FSDP.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/io/checkpoint.h"
#include "axle/io/sharded_checkpoint.h"
#include "samples/gpt_model.h"

namespace axle {
namespace {

using samples::Gpt;
using samples::GptBlock;
using samples::GptConfig;

constexpr int64_t kRows = 2;  // per replica
constexpr int kSteps = 20;
const GptConfig kConfig{.block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};

// Rows [first, first + rows) of step `step`'s global batch (two batches taking turns).
std::pair<Tensor, Tensor> batch(int64_t step, int64_t first, int64_t rows, Device device) {
  std::vector<int64_t> x, y;
  const int64_t t = kConfig.block_size;
  for (int64_t r = first; r < first + rows; ++r) {
    for (int64_t i = 0; i <= t; ++i) {
      const int64_t token = ((step % 2) * 131 + r * 37 + i * i * 7 + (r ^ i) * 3) % 256;
      if (i < t) x.push_back(token);
      if (i > 0) y.push_back(token);
    }
  }
  return {tensor(x, Shape({rows, t}), device), tensor(y, Shape({rows, t}), device)};
}

Tensor loss_of(nn::Module& model, const Tensor& x, const Tensor& y) {
  const int64_t rows = x.size(0) * x.size(1);
  return nn::cross_entropy(reshape(model(x), {rows, 256}), reshape(y, {rows}));
}

TEST(FsdpProcesses, MatchOneDeviceAndConsolidateAnywhere) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "60");
  const int world = LazySystem::get().device_count() * process_count();
  ASSERT_GT(process_count(), 1) << "run under mpirun";

  // One device, the whole global batch.
  std::vector<double> want;
  {
    const Device device = xla_device();
    set_rng_state(7, device);
    Gpt model(kConfig, device);
    optim::AdamW optimizer(model.parameters(), {.lr = 3e-3});
    for (int step = 0; step < kSteps; ++step) {
      const auto [x, y] = batch(step, 0, kRows * world, device);
      optimizer.zero_grad();
      const Tensor loss = loss_of(model, x, y);
      loss.backward();
      optimizer.step();
      mark_step();
      want.push_back(loss.item<float>());
    }
  }

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("axle_fsdp_mpi_{}", ::getppid());
  std::filesystem::create_directories(dir);
  std::vector<std::vector<double>> got(static_cast<std::size_t>(LazySystem::get().device_count()));
  std::vector<float> sharded_logits;
  spawn([&](int ordinal) {
    const Device device = xla_device();
    set_rng_state(7, device);
    FullyShardedDataParallel fsdp(std::make_shared<Gpt>(kConfig, device),
                                  {.auto_wrap_policy = transformer_auto_wrap_policy<GptBlock>()});
    optim::AdamW optimizer(fsdp.parameters(), {.lr = 3e-3});
    auto& losses = got[static_cast<std::size_t>(device.ordinal)];
    for (int step = 0; step < kSteps; ++step) {
      const auto [x, y] = batch(step, ordinal * kRows, kRows, device);
      optimizer.zero_grad();
      const Tensor loss = loss_of(fsdp, x, y);
      loss.backward();
      optimizer.step();
      // The global batch's loss: the mean of every replica's.
      const Tensor global = all_reduce(ReduceType::kSum, loss.detach(), 1.0 / world);
      mark_step();
      losses.push_back(global.item<float>());
    }
    save(fsdp.sharded_checkpoint(), dir / fmt::format("rank-{}-of-{}.ckpt", ordinal, world),
         /*master_only=*/false);
    const NoGradGuard no_grad;
    const std::vector<float> logits = fsdp(batch(0, 0, 1, device).first).to_vector<float>();
    if (ordinal == 0) sharded_logits = logits;
  });
  for (const auto& losses : got) {
    for (int step = 0; step < kSteps; ++step) {
      EXPECT_LE(std::abs(losses[step] - want[step]), 1e-5 * std::abs(want[step]))
          << "step " << step << " in process " << process_index();
    }
  }
  EXPECT_LT(want.back(), want.front() - 0.1);

  // Every process consolidates every replica's file; process 0 compares with replica 0's model.
  const nn::StateDict full = consolidate_sharded_model_checkpoints(
      (dir / "rank-").string(), fmt::format("*-of-{}.ckpt", world));
  set_rng_state(3, xla_device());
  Gpt model(kConfig, xla_device());
  model.load_state_dict(full);
  if (process_index() == 0) {
    const NoGradGuard no_grad;
    const std::vector<float> plain = model(batch(0, 0, 1, xla_device()).first).to_vector<float>();
    ASSERT_EQ(plain.size(), sharded_logits.size());
    for (std::size_t i = 0; i < plain.size(); ++i) {
      ASSERT_NEAR(plain[i], sharded_logits[i], 1e-5 * (1 + std::abs(plain[i]))) << i;
    }
  }
  (void)mesh_reduce("fsdp_test_done", 0.0, [](const std::vector<double>&) { return 0.0; });
  if (process_index() == 0) std::filesystem::remove_all(dir);
  config::unset("AXLE_COLLECTIVE_TIMEOUT");
}

}  // namespace
}  // namespace axle
