// Tests the CPU kernels that split their work over a device's compute threads (compute_pool.h)
// at 1, 2 and 3 threads: against plain loops, and bit for bit against one thread wherever the
// split cannot change a result (elementwise, fused, pooling, cumsum and topk kernels, whole
// images or products per thread); products split into row or column blocks must give the same bits
// run to run.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "tests/backends/conv_reference.h"
#include "tests/backends/fused_chain.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

cpu::ComputePool& pool_of(int threads) {
  static std::map<int, std::unique_ptr<cpu::ComputePool>> pools;
  auto& pool = pools[threads];
  if (!pool) pool = std::make_unique<cpu::ComputePool>(threads);
  return *pool;
}

// 64-byte-aligned bytes, as the backend's buffers are (vector paths may depend on it).
struct AlignedBytes {
  explicit AlignedBytes(std::size_t n)
      : data(static_cast<std::byte*>(std::aligned_alloc(64, (n + 63) / 64 * 64 + 64))) {}
  ~AlignedBytes() { std::free(data); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  std::byte* data;
};

/// Runs one kernel call on a pool of `threads` threads; the output starts as 0xFF bytes (NaN),
/// so an element no part writes cannot pass.
HostTensor run_on(int threads, Kernel kernel, const std::vector<HostTensor>& inputs,
                  DType out_dtype, const Shape& out_shape, std::vector<int64_t> ints = {}) {
  std::vector<BufferDesc> descs;
  std::vector<std::unique_ptr<AlignedBytes>> buffers;
  std::vector<cpu::ConstView> views;
  descs.reserve(inputs.size());
  for (const HostTensor& in : inputs) {
    descs.push_back({in.dtype, in.shape});
    const std::vector<std::byte> bytes = encode(in);
    buffers.push_back(std::make_unique<AlignedBytes>(bytes.size()));
    std::copy(bytes.begin(), bytes.end(), buffers.back()->data);
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) views.push_back({buffers[i]->data, &descs[i]});
  const BufferDesc out_desc{out_dtype, out_shape};
  AlignedBytes out(out_desc.bytes());
  std::fill_n(out.data, out_desc.bytes(), std::byte{0xFF});
  const KernelCall call{kernel, {}, 0, std::move(ints), {}};
  cpu::kernel_table()[static_cast<std::size_t>(kernel)](
      cpu::KernelArgs{call, views, {out.data, &out_desc}, pool_of(threads)});
  return {out_dtype, out_shape,
          decode(out_dtype, out.data, static_cast<std::size_t>(out_shape.numel()))};
}

/// Runs the call on 1, 2 and 3 threads: each result within `tolerance` of `want` (scaled per
/// element when `scale` is given), and the same bits as one thread's when `exact`, else as
/// another run on the same thread count.
void expect_on_every_thread_count(Kernel kernel, const std::vector<HostTensor>& inputs,
                                  DType out_dtype, const Shape& out_shape,
                                  const std::vector<int64_t>& ints, const std::vector<double>& want,
                                  double tol, bool exact, const std::string& what,
                                  const std::vector<double>& scale = {}) {
  const HostTensor one = run_on(1, kernel, inputs, out_dtype, out_shape, ints);
  expect_values(one.values, want, tol, what + " on 1 thread", scale);
  for (int threads : {2, 3}) {
    const HostTensor got = run_on(threads, kernel, inputs, out_dtype, out_shape, ints);
    const std::string where = what + " on " + std::to_string(threads) + " threads";
    SCOPED_TRACE(where);
    expect_values(got.values, want, tol, where, scale);
    if (exact) {
      expect_same_bits(got, one);
    } else {
      expect_same_bits(run_on(threads, kernel, inputs, out_dtype, out_shape, ints), got);
    }
  }
}

// ---- matmul ----------------------------------------------------------------------------------

Reference reference_matmul(const HostTensor& a, const HostTensor& b, bool ta, bool tb) {
  const int ra = a.shape.rank();
  const int64_t batch = a.shape.numel() / (a.shape[ra - 1] * a.shape[ra - 2]);
  const int64_t m = ta ? a.shape[ra - 1] : a.shape[ra - 2],
                k = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const int rb = b.shape.rank();
  const int64_t n = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  Shape shape;
  for (int d = 0; d < ra - 2; ++d) shape.push_back(a.shape[d]);
  shape.push_back(m);
  shape.push_back(n);
  Reference ref{shape, {}, {}};
  for (int64_t p = 0; p < batch; ++p) {
    const double* x = a.values.data() + p * m * k;
    const double* y = b.values.data() + p * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, scale = 0;
        for (int64_t q = 0; q < k; ++q) {
          const double term =
              (ta ? x[q * m + i] : x[i * k + q]) * (tb ? y[j * k + q] : y[q * n + j]);
          sum += term;
          scale += std::abs(term);
        }
        ref.values.push_back(sum);
        ref.scale.push_back(scale);
      }
    }
  }
  return ref;
}

