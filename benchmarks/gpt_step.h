// benchmarks: one step of train_gpt's recipe, which train_step_bench times and checkpoint_bench
// saves between.
#pragma once

#include <memory>
#include <vector>

#include "axle/axle.h"
#include "axle/io/training_state.h"
#include "samples/gpt_model.h"

namespace axle::bench {

// One step of train_gpt's recipe on its default model: AdamW with decay on matrices only, the
// gradients clipped to norm 1, random bytes as a batch of 32 rows of 128.
class GptTrainingStep {
 public:
  explicit GptTrainingStep(bool amp)
      : amp_(amp),
        model_((set_rng_state(1), std::make_shared<samples::Gpt>(samples::GptConfig{}))),
        optimizer_(param_groups(*model_), {.lr = 1e-3, .beta2 = 0.95, .weight_decay = 0.1}),
        tokens_(randint(0, 256, {kBatch, kBlock})),
        targets_(randint(0, 256, {kBatch * kBlock})) {}
  void operator()() {
    optimizer_.zero_grad();
    Tensor loss;
    {
      const autocast region(Device{}, DType::kBFloat16, amp_);
      loss = nn::cross_entropy(reshape((*model_)(tokens_), {kBatch * kBlock, 256}), targets_);
    }
    loss.backward();
    (void)nn::utils::clip_grad_norm_(model_->parameters(), 1.0);
    optimizer_.step();
    mark_step();
  }
  static constexpr int64_t kBatch = 32;
  static constexpr int64_t kBlock = 128;

  /// The model and the optimizer, for a checkpoint of the run.
  [[nodiscard]] TrainingState state() { return {.model = model_.get(), .optimizer = &optimizer_}; }

 private:
  static std::vector<optim::ParamGroup> param_groups(nn::Module& model) {
    std::vector<Tensor> decayed, kept;
    for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decayed : kept).push_back(p);
    return {{.params = decayed}, {.params = kept, .weight_decay = 0.0}};
  }
  bool amp_;
  std::shared_ptr<samples::Gpt> model_;
  optim::AdamW optimizer_;
  Tensor tokens_;
  Tensor targets_;
};

}  // namespace axle::bench
