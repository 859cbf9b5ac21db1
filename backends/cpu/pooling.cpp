// backends/cpu: pooling kernels (kMaxPool2d, kAvgPool2d, and their gradients kMaxPool2dBackward,
// kAvgPool2dBackward) on NCHW buffers. Pooling walks each window over precomputed in-bounds tap
// ranges, so no inner loop tests for padding; the common 2x2 stride-2 max pool has its own loops
// (AVX2 for f32). Planes are spread over the device's threads.
#include <fmt/format.h>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/max_pool_strided.h"
#include "axle/backends/cpu/pool_geometry.h"
#include "axle/backends/cpu/pool_lanes.h"
#include "axle/backends/cpu/window.h"

namespace axle::cpu {
namespace {

// ---- pooling ---------------------------------------------------------------------------

// relu as the kRelu kernel computes it (x < 0 ? 0 : x), in the compute type.
template <class A>
inline A relu_tap(A v) {
  return v < A(0) ? A(0) : v;
}

// v > best ? v : best, as one max instruction where there is one: GCC turns the plain form into
// a branch, and which tap is larger is a coin toss on real data. A NaN v gives best.
template <class A>
inline A larger_tap(A best, A v) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    return _mm_cvtss_f32(_mm_max_ss(_mm_set_ss(v), _mm_set_ss(best)));
  } else if constexpr (std::is_same_v<A, double>) {
    return _mm_cvtsd_f64(_mm_max_sd(_mm_set_sd(v), _mm_set_sd(best)));
  }
#endif
  return v > best ? v : best;
}

// The tap of the window at `win` (row length w) that max pooling picks — the first maximum, or
// the last NaN, as the general loops pick — and its value. kKh / kKw fix the window size at
// compile time when non-zero. kRelu: each tap relu'd as it is read.
template <int kKh, int kKw, bool kRelu = false, class T>
std::pair<int64_t, compute_t<T>> window_max(const T* win, int64_t w, int64_t kh, int64_t kw) {
  using A = compute_t<T>;
  const int64_t rows = kKh ? kKh : kh, cols = kKw ? kKw : kw;
  A best = -std::numeric_limits<A>::infinity();
  int64_t at = 0;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      const A v = kRelu ? relu_tap(load(win[i * w + j])) : load(win[i * w + j]);
      const bool take = v > best || v != v;
      best = take ? v : best;
      at = take ? i * w + j : at;
    }
  }
  return {at, best};
}

// The 2x2 window at stride 2 (the common CNN's, never overlapping): each output row reads two
// input rows. Every window picks as window_max does: in row-major tap order, the first maximum,
// or the last NaN. GCC does not vectorise the strided taps, so f32 gets AVX2 code for eight
// windows at a time (the build targets x86-64-v3).

// Tap 0..3 of the window (a, b over c, d) that max pooling picks, and its value.
template <class A>
inline void pick_2x2(A a, A b, A c, A d, A& best, int& at) {
  best = a, at = 0;
  bool take = b > best || b != b;
  best = take ? b : best, at = take ? 1 : at;
  take = c > best || c != c;
  best = take ? c : best, at = take ? 2 : at;
  take = d > best || d != d;
  best = take ? d : best, at = take ? 3 : at;
}

#if defined(__AVX2__)
using namespace pool_lanes;

