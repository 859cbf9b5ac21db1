// Tensor::copy_ (in-place value replacement, seen through every handle) and Tensor::to (moving
// a value to another device).
#include <gtest/gtest.h>

#include <vector>

#include "axle/actors/host/lazy_system.h"
#include "axle/axle.h"

namespace axle {
namespace {

class CopyAndMove : public ::testing::Test {
 protected:
  void SetUp() override {
    LazySystemOptions options;
    options.cpu_devices = 2;
    LazySystem::restart(options);
  }
  void TearDown() override { LazySystem::restart(); }
};

TEST_F(CopyAndMove, CopyReplacesTheValueForEveryHandle) {
  const Tensor w = tensor(std::vector<float>{1, 2, 3}, {3});
  const Tensor alias = w;
  w.copy_(w * 2.0 + 1.0);
  mark_step();
  EXPECT_EQ(alias.to_vector<float>(), (std::vector<float>{3, 5, 7}));
}

TEST_F(CopyAndMove, CopyBroadcastsAndCasts) {
  const Tensor w = zeros({2, 3});
  w.copy_(tensor(std::vector<int64_t>{4, 5, 6}, {3}));
  EXPECT_EQ(w.dtype(), DType::kFloat32);
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{4, 5, 6, 4, 5, 6}));
}

TEST_F(CopyAndMove, CopyOfAValueThatDoesNotFitNamesBothShapes) {
  const Tensor w = zeros({2, 3});
  try {
    w.copy_(zeros({4}));
    FAIL();
  } catch (const ShapeError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("copy_"), std::string::npos) << what;
    EXPECT_NE(what.find("f32[4]"), std::string::npos) << what;
    EXPECT_NE(what.find("copy_and_move_test.cpp"), std::string::npos) << what;
  }
}

TEST_F(CopyAndMove, ToAnotherDeviceCopiesTheValueThere) {
  const Tensor a = tensor(std::vector<float>{1, 2}, {2}) * 3.0;  // pending on xla:0
  const Tensor b = a.to(device(1));
  EXPECT_EQ(b.device(), device(1));
  EXPECT_EQ((b + 1.0).to_vector<float>(), (std::vector<float>{4, 7}));
  EXPECT_EQ(a.to(device(0)).impl(), a.impl());  // already there: the same tensor
  EXPECT_THROW((void)a.to(Device{5}), std::out_of_range);
}

}  // namespace
}  // namespace axle
