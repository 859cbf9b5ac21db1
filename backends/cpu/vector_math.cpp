// backends/cpu: vector_math.h's dispatch and its scalar path (builds without x86 kernels).
#include "axle/backends/cpu/vector_math.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "axle/backends/cpu/isa.h"
#include "axle/backends/cpu/vector_math_lane.h"

namespace axle::cpu {
namespace {

// One lane as a float: the operations exp_lanes needs.
struct ScalarOps {
  static float set(float v) { return v; }
  static float add(float a, float b) { return a + b; }
  static float sub(float a, float b) { return a - b; }
  static float mul(float a, float b) { return a * b; }
  static float fma(float a, float b, float c) { return std::fma(a, b, c); }
  static float min(float a, float b) { return b < a ? b : a; }
  static float max(float a, float b) { return b > a ? b : a; }
  static float floor(float a) { return std::floor(a); }
  static float div(float a, float b) { return a / b; }
  static float keep_nan(float x, float y) { return x != x ? x : y; }
  static float pow2(float e) {  // e integral in [-126, 127]
    return std::bit_cast<float>(static_cast<uint32_t>(static_cast<int32_t>(e) + 127) << 23);
  }
  static float fix_exp_edges(float x, float y) {
    if (x != x) return x;
    if (x > vector_math_detail::kExpHigh) return std::numeric_limits<float>::infinity();
    if (x < vector_math_detail::kExpLow) return 0.0f;
    return y;
  }
};

float exp_shifted_sum_scalar(float* x, int64_t n, float shift) {
  float lanes[16] = {};
  for (int64_t i = 0; i < n; ++i) {
    x[i] = vector_math_detail::exp_lanes<ScalarOps>(x[i] - shift);
    lanes[i % 16] += x[i];
  }
  for (int width = 8; width >= 1; width /= 2) {
    for (int j = 0; j < width; ++j) lanes[j] += lanes[j + width];
  }
  return lanes[0];
}

}  // namespace

void exp_shifted_rows(float* x, int64_t rows, int64_t n, int64_t ld, const float* shifts,
                      float* sums) {
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAvx512:
      return vector_math_detail::exp_shifted_rows_avx512(x, rows, n, ld, shifts, sums);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return vector_math_detail::exp_shifted_rows_avx2(x, rows, n, ld, shifts, sums);
#endif
    default:
      for (int64_t r = 0; r < rows; ++r) {
        const float sum = exp_shifted_sum_scalar(x + r * ld, n, shifts[r]);
        if (sums) sums[r] = sum;
      }
  }
}

void map_f32(VectorFunction f, const float* x, float* out, int64_t n) {
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAvx512:
      return vector_math_detail::map_f32_avx512(f, x, out, n);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return vector_math_detail::map_f32_avx2(f, x, out, n);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = vector_math_detail::function_lanes<ScalarOps>(f, x[i]);
      }
  }
}

void gelu_backward_f32(const float* g, const float* x, float* out, int64_t n) {
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAvx512:
      return vector_math_detail::gelu_backward_f32_avx512(g, x, out, n);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return vector_math_detail::gelu_backward_f32_avx2(g, x, out, n);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) {
        out[i] = vector_math_detail::gelu_backward_lanes<ScalarOps>(g[i], x[i]);
      }
  }
}

// Below AVX-512, bf16 values go through f32 chunks on the stack.
constexpr int64_t kBf16Chunk = 256;

void map_bf16(VectorFunction f, const uint16_t* x, uint16_t* out, int64_t n) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
  if (const CpuIsa isa = cpu_isa(); isa >= CpuIsa::kAvx512) {
    return vector_math_detail::map_bf16_avx512(f, x, out, n, isa == CpuIsa::kAvx512Bf16);
  }
#endif
  alignas(64) float values[kBf16Chunk];
  for (int64_t i = 0; i < n; i += kBf16Chunk) {
    const int64_t m = std::min(kBf16Chunk, n - i);
    widen_bf16(x + i, values, m);
    map_f32(f, values, values, m);
    narrow_bf16(values, out + i, m);
  }
}

void gelu_backward_bf16(const uint16_t* g, const uint16_t* x, uint16_t* out, int64_t n) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
  if (const CpuIsa isa = cpu_isa(); isa >= CpuIsa::kAvx512) {
    return vector_math_detail::gelu_backward_bf16_avx512(g, x, out, n, isa == CpuIsa::kAvx512Bf16);
  }
#endif
  alignas(64) float grads[kBf16Chunk], at[kBf16Chunk];
  for (int64_t i = 0; i < n; i += kBf16Chunk) {
    const int64_t m = std::min(kBf16Chunk, n - i);
    widen_bf16(g + i, grads, m);
    widen_bf16(x + i, at, m);
    gelu_backward_f32(grads, at, grads, m);
    narrow_bf16(grads, out + i, m);
  }
}

// The bf16 conversions: the instruction set's path, else the scalar lane.
void widen_bf16(const uint16_t* x, float* out, int64_t n) {
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAvx512:
      return vector_math_detail::widen_bf16_avx512(x, out, n);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return vector_math_detail::widen_bf16_avx2(x, out, n);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) out[i] = std::bit_cast<float>(uint32_t{x[i]} << 16);
  }
}

void narrow_bf16(const float* x, uint16_t* out, int64_t n) {
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
      return vector_math_detail::narrow_bf16_avx512(x, out, n, true);
    case CpuIsa::kAvx512:
      return vector_math_detail::narrow_bf16_avx512(x, out, n, false);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return vector_math_detail::narrow_bf16_avx2(x, out, n);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) {
        out[i] =
            static_cast<uint16_t>(vector_math_detail::narrow_bits(std::bit_cast<uint32_t>(x[i])));
      }
  }
}

void round_to_bf16(float* x, int64_t n) {
  switch (cpu_isa()) {
#if defined(AXLE_HAVE_AVX512_KERNELS)
    case CpuIsa::kAvx512Bf16:
    case CpuIsa::kAvx512:
      return vector_math_detail::round_to_bf16_avx512(x, n);
#endif
#if defined(__AVX2__) && defined(__FMA__)
    case CpuIsa::kAvx2:
      return vector_math_detail::round_to_bf16_avx2(x, n);
#endif
    default:
      for (int64_t i = 0; i < n; ++i) {
        x[i] = std::bit_cast<float>(vector_math_detail::narrow_bits(std::bit_cast<uint32_t>(x[i]))
                                    << 16);
      }
  }
}

float exp_shifted_sum(float* x, int64_t n, float shift) {
  float sum = 0;
  exp_shifted_rows(x, 1, n, n, &shift, &sum);
  return sum;
}

}  // namespace axle::cpu
