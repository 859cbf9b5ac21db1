// FullyShardedDataParallel (actors/parallel/fully_sharded_data_parallel.h) on a small GPT
// (samples/gpt_model.h): shards hold 1/N and gather back to the original parameters; the step
// graph gathers each unit once in forward and nested resharded units again in backward, with one
// reduce-scatter per flat parameter, and its memory plan peaks lower than unsharded; 4 replicas
// give one device's losses on the same global batch over 20 AdamW steps with gradient clipping,
// holding a quarter of the optimizer state; a replica failing mid-step fails all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "axle/actors/compiler/lowering.h"
#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"
#include "axle/engine/config.h"
#include "axle/graph/step_graph.h"
#include "samples/gpt_model.h"
#include "tests/error_text.h"

namespace axle {
namespace {

using samples::Gpt;
using samples::GptBlock;
using samples::GptConfig;

constexpr int kReplicas = 4;
constexpr int64_t kRowsPerReplica = 2;
constexpr int64_t kSeed = 1234;

GptConfig small_gpt() {
  return GptConfig{.block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16};
}

class Fsdp : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystem::restart(LazySystemOptions{.cpu_devices = kReplicas});
    config::set("AXLE_COLLECTIVE_TIMEOUT", "60");  // a failing test fails instead of hanging
  }
  void TearDown() override { config::unset("AXLE_COLLECTIVE_TIMEOUT"); }
};

// Rows [first, first + rows) of step `step`'s global batch: token ids and next-token targets
// (two batches taking turns, so that the loss falls).
std::pair<Tensor, Tensor> batch(int64_t step, int64_t first, int64_t rows, int64_t t,
                                Device device) {
  std::vector<int64_t> x, y;
  for (int64_t r = first; r < first + rows; ++r) {
    for (int64_t i = 0; i <= t; ++i) {
      const int64_t token = ((step % 2) * 131 + r * 37 + i * i * 7 + (r ^ i) * 3) % 256;
      if (i < t) x.push_back(token);
      if (i > 0) y.push_back(token);
    }
  }
  return {tensor(x, Shape({rows, t}), device), tensor(y, Shape({rows, t}), device)};
}

Tensor loss_of(nn::Module& model, const Tensor& x, const Tensor& y, bool bf16 = false) {
  const autocast region(x.device(), DType::kBFloat16, bf16);
  const Tensor logits = model(x);
  const int64_t rows = x.size(0) * x.size(1);
  return nn::cross_entropy(reshape(logits, {rows, 256}), reshape(y, {rows}));
}

int64_t numel_of(const std::vector<Tensor>& ts) {
  int64_t n = 0;
  for (const Tensor& t : ts) n += t.numel();
  return n;
}

int64_t state_numel(const optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& [name, t] : optimizer.state_dict()) {
    if (name.find("exp_avg") != std::string::npos) n += t.numel();
  }
  return n;
}

FsdpOptions nested(FsdpOptions options = {}) {
  options.auto_wrap_policy = transformer_auto_wrap_policy<GptBlock>();
  return options;
}

struct Training {
  std::vector<double> losses;
  std::vector<double> norms;  // the global gradient norm before clipping
  int64_t state_numel = 0;
  int64_t param_numel = 0;
};

constexpr int kSteps = 20;
// Under autocast the 4-replica and one-device losses differed by at most 7e-5 (relative) over the
// 20 steps; with bf16 parameters (compute_dtype, whose loss is a bf16 value, resolution 2^-8) by
// at most 2e-3.
constexpr double kBf16Tolerance = 5e-4;
constexpr double kBf16ComputeTolerance = 1e-2;

// Trains the small GPT for kSteps AdamW steps with clipping on one device, the whole global
// batch at once.
// How a run trains: autocast on the forward pass and loss, checkpointed blocks.
struct Mode {
  bool autocast = false;
  bool checkpoint_activations = false;
};

