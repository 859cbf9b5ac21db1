// engine: element types, shared by the graph (what a tensor holds) and the backends (what a
// buffer holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace axle {

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
  kFloat = kFloat32,   ///< kFloat32, as torch::kFloat.
  kDouble = kFloat64,  ///< kFloat64, as torch::kDouble.
  kInt = kInt32,       ///< kInt32, as torch::kInt.
  kLong = kInt64,      ///< kInt64, as torch::kLong.
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

/// The number of distinct dtypes (DType without its aliases).
inline constexpr int kNumDTypes = 6;

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
  }
  return 0;
}

/// Short name as IR dumps print it (XLA's spelling): f32, f64, bf16, s32, s64, pred.
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
  }
  return "?";
}

/// Whether `t` is f32, f64 or bf16.
[[nodiscard]] constexpr bool is_floating(DType t) noexcept {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16;
}
/// Whether `t` is an integer type, s32 or s64 (pred is not).
[[nodiscard]] constexpr bool is_integral(DType t) noexcept {
  return t == DType::kInt32 || t == DType::kInt64;
}

/// The type two operands are computed in, as PyTorch promotes tensors of equal standing:
/// bool < integers < floating point, wider wins; bf16 with f32 gives f32.
[[nodiscard]] constexpr DType promote_types(DType a, DType b) noexcept {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::kBool:
        return 0;
      case DType::kInt32:
        return 1;
      case DType::kInt64:
        return 2;
      case DType::kBFloat16:
        return 3;
      case DType::kFloat32:
        return 4;
      case DType::kFloat64:
        return 5;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace axle
