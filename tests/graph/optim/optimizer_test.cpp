// Tests graph/optim/optimizer.h: zero_grad, state_dict round trips that continue a run exactly
// (and the errors for states that do not fit), and clip_grad_norm_ with each norm.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "tests/graph/optim/optim_test_util.h"

namespace axle::testing {
namespace {

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
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kFloat64)},
                   {"state.5.momentum_buffer", zeros({3}, DType::kFloat64)},
                   {"step", scalar_tensor(9, DType::kInt64)}},
                  "\"state.5.momentum_buffer\"");
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kFloat64)},
                   {"state.1.exp_avg", zeros({3}, DType::kFloat64)},
                   {"step", scalar_tensor(9, DType::kInt64)}},
                  "\"state.1.exp_avg\"");
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kFloat64)},
                   {"state.1.momentum_buffer", zeros({2}, DType::kFloat64)},
                   {"step", scalar_tensor(9, DType::kInt64)}},
                  "\"state.1.momentum_buffer\"");
  expect_rejected({{"state.0.momentum_buffer", zeros({2, 3}, DType::kFloat64)}}, "\"step\"");
}

// ---- clip_grad_norm_ ------------------------------------------------------------------------

TEST_F(Optim, ClipGradNormScalesGradientsAboveTheLimit) {
  const Clipped p;
  const Tensor total = nn::utils::clip_grad_norm_(p.params(), 6.5);
  sync_step();
  EXPECT_NEAR(total.item(), 13, 1e-12);
  const double scale = 6.5 / (13 + 1e-6);
  EXPECT_TRUE(all_close(values(p.a.grad()), {3 * scale, -4 * scale}));
  EXPECT_TRUE(all_close(values(p.b.grad()), {12 * scale}));
  EXPECT_FALSE(p.frozen.grad().defined());
}

TEST_F(Optim, ClipGradNormLeavesGradientsBelowTheLimit) {
  const Clipped p;
  const Tensor total = nn::utils::clip_grad_norm_(p.params(), 20);
  EXPECT_NEAR(total.item(), 13, 1e-12);
  EXPECT_EQ(values(p.a.grad()), (std::vector<double>{3, -4}));
  EXPECT_EQ(values(p.b.grad()), (std::vector<double>{12}));
}

TEST_F(Optim, ClipGradNormTakesOtherNorms) {
  const Clipped inf;
  EXPECT_NEAR(
      nn::utils::clip_grad_norm_(inf.params(), 6, std::numeric_limits<double>::infinity()).item(),
      12, 1e-12);
  EXPECT_TRUE(all_close(values(inf.b.grad()), {12 * 6 / (12 + 1e-6)}));
  const Clipped one;
  EXPECT_NEAR(nn::utils::clip_grad_norm_(one.params(), 1.9, 1).item(), 19, 1e-12);
  EXPECT_TRUE(all_close(values(one.a.grad()), {3 * 1.9 / (19 + 1e-6), -4 * 1.9 / (19 + 1e-6)}));
}

}  // namespace
}  // namespace axle::testing
