// graph/ops: matmul and linear, conv2d and conv_transpose2d, max_pool2d and avg_pool2d. Under
// autocast, matmul, linear, the convolutions and max_pool2d run in its lower-precision dtype
// (PyTorch/XLA's list).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>

#include "axle/graph/autograd/derivatives.h"
#include "axle/graph/op_util.h"

namespace axle {
namespace {

using ops::describe;

// An operand seen through a reshape (adding or removing a 1-dim); not a result of its own.
NodePtr reshaped(const NodePtr& value, const Shape& shape, const Loc& where) {
  if (value->shape() == shape) return value;
  return make_intrusive<Node>(Op::kReshape, value->dtype(), shape, Operands{value}, IntAttrs{},
                              RealAttrs{}, where);
}

Shape with_dims(const Shape& shape, int from, int to, std::initializer_list<int64_t> tail) {
  Shape out;
  for (int i = from; i < to; ++i) out.push_back(shape[i]);
  for (int64_t d : tail) out.push_back(d);
  return out;
}

// torch.matmul on the kMatmul kernel, which needs rank >= 2: a 1-d operand becomes [1, K] (a)
// or [K, 1] (b) and the added dim is removed from the result. With transpose_b, b is [..., N, K]
// (linear's weight layout) and must have rank 2.
Tensor matmul_impl(std::string_view op, const Tensor& a, const Tensor& b, bool transpose_b,
                   const Loc& where) {
  ops::require_defined(op, a, "the first operand", where);
  ops::require_defined(op, b, "the second operand", where);
  const Device device = ops::common_device(op, {&a, &b}, where);
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  if (sa.rank() == 0 || sb.rank() == 0) {
    ops::fail(op,
              fmt::format("cannot multiply {} and {}: both need at least one dim", describe(a),
                          describe(b)),
              where);
  }
  if (a.dtype() != b.dtype()) {
    // As torch: a matrix product never promotes (autocast casts both operands first).
    ops::fail(op,
              fmt::format("cannot multiply {} and {}: the operands must have the same dtype",
                          describe(a), describe(b)),
              where);
  }
  const DType dtype = a.dtype();
  if (dtype == DType::kBool) {
    ops::fail(op,
              fmt::format("cannot multiply {} and {}: pred is not a number type", describe(a),
                          describe(b)),
              where);
  }
  const Shape a2 = sa.rank() == 1 ? Shape{1, sa[0]} : sa;
  const Shape b2 = sb.rank() == 1 ? Shape{sb[0], 1} : sb;
  const int ra = a2.rank(), rb = b2.rank();
  const int64_t m = a2[ra - 2], k = a2[ra - 1];
  const int64_t kb = transpose_b ? b2[rb - 1] : b2[rb - 2];
  const int64_t n = transpose_b ? b2[rb - 2] : b2[rb - 1];
  if (k != kb) {
    ops::fail(op,
              fmt::format("cannot multiply {} and {}{}: contraction sizes {} and {} differ",
                          describe(a), describe(b), transpose_b ? " (transposed)" : "", k, kb),
              where);
  }
  const Shape batch = ops::broadcast_shapes(op, with_dims(a2, 0, ra - 2, {}),
                                            with_dims(b2, 0, rb - 2, {}), where, &a, &b);
  const Shape out2 = with_dims(batch, 0, batch.rank(), {m, n});
  Operands operands{reshaped(ops::value_as(a, dtype, where), a2, where),
                    reshaped(ops::value_as(b, dtype, where), b2, where)};
  const IntAttrs ints{0, transpose_b ? 1 : 0};
  Tensor product =
      ops::make_result(Op::kMatmul, dtype, out2, std::move(operands), device, where, ints);
  if (sa.rank() == 1 || sb.rank() == 1) {
    Shape out = batch;
    if (sa.rank() > 1) out.push_back(m);
    if (sb.rank() > 1) out.push_back(n);
    product = ops::make_result(Op::kReshape, dtype, out,
                               Operands{product.impl()->value_node(where)}, device, where);
  }
  if (autograd::should_record(a, b)) {
    autograd::record(autograd::kMatmulBackward, product, {a, b}, IntAttrs{transpose_b ? 1 : 0});
  }
  return product;
}

// A size given as one value (both dims) or two (height, width).
std::array<int64_t, 2> pair(std::string_view op, const char* name,
                            const std::vector<int64_t>& values, const Loc& where) {
  if (values.size() == 1) return {values[0], values[0]};
  if (values.size() == 2) return {values[0], values[1]};
  ops::fail(op, fmt::format("{} must have 1 or 2 values, not [{}]", name, fmt::join(values, ",")),
            where);
}

void require_at_least(std::string_view op, const char* name, std::array<int64_t, 2> values,
                      int64_t low, const Loc& where) {
  if (values[0] < low || values[1] < low) {
    ops::fail(op, fmt::format("{} must be >= {}, not [{}]", name, low, fmt::join(values, ",")),
              where);
  }
}

void require_image(std::string_view op, const Tensor& x, const char* layout, const Loc& where) {
  if (x.dim() != 4) {
    ops::fail(op, fmt::format("the input must be 4-d {}, not {}", layout, describe(x)), where);
  }
}

// Division rounding toward -infinity (b > 0): a padded pooling span may be negative.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/// torch's pooling_output_shape: with ceil_mode a last, partial window is kept only if it starts
/// inside the input or the left padding.
int64_t pool_output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride,
                         int64_t dilation, bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
  int64_t out = floor_div(span + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

Tensor pool(Op op, const Tensor& x, const Pool2dOptions& o, const Loc& where) {
  const std::string_view name = op_name(op);
  const bool is_max = op == Op::kMaxPool2d;
  ops::require_defined(name, x, "the input", where);
  require_image(name, x, "[N, C, H, W]", where);
  // torch's avg_pool2d also averages int64 (dividing toward zero); max_pool2d takes no integers.
  if (!is_floating(x.dtype()) && (is_max || x.dtype() != DType::kInt64)) {
    ops::fail(name,
              fmt::format("the input must be floating-point{}, not {}", is_max ? "" : " or s64",
                          describe(x)),
              where);
  }
  const auto kernel = pair(name, "kernel_size", o.kernel_size, where);
  const auto stride = o.stride.empty() ? kernel : pair(name, "stride", o.stride, where);
  const auto pad = pair(name, "padding", o.padding, where);
  // Dilation is max_pool2d's alone; avg_pool2d ignores the field, as it has no such argument.
  const auto dilation =
      is_max ? pair(name, "dilation", o.dilation, where) : std::array<int64_t, 2>{1, 1};
  require_at_least(name, "kernel_size", kernel, 1, where);
  require_at_least(name, "stride", stride, 1, where);
  require_at_least(name, "dilation", dilation, 1, where);
  require_at_least(name, "padding", pad, 0, where);
  if (pad[0] > kernel[0] / 2 || pad[1] > kernel[1] / 2) {
    ops::fail(name,
              fmt::format("padding [{}] must be at most half of kernel_size [{}] (input {})",
                          fmt::join(pad, ","), fmt::join(kernel, ","), describe(x)),
              where);
  }
  const Shape& in = x.shape();
  const int64_t oh =
      pool_output_size(in[2], kernel[0], pad[0], stride[0], dilation[0], o.ceil_mode);
  const int64_t ow =
      pool_output_size(in[3], kernel[1], pad[1], stride[1], dilation[1], o.ceil_mode);
  if (oh < 1 || ow < 1) {
    ops::fail(name,
              fmt::format("the output of {} would be {}x{}: kernel_size [{}] (dilation [{}]) is "
                          "larger than the padded input",
                          describe(x), oh, ow, fmt::join(kernel, ","), fmt::join(dilation, ",")),
              where);
  }
  IntAttrs ints{kernel[0], kernel[1], stride[0], stride[1], pad[0], pad[1]};
  if (is_max) {
    ints.push_back(dilation[0]);
    ints.push_back(dilation[1]);
    ints.push_back(o.ceil_mode ? 1 : 0);
  } else {
    ints.push_back(o.ceil_mode ? 1 : 0);
    ints.push_back(o.count_include_pad ? 1 : 0);
  }
  const bool record = autograd::should_record(x);
  Tensor result = ops::make_result(op, x.dtype(), Shape{in[0], in[1], oh, ow},
                                   Operands{ops::value_as(x, x.dtype(), where)}, x.device(), where,
                                   record ? ints : std::move(ints));
  if (record) {
    autograd::record(is_max ? autograd::kMaxPool2dBackward : autograd::kAvgPool2dBackward, result,
                     {x}, std::move(ints));
  }
  return result;
}

// `bias` must broadcast to `shape` without growing it (a per-output-feature vector, usually).
void require_bias_fits(std::string_view op, const Tensor& bias, const Shape& shape,
                       const Loc& where) {
  const Shape joined = ops::broadcast_shapes(op, bias.shape(), shape, where, &bias);
  if (!(joined == shape)) {
    ops::fail(op,
              fmt::format("bias {} does not broadcast to the output shape {}", describe(bias),
                          shape.to_string()),
              where);
  }
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b, Loc where) {
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return matmul(ops::autocast_cast(a, *amp, where), ops::autocast_cast(b, *amp, where), where);
  }
  return matmul_impl("matmul", a, b, false, where);
}

Tensor mm(const Tensor& a, const Tensor& b, Loc where) {
  ops::require_defined("mm", a, "the first operand", where);
  ops::require_defined("mm", b, "the second operand", where);
  if (a.dim() != 2 || b.dim() != 2) {
    ops::fail("mm",
              fmt::format("cannot multiply {} and {}: both must be matrices (2-d); matmul "
                          "takes other ranks",
                          describe(a), describe(b)),
              where);
  }
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return mm(ops::autocast_cast(a, *amp, where), ops::autocast_cast(b, *amp, where), where);
  }
  return matmul_impl("mm", a, b, false, where);
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, Loc where) {
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return linear(ops::autocast_cast(x, *amp, where), ops::autocast_cast(weight, *amp, where),
                  ops::autocast_cast(bias, *amp, where), where);
  }
  ops::require_defined("linear", x, "the input", where);
  ops::require_defined("linear", weight, "the weight", where);
  ops::common_device("linear", {&x, &weight, &bias}, where);
  if (weight.dim() != 1 && weight.dim() != 2) {
    ops::fail("linear",
              fmt::format("the weight must be [out, in] or [in], not {} (input {})",
                          describe(weight), describe(x)),
              where);
  }
  // A 1-d weight is a vector to take dot products with: plain matmul, nothing to transpose.
  Tensor out = matmul_impl("linear", x, weight, weight.dim() == 2, where);
  if (!bias.defined()) return out;
  require_bias_fits("linear", bias, out.shape(), where);
  return add(out, bias, where);
}

