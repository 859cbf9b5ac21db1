// graph/reference: matmul (batch dims broadcast, either operand transposed), conv2d (NCHW,
// stride, zero padding, dilation, groups) and conv_transpose2d, each output element a plain sum
// of products in double (integers in wrapping 64 bits), rounded once.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "axle/graph/reference/op_families.h"

namespace axle::reference::detail {
namespace {

// ints = [transpose_a, transpose_b]; a is [..., M, K] ([..., K, M] transposed), b is [..., K, N]
// ([..., N, K] transposed).
CpuTensor matmul(const OpCall& call) {
  expect_operands(call, 2);
  expect_ints(call, 2, "[transpose_a, transpose_b]");
  const CpuTensor& a = call.operand(0);
  const CpuTensor& b = call.operand(1);
  const DType dtype = call.dtype();
  expect_dtype(call, "operand 0", a.dtype, dtype);
  expect_dtype(call, "operand 1", b.dtype, dtype);
  if (dtype == DType::kBool) fail(call, "not defined for pred");
  const int ra = a.shape.rank(), rb = b.shape.rank();
  if (ra < 2 || rb < 2) fail(call, "both operands need rank >= 2");
  const bool ta = call.ints()[0] != 0, tb = call.ints()[1] != 0;
  const int64_t m = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t k = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  const int64_t n = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  if (k != kb) fail(call, fmt::format("contraction sizes differ: a has K={}, b has K={}", k, kb));

  // Batch dims, aligned from the right; a dim of 1 repeats.
  const int batch_rank = std::max(ra, rb) - 2;
  Shape batch, a_batch, b_batch;
  for (int i = 0; i < batch_rank; ++i) {
    const int ia = i - (batch_rank - (ra - 2)), ib = i - (batch_rank - (rb - 2));
    a_batch.push_back(ia >= 0 ? a.shape[ia] : 1);
    b_batch.push_back(ib >= 0 ? b.shape[ib] : 1);
    if (a_batch[i] != b_batch[i] && a_batch[i] != 1 && b_batch[i] != 1) {
      fail(call,
           fmt::format("batch dim {} does not broadcast ({} vs {})", i, a_batch[i], b_batch[i]));
    }
    batch.push_back(a_batch[i] == 1 ? b_batch[i] : a_batch[i]);
  }
  Shape expected = batch;
  expected.push_back(m);
  expected.push_back(n);
  if (!(expected == call.shape())) {
    fail(call, fmt::format("the operands give a result of shape {}", expected.to_string()));
  }
  const Index a_strides = broadcast_strides(a_batch, batch);
  const Index b_strides = broadcast_strides(b_batch, batch);
  CpuTensor out = result_of(call);
  int64_t product = 0;
  for_each_index(batch, [&](const Index& index) {
    const int64_t a_base = offset_of(index, a_strides, batch_rank) * m * k;
    const int64_t b_base = offset_of(index, b_strides, batch_rank) * k * n;
    const int64_t out_base = product++ * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double real = 0;
        int64_t integer = 0;
        for (int64_t p = 0; p < k; ++p) {
          const int64_t at_a = a_base + (ta ? p * m + i : i * k + p);
          const int64_t at_b = b_base + (tb ? j * k + p : p * n + j);
          if (is_floating(dtype)) {
            real += real_at(a, at_a) * real_at(b, at_b);
          } else {
            integer = wrapping_add(integer, wrapping_mul(int_at(a, at_a), int_at(b, at_b)));
          }
        }
        if (is_floating(dtype)) {
          store_real(out, out_base + i * n + j, real);
        } else {
          store_int(out, out_base + i * n + j, integer);
        }
      }
    }
  });
  return out;
}

// [x (N, C, H, W), w (O, C / groups, KH, KW)];
// ints = [stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups].
CpuTensor conv2d(const OpCall& call) {
  expect_operands(call, 2);
  expect_ints(call, 7, "[stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups]");
  const CpuTensor& x = call.operand(0);
  const CpuTensor& w = call.operand(1);
  expect_dtype(call, "the input", x.dtype, call.dtype());
  expect_dtype(call, "the weight", w.dtype, call.dtype());
  if (!is_floating(call.dtype())) fail(call, "conv2d takes f32, f64 and bf16");
  if (x.shape.rank() != 4 || w.shape.rank() != 4) fail(call, "the input and weight must be 4-d");
  const auto ints = call.ints();
  const int64_t stride_h = ints[0], stride_w = ints[1], pad_h = ints[2], pad_w = ints[3];
  const int64_t dilation_h = ints[4], dilation_w = ints[5], groups = ints[6];
  const int64_t batch = x.shape[0], channels = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t outs = w.shape[0], kh = w.shape[2], kw = w.shape[3];
  if (stride_h < 1 || stride_w < 1 || dilation_h < 1 || dilation_w < 1) {
    fail(call, "stride and dilation must be >= 1");
  }
  if (pad_h < 0 || pad_w < 0) fail(call, "padding must be >= 0");
  if (groups < 1 || channels % groups != 0 || outs % groups != 0 ||
      w.shape[1] * groups != channels) {
    fail(call, fmt::format("groups={} does not divide the channels (weight dim 1 must be input "
                           "channels / groups)",
                           groups));
  }
  const int64_t span_h = h + 2 * pad_h - dilation_h * (kh - 1) - 1;
  const int64_t span_w = wd + 2 * pad_w - dilation_w * (kw - 1) - 1;
  if (kh < 1 || kw < 1 || span_h < 0 || span_w < 0) {
    fail(call, "the (dilated) kernel does not fit in the padded input");
  }
  const int64_t oh = span_h / stride_h + 1, ow = span_w / stride_w + 1;
  if (!(Shape{batch, outs, oh, ow} == call.shape())) {
    fail(call,
         fmt::format("the attributes give a result of shape [{},{},{},{}]", batch, outs, oh, ow));
  }
  const int64_t group_in = channels / groups, group_out = outs / groups;
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for (int64_t img = 0; img < batch; ++img) {
    for (int64_t o = 0; o < outs; ++o) {
      const int64_t first_channel = (o / group_out) * group_in;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t z = 0; z < ow; ++z) {
          double total = 0;
          for (int64_t c = 0; c < group_in; ++c) {
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t row = y * stride_h - pad_h + i * dilation_h;
              if (row < 0 || row >= h) continue;  // zero padding
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t col = z * stride_w - pad_w + j * dilation_w;
                if (col < 0 || col >= wd) continue;
                const int64_t xi = ((img * channels + first_channel + c) * h + row) * wd + col;
                const int64_t wi = ((o * group_in + c) * kh + i) * kw + j;
                total += real_at(x, xi) * real_at(w, wi);
              }
            }
          }
          store_real(out, at++, total);
        }
      }
    }
  }
  return out;
}

