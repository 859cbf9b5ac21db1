// graph/optim end to end: SGD (momentum, dampening, Nesterov, weight decay), Adam and AdamW step
// for step against double-precision references of torch.optim's update rules (the algorithm
// boxes of the PyTorch documentation), zero_grad, learning rates that change without
// recompiling, steps that read nothing back, state_dict round trips, and clip_grad_norm_.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/actors/nn_test_util.h"

namespace axle::testing {
namespace {

using Optim = NnTest;

// ---- the problem ----------------------------------------------------------------------------
// Parameters p_k (f64) with loss sum_k sum(a_k * (p_k - c_k)^2 + 0.1 * p_k^3), whose gradient
// is 2 a_k (p_k - c_k) + 0.3 p_k^2. A last parameter takes no part in the loss: it never has a
// gradient, and torch leaves such a parameter alone.

struct Problem {
  std::vector<Shape> shapes{{2, 3}, {3}};
  std::vector<std::vector<double>> a, c, start;

  explicit Problem(unsigned seed = 1) {
    std::mt19937 rng(seed);
    for (const Shape& s : shapes) {
      a.push_back(uniform_values(rng, s.numel(), 0.5, 2));
      c.push_back(uniform_values(rng, s.numel(), -1, 1));
      start.push_back(uniform_values(rng, s.numel(), -1, 1));
    }
  }

  [[nodiscard]] std::vector<double> grad(std::size_t k, const std::vector<double>& p) const {
    std::vector<double> g(p.size());
    for (std::size_t i = 0; i < p.size(); ++i) {
      g[i] = 2 * a[k][i] * (p[i] - c[k][i]) + 0.3 * p[i] * p[i];
    }
    return g;
  }

  // Fresh device parameters at the start values, plus the unused one (last).
  [[nodiscard]] std::vector<Tensor> make_params() const {
    std::vector<Tensor> params;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      params.push_back(f64_tensor(start[k], shapes[k]));
      params.back().requires_grad_();
    }
    params.push_back(f64_tensor({0.5, -0.5}, {2}));
    params.back().requires_grad_();
    return params;
  }

  // Traces the loss over params[0..shapes) and its backward; `which` limits it to some of them.
  void backward(const std::vector<Tensor>& params, std::vector<bool> which = {}) const {
    Tensor loss;
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      if (!which.empty() && !which[k]) continue;
      const Tensor d = params[k] - f64_tensor(c[k], shapes[k]);
      const Tensor term =
          sum(f64_tensor(a[k], shapes[k]) * d * d + params[k] * params[k] * params[k] * 0.1);
      loss = loss.defined() ? loss + term : term;
    }
    loss.backward();
  }
};

// One training step: zero_grad, backward, step, mark_step.
void train_step(optim::Optimizer& opt, const Problem& problem, const std::vector<Tensor>& params,
                std::vector<bool> which = {}) {
  opt.zero_grad();
  problem.backward(params, std::move(which));
  opt.step();
  mark_step();
}

// ---- references: torch.optim's algorithms, in double ----------------------------------------

struct SgdRef {
  optim::SgdOptions o;
  std::vector<std::vector<double>> buf;
  std::vector<bool> started;

  void step(std::size_t k, std::vector<double>& p, std::vector<double> g) {
    if (buf.size() <= k) {
      buf.resize(k + 1);
      started.resize(k + 1, false);
    }
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (o.weight_decay != 0) g[i] += o.weight_decay * p[i];
    }
    if (o.momentum != 0) {
      if (!started[k]) {
        buf[k] = g;
        started[k] = true;
      } else {
        for (std::size_t i = 0; i < p.size(); ++i) {
          buf[k][i] = o.momentum * buf[k][i] + (1 - o.dampening) * g[i];
        }
      }
      for (std::size_t i = 0; i < p.size(); ++i) {
        g[i] = o.nesterov ? g[i] + o.momentum * buf[k][i] : buf[k][i];
      }
    }
    for (std::size_t i = 0; i < p.size(); ++i) p[i] -= o.lr * g[i];
  }
};