void expect_matmul(const Shape& a_shape, const Shape& b_shape, bool ta, bool tb, bool exact,
                   std::mt19937& rng, DType dtype = DType::kFloat32) {
  const HostTensor a = random_tensor(dtype, a_shape, rng);
  const HostTensor b = random_tensor(dtype, b_shape, rng);
  const Reference ref = reference_matmul(a, b, ta, tb);
  expect_on_every_thread_count(Kernel::kMatmul, {a, b}, dtype, ref.shape, {ta ? 1 : 0, tb ? 1 : 0},
                               ref.values, tolerance(dtype), exact,
                               "matmul a " + a_shape.to_string() + (ta ? "^T" : "") + ", b " +
                                   b_shape.to_string() + (tb ? "^T" : ""),
                               ref.scale);
}

TEST(ThreadCount, MatmulSplitIntoRowBlocksMatchesLoops) {
  std::mt19937 rng(1);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      // m > n: the rows are split (130 * 70 * 300 multiply-adds is above the threshold).
      expect_matmul(ta ? Shape{300, 130} : Shape{130, 300}, tb ? Shape{70, 300} : Shape{300, 70},
                    ta, tb, false, rng);
    }
  }
}

TEST(ThreadCount, MatmulSplitIntoColumnBlocksMatchesLoops) {
  std::mt19937 rng(2);
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      expect_matmul(ta ? Shape{260, 45} : Shape{45, 260}, tb ? Shape{203, 260} : Shape{260, 203},
                    ta, tb, false, rng);
    }
  }
}

TEST(ThreadCount, BatchedMatmulGivesOneThreadsBits) {
  std::mt19937 rng(3);
  // Six products of 64 * 96 * 128: each runs whole on one thread.
  expect_matmul({6, 64, 128}, {6, 128, 96}, false, false, true, rng);
}

TEST(ThreadCount, Bf16MatmulGivesOneThreadsBits) {
  std::mt19937 rng(4);
  // bf16 products are cut into tiles of 64 rows x 256 columns, each walking the contraction 256
  // at a time, whatever the thread count: several tiles each way, a partial last one, and
  // several depth steps, in every transpose case.
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      expect_matmul(ta ? Shape{600, 150} : Shape{150, 600}, tb ? Shape{300, 600} : Shape{600, 300},
                    ta, tb, true, rng, DType::kBFloat16);
    }
  }
  expect_matmul({3, 70, 260}, {3, 260, 40}, false, false, true, rng, DType::kBFloat16);
}

// ---- conv2d ----------------------------------------------------------------------------------

// A convolution with the same stride, padding and dilation along both image dims.
struct Conv {
  int64_t stride = 1, pad = 0, dilation = 1, groups = 1;
  [[nodiscard]] ConvParams params() const {
    return {stride, stride, pad, pad, dilation, dilation, groups};
  }
};

void expect_conv(const Shape& x_shape, const Shape& w_shape, const Conv& p, bool exact,
                 std::mt19937& rng) {
  const HostTensor x = random_tensor(DType::kFloat32, x_shape, rng);
  const HostTensor w = random_tensor(DType::kFloat32, w_shape, rng);
  const Reference ref = reference_conv(x, w, p.params());
  expect_on_every_thread_count(Kernel::kConv2d, {x, w}, DType::kFloat32, ref.shape,
                               p.params().ints(), ref.values, tolerance(DType::kFloat32), exact,
                               "conv2d x " + x_shape.to_string() + ", w " + w_shape.to_string(),
                               ref.scale);
}

