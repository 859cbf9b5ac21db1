// Test helper for the autograd tests: checks the gradients backward() traces for a function of
// some tensors against central finite differences, everything executed end to end on the CPU
// backend in f64. The function's result is reduced to a scalar loss sum(f(x) * w) with a fixed
// random weight w, so every element of the result's gradient differs (a plain sum would hide a
// permuted or mis-broadcast gradient).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <sstream>
#include <string>
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

/// One argument of the checked function: host values, and whether to check its gradient.
struct GradArg {
  Shape shape;
  std::vector<double> values;
  DType dtype = DType::kFloat64;
  bool differentiable = true;
};

/// A differentiable argument of `shape` with values uniform in [lo, hi) (from `rng`).
inline GradArg random_arg(std::mt19937& rng, const Shape& shape, double lo = -2, double hi = 2) {
  std::uniform_real_distribution<double> dist(lo, hi);
  GradArg arg{shape, {}};
  for (int64_t i = 0; i < shape.numel(); ++i) arg.values.push_back(dist(rng));
  return arg;
}

/// As random_arg, with every |value| >= `gap` (keeps kinks such as relu's and abs' out of reach
/// of the finite differences).
inline GradArg away_from_zero(std::mt19937& rng, const Shape& shape, double gap = 0.1) {
  GradArg arg = random_arg(rng, shape);
  for (double& v : arg.values) v = v < 0 ? std::min(v, -gap) : std::max(v, gap);
  return arg;
}

/// An integer argument (an index) that takes no gradient.
inline GradArg index_arg(const Shape& shape, std::vector<double> values) {
  return {shape, std::move(values), DType::kInt64, false};
}

/// A pred argument (a condition) that takes no gradient.
inline GradArg mask_arg(std::mt19937& rng, const Shape& shape) {
  std::bernoulli_distribution coin(0.5);
  GradArg arg{shape, {}, DType::kBool, false};
  for (int64_t i = 0; i < shape.numel(); ++i) arg.values.push_back(coin(rng) ? 1 : 0);
  return arg;
}

struct GradCheckOptions {
  double eps = 1e-6;   ///< finite-difference step
  double atol = 1e-6;  ///< |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-5;
};

using GradFunction = std::function<Tensor(const std::vector<Tensor>&)>;

inline Tensor make_arg(const GradArg& arg) {
  const Tensor t = tensor(arg.values, arg.shape);  // f64 on the device
  return arg.dtype == DType::kFloat64 ? t : cast(t, arg.dtype);
}

/// sum(f(args) * weight), built without recording.
inline double loss_value(const GradFunction& f, const std::vector<GradArg>& args,
                         const Tensor& weight) {
  NoGradGuard no_grad;
  std::vector<Tensor> tensors;
  for (const GradArg& arg : args) tensors.push_back(make_arg(arg));
  const Tensor out = f(tensors);
  return sum(mul(out, cast(weight, out.dtype()))).item();
}

/// Checks every differentiable argument's gradient against central differences.
inline ::testing::AssertionResult gradients_match(const GradFunction& f, std::vector<GradArg> args,
                                                  GradCheckOptions options = {}) {
  std::vector<Tensor> tensors;
  for (const GradArg& arg : args) {
    tensors.push_back(make_arg(arg));
    if (arg.differentiable) tensors.back().requires_grad_();
  }
  const Tensor out = f(tensors);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<double> dist(-1, 1);
  std::vector<double> w(static_cast<std::size_t>(out.numel()));
  for (double& v : w) v = dist(rng);
  const Tensor weight = tensor(w, out.shape());
  sum(mul(out, cast(weight, out.dtype()))).backward();

  std::ostringstream failures;
  int bad = 0;
  for (std::size_t a = 0; a < args.size(); ++a) {
    if (!args[a].differentiable) continue;
    const Tensor grad = tensors[a].grad();
    std::vector<double> analytic(args[a].values.size(), 0.0);
    if (grad.defined()) {
      if (!(grad.shape() == args[a].shape) || grad.dtype() != args[a].dtype) {
        return ::testing::AssertionFailure()
               << "argument " << a << ": gradient is " << dtype_name(grad.dtype())
               << grad.shape().to_string() << ", expected " << dtype_name(args[a].dtype)
               << args[a].shape.to_string();
      }
      analytic = grad.to_vector<double>();
    }
    for (std::size_t i = 0; i < analytic.size(); ++i) {
      std::vector<GradArg> plus = args, minus = args;
      plus[a].values[i] += options.eps;
      minus[a].values[i] -= options.eps;
      const double numeric =
          (loss_value(f, plus, weight) - loss_value(f, minus, weight)) / (2 * options.eps);
      if (std::abs(analytic[i] - numeric) <= options.atol + options.rtol * std::abs(numeric)) {
        continue;
      }
      if (++bad <= 8) {
        failures << "\n  argument " << a << " element " << i << ": backward " << analytic[i]
                 << ", finite differences " << numeric << (grad.defined() ? "" : " (no grad)");
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " gradient elements differ" << failures.str();
}

/// Starts each test on a fresh runtime, so tests do not share compiled programs.
class Autograd : public ::testing::Test {
 protected:
  void SetUp() override { fresh_runtime(); }
};

}  // namespace axle::testing
