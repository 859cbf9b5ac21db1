// Tests graph/ops/split.cpp by value: split by a size (last piece smaller), by a list of sizes,
// and chunk with torch's rule (pieces of ceil(n / chunks), possibly fewer pieces), along each
// dim, on each runtime (tests/graph/test_runtime.h), against slices taken by plain loops.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

// Elements [start, start + length) of dim `dim` of x.
Ref piece_ref(const Ref& x, int64_t dim, int64_t start, int64_t length) {
  Ref out{x.dims, {}};
  out.dims[dim] = length;
  for_each_index(out.dims, [&](const Dims& o) {
    Dims i = o;
    i[dim] += start;
    out.values.push_back(at(x, i));
  });
  return out;
}

::testing::AssertionResult pieces_match(const std::vector<Tensor>& got, const Ref& x, int64_t dim,
                                        const std::vector<int64_t>& sizes) {
  if (got.size() != sizes.size()) {
    return ::testing::AssertionFailure() << got.size() << " pieces, expected " << sizes.size();
  }
  int64_t start = 0;
  for (std::size_t p = 0; p < sizes.size(); ++p) {
    ::testing::AssertionResult ok =
        matches(got[p], DType::kFloat32, piece_ref(x, dim, start, sizes[p]), kExact);
    if (!ok) return ok << " (piece " << p << ")";
    start += sizes[p];
  }
  return ::testing::AssertionSuccess();
}

TEST_F(OpsValue, SplitBySizeLeavesASmallerLastPiece) {
  std::mt19937 rng(1);
  const Ref x = random_ref(rng, {7, 4, 5}, -3, 3);
  const Tensor t = on_device(x);
  EXPECT_TRUE(pieces_match(split(t, 3), x, 0, {3, 3, 1}));
  EXPECT_TRUE(pieces_match(split(t, 2, 1), x, 1, {2, 2}));
  EXPECT_TRUE(pieces_match(split(t, 2, -1), x, 2, {2, 2, 1}));
  EXPECT_TRUE(pieces_match(split(t, 9), x, 0, {7}));  // larger than the dim: one piece
}

TEST_F(OpsValue, SplitBySizesGivesThosePieces) {
  std::mt19937 rng(2);
  const Ref x = random_ref(rng, {3, 9}, -3, 3);
  EXPECT_TRUE(
      pieces_match(split(on_device(x), std::vector<int64_t>{2, 0, 4, 3}, 1), x, 1, {2, 0, 4, 3}));
  EXPECT_TRUE(pieces_match(split(on_device(x), std::vector<int64_t>{3}, 0), x, 0, {3}));
}

TEST_F(OpsValue, ChunkFollowsTorchsRule) {
  std::mt19937 rng(3);
  const Ref x = random_ref(rng, {6, 5}, -3, 3);
  const Tensor t = on_device(x);
  EXPECT_TRUE(pieces_match(chunk(t, 3), x, 0, {2, 2, 2}));
  EXPECT_TRUE(pieces_match(chunk(t, 4), x, 0, {2, 2, 2}));  // ceil(6 / 4) = 2: three pieces
  EXPECT_TRUE(pieces_match(chunk(t, 2, 1), x, 1, {3, 2}));
  EXPECT_TRUE(pieces_match(chunk(t, 4, 1), x, 1, {2, 2, 1}));
  EXPECT_TRUE(pieces_match(chunk(t, 9, 1), x, 1, {1, 1, 1, 1, 1}));
  EXPECT_TRUE(pieces_match(chunk(t, 1, 1), x, 1, {5}));
}

TEST_F(OpsValue, ChunkOfAnEmptyDimGivesEmptyPieces) {
  const Ref x{{0, 3}, {}};
  EXPECT_TRUE(pieces_match(chunk(on_device(x), 3), x, 0, {0, 0, 0}));
  EXPECT_TRUE(pieces_match(split(on_device(x), 0), x, 0, {0}));
}

}  // namespace
}  // namespace axle::testing
