// Tests graph/ops/shape.cpp by value: reshape and its relatives, permute, transpose, expand,
// slice, cat, stack, index_select, gather and one_hot, executed on each runtime
// (tests/graph/test_runtime.h) and compared with plain reference loops. Inputs come from
// std::mt19937 with fixed seeds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

// x restricted to positions `picks` along dim (repeats allowed): slice and index_select.
Ref pick_ref(const Ref& x, int64_t dim, const Dims& picks) {
  Ref out{x.dims, {}};
  out.dims[dim] = static_cast<int64_t>(picks.size());
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i = o;
    i[dim] = picks[o[dim]];
    out.values.push_back(at(x, i));
  });
  return out;
}

// The positions x[start:end:step] takes from a dim of `size`, by Python's rules.
Dims python_slice(int64_t size, int64_t start, int64_t end, int64_t step) {
  auto clamp = [size](int64_t i) {
    return i < 0 ? std::max<int64_t>(i + size, 0) : std::min(i, size);
  };
  Dims picks;
  for (int64_t i = clamp(start); i < clamp(end); i += step) picks.push_back(i);
  return picks;
}

Ref cat_ref(const std::vector<Ref>& parts, int64_t dim) {
  Ref out{parts[0].dims, {}};
  out.dims[dim] = 0;
  for (const Ref& p : parts) out.dims[dim] += p.dims[dim];
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i = o;
    std::size_t p = 0;
    while (i[dim] >= parts[p].dims[dim]) i[dim] -= parts[p++].dims[dim];
    out.values.push_back(at(parts[p], i));
  });
  return out;
}

// ---- Shape and data movement -----------------------------------------------------------------

TEST_F(OpsValue, ReshapeAndViewKeepRowMajorOrder) {
  std::mt19937 rng(101);
  const Ref x = random_ref(rng, {2, 3, 4}, -1, 1);
  EXPECT_TRUE(
      matches(reshape(on_device(x), {4, -1}), DType::kFloat32, reshaped(x, {4, 6}), kExact));
  EXPECT_TRUE(matches(view(on_device(x), {24}), DType::kFloat32, reshaped(x, {24}), kExact));
  EXPECT_TRUE(matches(reshape(on_device(x), {3, 2, 2, 2}) + 0.0, DType::kFloat32,
                      reshaped(x, {3, 2, 2, 2}), kExact));
}

TEST_F(OpsValue, FlattenMergesTheGivenDims) {
  std::mt19937 rng(102);
  const Ref x = random_ref(rng, {2, 3, 4, 5}, -1, 1);
  EXPECT_TRUE(matches(flatten(on_device(x)), DType::kFloat32, reshaped(x, {120}), kExact));
  EXPECT_TRUE(
      matches(flatten(on_device(x), 1, 2), DType::kFloat32, reshaped(x, {2, 12, 5}), kExact));
  EXPECT_TRUE(matches(flatten(on_device(x), -2), DType::kFloat32, reshaped(x, {2, 3, 20}), kExact));
}

TEST_F(OpsValue, SqueezeRemovesOnlyASizeOneDim) {
  std::mt19937 rng(103);
  const Ref x = random_ref(rng, {3, 1, 4}, -1, 1);
  EXPECT_TRUE(matches(squeeze(on_device(x), 1), DType::kFloat32, reshaped(x, {3, 4}), kExact));
  EXPECT_TRUE(matches(squeeze(on_device(x), 0), DType::kFloat32, x, kExact));
}

TEST_F(OpsValue, UnsqueezeInsertsASizeOneDim) {
  std::mt19937 rng(104);
  const Ref x = random_ref(rng, {3, 4}, -1, 1);
  EXPECT_TRUE(matches(unsqueeze(on_device(x), 0), DType::kFloat32, reshaped(x, {1, 3, 4}), kExact));
  EXPECT_TRUE(
      matches(unsqueeze(on_device(x), -1), DType::kFloat32, reshaped(x, {3, 4, 1}), kExact));
}

TEST_F(OpsValue, PermuteReordersDims) {
  std::mt19937 rng(105);
  const Ref x = random_ref(rng, random_dims(rng, 4), -1, 1);
  for (const Dims& perm : {Dims{3, 1, 0, 2}, Dims{0, 2, 1, 3}, Dims{3, 2, 1, 0}}) {
    EXPECT_TRUE(
        matches(permute(on_device(x), perm), DType::kFloat32, permute_ref(x, perm), kExact));
  }
  EXPECT_TRUE(matches(permute(on_device(x), {-1, 0, 1, 2}), DType::kFloat32,
                      permute_ref(x, {3, 0, 1, 2}), kExact));
}

TEST_F(OpsValue, TransposeSwapsTwoDims) {
  std::mt19937 rng(106);
  const Ref x = random_ref(rng, {2, 3, 4}, -1, 1);
  EXPECT_TRUE(
      matches(transpose(on_device(x), 0, 2), DType::kFloat32, permute_ref(x, {2, 1, 0}), kExact));
  EXPECT_TRUE(
      matches(transpose(on_device(x), -1, 1), DType::kFloat32, permute_ref(x, {0, 2, 1}), kExact));
  const Ref big = random_ref(rng, {37, 70}, -1, 1);  // more than one tile of a tiled transpose
  EXPECT_TRUE(
      matches(transpose(on_device(big), 0, 1), DType::kFloat32, permute_ref(big, {1, 0}), kExact));
}

