// backends/cpu: float math for kernels' inner loops, vectorised on the instruction set isa.h chose
// (vector_math_avx2.cpp, vector_math_avx512.cpp) with one lane algorithm, so every path (and the
// scalar one) gives the same bits.
#pragma once

#include <cstdint>

#include "axle/backends/cpu/vector_function.h"

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

/// out[i] = f(x[i]) for i < n; out may be x.
void map_f32(VectorFunction f, const float* x, float* out, int64_t n);

/// out[i] = g[i] (Phi(x[i]) + x[i] phi(x[i])) for i < n: gelu's (erf form) derivative times the
/// gradient g, with vector_math's erf and exp; out may be g or x.
void gelu_backward_f32(const float* g, const float* x, float* out, int64_t n);
/// map_f32 and gelu_backward_f32 on bf16 values (as their 16 bits), rounded back to bf16: the bits
/// of widen_bf16, the f32 function and narrow_bf16 in turn, with no f32 array in between on the
/// AVX-512 path.
void map_bf16(VectorFunction f, const uint16_t* x, uint16_t* out, int64_t n);
void gelu_backward_bf16(const uint16_t* g, const uint16_t* x, uint16_t* out, int64_t n);
/// bf16 conversions of whole arrays (bf16 as its 16 bits), bit for bit as element.h's widen and
/// narrow: round to nearest even; a NaN keeps its sign and top payload bits, quieted.
void widen_bf16(const uint16_t* x, float* out, int64_t n);
void narrow_bf16(const float* x, uint16_t* out, int64_t n);
/// x[i] = widen(narrow(x[i])) for i < n: f32 values rounded to bf16 precision in place.
void round_to_bf16(float* x, int64_t n);

namespace vector_math_detail {
/// The scalar lane of narrow_bf16 (the paths' tails use it too).
inline uint32_t narrow_bits(uint32_t u) noexcept {
  const bool nan = (u & 0x7fffffffu) > 0x7f800000u;
  return nan ? ((u >> 16) | 0x40u) : ((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
/// The paths (vector_math.cpp dispatches).
void map_f32_avx2(VectorFunction f, const float* x, float* out, int64_t n);
void map_f32_avx512(VectorFunction f, const float* x, float* out, int64_t n);
void gelu_backward_f32_avx2(const float* g, const float* x, float* out, int64_t n);
void gelu_backward_f32_avx512(const float* g, const float* x, float* out, int64_t n);
void exp_shifted_rows_avx2(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                           float* sums);
void exp_shifted_rows_avx512(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                             float* sums);
void widen_bf16_avx2(const uint16_t* x, float* out, int64_t n);
void widen_bf16_avx512(const uint16_t* x, float* out, int64_t n);
void narrow_bf16_avx2(const float* x, uint16_t* out, int64_t n);
/// bf16_instructions: round with AVX512_BF16's vcvtneps2bf16 where it gives the same bits.
void narrow_bf16_avx512(const float* x, uint16_t* out, int64_t n, bool bf16_instructions);
void round_to_bf16_avx2(float* x, int64_t n);
void map_bf16_avx512(VectorFunction f, const uint16_t* x, uint16_t* out, int64_t n,
                     bool bf16_instructions);
void gelu_backward_bf16_avx512(const uint16_t* g, const uint16_t* x, uint16_t* out, int64_t n,
                               bool bf16_instructions);
void round_to_bf16_avx512(float* x, int64_t n);
}  // namespace vector_math_detail

}  // namespace axle::cpu