struct AdamRef {
  optim::AdamOptions o;
  bool decoupled = false;
  std::vector<std::vector<double>> m, v;
  std::vector<int> t;  // per parameter, as torch's state["step"]

  void step(std::size_t k, std::vector<double>& p, std::vector<double> g) {
    if (m.size() <= k) {
      m.resize(k + 1);
      v.resize(k + 1);
      t.resize(k + 1, 0);
    }
    if (m[k].empty()) {
      m[k].assign(p.size(), 0.0);
      v[k].assign(p.size(), 0.0);
    }
    const int step = ++t[k];
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (decoupled) {
        p[i] *= 1 - o.lr * o.weight_decay;
      } else if (o.weight_decay != 0) {
        g[i] += o.weight_decay * p[i];
      }
      m[k][i] = o.beta1 * m[k][i] + (1 - o.beta1) * g[i];
      v[k][i] = o.beta2 * v[k][i] + (1 - o.beta2) * g[i] * g[i];
      const double m_hat = m[k][i] / (1 - std::pow(o.beta1, step));
      const double v_hat = v[k][i] / (1 - std::pow(o.beta2, step));
      p[i] -= o.lr * m_hat / (std::sqrt(v_hat) + o.eps);
    }
  }
};

using RefStep = std::function<void(std::size_t, std::vector<double>&, std::vector<double>)>;

// Runs `steps` steps of `opt` and of the reference side by side, comparing every parameter after
// each step; `lr_at` (when given) sets the learning rate of step s on both.
void expect_matches_reference(optim::Optimizer& opt, const std::vector<Tensor>& params,
                              const Problem& problem, const RefStep& ref, int steps,
                              const std::function<double(int)>& lr_at = {},
                              const std::function<void(double)>& set_ref_lr = {}) {
  std::vector<std::vector<double>> p = problem.start;
  for (int s = 0; s < steps; ++s) {
    if (lr_at) {
      opt.set_lr(lr_at(s));
      set_ref_lr(lr_at(s));
    }
    train_step(opt, problem, params);
    for (std::size_t k = 0; k < p.size(); ++k) {
      ref(k, p[k], problem.grad(k, p[k]));
      EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
          << "parameter " << k << " after step " << s + 1;
    }
    EXPECT_EQ(values(params.back()), (std::vector<double>{0.5, -0.5})) << "the unused parameter";
  }
  EXPECT_EQ(opt.steps(), steps);
}

// ---- SGD ------------------------------------------------------------------------------------

struct SgdCase {
  const char* name;
  optim::SgdOptions options;
};

class SgdSteps : public Optim, public ::testing::WithParamInterface<SgdCase> {};

TEST_P(SgdSteps, MatchTorchsUpdateRule) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::SGD sgd(params, GetParam().options);
  SgdRef ref{GetParam().options};
  expect_matches_reference(
      sgd, params, problem,
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref.step(k, p, g); }, 4);
}

