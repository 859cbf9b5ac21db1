// Tests graph/nn/checkpoint.h and optimization_barrier_ (graph/ops.h): a barrier passes its
// values bit for bit; checkpointed functions and modules give the gradients of the plain ones
// (bit for bit: the recomputation runs the same ops in the same order) and of finite
// differences; the recomputation draws the forward's random numbers; bad input is an error
// naming the caller's line.
#include "axle/graph/nn/checkpoint.h"

#include <gtest/gtest.h>

#include <random>

#include "axle/graph/autocast.h"
#include "axle/graph/nn/functional.h"
#include "axle/graph/nn/layers.h"
#include "tests/error_text.h"
#include "tests/graph/grad_check.h"
#include "tests/graph/nn_test_util.h"

namespace axle::testing {
namespace {

using Checkpoint = NnTest;

// Bit for bit (NaN never occurs here).
::testing::AssertionResult same_values(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << "undefined gradient";
  return all_close(values(a), values(b), 0.0, 0.0);
}

TEST_F(Checkpoint, BarrierPassesEveryValueBitForBitInPlace) {
  std::mt19937 rng(1);
  const Tensor a = f32_tensor(uniform_values(rng, 12), {3, 4});
  const Tensor b = f64_tensor(uniform_values(rng, 5), {5});
  const Tensor i = arange(0, 6, 1, DType::kInt64);
  const Tensor a_before = a.detach(), b_before = b.detach();
  const Tensor handle = a;  // shares a's value: the barrier is in place
  const Tensor c = exp(a);
  optimization_barrier_({a, b, i, c});
  EXPECT_EQ(a.impl()->ir()->op(), Op::kOptimizationBarrier);
  EXPECT_EQ(handle.impl()->ir()->op(), Op::kOptimizationBarrier);
  EXPECT_EQ(a.impl()->ir()->operands().size(), 4u);
  EXPECT_EQ(a.dtype(), DType::kFloat32);
  EXPECT_TRUE(a.shape() == Shape({3, 4}));
  EXPECT_EQ(i.dtype(), DType::kInt64);
  EXPECT_TRUE(same_values(a, a_before));
  EXPECT_TRUE(same_values(b, b_before));
  EXPECT_TRUE(same_values(c, exp(a_before)));
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST_F(Checkpoint, BarrierKeepsAutogradState) {
  const Tensor x = f64_tensor({1, 2, 3}, {3});
  x.requires_grad_();
  const Tensor y = x * x;
  optimization_barrier_({y});
  sum(y).backward();
  EXPECT_TRUE(same_values(x.grad(), f64_tensor({2, 4, 6}, {3})));
}

TEST_F(Checkpoint, BarrierErrorsNameTheCall) {
  const Tensor a = zeros({2});
  const int line = __LINE__ + 1;
  std::string text = error_message<ShapeError>([&] { optimization_barrier_({}); });
  EXPECT_TRUE(contains(text, "optimization_barrier_: needs at least one tensor")) << text;
  EXPECT_TRUE(contains(text, at_line(__FILE__, line))) << text;
  text = error_message<ShapeError>([&] { optimization_barrier_({a, Tensor()}); });
  EXPECT_TRUE(contains(text, "tensor 1 of 2 is undefined")) << text;
  const Tensor on_1 = zeros({3}, DType::kFloat32, Device{1});
  text = error_message<ShapeError>([&] { optimization_barrier_({a, on_1}); });
  EXPECT_TRUE(contains(text, "tensor 1 (f32[3]) is on")) << text;
}

// A small MLP's parameters (f64, so finite differences can check them too).
struct Mlp {
  explicit Mlp(std::mt19937& rng, int64_t width = 6, int64_t hidden = 10) {
    w1 = f64_tensor(uniform_values(rng, hidden * width, -0.5, 0.5), {hidden, width});
    b1 = f64_tensor(uniform_values(rng, hidden), {hidden});
    w2 = f64_tensor(uniform_values(rng, width * hidden, -0.5, 0.5), {width, hidden});
    b2 = f64_tensor(uniform_values(rng, width), {width});
    for (const Tensor& p : params()) p.requires_grad_();
  }
  [[nodiscard]] Tensor operator()(const Tensor& x) const {
    return linear(tanh(linear(x, w1, b1)), w2, b2) + x;
  }
  [[nodiscard]] std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }
  void zero_grad() const {
    for (const Tensor& p : params()) p.set_grad({});
  }
  Tensor w1, b1, w2, b2;
};

// The gradients of the parameters and of x after sum(f(x) * f(x)).
std::vector<Tensor> gradients(const std::function<Tensor(const Tensor&)>& f, const Tensor& x0,
                              const std::vector<Tensor>& params) {
  const Tensor x = x0.detach();
  x.requires_grad_();
  const Tensor y = f(x);
  sum(y * y).backward();
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(p.grad());
  grads.push_back(x.grad());
  for (const Tensor& p : params) p.set_grad({});
  return grads;
}

TEST_F(Checkpoint, MlpGradientsEqualThePlainOnesBitForBit) {
  std::mt19937 rng(2);
  const Mlp layer1(rng), layer2(rng), layer3(rng);
  const Tensor x = f64_tensor(uniform_values(rng, 4 * 6), {4, 6});
  auto params = layer1.params();
  for (const Mlp* l : {&layer2, &layer3}) {
    for (const Tensor& p : l->params()) params.push_back(p);
  }
  const std::vector<Tensor> plain =
      gradients([&](const Tensor& h) { return layer3(layer2(layer1(h))); }, x, params);
  const std::vector<Tensor> checkpointed = gradients(
      [&](const Tensor& h) {
        Tensor y = utils::checkpoint([&](const Tensor& t) { return layer1(t); }, h);
        y = utils::checkpoint([&](const Tensor& t) { return layer2(t); }, y);
        return utils::checkpoint([&](const Tensor& t) { return layer3(t); }, y);
      },
      x, params);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(same_values(checkpointed[i], plain[i])) << "gradient " << i;
  }
}

// Under autocast the recomputation runs in the region's dtypes too (backward traces outside any
// region): the gradients are the plain ones under autocast, bit for bit.
TEST_F(Checkpoint, RecomputationUnderAutocastRunsInTheForwardsDtypes) {
  std::mt19937 rng(5);
  const Tensor w1 = f32_tensor(uniform_values(rng, 10 * 6, -0.5, 0.5), {10, 6});
  const Tensor b1 = f32_tensor(uniform_values(rng, 10), {10});
  const Tensor w2 = f32_tensor(uniform_values(rng, 6 * 10, -0.5, 0.5), {6, 10});
  const Tensor b2 = f32_tensor(uniform_values(rng, 6), {6});
  const std::vector<Tensor> params = {w1, b1, w2, b2};
  for (const Tensor& p : params) p.requires_grad_();
  const Tensor x = f32_tensor(uniform_values(rng, 4 * 6), {4, 6});
  const auto block = [&](const Tensor& h) { return linear(tanh(linear(h, w1, b1)), w2, b2); };
  const autocast region(Device{}, DType::kBFloat16);
  const std::vector<Tensor> plain = gradients(block, x, params);
  for (const Tensor& p : params) p.set_grad({});
  const std::vector<Tensor> checkpointed = gradients(
      [&](const Tensor& h) {
        return utils::checkpoint([&](const Tensor& t) { return block(t); }, h);
      },
      x, params);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(checkpointed[i].dtype(), plain[i].dtype()) << "gradient " << i;
    EXPECT_TRUE(same_values(checkpointed[i], plain[i])) << "gradient " << i;
  }
  EXPECT_TRUE(is_autocast_enabled());  // the region is as it was
}