// pick_2x2 on eight windows (of relu'd taps with kRelu); `at` holds the picked taps as 0.f ..
// 3.f.
template <bool kRelu = false>
inline void pick_2x2(const float* top, const float* bottom, int64_t windows, __m256& best,
                     __m256& at) {
  __m256 a, b, c, d;
  split_even_odd(top, windows, a, b);
  split_even_odd(bottom, windows, c, d);
  if constexpr (kRelu) a = relu8(a), b = relu8(b), c = relu8(c), d = relu8(d);
  best = a, at = _mm256_setzero_ps();
  float tap = 1;
  for (const __m256 v : {b, c, d}) {
    const __m256 take =
        _mm256_or_ps(_mm256_cmp_ps(v, best, _CMP_GT_OQ), _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    best = _mm256_blendv_ps(best, v, take);
    at = _mm256_blendv_ps(at, _mm256_set1_ps(tap++), take);
  }
}

// Interleaves the first `windows` lanes of a and b into 2 * windows floats at p.
inline void store_interleaved(float* p, int64_t windows, __m256 a, __m256 b) {
  const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
  const __m256 first = _mm256_permute2f128_ps(lo, hi, 0x20);
  const __m256 second = _mm256_permute2f128_ps(lo, hi, 0x31);
  if (windows >= 8) {
    _mm256_storeu_ps(p, first);
    _mm256_storeu_ps(p + 8, second);
  } else if (windows >= 4) {
    _mm256_storeu_ps(p, first);
    store_first(p + 8, 2 * windows - 8, second);
  } else {
    store_first(p, 2 * windows, first);
  }
}
#endif

// kRelu: pools relu(x), each tap relu'd as it is read (the same values and picks as pooling a
// relu'd copy).
template <bool kRelu, class T>
void max_pool_2x2(const T* x, T* out, const PoolGeometry& g) {
  using A = compute_t<T>;
  auto tap = [](T v) { return kRelu ? relu_tap(load(v)) : load(v); };
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w) {
    for (int64_t oh = 0; oh < g.oh; ++oh, out += g.ow) {
      const T* top = x + 2 * oh * g.w;
      const T* bottom = top + g.w;
      int64_t i = 0;
#if defined(__AVX2__)
      if constexpr (std::is_same_v<T, float>) {
        for (; i < g.ow; i += 8) {
          const int64_t windows = g.ow - i;
          __m256 best, at;
          pick_2x2<kRelu>(top + 2 * i, bottom + 2 * i, windows, best, at);
          if (windows >= 8) {
            _mm256_storeu_ps(out + i, best);
          } else {
            store_first(out + i, windows, best);
          }
        }
      }
#endif
      for (; i < g.ow; ++i) {
        A best;
        int at;
        pick_2x2<A>(tap(top[2 * i]), tap(top[2 * i + 1]), tap(bottom[2 * i]),
                    tap(bottom[2 * i + 1]), best, at);
        out[i] = store<T>(best);
      }
    }
  }
}

// The gradient of max_pool_2x2: each window's four taps are written once (the picked one gets
// the gradient, the others zero), so the output needs no clearing pass first.
template <class T>
void max_pool_2x2_backward(const T* x, const T* grad_out, T* grad_x, const PoolGeometry& g) {
  using A = compute_t<T>;
  const T zero = store<T>(A(0));
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w, grad_x += g.h * g.w) {
    for (int64_t oh = 0; oh < g.oh; ++oh, grad_out += g.ow) {
      const T* top = x + 2 * oh * g.w;
      const T* bottom = top + g.w;
      T* grad_top = grad_x + 2 * oh * g.w;
      T* grad_bottom = grad_top + g.w;
      int64_t i = 0;
#if defined(__AVX2__)
      if constexpr (std::is_same_v<T, float>) {
        for (; i < g.ow; i += 8) {
          const int64_t windows = g.ow - i;
          __m256 best, at;
          pick_2x2(top + 2 * i, bottom + 2 * i, windows, best, at);
          const __m256 grad = windows >= 8 ? _mm256_loadu_ps(grad_out + i)
                                           : _mm256_maskload_ps(grad_out + i, first_lanes(windows));
          auto share = [&](float tap) {
            return _mm256_and_ps(_mm256_cmp_ps(at, _mm256_set1_ps(tap), _CMP_EQ_OQ), grad);
          };
          store_interleaved(grad_top + 2 * i, windows, share(0), share(1));
          store_interleaved(grad_bottom + 2 * i, windows, share(2), share(3));
        }
      }
#endif
      for (; i < g.ow; ++i) {
        A best;
        int at;
        pick_2x2<A>(load(top[2 * i]), load(top[2 * i + 1]), load(bottom[2 * i]),
                    load(bottom[2 * i + 1]), best, at);
        const T gv = grad_out[i];
        grad_top[2 * i] = at == 0 ? gv : zero;
        grad_top[2 * i + 1] = at == 1 ? gv : zero;
        grad_bottom[2 * i] = at == 2 ? gv : zero;
        grad_bottom[2 * i + 1] = at == 3 ? gv : zero;
      }
      // An odd last column belongs to no window.
      if (g.w > 2 * g.ow) grad_top[g.w - 1] = grad_bottom[g.w - 1] = zero;
    }
    // So does an odd last row.
    if (g.h > 2 * g.oh) std::fill_n(grad_x + (g.h - 1) * g.w, g.w, zero);
  }
}

