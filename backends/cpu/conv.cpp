// backends/cpu: convolution kernels (kConv2d) on NCHW buffers. Convolution is a GEMM in one of
// three forms, picked by shape: im2col per image (a block of output rows at a time for large
// planes; rows copied as shifted planes for "same" convolutions), receptive fields as rows over
// all images (kernels wider than their output: weight gradients; and output planes too small to
// fill a GEMM per image; laid out a block of the patch at a time per thread), or shifted sums of
// tap planes (stride 1, fewer output than input channels); and, in f32 with AVX2, direct sums for
// outputs of at most 3x3 over few images (the weight gradient of a layer with few input channels;
// conv_small_output.cpp). Images are spread over the device's threads. The geometry and its checks
// are in conv_geometry.cpp, the pooling kernels in pooling.cpp.
#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/conv_geometry.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/window.h"

namespace axle::cpu {
namespace {

// ---- conv2d ----------------------------------------------------------------------------

GemmPrecision precision_of(const ConvGeometry& g) {
  return g.bf16_products ? GemmPrecision::kBf16 : GemmPrecision::kF32;
}

/// dst[y, x] = src[y + di, x + dj] for y < rows, x < w, 0 where that falls outside the h x w
/// plane `src` (whose width dst shares): one long copy of the plane shifted by di * w + dj, then
/// the columns that wrapped to the next or previous row zeroed, not a copy per row.
template <class T>
void shifted_plane(const T* src, int64_t h, int64_t w, int64_t di, int64_t dj, T* dst,
                   int64_t rows) {
  const int64_t y0 = std::clamp<int64_t>(-di, 0, rows), y1 = std::clamp(h - di, y0, rows);
  const int64_t x0 = std::clamp<int64_t>(-dj, 0, w), x1 = std::clamp(w - dj, x0, w);
  zero_run(dst, y0 * w);
  zero_run(dst + y1 * w, (rows - y1) * w);
  if (y0 == y1) return;
  // Output p reads input p + shift; the ends of the range that would read outside the plane are
  // columns zeroed below.
  const int64_t shift = di * w + dj;
  const int64_t p0 = std::max(y0 * w, -shift), p1 = std::min(y1 * w, h * w - shift);
  if (p0 < p1) copy_run(dst + p0, src + p0 + shift, p1 - p0);
  // Column by column (a few at the sides): a run per row would be a library call per row.
  auto zero_column = [&](int64_t x) {
    for (int64_t y = y0; y < y1; ++y) dst[y * w + x] = T(0);
  };
  for (int64_t x = 0; x < x0; ++x) zero_column(x);
  for (int64_t x = x1; x < w; ++x) zero_column(x);
}

/// planes[o * stride, + plane) += bias[o] for o < channels.
template <class T>
void add_bias(T* planes, const T* bias, int64_t channels, int64_t plane, int64_t stride) {
  constexpr int64_t kBlock = 32 / sizeof(T);  // fixed-count blocks: GCC vectorises them at -O2
  for (int64_t o = 0; o < channels; ++o) {
    T* __restrict__ p = planes + o * stride;
    const T b = bias[o];
    int64_t i = 0;
    for (; i + kBlock <= plane; i += kBlock) {
      for (int64_t l = 0; l < kBlock; ++l) p[i + l] += b;
    }
    for (; i < plane; ++i) p[i] += b;
  }
}

/// im2col (below) for unit strides and an output as wide as the input (a "same" convolution):
/// each column-matrix row is then the input plane shifted (shifted_plane), from output row y0.
template <class T>
void im2col_shifted(const T* x, int64_t channels, const ConvGeometry& g, int64_t y0, int64_t y1,
                    T* col) {
  const int64_t plane = g.h * g.w, block = (y1 - y0) * g.ow;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        // Output (y, x) reads input (y + i * dilation_h - pad_h, x + j * dilation_w - pad_w).
        shifted_plane(x + c * plane, g.h, g.w, y0 + i * g.dilation_h - g.pad_h,
                      j * g.dilation_w - g.pad_w, col + ((c * g.kh + i) * g.kw + j) * block,
                      y1 - y0);
      }
    }
  }
}