INSTANTIATE_TEST_SUITE_P(
    Optim, SgdSteps,
    ::testing::Values(
        SgdCase{"Plain", {.lr = 0.1}}, SgdCase{"Momentum", {.lr = 0.05, .momentum = 0.9}},
        SgdCase{"Dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
        SgdCase{"Nesterov", {.lr = 0.05, .momentum = 0.9, .nesterov = true}},
        SgdCase{"WeightDecay", {.lr = 0.1, .weight_decay = 0.2}},
        SgdCase{"Everything", {.lr = 0.05, .momentum = 0.7, .weight_decay = 0.1, .nesterov = true}},
        SgdCase{"MomentumAndDecay",
                {.lr = 0.05, .momentum = 0.5, .dampening = 0.5, .weight_decay = 0.3}}),
    [](const ::testing::TestParamInfo<SgdCase>& info) { return std::string(info.param.name); });

TEST_F(Optim, SgdRejectsNesterovWithoutMomentumOrWithDampening) {
  const Problem problem;
  EXPECT_THROW(optim::SGD(problem.make_params(), {.lr = 0.1, .nesterov = true}),
               std::invalid_argument);
  EXPECT_THROW(optim::SGD(problem.make_params(),
                          {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               std::invalid_argument);
}

// ---- Adam and AdamW -------------------------------------------------------------------------

TEST_F(Optim, AdamMatchesTorchsUpdateRule) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  const optim::AdamOptions options{.lr = 0.05};
  optim::Adam adam(params, options);
  AdamRef ref{options};
  expect_matches_reference(
      adam, params, problem,
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref.step(k, p, g); }, 5);
}

TEST_F(Optim, AdamWithWeightDecayAddsItToTheGradient) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  const optim::AdamOptions options{
      .lr = 0.02, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.5};
  optim::Adam adam(params, options);
  AdamRef ref{options};
  expect_matches_reference(
      adam, params, problem,
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref.step(k, p, g); }, 5);
}

TEST_F(Optim, AdamWDecaysTheWeightsBeforeTheUpdate) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::AdamW adamw(params, {.lr = 0.05, .weight_decay = 0.5});
  AdamRef ref{{.lr = 0.05, .weight_decay = 0.5}, true};
  expect_matches_reference(
      adamw, params, problem,
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref.step(k, p, g); }, 5);
}

TEST_F(Optim, AdamWDecaysByOneHundredthUnlessToldOtherwise) {
  // torch.optim.AdamW's weight_decay defaults to 0.01, also when only the lr is given.
  for (const bool give_lr : {false, true}) {
    const Problem problem;
    const std::vector<Tensor> params = problem.make_params();
    auto adamw = give_lr ? std::make_unique<optim::AdamW>(params, optim::AdamWOptions{.lr = 0.05})
                         : std::make_unique<optim::AdamW>(params);
    AdamRef ref{{.lr = give_lr ? 0.05 : 1e-3, .weight_decay = 0.01}, true};
    expect_matches_reference(
        *adamw, params, problem,
        [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref.step(k, p, g); },
        3);
  }
}

TEST_F(Optim, AdamCountsStepsPerParameter) {
  // The second parameter gets its first gradient in the third step: as in torch, its bias
  // correction starts from step 1 then, and the steps without a gradient leave it alone.
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  const optim::AdamOptions options{.lr = 0.05};
  optim::Adam adam(params, options);
  AdamRef ref{options};
  std::vector<std::vector<double>> p = problem.start;
  const std::vector<std::vector<bool>> schedule{
      {true, false}, {true, false}, {true, true}, {false, true}, {true, true}};
  for (std::size_t s = 0; s < schedule.size(); ++s) {
    train_step(adam, problem, params, schedule[s]);
    for (std::size_t k = 0; k < p.size(); ++k) {
      if (schedule[s][k]) ref.step(k, p[k], problem.grad(k, p[k]));
      EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
          << "parameter " << k << " after step " << s + 1;
    }
  }
}

TEST_F(Optim, SgdMomentumSkipsAParameterWithoutAGradient) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  const optim::SgdOptions options{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.1};
  optim::SGD sgd(params, options);
  SgdRef ref{options};
  std::vector<std::vector<double>> p = problem.start;
  const std::vector<std::vector<bool>> schedule{{true, false}, {false, true}, {true, true}};
  for (std::size_t s = 0; s < schedule.size(); ++s) {
    train_step(sgd, problem, params, schedule[s]);
    for (std::size_t k = 0; k < p.size(); ++k) {
      if (schedule[s][k]) ref.step(k, p[k], problem.grad(k, p[k]));
      EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
          << "parameter " << k << " after step " << s + 1;
    }
  }
}

