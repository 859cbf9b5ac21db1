// Modules called with two inputs, as `model(x, y)` in PyTorch: nn::Module's two-input forward
// and operator(), the error for a forward a module does not define, and the wrappers that pass
// both inputs through — FullyShardedDataParallel (a nested unit with two inputs, one of which
// needs no gradient, run again in the backward pass), DistributedDataParallel, checkpointed
// modules and SpmdFullyShardedDataParallel, each training as one device does.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"

namespace axle {
namespace {

constexpr int kReplicas = 4;
constexpr int64_t kRowsPerReplica = 2;
constexpr int kSteps = 10;
constexpr double kLr = 0.5;
constexpr int64_t kSeed = 77;

// fc(h) * sigmoid(proj(x)): a block of two inputs.
class Gate : public nn::Module {
 public:
  explicit Gate(Device device)
      : fc_(register_module("fc", std::make_shared<nn::Linear>(16, 16, true, device))),
        proj_(register_module("proj", std::make_shared<nn::Linear>(4, 16, true, device))) {}
  Tensor forward(const Tensor& h, const Tensor& x) override {
    return fc_->forward(h) * sigmoid(proj_->forward(x));
  }

 private:
  std::shared_ptr<nn::Linear> fc_, proj_;
};

// Called as model(x, y): its mean squared error on targets y.
class Regression : public nn::Module {
 public:
  explicit Regression(Device device)
      : in_(register_module("in", std::make_shared<nn::Linear>(4, 16, true, device))),
        out_(register_module("out", std::make_shared<nn::Linear>(16, 4, true, device))) {
    register_module("gate", std::make_shared<Gate>(device));
  }
  Tensor forward(const Tensor& x, const Tensor& y) override {
    const Tensor h = tanh(in_->forward(x));
    // Through the child list, so the unit an auto-wrap policy put in the gate's place runs.
    nn::Module& gate = *named_children()[2].second;
    return nn::mse_loss(out_->forward(gate(h, x)), y);
  }

 private:
  std::shared_ptr<nn::Linear> in_, out_;
};

// Rows [first, first + rows) of the inputs and targets.
std::pair<Tensor, Tensor> rows(int64_t first, int64_t count, Device device = {}) {
  std::vector<float> x, y;
  for (int64_t r = first; r < first + count; ++r) {
    for (int64_t i = 0; i < 4; ++i) {
      x.push_back(static_cast<float>(std::sin(0.7 * static_cast<double>(r * 4 + i))));
      y.push_back(static_cast<float>(std::cos(0.3 * static_cast<double>(r + i))));
    }
  }
  return {tensor(x, Shape({count, 4}), device), tensor(y, Shape({count, 4}), device)};
}

// `model`'s loss per SGD step on the whole global batch (x, y).
std::vector<double> train_on_the_global_batch(nn::Module& model, const Tensor& x, const Tensor& y) {
  optim::SGD optimizer(model.parameters(), {.lr = kLr});
  std::vector<double> losses;
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    const Tensor loss = model(x, y);
    loss.backward();
    optimizer.step();
    mark_step();
    losses.push_back(loss.item<float>());
  }
  return losses;
}

// The global batch's loss per SGD step on one device.
std::vector<double> train_one_device() {
  const Device device = xla_device();
  set_rng_state(kSeed, device);
  Regression model(device);
  const auto [x, y] = rows(0, kReplicas * kRowsPerReplica, device);
  return train_on_the_global_batch(model, x, y);
}

// The same on kReplicas replicas, each on its rows, the model wrapped by `wrap`: the mean of
// the replicas' losses per step, as replica 0 sees it.
std::vector<double> train_replicas(
    const std::function<std::shared_ptr<nn::Module>(std::shared_ptr<nn::Module>)>& wrap) {
  std::vector<double> losses;
  spawn([&](int r) {
    const Device device = xla_device();
    set_rng_state(kSeed, device);
    const std::shared_ptr<nn::Module> model = wrap(std::make_shared<Regression>(device));
    optim::SGD optimizer(model->parameters(), {.lr = kLr});
    const auto [x, y] = rows(r * kRowsPerReplica, kRowsPerReplica, device);
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      const Tensor loss = (*model)(x, y);
      loss.backward();
      optimizer.step();
      const Tensor global = all_reduce(ReduceType::kSum, loss.detach(), 1.0 / kReplicas);
      mark_step();
      if (r == 0) losses.push_back(global.item<float>());
    }
  });
  return losses;
}

void expect_same_training(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t step = 0; step < want.size(); ++step) {
    EXPECT_NEAR(got[step], want[step], 1e-5 * want[step]) << "step " << step;
  }
  EXPECT_LT(want.back(), 0.9 * want.front());  // it trained
}

