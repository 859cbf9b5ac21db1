// Tests graph/ops/reduce.cpp by value: sum, mean, amax, amin, logsumexp, argmax, var and std over
// each set of dims, softmax and log_softmax, executed on each runtime (tests/graph/test_runtime.h)
// and compared with plain double-precision loops. Inputs come from std::mt19937 with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

double logsumexp_of(const std::vector<double>& v) {
  const double m = max_of(v);
  double s = 0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}
double first_argmax_of(const std::vector<double>& v) {
  return static_cast<double>(std::max_element(v.begin(), v.end()) - v.begin());
}

// ---- Reductions ------------------------------------------------------------------------------

struct ReduceCase {
  std::string name;
  std::function<Tensor(const Tensor&, const Dims&, bool)> op;
  double (*ref)(const std::vector<double>&);
};

std::vector<ReduceCase> reduce_cases() {
  return {
      {"sum", [](const Tensor& x, const Dims& d, bool k) { return sum(x, d, k); }, sum_of},
      {"mean", [](const Tensor& x, const Dims& d, bool k) { return mean(x, d, k); }, mean_of},
      {"amax", [](const Tensor& x, const Dims& d, bool k) { return amax(x, d, k); }, max_of},
      {"amin", [](const Tensor& x, const Dims& d, bool k) { return amin(x, d, k); }, min_of},
      {"logsumexp", [](const Tensor& x, const Dims& d, bool k) { return logsumexp(x, d, k); },
       logsumexp_of},
  };
}

void PrintTo(const ReduceCase& c, std::ostream* os) { *os << c.name; }

class ReduceOpValue : public ::testing::TestWithParam<ReduceCase> {
 protected:
  void SetUp() override { fresh_system(); }
  ::testing::AssertionResult check(const Ref& x, const Dims& dims, bool keepdim, DType dtype,
                                   Tolerance tol) {
    const ReduceCase& c = GetParam();
    return matches(c.op(on_device(x, dtype), dims, keepdim), dtype,
                   reduce_ref(x, dims, keepdim, c.ref), tol);
  }
};

TEST_P(ReduceOpValue, MatchesReferenceOverEachDimSet) {
  std::mt19937 rng(61);
  const Ref x = random_ref(rng, {3, 4, 5}, -3, 3);
  for (const Dims& dims :
       {Dims{}, Dims{0}, Dims{1}, Dims{-1}, Dims{0, 2}, Dims{2, 0}, Dims{1, 2}, Dims{0, 1, 2}}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(check(x, dims, keepdim, DType::kFloat32, kTolF32))
          << "dims of size " << dims.size() << (dims.empty() ? "" : " starting ")
          << (dims.empty() ? 0 : dims[0]) << ", keepdim " << keepdim;
    }
  }
}

// Long rows and columns, past the kernels' fixed-size accumulator blocks.
TEST_P(ReduceOpValue, MatchesReferenceOnLargeShapes) {
  std::mt19937 rng(60);
  const Ref x = random_ref(rng, {9, 130, 17}, -3, 3);
  for (const Dims& dims : {Dims{}, Dims{0}, Dims{1}, Dims{2}, Dims{0, 2}}) {
    EXPECT_TRUE(check(x, dims, false, DType::kFloat32, kTolF32)) << "dims of size " << dims.size();
  }
}

TEST_P(ReduceOpValue, MatchesReferenceInF64) {
  std::mt19937 rng(62);
  const Ref x = random_ref(rng, random_dims(rng, 4), -3, 3, DType::kFloat64);
  EXPECT_TRUE(check(x, {1, 3}, true, DType::kFloat64, kTolF64));
  EXPECT_TRUE(check(x, {-2}, false, DType::kFloat64, kTolF64));
}

TEST_P(ReduceOpValue, ReducesAZeroDimTensorToItself) {
  EXPECT_TRUE(check(Ref{{}, {1.75}}, {}, false, DType::kFloat32, kTolF32));
  EXPECT_TRUE(check(Ref{{}, {-0.5}}, {0}, true, DType::kFloat32, kTolF32));
}

INSTANTIATE_TEST_SUITE_P(Ops, ReduceOpValue, ::testing::ValuesIn(reduce_cases()),
                         [](const auto& info) { return info.param.name; });

TEST_F(OpsValue, SumOfIntegersWidensToInt64) {
  std::mt19937 rng(63);
  const Ref n = random_ints(rng, {4, 5}, -1000, 1000);
  EXPECT_TRUE(matches(sum(on_device(n, DType::kInt32), {1}), DType::kInt64,
                      reduce_ref(n, {1}, false, sum_of), kExact));
}