TEST(ThreadCount, ConvWithImagesPerThreadGivesOneThreadsBits) {
  std::mt19937 rng(4);
  expect_conv({5, 3, 20, 20}, {8, 3, 3, 3}, {.pad = 1}, true, rng);
  expect_conv({4, 6, 17, 15}, {4, 3, 3, 2}, {.stride = 2, .pad = 1, .groups = 2}, true, rng);
}

TEST(ThreadCount, ConvOfOneImageSplitsItsProductAndMatchesLoops) {
  std::mt19937 rng(5);
  expect_conv({1, 16, 24, 24}, {32, 16, 3, 3}, {.pad = 1}, false, rng);
  // Blocks of output rows, each block's product split.
  expect_conv({1, 32, 40, 60}, {32, 32, 3, 3}, {.pad = 1}, false, rng);
}

TEST(ThreadCount, ConvWithFewerOutputThanInputChannelsMatchesLoops) {
  std::mt19937 rng(15);
  // The input gradient's form: shifted sums of tap planes.
  expect_conv({5, 16, 14, 13}, {8, 16, 3, 3}, {.pad = 1}, true, rng);
  expect_conv({4, 12, 9, 11}, {4, 6, 3, 2}, {.pad = 2, .groups = 2}, true, rng);
  expect_conv({1, 64, 14, 14}, {32, 64, 3, 3}, {.pad = 1}, false, rng);  // one image: split GEMM
}

TEST(ThreadCount, ConvWithKernelWiderThanItsOutputGivesOneThreadsBits) {
  std::mt19937 rng(6);
  // The weight gradient's shape: rows of receptive fields, one GEMM over all images, its sum
  // over the patch in blocks whose depth does not depend on the thread count.
  expect_conv({6, 8, 14, 14}, {5, 8, 14, 14}, {.pad = 1}, true, rng);
  expect_conv({4, 16, 20, 20}, {32, 16, 18, 18}, {}, true, rng);
  expect_conv({3, 4, 15, 15}, {6, 2, 9, 9}, {.stride = 2, .pad = 1, .groups = 2}, true, rng);
  expect_conv({2, 3, 16, 16}, {4, 3, 6, 6}, {.stride = 1, .pad = 2, .dilation = 3}, true, rng);
  // ResNet's last layers' form: 7 x 7 planes, all images' positions as the GEMM's rows, and a
  // patch of 96 channels summed in blocks.
  expect_conv({8, 96, 7, 7}, {128, 96, 3, 3}, {.pad = 1}, true, rng);
}

TEST(ThreadCount, ConvWithSmallOutputGivesOneThreadsBits) {
  std::mt19937 rng(16);
  // Direct sums over padded planes, each (image, output channel) summed whole by one thread:
  // the MNIST CNN's first weight gradient and odd shapes.
  expect_conv({1, 64, 28, 28}, {32, 64, 28, 28}, {.pad = 1}, true, rng);
  expect_conv({2, 6, 13, 13}, {5, 6, 13, 13}, {.pad = 1}, true, rng);
  expect_conv({3, 4, 10, 10}, {6, 2, 9, 9}, {.groups = 2}, true, rng);
}

TEST(ThreadCount, ConvWithFewRowsSplitsChannelsAndMatchesLoops) {
  std::mt19937 rng(17);
  // 16 output rows: split by rows on 2 threads, by output channels on 3.
  expect_conv({1, 16, 21, 21}, {32, 16, 15, 15}, {.stride = 2}, false, rng);
  // A "same" convolution's weight gradient (shifted planes as rows), rows split.
  expect_conv({8, 16, 14, 14}, {32, 16, 14, 14}, {.pad = 1}, false, rng);
}

// ---- pooling ---------------------------------------------------------------------------------

struct Pool {
  int64_t k = 2, stride = 2, pad = 0;
};

// Values with ties, infinities and NaNs, so every window rule is exercised.
HostTensor awkward_tensor(const Shape& shape, std::mt19937& rng) {
  const double choices[] = {-kInf, -1.5, -1, 0, 0.5, 1, 2, kInf, kNaN};
  std::uniform_int_distribution<int> pick(0, 8), plain(0, 20);
  HostTensor t{DType::kFloat32, shape,
               std::vector<double>(static_cast<std::size_t>(shape.numel()))};
  std::uniform_real_distribution<double> real(-3, 3);
  for (double& v : t.values)
    v = plain(rng) < 4 ? choices[pick(rng)] : round_to(DType::kFloat32, real(rng));
  return t;
}

