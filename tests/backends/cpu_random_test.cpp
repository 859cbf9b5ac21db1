// tests/backends: CPU random kernels (backends/cpu/random.cpp) — Philox against its published
// known answers, the documented element -> counter mapping, determinism, and the statistics of
// each distribution (bounds of 5 standard errors, so a correct kernel fails about 1 in 10^6 runs;
// the seeds are fixed, so in practice never).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numbers>

#include "axle/backends/cpu/philox.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

constexpr int64_t kMillion = 1'000'000;

HostTensor s64(int64_t v) { return {DType::kInt64, {}, {static_cast<double>(v)}}; }

std::vector<double> draw(Kernel kernel, DType dtype, int64_t n, int64_t seed, int64_t offset,
                         std::vector<int64_t> ints = {}, std::vector<double> reals = {},
                         std::vector<HostTensor> extra = {}) {
  std::vector<HostTensor> inputs{s64(seed), s64(offset)};
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  return run_kernel(kernel, inputs, dtype, {n}, std::move(ints), std::move(reals)).values;
}

struct Moments {
  double mean = 0;
  double variance = 0;
};

Moments moments(const std::vector<double>& v) {
  Moments m;
  for (double x : v) m.mean += x;
  m.mean /= static_cast<double>(v.size());
  for (double x : v) m.variance += (x - m.mean) * (x - m.mean);
  m.variance /= static_cast<double>(v.size());
  return m;
}

