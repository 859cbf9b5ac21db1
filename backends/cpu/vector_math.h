// backends/cpu: float math for kernels' inner loops, vectorised on the instruction set isa.h chose
// (vector_math_avx2.cpp, vector_math_avx512.cpp) with one lane algorithm, so every path (and the
// scalar one) gives the same bits.
#pragma once

#include <cstdint>

namespace axle::cpu {

/// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new values. exp is Cephes's
/// (Eigen's pexp: a range reduction by ln 2 and a degree-6 polynomial, about an ulp from the
/// exact value): exactly 0 below -104, +inf above 88.7228, NaN for NaN. The sum runs over 16
/// lanes (element i in lane i % 16), then the lanes pairwise.
float exp_shifted_sum(float* x, int64_t n, float shift);

/// exp_shifted_sum over `rows` rows of n values (row stride ld), row r shifted by shifts[r], its
/// sum into sums[r] (when sums is not null): the rows interleave on the vector units.
void exp_shifted_rows(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                      float* sums);

/// Elementwise functions of f32 arrays on vector_math's kernels.
enum class VectorFunction : uint8_t {
  kExp,   ///< as exp_shifted_sum's exp
  kErf,   ///< Eigen's rational approximation (within a few ulps of erff; exactly +-1 past 4)
  kGelu,  ///< 0.5 x (1 + erf(x / sqrt 2)), as Eigen evaluates that expression
};

/// out[i] = f(x[i]) for i < n; out may be x.
void map_f32(VectorFunction f, const float* x, float* out, int64_t n);

namespace vector_math_detail {
/// The paths (vector_math.cpp dispatches).
void map_f32_avx2(VectorFunction f, const float* x, float* out, int64_t n);
void map_f32_avx512(VectorFunction f, const float* x, float* out, int64_t n);
void exp_shifted_rows_avx2(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                           float* sums);
void exp_shifted_rows_avx512(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                             float* sums);
}  // namespace vector_math_detail

}  // namespace axle::cpu