TEST_F(Checkpoint, GradientsMatchFiniteDifferences) {
  std::mt19937 rng(3);
  const Mlp layer(rng, 3, 5);
  // Inputs and parameters both as arguments of fn: every one's gradient goes through the
  // recomputation.
  EXPECT_TRUE(gradients_match(
      [](const std::vector<Tensor>& t) {
        return utils::checkpoint(
            [](const std::vector<Tensor>& in) {
              return linear(tanh(linear(in[0], in[1], in[2])), in[3]) * in[0];
            },
            t);
      },
      {random_arg(rng, {2, 3}), random_arg(rng, {5, 3}), random_arg(rng, {5}),
       random_arg(rng, {3, 5})}));
  // Parameters read from outside fn.
  const Tensor w = f64_tensor(uniform_values(rng, 9), {3, 3});
  EXPECT_TRUE(gradients_match(
      [&](const std::vector<Tensor>& t) {
        const Tensor wt = t[1];
        return utils::checkpoint([wt](const Tensor& in) { return sin(matmul(in, wt)) * in; }, t[0]);
      },
      {random_arg(rng, {2, 3}), random_arg(rng, {3, 3})}));
}

TEST_F(Checkpoint, ParametersGetGradientsWhenNoInputRequiresGrad) {
  std::mt19937 rng(4);
  const Mlp layer(rng);
  const Tensor x = f64_tensor(uniform_values(rng, 2 * 6), {2, 6});  // requires no grad
  const Tensor plain = sum(layer(x));
  plain.backward();
  std::vector<Tensor> expected;
  for (const Tensor& p : layer.params()) expected.push_back(p.grad());
  layer.zero_grad();
  const Tensor y = utils::checkpoint([&](const Tensor& t) { return layer(t); }, x);
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(autograd::grad_fn_name(y), "CheckpointBackward");
  sum(y).backward();
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(same_values(layer.params()[i].grad(), expected[i])) << "parameter " << i;
  }
}

