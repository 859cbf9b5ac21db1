// backends/cpu: max pooling with windows two columns apart, eight windows a vector (see
// max_pool_strided.h). Each plane is copied once into a frame of -inf (relu'd as it is copied
// when the pool takes relu first), rows and columns as far as any window reaches; a window's
// taps then read the frame in row-major order, the even and odd columns of 16 floats giving
// taps j and j + 1 of eight windows. -inf never wins a window, so the frame's padding changes no
// pick. The forward keeps the larger value as vmaxps does (NaN kept out); a vector that met a
// NaN is redone lane by lane to give the last NaN, as the general loops do. The gradient tracks
// the picked tap in the lanes, then adds each window's gradient at its tap in window order.
#include "axle/backends/cpu/max_pool_strided.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>

#include "axle/backends/cpu/pool_lanes.h"
#include "axle/backends/cpu/window.h"

namespace axle::cpu {
namespace {

constexpr int64_t kMaxTaps = 64;
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

int64_t round_up8(int64_t v) { return (v + 7) / 8 * 8; }

// The frame: rows from -pad_h, as many as the last output row's window reaches; columns from
// -pad_w, as far as the last vector of eight windows reads (16 floats from its last tap pair).
struct Frame {
  int64_t rows, ld;
};

Frame frame_of(const PoolGeometry& g) {
  return {(g.oh - 1) * g.stride_h + g.kh, round_up8(2 * round_up8(g.ow) + g.kw - 1)};
}

// The plane x into the frame, relu'd with `relu` (v < 0 ? +0 : v, as kRelu).
void fill_frame(const float* x, const PoolGeometry& g, const Frame& f, bool relu, float* frame) {
  const int64_t copied = std::clamp<int64_t>(f.ld - g.pad_w, 0, g.w);
  for (int64_t r = 0; r < f.rows; ++r) {
    float* __restrict__ dst = frame + r * f.ld;
    const int64_t ir = r - g.pad_h;
    if (ir < 0 || ir >= g.h) {
      std::fill_n(dst, f.ld, kMinusInf);
      continue;
    }
    std::fill_n(dst, g.pad_w, kMinusInf);
    const float* __restrict__ src = x + ir * g.w;
    float* __restrict__ inside = dst + g.pad_w;
    if (relu) {
      for (int64_t c = 0; c < copied; ++c) inside[c] = src[c] < 0.f ? 0.f : src[c];
    } else {
      std::copy_n(src, copied, inside);
    }
    std::fill(inside + copied, dst + f.ld, kMinusInf);
  }
}

#if defined(__AVX2__)
using namespace pool_lanes;

// Calls tap(t, v) for each tap t (row-major) of the eight windows whose first tap column is
// `columns` in the frame row `top`: v holds the tap's value in each window.
template <class Tap>
inline void for_each_tap(const float* top, const PoolGeometry& g, int64_t ld, Tap&& tap) {
  for (int64_t i = 0; i < g.kh; ++i) {
    const float* row = top + i * ld;
    for (int64_t j = 0; j < g.kw; j += 2) {
      __m256 even, odd;
      split_even_odd(row + j, 8, even, odd);
      tap(i * g.kw + j, even);
      if (j + 1 < g.kw) tap(i * g.kw + j + 1, odd);
    }
  }
}

// The window's pick when it holds a NaN: the last NaN in row-major tap order.
float last_nan(const float* corner, const PoolGeometry& g, int64_t ld, float best) {
  for (int64_t i = 0; i < g.kh; ++i) {
    for (int64_t j = 0; j < g.kw; ++j) {
      const float v = corner[i * ld + j];
      if (v != v) best = v;
    }
  }
  return best;
}
#endif

}  // namespace

bool takes_strided_max_pool(const PoolGeometry& g) {
#if defined(__AVX2__)
  return g.stride_w == 2 && g.dilation_h == 1 && g.dilation_w == 1 && g.kh * g.kw <= kMaxTaps &&
         g.oh > 0 && g.ow > 0;
#else
  (void)g;
  return false;
#endif
}

int64_t strided_max_pool_scratch_floats(const PoolGeometry& g) {
  const Frame f = frame_of(g);
  return f.rows * f.ld;
}

void strided_max_pool(const float* x, float* out, const PoolGeometry& g, float* frame) {
#if defined(__AVX2__)
  const Frame f = frame_of(g);
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w) {
    fill_frame(x, g, f, g.relu_first, frame);
    for (int64_t oh = 0; oh < g.oh; ++oh, out += g.ow) {
      const float* top = frame + oh * g.stride_h * f.ld;
      for (int64_t ow0 = 0; ow0 < g.ow; ow0 += 8) {
        __m256 best = _mm256_set1_ps(kMinusInf), nan = _mm256_setzero_ps();
        for_each_tap(top + 2 * ow0, g, f.ld, [&](int64_t, __m256 v) {
          best = _mm256_max_ps(v, best);  // v > best ? v : best; a NaN v keeps best
          nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        });
        if (_mm256_movemask_ps(nan) != 0) [[unlikely]] {
          alignas(32) std::array<float, 8> lanes;
          _mm256_store_ps(lanes.data(), best);
          for (int64_t l = 0; l < 8; ++l) {
            lanes[l] = last_nan(top + 2 * (ow0 + l), g, f.ld, lanes[l]);
          }
          best = _mm256_load_ps(lanes.data());
        }
        if (ow0 + 8 <= g.ow) {
          _mm256_storeu_ps(out + ow0, best);
        } else {
          store_first(out + ow0, g.ow - ow0, best);
        }
      }
    }
  }
#else
  (void)x, (void)out, (void)g, (void)frame;
#endif
}

