// backends/cpu: lane helpers of the AVX-512 kernels. Include only from files compiled with the
// AVX-512 flags (backends/CMakeLists.txt): the intrinsics need them.
#pragma once

#include <immintrin.h>

#include <cstdint>

// The small helpers below must inline into the loops that call them (a call would pass the
// tile's accumulators through memory).
#define AXLE_ALWAYS_INLINE __attribute__((always_inline)) inline

namespace axle::cpu::avx512_lanes {
// Each including file its own copies: an inline function the linker merged across files could
// reach code compiled without these flags (see gemm_kernels.h).
namespace {

/// The first n of 16 lanes.
AXLE_ALWAYS_INLINE __mmask16 first_lanes(int64_t n) noexcept {
  if (n >= 16) return 0xffff;
  if (n <= 0) return 0;
  return static_cast<__mmask16>((1u << n) - 1);
}

/// bf16 bits of each lane (in its low 16 bits), rounded to nearest even as narrow() does, NaNs
/// kept quiet with their sign; denormals are kept (vcvtneps2bf16 would flush them).
AXLE_ALWAYS_INLINE __m512i round_to_bf16(__m512 x) noexcept {
  const __m512i u = _mm512_castps_si512(x);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i nearest =
      _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
  const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
  return _mm512_mask_mov_epi32(nearest, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), quiet);
}

}  // namespace
}  // namespace axle::cpu::avx512_lanes