TEST_F(OpsValue, ExpandBroadcastsSizeOneDims) {
  std::mt19937 rng(107);
  const Ref x = random_ref(rng, {3, 1}, -1, 1);
  const Ref target = constant_ref({2, 3, 4}, 0);
  EXPECT_TRUE(matches(expand(on_device(x), {2, 3, 4}), DType::kFloat32,
                      zip(x, target, [](double v, double) { return v; }), kExact));
  EXPECT_TRUE(matches(expand(on_device(x), {2, -1, 4}), DType::kFloat32,
                      zip(x, target, [](double v, double) { return v; }), kExact));
}

TEST_F(OpsValue, SliceTakesStartEndAndStepLikePython) {
  std::mt19937 rng(108);
  const Ref x = random_ref(rng, {4, 9, 3}, -1, 1);
  struct Case {
    int64_t dim, start, end, step;
  };
  for (const Case& c : {Case{1, 2, 7, 1}, Case{1, -5, 9, 2}, Case{1, 1, 100, 3},
                        Case{-1, -2, -1, 1}, Case{0, -100, 3, 2}, Case{1, 6, 2, 1}}) {
    const int64_t d = c.dim < 0 ? c.dim + 3 : c.dim;
    EXPECT_TRUE(matches(slice(on_device(x), c.dim, c.start, c.end, c.step), DType::kFloat32,
                        pick_ref(x, d, python_slice(x.dims[d], c.start, c.end, c.step)), kExact))
        << "dim " << c.dim << " [" << c.start << ":" << c.end << ":" << c.step << "]";
  }
}

TEST_F(OpsValue, CatJoinsAlongADimIncludingEmptyPieces) {
  std::mt19937 rng(109);
  const Ref a = random_ref(rng, {2, 3, 4}, -1, 1);
  const Ref b = random_ref(rng, {2, 1, 4}, -1, 1);
  const Ref e{{2, 0, 4}, {}};
  const Ref c = random_ref(rng, {2, 2, 4}, -1, 1);
  EXPECT_TRUE(matches(cat({on_device(a), on_device(b), on_device(e), on_device(c)}, 1),
                      DType::kFloat32, cat_ref({a, b, e, c}, 1), kExact));
  EXPECT_TRUE(
      matches(cat({on_device(a), on_device(a)}, -1), DType::kFloat32, cat_ref({a, a}, 2), kExact));
}

TEST_F(OpsValue, CatPromotesMixedDtypes) {
  const Ref i{{2}, {3, -4}};
  const Ref f{{3}, {0.5, 1.25, -2}};
  EXPECT_TRUE(matches(cat({on_device(i, DType::kInt32), on_device(f)}), DType::kFloat32,
                      cat_ref({i, f}, 0), kExact));
}

TEST_F(OpsValue, StackAddsANewDim) {
  std::mt19937 rng(110);
  const Ref a = random_ref(rng, {2, 3}, -1, 1);
  const Ref b = random_ref(rng, {2, 3}, -1, 1);
  EXPECT_TRUE(matches(stack({on_device(a), on_device(b)}, 0), DType::kFloat32,
                      cat_ref({reshaped(a, {1, 2, 3}), reshaped(b, {1, 2, 3})}, 0), kExact));
  EXPECT_TRUE(matches(stack({on_device(a), on_device(b)}, -1), DType::kFloat32,
                      cat_ref({reshaped(a, {2, 3, 1}), reshaped(b, {2, 3, 1})}, 2), kExact));
}

TEST_F(OpsValue, IndexSelectPicksEntriesAlongADim) {
  std::mt19937 rng(111);
  const Ref x = random_ref(rng, {3, 5, 2}, -1, 1);
  const Dims picks{4, 0, 4, 2};
  const Ref index{{4}, {4, 0, 4, 2}};
  for (DType index_dtype : {DType::kInt64, DType::kInt32}) {
    EXPECT_TRUE(matches(index_select(on_device(x), 1, on_device(index, index_dtype)),
                        DType::kFloat32, pick_ref(x, 1, picks), kExact));
  }
  EXPECT_TRUE(matches(index_select(on_device(x), -1, on_device(Ref{{3}, {1, 1, 0}}, DType::kInt64)),
                      DType::kFloat32, pick_ref(x, 2, {1, 1, 0}), kExact));
}

TEST_F(OpsValue, GatherReadsAlongADim) {
  std::mt19937 rng(112);
  const Ref x = random_ref(rng, {4, 5}, -1, 1);
  const Ref rows = random_ints(rng, {3, 5}, 0, 3);
  EXPECT_TRUE(matches(gather(on_device(x), 0, on_device(rows, DType::kInt64)), DType::kFloat32,
                      gather_ref(x, 0, rows), kExact));
  const Ref cols = random_ints(rng, {4, 2}, 0, 4);  // narrower than x in dim 1
  EXPECT_TRUE(matches(gather(on_device(x), -1, on_device(cols, DType::kInt32)), DType::kFloat32,
                      gather_ref(x, 1, cols), kExact));
}

TEST_F(OpsValue, OneHotSetsTheIndexedClass) {
  std::mt19937 rng(113);
  const Ref index = random_ints(rng, {2, 3}, 0, 4);
  Ref want{{2, 3, 5}, {}};
  for_each_index(want.dims, [&](const Dims& i) {
    want.values.push_back(at(index, {i[0], i[1]}) == static_cast<double>(i[2]) ? 1 : 0);
  });
  EXPECT_TRUE(matches(one_hot(on_device(index, DType::kInt64), 5), DType::kInt64, want, kExact));
  EXPECT_TRUE(matches(one_hot(on_device(index, DType::kInt32), 5), DType::kInt64, want, kExact));
}

}  // namespace
}  // namespace axle::testing