/// Lays out the receptive fields of output rows [y0, y1) of `channels` planes starting at `x` as
/// the columns of a [channels * kh * kw, (y1 - y0) * ow] row-major matrix; taps in the padding
/// are zero.
template <class T>
void im2col(const T* x, int64_t channels, const ConvGeometry& g, int64_t y0, int64_t y1, T* col) {
  const int64_t plane = g.h * g.w, block = (y1 - y0) * g.ow;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * block;
        const int64_t offset_w = j * g.dilation_w - g.pad_w;  // iw = ow * stride_w + offset_w
        const auto [ow_lo, ow_hi] = taps_inside(offset_w, g.w, g.ow, g.stride_w);
        for (int64_t oh = y0; oh < y1; ++oh) {
          T* dst = row + (oh - y0) * g.ow;
          const int64_t ih = oh * g.stride_h - g.pad_h + i * g.dilation_h;
          if (ih < 0 || ih >= g.h) {
            std::fill(dst, dst + g.ow, T(0));
            continue;
          }
          const T* src = x + c * plane + ih * g.w;
          std::fill(dst, dst + ow_lo, T(0));
          if (g.stride_w == 1) {
            std::copy(src + ow_lo + offset_w, src + ow_hi + offset_w, dst + ow_lo);
          } else {
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) dst[ow] = src[ow * g.stride_w + offset_w];
          }
          std::fill(dst + ow_hi, dst + g.ow, T(0));
        }
      }
    }
  }
}

/// Lays out part of the receptive fields of the output positions [first, last) (row-major over
/// [n, oh, ow], n counting images from `x`, each of g.c planes, `channel0` the first read) as the
/// rows of a row-major matrix with row stride `ld`: the columns of kernel rows [unit0, unit1), a
/// kernel row (c, i) being the kw taps (c, i, 0..kw) of a receptive field laid out [c, kh, kw];
/// taps in the padding are zero. It copies runs of kw taps where im2col copies runs of ow
/// positions: the layout for kernels wider than their output, such as a weight gradient's.
template <class T>
void im2row(const T* x, int64_t channel0, const ConvGeometry& g, const ConvStrides& s,
            int64_t first, int64_t last, int64_t unit0, int64_t unit1, T* rows, int64_t ld) {
  const int64_t out_plane = g.oh * g.ow, kw = g.kw;
  for (int64_t r = first; r < last; ++r, rows += ld) {
    const int64_t n = r / out_plane, pos = r % out_plane;
    const T* image = x + n * s.x_n + channel0 * s.x_c;
    const int64_t start_h = pos / g.ow * g.stride_h - g.pad_h;
    const int64_t start_w = pos % g.ow * g.stride_w - g.pad_w;
    const auto [i_lo, i_hi] = taps_inside(start_h, g.h, g.kh, g.dilation_h);
    const auto [j_lo, j_hi] = taps_inside(start_w, g.w, g.kw, g.dilation_w);
    T* __restrict__ dst = rows;
    const int64_t run = j_hi - j_lo;
    const bool contiguous = g.dilation_w == 1;
    for (int64_t c = unit0 / g.kh, i = unit0 % g.kh, u = unit0; u < unit1; ++u, dst += kw) {
      if (i < i_lo || i >= i_hi) {
        for (int64_t j = 0; j < kw; ++j) dst[j] = T(0);
      } else {
        const T* __restrict__ src =
            image + c * s.x_c + (start_h + i * g.dilation_h) * g.w + start_w + j_lo * g.dilation_w;
        for (int64_t j = 0; j < j_lo; ++j) dst[j] = T(0);
        T* __restrict__ d = dst + j_lo;
        if (contiguous) {
          copy_run(d, src, run);
        } else {
          for (int64_t j = 0; j < run; ++j) d[j] = src[j * g.dilation_w];
        }
        for (int64_t j = j_hi; j < kw; ++j) dst[j] = T(0);
      }
      if (++i == g.kh) i = 0, ++c;
    }
  }
}