template <int kKh, int kKw, bool kRelu, class T>
void max_pool_inside(const T* x, T* out, const PoolGeometry& g) {
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const T* top = x + oh * g.stride_h * g.w;
      for (int64_t ow = 0; ow < g.ow; ++ow, ++out) {
        *out = store<T>(window_max<kKh, kKw, kRelu>(top + ow * g.stride_w, g.w, g.kh, g.kw).second);
      }
    }
  }
}

// Any window, padded or dilated; kRelu: each tap relu'd as it is read (the same values and picks
// as pooling a relu'd copy, without writing one).
template <bool kRelu, class T>
void max_pool_general(const T* x, T* out, const PoolGeometry& g);

// The 2x2 window at stride 2 inside the input, which has loops of its own.
bool two_by_two(const PoolGeometry& g) {
  return windows_inside(g) && g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2;
}

// Other f32 windows two columns apart take the strided kernels (max_pool_strided.h).
template <class T>
bool strided(const PoolGeometry& g) {
  return std::is_same_v<T, float> && !two_by_two(g) && takes_strided_max_pool(g);
}

// Scratch per thread for a max pool or its gradient: the strided kernels' frame, or a plane.
int64_t max_pool_scratch_floats(const PoolGeometry& g) {
  return std::max(g.h * g.w, strided<float>(g) ? strided_max_pool_scratch_floats(g) : 0);
}

template <class T>  // scratch: max_pool_scratch_floats(g) floats
void max_pool_typed(const T* x, T* out, const PoolGeometry& g, float* scratch) {
  if constexpr (std::is_same_v<T, float>) {
    if (strided<T>(g)) return strided_max_pool(x, out, g, scratch);
  }
  if (two_by_two(g))
    return g.relu_first ? max_pool_2x2<true>(x, out, g) : max_pool_2x2<false>(x, out, g);
  if (windows_inside(g)) {
    if (g.kh == 2 && g.kw == 2) {
      return g.relu_first ? max_pool_inside<2, 2, true>(x, out, g)
                          : max_pool_inside<2, 2, false>(x, out, g);
    }
    return g.relu_first ? max_pool_inside<0, 0, true>(x, out, g)
                        : max_pool_inside<0, 0, false>(x, out, g);
  }
  return g.relu_first ? max_pool_general<true>(x, out, g) : max_pool_general<false>(x, out, g);
}

