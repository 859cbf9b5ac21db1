// graph/nn/loss.h end to end: nll_loss, cross_entropy (with and without label smoothing, with
// ignored targets, over [N, C, d1, ...] inputs) and mse_loss for every Reduction against
// double-precision references written here from torch's definitions, their gradients against finite
// differences, and the errors for inputs that do not fit.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "tests/graph/grad_check.h"
#include "tests/graph/nn_test_util.h"

namespace axle::testing {
namespace {

using Loss = NnTest;
using nn::Reduction;

constexpr int64_t kN = 5, kC = 4;

std::vector<double> log_softmax_rows(const std::vector<double>& x, int64_t n, int64_t c) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double top = -1e300, z = 0;
    for (int64_t k = 0; k < c; ++k) top = std::max(top, x[r * c + k]);
    for (int64_t k = 0; k < c; ++k) z += std::exp(x[r * c + k] - top);
    for (int64_t k = 0; k < c; ++k) out[r * c + k] = x[r * c + k] - top - std::log(z);
  }
  return out;
}

std::vector<double> reduced(const std::vector<double>& per_sample, Reduction reduction) {
  if (reduction == Reduction::kNone) return per_sample;
  double s = 0;
  for (double v : per_sample) s += v;
  return {reduction == Reduction::kSum ? s : s / static_cast<double>(per_sample.size())};
}

// torch's cross_entropy: (1 - ε) * nll + ε * mean over classes of -log p.
std::vector<double> cross_entropy_ref(const std::vector<double>& logits,
                                      const std::vector<int64_t>& target, double smoothing,
                                      Reduction reduction) {
  const std::vector<double> lp = log_softmax_rows(logits, kN, kC);
  std::vector<double> per_sample;
  for (int64_t r = 0; r < kN; ++r) {
    double uniform = 0;
    for (int64_t k = 0; k < kC; ++k) uniform -= lp[r * kC + k] / kC;
    per_sample.push_back((1 - smoothing) * -lp[r * kC + target[r]] + smoothing * uniform);
  }
  return reduced(per_sample, reduction);
}

struct Inputs {
  std::vector<double> scores;
  std::vector<int64_t> target{3, 0, 1, 3, 2};
};

Inputs inputs(unsigned seed) {
  std::mt19937 rng(seed);
  return {uniform_values(rng, kN * kC, -3, 3)};
}

Shape shape_of(Reduction reduction) { return reduction == Reduction::kNone ? Shape{kN} : Shape{}; }

const Reduction kReductions[] = {Reduction::kMean, Reduction::kSum, Reduction::kNone};

TEST_F(Loss, NllLossPicksTheTargetsLogProbabilityForEachReduction) {
  const Inputs in = inputs(1);
  const std::vector<double> lp = log_softmax_rows(in.scores, kN, kC);
  std::vector<double> per_sample;
  for (int64_t r = 0; r < kN; ++r) per_sample.push_back(-lp[r * kC + in.target[r]]);
  for (Reduction reduction : kReductions) {
    const Tensor loss = nn::nll_loss(f64_tensor(lp, {kN, kC}), tensor(in.target, {kN}), reduction);
    EXPECT_EQ(loss.shape(), shape_of(reduction));
    EXPECT_TRUE(all_close(values(loss), reduced(per_sample, reduction)));
  }
}

TEST_F(Loss, CrossEntropyIsLogSoftmaxThenNllForEachReduction) {
  const Inputs in = inputs(2);
  for (Reduction reduction : kReductions) {
    const Tensor loss =
        nn::cross_entropy(f64_tensor(in.scores, {kN, kC}), tensor(in.target, {kN}), 0, reduction);
    EXPECT_EQ(loss.shape(), shape_of(reduction));
    EXPECT_TRUE(all_close(values(loss), cross_entropy_ref(in.scores, in.target, 0, reduction)));
  }
}

