// Tests backends/cpu/attention.cpp: kScaledDotProductAttention and its backward against plain
// double loops written here from torch's definition (softmax(q k^T * scale + mask) v and its
// derivative), with causal, bool and added masks, broadcast batch dims, sizes that cross the
// kernels' 64-row blocks, head widths across the block products' vector tiles, f32, f64 and bf16;
// on 1, 2 and 3 compute threads with the same bits; and the errors of calls that do not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/isa.h"
#include "tests/backends/fused_chain.h"
#include "tests/backends/kernel_test_util.h"

namespace axle::testing {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

cpu::ComputePool& pool_of(int threads) {
  static std::map<int, std::unique_ptr<cpu::ComputePool>> pools;
  auto& pool = pools[threads];
  if (!pool) pool = std::make_unique<cpu::ComputePool>(threads);
  return *pool;
}

// Every thread's scratch (what the kernels lay their blocks out in) filled with 0xFF bytes
// (NaN) before each call: a region a kernel reads before writing, or a pad it leaves unwritten,
// shows as NaN in its results instead of passing on a fresh allocation's zeros.
void poison_scratch(cpu::ComputePool& pool) {
  constexpr std::size_t kBytes = std::size_t{1} << 22;
  for (int thread = 0; thread < pool.threads(); ++thread) {
    std::memset(pool.scratch(thread, kBytes), 0xFF, kBytes);
  }
}

// One call on a pool of `threads`, its scratch poisoned; the output starts as 0xFF bytes (NaN),
// so an element no part writes cannot pass.
HostTensor run_on(int threads, Kernel kernel, const std::vector<HostTensor>& inputs,
                  DType out_dtype, const Shape& out_shape, std::vector<int64_t> ints,
                  std::vector<double> reals) {
  std::vector<BufferDesc> descs;
  std::vector<std::vector<std::byte>> buffers;
  std::vector<cpu::ConstView> views;
  descs.reserve(inputs.size());
  for (const HostTensor& in : inputs) {
    descs.push_back({in.dtype, in.shape});
    buffers.push_back(encode(in));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) views.push_back({buffers[i].data(), &descs[i]});
  const BufferDesc out_desc{out_dtype, out_shape};
  std::vector<std::byte> out(out_desc.bytes(), std::byte{0xFF});
  const KernelCall call{kernel, {}, 0, std::move(ints), std::move(reals)};
  cpu::ComputePool& pool = pool_of(threads);
  poison_scratch(pool);
  cpu::kernel_table()[static_cast<std::size_t>(kernel)](
      cpu::KernelArgs{call, views, {out.data(), &out_desc}, pool});
  return {out_dtype, out_shape,
          decode(out_dtype, out.data(), static_cast<std::size_t>(out_shape.numel()))};
}

// An attention problem: batch dims of q (k and v may broadcast theirs), sizes, and masking.
struct Case {
  Shape batch, kv_batch;
  int64_t L, S, E, Ev;
  bool causal = false;
  int64_t mask_kind = 0;  // 0 none, 1 bool, 2 added
  Shape mask_shape;       // broadcasts to batch + [L, S]
  double scale = 0.3;
  DType dtype = DType::kFloat32;
};

Shape with(Shape shape, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) shape.push_back(d);
  return shape;
}

struct Inputs {
  HostTensor q, k, v, mask;
};

Inputs random_inputs(const Case& c, std::mt19937& rng) {
  Inputs in;
  in.q = random_tensor(c.dtype, with(c.batch, {c.L, c.E}), rng);
  in.k = random_tensor(c.dtype, with(c.kv_batch, {c.S, c.E}), rng);
  in.v = random_tensor(c.dtype, with(c.kv_batch, {c.S, c.Ev}), rng);
  if (c.mask_kind == 1) {
    in.mask = random_tensor(DType::kBool, c.mask_shape, rng, 0, 1);
    // Most keys kept, and the first key of every row, so that no row is all dropped.
    std::bernoulli_distribution keep(0.7);
    const int64_t cols = c.mask_shape[c.mask_shape.rank() - 1];
    for (std::size_t i = 0; i < in.mask.values.size(); ++i) {
      in.mask.values[i] = (i % static_cast<std::size_t>(cols) == 0 || keep(rng)) ? 1 : 0;
    }
  } else if (c.mask_kind == 2) {
    in.mask = random_tensor(c.dtype, c.mask_shape, rng, -1, 1);
  }
  return in;
}