/// im2row (above) for kernels the size of the input plane with unit steps (the weight gradient
/// of a "same" convolution: the output gradient as kernel over the padded input, output taps
/// (p, q) its shifts): each channel's part of a row is the input plane shifted by (p - pad_h,
/// q - pad_w), so it is laid out whole channels [channel0 + c0, channel0 + c1) at a time, each
/// one shifted_plane.
template <class T>
void im2row_shifted(const T* x, int64_t channel0, const ConvGeometry& g, const ConvStrides& s,
                    int64_t first, int64_t last, int64_t c0, int64_t c1, T* rows, int64_t ld) {
  const int64_t plane = g.h * g.w, out_plane = g.oh * g.ow;
  for (int64_t r = first; r < last; ++r, rows += ld) {
    const int64_t n = r / out_plane, pos = r % out_plane;
    const T* image = x + n * s.x_n + channel0 * s.x_c;
    for (int64_t c = c0; c < c1; ++c) {
      shifted_plane(image + c * s.x_c, g.h, g.w, pos / g.ow - g.pad_h, pos % g.ow - g.pad_w,
                    rows + (c - c0) * plane, g.h);
    }
  }
}

// Runs image(n, thread, gemm_pool) for n in [0, images): images spread over the pool's threads
// when there are enough of them, else one at a time with each image's GEMMs split instead.
template <class F>
void for_each_image(ComputePool& pool, int64_t images, F&& image) {
  if (images >= pool.threads()) {
    parallel_for(pool, images, 1, [&](int64_t first, int64_t last, int thread) {
      for (int64_t n = first; n < last; ++n) image(n, thread, nullptr);
    });
  } else {
    for (int64_t n = 0; n < images; ++n) image(n, 0, &pool);
  }
}

/// Convolution as GEMMs per image and group, out[o, oh * ow] = w[o, patch] x col[patch, oh *
/// ow], a block of output rows at a time, images spread over the pool's threads (each image's GEMM
/// split over them instead when there are fewer images than threads).
template <class T>
void conv2d_by_columns(const T* x, const T* w, const T* bias, T* out, const ConvGeometry& g,
                       ComputePool& pool) {
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t patch = in_group * g.kh * g.kw, out_plane = g.oh * g.ow;
  // A 1x1 kernel with unit stride and no padding reads each plane as it is: the input already
  // is the column matrix, so im2col would only copy it.
  const bool pointwise =
      g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
  const bool shifted = !pointwise && g.stride_h == 1 && g.stride_w == 1 && g.ow == g.w;
  // A column matrix past kWholeFloats (a 56x56 plane's columns for a 3x3 kernel over 64
  // channels would be 7 MiB) is laid out and multiplied a block of output rows at a time, each
  // block about kColumnBlockFloats, so the GEMM reads it from cache right after im2col writes it;
  // blocks keep at least kMinColumns columns, so that each GEMM stays wide (each repacks the
  // weights).
  constexpr int64_t kWholeFloats = int64_t{1} << 19, kColumnBlockFloats = int64_t{1} << 16;
  constexpr int64_t kMinColumns = 256;
  const int64_t wide_rows = (kMinColumns + g.ow - 1) / g.ow;
  const int64_t block_rows =
      pointwise || patch * out_plane <= kWholeFloats
          ? g.oh
          : std::clamp<int64_t>(std::max(kColumnBlockFloats / (patch * g.ow), wide_rows), 1, g.oh);
  auto image = [&](int64_t n, int thread, ComputePool* gemm_pool) {
    T* col = pointwise
                 ? nullptr
                 : static_cast<T*>(pool.scratch(thread, sizeof(T) * patch * block_rows * g.ow));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* x_group = x + (n * g.c + grp * in_group) * g.h * g.w;
      T* out_group_planes = out + (n * g.o + grp * out_group) * out_plane;
      for (int64_t y0 = 0; y0 < g.oh; y0 += block_rows) {
        const int64_t y1 = std::min(g.oh, y0 + block_rows), columns = (y1 - y0) * g.ow;
        const T* b = x_group + y0 * g.ow;
        if (shifted) {
          im2col_shifted(x_group, in_group, g, y0, y1, col);
          b = col;
        } else if (!pointwise) {
          im2col(x_group, in_group, g, y0, y1, col);
          b = col;
        }
        gemm<T>({out_group, columns, patch, w + grp * out_group * patch, patch, b,
                 pointwise ? out_plane : columns, out_group_planes + y0 * g.ow, out_plane, false,
                 precision_of(g)},
                false, false, gemm_pool);
      }
    }
    // The bias while the image's planes are in cache: the sum, then + b, as the add would.
    if (bias) add_bias(out + n * g.o * out_plane, bias, g.o, out_plane, out_plane);
  };
  for_each_image(pool, g.n, image);
}

