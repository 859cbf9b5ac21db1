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

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "samples/gpt_model.h"
#include "tests/gpt_steps.h"

namespace axle {
namespace {

class DdpScaleOut : public ::testing::Test {
 protected:
  void SetUp() override { config::set("AXLE_COLLECTIVE_TIMEOUT", "60"); }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
};

using gpt_steps::kTinyGpt;

TEST_F(DdpScaleOut, ConstructionGivesEveryReplicaOfTheJobTheMastersParameters) {
  set_rng_state(5);
  const uint64_t want = gpt_steps::digest(samples::Gpt(kTinyGpt));
  spawn([&](int ordinal) {
    set_rng_state(static_cast<uint64_t>(5 + ordinal));  // apart
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(kTinyGpt));
    mark_step();
    const auto all = mesh_reduce("digest", gpt_steps::digest(ddp),
                                 [](const std::vector<uint64_t>& every) { return every; });
    ASSERT_EQ(static_cast<int>(all.size()), world_size());
    for (std::size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r], want) << "replica " << r;
  });
}

// Every replica's losses, gathered from the job's processes.
std::vector<std::vector<float>> every_replicas(const std::vector<float>& mine) {
  return mesh_reduce("losses", mine,
                     [](const std::vector<std::vector<float>>& every) { return every; });
}

TEST_F(DdpScaleOut, GptLossesMatchOneDeviceOnTheGlobalBatch) {
  constexpr int kSteps = 20;
  constexpr int64_t kGlobalBatch = 8;
  set_rng_state(11);
  samples::Gpt single(kTinyGpt);
  const std::vector<float> want = gpt_steps::train(single, kSteps, 0, kGlobalBatch);

  spawn([&](int ordinal) {
    const int world = world_size();
    ASSERT_EQ(kGlobalBatch % world, 0);
    const int64_t rows = kGlobalBatch / world;
    set_rng_state(static_cast<uint64_t>(11 + ordinal));  // the master's initialisation wins
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(kTinyGpt), {.bucket_cap_mb = 0.01});
    gpt_steps::expect_mean_matches(
        every_replicas(gpt_steps::train(ddp, kSteps, ordinal * rows, rows)), want);
  });
}

// Each replica's slice as two micro-batches, the first under no_sync(): the losses of one device
// on the whole batch still.
TEST_F(DdpScaleOut, GptNoSyncMicroBatchesMatchOneDeviceOnTheGlobalBatch) {
  constexpr int kSteps = 8;
  constexpr int64_t kGlobalBatch = 8;
  constexpr int64_t kMicro = 2;
  constexpr gpt_steps::TokenFormula kFormula{.step = 3, .row = 7, .position = 5};
  set_rng_state(13);
  samples::Gpt single(kTinyGpt);
  std::vector<float> want;
  {
    optim::AdamW adamw(single.parameters(), {.lr = 1e-2});
    for (int step = 0; step < kSteps; ++step) {
      adamw.zero_grad();
      const Tensor loss = gpt_steps::loss_on(single, step, 0, kGlobalBatch, kFormula);
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
    DistributedDataParallel ddp(std::make_shared<samples::Gpt>(kTinyGpt), {.bucket_cap_mb = 0.01});
    optim::AdamW adamw(ddp.parameters(), {.lr = 1e-2});
    std::vector<float> mine;
    for (int step = 0; step < kSteps; ++step) {
      adamw.zero_grad();
      const int64_t first = ordinal * rows * kMicro;
      Tensor first_loss;
      {
        const auto guard = ddp.no_sync();
        first_loss = gpt_steps::loss_on(ddp, step, first, rows, kFormula);
        (first_loss * (1.0 / kMicro)).backward();
      }
      const Tensor last_loss = gpt_steps::loss_on(ddp, step, first + rows, rows, kFormula);
      (last_loss * (1.0 / kMicro)).backward();
      adamw.step();
      mark_step();
      mine.push_back((first_loss.item<float>() + last_loss.item<float>()) / kMicro);
    }
    gpt_steps::expect_mean_matches(every_replicas(mine), want);
  });
}

}  // namespace
}  // namespace axle