Training train_one_device(Mode mode = {}) {
  Training run;
  const Device device = xla_device();
  set_rng_state(kSeed, device);
  Gpt model(small_gpt(), device);  // never checkpointed: the reference
  optim::AdamW optimizer(model.parameters(), {.lr = 3e-3});
  for (int64_t step = 0; step < kSteps; ++step) {
    const auto [x, y] = batch(step, 0, kRowsPerReplica * kReplicas, small_gpt().block_size, device);
    optimizer.zero_grad();
    const Tensor loss = loss_of(model, x, y, mode.autocast);
    loss.backward();
    const Tensor norm = nn::utils::clip_grad_norm_(optimizer.params(), 0.5);
    optimizer.step();
    mark_step();
    run.losses.push_back(loss.item<float>());
    run.norms.push_back(norm.item<float>());
  }
  run.state_numel = state_numel(optimizer);
  run.param_numel = numel_of(model.parameters());
  return run;
}

// The same on kReplicas replicas with FSDP, each on its own rows: the global loss is the mean of
// the replicas' losses.
std::vector<Training> train_fsdp(const FsdpOptions& options, Mode mode = {}) {
  std::vector<Training> runs(kReplicas);
  spawn([&](int r) {
    const Device device = xla_device();
    set_rng_state(kSeed, device);
    auto fsdp = std::make_shared<FullyShardedDataParallel>(
        std::make_shared<Gpt>(GptConfig{.block_size = small_gpt().block_size,
                                        .n_layer = small_gpt().n_layer,
                                        .n_head = small_gpt().n_head,
                                        .n_embd = small_gpt().n_embd,
                                        .checkpoint_activations = mode.checkpoint_activations},
                              device),
        options);
    optim::AdamW optimizer(fsdp->parameters(), {.lr = 3e-3});
    Training& run = runs[static_cast<std::size_t>(r)];
    for (int64_t step = 0; step < kSteps; ++step) {
      const auto [x, y] =
          batch(step, r * kRowsPerReplica, kRowsPerReplica, small_gpt().block_size, device);
      optimizer.zero_grad();
      const Tensor loss = loss_of(*fsdp, x, y, mode.autocast);
      loss.backward();
      const Tensor norm = fsdp->clip_grad_norm_(0.5);
      optimizer.step();
      mark_step();
      run.losses.push_back(loss.item<float>());
      run.norms.push_back(norm.item<float>());
    }
    run.state_numel = state_numel(optimizer);
    run.param_numel = numel_of(fsdp->parameters());
  });
  return runs;
}

void expect_same_losses(const Training& one, const std::vector<Training>& fsdp,
                        double tolerance = 1e-5, double norm_tolerance = 0) {
  norm_tolerance = std::max({norm_tolerance, 1e-4, 10 * tolerance});
  for (int step = 0; step < kSteps; ++step) {
    double mean = 0;
    for (const Training& run : fsdp) mean += run.losses[static_cast<std::size_t>(step)];
    mean /= kReplicas;
    const double want = one.losses[static_cast<std::size_t>(step)];
    EXPECT_LE(std::abs(mean - want), tolerance * std::abs(want))
        << "step " << step << ": FSDP " << mean << ", one device " << want;
    // Every replica's norm over the shards is the whole gradient's (averaged over replicas).
    const double want_norm = one.norms[static_cast<std::size_t>(step)];
    for (const Training& run : fsdp) {
      EXPECT_LE(std::abs(run.norms[static_cast<std::size_t>(step)] - want_norm),
                norm_tolerance * want_norm)
          << "step " << step;
    }
  }
  // The losses moved: the test compares training, not 20 copies of the first loss.
  EXPECT_LT(one.losses.back(), one.losses.front() - 0.1);
}

TEST_F(Fsdp, FourReplicasNestedAndReshardedMatchOneDeviceAndHoldAQuarterOfTheState) {
  const Training one = train_one_device();
  const std::vector<Training> fsdp = train_fsdp(nested());
  expect_same_losses(one, fsdp);
  for (const Training& run : fsdp) {
    // A quarter, plus at most the padding of each flat parameter (3 units, one dtype).
    EXPECT_GE(run.param_numel * kReplicas, one.param_numel);
    EXPECT_LE(run.param_numel * kReplicas, one.param_numel + 3 * (kReplicas - 1));
    EXPECT_EQ(run.state_numel, 2 * run.param_numel);  // exp_avg, exp_avg_sq of the shards
  }
}

