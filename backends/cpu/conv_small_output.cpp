// backends/cpu: convolution by direct sums for a few small output planes (AVX2, f32), the form
// conv.cpp picks when takes_small_output says so (conv_geometry.h).
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "axle/backends/cpu/conv_geometry.h"

namespace axle::cpu {

#if defined(__AVX2__)
namespace {

/// Lanes [0, count) of an AVX2 mask (count in [0, 8]).
inline __m256i first_lanes(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/// One (image, output channel) of conv2d_small_output, an output plane of OH x OW: out[y, x] =
/// sum over c, i, j of kernel[c][i][j] * padded[c][(i + y) * wp + j + x], each channel's sum in
/// eight f32 lanes along the kernel's rows (the lanes of a row's last block past the kernel
/// masked to +0 in both operands, so an input outside the window never enters a sum, not even
/// as inf * 0), the channels' sums added in double.
template <int OH, int OW>
void small_output_sums(const float* padded, int64_t padded_plane, const float* w, int64_t w_c,
                       int64_t channels, const ConvGeometry& g, int64_t wp, float* out) {
  const int64_t full = g.kw / 8, rest = g.kw % 8;
  const int64_t blocks = (g.kw + 7) / 8;
  const __m256 tail_mask = _mm256_castsi256_ps(first_lanes(rest == 0 ? 8 : rest));
  const __m256 all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  double sums[OH][OW] = {};
  for (int64_t c = 0; c < channels; ++c) {
    const float* kernel = w + c * w_c;
    const float* plane = padded + c * padded_plane;
    // Named sums (an array of them GCC keeps in memory): a<y><x> for output (y, x).
    __m256 a00 = _mm256_setzero_ps(), a01 = a00, a02 = a00, a10 = a00, a11 = a00, a12 = a00,
           a20 = a00, a21 = a00, a22 = a00;
    for (int64_t i = 0; i < g.kh; ++i) {
      const float* k_row = kernel + i * g.kw;
      const float* r0 = plane + i * wp;
      const float* r1 = r0 + wp;
      const float* r2 = r1 + wp;
      // One loop over the row's blocks, the last under its mask, keeps the sums in registers.
      for (int64_t b = 0; b < blocks; ++b) {
        const __m256 mask = b < full ? all : tail_mask;
        // The kernel's last block under the mask: its row may end the buffer.
        const __m256 k = b < full ? _mm256_loadu_ps(k_row + b * 8)
                                  : _mm256_maskload_ps(k_row + b * 8, _mm256_castps_si256(mask));
        const int64_t at = b * 8;
#define AXLE_SMALL_OUTPUT_TAP(y, x)                                                             \
  if constexpr (OH > y && OW > x) {                                                             \
    a##y##x = _mm256_fmadd_ps(k, _mm256_and_ps(_mm256_loadu_ps(r##y + at + x), mask), a##y##x); \
  }
        AXLE_SMALL_OUTPUT_TAP(0, 0)
        AXLE_SMALL_OUTPUT_TAP(0, 1)
        AXLE_SMALL_OUTPUT_TAP(0, 2)
        AXLE_SMALL_OUTPUT_TAP(1, 0)
        AXLE_SMALL_OUTPUT_TAP(1, 1)
        AXLE_SMALL_OUTPUT_TAP(1, 2)
        AXLE_SMALL_OUTPUT_TAP(2, 0)
        AXLE_SMALL_OUTPUT_TAP(2, 1)
        AXLE_SMALL_OUTPUT_TAP(2, 2)
#undef AXLE_SMALL_OUTPUT_TAP
      }
    }
    const __m256 acc[3][3] = {{a00, a01, a02}, {a10, a11, a12}, {a20, a21, a22}};
    for (int y = 0; y < OH; ++y) {
      for (int x = 0; x < OW; ++x) {
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, acc[y][x]);
        double sum = 0;
        for (const float v : lanes) sum += v;
        sums[y][x] += sum;
      }
    }
  }
  for (int y = 0; y < OH; ++y) {
    for (int x = 0; x < OW; ++x) out[y * OW + x] = static_cast<float>(sums[y][x]);
  }
}

}  // namespace

bool takes_small_output(const ConvGeometry& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1 &&
         g.oh <= 3 && g.ow <= 3 && g.n * g.oh * g.ow < 32 && g.kh * g.kw >= 64;
}

/// Convolution of a few small output planes by direct sums (takes_small_output): each image's
/// planes copied once into zero-padded planes of width wp = w + 2 * pad_w, each kernel plane
/// into rows of the same width, so that every output position is one contiguous dot product
/// over kh * wp elements at its own offset. The (image, output channel) pairs are spread over
/// the threads, each summed whole by one, so every thread count gives the same bits. The planes
/// lie as `s` says.
void conv2d_small_output(const float* x, const float* w, float* out, const ConvGeometry& g,
                         const ConvStrides& s, ComputePool& pool) {
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups, taps = g.oh * g.ow;
  // A row's last block may read up to 7 floats past the plane's end (masked off): slack.
  const int64_t wp = g.w + 2 * g.pad_w, hp = g.h + 2 * g.pad_h, padded_plane = hp * wp + 8;
  // Scratch for every thread before the parts run: the padded image.
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(g.c * padded_plane);
  std::vector<float*> scratch(static_cast<std::size_t>(pool.threads()));
  for (int t = 0; t < pool.threads(); ++t) {
    scratch[static_cast<std::size_t>(t)] = static_cast<float*>(pool.scratch(t, bytes));
  }
  const int64_t pairs = g.n * g.o;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / (in_group * g.kh * g.kw * taps));
  parallel_for(pool, pairs, grain, [&](int64_t first, int64_t last, int thread) {
    float* padded = scratch[static_cast<std::size_t>(thread)];
    int64_t image = -1;
    for (int64_t pair = first; pair < last; ++pair) {
      const int64_t n = pair / g.o, o = pair % g.o, grp = o / out_group;
      if (n != image) {
        image = n;
        for (int64_t c = 0; c < g.c; ++c) {
          float* dst = padded + c * padded_plane;
          const float* src = x + n * s.x_n + c * s.x_c;
          zero_run(dst, g.pad_h * wp);
          for (int64_t y = 0; y < g.h; ++y) {
            float* row = dst + (g.pad_h + y) * wp;
            zero_run(row, g.pad_w);
            copy_run(row + g.pad_w, src + y * g.w, g.w);
            zero_run(row + g.pad_w + g.w, g.pad_w);
          }
          zero_run(dst + (g.pad_h + g.h) * wp, padded_plane - (g.pad_h + g.h) * wp);
        }
      }
      const float* planes = padded + grp * in_group * padded_plane;
      const float* kernel = w + o * s.w_o;
      float* dst = out + n * s.out_n + o * s.out_o;
      switch (g.oh * 4 + g.ow) {
#define AXLE_SMALL_OUTPUT_CASE(oh, ow)                                                    \
  case oh * 4 + ow:                                                                       \
    small_output_sums<oh, ow>(planes, padded_plane, kernel, s.w_c, in_group, g, wp, dst); \
    break;
        AXLE_SMALL_OUTPUT_CASE(1, 1)
        AXLE_SMALL_OUTPUT_CASE(1, 2)
        AXLE_SMALL_OUTPUT_CASE(1, 3)
        AXLE_SMALL_OUTPUT_CASE(2, 1)
        AXLE_SMALL_OUTPUT_CASE(2, 2)
        AXLE_SMALL_OUTPUT_CASE(2, 3)
        AXLE_SMALL_OUTPUT_CASE(3, 1)
        AXLE_SMALL_OUTPUT_CASE(3, 2)
        AXLE_SMALL_OUTPUT_CASE(3, 3)
#undef AXLE_SMALL_OUTPUT_CASE
        default:
          break;  // takes_small_output admits at most 3 x 3
      }
    }
  });
}
#endif

}  // namespace axle::cpu
