// engine: element types, shared by the graph (what a tensor holds) and the backends (what a
// buffer holds).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace axle {

/// The f16 bits nearest `f` (ties to even), as torch converts: values from 65520 up become
/// infinity, tiny ones subnormal or zero; a NaN becomes the quiet NaN 0x7e00 with its sign.
[[nodiscard]] constexpr uint16_t float_to_half_bits(float f) noexcept {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= 0x47800000u) {  // 2^16 and up: past f16's range, or not finite
    return sign | (bits > 0x7f800000u ? 0x7e00u : 0x7c00u);
  }
  if (bits < 0x38800000u) {  // below 2^-14: adding 0.5 rounds the value to f16's subnormal step
    const float shifted = std::bit_cast<float>(bits) + 0.5f;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(shifted) - 0x3f000000u);
  }
  const uint32_t odd = (bits >> 13) & 1u;  // ties go to the even mantissa
  bits += 0xc8000fffu + odd;               // rebias the exponent (127 -> 15), round the 13 bits
  return sign | static_cast<uint16_t>(bits >> 13);
}

/// The float the f16 `bits` hold (exactly: every f16 is a float); a NaN keeps its payload and
/// comes back quiet, as the processor's conversion (and so torch's) gives it.
[[nodiscard]] constexpr float half_bits_to_float(uint16_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t magnitude = bits & 0x7fffu;
  if (magnitude >= 0x7c00u) {  // infinity or NaN
    const uint32_t quiet = magnitude > 0x7c00u ? 0x00400000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | quiet | (magnitude & 0x3ffu) << 13);
  }
  if (magnitude < 0x0400u) {  // zero or subnormal: magnitude * 2^-24, exact in float
    const float value = static_cast<float>(magnitude) * 0x1p-24f;
    return std::bit_cast<float>(sign | std::bit_cast<uint32_t>(value));
  }
  return std::bit_cast<float>(sign | ((magnitude << 13) + 0x38000000u));
}

/// An f16 value, as libtorch's at::Half: the element type of a kFloat16 tensor's host values
/// (CpuTensor, axle::tensor). Converts to and from float, rounding to nearest even.
struct Half {
  uint16_t x = 0;  ///< the IEEE binary16 bits

  /// Zero.
  Half() = default;
  /// The f16 nearest `value`.
  constexpr Half(float value) noexcept : x(float_to_half_bits(value)) {}  // NOLINT: as at::Half
  /// The f16 with bits `bits`.
  [[nodiscard]] static constexpr Half from_bits(uint16_t bits) noexcept {
    Half h;
    h.x = bits;
    return h;
  }
  /// The value, exactly.
  constexpr operator float() const noexcept { return half_bits_to_float(x); }  // NOLINT
};

/// Element type of a tensor or buffer, under libtorch's names (also constants of namespace axle:
/// axle::kFloat32, as torch::kFloat32). The short names kF32, kF64, kBF16, kI32 and kI64 of
/// earlier releases still name them, deprecated.
enum class DType : uint8_t {
  kFloat32,            ///< 32-bit floating point (f32), torch.float32.
  kFloat64,            ///< 64-bit floating point (f64), torch.float64.
  kBFloat16,           ///< bfloat16 (bf16), torch.bfloat16.
  kInt32,              ///< 32-bit signed integer (s32), torch.int32.
  kInt64,              ///< 64-bit signed integer (s64), torch.int64.
  kBool,               ///< Boolean (pred), torch.bool.
  kFloat16,            ///< IEEE half precision (f16), torch.float16.
  kInt8,               ///< 8-bit signed integer (s8), torch.int8.
  kUInt8,              ///< 8-bit unsigned integer (u8), torch.uint8.
  kInt16,              ///< 16-bit signed integer (s16), torch.int16.
  kFloat = kFloat32,   ///< kFloat32, as torch::kFloat.
  kDouble = kFloat64,  ///< kFloat64, as torch::kDouble.
  kInt = kInt32,       ///< kInt32, as torch::kInt.
  kLong = kInt64,      ///< kInt64, as torch::kLong.
  kHalf = kFloat16,    ///< kFloat16, as torch::kHalf.
  kChar = kInt8,       ///< kInt8, as torch::kChar.
  kByte = kUInt8,      ///< kUInt8, as torch::kByte.
  kShort = kInt16,     ///< kInt16, as torch::kShort.
  kF32 [[deprecated("use kFloat32 (libtorch's name)")]] = kFloat32,     ///< Deprecated.
  kF64 [[deprecated("use kFloat64 (libtorch's name)")]] = kFloat64,     ///< Deprecated.
  kBF16 [[deprecated("use kBFloat16 (libtorch's name)")]] = kBFloat16,  ///< Deprecated.
  kI32 [[deprecated("use kInt32 (libtorch's name)")]] = kInt32,         ///< Deprecated.
  kI64 [[deprecated("use kInt64 (libtorch's name)")]] = kInt64,         ///< Deprecated.
};