// A small MLP: 160 parameters, then 1,056 and 1,056 in a Sequential of their own, then 132.
std::shared_ptr<nn::Module> small_mlp(Device device) {
  auto layer = [&](int64_t in, int64_t out) {
    return std::make_shared<nn::Linear>(in, out, true, device);
  };
  using Modules = std::vector<std::shared_ptr<nn::Module>>;
  return std::make_shared<nn::Sequential>(
      Modules{layer(4, 32), std::make_shared<nn::Sequential>(Modules{layer(32, 32), layer(32, 32)}),
              layer(32, 4)});
}

// Rows [first, first + rows) of the MLP's inputs and targets.
std::pair<Tensor, Tensor> mlp_rows(int64_t first, int64_t rows, Device device) {
  std::vector<float> x, y;
  for (int64_t r = first; r < first + rows; ++r) {
    for (int64_t i = 0; i < 4; ++i) {
      x.push_back(static_cast<float>(std::sin(0.7 * static_cast<double>(r * 4 + i))));
      y.push_back(static_cast<float>(std::cos(0.3 * static_cast<double>(r + i))));
    }
  }
  return {tensor(x, Shape({rows, 4}), device), tensor(y, Shape({rows, 4}), device)};
}

// size_based_auto_wrap_policy, as torch's: bottom-up, a submodule becomes a unit when its
// parameters not already in a nested unit number at least min_num_params. The units' paths are
// where their flat shards are named; 4 replicas train as one device on the whole batch.
TEST_F(Fsdp, SizeBasedPolicyWrapsSubmodulesWithEnoughUnwrappedParameters) {
  auto shards_of = [](int64_t min_num_params) {
    std::vector<std::string> names;
    spawn([&](int r) {
      const FullyShardedDataParallel fsdp(
          small_mlp(xla_device()),
          {.auto_wrap_policy = size_based_auto_wrap_policy(min_num_params)});
      if (r != 0) return;
      for (const auto& [name, t] : fsdp.named_parameters()) names.push_back(name);
    });
    return names;
  };
  // Each inner Linear (1,056); their Sequential then holds none unwrapped.
  EXPECT_EQ(shards_of(1000), (std::vector<std::string>{
                                 "flat_param_0",
                                 "_fsdp_wrapped_module.1.0.flat_param_0",
                                 "_fsdp_wrapped_module.1.1.flat_param_0",
                             }));
  // The inner Sequential (2,112), not its Linears.
  EXPECT_EQ(shards_of(2000), (std::vector<std::string>{
                                 "flat_param_0",
                                 "_fsdp_wrapped_module.1.flat_param_0",
                             }));
  // Nothing but the root.
  EXPECT_EQ(shards_of(3000), (std::vector<std::string>{"flat_param_0"}));

  constexpr int kMlpSteps = 10;
  std::vector<double> want;
  {
    const Device device = xla_device();
    set_rng_state(kSeed, device);
    const std::shared_ptr<nn::Module> model = small_mlp(device);
    optim::SGD optimizer(model->parameters(), {.lr = 0.1});
    const auto [x, y] = mlp_rows(0, kReplicas * 2, device);
    for (int step = 0; step < kMlpSteps; ++step) {
      optimizer.zero_grad();
      const Tensor loss = nn::mse_loss((*model)(x), y);
      loss.backward();
      optimizer.step();
      mark_step();
      want.push_back(loss.item<float>());
    }
  }
  std::vector<std::vector<double>> got(kReplicas);
  spawn([&](int r) {
    const Device device = xla_device();
    set_rng_state(kSeed, device);
    FullyShardedDataParallel fsdp(small_mlp(device),
                                  {.auto_wrap_policy = size_based_auto_wrap_policy(1000)});
    optim::SGD optimizer(fsdp.parameters(), {.lr = 0.1});
    const auto [x, y] = mlp_rows(r * 2, 2, device);
    for (int step = 0; step < kMlpSteps; ++step) {
      optimizer.zero_grad();
      const Tensor loss = nn::mse_loss(fsdp(x), y);
      loss.backward();
      optimizer.step();
      const Tensor global = all_reduce(ReduceType::kSum, loss.detach(), 1.0 / kReplicas);
      mark_step();
      got[static_cast<std::size_t>(r)].push_back(global.item<float>());
    }
  });
  for (int step = 0; step < kMlpSteps; ++step) {
    for (const auto& losses : got) {
      EXPECT_NEAR(losses[static_cast<std::size_t>(step)], want[static_cast<std::size_t>(step)],
                  1e-5 * want[static_cast<std::size_t>(step)])
          << "step " << step;
    }
  }
  EXPECT_LT(want.back(), 0.9 * want.front());  // it trained
}