// Element offset of batch entry `entry` of `batch` in a tensor whose batch dims are `own`
// (right-aligned, size 1 repeating), in units of matrices.
int64_t matrix_of(const Shape& batch, const Shape& own, int64_t entry) {
  int64_t offset = 0, stride = 1;
  for (int d = batch.rank() - 1, o = own.rank() - 1; d >= 0; --d, --o) {
    const int64_t i = entry % batch[d];
    entry /= batch[d];
    if (o >= 0) {
      if (own[o] != 1) offset += i * stride;
      stride *= own[o];
    }
  }
  return offset;
}

// Offset of mask element (entry, i, j) in a mask broadcasting to batch + [L, S].
int64_t mask_at(const Case& c, int64_t entry, int64_t i, int64_t j) {
  const Shape full = with(c.batch, {c.L, c.S});
  std::vector<int64_t> index(static_cast<std::size_t>(full.rank()));
  index[static_cast<std::size_t>(full.rank() - 1)] = j;
  index[static_cast<std::size_t>(full.rank() - 2)] = i;
  for (int d = c.batch.rank() - 1; d >= 0; --d) {
    index[static_cast<std::size_t>(d)] = entry % c.batch[d];
    entry /= c.batch[d];
  }
  int64_t offset = 0, stride = 1;
  for (int d = full.rank() - 1, o = c.mask_shape.rank() - 1; o >= 0; --d, --o) {
    if (c.mask_shape[o] != 1) offset += index[static_cast<std::size_t>(d)] * stride;
    stride *= c.mask_shape[o];
  }
  return offset;
}

// The softmax of one batch entry's scores [L, S], from torch's definition, and each row's
// logsumexp.
void softmax_ref(const Case& c, const Inputs& in, int64_t entry, std::vector<double>& p,
                 std::vector<double>& lse) {
  const int64_t qm = matrix_of(c.batch, c.batch, entry), km = matrix_of(c.batch, c.kv_batch, entry);
  p.assign(static_cast<std::size_t>(c.L * c.S), 0);
  lse.assign(static_cast<std::size_t>(c.L), 0);
  for (int64_t i = 0; i < c.L; ++i) {
    double top = kMinusInf;
    for (int64_t j = 0; j < c.S; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < c.E; ++e) {
        dot += in.q.values[static_cast<std::size_t>((qm * c.L + i) * c.E + e)] *
               in.k.values[static_cast<std::size_t>((km * c.S + j) * c.E + e)];
      }
      double s = dot * c.scale;
      if (c.causal && j > i) s = kMinusInf;
      if (c.mask_kind == 1 &&
          in.mask.values[static_cast<std::size_t>(mask_at(c, entry, i, j))] == 0) {
        s = kMinusInf;
      }
      if (c.mask_kind == 2) s += in.mask.values[static_cast<std::size_t>(mask_at(c, entry, i, j))];
      p[static_cast<std::size_t>(i * c.S + j)] = s;
      top = std::max(top, s);
    }
    double z = 0;
    for (int64_t j = 0; j < c.S; ++j) z += std::exp(p[static_cast<std::size_t>(i * c.S + j)] - top);
    for (int64_t j = 0; j < c.S; ++j) {
      double& x = p[static_cast<std::size_t>(i * c.S + j)];
      x = std::exp(x - top) / z;
    }
    lse[static_cast<std::size_t>(i)] = top + std::log(z);
  }
}

