// DistributedDataParallel in a job of several processes, run under mpirun by CTest
// (tests/mpi/CMakeLists.txt: 2 processes of 2 devices each): replicas initialised apart end
// construction with the master's parameters, and a small GPT trained through DDP for 20 steps on
// every replica of the job, each a slice of the global batch, gives the losses of one device on
// the whole batch, also when each slice is split into micro-batches accumulated under no_sync().
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "actors/host/lazy_system.h"
#include "axle.h"
#include "engine/config.h"
#include "samples/gpt_model.h"

namespace axle {
namespace {

class DdpScaleOut : public ::testing::Test {
 protected:
  void SetUp() override { config::set("AXLE_COLLECTIVE_TIMEOUT", "60"); }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
};

const samples::GptConfig kConfig{
    .vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};

// A digest of a module's parameters' bits.
uint64_t digest(const nn::Module& module) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : module.state_dict()) {
    for (float x : t.to_vector<float>()) {
      uint32_t bits = 0;
      std::memcpy(&bits, &x, sizeof bits);
      h = (h ^ bits) * 1099511628211ull;
    }
  }
  return h;
}

TEST_F(DdpScaleOut, ConstructionGivesEveryReplicaOfTheJobTheMastersParameters) {
  set_rng_state(5);
  const uint64_t want = digest(samples::Gpt(kConfig));
  spawn([&](int ordinal) {
    set_rng_state(static_cast<uint64_t>(5 + ordinal));  // apart
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(kConfig));
    mark_step();
    const auto all = mesh_reduce("digest", digest(ddp),
                                 [](const std::vector<uint64_t>& every) { return every; });
    ASSERT_EQ(static_cast<int>(all.size()), world_size());
    for (std::size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r], want) << "replica " << r;
  });
}

TEST_F(DdpScaleOut, GptLossesMatchOneDeviceOnTheGlobalBatch) {
  constexpr int kSteps = 20;
  constexpr int64_t kGlobalBatch = 8;
  const auto batch = [&](int step, int64_t first, int64_t rows, bool targets) {
    std::vector<int64_t> v;
    for (int64_t b = first; b < first + rows; ++b) {
      for (int64_t t = 0; t < kConfig.block_size; ++t) {
        v.push_back((step * 7 + b * 5 + (t + (targets ? 1 : 0)) * 3 + b * t) % kConfig.vocab_size);
      }
    }
    return tensor(v, {rows, kConfig.block_size});
  };
  const auto train = [&](nn::Module& model, int64_t first, int64_t rows) {
    optim::AdamW adamw(model.parameters(), {.lr = 1e-2});
    std::vector<float> losses;
    for (int step = 0; step < kSteps; ++step) {
      adamw.zero_grad();
      const Tensor logits = model(batch(step, first, rows, false));
      const Tensor loss = nn::cross_entropy(reshape(logits, {rows * kConfig.block_size, -1}),
                                            reshape(batch(step, first, rows, true), {-1}));
      loss.backward();
      adamw.step();
      mark_step();
      losses.push_back(loss.item<float>());
    }
    return losses;
  };
  set_rng_state(11);
  samples::Gpt single(kConfig);
  const std::vector<float> want = train(single, 0, kGlobalBatch);

  spawn([&](int ordinal) {
    const int world = world_size();
    ASSERT_EQ(kGlobalBatch % world, 0);
    const int64_t rows = kGlobalBatch / world;
    set_rng_state(static_cast<uint64_t>(11 + ordinal));  // the master's initialisation wins
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(kConfig), {.bucket_cap_mb = 0.01});
    const std::vector<float> mine = train(ddp, ordinal * rows, rows);
    const auto all = mesh_reduce(
        "losses", mine, [](const std::vector<std::vector<float>>& every) { return every; });
    for (int step = 0; step < kSteps; ++step) {
      double mean = 0;
      for (const auto& losses : all) mean += losses[static_cast<std::size_t>(step)];
      mean /= static_cast<double>(all.size());
      EXPECT_NEAR(mean, want[step], 1e-5 * std::abs(want[step])) << "step " << step;
    }
  });
}

// Each replica's slice as two micro-batches, the first under no_sync(): the losses of one device
// on the whole batch still.
TEST_F(DdpScaleOut, GptNoSyncMicroBatchesMatchOneDeviceOnTheGlobalBatch) {
  constexpr int kSteps = 8;
  constexpr int64_t kGlobalBatch = 8;
  constexpr int64_t kMicro = 2;
  const auto batch = [&](int step, int64_t first, int64_t rows, bool targets) {
    std::vector<int64_t> v;
    for (int64_t b = first; b < first + rows; ++b) {
      for (int64_t t = 0; t < kConfig.block_size; ++t) {
        v.push_back((step * 3 + b * 7 + (t + (targets ? 1 : 0)) * 5 + b * t) % kConfig.vocab_size);
      }
    }
    return tensor(v, {rows, kConfig.block_size});
  };
  const auto loss_of = [&](nn::Module& model, int step, int64_t first, int64_t rows) {
    const Tensor logits = model(batch(step, first, rows, false));
    return nn::cross_entropy(reshape(logits, {rows * kConfig.block_size, -1}),
                             reshape(batch(step, first, rows, true), {-1}));
  };
  set_rng_state(13);
  samples::Gpt single(kConfig);
  std::vector<float> want;
  {
    optim::AdamW adamw(single.parameters(), {.lr = 1e-2});
    for (int step = 0; step < kSteps; ++step) {
      adamw.zero_grad();
      const Tensor loss = loss_of(single, step, 0, kGlobalBatch);
      loss.backward();
      adamw.step();
      mark_step();
      want.push_back(loss.item<float>());
    }
  }

  spawn([&](int ordinal) {
    const int world = world_size();
    ASSERT_EQ(kGlobalBatch % (world * kMicro), 0);
    const int64_t rows = kGlobalBatch / world / kMicro;
    set_rng_state(static_cast<uint64_t>(13 + ordinal));
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(kConfig), {.bucket_cap_mb = 0.01});
    optim::AdamW adamw(ddp.parameters(), {.lr = 1e-2});
    std::vector<float> mine;
    for (int step = 0; step < kSteps; ++step) {
      adamw.zero_grad();
      const int64_t first = ordinal * rows * kMicro;
      Tensor first_loss;
      {
        const auto guard = ddp.no_sync();
        first_loss = loss_of(ddp, step, first, rows);
        (first_loss * (1.0 / kMicro)).backward();
      }
      const Tensor last_loss = loss_of(ddp, step, first + rows, rows);
      (last_loss * (1.0 / kMicro)).backward();
      adamw.step();
      mark_step();
      mine.push_back((first_loss.item<float>() + last_loss.item<float>()) / kMicro);
    }
    const auto all = mesh_reduce(
        "losses", mine, [](const std::vector<std::vector<float>>& every) { return every; });
    for (int step = 0; step < kSteps; ++step) {
      double mean = 0;
      for (const auto& losses : all) mean += losses[static_cast<std::size_t>(step)];
      mean /= static_cast<double>(all.size());
      EXPECT_NEAR(mean, want[step], 1e-5 * std::abs(want[step])) << "step " << step;
    }
  });
}

}  // namespace
}  // namespace axle