class TwoInputForward : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = kReplicas});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override {
    config::unset("AXLE_COLLECTIVE_TIMEOUT");
    LazySystem::restart();
  }
};

TEST_F(TwoInputForward, AForwardAModuleDoesNotDefineFailsNamingTheModule) {
  const auto [x, y] = rows(0, 2);
  nn::Linear linear(4, 4);
  Regression regression(Device{});
  nn::Module& as_module = linear;
  try {
    (void)as_module(x, y);
    FAIL() << "expected ForwardNotDefined";
  } catch (const nn::ForwardNotDefined& e) {
    EXPECT_NE(std::string(e.what()).find("axle::nn::Linear was called with 2 inputs"),
              std::string::npos)
        << e.what();
  }
  try {
    (void)regression(x);
    FAIL() << "expected ForwardNotDefined";
  } catch (const nn::ForwardNotDefined& e) {
    EXPECT_NE(std::string(e.what()).find("Regression was called with 1 input but"),
              std::string::npos)
        << e.what();
  }
  // The one-input call still reaches Linear's forward.
  EXPECT_EQ(as_module(x).shape(), Shape({2, 4}));
}

TEST_F(TwoInputForward, FsdpWithATwoInputNestedUnitTrainsAsOneDevice) {
  const std::vector<double> want = train_one_device();
  // The gate is a nested unit resharded after forward: its two inputs (one needing a gradient,
  // one not) go through the backward pass's second run.
  expect_same_training(train_replicas([](std::shared_ptr<nn::Module> model) {
                         return std::make_shared<FullyShardedDataParallel>(
                             std::move(model),
                             FsdpOptions{.auto_wrap_policy = transformer_auto_wrap_policy<Gate>()});
                       }),
                       want);
  // Kept after forward, the gate's first run is the one backward differentiates.
  expect_same_training(train_replicas([](std::shared_ptr<nn::Module> model) {
                         return std::make_shared<FullyShardedDataParallel>(
                             std::move(model),
                             FsdpOptions{.reshard_after_forward = false,
                                         .auto_wrap_policy = transformer_auto_wrap_policy<Gate>()});
                       }),
                       want);
}

TEST_F(TwoInputForward, DistributedDataParallelTrainsAsOneDevice) {
  expect_same_training(train_replicas([](std::shared_ptr<nn::Module> model) {
                         return std::make_shared<DistributedDataParallel>(std::move(model));
                       }),
                       train_one_device());
}

TEST_F(TwoInputForward, ACheckpointedModuleGivesTheSameLossAndGradients) {
  const Device device = xla_device();
  const auto [x, y] = rows(0, 8, device);
  set_rng_state(kSeed, device);
  auto plain = std::make_shared<Regression>(device);
  set_rng_state(kSeed, device);
  const std::shared_ptr<utils::CheckpointModule> checkpointed =
      utils::checkpoint_module(std::make_shared<Regression>(device));
  const Tensor want = (*plain)(x, y);
  const Tensor got = (*checkpointed)(x, y);
  want.backward();
  got.backward();
  mark_step();
  EXPECT_EQ(got.item<float>(), want.item<float>());
  const std::vector<Tensor> want_params = plain->parameters();
  const std::vector<Tensor> got_params = checkpointed->parameters();
  ASSERT_EQ(got_params.size(), want_params.size());
  for (std::size_t i = 0; i < want_params.size(); ++i) {
    const std::vector<float> a = want_params[i].grad().to_vector<float>();
    const std::vector<float> b = got_params[i].grad().to_vector<float>();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_NEAR(b[k], a[k], 1e-6f * (1 + std::abs(a[k])))
          << "parameter " << i << " [" << k << "]";
    }
  }
}

TEST_F(TwoInputForward, SpmdFsdpLaysOutBothInputsAndTrainsAsOneDevice) {
  const std::vector<double> want = train_one_device();
  LazySystem::restart(LazySystemOptions{.cpu_devices = kReplicas});
  use_spmd();
  const Device device = xla_device();
  set_rng_state(kSeed, device);
  spmd::SpmdFullyShardedDataParallel model(std::make_shared<Regression>(device),
                                           Mesh({0, 1, 2, 3}, {4}, {"fsdp"}));
  const auto [x, y] = rows(0, kReplicas * kRowsPerReplica, device);
  expect_same_training(train_on_the_global_batch(model, x, y), want);
  EXPECT_NE(spmd::get_sharding_spec(x), "") << "the first input's batch was not laid out";
  EXPECT_NE(spmd::get_sharding_spec(y), "") << "the second input's batch was not laid out";
}

}  // namespace
}  // namespace axle
