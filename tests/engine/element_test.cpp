#include "axle/engine/element.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace axle {
namespace {

TEST(Element, EveryDtypeRoundTripsARepresentableValue) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt32,
                      DType::kInt64, DType::kFloat16, DType::kInt8, DType::kInt16}) {
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

TEST(Element, SmallIntegersWrapAsTheirCastFromS32Does) {
  std::byte buffer[2];
  store_element(DType::kUInt8, 300, buffer);
  EXPECT_EQ(load_element(DType::kUInt8, buffer), 44);
  store_element(DType::kUInt8, -1, buffer);
  EXPECT_EQ(load_element(DType::kUInt8, buffer), 255);
  store_element(DType::kInt8, 200, buffer);
  EXPECT_EQ(load_element(DType::kInt8, buffer), -56);
  store_element(DType::kInt16, 40000, buffer);
  EXPECT_EQ(load_element(DType::kInt16, buffer), 40000 - 65536);
}

// GCC's _Float16 conversions (libgcc's, correctly rounded) are the reference.
uint16_t reference_f16_bits(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

TEST(Element, EveryF16WidensExactlyAndNarrowsBackToItself) {
  for (uint32_t bits = 0; bits <= 0xffffu; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const float f = half_bits_to_float(h);
    _Float16 reference;
    std::memcpy(&reference, &h, sizeof h);
    if ((h & 0x7fffu) > 0x7c00u) {  // NaN: quiet, payload and sign kept
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_EQ(std::bit_cast<uint32_t>(f), 0x7fc00000u | (h & 0x8000u) << 16 | (h & 0x3ffu) << 13)
          << std::hex << h;
      continue;
    }
    ASSERT_EQ(f, static_cast<float>(reference)) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << h;
    ASSERT_EQ(float_to_half_bits(f), h) << std::hex << h;
  }
}

TEST(Element, FloatsNarrowToTheNearestF16TiesToEven) {
  // A spread of float bit patterns over every exponent, plus the points halfway between
  // neighbouring f16 values and one float either side of each.
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 65521) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_half_bits(f), reference_f16_bits(f)) << std::hexfloat << f;
  }
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    const double low = half_bits_to_float(static_cast<uint16_t>(h));
    const double high = half_bits_to_float(static_cast<uint16_t>(h + 1));
    const auto halfway = static_cast<float>((low + high) / 2);  // exact in float
    for (float f : {halfway, std::nextafter(halfway, 0.0f), std::nextafter(halfway, 1e9f)}) {
      ASSERT_EQ(float_to_half_bits(f), reference_f16_bits(f)) << std::hexfloat << f;
      ASSERT_EQ(float_to_half_bits(-f), reference_f16_bits(-f)) << std::hexfloat << -f;
    }
  }
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7bffu);  // f16's largest, 65504
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7c00u);  // rounds to infinity
  EXPECT_EQ(float_to_half_bits(-std::numeric_limits<float>::quiet_NaN()), 0xfe00u);
  EXPECT_EQ(Half(0.1f).x, 0x2e66u);
  EXPECT_EQ(static_cast<float>(Half::from_bits(0x0001u)), 0x1p-24f);  // smallest subnormal
}

}  // namespace
}  // namespace axle
