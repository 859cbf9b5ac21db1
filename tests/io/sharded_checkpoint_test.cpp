// io/sharded_checkpoint.h: every replica of an FSDP-trained GPT saves its shards; consolidated,
// they load into the model without FSDP, which then computes what the sharded model computed,
// and the safetensors written holds the unwrapped model's names and values. Missing or
// inconsistent shards fail naming the files.
#include "axle/io/sharded_checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/formats/safetensors.h"
#include "axle/io/checkpoint.h"
#include "samples/gpt_model.h"
#include "tests/error_text.h"
#include "tests/io/io_test_util.h"

namespace axle {
namespace {

using samples::Gpt;
using samples::GptBlock;
using samples::GptConfig;
using testing::TempDir;

constexpr int kReplicas = 4;
const GptConfig kConfig{.block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};

Tensor tokens(int64_t seed, Device device) {
  std::vector<int64_t> x;
  for (int64_t i = 0; i < 2 * kConfig.block_size; ++i) x.push_back((seed * 53 + i * 29) % 256);
  return tensor(x, Shape({2, kConfig.block_size}), device);
}

class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = kReplicas});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }

  // Trains an FSDP GPT (blocks nested) for two SGD steps on 4 replicas, saves every replica's
  // shards as <dir>/rank-<r>-of-4.ckpt and returns the sharded model's logits on tokens(7).
  std::vector<float> train_and_save(const TempDir& dir) {
    std::vector<float> logits;
    spawn([&](int r) {
      const Device device = xla_device();
      set_rng_state(99, device);
      FullyShardedDataParallel fsdp(std::make_shared<Gpt>(kConfig, device),
                                    {.auto_wrap_policy = transformer_auto_wrap_policy<GptBlock>()});
      optim::SGD optimizer(fsdp.parameters(), {.lr = 0.5});
      for (int step = 0; step < 2; ++step) {
        optimizer.zero_grad();
        const Tensor out = fsdp(tokens(step * kReplicas + r, device));
        mean(out * out).backward();
        optimizer.step();
        mark_step();
      }
      save(fsdp.sharded_checkpoint(), dir / fmt::format("rank-{}-of-{}.ckpt", r, kReplicas),
           /*master_only=*/false);
      const NoGradGuard no_grad;
      const std::vector<float> got = fsdp(tokens(7, device)).to_vector<float>();
      if (r == 0) logits = got;
    });
    return logits;
  }
};

TEST_F(ShardedCheckpoint, ConsolidatedLoadsWithoutFsdpAndComputesTheSame) {
  const TempDir dir;
  const std::vector<float> sharded = train_and_save(dir);
  const std::string safetensors = (dir / "full.safetensors").string();
  const nn::StateDict full =
      consolidate_sharded_model_checkpoints((dir / "rank-").string(), "*.ckpt", safetensors);

  set_rng_state(5, xla_device());  // another start: only the loaded values can make it agree
  Gpt model(kConfig, xla_device());
  const nn::StateDict own = model.state_dict();
  ASSERT_EQ(full.size(), own.size());
  model.load_state_dict(full);  // strict: every name, shape and dtype
  const NoGradGuard no_grad;
  const std::vector<float> plain = model(tokens(7, xla_device())).to_vector<float>();
  ASSERT_EQ(plain.size(), sharded.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    ASSERT_NEAR(plain[i], sharded[i], 1e-5 * (1 + std::abs(sharded[i]))) << "logit " << i;
  }
  // The two steps changed the model: the test is not comparing an initialisation with itself.
  set_rng_state(99, xla_device());
  Gpt initial(kConfig, xla_device());
  const std::vector<float> before = initial(tokens(7, xla_device())).to_vector<float>();
  EXPECT_NE(before, plain);

  // The safetensors file holds the unwrapped names and the same values.
  const CpuTensorMap written = load_safetensors(safetensors);
  ASSERT_EQ(written.size(), own.size());
  for (const auto& [name, t] : model.state_dict()) {
    const auto it = written.find(name);
    ASSERT_NE(it, written.end()) << name;
    EXPECT_EQ(it->second.values<float>(), t.to_vector<float>()) << name;
  }
}

TEST_F(ShardedCheckpoint, MissingOrForeignShardsFailNamingTheFiles) {
  const TempDir dir;
  (void)train_and_save(dir);
  std::filesystem::remove(dir / "rank-2-of-4.ckpt");
  std::string text = axle::testing::error_message<std::invalid_argument>(
      [&] { (void)consolidate_sharded_model_checkpoints((dir / "rank-").string(), "*.ckpt"); });
  EXPECT_NE(text.find("no file of rank 2 of 4"), std::string::npos) << text;
  text = axle::testing::error_message<std::invalid_argument>(
      [&] { (void)consolidate_sharded_model_checkpoints((dir / "none-").string(), "*.ckpt"); });
  EXPECT_NE(text.find("none-*.ckpt"), std::string::npos) << text;
  // A checkpoint without shard metadata.
  const Tensor x = tensor(std::vector<float>{1, 2}, Shape({2}), xla_device());
  save({{"w", x}}, dir / "rank-9-plain.ckpt");
  text = axle::testing::error_message<std::invalid_argument>(
      [&] { (void)consolidate_sharded_model_checkpoints((dir / "rank-").string(), "*.ckpt"); });
  EXPECT_NE(text.find("rank-9-plain.ckpt has no \"shard_metadata\""), std::string::npos) << text;
}

}  // namespace
}  // namespace axle