int64_t pool_size(int64_t size, const Pool& p) { return (size + 2 * p.pad - p.k) / p.stride + 1; }

// For each output, the first maximum of its window (or its last NaN), as an input index; the
// first in-bounds tap when all are -inf.
std::vector<int64_t> reference_argmax(const HostTensor& x, const Pool& p) {
  const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], w = x.shape[3];
  const int64_t oh = pool_size(h, p), ow = pool_size(w, p);
  std::vector<int64_t> at;
  for (int64_t plane = 0; plane < planes; ++plane) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t xo = 0; xo < ow; ++xo) {
        double best = -kInf;
        int64_t chosen = -1;
        for (int64_t i = 0; i < p.k; ++i) {
          for (int64_t j = 0; j < p.k; ++j) {
            const int64_t iy = y * p.stride - p.pad + i, ix = xo * p.stride - p.pad + j;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const int64_t k = (plane * h + iy) * w + ix;
            if (chosen < 0) chosen = k;
            if (x.values[k] > best || std::isnan(x.values[k])) best = x.values[k], chosen = k;
          }
        }
        at.push_back(chosen);
      }
    }
  }
  return at;
}

std::vector<int64_t> max_pool_ints(const Pool& p) {
  return {p.k, p.k, p.stride, p.stride, p.pad, p.pad, 1, 1, 0};
}

void expect_max_pool(const Shape& x_shape, const Pool& p, std::mt19937& rng) {
  const HostTensor x = awkward_tensor(x_shape, rng);
  const Shape out{x_shape[0], x_shape[1], pool_size(x_shape[2], p), pool_size(x_shape[3], p)};
  const std::vector<int64_t> at = reference_argmax(x, p);
  std::vector<double> want;
  for (int64_t k : at) want.push_back(x.values[static_cast<std::size_t>(k)]);
  expect_on_every_thread_count(Kernel::kMaxPool2d, {x}, DType::kFloat32, out, max_pool_ints(p),
                               want, 0, true, "max_pool2d x " + x_shape.to_string());

  const HostTensor grad = random_tensor(DType::kFloat32, out, rng);
  std::vector<double> grad_x(static_cast<std::size_t>(x_shape.numel()), 0.0);
  for (std::size_t i = 0; i < at.size(); ++i)
    grad_x[static_cast<std::size_t>(at[i])] += grad.values[i];
  expect_on_every_thread_count(Kernel::kMaxPool2dBackward, {x, grad}, DType::kFloat32, x_shape,
                               max_pool_ints(p), grad_x, tolerance(DType::kFloat32), true,
                               "max_pool2d_backward x " + x_shape.to_string());
}

TEST(ThreadCount, MaxPoolTwoByTwoMatchesLoops) {
  std::mt19937 rng(7);
  // Rows of 18 windows: two blocks of eight and a tail; odd sizes leave a row and a column out.
  expect_max_pool({4, 8, 29, 37}, {}, rng);
  expect_max_pool({3, 5, 12, 14}, {}, rng);  // rows of 7 windows: tails only
}

TEST(ThreadCount, MaxPoolWithOverlapAndPaddingMatchesLoops) {
  std::mt19937 rng(8);
  expect_max_pool({3, 7, 21, 19}, {.k = 3, .stride = 1, .pad = 1}, rng);
}

