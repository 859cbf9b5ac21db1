// Tests optimizer parameter groups (graph/optim/optimizer.h): each group steps with its own lr and
// weight decay, as torch.optim with a list of dicts, against the double references of
// torch.optim's rules run per group; a group's lr may change between steps; a parameter in two
// groups is an error.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "tests/graph/optim/optim_test_util.h"

namespace axle::testing {
namespace {

// Runs `steps` steps with parameter 0 in group 0 and the others in group 1, against `ref0` and
// `ref1` for the two groups' parameters.
void expect_groups_match(optim::Optimizer& opt, const std::vector<Tensor>& params,
                         const Problem& problem, const RefStep& ref0, const RefStep& ref1,
                         int steps) {
  std::vector<std::vector<double>> p = problem.start;
  for (int s = 0; s < steps; ++s) {
    train_step(opt, problem, params);
    for (std::size_t k = 0; k < p.size(); ++k) {
      (k == 0 ? ref0 : ref1)(k, p[k], problem.grad(k, p[k]));
      EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
          << "parameter " << k << " after step " << s + 1;
    }
  }
}

TEST_F(Optim, SgdGroupsStepWithTheirOwnLrAndWeightDecay) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  const optim::SgdOptions defaults{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.1};
  optim::SGD sgd(
      {{.params = {params[0]}, .lr = 0.2, .weight_decay = 0.0}, {.params = {params[1], params[2]}}},
      defaults);
  ASSERT_EQ(sgd.param_groups().size(), 2u);
  EXPECT_EQ(sgd.param_groups()[0].lr, 0.2);
  EXPECT_EQ(sgd.param_groups()[1].lr, 0.05);
  EXPECT_EQ(sgd.param_groups()[1].weight_decay, 0.1);
  SgdRef ref0{{.lr = 0.2, .momentum = 0.9, .weight_decay = 0.0}};
  SgdRef ref1{defaults};
  expect_groups_match(
      sgd, params, problem,
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref0.step(k, p, g); },
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref1.step(k, p, g); }, 4);
}

TEST_F(Optim, AdamWGroupsDecayOnlyWhereTheirWeightDecaySaysSo) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::AdamW adamw({{.params = {params[0]}},
                      {.params = {params[1], params[2]}, .lr = 0.02, .weight_decay = 0.0}},
                     {.lr = 0.1, .weight_decay = 0.3});
  AdamRef ref0{{.lr = 0.1, .weight_decay = 0.3}, true};
  AdamRef ref1{{.lr = 0.02, .weight_decay = 0.0}, true};
  expect_groups_match(
      adamw, params, problem,
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref0.step(k, p, g); },
      [&](std::size_t k, std::vector<double>& p, std::vector<double> g) { ref1.step(k, p, g); }, 4);
}

TEST_F(Optim, AGroupsLrSetBetweenStepsTakesEffect) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  optim::SGD sgd({{.params = {params[0]}}, {.params = {params[1], params[2]}}}, {.lr = 0.1});
  SgdRef ref0{{.lr = 0.1}};
  SgdRef ref1{{.lr = 0.1}};
  std::vector<std::vector<double>> p = problem.start;
  for (int s = 0; s < 4; ++s) {
    // Group 1's rate reaches 0 and 1 on the way: those too are values, not program constants.
    const double lr = s == 1 ? 0.0 : s == 2 ? 1.0 : 0.03 * s;
    sgd.param_groups()[1].lr = lr;
    ref1.o.lr = lr;
    train_step(sgd, problem, params);
    for (std::size_t k = 0; k < p.size(); ++k) {
      (k == 0 ? ref0 : ref1).step(k, p[k], problem.grad(k, p[k]));
      EXPECT_TRUE(all_close(values(params[k]), p[k], 1e-12, 1e-10))
          << "parameter " << k << " after step " << s + 1;
    }
  }
}

TEST_F(Optim, AParameterInTwoGroupsIsAnError) {
  const Problem problem;
  const std::vector<Tensor> params = problem.make_params();
  try {
    optim::SGD sgd({{.params = {params[0], params[1]}}, {.params = {params[1]}}}, {.lr = 0.1});
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("parameter 2 of group 1 is also parameter 1 (group 0)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(optim::SGD(std::vector<optim::ParamGroup>{}, {.lr = 0.1}), std::invalid_argument);
}

}  // namespace
}  // namespace axle::testing