/// Convolution with the output positions of all images as the rows of one GEMM,
/// out2[(n, oh, ow), o] = rows[(n, oh, ow), patch] x w[o, patch]^T, then scattered to NCHW. For
/// small outputs of large kernels, where a GEMM per image would be a few columns wide: a weight
/// gradient, whose patch holds a whole batch of planes. The row matrix is never built whole: each
/// thread takes a block of rows and sums its product over blocks of the patch (whole kernel rows,
/// about kBlockFloats at a time), so each block is laid out just before the GEMM reads it from
/// cache. With too few rows to go round, the output's columns (channels) are split instead, each
/// part laying out the blocks it needs itself. The planes of x, w and out may lie as `s` says
/// (groups = 1 then): the weight gradient's swapped operands read in place.
template <class T>
void conv2d_by_rows(const T* x, const T* w, T* out, const ConvGeometry& g, const ConvStrides& s,
                    ComputePool& pool) {
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t patch = in_group * g.kh * g.kw, out_plane = g.oh * g.ow;
  const int64_t total = g.n * out_plane, units = in_group * g.kh;
  constexpr int64_t kBlockFloats = int64_t{1} << 18;  // 256 KiB of f32 per laid-out block
  constexpr int64_t kRowAlign = 4, kColumnAlign = 8;  // Eigen's register blocks (see linalg.cpp)
  // Small products stay on the calling thread, as gemm's do (linalg.cpp).
  const bool one_part = pool.threads() == 1 || total * out_group * patch < (int64_t{1} << 20);
  const int threads = one_part ? 1 : pool.threads();
  const bool split_rows = total >= 2 * kRowAlign * threads || out_group < 2 * kColumnAlign;
  const int64_t part_rows =
      split_rows ? split_range(total, threads, kRowAlign, kRowAlign).size : total;
  // A kernel the plane's size with unit steps lays out whole shifted planes (im2row_shifted):
  // blocks of whole channels then.
  const bool shifted = g.kh == g.h && g.kw == g.w && g.stride_h == 1 && g.stride_w == 1 &&
                       g.dilation_h == 1 && g.dilation_w == 1;
  const int64_t unit_step = shifted ? g.kh : 1;
  // A block's columns of w must be one strided matrix: with w's channels apart (swapped), a
  // block is one channel's kernel rows.
  const bool channels_apart = s.w_c != g.kh * g.kw;
  // Sized for half the rows, whatever the thread count, so that the sums' bits do not depend on it.
  const int64_t depth_rows = std::max<int64_t>(1, (total + 1) / 2);
  const int64_t block_units =
      channels_apart ? g.kh
                     : std::clamp<int64_t>(kBlockFloats / (depth_rows * g.kw * unit_step), 1,
                                           units / unit_step) *
                           unit_step;
  const std::size_t block_bytes =
      sizeof(T) * static_cast<std::size_t>(part_rows * block_units * g.kw);
  // Scratch is taken for every thread before the parts run (a part may not grow another
  // thread's); thread 0's also holds the products, after its block.
  std::vector<T*> blocks(static_cast<std::size_t>(threads));
  const std::size_t product_bytes = sizeof(T) * static_cast<std::size_t>(total * out_group);
  for (int t = 0; t < threads; ++t) {
    blocks[static_cast<std::size_t>(t)] =
        static_cast<T*>(pool.scratch(t, block_bytes + (t == 0 ? product_bytes + 64 : 0)));
  }
  T* products = blocks[0] + (block_bytes + 63) / 64 * 64 / sizeof(T);
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    const T* wg = w + grp * out_group * patch;
    // Output rows [r0, r1), channels [o0, o1) over the whole patch.
    auto part = [&](int64_t r0, int64_t r1, int64_t o0, int64_t o1, int thread) {
      T* block = blocks[static_cast<std::size_t>(thread)];
      for (int64_t u0 = 0; u0 < units; u0 += block_units) {
        const int64_t u1 = std::min(units, u0 + block_units), k = (u1 - u0) * g.kw;
        if (shifted) {
          im2row_shifted(x, grp * in_group, g, s, r0, r1, u0 / g.kh, u1 / g.kh, block, k);
        } else {
          im2row(x, grp * in_group, g, s, r0, r1, u0, u1, block, k);
        }
        // Kernel row u0 is row u0 % kh of channel u0 / kh.
        const T* b = wg + o0 * s.w_o + u0 / g.kh * s.w_c + u0 % g.kh * g.kw;
        MatrixProduct q{r1 - r0,  o1 - o0, k, block, k, b, s.w_o, products + r0 * out_group + o0,
                        out_group};
        q.accumulate = u0 > 0;
        q.precision = precision_of(g);
        gemm<T>(q, false, true, nullptr);
      }
    };
    if (one_part) {
      part(0, total, 0, out_group, 0);
    } else if (split_rows) {
      parallel_for(
          pool, total, kRowAlign,
          [&](int64_t r0, int64_t r1, int thread) { part(r0, r1, 0, out_group, thread); },
          kRowAlign, 1);
    } else {
      parallel_for(
          pool, out_group, kColumnAlign,
          [&](int64_t o0, int64_t o1, int thread) { part(0, total, o0, o1, thread); }, kColumnAlign,
          1);
    }
    for (int64_t n = 0; n < g.n; ++n) {
      T* dst = out + n * s.out_n + grp * out_group * s.out_o;
      const T* src = products + n * out_plane * out_group;
      for (int64_t o = 0; o < out_group; ++o) {
        for (int64_t pos = 0; pos < out_plane; ++pos)
          dst[o * s.out_o + pos] = src[pos * out_group + o];
      }
    }
  }
}