// [batch..., L, Ev + 1]: outputs, then the logsumexp.
std::vector<double> forward_ref(const Case& c, const Inputs& in) {
  std::vector<double> out, p, lse;
  for (int64_t b = 0; b < c.batch.numel(); ++b) {
    softmax_ref(c, in, b, p, lse);
    const int64_t vm = matrix_of(c.batch, c.kv_batch, b);
    for (int64_t i = 0; i < c.L; ++i) {
      for (int64_t d = 0; d < c.Ev; ++d) {
        double acc = 0;
        for (int64_t j = 0; j < c.S; ++j) {
          acc += p[static_cast<std::size_t>(i * c.S + j)] *
                 in.v.values[static_cast<std::size_t>((vm * c.S + j) * c.Ev + d)];
        }
        out.push_back(acc);
      }
      out.push_back(lse[static_cast<std::size_t>(i)]);
    }
  }
  return out;
}

// [batch..., L + 2 S, max(E, Ev)]: the rows of dq, dk, dv of sum(out * grad), zero-padded.
std::vector<double> backward_ref(const Case& c, const Inputs& in, const HostTensor& grad) {
  std::vector<double> out, p, lse;
  for (int64_t b = 0; b < c.batch.numel(); ++b) {
    softmax_ref(c, in, b, p, lse);
    const int64_t qm = matrix_of(c.batch, c.batch, b), km = matrix_of(c.batch, c.kv_batch, b);
    auto q = [&](int64_t i, int64_t e) {
      return in.q.values[static_cast<std::size_t>((qm * c.L + i) * c.E + e)];
    };
    auto k = [&](int64_t j, int64_t e) {
      return in.k.values[static_cast<std::size_t>((km * c.S + j) * c.E + e)];
    };
    auto v = [&](int64_t j, int64_t d) {
      return in.v.values[static_cast<std::size_t>((km * c.S + j) * c.Ev + d)];
    };
    auto g = [&](int64_t i, int64_t d) {
      return grad.values[static_cast<std::size_t>((b * c.L + i) * c.Ev + d)];
    };
    // dS_ij = P_ij (dP_ij - sum_l P_il dP_il), dP_ij = g_i . v_j.
    std::vector<double> ds(p.size());
    for (int64_t i = 0; i < c.L; ++i) {
      double row = 0;
      for (int64_t j = 0; j < c.S; ++j) {
        double dp = 0;
        for (int64_t d = 0; d < c.Ev; ++d) dp += g(i, d) * v(j, d);
        ds[static_cast<std::size_t>(i * c.S + j)] = dp;
        row += p[static_cast<std::size_t>(i * c.S + j)] * dp;
      }
      for (int64_t j = 0; j < c.S; ++j) {
        double& x = ds[static_cast<std::size_t>(i * c.S + j)];
        x = p[static_cast<std::size_t>(i * c.S + j)] * (x - row);
      }
    }
    auto P = [&](int64_t i, int64_t j) { return p[static_cast<std::size_t>(i * c.S + j)]; };
    auto dS = [&](int64_t i, int64_t j) { return ds[static_cast<std::size_t>(i * c.S + j)]; };
    const int64_t width = std::max(c.E, c.Ev);
    auto pad = [&](int64_t cols) {
      out.insert(out.end(), static_cast<std::size_t>(width - cols), 0.0);
    };
    for (int64_t i = 0; i < c.L; ++i) {
      for (int64_t e = 0; e < c.E; ++e) {
        double acc = 0;
        for (int64_t j = 0; j < c.S; ++j) acc += dS(i, j) * k(j, e);
        out.push_back(acc * c.scale);
      }
      pad(c.E);
    }
    for (int64_t j = 0; j < c.S; ++j) {
      for (int64_t e = 0; e < c.E; ++e) {
        double acc = 0;
        for (int64_t i = 0; i < c.L; ++i) acc += dS(i, j) * q(i, e);
        out.push_back(acc * c.scale);
      }
      pad(c.E);
    }
    for (int64_t j = 0; j < c.S; ++j) {
      for (int64_t d = 0; d < c.Ev; ++d) {
        double acc = 0;
        for (int64_t i = 0; i < c.L; ++i) acc += P(i, j) * g(i, d);
        out.push_back(acc);
      }
      pad(c.Ev);
    }
  }
  return out;
}

std::vector<HostTensor> operands(const Case& c, const Inputs& in) {
  std::vector<HostTensor> ops = {in.q, in.k, in.v};
  if (c.mask_kind != 0) ops.push_back(in.mask);
  return ops;
}

