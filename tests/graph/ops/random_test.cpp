// Tests graph/ops/random.cpp by value: rand, randn, randint and bernoulli draw from the right
// distributions (moments over 100k samples, with fixed seeds so nothing flakes), the same seed
// gives the same values, and consecutive draws differ.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

// ---- Random ops ------------------------------------------------------------------------------

struct Moments {
  double mean, std;
};
Moments moments_of(const std::vector<double>& v) {
  const double m = mean_of(v);
  double sq = 0;
  for (double x : v) sq += (x - m) * (x - m);
  return {m, std::sqrt(sq / static_cast<double>(v.size()))};
}

// Bounds below are 4-7 standard errors of the statistic over 100k samples; the seeds are fixed,
// so the tests cannot flake, and a biased generator misses them.
constexpr int64_t kSamples = 100000;

TEST_F(OpsValue, RandIsUniformOnZeroOne) {
  set_rng_state(1234);
  const Tensor r = rand({kSamples});
  EXPECT_EQ(r.dtype(), DType::kF32);
  const std::vector<double> v = r.to_vector<double>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), kSamples);
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
  const Moments m = moments_of(v);
  EXPECT_NEAR(m.mean, 0.5, 0.005);
  EXPECT_NEAR(m.std, 1 / std::sqrt(12.0), 0.003);
}

TEST_F(OpsValue, RandnIsStandardNormal) {
  for (DType dtype : {DType::kF32, DType::kF64}) {
    set_rng_state(4321);
    const std::vector<double> v = randn({kSamples}, dtype).to_vector<double>();
    const Moments m = moments_of(v);
    EXPECT_NEAR(m.mean, 0.0, 0.015) << dtype_name(dtype);
    EXPECT_NEAR(m.std, 1.0, 0.01) << dtype_name(dtype);
    const auto within_one =
        std::count_if(v.begin(), v.end(), [](double x) { return std::abs(x) < 1; });
    EXPECT_NEAR(static_cast<double>(within_one) / kSamples, 0.6827, 0.006) << dtype_name(dtype);
  }
}

TEST_F(OpsValue, SameSeedGivesSameValues) {
  set_rng_state(7);
  EXPECT_EQ(get_rng_state(), 7u);
  const std::vector<double> first = randn({1000}).to_vector<double>();
  set_rng_state(7);
  const std::vector<double> again = randn({1000}).to_vector<double>();
  set_rng_state(8);
  const std::vector<double> other = randn({1000}).to_vector<double>();
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST_F(OpsValue, ConsecutiveDrawsDiffer) {
  set_rng_state(9);
  const Tensor a = rand({100});
  const Tensor b = rand({100});
  EXPECT_NE(a.to_vector<double>(), b.to_vector<double>());
}

TEST_F(OpsValue, RandintStaysInRangeAndCoversIt) {
  set_rng_state(99);
  for (DType dtype : {DType::kI64, DType::kI32}) {
    const Tensor r = randint(-3, 4, {10000}, dtype);
    EXPECT_EQ(r.dtype(), dtype);
    std::vector<int64_t> hits(7, 0);
    for (double v : r.to_vector<double>()) {
      ASSERT_TRUE(v >= -3 && v < 4 && v == std::trunc(v)) << v;
      ++hits[static_cast<std::size_t>(v + 3)];
    }
    for (int64_t h : hits)
      EXPECT_NEAR(static_cast<double>(h), 10000.0 / 7, 200) << dtype_name(dtype);
  }
}

TEST_F(OpsValue, BernoulliMeanMatchesP) {
  set_rng_state(5);
  const std::vector<double> v = bernoulli({kSamples}, 0.3).to_vector<double>();
  EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }));
  EXPECT_NEAR(mean_of(v), 0.3, 0.0075);
}

TEST_F(OpsValue, BernoulliOfATensorFollowsEachElementsP) {
  set_rng_state(6);
  Ref p{{kSamples}, {}};
  for (int64_t i = 0; i < kSamples; ++i)
    p.values.push_back(i % 4 == 0 ? 0.0 : i % 4 == 1 ? 1.0 : i % 4 == 2 ? 0.2 : 0.8);
  const std::vector<double> v = bernoulli(on_device(p)).to_vector<double>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), kSamples);
  std::vector<std::vector<double>> by_p(4);
  for (int64_t i = 0; i < kSamples; ++i) by_p[i % 4].push_back(v[i]);
  EXPECT_EQ(mean_of(by_p[0]), 0.0);
  EXPECT_EQ(mean_of(by_p[1]), 1.0);
  EXPECT_NEAR(mean_of(by_p[2]), 0.2, 0.012);  // 25k samples each: 4-5 standard errors
  EXPECT_NEAR(mean_of(by_p[3]), 0.8, 0.012);
}

}  // namespace
}  // namespace axle::testing
