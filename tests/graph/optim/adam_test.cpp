// Tests graph/optim/adam.cpp: Adam and AdamW step for step against double-precision references
// of torch.optim's update rules (the algorithm boxes of the PyTorch documentation): weight decay
// added to the gradient or decoupled, AdamW's default decay, and step counts per parameter.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "tests/graph/optim/optim_test_util.h"

namespace axle::testing {
namespace {

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

}  // namespace
}  // namespace axle::testing