// Random123's kat_vectors for philox4x32-10: counter words, key words, expected output. The
// same vectors appear in TensorFlow's and Random123-Boost's tests.
TEST(Philox, MatchesRandom123KnownAnswers) {
  using cpu::philox4x32_10;
  using Words = std::array<uint32_t, 4>;
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// rand_int over [0, 2^32) returns word r1 of the element's block unchanged (the multiply-shift
// by 2^32 keeps the high word of r1 << 32 | r0), which exposes the documented mapping:
// key = {seed lo, seed hi}, counter = {(offset + i) lo, (offset + i) hi, 0, 0}.
TEST(RandInt, FullWordRangeReturnsPhiloxWordOneOfTheDocumentedCounter) {
  // Seeds travel through the test helper as doubles, so this one has only 49 significant bits.
  const int64_t seed = 0x123456789abcd000LL;
  const int64_t offset = 0xfffffffeLL;  // the counter's low word wraps into the high word
  const auto out = draw(Kernel::kRandInt, DType::kInt64, 5, seed, offset, {0, int64_t{1} << 32});
  for (int64_t i = 0; i < 5; ++i) {
    const uint64_t c = static_cast<uint64_t>(offset + i);
    const auto block = cpu::philox4x32_10(
        {static_cast<uint32_t>(c), static_cast<uint32_t>(c >> 32), 0, 0}, {0x9abcd000, 0x12345678});
    EXPECT_EQ(out[i], static_cast<double>(block[1])) << "element " << i;
  }
  EXPECT_EQ(draw(Kernel::kRandInt, DType::kInt64, 1, 0, 0, {0, int64_t{1} << 32})[0],
            static_cast<double>(0xe169c58du));
}

TEST(RandUniform, F32TakesTheTop24BitsOfWordZero) {
  const auto out = draw(Kernel::kRandUniform, DType::kFloat32, 4, 0, 0, {}, {0.0, 1.0});
  EXPECT_EQ(out[0], static_cast<double>(0x6627e8d5u >> 8) / 16777216.0);
  const auto seeded = draw(Kernel::kRandUniform, DType::kFloat32, 4, -1, 7, {}, {0.0, 1.0});
  for (int i = 0; i < 4; ++i) {
    const auto block =
        cpu::philox4x32_10({static_cast<uint32_t>(7 + i), 0, 0, 0}, {0xffffffff, 0xffffffff});
    EXPECT_EQ(seeded[i], static_cast<double>(block[0] >> 8) / 16777216.0);
  }
}

TEST(RandNormal, F64FollowsTheDocumentedBoxMuller) {
  const double mean = 1.0;
  const double std = 2.0;
  const auto out = draw(Kernel::kRandNormal, DType::kFloat64, 4, 5, 100, {}, {mean, std});
  auto u53 = [](uint32_t lo, uint32_t hi) {
    return static_cast<double>((uint64_t{hi} << 32 | lo) >> 11) / 9007199254740992.0;
  };
  for (uint32_t i = 0; i < 4; ++i) {
    const auto r = cpu::philox4x32_10({100 + i, 0, 0, 0}, {5, 0});
    const double u1 = u53(r[0], r[1]) + 1.0 / 9007199254740992.0;
    const double u2 = u53(r[2], r[3]);
    const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
    EXPECT_DOUBLE_EQ(out[i], mean + std * z) << "element " << i;
  }
}

TEST(Random, SameSeedAndOffsetGiveSameNumbers) {
  for (Kernel k : {Kernel::kRandUniform, Kernel::kRandNormal}) {
    EXPECT_EQ(draw(k, DType::kFloat32, 1000, 42, 9, {}, {0, 1}),
              draw(k, DType::kFloat32, 1000, 42, 9, {}, {0, 1}));
  }
  EXPECT_EQ(draw(Kernel::kRandInt, DType::kInt32, 1000, 42, 9, {0, 100}),
            draw(Kernel::kRandInt, DType::kInt32, 1000, 42, 9, {0, 100}));
}

TEST(Random, DifferentOffsetOrSeedGiveDifferentNumbers) {
  const auto base = draw(Kernel::kRandUniform, DType::kFloat64, 1000, 42, 0, {}, {0, 1});
  const auto shifted = draw(Kernel::kRandUniform, DType::kFloat64, 1000, 42, 1000, {}, {0, 1});
  const auto reseeded = draw(Kernel::kRandUniform, DType::kFloat64, 1000, 43, 0, {}, {0, 1});
  int same_offset = 0;
  int same_seed = 0;
  for (std::size_t i = 0; i < base.size(); ++i) {
    same_offset += base[i] == shifted[i];
    same_seed += base[i] == reseeded[i];
  }
  EXPECT_EQ(same_offset, 0);
  EXPECT_EQ(same_seed, 0);
}

// One call over n elements at offset o equals a call over k elements at o followed by one over
// n - k at o + k, for every kernel and dtype: each element's bits depend only on its counter.
TEST(Random, SplitCallsAtOffsetKMatchOneWholeCall) {
  const int64_t n = 1000;
  const int64_t k = 377;
  const int64_t seed = 1234;
  const int64_t offset = 50;
  auto check = [&](Kernel kernel, DType dtype, std::vector<int64_t> ints, std::vector<double> reals,
                   std::vector<HostTensor> extra) {
    const auto whole = draw(kernel, dtype, n, seed, offset, ints, reals, extra);
    auto first = draw(kernel, dtype, k, seed, offset, ints, reals, extra);
    const auto rest = draw(kernel, dtype, n - k, seed, offset + k, ints, reals, extra);
    first.insert(first.end(), rest.begin(), rest.end());
    EXPECT_EQ(first, whole) << kernel_name(kernel) << " " << dtype_name(dtype);
  };
  const HostTensor p{DType::kFloat32, {}, {0.5}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    check(Kernel::kRandUniform, dtype, {}, {-1, 3}, {});
    check(Kernel::kRandNormal, dtype, {}, {0, 1}, {});
    check(Kernel::kBernoulli, dtype, {}, {}, {p});
  }
  check(Kernel::kRandInt, DType::kInt64, {-5, 1000}, {}, {});
  check(Kernel::kBernoulli, DType::kBool, {}, {}, {p});
}

TEST(RandUniform, MeanAndVarianceMatchUniformDistribution) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto v = draw(Kernel::kRandUniform, dtype, kMillion, 7, 0, {}, {0.0, 1.0});
    const Moments m = moments(v);
    const double n = static_cast<double>(kMillion);
    EXPECT_NEAR(m.mean, 0.5, 5 * std::sqrt(1.0 / 12 / n)) << dtype_name(dtype);
    // The variance of (x - 1/2)^2 is 1/80 - 1/144.
    EXPECT_NEAR(m.variance, 1.0 / 12, 5 * std::sqrt((1.0 / 80 - 1.0 / 144) / n))
        << dtype_name(dtype);
  }
}

TEST(RandUniform, StaysInsideLowHighEvenWhereRoundingWouldReachHigh) {
  // In bf16 about 1 draw in 512 rounds up to 1.0; those must land below high instead.
  for (DType dtype : {DType::kBFloat16, DType::kFloat32, DType::kFloat64}) {
    const auto v = draw(Kernel::kRandUniform, dtype, kMillion, 8, 0, {}, {-3.0, 1.0});
    EXPECT_GE(*std::min_element(v.begin(), v.end()), -3.0) << dtype_name(dtype);
    EXPECT_LT(*std::max_element(v.begin(), v.end()), 1.0) << dtype_name(dtype);
  }
}

