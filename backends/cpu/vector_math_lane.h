// backends/cpu: the lane algorithms of vector_math.h, written once over a small set of vector
// operations that each path supplies (V: a lane type with fma, floor, min, max, ...), so the
// scalar, AVX2 and AVX-512 paths compute the same bits. Included only by the vector_math files;
// everything here is a template instantiated with each file's own types.
#pragma once

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
/// m ln 2 with m = floor(x log2 e + 1/2), the polynomial, then y 2^m as two exact scalings (m
/// down to -150 reaches the subnormals).
template <class Ops, class V>
V exp_lanes(V x) {
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
  // 2^m = 2^half * 2^(m - half), both normal for m in [-150, 128].
  const V half = Ops::floor(Ops::mul(m, Ops::set(0.5f)));
  y = Ops::mul(Ops::mul(y, Ops::pow2(half)), Ops::pow2(Ops::sub(m, half)));
  return Ops::fix_exp_edges(x, y);
}

}  // namespace axle::cpu::vector_math_detail