TEST_F(Fsdp, OneUnitWithoutReshardingMatchesOneDevice) {
  const Training one = train_one_device();
  expect_same_losses(one, train_fsdp({.reshard_after_forward = false}));
}

TEST_F(Fsdp, ParametersShardedOneByOneAndOnDim0MatchOneDevice) {
  const Training one = train_one_device();
  expect_same_losses(one, train_fsdp(nested({.flatten_parameters = false})));
  expect_same_losses(
      one, train_fsdp(nested({.flatten_parameters = false, .shard_param_on_dim_0 = true})));
}

TEST_F(Fsdp, CheckpointedBlocksInsideUnitsMatchOneDevice) {
  // The policy wraps each GptBlock inside its CheckpointModule.
  expect_same_losses(train_one_device(), train_fsdp(nested(), {.checkpoint_activations = true}));
}

TEST_F(Fsdp, UnderAutocastMatchesOneDeviceUnderAutocast) {
  // bf16 matmuls round each replica's partial gradients where one device rounds the whole
  // batch's, so the runs agree to bf16's precision, not f32's: the gradient norm (a sum of
  // squares of bf16-rounded terms) within two bf16 ulps (2^-7).
  const Training one = train_one_device({.autocast = true});
  expect_same_losses(one, train_fsdp(nested(), {.autocast = true}), kBf16Tolerance, 0x1p-7);
}

TEST_F(Fsdp, ComputeDtypeBf16TrainsOnF32ShardsCloseToF32) {
  const Training one = train_one_device();
  const std::vector<Training> fsdp = train_fsdp(nested({.compute_dtype = DType::kBFloat16}));
  expect_same_losses(one, fsdp, kBf16ComputeTolerance);
  spawn([&](int) {
    FullyShardedDataParallel unit(std::make_shared<Gpt>(small_gpt(), xla_device()),
                                  {.compute_dtype = DType::kBFloat16});
    for (const Tensor& p : unit.parameters()) EXPECT_EQ(p.dtype(), DType::kFloat32);
    for (const auto& [name, t] : unit.full_parameters())
      EXPECT_EQ(t.dtype(), DType::kBFloat16) << name;
  });
}

TEST_F(Fsdp, BufferDtypeCastsFloatingBuffersOnceAndNamesFollowTorchXla) {
  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 2, std::vector<int64_t>{3, 3}),
      std::make_shared<nn::BatchNorm2d>(2)});
  const FullyShardedDataParallel fsdp(model, {.buffer_dtype = DType::kBFloat16});
  std::vector<std::string> names;
  for (const auto& [name, t] : fsdp.state_dict()) {
    names.push_back(name);
    if (name.ends_with("running_mean") || name.ends_with("running_var")) {
      EXPECT_EQ(t.dtype(), DType::kBFloat16) << name;
    }
    if (name.ends_with("num_batches_tracked")) {
      EXPECT_EQ(t.dtype(), DType::kInt64);
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"flat_param_0", "_fsdp_wrapped_module.1.running_mean",
                                             "_fsdp_wrapped_module.1.running_var",
                                             "_fsdp_wrapped_module.1.num_batches_tracked"}));
}