DType output_dtype(const Case& c) {
  return c.dtype == DType::kBFloat16 ? DType::kFloat32 : c.dtype;
}

// Forward and backward against the loops on 1, 2 and 3 threads, each thread count giving the
// same bits as one.
void check(const Case& c, unsigned seed, double tol, const std::string& what,
           double backward_tol = 0) {
  if (backward_tol == 0) backward_tol = tol;
  SCOPED_TRACE(what);
  std::mt19937 rng(seed);
  const Inputs in = random_inputs(c, rng);
  const std::vector<int64_t> ints = {c.causal ? 1 : 0, c.mask_kind};
  const DType out_dtype = output_dtype(c);
  const Shape fwd_shape = with(c.batch, {c.L, c.Ev + 1});
  const std::vector<double> want = forward_ref(c, in);
  const HostTensor one = run_on(1, Kernel::kScaledDotProductAttention, operands(c, in), out_dtype,
                                fwd_shape, ints, {c.scale});
  expect_values(one.values, want, tol, what + " forward");
  for (int threads : {2, 3}) {
    expect_same_bits(run_on(threads, Kernel::kScaledDotProductAttention, operands(c, in), out_dtype,
                            fwd_shape, ints, {c.scale}),
                     one);
  }

  const HostTensor grad = random_tensor(c.dtype, with(c.batch, {c.L, c.Ev}), rng);
  std::vector<HostTensor> back = {in.q, in.k, in.v, one, grad};
  if (c.mask_kind != 0) back.push_back(in.mask);
  const Shape grads_shape = with(c.batch, {c.L + 2 * c.S, std::max(c.E, c.Ev)});
  const std::vector<double> want_grads = backward_ref(c, in, grad);
  const HostTensor grads_one = run_on(1, Kernel::kScaledDotProductAttentionBackward, back,
                                      out_dtype, grads_shape, ints, {c.scale});
  expect_values(grads_one.values, want_grads, backward_tol, what + " backward");
  for (int threads : {2, 3}) {
    expect_same_bits(run_on(threads, Kernel::kScaledDotProductAttentionBackward, back, out_dtype,
                            grads_shape, ints, {c.scale}),
                     grads_one);
  }
  if (c.dtype == DType::kBFloat16) {
    // bf16 gradients from the f32 forward output: the f32 gradients, each rounded once.
    HostTensor rounded = grads_one;
    rounded.dtype = DType::kBFloat16;
    for (double& x : rounded.values) x = round_to(DType::kBFloat16, x);
    for (int threads : {1, 2}) {
      expect_same_bits(run_on(threads, Kernel::kScaledDotProductAttentionBackward, back,
                              DType::kBFloat16, grads_shape, ints, {c.scale}),
                       rounded);
    }
  }
}

TEST(CpuAttention, MatchesTheDefinitionWithoutAMask) {
  check({{2, 3}, {2, 3}, 5, 7, 4, 3}, 1, 1e-5, "small");
  // Sizes that cross the 64-row blocks on both sides, enough work to split over threads.
  check({{2, 2}, {2, 2}, 130, 70, 16, 8}, 2, 1e-5, "blocks");
}

TEST(CpuAttention, CausalKeepsEarlierKeysAcrossBlocks) {
  Case c{{3, 2}, {3, 2}, 150, 150, 8, 8};
  c.causal = true;
  check(c, 3, 1e-5, "causal L = S");
  c.L = 70, c.S = 140;  // top-left aligned: query i keeps keys 0..i
  check(c, 4, 1e-5, "causal L < S");
  c.L = 140, c.S = 70;
  check(c, 5, 1e-5, "causal L > S");
}

// Head widths the block products take in vector tiles of 16 and 8 columns with a scalar rest
// (27 = 16 + 8 + 3, 40 = 16 + 16 + 8), and the GPT sample's heads (128 positions, width 32).
TEST(CpuAttention, HeadWidthsAcrossTheBlockProductsTiles) {
  Case c{{2, 2}, {2, 2}, 75, 69, 27, 40};
  check(c, 13, 1e-5, "E = 27, Ev = 40");
  c.causal = true;
  check(c, 14, 1e-5, "E = 27, Ev = 40, causal");
  Case gpt{{2, 4}, {2, 4}, 128, 128, 32, 32};
  gpt.causal = true;
  gpt.scale = 1 / std::sqrt(32.0);
  check(gpt, 15, 1e-5, "GPT heads");
}