TEST(ThreadCount, AvgPoolAndItsGradientGiveOneThreadsBits) {
  std::mt19937 rng(9);
  const Shape x_shape{4, 6, 23, 21};
  const HostTensor x = random_tensor(DType::kFloat32, x_shape, rng);
  const Pool p{.k = 3, .stride = 2, .pad = 1};
  const Shape out{4, 6, pool_size(23, p), pool_size(21, p)};
  const std::vector<int64_t> ints = {3, 3, 2, 2, 1, 1, 0, 1};  // count_include_pad
  // Both directions against loops: the divisor is always 9 with count_include_pad and no
  // ceil_mode.
  std::vector<double> mean;
  const HostTensor grad = random_tensor(DType::kFloat32, out, rng);
  std::vector<double> grad_x(static_cast<std::size_t>(x_shape.numel()), 0.0);
  for (int64_t plane = 0, o = 0; plane < 24; ++plane) {
    for (int64_t y = 0; y < out[2]; ++y) {
      for (int64_t xo = 0; xo < out[3]; ++xo, ++o) {
        double sum = 0;
        for (int64_t i = 0; i < 3; ++i) {
          for (int64_t j = 0; j < 3; ++j) {
            const int64_t iy = y * 2 - 1 + i, ix = xo * 2 - 1 + j;
            if (iy < 0 || iy >= 23 || ix < 0 || ix >= 21) continue;
            const auto k = static_cast<std::size_t>((plane * 23 + iy) * 21 + ix);
            sum += x.values[k];
            grad_x[k] += grad.values[static_cast<std::size_t>(o)] / 9;
          }
        }
        mean.push_back(sum / 9);
      }
    }
  }
  expect_on_every_thread_count(Kernel::kAvgPool2d, {x}, DType::kFloat32, out, ints, mean,
                               tolerance(DType::kFloat32), true, "avg_pool2d");
  expect_on_every_thread_count(Kernel::kAvgPool2dBackward, {grad}, DType::kFloat32, x_shape, ints,
                               grad_x, tolerance(DType::kFloat32), true, "avg_pool2d_backward");
}

// ---- reductions ------------------------------------------------------------------------------

TEST(ThreadCount, SumOverBatchAndPlanesGivesOneThreadsBits) {
  std::mt19937 rng(14);
  // A bias gradient: dims {0, 2, 3} of [N, C, H, W], gathered and then one row per channel.
  const Shape shape{16, 12, 20, 21};
  const HostTensor x = random_tensor(DType::kFloat32, shape, rng);
  std::vector<double> want(12, 0.0), scale(12, 0.0);
  for (int64_t i = 0; i < shape.numel(); ++i) {
    const auto c = static_cast<std::size_t>(i / (20 * 21) % 12);
    want[c] += x.values[static_cast<std::size_t>(i)];
    scale[c] += std::abs(x.values[static_cast<std::size_t>(i)]);
  }
  expect_on_every_thread_count(Kernel::kSum, {x}, DType::kFloat32, {1, 12, 1, 1}, {1, 0, 2, 3},
                               want, tolerance(DType::kFloat32), true, "sum over {0, 2, 3}", scale);
}

// ---- cumsum and topk -------------------------------------------------------------------------

// Rows along the last dim and columns along the first, each enough work to be split.
TEST(ThreadCount, CumsumGivesOneThreadsBits) {
  std::mt19937 rng(15);
  const Shape shape{300, 700};
  const HostTensor x = random_tensor(DType::kFloat32, shape, rng);
  for (int64_t dim : {0, 1}) {
    for (int64_t reverse : {0, 1}) {
      std::vector<double> want(x.values.size());
      const int64_t n = shape[static_cast<int>(dim)], stride = dim == 0 ? 700 : 1;
      for (int64_t line = 0; line < shape.numel() / n; ++line) {
        const int64_t first = dim == 0 ? line : line * 700;
        double running = 0;
        for (int64_t r = 0; r < n; ++r) {
          const auto i = static_cast<std::size_t>(first + (reverse ? n - 1 - r : r) * stride);
          running += x.values[i];
          want[i] = round_to(DType::kFloat32, running);
        }
      }
      expect_on_every_thread_count(
          Kernel::kCumsum, {x}, DType::kFloat32, shape, {dim, reverse}, want, 0, true,
          "cumsum dim " + std::to_string(dim) + (reverse ? " reversed" : ""));
    }
  }
}

TEST(ThreadCount, TopkGivesOneThreadsBits) {
  std::mt19937 rng(16);
  const Shape shape{400, 300};
  const HostTensor x = random_tensor(DType::kFloat32, shape, rng);
  std::vector<double> want;
  for (int64_t row = 0; row < 400; ++row) {
    std::vector<int64_t> order(300);
    for (int64_t j = 0; j < 300; ++j) order[static_cast<std::size_t>(j)] = j;
    const double* v = x.values.data() + row * 300;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
    for (int64_t j = 0; j < 5; ++j) want.push_back(static_cast<double>(order[j]));
  }
  expect_on_every_thread_count(Kernel::kTopK, {x}, DType::kInt64, {400, 5}, {1, 5, 1}, want, 0,
                               true, "topk 5 of 300");
}

