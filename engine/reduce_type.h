// engine: how a collective combines its members' values, shared by the graph (the traced op's
// attribute) and the backends (the kernel's).
#pragma once

#include <cstdint>
#include <string_view>

namespace axle {

/// How all_reduce and reduce_scatter combine the replicas' elements, as torch_xla's REDUCE_SUM,
/// REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX. kAnd and kOr take pred tensors;
/// the others any other dtype.
enum class ReduceType : uint8_t {
  kSum,  ///< the sum (REDUCE_SUM)
  kMul,  ///< the product (REDUCE_MUL)
  kAnd,  ///< logical and (REDUCE_AND)
  kOr,   ///< logical or (REDUCE_OR)
  kMin,  ///< the minimum (REDUCE_MIN)
  kMax   ///< the maximum (REDUCE_MAX)
};

/// The number of ReduceType values.
inline constexpr int kNumReduceTypes = 6;

/// "sum", "mul", "and", "or", "min", "max".
[[nodiscard]] constexpr std::string_view reduce_type_name(ReduceType type) noexcept {
  switch (type) {
    case ReduceType::kSum:
      return "sum";
    case ReduceType::kMul:
      return "mul";
    case ReduceType::kAnd:
      return "and";
    case ReduceType::kOr:
      return "or";
    case ReduceType::kMin:
      return "min";
    case ReduceType::kMax:
      return "max";
  }
  return "unknown";
}

}  // namespace axle