TEST(CpuAttention, BoolAndAddedMasksBroadcast) {
  Case c{{2, 3}, {2, 3}, 80, 90, 8, 5};
  c.mask_kind = 1;
  c.mask_shape = {80, 90};
  check(c, 6, 1e-5, "bool mask [L, S]");
  c.mask_shape = {2, 1, 80, 90};
  check(c, 7, 1e-5, "bool mask per batch entry");
  c.mask_kind = 2;
  c.mask_shape = {3, 1, 90};
  check(c, 8, 1e-5, "added mask per head and key");
}

TEST(CpuAttention, BatchDimsBroadcast) {
  // k and v shared by the first batch dim, and by every head.
  check({{4, 3}, {1, 3}, 20, 70, 6, 4}, 9, 1e-5, "k, v [1, 3, ...]");
  check({{4, 3}, {}, 20, 70, 6, 4}, 10, 1e-5, "k, v [S, E]");
}

// Whether bf16 operands of `c` take their products as bf16 pairs (vdpbf16ps).
bool takes_pairs(const Case& c) {
  return cpu::cpu_isa() == cpu::CpuIsa::kAvx512Bf16 && c.E % 2 == 0 && c.Ev % 2 == 0;
}

// How close bf16 operands' results come to the exact ones (the operands are exact in the
// reference), relative to max(1, |exact|). Computed in f32: as f32 is. As bf16 pairs the
// probabilities are rounded to bf16 before the value product (as torch's bf16 attention rounds
// them), 2^-9 of each term: the forward within 2^-8. The backward's D reads that forward output
// (an error summed over the head width) and rounds dS too: 3e-2.
double bf16_tolerance(const Case& c) { return takes_pairs(c) ? 1.0 / 256 : 1e-5; }
double bf16_backward_tolerance(const Case& c) { return takes_pairs(c) ? 3e-2 : 1e-5; }

// check() for bf16 operands.
void check_bf16(Case c, unsigned seed, const std::string& what) {
  c.dtype = DType::kBFloat16;
  check(c, seed, bf16_tolerance(c), what, bf16_backward_tolerance(c));
}

TEST(CpuAttention, F64AndBf16) {
  Case c{{2, 2}, {2, 2}, 70, 66, 8, 8};
  c.causal = true;
  c.dtype = DType::kFloat64;
  check(c, 11, 1e-12, "f64");
  // bf16 operands; the kernel accumulates in f32 and gives f32.
  check_bf16(c, 12, "bf16 into f32");
}

// bf16 operands across the blocks' edges (odd rows left in the last block of queries and of
// keys), causal and with masks, the GPT's heads, and odd head widths (whole pairs or not).
TEST(CpuAttention, Bf16AcrossBlocksMasksAndHeadWidths) {
  Case c{{2, 2}, {2, 2}, 131, 69, 16, 8};
  check_bf16(c, 21, "L = 131, S = 69");
  c.causal = true;
  c.L = 69, c.S = 131;
  check_bf16(c, 22, "causal L = 69, S = 131");
  c.causal = false;
  c.mask_kind = 1;
  c.mask_shape = {69, 131};
  check_bf16(c, 23, "bool mask");
  c.mask_kind = 2;
  c.mask_shape = {2, 1, 1, 131};
  check_bf16(c, 24, "added mask");
  // Odd widths (the f32 path), a width of 10 pairs (a word transpose's 8 x 8 blocks and its
  // edges), widths of 64 (the products' 64-column tiles), k and v shared over the batch.
  check_bf16({{2, 3}, {2, 3}, 70, 66, 7, 5}, 25, "E = 7, Ev = 5");
  check_bf16({{2, 2}, {2, 2}, 75, 69, 20, 64}, 26, "E = 20, Ev = 64");
  check_bf16({{2, 2}, {2, 2}, 66, 70, 64, 20}, 27, "E = 64, Ev = 20");
  check_bf16({{4, 3}, {1, 3}, 20, 70, 6, 4}, 28, "k, v [1, 3, ...]");
  Case gpt{{2, 4}, {2, 4}, 128, 128, 32, 32};
  gpt.causal = true;
  gpt.scale = 1 / std::sqrt(32.0);
  check_bf16(gpt, 29, "GPT heads");
}

