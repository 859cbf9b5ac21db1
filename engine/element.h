// engine: reading and writing one element of any dtype as a double — for host-side values
// (graph parameters, host copies of tensors), not for kernels, which work on typed data.
#pragma once

#include <cstdint>
#include <cstring>

#include "axle/engine/dtype.h"

namespace axle {

/// bf16 bits of `f`, rounded to nearest even (as a conversion to bf16 rounds).
[[nodiscard]] inline uint16_t float_to_bf16_bits(float f) noexcept {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  // A NaN stays a (quiet) NaN: rounding could carry its payload into the exponent's infinity.
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

/// The float whose top half `bits` are.
[[nodiscard]] inline float bf16_bits_to_float(uint16_t bits) noexcept {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

/// Writes `value` converted to `dtype` at `out` (dtype_size(dtype) bytes).
inline void store_element(DType dtype, double value, void* out) noexcept {
  switch (dtype) {
    case DType::kFloat32: {
      const float v = static_cast<float>(value);
      std::memcpy(out, &v, 4);
      break;
    }
    case DType::kFloat64: {
      std::memcpy(out, &value, 8);
      break;
    }
    case DType::kBFloat16: {
      const uint16_t v = float_to_bf16_bits(static_cast<float>(value));
      std::memcpy(out, &v, 2);
      break;
    }
    case DType::kInt32: {
      const int32_t v = static_cast<int32_t>(value);
      std::memcpy(out, &v, 4);
      break;
    }
    case DType::kInt64: {
      const int64_t v = static_cast<int64_t>(value);
      std::memcpy(out, &v, 8);
      break;
    }
    case DType::kBool: {
      const uint8_t v = value != 0;
      std::memcpy(out, &v, 1);
      break;
    }
    case DType::kFloat16: {
      const uint16_t v = float_to_half_bits(static_cast<float>(value));
      std::memcpy(out, &v, 2);
      break;
    }
    // The small integers wrap, as the kernels' conversions through s32 do.
    case DType::kInt8: {
      const auto v = static_cast<int8_t>(static_cast<int32_t>(value));
      std::memcpy(out, &v, 1);
      break;
    }
    case DType::kUInt8: {
      const auto v = static_cast<uint8_t>(static_cast<int32_t>(value));
      std::memcpy(out, &v, 1);
      break;
    }
    case DType::kInt16: {
      const auto v = static_cast<int16_t>(static_cast<int32_t>(value));
      std::memcpy(out, &v, 2);
      break;
    }
  }
}

/// The element of `dtype` at `in`, as a double.
[[nodiscard]] inline double load_element(DType dtype, const void* in) noexcept {
  switch (dtype) {
    case DType::kFloat32: {
      float v;
      std::memcpy(&v, in, 4);
      return v;
    }
    case DType::kFloat64: {
      double v;
      std::memcpy(&v, in, 8);
      return v;
    }
    case DType::kBFloat16: {
      uint16_t v;
      std::memcpy(&v, in, 2);
      return bf16_bits_to_float(v);
    }
    case DType::kInt32: {
      int32_t v;
      std::memcpy(&v, in, 4);
      return v;
    }
    case DType::kInt64: {
      int64_t v;
      std::memcpy(&v, in, 8);
      return static_cast<double>(v);
    }
    case DType::kBool: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
    case DType::kFloat16: {
      uint16_t v;
      std::memcpy(&v, in, 2);
      return half_bits_to_float(v);
    }
    case DType::kInt8: {
      int8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
    case DType::kUInt8: {
      uint8_t v;
      std::memcpy(&v, in, 1);
      return v;
    }
    case DType::kInt16: {
      int16_t v;
      std::memcpy(&v, in, 2);
      return v;
    }
  }
  return 0;
}

}  // namespace axle
