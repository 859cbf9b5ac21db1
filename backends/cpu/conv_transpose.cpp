// backends/cpu: kConvTranspose2d, the adjoint of conv2d (its input's gradient, and
// torch.nn.functional.conv_transpose2d). Each input position spreads its values over the output
// through the kernel: per image and group a GEMM gives every tap's contribution,
// taps[(o, i, j), y * w + x] = w[c, (o, i, j)]^T x[c, y * w + x], and each tap plane is added into
// the output at its offset and stride (col2im). Unlike a convolution of the stride-dilated input,
// it multiplies no zeros. A block of input rows at a time keeps the taps in cache; small planes
// go in runs of images side by side, a block of taps at a time. Images spread over the device's
// threads, each summed in one fixed order, so the bits do not depend on the thread count. bf16
// products sum in f32 and the output is rounded once.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/conv_geometry.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/window.h"

namespace axle::cpu {
namespace {

struct TransposedGeometry {
  int64_t n, c, h, w;  // input x [n, c, h, w]
  int64_t o, kh, kw;   // weight [c, o / groups, kh, kw]; o counts all groups' outputs
  int64_t oh, ow;      // output [n, o, oh, ow]
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;
};

TransposedGeometry plan(const KernelArgs& args) {
  const auto& ints = args.call.ints;
  const std::string attributes = conv_attributes(ints);
  auto reject = [&](std::string_view why) {
    throw std::invalid_argument(fmt::format("{}: {}", describe(args, attributes), why));
  };
  if (args.inputs.size() != 2) reject("conv_transpose2d takes [x, w]");
  if (ints.size() != 7) {
    reject("ints must be [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups]");
  }
  const BufferDesc& x = *args.inputs[0].desc;
  const BufferDesc& w = *args.inputs[1].desc;
  const BufferDesc& out = *args.output.desc;
  if (x.dtype != out.dtype || w.dtype != out.dtype) reject("x and w must have the output's dtype");
  if (!is_floating(out.dtype)) reject("conv_transpose2d supports f32, f64 and bf16");
  if (x.shape.rank() != 4 || w.shape.rank() != 4 || out.shape.rank() != 4) {
    reject("x, w and the output must have rank 4");
  }
  TransposedGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.kh = w.shape[2], g.kw = w.shape[3];
  g.stride_h = ints[0], g.stride_w = ints[1], g.pad_h = ints[2], g.pad_w = ints[3];
  g.dilation_h = ints[4], g.dilation_w = ints[5], g.groups = ints[6];
  if (g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 || g.dilation_w < 1) {
    reject("stride and dilation must be >= 1");
  }
  if (g.pad_h < 0 || g.pad_w < 0) reject("padding must be >= 0");
  if (g.groups < 1 || g.c % g.groups != 0) reject("groups must be >= 1 and divide x's channels");
  if (w.shape[0] != g.c) reject("w's dim 0 must be x's channels");
  g.o = w.shape[1] * g.groups;
  g.oh = out.shape[2], g.ow = out.shape[3];
  if (out.shape[0] != g.n || out.shape[1] != g.o) {
    reject(fmt::format("the output must be [{}, {}, OH, OW]", g.n, g.o));
  }
  // OH = (h - 1) * stride - 2 * pad + dilation * (kh - 1) + 1 + output_padding, and torch's
  // output_padding is below the stride or the dilation.
  auto check_size = [&](int64_t size, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
    const int64_t base = (in - 1) * s - 2 * p + d * (k - 1) + 1;
    if (size < 1 || size < base || size >= base + std::max(s, d)) {
      reject(fmt::format("an output size of {} is not {} plus an output padding below {}", size,
                         base, std::max(s, d)));
    }
  };
  check_size(g.oh, g.h, g.kh, g.stride_h, g.pad_h, g.dilation_h);
  check_size(g.ow, g.w, g.kw, g.stride_w, g.pad_w, g.dilation_w);
  return g;
}

// out[Y, X] += taps[y, x] for the tap (i, j) of rows [y0, y1) of an input plane (the taps' row
// stride g.w): Y = y * stride - pad + i * dilation, and X alike; positions outside the output are
// cut.
template <class A>
void add_tap_plane(const A* taps, int64_t y0, int64_t y1, int64_t i, int64_t j,
                   const TransposedGeometry& g, A* out) {
  const int64_t x_shift = j * g.dilation_w - g.pad_w;  // X = x * stride_w + x_shift
  // x in [x_lo, x_hi) lands inside [0, ow).
  const int64_t x_lo = x_shift >= 0 ? 0 : (-x_shift + g.stride_w - 1) / g.stride_w;
  const int64_t x_hi = std::min(g.w, (g.ow - 1 - x_shift) / g.stride_w + 1);
  if (x_hi <= x_lo) return;
  for (int64_t y = y0; y < y1; ++y) {
    const int64_t row = y * g.stride_h - g.pad_h + i * g.dilation_h;
    if (row < 0 || row >= g.oh) continue;
    const A* __restrict__ src = taps + (y - y0) * g.w + x_lo;
    A* __restrict__ dst = out + row * g.ow + x_lo * g.stride_w + x_shift;
    const int64_t count = x_hi - x_lo;
    if (g.stride_w == 1) {
      add_run(dst, src, count);
    } else {
      for (int64_t x = 0; x < count; ++x) dst[x * g.stride_w] += src[x];
    }
  }
}

// taps [rows, columns] (row stride columns) = a^T b: a [depth, rows] (row stride ld_a, rows by
// default), b [depth, columns] (row stride ld_b), both of T; the sums in A.
template <class T, class A>
void taps_product(int64_t rows, int64_t columns, int64_t depth, const T* a, const T* b,
                  int64_t ld_b, A* taps, ComputePool* pool, int64_t ld_a = 0) {
  if (ld_a == 0) ld_a = rows;
  if constexpr (std::is_same_v<T, Bf16>) {
    Gemm product;
    product.m = rows, product.n = columns, product.k = depth;
    product.a = {a, ld_a, true, true};
    product.b = {b, ld_b, false, true};
    product.out = taps;
    product.ldc = columns;
    product.precision = GemmPrecision::kBf16;
    gemm(product, pool);
  } else {
    gemm<T>({rows, columns, depth, a, ld_a, b, ld_b, taps, columns}, true, false, pool);
  }
}

// Input planes below kBatchedPlane positions (ResNet's 7x7 and 14x14 layers) make a GEMM per
// image a few register tiles wide: images are then taken together, their planes side by side.
constexpr int64_t kBatchedPlane = 256;
// About this many columns (positions of the images taken together) per GEMM.
constexpr int64_t kBatchedColumns = 256;
// Taps of about this many values per block, written by the GEMM and read back from cache.
constexpr int64_t kTapBlockFloats = int64_t{1} << 16;

// conv_transpose for small planes: each thread takes whole runs of images, whose planes it lays
// side by side as [c, images * plane]; one GEMM a block of taps gives those taps for every image
// of the run, and each image adds its tap planes into its output in tap order. The GEMM is as
// wide as the run's planes together, not one small plane.
template <class T>
void conv_transpose_batched(const T* x, const T* w, T* out, const TransposedGeometry& g,
                            ComputePool& pool) {
  using A = compute_t<T>;
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t rows = out_group * g.kh * g.kw, plane = g.h * g.w, out_plane = g.oh * g.ow;
  // Runs of at most half the images, so that two threads share them; the runs do not depend on
  // the thread count (f64's GEMM is Eigen's, whose sums depend on the product's width).
  const int64_t batch = std::clamp<int64_t>(kBatchedColumns / plane, 1, (g.n + 1) / 2);
  const int64_t runs = (g.n + batch - 1) / batch;
  const int64_t columns = batch * plane;
  // Taps of about kTapBlockFloats at a time, in whole register tiles of rows (14).
  const int64_t block_rows = std::clamp<int64_t>(kTapBlockFloats / columns / 14 * 14, 14, rows);
  // A bf16 output is summed in f32 per image and rounded once.
  const int64_t acc_floats = std::is_same_v<T, A> ? 0 : batch * g.o * out_plane;
  const std::size_t bytes =
      sizeof(A) * static_cast<std::size_t>(block_rows * columns + acc_floats) +
      sizeof(T) * static_cast<std::size_t>(in_group * columns) + 64;
  auto run = [&](int64_t n0, int64_t images, int thread) {
    A* taps = static_cast<A*>(pool.scratch(thread, bytes));
    A* accs = taps + block_rows * columns;
    T* side_by_side = reinterpret_cast<T*>(accs + acc_floats);
    auto acc_of = [&](int64_t b) {
      if constexpr (std::is_same_v<T, A>) return out + (n0 + b) * g.o * out_plane;
      return accs + b * g.o * out_plane;
    };
    for (int64_t b = 0; b < images; ++b) zero_run(acc_of(b), g.o * out_plane);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      for (int64_t c = 0; c < in_group; ++c) {
        for (int64_t b = 0; b < images; ++b) {
          std::copy_n(x + ((n0 + b) * g.c + grp * in_group + c) * plane, plane,
                      side_by_side + c * columns + b * plane);
        }
      }
      for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
        const int64_t r1 = std::min(rows, r0 + block_rows);
        taps_product<T, A>(r1 - r0, images * plane, in_group, w + grp * in_group * rows + r0,
                           side_by_side, columns, taps, nullptr, rows);
        for (int64_t b = 0; b < images; ++b) {
          A* acc_group = acc_of(b) + grp * out_group * out_plane;
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t o = r / (g.kh * g.kw), i = r / g.kw % g.kh, j = r % g.kw;
            add_tap_plane(taps + (r - r0) * images * plane + b * plane, 0, g.h, i, j, g,
                          acc_group + o * out_plane);
          }
        }
      }
    }
    if constexpr (!std::is_same_v<T, A>) {
      for (int64_t b = 0; b < images; ++b) {
        narrow_block(acc_of(b), out + (n0 + b) * g.o * out_plane, g.o * out_plane);
      }
    }
  };
  parallel_for(pool, runs, 1, [&](int64_t first, int64_t last, int thread) {
    for (int64_t r = first; r < last; ++r) run(r * batch, std::min(batch, g.n - r * batch), thread);
  });
}