/// Stride-1 convolution with fewer output than input channels (the input gradient's form) as a
/// GEMM over the input as it is: taps[(o, i, j), h * w] = w[(o, i, j), c] x x[c, h * w], then
/// each output plane sums its kh * kw tap planes, shifted. im2col would copy the input kh * kw
/// times to be read o times; here the GEMM reads it once for o * kh * kw rows, and the shifted
/// sums touch o * kh * kw planes of the output's size.
template <class T>
void conv2d_by_taps(const T* x, const T* w, T* out, const ConvGeometry& g, ComputePool& pool) {
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t taps = g.kh * g.kw, plane = g.h * g.w, out_plane = g.oh * g.ow;
  const int64_t rows = out_group * taps;
  // The weights as [(o, i, j), c] per group.
  std::vector<T> tap_weights(static_cast<std::size_t>(g.groups * rows * in_group));
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t o = 0; o < out_group; ++o) {
      for (int64_t c = 0; c < in_group; ++c) {
        for (int64_t t = 0; t < taps; ++t) {
          tap_weights[((grp * out_group + o) * taps + t) * in_group + c] =
              w[((grp * out_group + o) * in_group + c) * taps + t];
        }
      }
    }
  }
  const bool same = g.oh == g.h && g.ow == g.w;
  auto image = [&](int64_t n, int thread, ComputePool* gemm_pool) {
    T* tap_planes = static_cast<T*>(pool.scratch(thread, sizeof(T) * rows * plane));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      gemm<T>({rows, plane, in_group, tap_weights.data() + grp * rows * in_group, in_group,
               x + (n * g.c + grp * in_group) * plane, plane, tap_planes, plane, false,
               precision_of(g)},
              false, false, gemm_pool);
      for (int64_t o = 0; o < out_group; ++o) {
        T* dst = out + (n * g.o + grp * out_group + o) * out_plane;
        std::fill_n(dst, out_plane, T(0));
        for (int64_t i = 0; i < g.kh; ++i) {
          // Output row y reads tap row y + i - pad_h.
          const int64_t y_lo = std::max<int64_t>(0, g.pad_h - i);
          const int64_t y_hi = std::min(g.oh, g.h + g.pad_h - i);
          for (int64_t j = 0; j < g.kw; ++j) {
            const int64_t x_lo = std::max<int64_t>(0, g.pad_w - j);
            const int64_t x_hi = std::min(g.ow, g.w + g.pad_w - j);
            if (x_lo >= x_hi) continue;
            T* tap_plane = tap_planes + ((o * g.kh + i) * g.kw + j) * plane;
            if (same) {
              // Output p reads tap p + shift, all but the columns past the plane's sides, which
              // read the row above's last or the row below's first taps: those tap columns no
              // output reads otherwise, so zeroed they let one run over the rows add them all.
              const int64_t dj = j - g.pad_w, shift = (i - g.pad_h) * g.w + dj;
              // Column by column: a few columns, and a run per row would be a library call.
              const int64_t x0 = std::clamp<int64_t>(dj, 0, g.w);
              const int64_t x1 = std::clamp<int64_t>(g.w + dj, x0, g.w);
              auto zero_column = [&](int64_t col) {
                for (int64_t y = 0; y < g.h; ++y) tap_plane[y * g.w + col] = T(0);
              };
              for (int64_t col = 0; col < x0; ++col) zero_column(col);
              for (int64_t col = x1; col < g.w; ++col) zero_column(col);
              const int64_t p0 = std::max(y_lo * g.ow, -shift);
              const int64_t p1 = std::min(y_hi * g.ow, plane - shift);
              if (p0 < p1) add_run(dst + p0, tap_plane + p0 + shift, p1 - p0);
              continue;
            }
            for (int64_t y = y_lo; y < y_hi; ++y) {
              add_run(dst + y * g.ow + x_lo,
                      tap_plane + (y + i - g.pad_h) * g.w + x_lo + j - g.pad_w, x_hi - x_lo);
            }
          }
        }
      }
    }
  };
  for_each_image(pool, g.n, image);
}

