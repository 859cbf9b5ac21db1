// Tests graph/ops/random.cpp by value: rand, randn, randint, bernoulli and multinomial draw from
// the right distributions (moments over 100k samples, with fixed seeds so nothing flakes), the same
// seed gives the same values, and consecutive draws differ.
#include <gtest/gtest.h>

#include <algorithm>
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
  EXPECT_EQ(r.dtype(), DType::kFloat32);
  const std::vector<double> v = r.to_vector<double>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), kSamples);
  EXPECT_GE(*std::min_element(v.begin(), v.end()), 0.0);
  EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0);
  const Moments m = moments_of(v);
  EXPECT_NEAR(m.mean, 0.5, 0.005);
  EXPECT_NEAR(m.std, 1 / std::sqrt(12.0), 0.003);
}

TEST_F(OpsValue, RandnIsStandardNormal) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
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
  for (DType dtype : {DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8}) {
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

// As torch's: `low` and `high - 1` must be values of the dtype; u8's whole range is drawn.
TEST_F(OpsValue, RandintBoundsMustFitTheDtype) {
  set_rng_state(17);
  std::vector<int64_t> hits(256, 0);
  for (double v : randint(0, 256, {20000}, DType::kUInt8).to_vector<double>()) {
    ASSERT_TRUE(v >= 0 && v < 256 && v == std::trunc(v)) << v;
    ++hits[static_cast<std::size_t>(v)];
  }
  EXPECT_GT(hits[0], 0);
  EXPECT_GT(hits[255], 0);
  EXPECT_NO_THROW((void)randint(-128, 128, {2}, DType::kInt8));
  struct Case {
    int64_t low, high;
    DType dtype;
  };
  for (const Case c :
       {Case{0, 257, DType::kUInt8}, Case{-1, 5, DType::kUInt8}, Case{-129, 0, DType::kInt8},
        Case{0, 32769, DType::kInt16}, Case{0, 65506, DType::kFloat16}, Case{0, 3, DType::kBool}}) {
    try {
      (void)randint(c.low, c.high, {2}, c.dtype);
      ADD_FAILURE() << "[" << c.low << ", " << c.high << ") in " << dtype_name(c.dtype);
    } catch (const ShapeError& e) {
      EXPECT_NE(std::string(e.what()).find("does not fit in"), std::string::npos) << e.what();
    }
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

// ---- multinomial ----------------------------------------------------------------------------

// Frequencies of each category over `draws`, which must all be in [0, categories).
std::vector<double> frequencies(const std::vector<int64_t>& draws, int64_t categories) {
  std::vector<double> counts(static_cast<std::size_t>(categories), 0);
  for (int64_t d : draws) {
    EXPECT_TRUE(d >= 0 && d < categories) << "index " << d;
    if (d >= 0 && d < categories) ++counts[static_cast<std::size_t>(d)];
  }
  for (double& c : counts) c /= static_cast<double>(draws.size());
  return counts;
}

TEST_F(OpsValue, MultinomialWithReplacementFollowsTheWeights) {
  set_rng_state(99);
  const std::vector<double> weights = {2, 0, 1, 5, 0, 2};  // unnormalised, zeros included
  const Tensor probs = tensor(std::vector<float>(weights.begin(), weights.end()), {6});
  const Tensor draws = multinomial(probs, kSamples, true);
  EXPECT_EQ(draws.dtype(), DType::kInt64);
  EXPECT_EQ(draws.shape(), Shape({kSamples}));
  const std::vector<double> f = frequencies(draws.to_vector<int64_t>(), 6);
  for (std::size_t c = 0; c < weights.size(); ++c) {
    const double p = weights[c] / 10;
    // Within 5 standard errors; zero weights are never drawn.
    EXPECT_NEAR(f[c], p, 5 * std::sqrt(p * (1 - p) / kSamples) + 1e-12) << "category " << c;
  }
}

TEST_F(OpsValue, MultinomialDrawsEachRowFromItsOwnWeights) {
  set_rng_state(5);
  const std::vector<double> w = {1, 3, 0, 0, 1, 1};  // rows {1, 3, 0} and {0, 1, 1}
  const Tensor draws = multinomial(tensor(w, {2, 3}), 20000, true);
  EXPECT_EQ(draws.shape(), Shape({2, 20000}));
  const std::vector<int64_t> all = draws.to_vector<int64_t>();
  const std::vector<double> f0 = frequencies({all.begin(), all.begin() + 20000}, 3);
  const std::vector<double> f1 = frequencies({all.begin() + 20000, all.end()}, 3);
  EXPECT_NEAR(f0[0], 0.25, 0.02);
  EXPECT_NEAR(f0[1], 0.75, 0.02);
  EXPECT_EQ(f0[2], 0);
  EXPECT_EQ(f1[0], 0);
  EXPECT_NEAR(f1[1], 0.5, 0.02);
}

TEST_F(OpsValue, MultinomialWithoutReplacementGivesDistinctNonZeroCategories) {
  set_rng_state(11);
  const std::vector<double> weights = {0.1, 0, 0.4, 0.2, 0, 0.3, 0, 0.5};  // 5 non-zero
  std::vector<double> rows;
  for (int r = 0; r < 500; ++r) rows.insert(rows.end(), weights.begin(), weights.end());
  const std::vector<int64_t> draws = multinomial(tensor(rows, {500, 8}), 5).to_vector<int64_t>();
  std::vector<double> first(8, 0);
  for (int r = 0; r < 500; ++r) {
    std::vector<int64_t> row(draws.begin() + r * 5, draws.begin() + (r + 1) * 5);
    ++first[static_cast<std::size_t>(row[0])];
    std::sort(row.begin(), row.end());
    EXPECT_EQ(row, (std::vector<int64_t>{0, 2, 3, 5, 7})) << "row " << r;
  }
  // The first draw of each row follows the weights (total 1.5): 500 rows, within 5 s.e.
  for (std::size_t c = 0; c < weights.size(); ++c) {
    const double p = weights[c] / 1.5;
    EXPECT_NEAR(first[c] / 500, p, 5 * std::sqrt(p * (1 - p) / 500) + 1e-12) << "category " << c;
  }
}

TEST_F(OpsValue, MultinomialWithoutReplacementFirstDrawsFollowTheWeights) {
  set_rng_state(12);
  const std::vector<double> weights = {1, 2, 3, 4};
  std::vector<double> rows;
  constexpr int kRows = 20000;
  for (int r = 0; r < kRows; ++r) rows.insert(rows.end(), weights.begin(), weights.end());
  const std::vector<int64_t> draws = multinomial(tensor(rows, {kRows, 4}), 2).to_vector<int64_t>();
  std::vector<double> first(4, 0), second(4, 0);
  for (int r = 0; r < kRows; ++r) {
    ++first[static_cast<std::size_t>(draws[2 * r])];
    ++second[static_cast<std::size_t>(draws[2 * r + 1])];
  }
  // Sequential sampling: P(second = j) = sum over i != j of w_i / 10 * w_j / (10 - w_i).
  for (std::size_t j = 0; j < 4; ++j) {
    double p_second = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      if (i != j) p_second += weights[i] / 10 * weights[j] / (10 - weights[i]);
    }
    const double p_first = weights[j] / 10;
    EXPECT_NEAR(first[j] / kRows, p_first, 5 * std::sqrt(p_first * (1 - p_first) / kRows));
    EXPECT_NEAR(second[j] / kRows, p_second, 5 * std::sqrt(p_second * (1 - p_second) / kRows));
  }
}

}  // namespace
}  // namespace axle::testing