template <bool kRelu, class T>
void max_pool_general(const T* x, T* out, const PoolGeometry& g) {
  // bf16 values are compared in f32.
  using A = compute_t<T>;
  std::vector<std::pair<int64_t, int64_t>> cols(g.ow);  // in-bounds taps of each column window
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    cols[ow] = taps_inside(ow * g.stride_w - g.pad_w, g.w, g.kw, g.dilation_w);
  }
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const int64_t start_h = oh * g.stride_h - g.pad_h;
      const auto [kh_lo, kh_hi] = taps_inside(start_h, g.h, g.kh, g.dilation_h);
      for (int64_t ow = 0; ow < g.ow; ++ow, ++out) {
        const int64_t start_w = ow * g.stride_w - g.pad_w;
        A best = -std::numeric_limits<A>::infinity();  // what the padding holds
        A nan = 0;
        bool any_nan = false;
        for (int64_t i = kh_lo; i < kh_hi; ++i) {
          const T* row = x + (start_h + i * g.dilation_h) * g.w;
          for (int64_t j = cols[ow].first; j < cols[ow].second; ++j) {
            const A tap = load(row[start_w + j * g.dilation_w]);
            const A v = kRelu ? larger_tap(tap, A(0)) : tap;  // relu_tap's values, -0 and NaN too
            // NaNs, rare, are kept apart: the last one wins, as in torch.
            best = larger_tap(best, v);
            if (v != v) [[unlikely]] {
              nan = v;
              any_nan = true;
            }
          }
        }
        *out = store<T>(any_nan ? nan : best);
      }
    }
  }
}

/// One axis of an average-pooling window: its in-bounds taps [lo, hi), and how many taps torch's
/// divisor counts along it: the window clipped to the padded input, padding included
/// (count_include_pad) or not, but never the part of a ceil_mode window past the padding.
struct AvgWindow {
  int64_t lo, hi, counted;
};
AvgWindow avg_window(int64_t index, int64_t stride, int64_t pad, int64_t kernel, int64_t size,
                     bool count_include_pad) {
  const int64_t start = index * stride - pad;
  const int64_t end = std::min(start + kernel, size + pad);
  const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, size);
  return {lo, hi, count_include_pad ? end - start : hi - lo};
}

template <class T>
void avg_pool_typed(const T* x, T* out, const PoolGeometry& g) {
  // bf16 values are summed in f32.
  using A = compute_t<T>;
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w) {
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const AvgWindow rows = avg_window(oh, g.stride_h, g.pad_h, g.kh, g.h, g.count_include_pad);
      for (int64_t ow = 0; ow < g.ow; ++ow, ++out) {
        const AvgWindow cols = avg_window(ow, g.stride_w, g.pad_w, g.kw, g.w, g.count_include_pad);
        if (rows.lo >= rows.hi || cols.lo >= cols.hi) {
          *out = store<T>(A(0));
          continue;
        }
        A sum = 0;
        for (int64_t i = rows.lo; i < rows.hi; ++i) {
          const T* row = x + i * g.w;
          for (int64_t j = cols.lo; j < cols.hi; ++j) sum += load(row[j]);
        }
        *out = store<T>(sum / static_cast<A>(rows.counted * cols.counted));
      }
    }
  }
}

/// Runs pass(x part, out part, geometry of the part, thread) over runs of whole planes on the
/// pool's threads; each plane is computed the same way whichever run it falls in.
template <class X, class Out, class Pass>
void for_plane_runs(ComputePool& pool, const PoolGeometry& g, const X* x, int64_t x_plane, Out* out,
                    int64_t out_plane, Pass&& pass) {
  constexpr int64_t kElementsPerPart = int64_t{1} << 15;
  const int64_t grain = std::max<int64_t>(1, kElementsPerPart / std::max<int64_t>(1, g.h * g.w));
  parallel_for(pool, g.planes, grain, [&](int64_t first, int64_t last, int thread) {
    PoolGeometry part = g;
    part.planes = last - first;
    pass(x + first * x_plane, out + first * out_plane, part, thread);
  });
}