void strided_max_pool_backward(const float* x, const float* grad_out, float* grad_x,
                               const PoolGeometry& g, float* frame) {
#if defined(__AVX2__)
  const Frame f = frame_of(g);
  std::array<int64_t, kMaxTaps> offset{};  // tap t's place in the plane from the window's corner
  for (int64_t t = 0; t < g.kh * g.kw; ++t) offset[t] = t / g.kw * g.w + t % g.kw;
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w, grad_x += g.h * g.w) {
    fill_frame(x, g, f, false, frame);
    std::fill_n(grad_x, g.h * g.w, 0.f);
    for (int64_t oh = 0; oh < g.oh; ++oh, grad_out += g.ow) {
      const float* top = frame + oh * g.stride_h * f.ld;
      const int64_t start_h = oh * g.stride_h - g.pad_h;
      const auto [kh_lo, kh_hi] = taps_inside(start_h, g.h, g.kh, 1);
      for (int64_t ow0 = 0; ow0 < g.ow; ow0 += 8) {
        // No tap taken leaves -1: every in-bounds value -inf.
        __m256 best = _mm256_set1_ps(kMinusInf), at = _mm256_set1_ps(-1.f);
        for_each_tap(top + 2 * ow0, g, f.ld, [&](int64_t t, __m256 v) {
          const __m256 take =
              _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
          best = _mm256_blendv_ps(best, v, take);
          at = _mm256_blendv_ps(at, _mm256_set1_ps(static_cast<float>(t)), take);
        });
        alignas(32) std::array<int32_t, 8> taps;
        _mm256_store_si256(reinterpret_cast<__m256i*>(taps.data()), _mm256_cvttps_epi32(at));
        const int64_t windows = std::min<int64_t>(8, g.ow - ow0);
        for (int64_t l = 0; l < windows; ++l) {
          const int64_t start_w = (ow0 + l) * 2 - g.pad_w;
          int64_t at_plane;
          if (taps[l] >= 0) {
            at_plane = start_h * g.w + start_w + offset[taps[l]];
          } else {
            // As torch: the first in-bounds tap; a window wholly in the padding gets nothing.
            const auto [kw_lo, kw_hi] = taps_inside(start_w, g.w, g.kw, 1);
            if (kh_lo == kh_hi || kw_lo == kw_hi) continue;
            at_plane = (start_h + kh_lo) * g.w + start_w + kw_lo;
          }
          grad_x[at_plane] += grad_out[ow0 + l];
        }
      }
    }
  }
#else
  (void)x, (void)grad_out, (void)grad_x, (void)g, (void)frame;
#endif
}

}  // namespace axle::cpu