// ---- elementwise and fused -------------------------------------------------------------------

TEST(ThreadCount, BroadcastAddGivesOneThreadsBits) {
  std::mt19937 rng(10);
  for (const auto& [a_shape, b_shape] :
       std::vector<std::pair<Shape, Shape>>{{{64, 33, 40}, {33, 1}},  // many rows
                                            {{100003}, {100003}},     // one row, split inside
                                            {{2, 50001}, {1}}}) {     // fewer rows than threads
    const HostTensor a = random_tensor(DType::kFloat32, a_shape, rng);
    const HostTensor b = random_tensor(DType::kFloat32, b_shape, rng);
    std::vector<double> want;
    const int64_t inner = b_shape.rank() == 2 ? a_shape[2] : 1;
    for (int64_t i = 0; i < a_shape.numel(); ++i) {
      const int64_t j = b_shape.numel() == 1  ? 0
                        : b_shape.rank() == 2 ? (i / inner) % b_shape[0]
                                              : i;
      want.push_back(round_to(DType::kFloat32, a.values[static_cast<std::size_t>(i)] +
                                                   b.values[static_cast<std::size_t>(j)]));
    }
    expect_on_every_thread_count(Kernel::kAdd, {a, b}, DType::kFloat32, a_shape, {}, want, 0, true,
                                 "add " + a_shape.to_string() + " + " + b_shape.to_string());
  }
}

TEST(ThreadCount, WhereWithAScalarBranchGivesOneThreadsBits) {
  std::mt19937 rng(11);
  const Shape shape{32, 40, 41};
  const HostTensor cond = random_tensor(DType::kBool, shape, rng);
  const HostTensor a = random_tensor(DType::kFloat32, shape, rng);
  const HostTensor zero{DType::kFloat32, {}, {0.0}};
  std::vector<double> want, want_swapped;
  for (std::size_t i = 0; i < a.values.size(); ++i) {
    want.push_back(cond.values[i] != 0 ? a.values[i] : 0.0);
    want_swapped.push_back(cond.values[i] != 0 ? 0.0 : a.values[i]);
  }
  expect_on_every_thread_count(Kernel::kWhere, {cond, a, zero}, DType::kFloat32, shape, {}, want, 0,
                               true, "where(cond, a, 0)");
  expect_on_every_thread_count(Kernel::kWhere, {cond, zero, a}, DType::kFloat32, shape, {},
                               want_swapped, 0, true, "where(cond, 0, a)");
}

TEST(ThreadCount, ExpGivesOneThreadsBits) {
  std::mt19937 rng(12);
  for (DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    const HostTensor x = random_tensor(dtype, {70001}, rng);
    std::vector<double> want;
    for (double v : x.values) want.push_back(std::exp(v));
    expect_on_every_thread_count(Kernel::kExp, {x}, dtype, x.shape, {}, want, tolerance(dtype),
                                 true, "exp " + label(dtype));
  }
}

TEST(ThreadCount, FusedChainGivesTheUnfusedBitsOnEveryThreadCount) {
  std::mt19937 rng(13);
  const Shape shape{300, 301};
  const std::vector<HostTensor> externals = {random_tensor(DType::kFloat32, shape, rng),
                                             random_tensor(DType::kFloat32, {301}, rng),
                                             HostTensor{DType::kFloat32, {}, {0.25}}};
  // relu(a * b + 0.25), then its tanh: a gathered operand, a scalar, scratch buffers.
  const std::vector<Step> steps = {
      {Kernel::kMul, 0, 1}, {Kernel::kAdd, -1, 2}, {Kernel::kRelu, -2}, {Kernel::kTanh, -3}};
  const HostTensor want = unfused(steps, externals, DType::kFloat32, shape);
  const std::vector<int64_t> ints = fused_ints(steps, false);
  const HostTensor one = run_on(1, Kernel::kFused, externals, DType::kFloat32, shape, ints);
  expect_same_bits(one, want);
  for (int threads : {2, 3}) {
    SCOPED_TRACE(std::to_string(threads) + " threads");
    expect_same_bits(run_on(threads, Kernel::kFused, externals, DType::kFloat32, shape, ints),
                     want);
  }
}

}  // namespace
}  // namespace axle::testing