template <class T>
void conv_transpose(const T* x, const T* w, T* out, const TransposedGeometry& g,
                    ComputePool& pool) {
  if (g.h * g.w < kBatchedPlane && g.n > 1) return conv_transpose_batched(x, w, out, g, pool);
  using A = compute_t<T>;  // f32 for f32 and bf16, f64 for f64
  const int64_t in_group = g.c / g.groups, out_group = g.o / g.groups;
  const int64_t rows = out_group * g.kh * g.kw, plane = g.h * g.w, out_plane = g.oh * g.ow;
  // Taps of about kBlockFloats at a time (a block of whole input rows), so that the scatter
  // reads them from cache right after the GEMM writes them.
  constexpr int64_t kBlockFloats = int64_t{1} << 16;
  const int64_t block_rows = std::clamp<int64_t>(kBlockFloats / (rows * g.w), 1, g.h);
  // A bf16 output is summed in f32 and rounded once.
  const int64_t acc_floats = std::is_same_v<T, A> ? 0 : g.o * out_plane;
  auto image = [&](int64_t n, int thread, ComputePool* gemm_pool) {
    A* taps =
        static_cast<A*>(pool.scratch(thread, sizeof(A) * (rows * block_rows * g.w + acc_floats)));
    A* acc = taps + rows * block_rows * g.w;
    if constexpr (std::is_same_v<T, A>) acc = out + n * g.o * out_plane;
    zero_run(acc, g.o * out_plane);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      const T* x_group = x + (n * g.c + grp * in_group) * plane;
      const T* w_group = w + grp * in_group * rows;
      A* acc_group = acc + grp * out_group * out_plane;
      for (int64_t y0 = 0; y0 < g.h; y0 += block_rows) {
        const int64_t y1 = std::min(g.h, y0 + block_rows), columns = (y1 - y0) * g.w;
        taps_product<T, A>(rows, columns, in_group, w_group, x_group + y0 * g.w, plane, taps,
                           gemm_pool);
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t o = r / (g.kh * g.kw), i = r / g.kw % g.kh, j = r % g.kw;
          add_tap_plane(taps + r * columns, y0, y1, i, j, g, acc_group + o * out_plane);
        }
      }
    }
    if constexpr (!std::is_same_v<T, A>) narrow_block(acc, out + n * g.o * out_plane, acc_floats);
  };
  if (g.n >= pool.threads()) {
    parallel_for(pool, g.n, 1, [&](int64_t first, int64_t last, int thread) {
      for (int64_t n = first; n < last; ++n) image(n, thread, nullptr);
    });
  } else {
    for (int64_t n = 0; n < g.n; ++n) image(n, 0, &pool);
  }
}

void conv_transpose_kernel(const KernelArgs& args) {
  const TransposedGeometry g = plan(args);
  visit_dtype(args.output.desc->dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (kIsFloat<T>) {
      conv_transpose(args.inputs[0].as<T>(), args.inputs[1].as<T>(), args.output.as<T>(), g,
                     args.pool);
    }
  });
}

}  // namespace

void register_conv_transpose_kernel(KernelTable& table) {
  set_kernel(table, Kernel::kConvTranspose2d, &conv_transpose_kernel);
}

}  // namespace axle::cpu