TEST_F(OpsValue, SumOverAnEmptyDimIsZero) {
  EXPECT_TRUE(matches(sum(zeros({3, 0}), {1}), DType::kFloat32, constant_ref({3}, 0), kExact));
  EXPECT_TRUE(matches(sum(on_device(Ref{{0, 2}, {}})), DType::kFloat32, Ref{{}, {0}}, kExact));
}

TEST_F(OpsValue, ArgmaxAlongADimReturnsTheFirstMaximum) {
  std::mt19937 rng(64);
  const Ref x = random_ints(rng, {4, 5, 6}, 0, 3);  // many ties
  for (int64_t dim : {0, 1, -1}) {
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(matches(argmax(on_device(x), dim, keepdim), DType::kInt64,
                          reduce_ref(x, {dim}, keepdim, first_argmax_of), kExact))
          << "dim " << dim << ", keepdim " << keepdim;
    }
  }
}

TEST_F(OpsValue, ArgmaxWithoutADimIndexesTheFlattenedTensor) {
  std::mt19937 rng(65);
  const Ref x = random_ints(rng, {3, 4, 2}, 0, 2);  // the maximum appears more than once
  const double want = first_argmax_of(x.values);
  EXPECT_TRUE(matches(argmax(on_device(x)), DType::kInt64, Ref{{}, {want}}, kExact));
  EXPECT_TRUE(matches(argmax(on_device(x), std::nullopt, true), DType::kInt64,
                      Ref{{1, 1, 1}, {want}}, kExact));
}

TEST_F(OpsValue, SoftmaxMatchesReferenceAlongEachDim) {
  std::mt19937 rng(66);
  const Ref x = random_ref(rng, {3, 4, 5}, -4, 4);
  for (int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(
        matches(softmax(on_device(x), dim), DType::kFloat32, softmax_ref(x, dim, false), kTolF32))
        << "dim " << dim;
  }
}

TEST_F(OpsValue, LogSoftmaxMatchesReferenceAlongEachDim) {
  std::mt19937 rng(67);
  const Ref x = random_ref(rng, {3, 4, 5}, -4, 4);
  for (int64_t dim : {0, 1, -1}) {
    EXPECT_TRUE(matches(log_softmax(on_device(x), dim), DType::kFloat32, softmax_ref(x, dim, true),
                        kTolF32))
        << "dim " << dim;
  }
}

TEST_F(OpsValue, SoftmaxAndLogSoftmaxOnLongRowsAndColumns) {
  std::mt19937 rng(69);
  const Ref rows = random_ref(rng, {5, 1000}, -6, 6);
  EXPECT_TRUE(
      matches(softmax(on_device(rows), -1), DType::kFloat32, softmax_ref(rows, 1, false), kTolF32));
  const Ref cols = random_ref(rng, {300, 7}, -6, 6);
  EXPECT_TRUE(matches(log_softmax(on_device(cols), 0), DType::kFloat32, softmax_ref(cols, 0, true),
                      kTolF32));
}

// ---- var and std ----------------------------------------------------------------------------

// The variance of `v` about its mean, divided by n - correction (as torch, clamped at 0).
double variance_of(const std::vector<double>& v, double correction) {
  const double m = mean_of(v);
  double squares = 0;
  for (double x : v) squares += (x - m) * (x - m);
  return squares / std::max(static_cast<double>(v.size()) - correction, 0.0);
}

TEST_F(OpsValue, VarAndStdOverEachDimSet) {
  std::mt19937 rng(70);
  const Ref x = random_ref(rng, {3, 4, 5}, -3, 3);
  const Tensor t = on_device(x);
  for (const Dims& dims : {Dims{}, Dims{0}, Dims{-1}, Dims{0, 2}, Dims{1, 2}}) {
    for (bool unbiased : {true, false}) {
      for (bool keepdim : {false, true}) {
        const double c = unbiased ? 1 : 0;
        auto var_ref = [c](const std::vector<double>& v) { return variance_of(v, c); };
        auto std_ref = [c](const std::vector<double>& v) { return std::sqrt(variance_of(v, c)); };
        EXPECT_TRUE(matches(var(t, dims, unbiased, keepdim), DType::kFloat32,
                            reduce_ref(x, dims, keepdim, var_ref), kTolF32))
            << dims.size() << " dims, unbiased " << unbiased << ", keepdim " << keepdim;
        EXPECT_TRUE(matches(std(t, dims, unbiased, keepdim), DType::kFloat32,
                            reduce_ref(x, dims, keepdim, std_ref), kTolF32))
            << dims.size() << " dims, unbiased " << unbiased << ", keepdim " << keepdim;
      }
    }
  }
}

