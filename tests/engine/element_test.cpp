#include "axle/engine/element.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

namespace axle {
namespace {

TEST(Element, EveryDtypeRoundTripsARepresentableValue) {
  for (DType dtype :
       {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32, DType::kInt64}) {
    std::byte buffer[8];
    store_element(dtype, -3.0, buffer);
    EXPECT_EQ(load_element(dtype, buffer), -3.0) << dtype_name(dtype);
  }
  std::byte flag[1];
  store_element(DType::kBool, 0.25, flag);
  EXPECT_EQ(load_element(DType::kBool, flag), 1.0);
}

TEST(Element, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one, 1.
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 0x1p-8f)), 1.0f);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: the even one is 1 + 2^-6.
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
}

TEST(Element, Bf16KeepsEveryNaNANaN) {
  // A NaN whose payload sits only in the low bits would round up into infinity's pattern.
  const float low_payload_nan = std::bit_cast<float>(0x7f800001u);
  ASSERT_TRUE(std::isnan(low_payload_nan));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(low_payload_nan))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(-low_payload_nan))));
  EXPECT_TRUE(std::isinf(bf16_bits_to_float(float_to_bf16_bits(INFINITY))));
}

}  // namespace
}  // namespace axle
