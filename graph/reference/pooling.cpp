// graph/reference: max_pool2d and avg_pool2d on NCHW tensors and their gradients, as the CPU
// backend (and torch) define them: torch's output size with ceil_mode, max-pool padding that
// counts as -infinity (a NaN wins; the first maximum gives the gradient, or the last NaN), and
// avg-pool divisors with or without the padding but never the part of a ceil_mode window past it.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

struct Pool {
  int64_t planes, h, w, oh, ow;
  int64_t kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h = 1, dilation_w = 1;
  bool ceil_mode = false, count_include_pad = false;
};

// Division rounding toward -infinity (b > 0): a padded span may be negative.
int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// torch's pooling_output_shape: with ceil_mode a last, partial window is kept only if it starts
// inside the input or the left padding.
int64_t output_size(int64_t size, int64_t kernel, int64_t pad, int64_t stride, int64_t dilation,
                    bool ceil_mode) {
  const int64_t span = size + 2 * pad - dilation * (kernel - 1) - 1;
  int64_t out = floor_div(span + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= size + pad) --out;
  return out;
}

// The geometry of a pooling op whose forward input is `x` and forward output `pooled`.
// Max: ints = [kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, ceil_mode];
// avg: ints = [kh, kw, stride_h, stride_w, pad_h, pad_w, ceil_mode, count_include_pad].
// `takes_s64`: avg_pool2d, which also averages s64 as torch (summing in s64, dividing toward
// zero).
Pool plan(const OpCall& call, bool is_max, const Shape& x, const Shape& pooled,
          bool takes_s64 = false) {
  expect_ints(call, is_max ? 9 : 8,
              is_max ? "[kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, "
                       "ceil_mode]"
                     : "[kh, kw, stride_h, stride_w, pad_h, pad_w, ceil_mode, count_include_pad]");
  for (const CpuTensor* operand : call.operands) {
    expect_dtype(call, "an operand", operand->dtype, call.dtype());
  }
  if (!is_floating(call.dtype()) && !(takes_s64 && call.dtype() == DType::kInt64)) {
    fail(call,
         takes_s64 ? "avg_pool2d takes f32, f64, bf16 and s64" : "pooling takes f32, f64 and bf16");
  }
  if (x.rank() != 4) fail(call, "the input must be [N, C, H, W]");
  const auto ints = call.ints();
  Pool p{};
  p.planes = x[0] * x[1], p.h = x[2], p.w = x[3];
  p.kh = ints[0], p.kw = ints[1], p.stride_h = ints[2], p.stride_w = ints[3];
  p.pad_h = ints[4], p.pad_w = ints[5];
  if (is_max) {
    p.dilation_h = ints[6], p.dilation_w = ints[7], p.ceil_mode = ints[8] != 0;
  } else {
    p.ceil_mode = ints[6] != 0, p.count_include_pad = ints[7] != 0;
  }
  if (p.kh < 1 || p.kw < 1 || p.stride_h < 1 || p.stride_w < 1 || p.dilation_h < 1 ||
      p.dilation_w < 1) {
    fail(call, "kernel, stride and dilation must be >= 1");
  }
  if (p.pad_h < 0 || p.pad_w < 0 || p.pad_h > p.kh / 2 || p.pad_w > p.kw / 2) {
    fail(call, "padding must be between 0 and half the kernel size");
  }
  p.oh = output_size(p.h, p.kh, p.pad_h, p.stride_h, p.dilation_h, p.ceil_mode);
  p.ow = output_size(p.w, p.kw, p.pad_w, p.stride_w, p.dilation_w, p.ceil_mode);
  if (p.oh < 1 || p.ow < 1 || !(Shape{x[0], x[1], p.oh, p.ow} == pooled)) {
    fail(call, fmt::format("the attributes pool {} into [{},{},{},{}], not {}", x.to_string(), x[0],
                           x[1], p.oh, p.ow, pooled.to_string()));
  }
  return p;
}

// The in-bounds taps of max-pool window (y, z), as flat indices into its plane, in row-major
// tap order.
std::vector<int64_t> max_window(const Pool& p, int64_t y, int64_t z) {
  std::vector<int64_t> taps;
  for (int64_t i = 0; i < p.kh; ++i) {
    const int64_t row = y * p.stride_h - p.pad_h + i * p.dilation_h;
    if (row < 0 || row >= p.h) continue;
    for (int64_t j = 0; j < p.kw; ++j) {
      const int64_t col = z * p.stride_w - p.pad_w + j * p.dilation_w;
      if (col >= 0 && col < p.w) taps.push_back(row * p.w + col);
    }
  }
  return taps;
}

// One axis of an average-pooling window: its in-bounds taps [lo, hi) and how many taps the
// divisor counts along it.
struct AvgSpan {
  int64_t lo, hi, counted;
};
AvgSpan avg_span(int64_t index, int64_t stride, int64_t pad, int64_t kernel, int64_t size,
                 bool count_include_pad) {
  const int64_t start = index * stride - pad;
  const int64_t end = std::min(start + kernel, size + pad);
  const int64_t lo = std::max<int64_t>(start, 0), hi = std::min(end, size);
  return {lo, hi, count_include_pad ? end - start : hi - lo};
}

