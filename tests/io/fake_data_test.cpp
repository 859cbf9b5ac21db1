// Tests io/fake_data.h: the synthetic dataset's shapes, ranges and determinism.
#include "axle/io/fake_data.h"

#include <gtest/gtest.h>

#include <stdexcept>

namespace axle {
namespace {

TEST(FakeData, SamplesHaveTheRequestedShapeAndDTypes) {
  const FakeData data({.size = 5, .sample_shape = {3, 4, 2}, .num_classes = 7});
  EXPECT_EQ(data.size(), 5);
  const Sample s = data.get(4);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].dtype, DType::kFloat32);
  EXPECT_EQ(s[0].shape, (Shape{3, 4, 2}));
  EXPECT_EQ(s[1].dtype, DType::kInt64);
  EXPECT_EQ(s[1].shape, Shape{});
}

TEST(FakeData, ValuesAndLabelsStayInRange) {
  const FakeData data({.size = 200, .sample_shape = {16}, .num_classes = 3});
  std::vector<int> label_counts(3);
  for (int64_t i = 0; i < data.size(); ++i) {
    const Sample s = data.get(i);
    for (float v : s[0].values<float>()) {
      EXPECT_GE(v, 0.0f);
      EXPECT_LT(v, 1.0f);
    }
    const int64_t label = s[1].values<int64_t>()[0];
    ASSERT_GE(label, 0);
    ASSERT_LT(label, 3);
    ++label_counts[static_cast<std::size_t>(label)];
  }
  for (int count : label_counts) EXPECT_GT(count, 30);  // every class shows up
}

TEST(FakeData, SameSeedGivesSameSamplesInAnyOrder) {
  const FakeData a({.size = 10, .sample_shape = {8}, .seed = 42});
  const FakeData b({.size = 10, .sample_shape = {8}, .seed = 42});
  const Sample late = b.get(9);  // b is read in another order than a
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(a.get(i)[0].bytes, b.get(i)[0].bytes) << i;
    EXPECT_EQ(a.get(i)[1].bytes, b.get(i)[1].bytes) << i;
  }
  EXPECT_EQ(a.get(9)[0].bytes, late[0].bytes);
}

TEST(FakeData, OtherSeedsAndIndicesGiveOtherSamples) {
  const FakeData a({.size = 2, .sample_shape = {8}, .seed = 1});
  const FakeData b({.size = 2, .sample_shape = {8}, .seed = 2});
  EXPECT_NE(a.get(0)[0].bytes, b.get(0)[0].bytes);
  EXPECT_NE(a.get(0)[0].bytes, a.get(1)[0].bytes);
}

TEST(FakeData, BadOptionsAndIndicesThrow) {
  EXPECT_THROW(FakeData({.size = -1}), std::invalid_argument);
  EXPECT_THROW(FakeData({.num_classes = 0}), std::invalid_argument);
  EXPECT_THROW(FakeData({.sample_shape = {1, 2, 3, 4, 5, 6, 7, 8}}), std::invalid_argument);
  EXPECT_THROW(FakeData({.sample_shape = {2, -1}}), std::invalid_argument);
  const FakeData data({.size = 3});
  EXPECT_THROW((void)data.get(3), std::out_of_range);
  EXPECT_THROW((void)data.get(-1), std::out_of_range);
}

}  // namespace
}  // namespace axle
