// Tests graph/ops/masking.cpp by value: clamp with scalar and tensor bounds (missing bounds, min >
// max, integers, NaN), masked_fill with broadcasting masks, tril and triu with every diagonal
// offset, on each runtime (tests/graph/test_runtime.h), against plain double loops.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

double clamp_ref(double v, std::optional<double> lo, std::optional<double> hi) {
  if (std::isnan(v)) return v;
  if (lo) v = std::max(v, *lo);
  if (hi) v = std::min(v, *hi);
  return v;
}

TEST_F(OpsValue, ClampWithScalarBounds) {
  std::mt19937 rng(1);
  const Ref x = random_ref(rng, {4, 37}, -3, 3);
  const Tensor t = on_device(x);
  const std::vector<std::pair<std::optional<double>, std::optional<double>>> bounds = {
      {-1.5, 0.75}, {-0.5, std::nullopt}, {std::nullopt, 0.25}, {0.0, 1.0}, {2.0, -1.0}};
  for (const auto& [lo, hi] : bounds) {
    EXPECT_TRUE(matches(clamp(t, lo, hi), DType::kFloat32,
                        map(x, [&](double v) { return clamp_ref(v, lo, hi); }), kExact))
        << "min " << lo.value_or(NAN) << " max " << hi.value_or(NAN);
  }
  const Ref x64 = random_ref(rng, {5}, -3, 3, DType::kFloat64);
  EXPECT_TRUE(matches(clamp(on_device(x64, DType::kFloat64), -0.3, 0.3), DType::kFloat64,
                      map(x64, [](double v) { return clamp_ref(v, -0.3, 0.3); }), kExact));
}

TEST_F(OpsValue, ClampKeepsNaNAndIntegers) {
  const Ref x{{4}, {std::numeric_limits<double>::quiet_NaN(), -5, 0.5, 7}};
  const std::vector<double> got = clamp(on_device(x), -1.0, 1.0).to_vector<double>();
  EXPECT_TRUE(std::isnan(got[0]));
  EXPECT_EQ(std::vector<double>(got.begin() + 1, got.end()), (std::vector<double>{-1, 0.5, 1}));
  std::mt19937 rng(2);
  const Ref n = random_ints(rng, {9}, -10, 10);
  EXPECT_TRUE(matches(clamp(on_device(n, DType::kInt64), -3.0, 4.0), DType::kInt64,
                      map(n, [](double v) { return clamp_ref(v, -3, 4); }), kExact));
  // A fractional bound makes an integer tensor's result f32, as torch.
  EXPECT_TRUE(matches(clamp(on_device(n, DType::kInt32), 0.5), DType::kFloat32,
                      map(n, [](double v) { return clamp_ref(v, 0.5, std::nullopt); }), kExact));
}

TEST_F(OpsValue, ClampWithTensorBoundsBroadcasts) {
  std::mt19937 rng(3);
  const Ref x = random_ref(rng, {3, 5}, -3, 3);
  const Ref lo = random_ref(rng, {5}, -2, 0);
  const Ref hi = random_ref(rng, {3, 1}, 0, 2);
  Ref want{x.dims, {}};
  for_each_index(x.dims, [&](const Dims& i) {
    want.values.push_back(clamp_ref(at(x, i), broadcast_at(lo, i), broadcast_at(hi, i)));
  });
  EXPECT_TRUE(
      matches(clamp(on_device(x), on_device(lo), on_device(hi)), DType::kFloat32, want, kExact));
  EXPECT_TRUE(matches(clamp(on_device(x), Tensor(), on_device(hi)), DType::kFloat32,
                      zip(x, hi, [](double v, double h) { return std::min(v, h); }), kExact));
}

TEST_F(OpsValue, MaskedFillBroadcastsTheMask) {
  std::mt19937 rng(4);
  const Ref x = random_ref(rng, {2, 3, 4}, -3, 3);
  const Ref mask = random_ints(rng, {3, 1}, 0, 1);
  for (double value : {-2.5, 0.0, 1.0, -std::numeric_limits<double>::infinity()}) {
    EXPECT_TRUE(
        matches(masked_fill(on_device(x), on_device(mask, DType::kBool), value), DType::kFloat32,
                zip(x, mask, [&](double v, double m) { return m != 0 ? value : v; }), kExact))
        << "value " << value;
  }
  // The mask may be the larger operand: the result takes the broadcast shape.
  const Ref row = random_ref(rng, {4}, -3, 3, DType::kFloat64);
  const Ref big = random_ints(rng, {2, 4}, 0, 1);
  EXPECT_TRUE(matches(masked_fill(on_device(row, DType::kFloat64), on_device(big, DType::kBool), 9),
                      DType::kFloat64,
                      zip(row, big, [](double v, double m) { return m != 0 ? 9 : v; }), kExact));
  const Ref n = random_ints(rng, {6}, -9, 9);
  const Ref m6 = random_ints(rng, {6}, 0, 1);
  EXPECT_TRUE(matches(masked_fill(on_device(n, DType::kInt64), on_device(m6, DType::kBool), 4.75),
                      DType::kInt64, zip(n, m6, [](double v, double m) { return m != 0 ? 4 : v; }),
                      kExact));
}

Ref triangle_ref(const Ref& x, int64_t diagonal, bool lower) {
  Ref out{x.dims, {}};
  for_each_index(x.dims, [&](const Dims& i) {
    const int64_t offset = i.back() - i[i.size() - 2];
    const bool keep = lower ? offset <= diagonal : offset >= diagonal;
    out.values.push_back(keep ? at(x, i) : 0);
  });
  return out;
}

TEST_F(OpsValue, TrilAndTriuKeepTheirTriangleForEachDiagonal) {
  std::mt19937 rng(5);
  for (const Dims& dims : {Dims{4, 4}, Dims{3, 5}, Dims{2, 5, 3}, Dims{2, 1, 3, 4}}) {
    const Ref x = random_ref(rng, dims, -3, 3);
    for (int64_t diagonal : {-6, -2, -1, 0, 1, 2, 6}) {
      EXPECT_TRUE(matches(tril(on_device(x), diagonal), DType::kFloat32,
                          triangle_ref(x, diagonal, true), kExact))
          << "tril diagonal " << diagonal;
      EXPECT_TRUE(matches(triu(on_device(x), diagonal), DType::kFloat32,
                          triangle_ref(x, diagonal, false), kExact))
          << "triu diagonal " << diagonal;
    }
  }
}

TEST_F(OpsValue, TrilAndTriuKeepTheDtype) {
  std::mt19937 rng(6);
  const Ref n = random_ints(rng, {3, 3}, -9, 9);
  EXPECT_TRUE(
      matches(tril(on_device(n, DType::kInt64)), DType::kInt64, triangle_ref(n, 0, true), kExact));
  const Ref ones = constant_ref({3, 4}, 1);
  EXPECT_TRUE(matches(triu(on_device(ones, DType::kBool), 1), DType::kBool,
                      triangle_ref(ones, 1, false), kExact));
  const Ref x = random_ref(rng, {4, 4}, -3, 3, DType::kBFloat16);
  EXPECT_TRUE(matches(triu(on_device(x, DType::kBFloat16), -1), DType::kBFloat16,
                      triangle_ref(x, -1, false), kExact));
}

}  // namespace
}  // namespace axle::testing