CpuTensor max_pool(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& x = call.operand(0);
  const Pool p = plan(call, true, x.shape, call.shape());
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const int64_t base = plane * p.h * p.w;
    for (int64_t y = 0; y < p.oh; ++y) {
      for (int64_t z = 0; z < p.ow; ++z) {
        double best = -std::numeric_limits<double>::infinity();  // what the padding holds
        for (int64_t tap : max_window(p, y, z)) {
          const double v = real_at(x, base + tap);
          if (v > best || std::isnan(v)) best = v;
        }
        store_real(out, at++, best);
      }
    }
  }
  return out;
}

// [x, grad_out] -> x's shape: each window's gradient goes to the tap the forward picked.
CpuTensor max_pool_backward(const OpCall& call) {
  expect_operands(call, 2);
  const CpuTensor& x = call.operand(0);
  const CpuTensor& grad = call.operand(1);
  if (!(x.shape == call.shape())) fail(call, "the result must have the input's shape");
  const Pool p = plan(call, true, x.shape, grad.shape);
  std::vector<double> sums(static_cast<std::size_t>(x.shape.numel()), 0.0);
  int64_t at = 0;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const int64_t base = plane * p.h * p.w;
    for (int64_t y = 0; y < p.oh; ++y) {
      for (int64_t z = 0; z < p.ow; ++z, ++at) {
        const std::vector<int64_t> taps = max_window(p, y, z);
        if (taps.empty()) continue;  // the window is all padding
        // The first maximum, or the last NaN; the first tap when every value is -inf.
        double best = -std::numeric_limits<double>::infinity();
        int64_t picked = taps[0];
        for (int64_t tap : taps) {
          const double v = real_at(x, base + tap);
          if (v > best || std::isnan(v)) best = v, picked = tap;
        }
        sums[static_cast<std::size_t>(base + picked)] += real_at(grad, at);
      }
    }
  }
  CpuTensor out = result_of(call);
  for (std::size_t i = 0; i < sums.size(); ++i) store_real(out, static_cast<int64_t>(i), sums[i]);
  return out;
}

CpuTensor avg_pool(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& x = call.operand(0);
  const Pool p = plan(call, false, x.shape, call.shape(), /*takes_s64=*/true);
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const int64_t base = plane * p.h * p.w;
    for (int64_t y = 0; y < p.oh; ++y) {
      const AvgSpan rows = avg_span(y, p.stride_h, p.pad_h, p.kh, p.h, p.count_include_pad);
      for (int64_t z = 0; z < p.ow; ++z) {
        const AvgSpan cols = avg_span(z, p.stride_w, p.pad_w, p.kw, p.w, p.count_include_pad);
        const bool empty = rows.lo >= rows.hi || cols.lo >= cols.hi;
        if (x.dtype == DType::kInt64) {
          int64_t total = 0;
          for (int64_t i = rows.lo; i < rows.hi; ++i) {
            for (int64_t j = cols.lo; j < cols.hi; ++j) total += int_at(x, base + i * p.w + j);
          }
          store_int(out, at++, empty ? 0 : total / (rows.counted * cols.counted));
          continue;
        }
        double total = 0;
        for (int64_t i = rows.lo; i < rows.hi; ++i) {
          for (int64_t j = cols.lo; j < cols.hi; ++j) total += real_at(x, base + i * p.w + j);
        }
        store_real(out, at++,
                   empty ? 0.0 : total / static_cast<double>(rows.counted * cols.counted));
      }
    }
  }
  return out;
}

// [grad_out] -> the forward input's shape (the node's): each window's gradient divided by its
// divisor, spread over its in-bounds taps.
CpuTensor avg_pool_backward(const OpCall& call) {
  expect_operands(call, 1);
  const CpuTensor& grad = call.operand(0);
  const Pool p = plan(call, false, call.shape(), grad.shape);
  std::vector<double> sums(static_cast<std::size_t>(call.shape().numel()), 0.0);
  int64_t at = 0;
  for (int64_t plane = 0; plane < p.planes; ++plane) {
    const int64_t base = plane * p.h * p.w;
    for (int64_t y = 0; y < p.oh; ++y) {
      const AvgSpan rows = avg_span(y, p.stride_h, p.pad_h, p.kh, p.h, p.count_include_pad);
      for (int64_t z = 0; z < p.ow; ++z, ++at) {
        const AvgSpan cols = avg_span(z, p.stride_w, p.pad_w, p.kw, p.w, p.count_include_pad);
        if (rows.lo >= rows.hi || cols.lo >= cols.hi) continue;
        const double share = real_at(grad, at) / static_cast<double>(rows.counted * cols.counted);
        for (int64_t i = rows.lo; i < rows.hi; ++i) {
          for (int64_t j = cols.lo; j < cols.hi; ++j) {
            sums[static_cast<std::size_t>(base + i * p.w + j)] += share;
          }
        }
      }
    }
  }
  CpuTensor out = result_of(call);
  for (std::size_t i = 0; i < sums.size(); ++i) store_real(out, static_cast<int64_t>(i), sums[i]);
  return out;
}

}  // namespace

CpuTensor evaluate_pooling(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kMaxPool2d:
      return max_pool(call);
    case Op::kMaxPool2dBackward:
      return max_pool_backward(call);
    case Op::kAvgPool2d:
      return avg_pool(call);
    case Op::kAvgPool2dBackward:
      return avg_pool_backward(call);
    default:
      fail(call, "is not a pooling op");
  }
}

}  // namespace axle::reference::detail
