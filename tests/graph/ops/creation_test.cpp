// Tests graph/ops/creation.cpp by value: full, zeros, ones and their likes, arange and scalar
// tensors, executed on each runtime (tests/graph/test_runtime.h) and compared with the values they
// must hold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/graph/ops/ops_test_util.h"

namespace axle::testing {
namespace {

// ---- Creation --------------------------------------------------------------------------------

TEST_F(OpsValue, FullFillsEveryElementInEachDtype) {
  std::mt19937 rng(1);
  for (DType dtype :
       {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    const Dims dims = random_dims(rng, 3);
    EXPECT_TRUE(matches(full(shape_of(dims), -2.5, dtype), dtype,
                        constant_ref(dims, round_to(dtype, -2.5)), kExact));
  }
  EXPECT_TRUE(
      matches(full({2, 2}, 3, DType::kBool), DType::kBool, constant_ref({2, 2}, 1), kExact));
}

TEST_F(OpsValue, FullOfAnIntegerOrABoolHoldsItInS64OrPred) {
  EXPECT_TRUE(matches(full({2, 3}, -7), DType::kInt64, constant_ref({2, 3}, -7), kExact));
  EXPECT_TRUE(matches(full({4}, int64_t{1} << 40), DType::kInt64,
                      constant_ref({4}, static_cast<double>(int64_t{1} << 40)), kExact));
  EXPECT_TRUE(matches(full({3}, true), DType::kBool, constant_ref({3}, 1), kExact));
  EXPECT_TRUE(matches(full({3}, false), DType::kBool, constant_ref({3}, 0), kExact));
}

TEST_F(OpsValue, ZerosOnesAndTheirLikesHoldZeroAndOne) {
  const Tensor z = zeros({2, 3}, DType::kFloat64);
  EXPECT_TRUE(matches(z, DType::kFloat64, constant_ref({2, 3}, 0), kExact));
  EXPECT_TRUE(matches(ones({4}, DType::kInt32), DType::kInt32, constant_ref({4}, 1), kExact));
  EXPECT_TRUE(matches(ones_like(z), DType::kFloat64, constant_ref({2, 3}, 1), kExact));
  EXPECT_TRUE(matches(zeros_like(ones({3, 1})), DType::kFloat32, constant_ref({3, 1}, 0), kExact));
}

TEST_F(OpsValue, ArangeMatchesThePythonRange) {
  struct Case {
    double start, end, step;
    DType dtype;
  };
  for (const Case& c : {Case{0, 10, 1, DType::kFloat32}, Case{1.5, 4, 0.5, DType::kFloat64},
                        Case{10, 0, -3, DType::kInt64}, Case{0, 1, 0.1, DType::kFloat32},
                        Case{-3, 7, 2, DType::kInt32}}) {
    // torch.arange: ceil((end - start) / step) values start + i * step.
    const auto n = static_cast<int64_t>(std::ceil((c.end - c.start) / c.step));
    Ref want{{n}, {}};
    for (int64_t i = 0; i < n; ++i) {
      want.values.push_back(round_to(c.dtype, c.start + static_cast<double>(i) * c.step));
    }
    EXPECT_TRUE(matches(arange(c.start, c.end, c.step, c.dtype), c.dtype, want, kExact))
        << "arange(" << c.start << ", " << c.end << ", " << c.step << ")";
  }
}

TEST_F(OpsValue, ScalarTensorIsZeroDimWithItsValue) {
  EXPECT_TRUE(matches(scalar_tensor(3.75), DType::kFloat32, Ref{{}, {3.75}}, kExact));
  EXPECT_TRUE(
      matches(scalar_tensor(0.1, DType::kFloat64), DType::kFloat64, Ref{{}, {0.1}}, kExact));
  EXPECT_DOUBLE_EQ(scalar_tensor(-7, DType::kInt64).item(), -7.0);
}

// tensor_from_host takes a host tensor's bytes as they are (the loader's batches): the values
// arrive, in the logical dtype, and bytes that do not fill the shape are refused at the caller.
TEST_F(OpsValue, TensorFromHostHoldsTheHostTensorsValues) {
  const Tensor x = tensor_from_host(CpuTensor(std::vector<float>{1, -2, 3.5, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(matches(x, DType::kFloat32, Ref{{2, 3}, {1, -2, 3.5, 4, 5, 6}}, kExact));
  const Tensor h = tensor_from_host(CpuTensor(std::vector<double>{0.1, 0.2}, {2}));
  EXPECT_TRUE(matches(h, DType::kFloat64, Ref{{2}, {0.1, 0.2}}, kExact));
  CpuTensor short_of_one{DType::kFloat32, Shape{2, 3}, std::vector<std::byte>(5 * sizeof(float))};
  try {
    (void)tensor_from_host(std::move(short_of_one));
    ADD_FAILURE() << "5 values for a [2, 3] tensor were accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("5 values given"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace axle::testing