TEST_F(Checkpoint, GradientsReachTensorsComputedBeforeIt) {
  std::mt19937 rng(5);
  const Tensor a = f64_tensor(uniform_values(rng, 6), {2, 3});
  a.requires_grad_();
  const Tensor scale = exp(a);  // a non-leaf fn reads without taking it as an input
  const Tensor x = f64_tensor(uniform_values(rng, 6), {2, 3});
  x.requires_grad_();
  sum(tanh(x * scale)).backward();
  const Tensor ga = a.grad(), gx = x.grad();
  a.set_grad({});
  x.set_grad({});
  const Tensor scale2 = exp(a);
  sum(utils::checkpoint([&](const Tensor& t) { return tanh(t * scale2); }, x)).backward();
  EXPECT_TRUE(same_values(a.grad(), ga));
  EXPECT_TRUE(same_values(x.grad(), gx));
}

// A pre-norm transformer block: attention and an MLP, each with a residual.
class Block : public nn::Module {
 public:
  explicit Block(int64_t width)
      : ln1_(register_module("ln_1", std::make_shared<nn::LayerNorm>(std::vector{width}))),
        qkv_(register_module("c_attn", std::make_shared<nn::Linear>(width, 3 * width))),
        proj_(register_module("c_proj", std::make_shared<nn::Linear>(width, width))),
        ln2_(register_module("ln_2", std::make_shared<nn::LayerNorm>(std::vector{width}))),
        fc_(register_module("c_fc", std::make_shared<nn::Linear>(width, 4 * width))),
        out_(register_module("c_out", std::make_shared<nn::Linear>(4 * width, width))) {}

  Tensor forward(const Tensor& input) override {
    const int64_t b = input.size(0), t = input.size(1), c = input.size(2);
    const std::vector<Tensor> qkv = split(qkv_->forward(ln1_->forward(input)), c, 2);
    auto heads = [&](const Tensor& y) { return transpose(reshape(y, {b, t, 2, c / 2}), 1, 2); };
    const Tensor y = nn::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                                      {}, /*is_causal=*/true);
    const Tensor x = input + proj_->forward(reshape(transpose(y, 1, 2), {b, t, c}));
    return x + out_->forward(gelu(fc_->forward(ln2_->forward(x))));
  }

 private:
  std::shared_ptr<nn::LayerNorm> ln1_;
  std::shared_ptr<nn::Linear> qkv_, proj_;
  std::shared_ptr<nn::LayerNorm> ln2_;
  std::shared_ptr<nn::Linear> fc_, out_;
};

TEST_F(Checkpoint, TransformerBlockModuleGivesThePlainGradients) {
  auto block = std::make_shared<Block>(8);
  const std::shared_ptr<utils::CheckpointModule> checkpointed = utils::checkpoint_module(block);
  // The same parameters under the same names.
  const nn::StateDict plain_names = block->named_parameters();
  const nn::StateDict wrapped_names = checkpointed->named_parameters();
  ASSERT_EQ(plain_names.size(), wrapped_names.size());
  for (std::size_t i = 0; i < plain_names.size(); ++i) {
    EXPECT_EQ(plain_names[i].first, wrapped_names[i].first);
    EXPECT_EQ(plain_names[i].second.impl(), wrapped_names[i].second.impl());
  }
  std::mt19937 rng(6);
  const Tensor x = f32_tensor(uniform_values(rng, 2 * 5 * 8), {2, 5, 8});
  const std::vector<Tensor> params = block->parameters();
  const std::vector<Tensor> plain =
      gradients([&](const Tensor& h) { return block->forward(block->forward(h)); }, x, params);
  const std::vector<Tensor> with = gradients(
      [&](const Tensor& h) { return checkpointed->forward(checkpointed->forward(h)); }, x, params);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(same_values(with[i], plain[i])) << "gradient " << i;
  }
  checkpointed->eval();
  EXPECT_FALSE(block->is_training());
}