// Where kernel tap k (stride s, padding p, dilation d) takes `at` of a transposed convolution's
// output from: the input position, or -1 when no input position lands there.
int64_t transposed_source(int64_t at, int64_t k, int64_t s, int64_t p, int64_t d, int64_t size) {
  const int64_t num = at + p - k * d;
  if (num < 0 || num % s != 0 || num / s >= size) return -1;
  return num / s;
}

// [x (N, C, H, W), w (C, O / groups, KH, KW)]; ints as conv2d's. The output's shape gives OH and
// OW (torch's output_padding).
CpuTensor conv_transpose2d(const OpCall& call) {
  expect_operands(call, 2);
  expect_ints(call, 7, "[stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups]");
  const CpuTensor& x = call.operand(0);
  const CpuTensor& w = call.operand(1);
  expect_dtype(call, "the input", x.dtype, call.dtype());
  expect_dtype(call, "the weight", w.dtype, call.dtype());
  if (!is_floating(call.dtype())) fail(call, "conv_transpose2d takes f32, f64 and bf16");
  if (x.shape.rank() != 4 || w.shape.rank() != 4 || call.shape().rank() != 4) {
    fail(call, "the input, weight and result must be 4-d");
  }
  const auto ints = call.ints();
  const int64_t groups = ints[6];
  const int64_t batch = x.shape[0], channels = x.shape[1], h = x.shape[2], wd = x.shape[3];
  const int64_t kh = w.shape[2], kw = w.shape[3];
  if (ints[0] < 1 || ints[1] < 1 || ints[4] < 1 || ints[5] < 1 || ints[2] < 0 || ints[3] < 0) {
    fail(call, "stride and dilation must be >= 1, padding >= 0");
  }
  if (groups < 1 || channels % groups != 0 || w.shape[0] != channels ||
      !(call.shape()[0] == batch && call.shape()[1] == w.shape[1] * groups)) {
    fail(call, fmt::format("the weight must be [{}, result channels / groups={}, KH, KW]", channels,
                           groups));
  }
  const int64_t outs = call.shape()[1], oh = call.shape()[2], ow = call.shape()[3];
  const int64_t group_in = channels / groups, group_out = outs / groups;
  CpuTensor out = result_of(call);
  int64_t at = 0;
  for (int64_t img = 0; img < batch; ++img) {
    for (int64_t o = 0; o < outs; ++o) {
      const int64_t first_channel = (o / group_out) * group_in;
      for (int64_t r = 0; r < oh; ++r) {
        for (int64_t z = 0; z < ow; ++z) {
          double total = 0;
          for (int64_t c = first_channel; c < first_channel + group_in; ++c) {
            for (int64_t i = 0; i < kh; ++i) {
              const int64_t y = transposed_source(r, i, ints[0], ints[2], ints[4], h);
              for (int64_t j = 0; j < kw && y >= 0; ++j) {
                const int64_t col = transposed_source(z, j, ints[1], ints[3], ints[5], wd);
                if (col < 0) continue;
                const int64_t wi = ((c * group_out + o % group_out) * kh + i) * kw + j;
                total += real_at(x, ((img * channels + c) * h + y) * wd + col) * real_at(w, wi);
              }
            }
          }
          store_real(out, at++, total);
        }
      }
    }
  }
  return out;
}

}  // namespace

CpuTensor evaluate_linalg(const OpCall& call) {
  switch (call.node.op()) {
    case Op::kMatmul:
      return matmul(call);
    case Op::kConv2d:
      return conv2d(call);
    case Op::kConvTranspose2d:
      return conv_transpose2d(call);
    default:
      fail(call, "is not a linear-algebra op");
  }
}

}  // namespace axle::reference::detail