/// Copies the [a, b, plane] value whose plane (i, j) starts at i * first + j * second into NCHW
/// order.
template <class T>
std::vector<T> gathered_planes(const T* src, int64_t a, int64_t b, int64_t plane, int64_t first,
                               int64_t second) {
  std::vector<T> dst(static_cast<std::size_t>(a * b * plane));
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t j = 0; j < b; ++j) {
      std::copy_n(src + i * first + j * second, plane, dst.data() + (i * b + j) * plane);
    }
  }
  return dst;
}

/// The convolution into `out` as `g` lays it out; with `bias`, plus bias[o] on each plane o (in
/// by_columns while each image is in cache; after the sums in the other forms).
template <class T>
void conv2d_typed(const T* x, const T* w, const T* bias, T* out, const ConvGeometry& g,
                  ComputePool& pool) {
  if (g.n == 0 || g.o == 0) return;
  const ConvStrides s = strides_of(g);
  const int64_t out_plane = g.oh * g.ow;
  auto add_all_bias = [&] {
    if (!bias) return;
    for (int64_t n = 0; n < g.n; ++n) add_bias(out + n * s.out_n, bias, g.o, out_plane, s.out_o);
  };
  if (g.c == 0) {
    // No input channels: an empty sum.
    for (int64_t n = 0; n < g.n; ++n) {
      for (int64_t o = 0; o < g.o; ++o)
        std::fill_n(out + n * s.out_n + o * s.out_o, out_plane, T(0));
    }
    return add_all_bias();
  }
  // im2col copies runs of ow taps, im2row runs of kw: take the longer runs.
#if defined(__AVX2__)
  if constexpr (std::is_same_v<T, float>) {
    if (takes_small_output(g)) {
      conv2d_small_output(x, w, out, g, s, pool);
      return add_all_bias();
    }
  }
#endif
  if (g.kw > g.ow) {
    conv2d_by_rows(x, w, out, g, s, pool);
    return add_all_bias();
  }
  if (g.layout != 0) {
    // The other forms read NCHW: the swapped operands are laid out so first.
    ConvGeometry plain = g;
    plain.layout = 0;
    const std::vector<T> xs =
        g.layout & 1 ? gathered_planes(x, g.n, g.c, g.h * g.w, s.x_n, s.x_c) : std::vector<T>{};
    const std::vector<T> ws =
        g.layout & 2 ? gathered_planes(w, g.o, g.c, g.kh * g.kw, s.w_o, s.w_c) : std::vector<T>{};
    std::vector<T> outs(g.layout & 4 ? static_cast<std::size_t>(g.n * g.o * out_plane) : 0);
    conv2d_typed(g.layout & 1 ? xs.data() : x, g.layout & 2 ? ws.data() : w, bias,
                 g.layout & 4 ? outs.data() : out, plain, pool);
    if (g.layout & 4) {
      // [n, o] planes to [o, n].
      for (int64_t n = 0; n < g.n; ++n) {
        for (int64_t o = 0; o < g.o; ++o) {
          std::copy_n(outs.data() + (n * g.o + o) * out_plane, out_plane,
                      out + n * s.out_n + o * s.out_o);
        }
      }
    }
    return;
  }
  const bool unit_steps =
      g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1;
  // With more output than input channels the tap planes outnumber im2col's rows: im2col wins.
  if (unit_steps && g.o < g.c && g.kh * g.kw > 1) {
    conv2d_by_taps(x, w, out, g, pool);
    return add_all_bias();
  }
  // An output plane narrower than two of the GEMM's 32-column register tiles would leave each
  // image's GEMM tiles part empty (a 7 x 7 plane fills 49 of 64 columns): all images' positions
  // as the rows of one GEMM fill them (by_rows measured 1.07-1.18 times by_columns' GFLOP/s on
  // ResNet's 7 x 7 layers, 0.8 times on its 14 x 14 ones).
  if (g.groups == 1 && out_plane < 64) {
    conv2d_by_rows(x, w, out, g, s, pool);
    return add_all_bias();
  }
  conv2d_by_columns(x, w, bias, out, g, pool);
}