TEST_F(Loss, CrossEntropyWithLabelSmoothingMixesInTheUniformDistribution) {
  const Inputs in = inputs(3);
  for (double smoothing : {0.1, 0.5, 1.0}) {
    for (Reduction reduction : kReductions) {
      const Tensor loss = nn::cross_entropy(f64_tensor(in.scores, {kN, kC}),
                                            tensor(in.target, {kN}), smoothing, reduction);
      EXPECT_TRUE(
          all_close(values(loss), cross_entropy_ref(in.scores, in.target, smoothing, reduction)))
          << smoothing;
    }
  }
}

TEST_F(Loss, CrossEntropyTakesS32TargetsAndF32Logits) {
  const Inputs in = inputs(4);
  const std::vector<int32_t> target(in.target.begin(), in.target.end());
  const Tensor loss = nn::cross_entropy(f32_tensor(in.scores, {kN, kC}), tensor(target, {kN}), 0.2);
  EXPECT_EQ(loss.dtype(), DType::kFloat32);
  EXPECT_NEAR(loss.item(),
              cross_entropy_ref(as_f32(in.scores), in.target, 0.2, Reduction::kMean)[0], 1e-5);
}

TEST_F(Loss, CrossEntropyStaysFiniteForLargeLogits) {
  const std::vector<double> logits{1000, -1000, 0,    500, 800, 0, 0, 0, 0, 0,
                                   0,    0,     -900, 900, 1,   2, 3, 4, 5, 6};
  const std::vector<int64_t> target{1, 3, 0, 0, 3};
  const Tensor loss =
      nn::cross_entropy(f64_tensor(logits, {kN, kC}), tensor(target, {kN}), 0.1, Reduction::kNone);
  EXPECT_TRUE(all_close(values(loss), cross_entropy_ref(logits, target, 0.1, Reduction::kNone),
                        1e-9, 1e-12));
}

TEST_F(Loss, MseLossAveragesSquaredErrorsForEachReduction) {
  std::mt19937 rng(5);
  const std::vector<double> input = uniform_values(rng, 6), target = uniform_values(rng, 6);
  std::vector<double> squared;
  for (int i = 0; i < 6; ++i) squared.push_back((input[i] - target[i]) * (input[i] - target[i]));
  for (Reduction reduction : kReductions) {
    const Tensor loss =
        nn::mse_loss(f64_tensor(input, {2, 3}), f64_tensor(target, {2, 3}), reduction);
    EXPECT_EQ(loss.shape(), (reduction == Reduction::kNone ? Shape{2, 3} : Shape{}));
    EXPECT_TRUE(all_close(values(loss), reduced(squared, reduction)));
  }
  // A target that broadcasts: one row against both.
  std::vector<double> broadcast;
  for (int i = 0; i < 6; ++i) broadcast.push_back(std::pow(input[i] - target[i % 3], 2));
  const Tensor loss =
      nn::mse_loss(f64_tensor(input, {2, 3}), f64_tensor({target[0], target[1], target[2]}, {3}));
  EXPECT_TRUE(all_close(values(loss), reduced(broadcast, Reduction::kMean)));
}

TEST_F(Loss, CrossEntropyGradientMatchesFiniteDifferences) {
  const Inputs in = inputs(6);
  const Tensor target = tensor(in.target, {kN});
  for (double smoothing : {0.0, 0.3}) {
    EXPECT_TRUE(gradients_match(
        [&](const std::vector<Tensor>& t) {
          return nn::cross_entropy(t[0], target, smoothing, Reduction::kNone);
        },
        {GradArg{{kN, kC}, in.scores}}))
        << smoothing;
  }
}

TEST_F(Loss, NllAndMseGradientsMatchFiniteDifferences) {
  const Inputs in = inputs(7);
  const Tensor target = tensor(in.target, {kN});
  EXPECT_TRUE(gradients_match(
      [&](const std::vector<Tensor>& t) { return nn::nll_loss(t[0], target, Reduction::kSum); },
      {GradArg{{kN, kC}, in.scores}}));
  std::mt19937 rng(8);
  EXPECT_TRUE(gradients_match([](const std::vector<Tensor>& t) { return nn::mse_loss(t[0], t[1]); },
                              {random_arg(rng, {2, 3}), random_arg(rng, {3})}));
}

// ---- ignore_index and [N, C, d1, ...] inputs -------------------------------------------------