TEST_F(Fsdp, ShardsGatherBackToTheOriginalParameters) {
  spawn([&](int r) {
    const Device device = xla_device();
    set_rng_state(kSeed, device);
    auto model = std::make_shared<Gpt>(small_gpt(), device);
    std::vector<std::pair<std::string, std::vector<float>>> before;
    for (const auto& [name, t] : model->state_dict())
      before.emplace_back(name, t.to_vector<float>());
    FullyShardedDataParallel fsdp(model, nested());
    // Nothing of the wrapped model's own is a parameter any more: only the units' shards.
    for (const auto& [name, t] : fsdp.named_parameters()) {
      EXPECT_NE(name.find("flat_param_"), std::string::npos) << name;
    }
    EXPECT_EQ(fsdp.named_parameters().size(), 3u);  // the root and two blocks, one dtype each
    // Gathered, each unit's parameters are the originals, bit for bit.
    std::vector<std::pair<std::string, Tensor>> full;
    auto walk = [&](auto& self, const nn::Module& m, const std::string& prefix) -> void {
      if (const auto* unit = dynamic_cast<const FullyShardedDataParallel*>(&m)) {
        for (const auto& [name, t] : unit->full_parameters()) full.emplace_back(prefix + name, t);
      }
      for (const auto& [name, child] : m.named_children()) {
        self(self, *child, name == "_fsdp_wrapped_module" ? prefix : prefix + name + ".");
      }
    };
    walk(walk, fsdp, "");
    EXPECT_EQ(full.size() + 1, before.size());  // lm_head.weight is wte's
    for (const auto& [name, t] : full) {
      const auto it = std::ranges::find_if(before, [&](const auto& b) { return b.first == name; });
      ASSERT_NE(it, before.end()) << name;
      EXPECT_EQ(t.to_vector<float>(), it->second) << name << " on replica " << r;
    }
  });
}

// One training step of `model` traced on every replica and compiled (not run): the all-gather
// and reduce-scatter calls of replica 0's program and its memory plan's peak.
struct StepProgram {
  int all_gathers = 0;
  int reduce_scatters = 0;
  uint64_t peak_bytes = 0;
};

StepProgram compile_step(bool sharded) {
  StepProgram out;
  const GptConfig config{.block_size = 4, .n_layer = 8, .n_head = 2, .n_embd = 64};
  spawn([&](int r) {
    const Device device = xla_device();
    set_rng_state(kSeed, device);
    std::shared_ptr<nn::Module> model = std::make_shared<Gpt>(config, device);
    if (sharded) model = std::make_shared<FullyShardedDataParallel>(model, nested());
    mark_step();
    const auto [x, y] = batch(0, 0, 1, config.block_size, device);
    const Tensor loss = loss_of(*model, x, y);
    loss.backward();
    std::vector<NodePtr> roots{loss.impl()->ir()};
    for (const Tensor& p : model->parameters()) roots.push_back(p.grad().impl()->ir());
    const IntrusivePtr<Executable> program = compile_graph(build_step_graph(roots), PassSet());
    if (r != 0) return;
    for (const KernelCall& call : program->calls) {
      out.all_gathers += call.kernel == Kernel::kAllGather;
      out.reduce_scatters += call.kernel == Kernel::kReduceScatter;
    }
    out.peak_bytes = program->plan.peak_bytes;
  });
  return out;
}

TEST_F(Fsdp, StepGathersInForwardAndAgainForResharedUnitsAndPeaksLower) {
  const StepProgram plain = compile_step(false);
  const StepProgram sharded = compile_step(true);
  EXPECT_EQ(plain.all_gathers, 0);
  // The root once (kept for its backward), each of the 8 blocks in forward and again in its
  // backward; one reduce-scatter per flat parameter.
  EXPECT_EQ(sharded.all_gathers, 1 + 2 * 8);
  EXPECT_EQ(sharded.reduce_scatters, 1 + 8);
  // Parameters and gradients dominate this step: a quarter of them, plus one block gathered at a
  // time, peaks well below the whole model's.
  EXPECT_LT(static_cast<double>(sharded.peak_bytes), 0.6 * static_cast<double>(plain.peak_bytes))
      << sharded.peak_bytes << " vs " << plain.peak_bytes;
  RecordProperty("peak_bytes_plain", std::to_string(plain.peak_bytes));
  RecordProperty("peak_bytes_fsdp", std::to_string(sharded.peak_bytes));
}

