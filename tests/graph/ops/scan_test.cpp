// Tests graph/ops/scan.cpp by value: cumsum along each dim (negative dims, 0-d, empty), its
// dtypes (integers and bool give s64), and the accuracy of long f32 rows, on each runtime
// (tests/graph/test_runtime.h), against running sums in double.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

Ref cumsum_ref(const Ref& x, int64_t dim) {
  Ref out = x;
  if (x.dims.empty()) return out;
  for_each_index(x.dims, [&](const Dims& i) {
    if (i[dim] == 0) return;
    Dims before = i;
    --before[dim];
    out.values[offset_of(x.dims, i)] += out.values[offset_of(x.dims, before)];
  });
  return out;
}

TEST_F(OpsValue, CumsumAlongEachDim) {
  std::mt19937 rng(1);
  for (const Dims& dims : {Dims{7}, Dims{3, 5}, Dims{2, 3, 4}, Dims{4, 1, 3, 2}}) {
    const Ref x = random_ref(rng, dims, -3, 3);
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      EXPECT_TRUE(matches(cumsum(on_device(x), d), DType::kFloat32, cumsum_ref(x, d), kTolF32))
          << "dim " << d;
    }
    EXPECT_TRUE(matches(cumsum(on_device(x), -1), DType::kFloat32,
                        cumsum_ref(x, static_cast<int64_t>(dims.size()) - 1), kTolF32));
  }
}

TEST_F(OpsValue, CumsumInF64AndBf16) {
  std::mt19937 rng(2);
  const Ref x = random_ref(rng, {5, 300}, -1, 1, DType::kFloat64);
  EXPECT_TRUE(matches(cumsum(on_device(x, DType::kFloat64), 1), DType::kFloat64, cumsum_ref(x, 1),
                      kTolF64));
  const Ref b = random_ref(rng, {40, 3}, 0, 1, DType::kBFloat16);
  EXPECT_TRUE(matches(cumsum(on_device(b, DType::kBFloat16), 0), DType::kBFloat16, cumsum_ref(b, 0),
                      kTolBf16));
}

TEST_F(OpsValue, CumsumOfIntegersAndBoolIsInt64) {
  std::mt19937 rng(3);
  const Ref n = random_ints(rng, {4, 6}, -50, 50);
  EXPECT_TRUE(
      matches(cumsum(on_device(n, DType::kInt32), 1), DType::kInt64, cumsum_ref(n, 1), kExact));
  const Ref flags = random_ints(rng, {9}, 0, 1);
  EXPECT_TRUE(matches(cumsum(on_device(flags, DType::kBool), 0), DType::kInt64,
                      cumsum_ref(flags, 0), kExact));
}

TEST_F(OpsValue, CumsumOfZeroDimAndEmptyTensors) {
  const Ref scalar{{}, {2.5}};
  EXPECT_TRUE(matches(cumsum(on_device(scalar), 0), DType::kFloat32, scalar, kExact));
  const Ref empty{{0, 3}, {}};
  EXPECT_TRUE(matches(cumsum(on_device(empty), 0), DType::kFloat32, empty, kExact));
  EXPECT_TRUE(matches(cumsum(on_device(empty), 1), DType::kFloat32, empty, kExact));
}

// 200k terms: f32 running sums would be off by ~1e-4 relative; sums kept in double round once.
TEST_F(OpsValue, CumsumOfALongF32RowStaysAccurate) {
  std::mt19937 rng(4);
  const Ref x = random_ref(rng, {200000}, 0, 1);
  EXPECT_TRUE(matches(cumsum(on_device(x), 0), DType::kFloat32, cumsum_ref(x, 0), {2e-7, 0}));
  const Ref columns = random_ref(rng, {20000, 3}, 0, 1);
  EXPECT_TRUE(
      matches(cumsum(on_device(columns), 0), DType::kFloat32, cumsum_ref(columns, 0), {2e-7, 0}));
}

}  // namespace
}  // namespace axle::testing