template <bool kIsMax>
void pool2d(const KernelArgs& args) {
  const PoolGeometry g = plan_pool(args, kIsMax);
  auto scratch = [&](int thread) {
    return kIsMax
               ? static_cast<float*>(args.pool.scratch(
                     thread, sizeof(float) * static_cast<std::size_t>(max_pool_scratch_floats(g))))
               : nullptr;
  };
  auto run = [&]<class T>(const T* x, T* out) {
    for_plane_runs(args.pool, g, x, g.h * g.w, out, g.oh * g.ow,
                   [&](const T* x, T* out, const PoolGeometry& part, int thread) {
                     if constexpr (kIsMax) {
                       max_pool_typed(x, out, part, scratch(thread));
                     } else {
                       avg_pool_typed(x, out, part);
                     }
                   });
  };
  auto run_as = [&](auto tag) {
    using T = decltype(tag);
    run(args.inputs[0].as<T>(), args.output.as<T>());
  };
  switch (args.output.desc->dtype) {
    case DType::kFloat32:
      return run_as(float{});
    case DType::kFloat64:
      return run_as(double{});
    case DType::kBFloat16: {
      // bf16 computes in f32 (a pick, or a sum rounded once) on the f32 kernels, the same bits
      // as bf16 loops: each run of planes widened and rounded back by the thread pooling it.
      const int64_t plane = g.h * g.w, out_plane = g.oh * g.ow;
      for_plane_runs(
          args.pool, g, args.inputs[0].as<Bf16>(), plane, args.output.as<Bf16>(), out_plane,
          [&](const Bf16* x, Bf16* out, const PoolGeometry& part, int thread) {
            const int64_t n = part.planes * plane, m = part.planes * out_plane;
            float* wide = thread_floats(0, static_cast<std::size_t>(n));
            float* pooled = thread_floats(1, static_cast<std::size_t>(m));
            widen_block(x, wide, n);
            if constexpr (kIsMax) {
              max_pool_typed(static_cast<const float*>(wide), pooled, part, scratch(thread));
            } else {
              avg_pool_typed(static_cast<const float*>(wide), pooled, part);
            }
            narrow_block(pooled, out, m);
          });
      return;
    }
    case DType::kInt64:
      if constexpr (!kIsMax) return run_as(int64_t{});
      return;  // rejected by plan_pool
    default:
      return;  // rejected by plan_pool
  }
}

// ---- pooling gradients -----------------------------------------------------------------
// Windows may overlap, so gradients are summed into a compute-type plane first (bf16 in f32)
// and stored once.

template <int kKh, int kKw, class T>
void max_pool_backward_inside(const T* x, const T* grad_out, T* grad_x, const PoolGeometry& g,
                              compute_t<T>* plane) {
  using A = compute_t<T>;
  if (g.stride_h >= g.kh && g.stride_w >= g.kw) {
    // Windows do not overlap: each input element gets at most one gradient, stored as is.
    std::fill_n(grad_x, g.planes * g.h * g.w, store<T>(A(0)));
    for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w, grad_x += g.h * g.w) {
      for (int64_t oh = 0; oh < g.oh; ++oh) {
        const int64_t top = oh * g.stride_h * g.w;
        for (int64_t ow = 0; ow < g.ow; ++ow, ++grad_out) {
          const int64_t corner = top + ow * g.stride_w;
          grad_x[corner + window_max<kKh, kKw>(x + corner, g.w, g.kh, g.kw).first] = *grad_out;
        }
      }
    }
    return;
  }
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w, grad_x += g.h * g.w) {
    std::fill_n(plane, g.h * g.w, A(0));
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const int64_t top = oh * g.stride_h * g.w;
      for (int64_t ow = 0; ow < g.ow; ++ow, ++grad_out) {
        const int64_t corner = top + ow * g.stride_w;
        const int64_t at = window_max<kKh, kKw>(x + corner, g.w, g.kh, g.kw).first;
        plane[corner + at] += load(*grad_out);
      }
    }
    narrow_block(plane, grad_x, g.h * g.w);
  }
}

