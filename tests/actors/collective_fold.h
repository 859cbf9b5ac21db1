// The reference for the collectives tests: one element of a reduction, as plain code.
#pragma once

#include <algorithm>

#include "axle/engine/reduce_type.h"

namespace axle::testing {

/// `a` combined with `b` by `type`; folding the members' values left to right, in group order,
/// gives what an all-reduce must.
template <class T>
T fold(ReduceType type, T a, T b) {
  switch (type) {
    case ReduceType::kSum:
      return a + b;
    case ReduceType::kMul:
      return a * b;
    case ReduceType::kMin:
      return std::min(a, b);
    case ReduceType::kMax:
      return std::max(a, b);
    case ReduceType::kAnd:
      return a && b;
    case ReduceType::kOr:
      return a || b;
  }
  return a;
}

}  // namespace axle::testing