// torch's cross_entropy of logits [n, c, spatial] (row-major, spatial flattened) and targets
// [n, spatial]: per position (1 - ε) * nll + ε * mean of -log p, 0 where the target is ignored;
// the mean divides by the positions not ignored.
std::vector<double> spatial_cross_entropy_ref(const std::vector<double>& logits,
                                              const std::vector<int64_t>& target, int64_t n,
                                              int64_t c, int64_t spatial, double smoothing,
                                              Reduction reduction, int64_t ignore_index) {
  std::vector<double> per_position;
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t s = 0; s < spatial; ++s) {
      const int64_t t = target[i * spatial + s];
      if (t == ignore_index) {
        per_position.push_back(0);
        continue;
      }
      ++kept;
      std::vector<double> row;
      for (int64_t k = 0; k < c; ++k) row.push_back(logits[(i * c + k) * spatial + s]);
      const std::vector<double> lp = log_softmax_rows(row, 1, c);
      double uniform = 0;
      for (int64_t k = 0; k < c; ++k) uniform -= lp[k] / static_cast<double>(c);
      per_position.push_back((1 - smoothing) * -lp[t] + smoothing * uniform);
    }
  }
  if (reduction != Reduction::kMean) return reduced(per_position, reduction);
  double total = 0;
  for (double v : per_position) total += v;
  return {total / kept};
}

TEST_F(Loss, CrossEntropyLeavesOutIgnoredTargets) {
  const Inputs in = inputs(9);
  const std::vector<int64_t> target = {3, -100, 1, -100, 2};
  for (Reduction reduction : kReductions) {
    for (double smoothing : {0.0, 0.2}) {
      const Tensor loss = nn::cross_entropy(f64_tensor(in.scores, {kN, kC}), tensor(target, {kN}),
                                            smoothing, reduction);
      EXPECT_TRUE(all_close(values(loss), spatial_cross_entropy_ref(in.scores, target, kN, kC, 1,
                                                                    smoothing, reduction, -100)))
          << "smoothing " << smoothing;
    }
  }
  // Any index may be the ignored one, a class included.
  const std::vector<int64_t> classes = {3, 0, 1, 3, 2};
  const Tensor loss = nn::cross_entropy(f64_tensor(in.scores, {kN, kC}), tensor(classes, {kN}), 0,
                                        Reduction::kMean, 3);
  EXPECT_TRUE(all_close(values(loss), spatial_cross_entropy_ref(in.scores, classes, kN, kC, 1, 0,
                                                                Reduction::kMean, 3)));
}

// A class whose logit is -inf has log-probability -inf; as in torch, it adds nothing to another
// target's loss (a product with a one-hot target would give -inf * 0 = NaN), and the gradient is
// softmax - one_hot, finite.
TEST_F(Loss, CrossEntropyWithAnotherClassAtMinusInfinityStaysFinite) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor logits = f64_tensor({0, -inf, 1, 2, 0, -inf}, {2, 3});
  logits.requires_grad_();
  const Tensor loss = nn::cross_entropy(logits, tensor(std::vector<int64_t>{0, 1}, {2}));
  loss.backward();
  const double e = std::exp(1.0), e2 = std::exp(2.0);
  const double want = (std::log(1 + e) + std::log(e2 + 1)) / 2;
  EXPECT_NEAR(loss.item(), want, 1e-12);
  const std::vector<double> grad = values(logits.grad());
  const std::vector<double> softmax_minus_target = {1 / (1 + e) - 1,  0, e / (1 + e), e2 / (e2 + 1),
                                                    1 / (e2 + 1) - 1, 0};
  ASSERT_EQ(grad.size(), softmax_minus_target.size());
  for (std::size_t i = 0; i < grad.size(); ++i) {
    EXPECT_NEAR(grad[i], softmax_minus_target[i] / 2, 1e-12) << i;
  }
}

