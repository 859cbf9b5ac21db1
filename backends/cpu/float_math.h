// backends/cpu: the floating-point math of unary kernels as Eigen array expressions, shared by the
// elementwise kernels and fused kernels so that both compute the same bits.
#pragma once

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include <cmath>
#include <numbers>
#include <optional>
#include <type_traits>

#include "axle/backends/cpu/vector_math.h"
#include "axle/backends/executable.h"

namespace axle::cpu {

/// The unary kernels whose f32 math runs on vector_math.h's kernels rather than Eigen's (the
/// instruction set's widest vectors, the same bits at every position and on every path): exp,
/// erf and gelu's erf form. f64 stays on Eigen.
[[nodiscard]] constexpr std::optional<VectorFunction> vector_function(Kernel k, bool tanh_form) {
  if (k == Kernel::kExp) return VectorFunction::kExp;
  if (k == Kernel::kErf) return VectorFunction::kErf;
  if (k == Kernel::kGelu && !tanh_form) return VectorFunction::kGelu;
  return std::nullopt;
}

/// The float function K (AXLE_FLOAT_FUNCTIONS) of `v`. Expressions hold arrays by reference
/// (Eigen Maps by value), so callers evaluate them before `v` goes.
template <Kernel K>
auto transcendental(const auto& v) {
  using C = typename std::decay_t<decltype(v)>::Scalar;
  if constexpr (K == Kernel::kExp) {
    return v.exp();
  } else if constexpr (K == Kernel::kLog) {
    return v.log();
  } else if constexpr (K == Kernel::kSqrt) {
    return v.sqrt();
  } else if constexpr (K == Kernel::kRsqrt) {
    return v.sqrt().inverse();  // not Eigen's rsqrt(), which may use the approximate instruction
  } else if constexpr (K == Kernel::kTanh) {
    return v.tanh();
  } else if constexpr (K == Kernel::kSigmoid) {
    return (C(1) + (-v).exp()).inverse();
  } else if constexpr (K == Kernel::kSin) {
    return v.sin();
  } else if constexpr (K == Kernel::kCos) {
    return v.cos();
  } else if constexpr (K == Kernel::kErf) {
    return erf(v);
  } else if constexpr (K == Kernel::kLog1p) {
    return v.log1p();
  } else if constexpr (K == Kernel::kSoftplus) {
    return (v > C(20)).select(v, v.exp().log1p());  // torch's default beta 1 and threshold 20
  } else {
    static_assert(K == Kernel::kExp, "a float function without its math here");
  }
}

/// gelu, exact (erf) and tanh forms. In f32 the erf is Eigen's vectorised rational
/// approximation (a couple of ulps from erff over [-4, 4], exactly +-1 outside), which keeps the
/// whole expression in vector registers; f64 calls std::erf.
auto gelu_erf(const auto& v) {
  using C = typename std::decay_t<decltype(v)>::Scalar;
  if constexpr (std::is_same_v<C, float>) {
    return C(0.5) * v * (C(1) + (v * C(1 / std::numbers::sqrt2)).erf());
  } else {
    return C(0.5) * v *
           (C(1) + (v * C(1 / std::numbers::sqrt2)).unaryExpr([](C t) { return std::erf(t); }));
  }
}
auto gelu_tanh(const auto& v) {
  using C = typename std::decay_t<decltype(v)>::Scalar;
  const C k = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2 / pi)
  return C(0.5) * v * (C(1) + (k * (v + C(0.044715) * v.cube())).tanh());
}

/// gelu's derivative times the gradient (kGeluBackward) over n elements, out[i] = g[i] * d/dx
/// gelu(x[i]); out may be g or x. f32's erf form runs on vector_math's lanes; the other forms
/// evaluate each element as PyTorch's GeluBackward kernel writes it.
template <class C>
void gelu_backward_values(const C* g, const C* x, C* out, int64_t n, bool tanh_form) {
  if constexpr (std::is_same_v<C, float>) {
    if (!tanh_form) return gelu_backward_f32(g, x, out, n);
  }
  if (tanh_form) {
    const C beta = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2 / pi)
    const C kappa = C(0.044715);
    for (int64_t i = 0; i < n; ++i) {
      const C v = x[i];
      const C t = std::tanh(beta * (v + kappa * v * v * v));
      const C left = C(0.5) * v;
      const C left_derivative = C(0.5) * (C(1) + t);
      const C right_derivative = left * (C(1) - t * t) * beta * (C(1) + C(3) * kappa * v * v);
      out[i] = g[i] * (left_derivative + right_derivative);
    }
    return;
  }
  const C alpha = C(1 / std::numbers::sqrt2);
  const C inv_sqrt_2pi = C(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  for (int64_t i = 0; i < n; ++i) {
    const C v = x[i];
    const C cdf = C(0.5) * (C(1) + std::erf(v * alpha));
    const C pdf = std::exp(v * v * C(-0.5)) * inv_sqrt_2pi;
    out[i] = g[i] * (cdf + v * pdf);
  }
}

}  // namespace axle::cpu
