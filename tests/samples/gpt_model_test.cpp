// samples/gpt_model.h: a GPT whose parameters carry nanoGPT's names, lm_head sharing wte's
// tensor, giving logits over the 256 bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "axle/axle.h"
#include "samples/gpt_model.h"

namespace axle::samples {
namespace {

TEST(Gpt, ParametersCarryNanoGptsNames) {
  Gpt model(GptConfig{.block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 8});
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    for (const char* name :
         {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
          "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight",
          "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      expected.push_back(h + name);
    }
  }
  expected.insert(expected.end(), {"transformer.ln_f.weight", "transformer.ln_f.bias"});
  std::vector<std::string> named;
  for (const auto& [name, t] : model.named_parameters()) named.push_back(name);
  EXPECT_EQ(named, expected);  // the tied lm_head.weight once, under wte's name
  expected.push_back("lm_head.weight");
  std::vector<std::string> state;
  for (const auto& [name, t] : model.state_dict()) state.push_back(name);
  EXPECT_EQ(state, expected);
}

TEST(Gpt, LmHeadIsWtesTensor) {
  Gpt model(GptConfig{.block_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 8});
  const nn::StateDict state = model.state_dict();
  const Tensor* wte = nn::find(state, "transformer.wte.weight");
  const Tensor* head = nn::find(state, "lm_head.weight");
  ASSERT_NE(wte, nullptr);
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(wte->impl_ptr().get(), head->impl_ptr().get());
  EXPECT_EQ(model.parameters().size(), model.named_parameters().size());
}

TEST(Gpt, LogitsCoverTheVocabularyAtEveryPosition) {
  Gpt model(GptConfig{.block_size = 16, .n_layer = 1, .n_head = 2, .n_embd = 8});
  const Tensor tokens = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  const Tensor logits = model(tokens);
  EXPECT_EQ(logits.shape(), (Shape{2, 3, 256}));
  const std::vector<float> values = logits.to_vector<float>();
  for (float v : values) ASSERT_TRUE(std::isfinite(v));
}

// Checkpointed blocks keep every name, and one training step's loss and gradients are the plain
// model's bit for bit (the same start: the same seed).
TEST(Gpt, CheckpointedActivationsGiveThePlainGradients) {
  const GptConfig plain{.block_size = 16, .n_layer = 2, .n_head = 2, .n_embd = 8};
  GptConfig checkpointed = plain;
  checkpointed.checkpoint_activations = true;
  set_rng_state(7);
  Gpt a(plain);
  set_rng_state(7);
  Gpt b(checkpointed);
  const nn::StateDict pa = a.named_parameters(), pb = b.named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) EXPECT_EQ(pa[i].first, pb[i].first);
  const Tensor tokens = tensor(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}, Shape{2, 4});
  const Tensor targets = tensor(std::vector<int64_t>{2, 3, 4, 5, 6, 7, 8, 9}, Shape{2, 4});
  auto step = [&](Gpt& model) {
    const Tensor loss = nn::cross_entropy(reshape(model(tokens), {8, 256}), reshape(targets, {8}));
    loss.backward();
    return loss;
  };
  const Tensor la = step(a), lb = step(b);
  EXPECT_EQ(la.item(), lb.item());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].second.grad().to_vector<float>(), pb[i].second.grad().to_vector<float>())
        << pa[i].first;
  }
}

}  // namespace
}  // namespace axle::samples