TEST_F(Optim, ZeroGradResetsEveryGradient) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::SGD sgd(params, {.lr = 0.1});
  problem.backward(params);
  EXPECT_TRUE(params[0].grad().defined());
  EXPECT_TRUE(params[1].grad().defined());
  sgd.zero_grad();
  for (const Tensor& p : params) EXPECT_FALSE(p.grad().defined());
  // The next backward starts afresh rather than adding to the old gradient.
  problem.backward(params);
  EXPECT_TRUE(all_close(values(params[1].grad()), problem.grad(1, problem.start[1])));
}

// ---- compiling and reading back -------------------------------------------------------------

int64_t compiles() { return count("UncachedCompile"); }

TEST_F(Optim, ChangingTheLearningRateDoesNotRecompile) {
  for (const bool adam : {false, true}) {
    const Problem problem;
    const std::vector<Tensor> params = problem.make_params();
    std::unique_ptr<optim::Optimizer> opt;
    SgdRef sgd_ref{{.lr = 0.1, .momentum = 0.9}};
    AdamRef adam_ref{{.lr = 0.1}};
    if (adam) {
      opt = std::make_unique<optim::Adam>(params, adam_ref.o);
    } else {
      opt = std::make_unique<optim::SGD>(params, sgd_ref.o);
    }
    std::vector<std::vector<double>> p = problem.start;
    int64_t warm = 0;
    for (int s = 0; s < 6; ++s) {
      // The first two steps differ (the state starts in the first); from then on, every step
      // is the same graph with other values for the learning rate and the bias corrections.
      if (s == 2) {
        wait_device_ops();
        warm = compiles();
      }
      const double lr = 0.1 / (s + 1) + 0.013 * s;
      opt->set_lr(lr);
      sgd_ref.o.lr = lr;
      adam_ref.o.lr = lr;
      train_step(*opt, problem, params);
      for (std::size_t k = 0; k < p.size(); ++k) {
        const std::vector<double> g = problem.grad(k, p[k]);
        if (adam) {
          adam_ref.step(k, p[k], g);
        } else {
          sgd_ref.step(k, p[k], g);
        }
        EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
            << (adam ? "Adam" : "SGD") << " parameter " << k << " after step " << s + 1;
      }
    }
    wait_device_ops();
    EXPECT_GT(warm, 0);
    EXPECT_EQ(compiles(), warm) << (adam ? "Adam" : "SGD");
  }
}

// Runs `step` three times (after a first step that starts the optimizer state) and checks that
// tracing it and its mark_step read nothing back to the host.
void expect_no_reads(const std::function<void()>& step) {
  step();
  wait_device_ops();
  const int64_t reads = samples("TransferFromDeviceTime");
  for (int s = 0; s < 3; ++s) step();
  wait_device_ops();
  EXPECT_EQ(samples("TransferFromDeviceTime"), reads);
}

TEST_F(Optim, SgdStepReadsNothingBack) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::SGD sgd(params, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
  expect_no_reads([&] { train_step(sgd, problem, params); });
}

TEST_F(Optim, AdamStepReadsNothingBack) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::AdamW adamw(params, {.lr = 0.1, .weight_decay = 0.1});
  expect_no_reads([&] { train_step(adamw, problem, params); });
}

TEST_F(Optim, ClippedStepReadsNothingBack) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::Adam adam(params, {.lr = 0.1});
  expect_no_reads([&] {
    adam.zero_grad();
    problem.backward(params);
    (void)optim::clip_grad_norm_(params, 0.5);
    adam.step();
    mark_step();
  });
}

// ---- state_dict -----------------------------------------------------------------------------

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<Tensor>&)>;