namespace {

// Checks what conv2d and conv_transpose2d ask alike of their operands: an image x, a 4-d weight
// (`weight_layout` names its dims) and an optional bias, all of one floating dtype on one device.
Device check_conv_operands(std::string_view op, const Tensor& x, const Tensor& weight,
                           const Tensor& bias, const char* weight_layout, const Loc& where) {
  ops::require_defined(op, x, "the input", where);
  ops::require_defined(op, weight, "the weight", where);
  const Device device = ops::common_device(op, {&x, &weight, &bias}, where);
  require_image(op, x, "[N, C, H, W]", where);
  if (weight.dim() != 4) {
    ops::fail(op,
              fmt::format("the weight must be 4-d {}, not {} (input {})", weight_layout,
                          describe(weight), describe(x)),
              where);
  }
  if (x.dtype() != weight.dtype() || (bias.defined() && bias.dtype() != x.dtype())) {
    // As torch: a convolution never promotes (autocast casts its operands first).
    ops::fail(op,
              fmt::format("the input {}, weight {}{}{} must have the same dtype", describe(x),
                          describe(weight), bias.defined() ? " and bias " : "",
                          bias.defined() ? describe(bias) : std::string()),
              where);
  }
  if (!is_floating(x.dtype())) {
    ops::fail(
        op,
        fmt::format("needs floating-point operands, not {} and {}", describe(x), describe(weight)),
        where);
  }
  return device;
}

// A convolution's stride, padding and dilation, each checked and made a pair.
struct ConvSteps {
  std::array<int64_t, 2> stride, pad, dilation;
};
ConvSteps conv_steps(std::string_view op, const std::vector<int64_t>& stride,
                     const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                     const Loc& where) {
  ConvSteps s{pair(op, "stride", stride, where), pair(op, "padding", padding, where),
              pair(op, "dilation", dilation, where)};
  require_at_least(op, "stride", s.stride, 1, where);
  require_at_least(op, "padding", s.pad, 0, where);
  require_at_least(op, "dilation", s.dilation, 1, where);
  return s;
}

// result + bias [channels] on each output plane.
Tensor add_channel_bias(std::string_view op, const Tensor& result, const Tensor& weight,
                        const Tensor& bias, const Loc& where) {
  if (!bias.defined()) return result;
  const int64_t channels = result.shape()[1];
  if (bias.dim() != 1 || bias.shape()[0] != channels) {
    ops::fail(op,
              fmt::format("bias must be [{}] for weight {}, not {}", channels, describe(weight),
                          describe(bias)),
              where);
  }
  return add(result, reshape(bias, {1, channels, 1, 1}, where), where);
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
              const Conv2dOptions& options, Loc where) {
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return conv2d(ops::autocast_cast(x, *amp, where), ops::autocast_cast(weight, *amp, where),
                  ops::autocast_cast(bias, *amp, where), options, where);
  }
  constexpr std::string_view kOp = "conv2d";
  const Device device = check_conv_operands(kOp, x, weight, bias, "[O, C / groups, KH, KW]", where);
  const DType dtype = x.dtype();
  const auto [stride, pad, dilation] =
      conv_steps(kOp, options.stride, options.padding, options.dilation, where);
  const Shape& in = x.shape();
  const Shape& w = weight.shape();
  const int64_t groups = options.groups;
  auto reject = [&](const std::string& why) {
    ops::fail(kOp,
              fmt::format("input {} and weight {} with groups={}: {}", describe(x),
                          describe(weight), groups, why),
              where);
  };
  if (groups < 1) reject("groups must be >= 1");
  if (in[1] % groups != 0) reject("the input channels are not divisible by groups");
  if (w[0] % groups != 0) reject("the output channels are not divisible by groups");
  if (w[1] * groups != in[1]) reject("the weight's dim 1 must be input channels / groups");
  if (w[2] < 1 || w[3] < 1) reject("the kernel is empty");
  const int64_t span_h = in[2] + 2 * pad[0] - dilation[0] * (w[2] - 1) - 1;
  const int64_t span_w = in[3] + 2 * pad[1] - dilation[1] * (w[3] - 1) - 1;
  if (span_h < 0 || span_w < 0) {
    reject(
        fmt::format("the (dilated) kernel is larger than the padded input (padding [{}], "
                    "dilation [{}])",
                    fmt::join(pad, ","), fmt::join(dilation, ",")));
  }
  const Shape out{in[0], w[0], span_h / stride[0] + 1, span_w / stride[1] + 1};
  const IntAttrs ints{stride[0], stride[1], pad[0], pad[1], dilation[0], dilation[1], groups};
  Tensor result = ops::make_result(
      Op::kConv2d, dtype, out,
      Operands{ops::value_as(x, dtype, where), ops::value_as(weight, dtype, where)}, device, where,
      ints);
  if (autograd::should_record(x, weight)) {
    autograd::record(autograd::kConv2dBackward, result, {x, weight}, ints);
  }
  return add_channel_bias(kOp, result, weight, bias, where);
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& weight, const Tensor& bias,
                        const ConvTranspose2dOptions& options, Loc where) {
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return conv_transpose2d(ops::autocast_cast(x, *amp, where),
                            ops::autocast_cast(weight, *amp, where),
                            ops::autocast_cast(bias, *amp, where), options, where);
  }
  constexpr std::string_view kOp = "conv_transpose2d";
  const Device device = check_conv_operands(kOp, x, weight, bias, "[C, O / groups, KH, KW]", where);
  const DType dtype = x.dtype();
  const auto [stride, pad, dilation] =
      conv_steps(kOp, options.stride, options.padding, options.dilation, where);
  const auto output_pad = pair(kOp, "output_padding", options.output_padding, where);
  require_at_least(kOp, "output_padding", output_pad, 0, where);
  const Shape& in = x.shape();
  const Shape& w = weight.shape();
  const int64_t groups = options.groups;
  auto reject = [&](const std::string& why) {
    ops::fail(kOp,
              fmt::format("input {} and weight {} with groups={}: {}", describe(x),
                          describe(weight), groups, why),
              where);
  };
  if (groups < 1) reject("groups must be >= 1");
  if (in[1] % groups != 0) reject("the input channels are not divisible by groups");
  if (w[0] != in[1]) reject("the weight's dim 0 must be the input channels");
  if (w[2] < 1 || w[3] < 1) reject("the kernel is empty");
  std::array<int64_t, 2> size{};
  for (int axis = 0; axis < 2; ++axis) {
    if (output_pad[axis] >= std::max(stride[axis], dilation[axis])) {
      reject(fmt::format(
          "output_padding [{}] must be smaller than either stride [{}] or "
          "dilation [{}]",
          fmt::join(output_pad, ","), fmt::join(stride, ","), fmt::join(dilation, ",")));
    }
    size[axis] = (in[2 + axis] - 1) * stride[axis] - 2 * pad[axis] +
                 dilation[axis] * (w[2 + axis] - 1) + output_pad[axis] + 1;
  }
  if (size[0] < 1 || size[1] < 1) {
    reject(fmt::format("the output would be {}x{}: the padding [{}] is too large", size[0], size[1],
                       fmt::join(pad, ",")));
  }
  const Shape out{in[0], w[1] * groups, size[0], size[1]};
  const IntAttrs ints{stride[0], stride[1], pad[0], pad[1], dilation[0], dilation[1], groups};
  Tensor result = ops::make_result(
      Op::kConvTranspose2d, dtype, out,
      Operands{ops::value_as(x, dtype, where), ops::value_as(weight, dtype, where)}, device, where,
      ints);
  if (autograd::should_record(x, weight)) {
    autograd::record(autograd::kConvTranspose2dBackward, result, {x, weight}, ints);
  }
  return add_channel_bias(kOp, result, weight, bias, where);
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& options, Loc where) {
  if (const auto amp = ops::autocast_dtype()) [[unlikely]] {
    const ops::AutocastSuspended off;
    return max_pool2d(ops::autocast_cast(x, *amp, where), options, where);
  }
  return pool(Op::kMaxPool2d, x, options, where);
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& options, Loc where) {
  return pool(Op::kAvgPool2d, x, options, where);
}

}  // namespace axle