TEST_F(Loss, MeanOverOnlyIgnoredTargetsIsNaN) {
  const Inputs in = inputs(10);
  const Tensor target = tensor(std::vector<int64_t>(kN, -100), {kN});
  EXPECT_TRUE(std::isnan(nn::cross_entropy(f64_tensor(in.scores, {kN, kC}), target).item()));
  EXPECT_TRUE(std::isnan(nn::nll_loss(f64_tensor(in.scores, {kN, kC}), target).item()));
  EXPECT_EQ(nn::cross_entropy(f64_tensor(in.scores, {kN, kC}), target, 0, Reduction::kSum).item(),
            0);
}

TEST_F(Loss, CrossEntropyOverSpatialDims) {
  std::mt19937 rng(11);
  constexpr int64_t n = 2, c = 3, h = 2, w = 4;
  const std::vector<double> logits = uniform_values(rng, n * c * h * w, -3, 3);
  std::uniform_int_distribution<int64_t> pick(0, c - 1);
  std::vector<int64_t> target;
  for (int64_t i = 0; i < n * h * w; ++i) target.push_back(i % 5 == 2 ? -100 : pick(rng));
  for (Reduction reduction : kReductions) {
    const Tensor loss = nn::cross_entropy(f64_tensor(logits, {n, c, h, w}),
                                          tensor(target, {n, h, w}), 0.1, reduction);
    EXPECT_EQ(loss.shape(), (reduction == Reduction::kNone ? Shape{n, h, w} : Shape{}));
    EXPECT_TRUE(all_close(values(loss), spatial_cross_entropy_ref(logits, target, n, c, h * w, 0.1,
                                                                  reduction, -100)));
  }
  // nll_loss of the log-probabilities gives the unsmoothed loss.
  const Tensor log_probs = log_softmax(f64_tensor(logits, {n, c, h, w}), 1);
  EXPECT_TRUE(
      all_close(values(nn::nll_loss(log_probs, tensor(target, {n, h, w}))),
                spatial_cross_entropy_ref(logits, target, n, c, h * w, 0, Reduction::kMean, -100)));
}

TEST_F(Loss, CrossEntropyGradientWithIgnoredTargetsOverSpatialDims) {
  std::mt19937 rng(12);
  const Tensor target = tensor(std::vector<int64_t>{0, -100, 2, 1, 1, -100}, {2, 3});
  EXPECT_TRUE(gradients_match(
      [&](const std::vector<Tensor>& t) { return nn::cross_entropy(t[0], target, 0.2); },
      {random_arg(rng, {2, 4, 3})}));
  EXPECT_TRUE(gradients_match(
      [&](const std::vector<Tensor>& t) { return nn::nll_loss(t[0], target, Reduction::kNone); },
      {random_arg(rng, {2, 4, 3})}));
}

// ---- errors ---------------------------------------------------------------------------------

// The message of the ShapeError `f` throws; checks that it names `op` and `line` of this file.
template <class F>
std::string shape_error(F&& f, const char* op, int line) {
  const std::string what = error_message<ShapeError>(f);
  EXPECT_TRUE(contains(what, std::string(op) + ":")) << what;
  EXPECT_TRUE(contains(what, at_line(__FILE__, line))) << what;
  return what;
}

TEST_F(Loss, NllLossRejectsInputsThatDoNotFitNamingTheCallersLine) {
  const Tensor scores = zeros({kN, kC}), target = zeros({kN}, DType::kInt64);
  auto flat = [&] { (void)nn::nll_loss(zeros({kC}), target); };
  EXPECT_TRUE(contains(shape_error(flat, "nll_loss", __LINE__ - 1), "f32[4]"));
  auto short_target = [&] { (void)nn::nll_loss(scores, zeros({3}, DType::kInt64)); };
  EXPECT_TRUE(contains(shape_error(short_target, "nll_loss", __LINE__ - 1), "s64[3]"));
  auto float_target = [&] { (void)nn::nll_loss(scores, zeros({kN})); };
  EXPECT_TRUE(contains(shape_error(float_target, "nll_loss", __LINE__ - 1), "class indices"));
  auto integer_scores = [&] { (void)nn::nll_loss(zeros({kN, kC}, DType::kInt64), target); };
  shape_error(integer_scores, "nll_loss", __LINE__ - 1);
}