template <class T>  // plane: max_pool_scratch_floats(g) values of the compute type
void max_pool_backward_typed(const T* x, const T* grad_out, T* grad_x, const PoolGeometry& g,
                             compute_t<T>* plane) {
  if constexpr (std::is_same_v<T, float>) {
    if (strided<T>(g)) return strided_max_pool_backward(x, grad_out, grad_x, g, plane);
  }
  if (windows_inside(g)) {
    if (g.kh == 2 && g.kw == 2 && g.stride_h == 2 && g.stride_w == 2) {
      return max_pool_2x2_backward(x, grad_out, grad_x, g);
    }
    return g.kh == 2 && g.kw == 2 ? max_pool_backward_inside<2, 2>(x, grad_out, grad_x, g, plane)
                                  : max_pool_backward_inside<0, 0>(x, grad_out, grad_x, g, plane);
  }
  using A = compute_t<T>;
  std::vector<std::pair<int64_t, int64_t>> cols(g.ow);
  for (int64_t ow = 0; ow < g.ow; ++ow) {
    cols[ow] = taps_inside(ow * g.stride_w - g.pad_w, g.w, g.kw, g.dilation_w);
  }
  for (int64_t p = 0; p < g.planes; ++p, x += g.h * g.w, grad_x += g.h * g.w) {
    std::fill_n(plane, g.h * g.w, A(0));
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const int64_t start_h = oh * g.stride_h - g.pad_h;
      const auto [kh_lo, kh_hi] = taps_inside(start_h, g.h, g.kh, g.dilation_h);
      for (int64_t ow = 0; ow < g.ow; ++ow, ++grad_out) {
        const int64_t start_w = ow * g.stride_w - g.pad_w;
        if (kh_lo == kh_hi || cols[ow].first == cols[ow].second) continue;  // all padding
        // The forward's choice: the first maximum, or the last NaN; as torch, the first tap when
        // every value is -inf.
        A best = -std::numeric_limits<A>::infinity();
        int64_t at =
            (start_h + kh_lo * g.dilation_h) * g.w + start_w + cols[ow].first * g.dilation_w;
        int64_t nan_at = -1;
        for (int64_t i = kh_lo; i < kh_hi; ++i) {
          const int64_t row = (start_h + i * g.dilation_h) * g.w;
          for (int64_t j = cols[ow].first; j < cols[ow].second; ++j) {
            const int64_t k = row + start_w + j * g.dilation_w;
            const A v = load(x[k]);
            at = v > best ? k : at;  // selects, not a branch, as in the forward
            best = larger_tap(best, v);
            if (v != v) [[unlikely]] {
              nan_at = k;
            }
          }
        }
        plane[nan_at >= 0 ? nan_at : at] += load(*grad_out);
      }
    }
    narrow_block(plane, grad_x, g.h * g.w);
  }
}

template <class T>
void avg_pool_backward_typed(const T* grad_out, T* grad_x, const PoolGeometry& g,
                             compute_t<T>* plane) {
  using A = compute_t<T>;
  for (int64_t p = 0; p < g.planes; ++p, grad_x += g.h * g.w) {
    std::fill_n(plane, g.h * g.w, A(0));
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const AvgWindow rows = avg_window(oh, g.stride_h, g.pad_h, g.kh, g.h, g.count_include_pad);
      for (int64_t ow = 0; ow < g.ow; ++ow, ++grad_out) {
        const AvgWindow cols = avg_window(ow, g.stride_w, g.pad_w, g.kw, g.w, g.count_include_pad);
        if (rows.lo >= rows.hi || cols.lo >= cols.hi) continue;
        const A share = load(*grad_out) / static_cast<A>(rows.counted * cols.counted);
        for (int64_t i = rows.lo; i < rows.hi; ++i) {
          for (int64_t j = cols.lo; j < cols.hi; ++j) plane[i * g.w + j] += share;
        }
      }
    }
    narrow_block(plane, grad_x, g.h * g.w);
  }
}