// Trains `make(params)` for 5 steps without a break, and for 2 steps, then moves its state
// (passed through `edit`) into a fresh optimizer over fresh parameters holding the same values,
// which takes 3 more steps: both must end at the same values. With `late_start`, the second
// parameter gets no gradient in the first step, so the parameters have taken different numbers
// of steps at the break.
void expect_round_trip_continues(const MakeOptimizer& make, const std::vector<std::string>& keys,
                                 bool late_start = true,
                                 const std::function<nn::StateDict(nn::StateDict)>& edit = {}) {
  const Problem problem;
  auto which = [&](int s) {
    return late_start && s == 0 ? std::vector<bool>{true, false} : std::vector<bool>{};
  };
  const std::vector<Tensor> straight = problem.make_params();
  std::unique_ptr<optim::Optimizer> uninterrupted = make(straight);
  for (int s = 0; s < 5; ++s) train_step(*uninterrupted, problem, straight, which(s));

  const std::vector<Tensor> first = problem.make_params();
  std::unique_ptr<optim::Optimizer> before = make(first);
  for (int s = 0; s < 2; ++s) train_step(*before, problem, first, which(s));
  nn::StateDict state = before->state_dict();
  std::vector<std::string> names;
  for (const auto& [name, tensor] : state) names.push_back(name);
  EXPECT_EQ(names, keys);
  EXPECT_EQ(nn::find(state, "step")->item(), 2);
  if (edit) state = edit(std::move(state));

  std::vector<Tensor> second;
  for (const Tensor& p : first) {
    second.push_back(tensor(values(p), p.shape()));
    second.back().requires_grad_();
  }
  std::unique_ptr<optim::Optimizer> after = make(second);
  after->load_state_dict(state);
  EXPECT_EQ(after->steps(), 2);
  for (int s = 2; s < 5; ++s) train_step(*after, problem, second, which(s));
  for (std::size_t k = 0; k < straight.size(); ++k) {
    EXPECT_TRUE(all_close(values(second[k]), values(straight[k]), 1e-15, 1e-15)) << k;
  }
}

std::unique_ptr<optim::Optimizer> make_sgd(const std::vector<Tensor>& params) {
  return std::make_unique<optim::SGD>(params, optim::SgdOptions{.lr = 0.05, .momentum = 0.9});
}

std::unique_ptr<optim::Optimizer> make_adam(const std::vector<Tensor>& params) {
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 0.05});
}

TEST_F(Optim, SgdStateDictRoundTripContinuesTheRun) {
  expect_round_trip_continues(make_sgd,
                              {"state.0.momentum_buffer", "state.1.momentum_buffer", "step"});
}

TEST_F(Optim, AdamStateDictRoundTripContinuesTheRun) {
  expect_round_trip_continues(
      make_adam, {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq", "state.1.step",
                  "state.1.exp_avg", "state.1.exp_avg_sq", "step"});
  nn::StateDict state = make_adam(Problem().make_params())->state_dict();
  EXPECT_EQ(state.size(), 1u);  // before any step: only the step count
}

TEST_F(Optim, AdamLoadsAStateWithoutPerParameterStepCounts) {
  // Every parameter took every step, so the global count stands in for the missing ones.
  expect_round_trip_continues(make_adam,
                              {"state.0.step", "state.0.exp_avg", "state.0.exp_avg_sq",
                               "state.1.step", "state.1.exp_avg", "state.1.exp_avg_sq", "step"},
                              false, [](nn::StateDict state) {
                                std::erase_if(state, [](const auto& entry) {
                                  return entry.first.starts_with("state.") &&
                                         entry.first.ends_with(".step");
                                });
                                return state;
                              });
}