// Elements per part of the bf16 widening and rounding passes.
constexpr int64_t kConvertGrain = int64_t{1} << 15;

// widened() with the pass split over the pool: a bf16 operand in the calling thread's buffer
// `slot` as f32.
const float* widened_on(ComputePool& pool, const ConstView& v, int slot) {
  const int64_t n = v.desc->shape.numel();
  float* out = thread_floats(slot, static_cast<std::size_t>(n));
  parallel_for(pool, n, kConvertGrain,
               [&](int64_t b, int64_t e, int) { widen_block(v.as<Bf16>() + b, out + b, e - b); });
  return out;
}

void conv2d(const KernelArgs& args) {
  const ConvGeometry g = plan_conv(args);
  ComputePool& pool = args.pool;
  const ConstView& x = args.inputs[0];
  const ConstView& w = args.inputs[1];
  auto bias = [&](auto tag) {
    using T = decltype(tag);
    return g.bias ? args.inputs[2].as<T>() : static_cast<const T*>(nullptr);
  };
  switch (args.output.desc->dtype) {
    case DType::kFloat32:
      return conv2d_typed(x.as<float>(), w.as<float>(), bias(float{}), args.output.as<float>(), g,
                          pool);
    case DType::kFloat64:
      return conv2d_typed(x.as<double>(), w.as<double>(), bias(double{}), args.output.as<double>(),
                          g, pool);
    case DType::kBFloat16: {
      // bf16 storage, f32 accumulation: widen once, convolve with bf16 products, round once at
      // the end; the widening and rounding passes split over the pool too.
      ConvGeometry bf16 = g;
      bf16.bf16_products = true;
      const int64_t n = args.output.desc->shape.numel();
      float* out = thread_floats(2, static_cast<std::size_t>(n));
      conv2d_typed(widened_on(pool, x, 0), widened_on(pool, w, 1),
                   static_cast<const float*>(nullptr), out, bf16, pool);
      return parallel_for(pool, n, kConvertGrain, [&](int64_t b, int64_t e, int) {
        narrow_block(out + b, args.output.as<Bf16>() + b, e - b);
      });
    }
    default:
      return;  // rejected by plan_conv
  }
}
}  // namespace

void register_conv_kernels(KernelTable& table) { set_kernel(table, Kernel::kConv2d, conv2d); }

}  // namespace axle::cpu
