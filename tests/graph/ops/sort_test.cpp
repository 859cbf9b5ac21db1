// Tests graph/ops/sort.cpp by value: topk's values and s64 indices along each dim, largest and
// smallest, ties in index order and NaN above every number, in f32, f64, bf16 and integers, on
// each runtime (tests/graph/test_runtime.h), against a stable sort in double.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

struct TopKRef {
  Ref values, indices;
};

TopKRef topk_ref(const Ref& x, int64_t k, int64_t dim, bool largest) {
  auto above = [](double a, double b) { return (std::isnan(a) && !std::isnan(b)) || a > b; };
  TopKRef out;
  out.values.dims = out.indices.dims = x.dims;
  out.values.dims[dim] = out.indices.dims[dim] = k;
  out.values.values.resize(count(out.values.dims));
  out.indices.values.resize(count(out.values.dims));
  Dims rows = x.dims;
  rows[dim] = 1;
  for_each_index(rows, [&](const Dims& r) {
    std::vector<int64_t> order(x.dims[dim]);
    std::iota(order.begin(), order.end(), 0);
    auto value = [&](int64_t j) {
      Dims i = r;
      i[dim] = j;
      return at(x, i);
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return largest ? above(value(a), value(b)) : above(value(b), value(a));
    });
    for (int64_t j = 0; j < k; ++j) {
      Dims o = r;
      o[dim] = j;
      out.values.values[offset_of(out.values.dims, o)] = value(order[j]);
      out.indices.values[offset_of(out.values.dims, o)] = static_cast<double>(order[j]);
    }
  });
  return out;
}

::testing::AssertionResult topk_matches(const Ref& x, DType dtype, int64_t k, int64_t dim,
                                        bool largest) {
  const TopK got = topk(on_device(x, dtype), k, dim, largest);
  const TopKRef want = topk_ref(x, k, dim, largest);
  ::testing::AssertionResult ok = matches(got.indices, DType::kInt64, want.indices, kExact);
  if (!ok) return ok << " (indices, k " << k << " dim " << dim << " largest " << largest << ")";
  ok = matches(got.values, dtype, want.values, kExact);
  if (!ok) return ok << " (values, k " << k << " dim " << dim << " largest " << largest << ")";
  return ok;
}

TEST_F(OpsValue, TopkAlongEachDimLargestAndSmallest) {
  std::mt19937 rng(1);
  for (const Dims& dims : {Dims{9}, Dims{4, 6}, Dims{3, 5, 4}}) {
    const Ref x = random_ref(rng, dims, -3, 3);
    for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
      for (int64_t k : {int64_t{0}, int64_t{1}, dims[d] / 2, dims[d]}) {
        EXPECT_TRUE(topk_matches(x, DType::kFloat32, k, d, true));
        EXPECT_TRUE(topk_matches(x, DType::kFloat32, k, d, false));
      }
    }
  }
}

TEST_F(OpsValue, TopkOfLongRowsAndOtherDtypes) {
  std::mt19937 rng(2);
  EXPECT_TRUE(topk_matches(random_ref(rng, {3, 1000}, -1, 1, DType::kFloat64), DType::kFloat64, 17,
                           1, true));
  EXPECT_TRUE(topk_matches(random_ref(rng, {300, 2}, -1, 1, DType::kFloat32), DType::kFloat32, 5, 0,
                           false));
  EXPECT_TRUE(topk_matches(random_ref(rng, {2, 30}, -1, 1, DType::kBFloat16), DType::kBFloat16, 4,
                           1, true));
  EXPECT_TRUE(topk_matches(random_ints(rng, {5, 8}, -100, 100), DType::kInt64, 3, 1, true));
}

TEST_F(OpsValue, TopkPutsEqualValuesInIndexOrderAndNaNFirst) {
  std::mt19937 rng(3);
  const Ref ties = random_ints(rng, {4, 12}, 0, 3);  // many equal values per row
  for (int64_t k : {3, 7, 12}) {
    EXPECT_TRUE(topk_matches(ties, DType::kFloat32, k, 1, true));
    EXPECT_TRUE(topk_matches(ties, DType::kFloat32, k, 1, false));
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Ref x{{6}, {1, nan, 3, -2, nan, 0}};
  const TopK top = topk(on_device(x), 3);
  EXPECT_EQ(top.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 4, 2}));
  const TopK bottom = topk(on_device(x), 3, -1, false);
  EXPECT_EQ(bottom.indices.to_vector<int64_t>(), (std::vector<int64_t>{3, 5, 0}));
}

}  // namespace
}  // namespace axle::testing
