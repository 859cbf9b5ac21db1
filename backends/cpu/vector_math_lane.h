// backends/cpu: the lane algorithms of vector_math.h, written once over a small set of vector
// operations that each path supplies (V: a lane type with fma, floor, min, max, ...), so the
// scalar, AVX2 and AVX-512 paths compute the same bits. Included only by the vector_math files;
// everything here is a template instantiated with each file's own types.
#pragma once

#include "axle/backends/cpu/vector_function.h"

namespace axle::cpu::vector_math_detail {

// Cephes's expf constants, as Eigen's pexp_float.
inline constexpr float kExpHigh = 88.72283935546875f;  // exp(x) overflows f32 above
inline constexpr float kExpLow = -104.0f;              // exp(x) rounds to 0 below
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2High = -0.693359375f;
inline constexpr float kLn2Low = 2.12194440e-4f;
inline constexpr float kExpP0 = 1.9875691500e-4f;
inline constexpr float kExpP1 = 1.3981999507e-3f;
inline constexpr float kExpP2 = 8.3334519073e-3f;
inline constexpr float kExpP3 = 4.1665795894e-2f;
inline constexpr float kExpP4 = 1.6666665459e-1f;
inline constexpr float kExpP5 = 5.0000001201e-1f;

/// exp(x) per lane with the operations of Ops (see vector_math_avx512.cpp): clamp, reduce by
/// m ln 2 with m = floor(x log2 e + 1/2), the polynomial, then y 2^m, rounded once (m down to
/// -150 reaches the subnormals): by Ops::scalef where the path has it, else as two scalings.
/// Without kEdges, the value at the clamp stands for x past it: the same 0 below kExpLow, but a
/// finite value for NaN and above kExpHigh (gelu's backward, whose argument is -x^2 / 2 and whose
/// result takes NaN from x itself).
template <class Ops, class V, bool kEdges = true>
[[gnu::always_inline]] inline V exp_lanes(V x) {
  const V clamped = Ops::min(Ops::max(x, Ops::set(kExpLow)), Ops::set(kExpHigh));
  const V m = Ops::floor(Ops::fma(clamped, Ops::set(kLog2e), Ops::set(0.5f)));
  V r = Ops::fma(m, Ops::set(kLn2High), clamped);
  r = Ops::fma(m, Ops::set(kLn2Low), r);
  const V r2 = Ops::mul(r, r);
  const V r3 = Ops::mul(r2, r);
  V y = Ops::fma(Ops::set(kExpP0), r, Ops::set(kExpP1));
  V y1 = Ops::fma(Ops::set(kExpP3), r, Ops::set(kExpP4));
  const V y2 = Ops::add(r, Ops::set(1.0f));
  y = Ops::fma(y, r, Ops::set(kExpP2));
  y1 = Ops::fma(y1, r, Ops::set(kExpP5));
  y = Ops::fma(y, r3, y1);
  y = Ops::fma(y, r2, y2);
  if constexpr (requires { Ops::scalef(y, m); }) {
    // y 2^m rounded once (AVX-512's vscalefps): the bits of the two scalings below, in one step.
    y = Ops::scalef(y, m);
  } else {
    // 2^m = 2^half * 2^(m - half), both normal for m in [-150, 128]: the first scaling is
    // exact, the second rounds once (only a subnormal result rounds).
    const V half = Ops::floor(Ops::mul(m, Ops::set(0.5f)));
    y = Ops::mul(Ops::mul(y, Ops::pow2(half)), Ops::pow2(Ops::sub(m, half)));
  }
  if constexpr (!kEdges) return y;
  return Ops::fix_exp_edges(x, y);
}

// Eigen's generic_fast_erf_float: erf(x) = x p(x^2) / q(x^2) with x clamped to [-4, 4].
inline constexpr float kErfAlpha1 = -1.60960333262415e-02f;
inline constexpr float kErfAlpha3 = -2.95459980854025e-03f;
inline constexpr float kErfAlpha5 = -7.34990630326855e-04f;
inline constexpr float kErfAlpha7 = -5.69250639462346e-05f;
inline constexpr float kErfAlpha9 = -2.10102402082508e-06f;
inline constexpr float kErfAlpha11 = 2.77068142495902e-08f;
inline constexpr float kErfAlpha13 = -2.72614225801306e-10f;
inline constexpr float kErfBeta0 = -1.42647390514189e-02f;
inline constexpr float kErfBeta2 = -7.37332916720468e-03f;
inline constexpr float kErfBeta4 = -1.68282697438203e-03f;
inline constexpr float kErfBeta6 = -2.13374055278905e-04f;
inline constexpr float kErfBeta8 = -1.45660718464996e-05f;
inline constexpr float kInvSqrt2 = 0.70710678118654752440f;

/// erf(x) per lane (NaN for NaN; with kNaN false, erf(4) for NaN).
template <class Ops, class V, bool kNaN = true>
[[gnu::always_inline]] inline V erf_lanes(V a) {
  const V x = Ops::max(Ops::min(a, Ops::set(4.0f)), Ops::set(-4.0f));
  const V x2 = Ops::mul(x, x);
  V p = Ops::fma(x2, Ops::set(kErfAlpha13), Ops::set(kErfAlpha11));
  p = Ops::fma(x2, p, Ops::set(kErfAlpha9));
  p = Ops::fma(x2, p, Ops::set(kErfAlpha7));
  p = Ops::fma(x2, p, Ops::set(kErfAlpha5));
  p = Ops::fma(x2, p, Ops::set(kErfAlpha3));
  p = Ops::fma(x2, p, Ops::set(kErfAlpha1));
  p = Ops::mul(x, p);
  V q = Ops::fma(x2, Ops::set(kErfBeta8), Ops::set(kErfBeta6));
  q = Ops::fma(x2, q, Ops::set(kErfBeta4));
  q = Ops::fma(x2, q, Ops::set(kErfBeta2));
  q = Ops::fma(x2, q, Ops::set(kErfBeta0));
  if constexpr (!kNaN) return Ops::div(p, q);
  return Ops::keep_nan(a, Ops::div(p, q));
}

/// 0.5 x (1 + erf(x / sqrt 2)) per lane, in the order Eigen evaluates it.
template <class Ops, class V>
[[gnu::always_inline]] inline V gelu_lanes(V x) {
  const V e = erf_lanes<Ops>(Ops::mul(x, Ops::set(kInvSqrt2)));
  return Ops::mul(Ops::mul(Ops::set(0.5f), x), Ops::add(Ops::set(1.0f), e));
}

inline constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

/// gelu's derivative times g per lane: g (Phi(x) + x phi(x)) with Phi(x) = (1 + erf(x / sqrt 2))
/// / 2 and phi(x) = exp(-x^2 / 2) / sqrt(2 pi), in the order PyTorch's GeluBackward evaluates it.
/// A NaN x reaches the result through x phi(x), so erf and exp skip their NaN and overflow
/// checks (the bits are those with them: x's NaN, and 0 for phi past the clamp).
template <class Ops, class V>
[[gnu::always_inline]] inline V gelu_backward_lanes(V g, V x) {
  const V e = erf_lanes<Ops, V, false>(Ops::mul(x, Ops::set(kInvSqrt2)));
  const V cdf = Ops::mul(Ops::set(0.5f), Ops::add(Ops::set(1.0f), e));
  const V pdf = Ops::mul(exp_lanes<Ops, V, false>(Ops::mul(Ops::mul(x, x), Ops::set(-0.5f))),
                         Ops::set(kInvSqrt2Pi));
  return Ops::mul(g, Ops::fma(x, pdf, cdf));
}

template <class Ops, class V>
V function_lanes(VectorFunction f, V x) {
  switch (f) {
    case VectorFunction::kExp:
      return exp_lanes<Ops>(x);
    case VectorFunction::kErf:
      return erf_lanes<Ops>(x);
    case VectorFunction::kGelu:
      return gelu_lanes<Ops>(x);
  }
  return x;
}

}  // namespace axle::cpu::vector_math_detail
