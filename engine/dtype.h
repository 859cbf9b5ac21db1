// engine: element types, shared by the graph (what a tensor holds) and the backends (what a
// buffer holds).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace axle {

/// Element type of a tensor or buffer. libtorch's names (kFloat32 or kFloat, kFloat64 or
/// kDouble, kBFloat16, kInt32 or kInt, kInt64 or kLong, kBool) name the same values, here and
/// as constants of namespace axle (axle::kFloat32, as torch::kFloat32).
enum class DType : uint8_t {
  kF32,
  kF64,
  kBF16,
  kI32,
  kI64,
  kBool,
  kFloat32 = kF32,
  kFloat = kF32,
  kFloat64 = kF64,
  kDouble = kF64,
  kBFloat16 = kBF16,
  kInt32 = kI32,
  kInt = kI32,
  kInt64 = kI64,
  kLong = kI64,
};

inline constexpr DType kFloat32 = DType::kF32;
inline constexpr DType kFloat = DType::kF32;
inline constexpr DType kFloat64 = DType::kF64;
inline constexpr DType kDouble = DType::kF64;
inline constexpr DType kBFloat16 = DType::kBF16;
inline constexpr DType kInt32 = DType::kI32;
inline constexpr DType kInt = DType::kI32;
inline constexpr DType kInt64 = DType::kI64;
inline constexpr DType kLong = DType::kI64;
inline constexpr DType kBool = DType::kBool;

inline constexpr int kNumDTypes = 6;

/// Bytes per element.
[[nodiscard]] constexpr std::size_t dtype_size(DType t) noexcept {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF64:
      return 8;
    case DType::kBF16:
      return 2;
    case DType::kI32:
      return 4;
    case DType::kI64:
      return 8;
    case DType::kBool:
      return 1;
  }
  return 0;
}

/// Short name as IR dumps print it (XLA's spelling): f32, f64, bf16, s32, s64, pred.
[[nodiscard]] constexpr std::string_view dtype_name(DType t) noexcept {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "s32";
    case DType::kI64:
      return "s64";
    case DType::kBool:
      return "pred";
  }
  return "?";
}

[[nodiscard]] constexpr bool is_floating(DType t) noexcept {
  return t == DType::kF32 || t == DType::kF64 || t == DType::kBF16;
}
[[nodiscard]] constexpr bool is_integral(DType t) noexcept {
  return t == DType::kI32 || t == DType::kI64;
}

/// The type two operands are computed in, as PyTorch promotes tensors of equal standing:
/// bool < integers < floating point, wider wins; bf16 with f32 gives f32.
[[nodiscard]] constexpr DType promote_types(DType a, DType b) noexcept {
  if (a == b) return a;
  auto rank = [](DType t) {
    switch (t) {
      case DType::kBool:
        return 0;
      case DType::kI32:
        return 1;
      case DType::kI64:
        return 2;
      case DType::kBF16:
        return 3;
      case DType::kF32:
        return 4;
      case DType::kF64:
        return 5;
    }
    return 0;
  };
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace axle