TEST_F(Checkpoint, ModuleRunsWhatReplaceModulePutInItsPlace) {
  const auto checkpointed = utils::checkpoint_module(std::make_shared<nn::Linear>(2, 2));
  checkpointed->replace_module("", std::make_shared<nn::ReLU>());
  EXPECT_NE(dynamic_cast<nn::ReLU*>(checkpointed->module().get()), nullptr);
  const Tensor x = tensor(std::vector<float>{-1, 2}, Shape({1, 2}));
  EXPECT_EQ((*checkpointed)(x).to_vector<float>(), (std::vector<float>{0, 2}));
}

TEST_F(Checkpoint, RecomputationDrawsTheForwardsRandomNumbers) {
  std::mt19937 rng(7);
  const Tensor x = f64_tensor(uniform_values(rng, 64), {8, 8});
  const Tensor w = f64_tensor(uniform_values(rng, 64), {8, 8});
  w.requires_grad_();
  auto f = [&](const Tensor& t) { return nn::dropout(matmul(t, w), 0.5); };
  set_rng_state(42);
  sum(f(x) * f(x)).backward();
  const Tensor expected = w.grad();
  w.set_grad({});
  set_rng_state(42);
  const Tensor y1 = utils::checkpoint(f, x);
  const Tensor y2 = utils::checkpoint(f, x);
  rand({3});  // draws between the forward and the backward do not matter
  sum(y1 * y2).backward();
  EXPECT_TRUE(same_values(w.grad(), expected));
}

TEST_F(Checkpoint, NestedCheckpointsGiveThePlainGradients) {
  std::mt19937 rng(8);
  const Mlp inner(rng), outer(rng);
  const Tensor x = f64_tensor(uniform_values(rng, 3 * 6), {3, 6});
  auto params = inner.params();
  for (const Tensor& p : outer.params()) params.push_back(p);
  const auto plain = gradients([&](const Tensor& h) { return outer(inner(h)); }, x, params);
  const auto nested = gradients(
      [&](const Tensor& h) {
        return utils::checkpoint(
            [&](const Tensor& t) {
              return outer(utils::checkpoint([&](const Tensor& u) { return inner(u); }, t));
            },
            h);
      },
      x, params);
  for (std::size_t i = 0; i < plain.size(); ++i) {
    EXPECT_TRUE(same_values(nested[i], plain[i])) << "gradient " << i;
  }
}

TEST_F(Checkpoint, UnderNoGradItIsTheFunction) {
  std::mt19937 rng(9);
  const Mlp layer(rng);
  const Tensor x = f64_tensor(uniform_values(rng, 6), {1, 6});
  NoGradGuard no_grad;
  const Tensor y = utils::checkpoint([&](const Tensor& t) { return layer(t); }, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(same_values(y, layer(x)));
}

TEST_F(Checkpoint, ErrorsNameTheCall) {
  const Tensor x = zeros({2, 3});
  x.requires_grad_();
  int line = __LINE__ + 2;
  std::string text =
      error_message<ShapeError>([&] { (void)utils::checkpoint(utils::CheckpointFunction(), {x}); });
  EXPECT_TRUE(contains(text, "checkpoint: the function is empty")) << text;
  EXPECT_TRUE(contains(text, at_line(__FILE__, line))) << text;
  text = error_message<ShapeError>([&] {
    (void)utils::checkpoint([](const std::vector<Tensor>& t) { return t[0]; }, {x, Tensor()});
  });
  EXPECT_TRUE(contains(text, "input 1 of 2 is undefined")) << text;
  text = error_message<ShapeError>(
      [&] { (void)utils::checkpoint([](const Tensor&) { return Tensor(); }, x); });
  EXPECT_TRUE(contains(text, "returned an undefined tensor")) << text;
  text = error_message<ShapeError>([&] { (void)utils::checkpoint_module(nullptr); });
  EXPECT_TRUE(contains(text, "checkpoint_module: the module is null")) << text;
  // A function that computes something else the second time.
  int runs = 0;
  line = __LINE__ + 1;
  const Tensor y = utils::checkpoint(
      [&runs](const Tensor& t) { return ++runs == 1 ? t * 2.0 : sum(t, {0}); }, x);
  text = error_message<ShapeError>([&] { sum(y).backward(); });
  EXPECT_TRUE(contains(text, "gave f32[3] where its first run gave f32[2,3]")) << text;
  EXPECT_TRUE(contains(text, at_line(__FILE__, line))) << text;
}

}  // namespace
}  // namespace axle::testing