TEST_F(Fsdp, AReplicaFailingMidStepFailsAllWithoutAHang) {
  config::set("AXLE_COLLECTIVE_TIMEOUT", "600");  // only cancellation can end the wait in time
  std::vector<std::string> errors(kReplicas);
  try {
    spawn([&](int r) {
      const Device device = xla_device();
      set_rng_state(kSeed, device);
      FullyShardedDataParallel fsdp(std::make_shared<Gpt>(small_gpt(), device), nested());
      optim::AdamW optimizer(fsdp.parameters());
      for (int64_t step = 0; step < 2; ++step) {
        const auto [x, y] = batch(step, r * kRowsPerReplica, kRowsPerReplica, 8, device);
        optimizer.zero_grad();
        const Tensor loss = loss_of(fsdp, x, y);
        loss.backward();
        if (step == 1 && r == 1) throw std::runtime_error("replica 1 gives up");
        optimizer.step();
        if (step == 0) {
          (void)loss.item<float>();  // one step together: the graphs are known to agree
        } else {
          errors[static_cast<std::size_t>(r)] =
              testing::error_message<ReplicaCancelled>([&] { (void)loss.item<float>(); });
        }
      }
    });
    ADD_FAILURE() << "spawn returned normally";
  } catch (const ReplicaError& e) {
    EXPECT_EQ(e.replica(), 1);
    EXPECT_NE(std::string(e.what()).find("replica 1 gives up"), std::string::npos) << e.what();
  }
  for (int r = 0; r < kReplicas; ++r) {
    if (r == 1) continue;
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("replica 1 failed: replica 1 gives up"),
              std::string::npos)
        << "replica " << r << ": " << errors[static_cast<std::size_t>(r)];
  }
}

// Two Linears whose weights are one tensor, each made a unit of its own: the tie would be sharded
// twice, so construction fails naming both of its names and the caller's line.
TEST_F(Fsdp, ParametersTiedAcrossUnitsFailNamingThem) {
  class Tied : public nn::Module {
   public:
    Tied() {
      auto a = register_module("a", std::make_shared<nn::Linear>(4, 4));
      auto b = register_module("b", std::make_shared<nn::Linear>(4, 4));
      b->replace_parameter("weight", a->weight());
    }
    Tensor forward(const Tensor& x) override { return x; }
  };
  const auto is_linear = [](const nn::Module& m) {
    return dynamic_cast<const nn::Linear*>(&m) != nullptr;
  };
  const std::string text = testing::error_message<ShapeError>([&] {
    FullyShardedDataParallel fsdp(std::make_shared<Tied>(),
                                  {.auto_wrap_policy = module_type_auto_wrap_policy(is_linear)});
  });
  EXPECT_NE(text.find("a.weight (also b.weight)"), std::string::npos) << text;
  EXPECT_NE(text.find("FullyShardedDataParallel"), std::string::npos) << text;
  EXPECT_NE(text.find("fully_sharded_data_parallel_test.cpp"), std::string::npos) << text;
  EXPECT_EQ(text.find("bias"), std::string::npos) << text;
  // Tied inside one unit (the root) is fine.
  EXPECT_NO_THROW(FullyShardedDataParallel root(std::make_shared<Tied>()));
}

TEST_F(Fsdp, BadOptionsFailNamingTheWrapper) {
  const Device device = xla_device();
  auto model = std::make_shared<Gpt>(small_gpt(), device);
  const std::string text = testing::error_message<ShapeError>([&] {
    FullyShardedDataParallel fsdp(model,
                                  {.flatten_parameters = true, .shard_param_on_dim_0 = true});
  });
  EXPECT_NE(text.find("FullyShardedDataParallel"), std::string::npos) << text;
  EXPECT_NE(text.find("shard_param_on_dim_0"), std::string::npos) << text;
  EXPECT_NE(text.find("fully_sharded_data_parallel_test.cpp"), std::string::npos) << text;
}

}  // namespace
}  // namespace axle
