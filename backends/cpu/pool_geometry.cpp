// backends/cpu: a pooling kernel's geometry from its arguments (pool_geometry.h).
#include "axle/backends/cpu/pool_geometry.h"

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/window.h"

namespace axle::cpu {

int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode) {
  int64_t out =
      floor_div(size + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0),
                stride) +
      1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

PoolGeometry plan_pool(const KernelArgs& args, bool is_max, PoolPass pass) {
  const auto& ints = args.call.ints;
  const std::size_t arity = is_max ? 9 : 8;
  // The forward max pool may carry a tenth int: relu first (see max_pool_relu_first).
  const bool relu_flag = is_max && pass == PoolPass::kForward && ints.size() == arity + 1 &&
                         (ints[arity] == 0 || ints[arity] == 1);
  std::string attributes = raw_ints(ints);
  if (ints.size() == arity || relu_flag) {
    attributes = fmt::format("kernel=({},{}), stride=({},{}), pad=({},{}), ", ints[0], ints[1],
                             ints[2], ints[3], ints[4], ints[5]);
    attributes += is_max ? fmt::format("dilation=({},{}), ceil_mode={}", ints[6], ints[7], ints[8])
                         : fmt::format("ceil_mode={}, count_include_pad={}", ints[6], ints[7]);
  }
  auto reject = [&](std::string_view why) {
    throw std::invalid_argument(fmt::format("{}: {}", describe(args, attributes), why));
  };
  if (args.inputs.size() != (pass == PoolPass::kMaxBackward ? 2u : 1u)) {
    reject(pass == PoolPass::kMaxBackward ? "takes [x, grad_out]" : "pooling takes one input");
  }
  if (ints.size() != arity && !relu_flag) {
    reject(is_max ? "ints must be [kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, "
                    "dilation_w, ceil_mode(, relu_first)]"
                  : "ints must be [kh, kw, stride_h, stride_w, pad_h, pad_w, ceil_mode, "
                    "count_include_pad]");
  }
  // A gradient kernel's output has the forward input's shape; the forward output's shape is
  // grad_out's.
  const BufferDesc& x = pass == PoolPass::kAvgBackward ? *args.output.desc : *args.inputs[0].desc;
  const BufferDesc& out = pass == PoolPass::kForward       ? *args.output.desc
                          : pass == PoolPass::kMaxBackward ? *args.inputs[1].desc
                                                           : *args.inputs[0].desc;
  if (x.dtype != out.dtype || x.dtype != args.output.desc->dtype) {
    reject("x must have the output's dtype");
  }
  if (pass == PoolPass::kMaxBackward && !(x.shape == args.output.desc->shape)) {
    reject("the output must have x's shape");
  }
  // torch's avg_pool2d also takes int64 (summing in int64 and dividing toward zero); nothing
  // else of pooling takes integers.
  const bool s64_average = !is_max && pass == PoolPass::kForward && out.dtype == DType::kInt64;
  if (!is_floating(out.dtype) && !s64_average) {
    reject(is_max || pass != PoolPass::kForward ? "pooling supports f32, f64 and bf16"
                                                : "avg_pool2d supports f32, f64, bf16 and s64");
  }
  if (x.shape.rank() != 4) reject("x must be [N, C, H, W]");
  PoolGeometry g{};
  g.planes = x.shape[0] * x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.kh = ints[0], g.kw = ints[1], g.stride_h = ints[2], g.stride_w = ints[3];
  g.pad_h = ints[4], g.pad_w = ints[5];
  if (is_max) {
    g.dilation_h = ints[6], g.dilation_w = ints[7], g.ceil_mode = ints[8] != 0;
    g.relu_first = relu_flag && ints[9] != 0;
  } else {
    g.ceil_mode = ints[6] != 0, g.count_include_pad = ints[7] != 0;
  }
  if (g.kh < 1 || g.kw < 1 || g.stride_h < 1 || g.stride_w < 1 || g.dilation_h < 1 ||
      g.dilation_w < 1) {
    reject("kernel, stride and dilation must be >= 1");
  }
  // torch's rule. Without dilation it also makes every window overlap the input; a dilated max
  // window whose taps all miss it gives -inf, as in torch.
  if (g.pad_h < 0 || g.pad_w < 0 || g.pad_h > g.kh / 2 || g.pad_w > g.kw / 2) {
    reject("padding must be between 0 and half the kernel size");
  }
  g.oh = pool_output_size(g.h, g.kh, g.pad_h, g.stride_h, g.dilation_h, g.ceil_mode);
  g.ow = pool_output_size(g.w, g.kw, g.pad_w, g.stride_w, g.dilation_w, g.ceil_mode);
  const Shape expected{x.shape[0], x.shape[1], g.oh, g.ow};
  if (g.oh < 1 || g.ow < 1) {
    reject(fmt::format("the window is larger than the padded input (output would be {})",
                       expected.to_string()));
  }
  if (!(expected == out.shape)) {
    reject(fmt::format("the attributes give an output of shape {}", expected.to_string()));
  }
  return g;
}

bool windows_inside(const PoolGeometry& g) {
  return g.pad_h == 0 && g.pad_w == 0 && g.dilation_h == 1 && g.dilation_w == 1 &&
         (g.oh - 1) * g.stride_h + g.kh <= g.h && (g.ow - 1) * g.stride_w + g.kw <= g.w;
}

}  // namespace axle::cpu