// A query whose keys are all dropped: NaN in its output row, -inf logsumexp, and NaN gradients
// as the f32 path gives (here through the bf16 pairs where the processor has them).
TEST(CpuAttention, Bf16RowThatKeepsNoKeyIsNanAsInF32) {
  const auto row_of_nothing = [](DType dtype) {
    std::mt19937 rng(30);
    const HostTensor q = random_tensor(dtype, {3, 4}, rng);
    const HostTensor k = random_tensor(dtype, {5, 4}, rng);
    const HostTensor v = random_tensor(dtype, {5, 2}, rng);
    HostTensor keep{DType::kBool, {3, 5}, std::vector<double>(15, 1.0)};
    for (int j = 0; j < 5; ++j) keep.values[static_cast<std::size_t>(5 + j)] = 0;  // query 1
    const HostTensor out = run_on(1, Kernel::kScaledDotProductAttention, {q, k, v, keep},
                                  DType::kFloat32, {3, 3}, {0, 1}, {0.5});
    const HostTensor grad = random_tensor(dtype, {3, 2}, rng);
    const HostTensor grads =
        run_on(1, Kernel::kScaledDotProductAttentionBackward, {q, k, v, out, grad, keep},
               DType::kFloat32, {13, 4}, {0, 1}, {0.5});
    return std::pair{out, grads};
  };
  const auto [f32_out, f32_grads] = row_of_nothing(DType::kFloat32);
  const auto [out, grads] = row_of_nothing(DType::kBFloat16);
  for (std::size_t i = 0; i < out.values.size(); ++i) {
    EXPECT_EQ(std::isnan(out.values[i]), std::isnan(f32_out.values[i])) << "output " << i;
    EXPECT_EQ(std::isinf(out.values[i]), std::isinf(f32_out.values[i])) << "output " << i;
  }
  EXPECT_TRUE(std::isnan(out.values[3]) && out.values[5] == -kInf);
  for (std::size_t i = 0; i < grads.values.size(); ++i) {
    EXPECT_EQ(std::isnan(grads.values[i]), std::isnan(f32_grads.values[i])) << "gradient " << i;
  }
}

// Causal with a mask that drops every key of query 3, inside one diagonal block: as torch's math
// path gives, that query's output and gradient are NaN, and so is every key's and value's
// gradient (its NaN probabilities reach them all); the other queries' gradients are finite.
TEST(CpuAttention, CausalRowThatKeepsNoKeyMakesEveryKeysGradientNan) {
  for (const DType dtype : {DType::kFloat32, DType::kBFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t n = 64, e = 8;
    std::mt19937 rng(31);
    const HostTensor q = random_tensor(dtype, {n, e}, rng);
    const HostTensor k = random_tensor(dtype, {n, e}, rng);
    const HostTensor v = random_tensor(dtype, {n, e}, rng);
    HostTensor keep{DType::kBool, {n, n}, std::vector<double>(n * n, 1.0)};
    for (int64_t j = 0; j < n; ++j) keep.values[static_cast<std::size_t>(3 * n + j)] = 0;
    const HostTensor out = run_on(2, Kernel::kScaledDotProductAttention, {q, k, v, keep},
                                  DType::kFloat32, {n, e + 1}, {1, 1}, {0.5});
    const HostTensor grad = random_tensor(dtype, {n, e}, rng);
    const HostTensor grads =
        run_on(2, Kernel::kScaledDotProductAttentionBackward, {q, k, v, out, grad, keep},
               DType::kFloat32, {3 * n, e}, {1, 1}, {0.5});
    for (int64_t r = 0; r < 3 * n; ++r) {
      const bool nan_row = r == 3 || r >= n;
      for (int64_t c = 0; c < e; ++c) {
        EXPECT_EQ(std::isnan(grads.values[static_cast<std::size_t>(r * e + c)]), nan_row)
            << "row " << r << ", column " << c;
      }
    }
  }
}

TEST(CpuAttention, ARowThatKeepsNoKeyIsNanWithALogsumexpOfMinusInfinity) {
  const HostTensor q{DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}};
  const HostTensor k{DType::kFloat32, {2, 3}, {1, 0, 1, 0, 1, 0}};
  const HostTensor v{DType::kFloat32, {2, 1}, {10, 20}};
  const HostTensor mask{DType::kBool, {2, 2}, {1, 1, 0, 0}};
  const HostTensor out = run_on(1, Kernel::kScaledDotProductAttention, {q, k, v, mask},
                                DType::kFloat32, {2, 2}, {0, 1}, {1.0});
  EXPECT_FALSE(std::isnan(out.values[0]));
  EXPECT_TRUE(std::isfinite(out.values[1]));
  EXPECT_TRUE(std::isnan(out.values[2]));
  EXPECT_EQ(out.values[3], kMinusInf);
}