TEST_F(Optim, LoadStateDictRejectsEntriesThatDoNotFitAndLoadsNothing) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::SGD sgd(params, {.lr = 0.05, .momentum = 0.9});
  train_step(sgd, problem, params);
  const nn::StateDict good = sgd.state_dict();
  const std::vector<double> buffer = values(*nn::find(good, "state.0.momentum_buffer"));
  auto expect_rejected = [&](const nn::StateDict& bad, const std::string& key) {
    auto load = [&] { sgd.load_state_dict(bad); };
    const int line = __LINE__ - 1;
    const std::string what = error_message<nn::StateDictError>(load);
    EXPECT_TRUE(contains(what, key)) << what;
    EXPECT_TRUE(contains(what, at_line(__FILE__, line))) << what;
    EXPECT_EQ(sgd.steps(), 1);
    EXPECT_EQ(values(*nn::find(sgd.state_dict(), "state.0.momentum_buffer")), buffer);
  };
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kF64)},
                   {"state.5.momentum_buffer", zeros({3}, DType::kF64)},
                   {"step", scalar_tensor(9, DType::kI64)}},
                  "\"state.5.momentum_buffer\"");
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kF64)},
                   {"state.1.exp_avg", zeros({3}, DType::kF64)},
                   {"step", scalar_tensor(9, DType::kI64)}},
                  "\"state.1.exp_avg\"");
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kF64)},
                   {"state.1.momentum_buffer", zeros({2}, DType::kF64)},
                   {"step", scalar_tensor(9, DType::kI64)}},
                  "\"state.1.momentum_buffer\"");
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kF64)}}, "\"step\"");
}

// ---- clip_grad_norm_ ------------------------------------------------------------------------

// Two parameters whose gradients are set by hand: [3, -4] and [12] (2-norm 13, inf-norm 12,
// 1-norm 19).
struct Clipped {
  Tensor a = tensor(std::vector<double>{0, 0}, {2});
  Tensor b = tensor(std::vector<double>{0}, {1});
  Tensor frozen = tensor(std::vector<double>{1}, {1});  // no gradient: skipped
  Clipped() {
    a.set_grad(tensor(std::vector<double>{3, -4}, {2}));
    b.set_grad(tensor(std::vector<double>{12}, {1}));
  }
  [[nodiscard]] std::vector<Tensor> params() const { return {a, frozen, b}; }
};

TEST_F(Optim, ClipGradNormScalesGradientsAboveTheLimit) {
  const Clipped p;
  const Tensor total = optim::clip_grad_norm_(p.params(), 6.5);
  mark_step();
  EXPECT_NEAR(total.item(), 13, 1e-12);
  const double scale = 6.5 / (13 + 1e-6);
  EXPECT_TRUE(all_close(values(p.a.grad()), {3 * scale, -4 * scale}));
  EXPECT_TRUE(all_close(values(p.b.grad()), {12 * scale}));
  EXPECT_FALSE(p.frozen.grad().defined());
}

TEST_F(Optim, ClipGradNormLeavesGradientsBelowTheLimit) {
  const Clipped p;
  const Tensor total = optim::clip_grad_norm_(p.params(), 20);
  EXPECT_NEAR(total.item(), 13, 1e-12);
  EXPECT_EQ(values(p.a.grad()), (std::vector<double>{3, -4}));
  EXPECT_EQ(values(p.b.grad()), (std::vector<double>{12}));
}

TEST_F(Optim, ClipGradNormTakesOtherNorms) {
  const Clipped inf;
  EXPECT_NEAR(
      optim::clip_grad_norm_(inf.params(), 6, std::numeric_limits<double>::infinity()).item(), 12,
      1e-12);
  EXPECT_TRUE(all_close(values(inf.b.grad()), {12 * 6 / (12 + 1e-6)}));
  const Clipped one;
  EXPECT_NEAR(optim::clip_grad_norm_(one.params(), 1.9, 1).item(), 19, 1e-12);
  EXPECT_TRUE(all_close(values(one.a.grad()), {3 * 1.9 / (19 + 1e-6), -4 * 1.9 / (19 + 1e-6)}));
}

TEST_F(Optim, ClipGradNormReadsNothingBack) {
  const Clipped p;
  wait_device_ops();
  const int64_t reads = samples("TransferFromDeviceTime");
  const Tensor total = optim::clip_grad_norm_(p.params(), 1);
  mark_step();
  wait_device_ops();
  EXPECT_EQ(samples("TransferFromDeviceTime"), reads);
  EXPECT_NEAR(total.item(), 13, 1e-12);
}

}  // namespace
}  // namespace axle::testing
