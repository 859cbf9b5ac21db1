// samples: a GPT as nanoGPT's model.py writes it, with its parameter names and layouts
// (transformer.wte.weight [vocab, n_embd], transformer.h.0.attn.c_attn.weight [3·n_embd, n_embd],
// ..., lm_head.weight tied to transformer.wte.weight), so state dicts move between axle and
// PyTorch. Modules only trace, as every axle module.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "axle/axle.h"

namespace axle::samples {

/// The model's sizes; the defaults are train_gpt's.
struct GptConfig {
  int64_t vocab_size = 256;  ///< bytes
  int64_t block_size = 128;  ///< the longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  /// Each block's forward checkpointed (utils::checkpoint_module): its activations are computed
  /// again in the backward pass instead of being kept. The parameter names stay the same.
  bool checkpoint_activations = false;
};

/// Causal multi-head self-attention: one Linear makes q, k and v (c_attn), heads attend with
/// scaled_dot_product_attention, c_proj mixes them.
class CausalSelfAttention : public nn::Module {
 public:
  CausalSelfAttention(const GptConfig& config, Device device)
      : n_head_(config.n_head),
        c_attn_(register_module("c_attn", std::make_shared<nn::Linear>(
                                              config.n_embd, 3 * config.n_embd, true, device))),
        c_proj_(register_module(
            "c_proj", std::make_shared<nn::Linear>(config.n_embd, config.n_embd, true, device))) {}

  /// x [B, T, C] → [B, T, C].
  Tensor forward(const Tensor& x) override {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
    std::vector<Tensor> qkv = split(c_attn_->forward(x), c, 2);
    auto heads = [&](const Tensor& y) {  // [B, T, C] → [B, heads, T, head_dim]
      return transpose(reshape(y, {b, t, n_head_, c / n_head_}), 1, 2);
    };
    const Tensor y = nn::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                                      {}, /*is_causal=*/true);
    return c_proj_->forward(reshape(transpose(y, 1, 2), {b, t, c}));
  }

 private:
  int64_t n_head_;
  std::shared_ptr<nn::Linear> c_attn_, c_proj_;
};

/// n_embd → 4·n_embd, exact GELU, → n_embd.
class GptMlp : public nn::Module {
 public:
  GptMlp(const GptConfig& config, Device device)
      : c_fc_(register_module(
            "c_fc", std::make_shared<nn::Linear>(config.n_embd, 4 * config.n_embd, true, device))),
        c_proj_(register_module("c_proj", std::make_shared<nn::Linear>(
                                              4 * config.n_embd, config.n_embd, true, device))) {}

  Tensor forward(const Tensor& x) override { return c_proj_->forward(gelu(c_fc_->forward(x))); }

 private:
  std::shared_ptr<nn::Linear> c_fc_, c_proj_;
};

/// x + attn(ln_1(x)), then + mlp(ln_2(x)) (pre-norm).
class GptBlock : public nn::Module {
 public:
  GptBlock(const GptConfig& config, Device device)
      : ln_1_(
            register_module("ln_1", std::make_shared<nn::LayerNorm>(
                                        std::vector<int64_t>{config.n_embd}, 1e-5, true, device))),
        attn_(register_module("attn", std::make_shared<CausalSelfAttention>(config, device))),
        ln_2_(
            register_module("ln_2", std::make_shared<nn::LayerNorm>(
                                        std::vector<int64_t>{config.n_embd}, 1e-5, true, device))),
        mlp_(register_module("mlp", std::make_shared<GptMlp>(config, device))) {}

  Tensor forward(const Tensor& input) override {
    Tensor x = input + attn_->forward(ln_1_->forward(input));
    return x + mlp_->forward(ln_2_->forward(x));
  }

 private:
  std::shared_ptr<nn::LayerNorm> ln_1_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<nn::LayerNorm> ln_2_;
  std::shared_ptr<GptMlp> mlp_;
};

/// nanoGPT's `transformer` ModuleDict: token and position embeddings, the blocks (h.0, h.1, ...),
/// the final LayerNorm. Token ids [B, T] → hidden states [B, T, n_embd].
class GptTransformer : public nn::Module {
 public:
  GptTransformer(const GptConfig& config, Device device)
      : device_(device),
        wte_(register_module(
            "wte", std::make_shared<nn::Embedding>(config.vocab_size, config.n_embd, device))),
        wpe_(register_module(
            "wpe", std::make_shared<nn::Embedding>(config.block_size, config.n_embd, device))),
        h_(register_module("h", std::make_shared<nn::Sequential>())),
        ln_f_(
            register_module("ln_f", std::make_shared<nn::LayerNorm>(
                                        std::vector<int64_t>{config.n_embd}, 1e-5, true, device))) {
    for (int64_t i = 0; i < config.n_layer; ++i) {
      auto block = std::make_shared<GptBlock>(config, device);
      if (config.checkpoint_activations) {
        h_->push_back(utils::checkpoint_module(std::move(block)));
      } else {
        h_->push_back(std::move(block));
      }
    }
  }

  Tensor forward(const Tensor& tokens) override {
    const Tensor positions =
        arange(0, static_cast<double>(tokens.size(1)), 1, DType::kInt64, device_);
    return ln_f_->forward(h_->forward(wte_->forward(tokens) + wpe_->forward(positions)));
  }

  [[nodiscard]] const Tensor& token_embedding() const { return wte_->weight(); }

 private:
  Device device_;
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Sequential> h_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
};

/// The whole model: token ids [B, T] → logits [B, T, vocab_size]. lm_head's weight is wte's (one
/// tensor), as in nanoGPT.
class Gpt : public nn::Module {
 public:
  Gpt(const GptConfig& config, Device device = {})
      : config_(config),
        transformer_(
            register_module("transformer", std::make_shared<GptTransformer>(config, device))),
        lm_head_(register_module("lm_head", std::make_shared<nn::Linear>(
                                                config.n_embd, config.vocab_size, false, device))) {
    if (config.n_embd % config.n_head != 0) {
      throw std::invalid_argument("n_embd (" + std::to_string(config.n_embd) +
                                  ") must be a multiple of n_head (" +
                                  std::to_string(config.n_head) + ")");
    }
    lm_head_->set_parameter("weight", transformer_->token_embedding());
    init_weights(device);
  }

  Tensor forward(const Tensor& tokens) override {
    return lm_head_->forward(transformer_->forward(tokens));
  }

  [[nodiscard]] const GptConfig& config() const noexcept { return config_; }

 private:
  // nanoGPT's _init_weights: every Linear and Embedding weight N(0, 0.02), biases 0, and each
  // residual projection (c_proj.weight) N(0, 0.02/√(2·n_layer)); LayerNorms keep 1 and 0. From
  // the device's random stream, in parameter order, so set_rng_state makes it reproducible.
  void init_weights(Device device) {
    const NoGradGuard no_grad;
    const double proj_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
    for (const auto& [name, p] : named_parameters()) {
      const bool layer_norm = name.find(".ln_") != std::string::npos;
      if (layer_norm) continue;
      if (name.ends_with(".bias")) {
        p.copy_(zeros(p.shape(), DType::kFloat32, device));
      } else {
        const double std = name.ends_with("c_proj.weight") ? proj_std : 0.02;
        p.copy_(randn(p.shape(), DType::kFloat32, device) * std);
      }
    }
  }

  GptConfig config_;
  std::shared_ptr<GptTransformer> transformer_;
  std::shared_ptr<nn::Linear> lm_head_;
};

}  // namespace axle::samples