TEST_F(Loss, CrossEntropyRejectsInputsThatDoNotFitNamingTheCallersLine) {
  const Tensor scores = zeros({kN, kC}), target = zeros({kN}, DType::kInt64);
  auto cube = [&] { (void)nn::cross_entropy(zeros({kN, kC, 2}), target); };
  EXPECT_TRUE(contains(shape_error(cube, "cross_entropy", __LINE__ - 1), "f32[5,4,2]"));
  auto matrix_target = [&] { (void)nn::cross_entropy(scores, zeros({kN, 1}, DType::kInt64)); };
  shape_error(matrix_target, "cross_entropy", __LINE__ - 1);
  auto bool_target = [&] { (void)nn::cross_entropy(scores, zeros({kN}, DType::kBool)); };
  shape_error(bool_target, "cross_entropy", __LINE__ - 1);
  auto smoothing = [&] { (void)nn::cross_entropy(scores, target, 1.5); };
  EXPECT_TRUE(contains(shape_error(smoothing, "cross_entropy", __LINE__ - 1), "1.5"));
  auto integer_scores = [&] { (void)nn::cross_entropy(zeros({kN, kC}, DType::kInt32), target); };
  shape_error(integer_scores, "cross_entropy", __LINE__ - 1);
  auto undefined = [&] { (void)nn::cross_entropy(Tensor(), target); };
  shape_error(undefined, "cross_entropy", __LINE__ - 1);
}

TEST_F(Loss, MseLossRejectsInputsThatDoNotFitNamingTheCallersLine) {
  auto mismatch = [&] { (void)nn::mse_loss(zeros({2, 3}), zeros({4})); };
  const std::string what = shape_error(mismatch, "mse_loss", __LINE__ - 1);
  EXPECT_TRUE(contains(what, "f32[2,3]")) << what;
  EXPECT_TRUE(contains(what, "f32[4]")) << what;
  auto integers = [&] { (void)nn::mse_loss(zeros({3}, DType::kInt64), zeros({3}, DType::kInt64)); };
  shape_error(integers, "mse_loss", __LINE__ - 1);
  auto undefined = [&] { (void)nn::mse_loss(zeros({3}), Tensor()); };
  shape_error(undefined, "mse_loss", __LINE__ - 1);
}

// The losses as modules (torch.nn.CrossEntropyLoss, NLLLoss, MSELoss): the functions' values
// under each module's options.
TEST_F(Loss, LossModulesComputeTheirFunctionWithTheirOptions) {
  const Inputs in = inputs(9);
  std::vector<int64_t> target = in.target;
  target[2] = -1;  // ignored below
  const Tensor scores = f64_tensor(in.scores, {kN, kC});
  const Tensor labels = tensor(target, {kN});
  for (Reduction reduction : kReductions) {
    const nn::CrossEntropyLoss criterion(
        {.ignore_index = -1, .reduction = reduction, .label_smoothing = 0.2});
    EXPECT_TRUE(all_close(values(criterion(scores, labels)),
                          values(nn::cross_entropy(scores, labels, 0.2, reduction, -1))));
    EXPECT_EQ(criterion.options().label_smoothing, 0.2);
    const nn::NLLLoss nll({.ignore_index = -1, .reduction = reduction});
    const Tensor log_probs = f64_tensor(log_softmax_rows(in.scores, kN, kC), {kN, kC});
    EXPECT_TRUE(all_close(values(nll.forward(log_probs, labels)),
                          values(nn::nll_loss(log_probs, labels, reduction, -1))));
    const nn::MSELoss mse({.reduction = reduction});
    EXPECT_TRUE(all_close(values(mse(scores, scores * 0.5)),
                          values(nn::mse_loss(scores, scores * 0.5, reduction))));
  }
  // Defaults as torch's: the mean, nothing ignored but -100, no smoothing.
  const nn::CrossEntropyLoss plain;
  const Tensor all = tensor(in.target, {kN});
  EXPECT_TRUE(all_close(values(plain(scores, all)),
                        cross_entropy_ref(in.scores, in.target, 0, Reduction::kMean)));
}

}  // namespace
}  // namespace axle::testing
