// Tests graph/optim/lr_scheduler.h: each scheduler's rates, epoch by epoch, against its closed
// form (torch.optim.lr_scheduler documents both; the schedulers compute torch's recursive form),
// per parameter group, and their argument checks.
#include "axle/graph/optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numbers>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/graph/optim/optim_test_util.h"

namespace axle::testing {
namespace {

// Steps `scheduler` through `epochs` epochs, checking every group's rate (and get_last_lr) against
// `expected(group, epoch)` within a relative 1e-13.
template <class Expected>
void expect_rates(optim::LRScheduler& scheduler, const optim::Optimizer& opt, int epochs,
                  Expected expected) {
  for (int e = 0; e < epochs; ++e) {
    if (e > 0) scheduler.step();
    ASSERT_EQ(scheduler.last_epoch(), e);
    for (std::size_t g = 0; g < opt.param_groups().size(); ++g) {
      const double want = expected(g, e);
      EXPECT_NEAR(opt.param_groups()[g].lr, want, 1e-13 * std::abs(want) + 1e-300)
          << "group " << g << " epoch " << e;
      EXPECT_EQ(scheduler.get_last_lr()[g], opt.param_groups()[g].lr);
    }
  }
}

// Two groups with rates 0.1 and 0.04.
struct TwoGroups {
  Problem problem;
  std::vector<Tensor> params = problem.make_params();
  optim::SGD sgd{{{.params = {params[0]}}, {.params = {params[1], params[2]}, .lr = 0.04}},
                 {.lr = 0.1}};
  double base(std::size_t g) const { return g == 0 ? 0.1 : 0.04; }
};

TEST_F(Optim, StepLRDecaysEveryStepSizeEpochs) {
  TwoGroups t;
  optim::StepLR scheduler(t.sgd, 3, 0.5);
  expect_rates(scheduler, t.sgd, 12,
               [&](std::size_t g, int e) { return t.base(g) * std::pow(0.5, e / 3); });
}

TEST_F(Optim, LinearLRWarmsUpThenHolds) {
  TwoGroups t;
  optim::LinearLR scheduler(t.sgd, 0.25, 1.0, 4);
  expect_rates(scheduler, t.sgd, 9, [&](std::size_t g, int e) {
    const double progress = std::min(e, 4) / 4.0;
    return t.base(g) * (0.25 + 0.75 * progress);
  });
}

TEST_F(Optim, CosineAnnealingLRFollowsTheCosineDownAndBackUp) {
  TwoGroups t;
  constexpr int kTMax = 7;
  constexpr double kEtaMin = 0.001;
  optim::CosineAnnealingLR scheduler(t.sgd, kTMax, kEtaMin);
  expect_rates(scheduler, t.sgd, 3 * kTMax, [&](std::size_t g, int e) {
    return kEtaMin + (t.base(g) - kEtaMin) * (1 + std::cos(std::numbers::pi * e / kTMax)) / 2;
  });
}

TEST_F(Optim, LambdaLRScalesTheInitialRateByTheFunctionOfTheEpoch) {
  TwoGroups t;
  // The GPT sample's schedule: linear warm-up, then a cosine to a tenth.
  auto warmup_cosine = [](int64_t e) {
    if (e < 5) return (e + 1) / 5.0;
    const double progress = std::min(1.0, (e - 5) / 10.0);
    return 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * progress));
  };
  optim::LambdaLR scheduler(t.sgd, warmup_cosine);
  expect_rates(scheduler, t.sgd, 20,
               [&](std::size_t g, int e) { return t.base(g) * warmup_cosine(e); });
}

TEST_F(Optim, LambdaLRTakesOneFunctionPerGroup) {
  TwoGroups t;
  optim::LambdaLR scheduler(
      t.sgd, {[](int64_t e) { return 1.0 / (e + 1); }, [](int64_t e) { return 0.9 + 0.01 * e; }});
  expect_rates(scheduler, t.sgd, 6, [&](std::size_t g, int e) {
    return t.base(g) * (g == 0 ? 1.0 / (e + 1) : 0.9 + 0.01 * e);
  });
  const std::vector<std::function<double(int64_t)>> one_for_two_groups{[](int64_t) { return 1.0; }};
  EXPECT_THROW(optim::LambdaLR(t.sgd, one_for_two_groups), std::invalid_argument);
}

TEST_F(Optim, ASecondSchedulerStartsFromTheInitialLrOfTheFirst) {
  TwoGroups t;
  optim::StepLR first(t.sgd, 1, 0.5);
  first.step();  // rates now half the initial ones
  optim::LambdaLR second(t.sgd, [](int64_t) { return 1.0; });
  EXPECT_EQ(second.base_lrs(), (std::vector<double>{0.1, 0.04}));
  EXPECT_EQ(t.sgd.param_groups()[0].lr, 0.1);
}

TEST_F(Optim, SchedulersRejectBadArgumentsNamingThem) {
  TwoGroups t;
  auto message = [](auto make) {
    try {
      make();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { optim::StepLR(t.sgd, 0); }).find("step_size must be positive, not 0"),
            std::string::npos);
  EXPECT_NE(message([&] { optim::LinearLR(t.sgd, 0.0); }).find("start_factor"), std::string::npos);
  EXPECT_NE(message([&] { optim::LinearLR(t.sgd, 0.5, 1.5); }).find("end_factor"),
            std::string::npos);
  EXPECT_NE(message([&] { optim::CosineAnnealingLR(t.sgd, -2); }).find("T_max must be positive"),
            std::string::npos);
}

}  // namespace
}  // namespace axle::testing