TEST(RandNormal, MeanStdAndOneSigmaFractionMatchNormal) {
  const double mean = 2.0;
  const double std = 3.0;
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const auto v = draw(Kernel::kRandNormal, dtype, kMillion, 9, 0, {}, {mean, std});
    const Moments m = moments(v);
    const double n = static_cast<double>(kMillion);
    EXPECT_NEAR(m.mean, mean, 5 * std / std::sqrt(n)) << dtype_name(dtype);
    // The sample variance of a normal has standard error sigma^2 * sqrt(2 / n).
    EXPECT_NEAR(m.variance, std * std, 5 * std * std * std::sqrt(2.0 / n)) << dtype_name(dtype);
    const double within =
        static_cast<double>(
            std::count_if(v.begin(), v.end(), [&](double x) { return std::abs(x - mean) < std; })) /
        n;
    const double p = std::erf(1.0 / std::sqrt(2.0));  // 0.6827
    EXPECT_NEAR(within, p, 5 * std::sqrt(p * (1 - p) / n)) << dtype_name(dtype);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); }));
  }
}

TEST(RandInt, CoversLowToHighUniformlyAndNeverReachesHigh) {
  const int64_t low = -3;
  const int64_t high = 4;
  const auto v = draw(Kernel::kRandInt, DType::kInt32, kMillion, 10, 0, {low, high});
  std::map<double, int64_t> counts;
  for (double x : v) ++counts[x];
  ASSERT_EQ(counts.size(), static_cast<std::size_t>(high - low));
  EXPECT_EQ(counts.begin()->first, low);
  EXPECT_EQ(counts.rbegin()->first, high - 1);
  const double p = 1.0 / static_cast<double>(high - low);
  const double n = static_cast<double>(kMillion);
  for (const auto& [value, count] : counts) {
    EXPECT_NEAR(static_cast<double>(count), n * p, 5 * std::sqrt(n * p * (1 - p))) << value;
  }
}

TEST(RandInt, FillsFloatOutputWithIntegers) {
  const auto v = draw(Kernel::kRandInt, DType::kFloat32, 10000, 11, 0, {0, 10});
  for (double x : v) {
    ASSERT_EQ(x, std::floor(x));
    ASSERT_GE(x, 0);
    ASSERT_LT(x, 10);
  }
}

TEST(RandInt, HugeRangeHasNoModuloBias) {
  // range = 3 * 2^62: x mod range would put half the draws in the first third of the range.
  const int64_t low = std::numeric_limits<int64_t>::min();
  const int64_t high = int64_t{1} << 62;
  const int64_t n = 300000;
  const auto v = draw(Kernel::kRandInt, DType::kInt64, n, 12, 0, {low, high});
  const double first_third_end = -std::ldexp(1.0, 62);
  const auto first_third =
      std::count_if(v.begin(), v.end(), [&](double x) { return x < first_third_end; });
  EXPECT_NEAR(static_cast<double>(first_third), n / 3.0, 5 * std::sqrt(n * (2.0 / 9)));
  EXPECT_LT(*std::max_element(v.begin(), v.end()), static_cast<double>(high));
}

TEST(RandInt, RejectsEmptyRange) {
  EXPECT_THROW(draw(Kernel::kRandInt, DType::kInt32, 4, 0, 0, {5, 5}), std::runtime_error);
}

TEST(Bernoulli, MeanMatchesScalarP) {
  const HostTensor p{DType::kFloat64, {}, {0.3}};
  for (DType dtype : {DType::kFloat32, DType::kBool}) {
    const auto v = draw(Kernel::kBernoulli, dtype, kMillion, 13, 0, {}, {}, {p});
    const double n = static_cast<double>(kMillion);
    EXPECT_NEAR(moments(v).mean, 0.3, 5 * std::sqrt(0.3 * 0.7 / n)) << dtype_name(dtype);
    EXPECT_TRUE(std::all_of(v.begin(), v.end(), [](double x) { return x == 0 || x == 1; }));
  }
}

TEST(Bernoulli, FollowsPerElementP) {
  const int64_t n = 30000;
  HostTensor p{DType::kFloat32, {n}, std::vector<double>(n)};
  for (int64_t i = 0; i < n; ++i) p.values[i] = i % 3 == 0 ? 0.0 : i % 3 == 1 ? 1.0 : 0.5;
  const auto v = draw(Kernel::kBernoulli, DType::kBool, n, 14, 0, {}, {}, {p});
  double halves = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (i % 3 == 2) {
      halves += v[i];
    } else {
      ASSERT_EQ(v[i], p.values[i]) << "element " << i;
    }
  }
  EXPECT_NEAR(halves, n / 3 * 0.5, 5 * std::sqrt(n / 3 * 0.25));
}

TEST(Bernoulli, RejectsPOutsideZeroOne) {
  const HostTensor p{DType::kFloat32, {}, {1.5}};
  EXPECT_THROW(draw(Kernel::kBernoulli, DType::kFloat32, 4, 0, 0, {}, {}, {p}), std::runtime_error);
}

}  // namespace
}  // namespace axle::testing
