// Test helpers for kFused (backends/cpu/fused.cpp): a chain of elementwise steps, run one kernel
// per step as the unfused reference, and a bit-for-bit comparison.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/backends/kernel_test_util.h"

namespace axle::testing {

/// A step reads external operands (>= 0) or earlier steps' results (-1 is step 0, -2 step 1...).
struct Step {
  Kernel kernel;
  int a;
  int b = 0;
  bool tanh_form = false;
};

inline bool is_binary(Kernel k) { return fused_step_arity(k) == 2; }

/// The chain's result at `shape`, one kernel call per step.
inline HostTensor unfused(const std::vector<Step>& steps, const std::vector<HostTensor>& externals,
                          DType dtype, const Shape& shape) {
  std::vector<HostTensor> results;
  auto operand = [&](int ref) { return ref >= 0 ? externals[ref] : results[-ref - 1]; };
  for (const Step& s : steps) {
    std::vector<HostTensor> inputs = {operand(s.a)};
    if (is_binary(s.kernel)) inputs.push_back(operand(s.b));
    std::vector<int64_t> ints;
    if (s.kernel == Kernel::kGelu || s.kernel == Kernel::kGeluBackward) {
      ints = {s.tanh_form ? 1 : 0};
    }
    results.push_back(run_kernel(s.kernel, inputs, dtype, shape, ints));
  }
  return results.back();
}

/// kFused ints for the chain: each step writes its own scratch buffer (the simplest valid
/// allocation), the last one the output unless `last_to_buffer` (a reduction follows).
inline std::vector<int64_t> fused_ints(const std::vector<Step>& steps, bool last_to_buffer) {
  const auto count = static_cast<int64_t>(steps.size());
  std::vector<int64_t> ints = {last_to_buffer ? count : count - 1};
  for (int64_t i = 0; i < count; ++i) {
    const Step& s = steps[static_cast<std::size_t>(i)];
    const int64_t destination = i + 1 == count && !last_to_buffer ? -1 : i;
    ints.insert(ints.end(), {static_cast<int64_t>(s.kernel), destination, s.a,
                             is_binary(s.kernel) ? s.b : 0, s.tanh_form ? 1 : 0});
  }
  return ints;
}

/// The same values bit for bit (any NaN matches any NaN); reports the first five differences.
inline void expect_same_bits(const HostTensor& got, const HostTensor& want) {
  ASSERT_EQ(got.values.size(), want.values.size());
  int shown = 0;
  for (std::size_t i = 0; i < got.values.size(); ++i) {
    if (std::bit_cast<uint64_t>(got.values[i]) != std::bit_cast<uint64_t>(want.values[i]) &&
        !(std::isnan(got.values[i]) && std::isnan(want.values[i]))) {
      ADD_FAILURE() << "element " << i << ": fused " << got.values[i] << ", unfused "
                    << want.values[i];
      if (++shown == 5) return;
    }
  }
}

}  // namespace axle::testing