TEST_F(OpsValue, VarAndStdWithACorrection) {
  std::mt19937 rng(72);
  const Ref x = random_ref(rng, {4, 6}, -3, 3, DType::kFloat64);
  const Tensor t = on_device(x, DType::kFloat64);
  for (double c : {0.0, 1.0, 2.0, 0.5, -1.0}) {
    auto var_ref = [c](const std::vector<double>& v) { return variance_of(v, c); };
    auto std_ref = [c](const std::vector<double>& v) { return std::sqrt(variance_of(v, c)); };
    EXPECT_TRUE(matches(var(t, {1}, {.correction = c}), DType::kFloat64,
                        reduce_ref(x, {1}, false, var_ref), kTolF64))
        << "correction " << c;
    EXPECT_TRUE(matches(std(t, {0}, {.correction = c, .keepdim = true}), DType::kFloat64,
                        reduce_ref(x, {0}, true, std_ref), kTolF64))
        << "correction " << c;
  }
  // n - correction <= 0 divides by 0, as torch clamps it.
  const std::vector<double> over = var(t, {1}, {.correction = 6}).to_vector<double>();
  for (double v : over) EXPECT_TRUE(std::isinf(v)) << v;
}

// A mean of 1e4 next to a spread of 1: E[x^2] - E[x]^2 would cancel to garbage in f32.
TEST_F(OpsValue, VarIsAccurateForALargeMean) {
  std::mt19937 rng(71);
  const Ref x = random_ref(rng, {4, 500}, 1e4 - 1, 1e4 + 1);
  auto var_ref = [](const std::vector<double>& v) { return variance_of(v, 1); };
  EXPECT_TRUE(matches(var(on_device(x), {1}), DType::kFloat32, reduce_ref(x, {1}, false, var_ref),
                      {1e-5, 0}));
  const Ref x64 = random_ref(rng, {300}, 1e6, 1e6 + 1, DType::kFloat64);
  EXPECT_TRUE(matches(var(on_device(x64, DType::kFloat64)), DType::kFloat64,
                      reduce_ref(x64, {}, false, var_ref), {1e-9, 0}));
}

// A spread of a few f32 steps around 1e5: the f32 mean is off by up to half a step of the sum,
// which the deviations' squares would count as spread. torch's f32 var is within 1e-7 of the
// exact one here; axle's must be as close.
TEST_F(OpsValue, VarIsAsCloseAsTorchsWhenTheSpreadIsTinyAgainstTheMean) {
  std::mt19937 rng(73);
  const Ref x = random_ref(rng, {3, 4, 2000}, 1e5 - 0.05, 1e5 + 0.05);
  const Tensor t = on_device(x);
  for (const Dims& dims : {Dims{1}, Dims{2}, Dims{0, 2}, Dims{}}) {
    auto var_ref = [](const std::vector<double>& v) { return variance_of(v, 0); };
    auto std_ref = [](const std::vector<double>& v) { return std::sqrt(variance_of(v, 0)); };
    EXPECT_TRUE(matches(var(t, dims, false), DType::kFloat32, reduce_ref(x, dims, false, var_ref),
                        {1e-5, 0}))
        << dims.size() << " dims";
    EXPECT_TRUE(matches(std(t, dims, false), DType::kFloat32, reduce_ref(x, dims, false, std_ref),
                        {1e-5, 0}))
        << dims.size() << " dims";
  }
}

// Equal values far from 0: the variance is exactly 0, never a rounding below it (std's root
// of which would be NaN).
TEST_F(OpsValue, VarOfEqualValuesIsZero) {
  const Ref x = constant_ref({5, 777}, 1e5 + 0.3);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(var(t, {1}), DType::kFloat32, constant_ref({5}, 0), kExact));
  EXPECT_TRUE(matches(std(t, {1}), DType::kFloat32, constant_ref({5}, 0), kExact));
}

TEST_F(OpsValue, UnbiasedVarOfOneElementIsNaN) {
  const std::vector<double> got = var(on_device(Ref{{1, 3}, {1, 2, 3}}), {0}).to_vector<double>();
  ASSERT_EQ(got.size(), 3u);
  for (double v : got) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(matches(var(on_device(Ref{{1, 3}, {1, 2, 3}}), {0}, false), DType::kFloat32,
                      constant_ref({3}, 0), kExact));
}

// exp(90) overflows f32: a kernel that does not subtract the maximum first gives inf or NaN.
TEST_F(OpsValue, SoftmaxAndLogsumexpAreStableForLargeInputs) {
  std::mt19937 rng(68);
  const Ref x = random_ref(rng, {4, 6}, 80, 100);
  const Tensor t = on_device(x);
  EXPECT_TRUE(matches(softmax(t, 1), DType::kFloat32, softmax_ref(x, 1, false), kTolF32));
  EXPECT_TRUE(matches(log_softmax(t, 1), DType::kFloat32, softmax_ref(x, 1, true), kTolF32));
  EXPECT_TRUE(matches(logsumexp(t, {1}), DType::kFloat32, reduce_ref(x, {1}, false, logsumexp_of),
                      kTolF32));
}

}  // namespace
}  // namespace axle::testing
