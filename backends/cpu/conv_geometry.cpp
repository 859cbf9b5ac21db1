// backends/cpu: a conv2d's geometry from its kernel arguments, checked, and where its planes lie
// (conv_geometry.h).
#include "axle/backends/cpu/conv_geometry.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/window.h"

namespace axle::cpu {

ConvStrides strides_of(const ConvGeometry& g) {
  const int64_t plane = g.h * g.w, kernel_plane = g.kh * g.kw, out_plane = g.oh * g.ow;
  const int64_t cg = g.c / g.groups;
  auto pair = [](bool swapped, int64_t second_size, int64_t first_size, int64_t plane_size) {
    // [first, second, plane] as stored, or [second, first, plane] when swapped.
    return swapped ? std::pair{plane_size, first_size * plane_size}
                   : std::pair{second_size * plane_size, plane_size};
  };
  const auto [x_n, x_c] = pair(g.layout & 1, g.c, g.n, plane);
  const auto [w_o, w_c] = pair(g.layout & 2, cg, g.o, kernel_plane);
  const auto [out_n, out_o] = pair(g.layout & 4, g.o, g.n, out_plane);
  return {x_n, x_c, w_o, w_c, out_n, out_o};
}

std::string conv_attributes(const std::vector<int64_t>& ints) {
  if (ints.size() != 7) return raw_ints(ints);
  return fmt::format("stride=({},{}), pad=({},{}), dilation=({},{}), groups={}", ints[0], ints[1],
                     ints[2], ints[3], ints[4], ints[5], ints[6]);
}

ConvGeometry plan_conv(const KernelArgs& args) {
  const auto& ints = args.call.ints;
  const std::string attributes = conv_attributes(ints);
  auto reject = [&](std::string_view why) {
    throw std::invalid_argument(fmt::format("{}: {}", describe(args, attributes), why));
  };
  if (args.inputs.size() != 2 && args.inputs.size() != 3) reject("conv2d takes [x, w(, b)]");
  if ((ints.size() != 7 && ints.size() != 8) ||
      (ints.size() == 8 && (ints[7] < 0 || ints[7] > 7))) {
    reject(
        "ints must be [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups(, "
        "layout in [0, 7])]");
  }
  const int64_t layout = ints.size() == 8 ? ints[7] : 0;
  if (layout != 0 && ints[6] != 1) reject("a swapped layout needs groups = 1");
  // The logical shapes: a buffer stored with dims 0 and 1 swapped holds the value transposed.
  auto logical = [](const BufferDesc& d, bool swapped) {
    Shape shape = d.shape;
    if (swapped && shape.rank() == 4) std::swap(shape[0], shape[1]);
    return BufferDesc{d.dtype, shape};
  };
  ConvGeometry g{};
  const BufferDesc x = logical(*args.inputs[0].desc, layout & 1);
  const BufferDesc w = logical(*args.inputs[1].desc, layout & 2);
  const BufferDesc out = logical(*args.output.desc, layout & 4);
  if (x.dtype != out.dtype || w.dtype != out.dtype) reject("x and w must have the output's dtype");
  if (!is_floating(out.dtype)) reject("conv2d supports f32, f64 and bf16");
  if (args.inputs.size() == 3) {
    const BufferDesc& b = *args.inputs[2].desc;
    if (b.dtype != out.dtype || out.dtype == DType::kBFloat16)
      reject("a bias must be f32 or f64, the output's dtype");
    if (w.shape.rank() == 4 && b.shape.numel() != w.shape[0])
      reject("a bias needs one value per output channel");
    g.bias = true;
  }
  if (x.shape.rank() != 4 || w.shape.rank() != 4) reject("x and w must have rank 4");
  g.layout = layout;
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

}  // namespace axle::cpu