inline constexpr DType kFloat32 = DType::kFloat32;    ///< torch::kFloat32
inline constexpr DType kFloat = DType::kFloat32;      ///< torch::kFloat
inline constexpr DType kFloat64 = DType::kFloat64;    ///< torch::kFloat64
inline constexpr DType kDouble = DType::kFloat64;     ///< torch::kDouble
inline constexpr DType kBFloat16 = DType::kBFloat16;  ///< torch::kBFloat16
inline constexpr DType kInt32 = DType::kInt32;        ///< torch::kInt32
inline constexpr DType kInt = DType::kInt32;          ///< torch::kInt
inline constexpr DType kInt64 = DType::kInt64;        ///< torch::kInt64
inline constexpr DType kLong = DType::kInt64;         ///< torch::kLong
inline constexpr DType kBool = DType::kBool;          ///< torch::kBool
inline constexpr DType kFloat16 = DType::kFloat16;    ///< torch::kFloat16
inline constexpr DType kHalf = DType::kFloat16;       ///< torch::kHalf
inline constexpr DType kInt8 = DType::kInt8;          ///< torch::kInt8
inline constexpr DType kChar = DType::kInt8;          ///< torch::kChar
inline constexpr DType kUInt8 = DType::kUInt8;        ///< torch::kUInt8
inline constexpr DType kByte = DType::kUInt8;         ///< torch::kByte
inline constexpr DType kInt16 = DType::kInt16;        ///< torch::kInt16
inline constexpr DType kShort = DType::kInt16;        ///< torch::kShort

/// The number of distinct dtypes (DType without its aliases).
inline constexpr int kNumDTypes = 10;

/// Bytes per element.
[[nodiscard]] constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
    case DType::kFloat16:
      return 2;
    case DType::kInt8:
      return 1;
    case DType::kUInt8:
      return 1;
    case DType::kInt16:
      return 2;
  }
  return 0;
}

/// Short name as IR dumps print it (XLA's spelling): f32, f64, bf16, s32, s64, pred, f16, s8,
/// u8, s16.
[[nodiscard]] constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kFloat32:
      return "f32";
    case DType::kFloat64:
      return "f64";
    case DType::kBFloat16:
      return "bf16";
    case DType::kInt32:
      return "s32";
    case DType::kInt64:
      return "s64";
    case DType::kBool:
      return "pred";
    case DType::kFloat16:
      return "f16";
    case DType::kInt8:
      return "s8";
    case DType::kUInt8:
      return "u8";
    case DType::kInt16:
      return "s16";
  }
  return "?";
}

/// Whether `t` is f32, f64, bf16 or f16.
[[nodiscard]] constexpr bool is_floating(DType t) noexcept {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}
/// Whether `t` is an integer type: s8, u8, s16, s32 or s64 (pred is not).
[[nodiscard]] constexpr bool is_integral(DType t) noexcept {
  return t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt16 || t == DType::kInt32 ||
         t == DType::kInt64;
}

/// Whether the CPU kernels only store and move `t` (f16, s8, u8, s16): the compiler computes
/// their arithmetic in widened_dtype(t), exactly as torch computes each op on them, and rounds or
/// wraps the result back.
[[nodiscard]] constexpr bool is_storage_only(DType t) noexcept {
  return t == DType::kFloat16 || t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt16;
}
/// The dtype a storage-only dtype's arithmetic runs in (f16 in f32, the small integers in s32,
/// whose low bits wrap as theirs do); any other dtype is its own.
[[nodiscard]] constexpr DType widened_dtype(DType t) noexcept {
  if (t == DType::kFloat16) return DType::kFloat32;
  if (is_storage_only(t)) return DType::kInt32;
  return t;
}

/// The type two operands are computed in, as PyTorch promotes tensors of equal standing:
/// pred < integers < floating point; among integers the wider wins, and u8 with s8 gives s16;
/// among floating types the wider wins, and bf16 with f16 gives f32.
[[nodiscard]] constexpr DType promote_types(DType a, DType b) noexcept {
  if (a == b || b == DType::kBool) return a;
  if (a == DType::kBool) return b;
  if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
  if (dtype_size(a) != dtype_size(b)) return dtype_size(a) > dtype_size(b) ? a : b;
  // Same size, different types: u8 and s8, or bf16 and f16.
  return is_floating(a) ? DType::kFloat32 : DType::kInt16;
}

}  // namespace axle