// pool2d_backward for bf16, as the forward: runs of planes widened, on the f32 kernels (f32 sums).
template <bool kIsMax>
void bf16_pool2d_backward(const KernelArgs& args, const PoolGeometry& g) {
  const int64_t plane = g.h * g.w, out_plane = g.oh * g.ow;
  const Bf16* x = args.inputs[0].as<Bf16>();  // max: x, grad_out; average: grad_out
  Bf16* result = args.output.as<Bf16>();
  for_plane_runs(
      args.pool, g, args.inputs[kIsMax ? 1 : 0].as<Bf16>(), out_plane, result, plane,
      [&](const Bf16* grad_part, Bf16* grad_x, const PoolGeometry& part, int thread) {
        const int64_t n = part.planes * plane, m = part.planes * out_plane;
        float* grad_wide = thread_floats(0, static_cast<std::size_t>(m));
        float* sums_wide = thread_floats(1, static_cast<std::size_t>(n));
        const int64_t sums_floats = kIsMax ? max_pool_scratch_floats(g) : plane;
        auto* sums = static_cast<float*>(
            args.pool.scratch(thread, sizeof(float) * static_cast<std::size_t>(sums_floats)));
        widen_block(grad_part, grad_wide, m);
        if constexpr (kIsMax) {
          float* x_wide = thread_floats(2, static_cast<std::size_t>(n));
          widen_block(x + (grad_x - result), x_wide, n);
          max_pool_backward_typed(static_cast<const float*>(x_wide),
                                  static_cast<const float*>(grad_wide), sums_wide, part, sums);
        } else {
          avg_pool_backward_typed(static_cast<const float*>(grad_wide), sums_wide, part, sums);
        }
        narrow_block(sums_wide, grad_x, n);
      });
}

template <bool kIsMax>
void pool2d_backward(const KernelArgs& args) {
  const PoolGeometry g =
      plan_pool(args, kIsMax, kIsMax ? PoolPass::kMaxBackward : PoolPass::kAvgBackward);
  ComputePool& pool = args.pool;
  // Max: x, grad_out; average: grad_out.
  auto run = [&]<class T>(const T* first, const T* second, T* result) {
    using A = compute_t<T>;
    const int64_t plane = g.h * g.w, out_plane = g.oh * g.ow;
    // Per thread, one plane of gradient sums in the compute type.
    const int64_t sums_values = kIsMax ? max_pool_scratch_floats(g) : plane;
    auto sums = [&](int thread) {
      return static_cast<A*>(
          pool.scratch(thread, sizeof(A) * static_cast<std::size_t>(sums_values)));
    };
    if constexpr (kIsMax) {
      const T* x = first;
      for_plane_runs(pool, g, second, out_plane, result, plane,
                     [&](const T* grad_out_part, T* grad_x, const PoolGeometry& part, int thread) {
                       const T* x_part = x + (grad_x - result);
                       max_pool_backward_typed(x_part, grad_out_part, grad_x, part, sums(thread));
                     });
    } else {
      for_plane_runs(pool, g, first, out_plane, result, plane,
                     [&](const T* grad_out, T* grad_x, const PoolGeometry& part, int thread) {
                       avg_pool_backward_typed(grad_out, grad_x, part, sums(thread));
                     });
    }
  };
  auto run_as = [&](auto tag) {
    using T = decltype(tag);
    run(args.inputs[0].as<T>(), kIsMax ? args.inputs[1].as<T>() : nullptr, args.output.as<T>());
  };
  switch (args.output.desc->dtype) {
    case DType::kFloat32:
      return run_as(float{});
    case DType::kFloat64:
      return run_as(double{});
    case DType::kBFloat16:
      return bf16_pool2d_backward<kIsMax>(args, g);
    default:
      return;  // rejected by plan_pool
  }
}

}  // namespace

void register_pooling_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kMaxPool2d, pool2d<true>);
  set_kernel(table, Kernel::kAvgPool2d, pool2d<false>);
  set_kernel(table, Kernel::kMaxPool2dBackward, pool2d_backward<true>);
  set_kernel(table, Kernel::kAvgPool2dBackward, pool2d_backward<false>);
}

}  // namespace axle::cpu