std::string error_of(Kernel kernel, const std::vector<HostTensor>& inputs, DType out_dtype,
                     const Shape& out_shape, std::vector<int64_t> ints, std::vector<double> reals) {
  try {
    (void)run_on(1, kernel, inputs, out_dtype, out_shape, std::move(ints), std::move(reals));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(CpuAttention, RejectsCallsThatDoNotFitNamingTheKernelAndShapes) {
  const HostTensor q{DType::kFloat32, {2, 3, 4}, std::vector<double>(24)};
  const HostTensor k{DType::kFloat32, {2, 5, 4}, std::vector<double>(40)};
  const HostTensor v{DType::kFloat32, {2, 5, 2}, std::vector<double>(20)};
  const HostTensor k3{DType::kFloat32, {2, 5, 3}, std::vector<double>(30)};
  const Kernel fwd = Kernel::kScaledDotProductAttention;
  std::string e = error_of(fwd, {q, k3, v}, DType::kFloat32, {2, 3, 3}, {0, 0}, {1.0});
  EXPECT_TRUE(contains(e, "scaled_dot_product_attention(f32[2,3,4], f32[2,5,3], f32[2,5,2])")) << e;
  e = error_of(fwd, {q, k, v}, DType::kFloat32, {2, 3, 2}, {0, 0}, {1.0});
  EXPECT_TRUE(contains(e, "-> f32[2,3,2]") && contains(e, "Ev + 1")) << e;
  e = error_of(fwd, {q, k, v}, DType::kFloat32, {2, 3, 3}, {0, 1}, {1.0});
  EXPECT_TRUE(contains(e, "mask kind 1")) << e;
  e = error_of(fwd, {q, k, v}, DType::kFloat32, {2, 3, 3}, {0}, {1.0});
  EXPECT_TRUE(contains(e, "ints must be")) << e;
  const HostTensor narrow{DType::kBool, {3, 2}, std::vector<double>(6)};
  e = error_of(fwd, {q, k, v, narrow}, DType::kFloat32, {2, 3, 3}, {0, 1}, {1.0});
  EXPECT_TRUE(contains(e, "pred[3,2]") && contains(e, "[2,3,5]")) << e;
  const HostTensor qi{DType::kInt32, {2, 3, 4}, std::vector<double>(24)};
  e = error_of(fwd, {qi, k, v}, DType::kFloat32, {2, 3, 3}, {0, 0}, {1.0});
  EXPECT_TRUE(contains(e, "one dtype")) << e;
  const HostTensor fwd_out{DType::kFloat32, {2, 3, 3}, std::vector<double>(18)};
  const HostTensor wrong_grad{DType::kFloat32, {2, 3, 3}, std::vector<double>(18)};
  e = error_of(Kernel::kScaledDotProductAttentionBackward, {q, k, v, fwd_out, wrong_grad},
               DType::kFloat32, {2, 13, 4}, {0, 0}, {1.0});
  EXPECT_TRUE(contains(e, "scaled_dot_product_attention_backward") && contains(e, "grad")) << e;
}

}  // namespace
}  // namespace axle::testing
