// Helpers for the nn and optim tests: a fixture that restarts the lazy system, host values in
// and out of tensors, tolerance comparisons against double-precision references, and an
// error's message.
#pragma once

#include "tests/error_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
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
#include "tests/graph/test_runtime.h"

namespace axle::testing {

/// Starts each test on a fresh runtime of two devices, with known random streams, so tests
/// share no compiled programs, counters or random numbers.
class NnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fresh_runtime(2);
    set_rng_state(1234, Device{0});
    set_rng_state(5678, Device{1});
  }
};

inline int64_t count(const char* name) { return counter_value(name).value_or(0); }

/// Samples metric `name` has taken so far.
inline int64_t samples(const char* name) {
  const auto data = metric_data(name);
  return data ? data->total_samples : 0;
}

/// `n` values uniform in [lo, hi) from `rng`.
inline std::vector<double> uniform_values(std::mt19937& rng, int64_t n, double lo = -1,
                                          double hi = 1) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& e : v) e = dist(rng);
  return v;
}

/// The values rounded to f32, as double (what an f32 tensor made from them holds).
inline std::vector<double> as_f32(std::vector<double> v) {
  for (double& e : v) e = static_cast<double>(static_cast<float>(e));
  return v;
}

inline Tensor f64_tensor(const std::vector<double>& v, const Shape& shape, Device on = {}) {
  return tensor(v, shape, on);
}

inline Tensor f32_tensor(const std::vector<double>& v, const Shape& shape, Device on = {}) {
  std::vector<float> f(v.begin(), v.end());
  return tensor(f, shape, on);
}

inline std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

/// Every |actual - expected| <= atol + rtol * |expected|, else the first few that are not.
inline ::testing::AssertionResult all_close(const std::vector<double>& actual,
                                            const std::vector<double>& expected,
                                            double atol = 1e-12, double rtol = 1e-12) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << actual.size() << " values, " << expected.size() << " expected";
  }
  std::ostringstream failures;
  int bad = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const double diff = std::abs(actual[i] - expected[i]);
    if (diff <= atol + rtol * std::abs(expected[i])) continue;
    if (++bad <= 8) {
      failures << "\n  element " << i << ": " << actual[i] << ", expected " << expected[i];
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " elements differ" << failures.str();
}

/// "<this file's name>:<line>", as error messages name the caller's line.
inline std::string at_line(std::string_view file, int line) {
  const std::size_t slash = file.rfind('/');
  return std::string(slash == std::string_view::npos ? file : file.substr(slash + 1)) + ":" +
         std::to_string(line);
}

}  // namespace axle::testing
