// tests: a tiny GPT trained a few steps on token rows from a formula — what the in-process and
// MPI forms of the data-parallel tests (tests/actors, tests/mpi) share, so that both compare a
// job's replicas with one device on the whole batch the same way.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "axle/axle.h"
#include "samples/gpt_model.h"

namespace axle::gpt_steps {

/// Two layers, two heads, 16 wide, over 32 tokens in blocks of 8.
inline const samples::GptConfig kTinyGpt{
    .vocab_size = 32, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};

/// Token t of row b at step s is (s * step + b * row + t * position + b * t) mod the vocabulary.
struct TokenFormula {
  int64_t step = 7;
  int64_t row = 5;
  int64_t position = 3;
};

/// Rows [first, first + rows) of step `step`'s batch; with `targets`, the next tokens.
inline Tensor tokens(int step, int64_t first, int64_t rows, bool targets, TokenFormula f = {},
                     const samples::GptConfig& config = kTinyGpt) {
  std::vector<int64_t> v;
  for (int64_t b = first; b < first + rows; ++b) {
    for (int64_t t = 0; t < config.block_size; ++t) {
      v.push_back((step * f.step + b * f.row + (t + (targets ? 1 : 0)) * f.position + b * t) %
                  config.vocab_size);
    }
  }
  return tensor(v, {rows, config.block_size});
}

/// The cross entropy of `model` on those rows.
inline Tensor loss_on(nn::Module& model, int step, int64_t first, int64_t rows, TokenFormula f = {},
                      const samples::GptConfig& config = kTinyGpt) {
  const Tensor logits = model(tokens(step, first, rows, false, f, config));
  return nn::cross_entropy(reshape(logits, {rows * config.block_size, -1}),
                           reshape(tokens(step, first, rows, true, f, config), {-1}));
}

/// `steps` AdamW steps (lr 1e-2) on rows [first, first + rows) of each step's batch; the losses.
inline std::vector<float> train(nn::Module& model, int steps, int64_t first, int64_t rows) {
  optim::AdamW adamw(model.parameters(), {.lr = 1e-2});
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    adamw.zero_grad();
    const Tensor loss = loss_on(model, step, first, rows);
    loss.backward();
    adamw.step();
    mark_step();
    losses.push_back(loss.item<float>());
  }
  return losses;
}

/// The mean of the replicas' losses at each step is one device's loss on the whole batch.
inline void expect_mean_matches(const std::vector<std::vector<float>>& per_replica,
                                const std::vector<float>& one_device) {
  for (std::size_t step = 0; step < one_device.size(); ++step) {
    double mean = 0;
    for (const auto& losses : per_replica) mean += losses.at(step);
    mean /= static_cast<double>(per_replica.size());
    EXPECT_NEAR(mean, one_device[step], 1e-5 * std::abs(one_device[step])) << "step " << step;
  }
}

/// A digest of a module's parameters' bits.
inline uint64_t digest(const nn::Module& module) {
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

}  // namespace axle::gpt_steps
