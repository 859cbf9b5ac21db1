// graph/optim's steps as the lazy system runs them: a learning rate that changes every step
// compiles no new program, and neither a step nor clip_grad_norm_ reads anything back to the
// host. The update rules themselves are tested in tests/graph/optim/.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "axle/axle.h"
#include "tests/graph/optim/optim_test_util.h"

namespace axle::testing {
namespace {

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

TEST_F(Optim, AScheduleDownToZeroDoesNotRecompile) {
  for (const bool adam : {false, true}) {
    const Problem problem;
    const std::vector<Tensor> params = problem.make_params();
    std::unique_ptr<optim::Optimizer> opt;
    if (adam) {
      opt = std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup>{{.params = {params[0]}},
                                         {.params = {params[1], params[2]}, .weight_decay = 0.0}},
          optim::AdamWOptions{.lr = 0.1, .weight_decay = 0.2});
    } else {
      opt = std::make_unique<optim::SGD>(params, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
    }
    // The rate reaches exactly 0 at epoch 4 and climbs back: still the same program.
    optim::CosineAnnealingLR schedule(*opt, 4);
    int64_t warm = 0;
    for (int s = 0; s < 8; ++s) {
      if (s == 2) {
        wait_device_ops();
        warm = compiles();
      }
      train_step(*opt, problem, params);
      schedule.step();
    }
    wait_device_ops();
    EXPECT_EQ(schedule.last_epoch(), 8);
    EXPECT_GT(warm, 0);
    EXPECT_EQ(compiles(), warm) << (adam ? "AdamW" : "SGD");
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
    (void)nn::utils::clip_grad_norm_(params, 0.5);
    adam.step();
    mark_step();
  });
}

TEST_F(Optim, ClipGradNormReadsNothingBack) {
  const Clipped p;
  wait_device_ops();
  const int64_t reads = samples("TransferFromDeviceTime");
  const Tensor total = nn::utils::clip_grad_norm_(p.params(), 1);
  mark_step();
  wait_device_ops();
  EXPECT_EQ(samples("TransferFromDeviceTime"), reads);
  EXPECT_NEAR(total.item(), 13, 1e-12);
}

}  // namespace
}  // namespace axle::testing
