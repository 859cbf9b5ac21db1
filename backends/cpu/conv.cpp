// backends/cpu: convolution kernels (kConv2d) on NCHW buffers. Convolution is a GEMM in one of
// three forms, picked by shape: im2col per image, receptive fields as rows over all images
// (kernels wider than their output), or shifted sums of tap planes (stride 1, fewer output than
// input channels). Images are spread over the device's threads. The pooling kernels are in
// pooling.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends/cpu/compute_pool.h"
#include "backends/cpu/element.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/kernel.h"
#include "backends/cpu/window.h"

namespace axle::cpu {
namespace {

// ---- conv2d ----------------------------------------------------------------------------

struct ConvGeometry {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weight (its channel dim is c / groups)
  int64_t oh, ow;      // output
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
};

ConvGeometry plan_conv(const KernelArgs& args) {
  const auto& ints = args.call.ints;
  std::string attributes = raw_ints(ints);
  if (ints.size() == 7) {
    attributes = fmt::format("stride=({},{}), pad=({},{}), dilation=({},{}), groups={}", ints[0],
                             ints[1], ints[2], ints[3], ints[4], ints[5], ints[6]);
  }
  auto reject = [&](std::string_view why) {
    throw std::invalid_argument(fmt::format("{}: {}", describe(args, attributes), why));
  };
  if (args.inputs.size() != 2) reject("conv2d takes [x, w]");
  if (ints.size() != 7) {
    reject("ints must be [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups]");
  }
  const BufferDesc& x = *args.inputs[0].desc;
  const BufferDesc& w = *args.inputs[1].desc;
  const BufferDesc& out = *args.output.desc;
  if (x.dtype != out.dtype || w.dtype != out.dtype) reject("x and w must have the output's dtype");
  if (!is_floating(out.dtype)) reject("conv2d supports f32, f64 and bf16");
  if (x.shape.rank() != 4 || w.shape.rank() != 4) reject("x and w must have rank 4");
  ConvGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.o = w.shape[0], g.kh = w.shape[2], g.kw = w.shape[3];
  g.stride_h = ints[0], g.stride_w = ints[1], g.pad_h = ints[2], g.pad_w = ints[3];
  g.dilation_h = ints[4], g.dilation_w = ints[5], g.groups = ints[6];
  if (g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1) {
    reject("stride and dilation must be >= 1");
  }
  if (g.pad_h < 0 || g.pad_w < 0) reject("padding must be >= 0");
  if (g.groups < 1) reject("groups must be >= 1");
  if (g.c % g.groups != 0) reject("input channels are not divisible by groups");
  if (g.o % g.groups != 0) reject("output channels are not divisible by groups");
  if (w.shape[1] * g.groups != g.c) reject("w's channel dim must be input channels / groups");
  const int64_t span_h = g.h + 2 * g.pad_h - g.dilation_h * (g.kh - 1) - 1;
  const int64_t span_w = g.w + 2 * g.pad_w - g.dilation_w * (g.kw - 1) - 1;
  if (g.kh < 1 || g.kw < 1 || span_h < 0 || span_w < 0) {
    reject("the (dilated) kernel does not fit in the padded input");
  }
  g.oh = span_h / g.stride_h + 1;
  g.ow = span_w / g.stride_w + 1;
  const Shape expected{g.n, g.o, g.oh, g.ow};
  if (!(expected == out.shape)) {
    reject(fmt::format("the attributes give an output of shape {}", expected.to_string()));
  }
  return g;
}

/// Lays out the receptive fields of `channels` planes starting at `x` as the columns of a
/// [channels * kh * kw, oh * ow] row-major matrix; taps in the padding are zero.
template <class T>
void im2col(const T* x, int64_t channels, const ConvGeometry& g, T* col) {
  const int64_t plane = g.h * g.w, out_plane = g.oh * g.ow;
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t i = 0; i < g.kh; ++i) {
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = col + ((c * g.kh + i) * g.kw + j) * out_plane;
        const int64_t offset_w = j * g.dilation_w - g.pad_w;  // iw = ow * stride_w + offset_w
        const auto [ow_lo, ow_hi] = taps_inside(offset_w, g.w, g.ow, g.stride_w);
        for (int64_t oh = 0; oh < g.oh; ++oh) {
          T* dst = row + oh * g.ow;
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

/// Lays out the receptive fields of output positions [first, last) (row-major over [oh, ow]) of
/// the `channels` planes at `x` as the rows of a [last - first, channels * kh * kw] row-major
/// matrix; taps in the padding are zero. It copies runs of kw taps where im2col copies runs of ow
/// positions: the layout for kernels wider than their output, such as a weight gradient's.
template <class T>
void im2row(const T* x, int64_t channels, const ConvGeometry& g, int64_t first, int64_t last,
            T* rows) {
  const int64_t plane = g.h * g.w;
  for (int64_t pos = first; pos < last; ++pos) {
    const int64_t start_h = pos / g.ow * g.stride_h - g.pad_h;
    const int64_t start_w = pos % g.ow * g.stride_w - g.pad_w;
    const auto [i_lo, i_hi] = taps_inside(start_h, g.h, g.kh, g.dilation_h);
    const auto [j_lo, j_hi] = taps_inside(start_w, g.w, g.kw, g.dilation_w);
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t i = 0; i < g.kh; ++i, rows += g.kw) {
        if (i < i_lo || i >= i_hi) {
          std::fill_n(rows, g.kw, T(0));
          continue;
        }
        const T* src = x + c * plane + (start_h + i * g.dilation_h) * g.w + start_w;
        std::fill(rows, rows + j_lo, T(0));
        if (g.dilation_w == 1) {
          std::copy(src + j_lo, src + j_hi, rows + j_lo);
        } else {
          for (int64_t j = j_lo; j < j_hi; ++j) rows[j] = src[j * g.dilation_w];
        }
        std::fill(rows + j_hi, rows + g.kw, T(0));
      }
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

/// Convolution as one GEMM per image and group, out[o, oh * ow] = w[o, patch] x col[patch, oh *
/// ow], images spread over the pool's threads (each image's GEMM split over them instead when
/// there are fewer images than threads).
template <class T>
void conv2d_by_columns(const T* x, const T* w, T* out, const ConvGeometry& g, ComputePool& pool) {
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t patch = in_group * g.kh * g.kw, out_plane = g.oh * g.ow;
  // A 1x1 kernel with unit stride and no padding reads each plane as it is: the input already
  // is the column matrix, so im2col would only copy it.
  const bool pointwise =
      g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
  auto image = [&](int64_t n, int thread, ComputePool* gemm_pool) {
    T* col =
        pointwise ? nullptr : static_cast<T*>(pool.scratch(thread, sizeof(T) * patch * out_plane));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* x_group = x + (n * g.c + grp * in_group) * g.h * g.w;
      const T* columns = x_group;
      if (!pointwise) {
        im2col(x_group, in_group, g, col);
        columns = col;
      }
      gemm<T>({out_group, out_plane, patch, w + grp * out_group * patch, patch, columns, out_plane,
               out + (n * g.o + grp * out_group) * out_plane, out_plane},
              false, false, gemm_pool);
    }
  };
  for_each_image(pool, g.n, image);
}

/// Convolution with the output positions of a run of images as the rows of one GEMM,
/// out2[(n, oh, ow), o] = rows[(n, oh, ow), patch] x w[o, patch]^T, then scattered to NCHW. For
/// small outputs of large kernels, where a GEMM per image would be a few columns wide.
template <class T>
void conv2d_by_rows(const T* x, const T* w, T* out, const ConvGeometry& g, ComputePool& pool) {
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t patch = in_group * g.kh * g.kw, out_plane = g.oh * g.ow;
  // Images per GEMM: as many as keep the row matrix within 16 MiB.
  constexpr int64_t kRowMatrixBytes = int64_t{16} << 20;
  const int64_t image_bytes = out_plane * patch * static_cast<int64_t>(sizeof(T));
  const int64_t images = std::clamp<int64_t>(kRowMatrixBytes / image_bytes, 1, g.n);
  T* rows = static_cast<T*>(pool.scratch(
      0, sizeof(T) * static_cast<std::size_t>(images * out_plane * (patch + out_group))));
  T* products = rows + images * out_plane * patch;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / patch);
  for (int64_t grp = 0; grp < g.groups; ++grp) {
    for (int64_t n0 = 0; n0 < g.n; n0 += images) {
      const int64_t count = std::min(images, g.n - n0), total = count * out_plane;
      parallel_for(pool, total, grain, [&](int64_t first, int64_t last, int) {
        for (int64_t r = first; r < last;) {
          const int64_t n = r / out_plane, pos = r % out_plane;
          const int64_t end = std::min(last, (n + 1) * out_plane);
          im2row(x + ((n0 + n) * g.c + grp * in_group) * g.h * g.w, in_group, g, pos, pos + end - r,
                 rows + r * patch);
          r = end;
        }
      });
      gemm<T>({total, out_group, patch, rows, patch, w + grp * out_group * patch, patch, products,
               out_group},
              false, true, &pool);
      for (int64_t n = 0; n < count; ++n) {
        T* dst = out + ((n0 + n) * g.o + grp * out_group) * out_plane;
        const T* src = products + n * out_plane * out_group;
        for (int64_t o = 0; o < out_group; ++o) {
          for (int64_t pos = 0; pos < out_plane; ++pos)
            dst[o * out_plane + pos] = src[pos * out_group + o];
        }
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
  auto image = [&](int64_t n, int thread, ComputePool* gemm_pool) {
    T* tap_planes = static_cast<T*>(pool.scratch(thread, sizeof(T) * rows * plane));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      gemm<T>({rows, plane, in_group, tap_weights.data() + grp * rows * in_group, in_group,
               x + (n * g.c + grp * in_group) * plane, plane, tap_planes, plane},
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
            const T* tap_plane = tap_planes + ((o * g.kh + i) * g.kw + j) * plane;
            for (int64_t y = y_lo; y < y_hi; ++y) {
              T* __restrict__ d = dst + y * g.ow + x_lo;
              const T* __restrict__ s = tap_plane + (y + i - g.pad_h) * g.w + x_lo + j - g.pad_w;
              for (int64_t k = 0; k < x_hi - x_lo; ++k) d[k] += s[k];
            }
          }
        }
      }
    }
  };
  for_each_image(pool, g.n, image);
}

template <class T>
void conv2d_typed(const T* x, const T* w, T* out, const ConvGeometry& g, ComputePool& pool) {
  if (g.n == 0 || g.o == 0) return;
  if (g.c == 0) {
    std::fill_n(out, g.n * g.o * g.oh * g.ow, T(0));  // no input channels: an empty sum
    return;
  }
  // im2col copies runs of ow taps, im2row runs of kw: take the longer runs.
  if (g.kw > g.ow) return conv2d_by_rows(x, w, out, g, pool);
  const bool unit_steps =
      g.stride_h == 1 && g.stride_w == 1 && g.dilation_h == 1 && g.dilation_w == 1;
  // With more output than input channels the tap planes outnumber im2col's rows: im2col wins.
  if (unit_steps && g.o < g.c && g.kh * g.kw > 1) return conv2d_by_taps(x, w, out, g, pool);
  conv2d_by_columns(x, w, out, g, pool);
}

void conv2d(const KernelArgs& args) {
  const ConvGeometry g = plan_conv(args);
  ComputePool& pool = args.pool;
  const ConstView& x = args.inputs[0];
  const ConstView& w = args.inputs[1];
  switch (args.output.desc->dtype) {
    case DType::kF32:
      return conv2d_typed(x.as<float>(), w.as<float>(), args.output.as<float>(), g, pool);
    case DType::kF64:
      return conv2d_typed(x.as<double>(), w.as<double>(), args.output.as<double>(), g, pool);
    case DType::kBF16: {
      // bf16 storage, f32 accumulation: widen once, convolve in f32, round once at the end.
      std::vector<float> out(static_cast<std::size_t>(args.output.desc->shape.numel()));
      conv2d_typed(widened(x).data(), widened(w).data(), out.data(), g, pool);
      return narrow_block(out.data(), args.output.as<Bf16>(), static_cast<int64_t>(out.size()));
    }
    default:
      return;  // rejected by plan_conv
  }
}
}  // namespace

void register_conv_kernels(KernelTable& table) { set_kernel(table, Kernel::kConv2d, conv2d); }

}  // namespace axle::cpu
