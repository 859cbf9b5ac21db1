// Test helpers for the graph ops' value tests (tests/graph/ops): random inputs, tensors made from
// reference arrays, the comparison of an op's result with its reference, and a fixture that
// starts each test on a fresh runtime. The ops run end to end on the runtime the program links
// (tests/graph/test_runtime.h): the reference evaluator or the devices.
//
// Tolerances: f32 results 1e-5 relative + 1e-6 absolute, f64 1e-12, bf16 1e-2 relative. For sums
// of products (matmul, linear, conv2d) "relative" is to the sum of |terms|, the size the rounding
// error of any summation order scales with; plain |result| would reject correct kernels wherever
// the terms cancel.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <random>
#include <sstream>
#include <utility>
#include <vector>

#include "axle/engine/metrics.h"
#include "axle/graph/autograd.h"
#include "axle/graph/collectives.h"
#include "axle/graph/nn/layers.h"
#include "axle/graph/nn/loss.h"
#include "axle/graph/nn/module.h"
#include "axle/graph/ops.h"
#include "axle/graph/optim/optimizer.h"
#include "axle/graph/tensor.h"
#include "tests/graph/ops/reference.h"
#include "tests/graph/test_runtime.h"
#include "tests/round_to.h"

namespace axle::testing {

// f rounded to bf16's 8 significant bits, to nearest even.
inline double to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  return std::bit_cast<float>((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// Values uniform in [lo, hi), rounded to `dtype` so the reference sees what the device holds.
inline Ref random_ref(std::mt19937& rng, Dims dims, double lo, double hi,
                      DType dtype = DType::kFloat32) {
  std::uniform_real_distribution<double> dist(lo, hi);
  Ref x{std::move(dims), {}};
  for (int64_t i = count(x.dims); i > 0; --i) x.values.push_back(round_to(dtype, dist(rng)));
  return x;
}

// Integers uniform in [lo, hi].
inline Ref random_ints(std::mt19937& rng, Dims dims, int64_t lo, int64_t hi) {
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  Ref x{std::move(dims), {}};
  for (int64_t i = count(x.dims); i > 0; --i) x.values.push_back(static_cast<double>(dist(rng)));
  return x;
}

inline Dims random_dims(std::mt19937& rng, int rank, int64_t max_size = 5) {
  std::uniform_int_distribution<int64_t> dist(1, max_size);
  Dims dims;
  for (int i = 0; i < rank; ++i) dims.push_back(dist(rng));
  return dims;
}

template <class T>
Tensor tensor_of(const Ref& x) {
  std::vector<T> values;
  for (double v : x.values) values.push_back(static_cast<T>(v));
  return tensor(values, shape_of(x.dims));
}

// x on the device in `dtype`; bool and bf16 have no host constructor, so they come from a cast.
inline Tensor on_device(const Ref& x, DType dtype = DType::kFloat32) {
  switch (dtype) {
    case DType::kFloat32:
      return tensor_of<float>(x);
    case DType::kFloat64:
      return tensor_of<double>(x);
    case DType::kInt32:
      return tensor_of<int32_t>(x);
    case DType::kInt64:
      return tensor_of<int64_t>(x);
    case DType::kBFloat16:
    case DType::kBool:
    case DType::kFloat16:
      return cast(tensor_of<float>(x), dtype);
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
      return cast(tensor_of<int32_t>(x), dtype);
  }
  return {};
}

// ---- Comparison ------------------------------------------------------------------------------

struct Tolerance {
  double rel;
  double abs;
};
inline constexpr Tolerance kExact{0, 0};
inline constexpr Tolerance kTolF32{1e-5, 1e-6};
inline constexpr Tolerance kTolF64{1e-12, 1e-14};
inline constexpr Tolerance kTolBf16{1e-2, 1e-6};

// Passes when t has `dtype`, want's dims, and every element within tol.abs + tol.rel * size,
// size being |want| or, when larger, the element's `scale` (see the top of this file).
inline ::testing::AssertionResult matches(const Tensor& t, DType dtype, const Ref& want,
                                          Tolerance tol, const std::vector<double>& scale = {}) {
  if (t.dtype() != dtype) {
    return ::testing::AssertionFailure()
           << "dtype is " << dtype_name(t.dtype()) << ", expected " << dtype_name(dtype);
  }
  if (!(t.shape() == shape_of(want.dims))) {
    return ::testing::AssertionFailure() << "shape is " << t.shape().to_string() << ", expected "
                                         << shape_of(want.dims).to_string();
  }
  const std::vector<double> got = t.to_vector<double>();
  if (got.size() != want.values.size()) {
    return ::testing::AssertionFailure()
           << "read " << got.size() << " elements, expected " << want.values.size();
  }
  std::ostringstream detail;
  detail << std::setprecision(10);
  int64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double size = std::max(std::abs(want.values[i]), scale.empty() ? 0.0 : scale[i]);
    if (std::abs(got[i] - want.values[i]) <= tol.abs + tol.rel * size) continue;
    if (++bad <= 5)
      detail << "\n  element " << i << ": got " << got[i] << ", want " << want.values[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << got.size() << " elements of " << dtype_name(dtype)
         << shape_of(want.dims).to_string() << " differ (rel " << tol.rel << ", abs " << tol.abs
         << ")" << detail.str();
}

inline void fresh_system() { fresh_runtime(); }

class OpsValue : public ::testing::Test {
 protected:
  void SetUp() override { fresh_system(); }
};

}  // namespace axle::testing
