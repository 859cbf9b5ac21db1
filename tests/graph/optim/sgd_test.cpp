// Tests graph/optim/sgd.cpp: SGD (momentum, dampening, Nesterov, weight decay) step for step
// against a double-precision reference of torch.optim.SGD's update rule (the algorithm box of the
// PyTorch documentation), its option checks, and a parameter that has no gradient in some steps.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/graph/optim/optim_test_util.h"

namespace axle::testing {
namespace {

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

}  // namespace
}  // namespace axle::testing
