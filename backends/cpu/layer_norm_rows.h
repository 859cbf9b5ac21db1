// backends/cpu: layer_norm's row arithmetic (layer_norm.cpp): a row's statistics, its
// normalisation and its gradient, in double. Included by layer_norm.cpp (compiled for the
// library's target) and by layer_norm_avx512.cpp, which compiles the same code with the AVX-512
// flags: the same operations on each element and the same sums in the same order (the chains
// below are explicit vectors of four; only the element loops widen), so both give the same bits.
// Private to backends/cpu.
#pragma once

#include <immintrin.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace axle::cpu {

// The f32 rows compiled with the AVX-512 flags (layer_norm_avx512.cpp; only where cpuid reports
// AVX-512): rows [first, last) of `width` values, as layer_norm_detail's functions of those names.
void avx512_normalize_rows(const float* x, float* y, int64_t first, int64_t last, int64_t width,
                           double eps);
void avx512_normalize_rows_backward(const float* g, const float* w, const float* x, const float* r,
                                    float* dx, int64_t first, int64_t last, int64_t width,
                                    double eps, float* weighted_row);

namespace layer_norm_detail {
// Each including file its own copies: the linker must not merge code compiled for AVX-512 into
// a caller compiled without it (see gemm_kernels.h).
namespace {

using Double4 = double __attribute__((vector_size(32)));
using Float4 = float __attribute__((vector_size(16)));

// Four consecutive values from p, in double.
template <class C>
Double4 load4(const C* p) {
  if constexpr (std::is_same_v<C, float>) {
#if defined(__AVX__)
    // One widening load: a Float4 converted with __builtin_convertvector took four instructions
    // (two halves widened and joined), the most of a row's passes.
    return Double4(_mm256_cvtps_pd(_mm_loadu_ps(p)));
#else
    Float4 f;
    std::memcpy(&f, p, sizeof f);
    return __builtin_convertvector(f, Double4);
#endif
  } else {
    Double4 d;
    std::memcpy(&d, p, sizeof d);
    return d;
  }
}

// kSums sums over i < n at once: four(i) gives elements i..i+3's terms (a Double4 per sum), one(i)
// element i's alone (the tail). Four independent chains of four lanes each, added in a fixed
// order, so the bits do not depend on the thread or the row's place.
template <int kSums, class Four, class One>
std::array<double, kSums> row_sums(int64_t n, Four&& four, One&& one) {
  std::array<Double4, kSums> chain[4] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      const std::array<Double4, kSums> v = four(i + 4 * c);
#pragma GCC unroll 2
      for (int s = 0; s < kSums; ++s) chain[c][s] += v[s];
    }
  }
  std::array<double, kSums> tail{};
  for (; i < n; ++i) {
    const std::array<double, kSums> v = one(i);
    for (int s = 0; s < kSums; ++s) tail[s] += v[s];
  }
  std::array<double, kSums> sums{};
  for (int s = 0; s < kSums; ++s) {
    const Double4 v = (chain[0][s] + chain[1][s]) + (chain[2][s] + chain[3][s]);
    sums[s] = ((v[0] + v[2]) + (v[1] + v[3])) + tail[s];
  }
  return sums;
}

// out[i] = f(i) for i < n, in groups of 16 computed into a local array (the trip count known,
// and no overlap with out to rule out, so GCC vectorises them).
template <class C, class F>
void map_row(int64_t n, C* out, F&& f) {
  constexpr int64_t kGroup = 16;
  int64_t i = 0;
  for (; i + kGroup <= n; i += kGroup) {
    C group[kGroup];
    for (int64_t j = 0; j < kGroup; ++j) group[j] = f(i + j);
    for (int64_t j = 0; j < kGroup; ++j) out[i + j] = group[j];
  }
  for (; i < n; ++i) out[i] = f(i);
}

struct RowStats {
  double mean, rstd;
};

template <class C>
RowStats row_stats(const C* x, int64_t n, double eps) {
  const auto count = static_cast<double>(n);
  const double mean = row_sums<1>(
                          n, [&](int64_t i) { return std::array{load4(x + i)}; },
                          [&](int64_t i) { return std::array{double{x[i]}}; })[0] /
                      count;
  const double squares = row_sums<1>(
      n,
      [&](int64_t i) {
        const Double4 d = load4(x + i) - mean;
        return std::array{d * d};
      },
      [&](int64_t i) {
        const double d = double{x[i]} - mean;
        return std::array{d * d};
      })[0];
  return {mean, 1 / std::sqrt(squares / count + eps)};  // biased variance
}

// y = (x - mean) * rstd in double, rounded once: a row far from zero keeps its digits.
template <class C>
void normalize_row(const C* x, C* y, int64_t n, double eps) {
  const RowStats s = row_stats(x, n, eps);
  map_row(n, y, [&](int64_t i) { return static_cast<C>((double{x[i]} - s.mean) * s.rstd); });
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), xhat = (x - mean) * rstd, in double,
// rounded to C, then added to the residual's row r (when not null) in C as a separate add would.
template <class C>
void normalize_row_backward(const C* g, const C* x, const C* r, C* dx, int64_t n, double eps) {
  const RowStats s = row_stats(x, n, eps);
  const auto count = static_cast<double>(n);
  const std::array<double, 2> sums = row_sums<2>(
      n,
      [&](int64_t i) {
        const Double4 grad = load4(g + i);
        return std::array{grad, grad * ((load4(x + i) - s.mean) * s.rstd)};
      },
      [&](int64_t i) {
        const double grad = g[i];
        return std::array{grad, grad * ((double{x[i]} - s.mean) * s.rstd)};
      });
  const double a = sums[0] / count, b = sums[1] / count;
  auto value = [&](int64_t i) {
    const double xhat = (double{x[i]} - s.mean) * s.rstd;
    return static_cast<C>(s.rstd * (double{g[i]} - a - xhat * b));
  };
  if (r) {
    map_row(n, dx, [&](int64_t i) { return C(r[i] + value(i)); });
  } else {
    map_row(n, dx, value);
  }
}

// Rows [first, last) of `width` values: y = normalize(x).
template <class C>
void normalize_rows(const C* x, C* y, int64_t first, int64_t last, int64_t width, double eps) {
  for (int64_t row = first; row < last; ++row) {
    normalize_row(x + row * width, y + row * width, width, eps);
  }
}

// Rows [first, last) of dx, with the weight w (when not null; one value per row element) folded
// into g as the mul's own kernel rounds it (into `weighted_row`, a row's room) and the residual r
// (when not null) added as a separate add would.
template <class C>
void normalize_rows_backward(const C* g, const C* w, const C* x, const C* r, C* dx, int64_t first,
                             int64_t last, int64_t width, double eps, C* weighted_row) {
  for (int64_t row = first; row < last; ++row) {
    const int64_t at = row * width;
    const C* grad = g + at;
    if (w) {
      map_row(width, weighted_row, [&](int64_t i) { return C(grad[i] * w[i]); });
      grad = weighted_row;
    }
    normalize_row_backward(grad, x + at, r ? r + at : nullptr, dx + at, width, eps);
  }
}

}  // namespace
}  // namespace layer_norm_detail
}  // namespace axle::cpu
