// backends/cpu: kScaledDotProductAttention and its backward, flash-attention style. The forward
// takes one block of queries at a time against one block of keys at a time: the block's scores
// (a product), their softmax kept online (running maximum and sum per query, the output rescaled
// when the maximum grows), and the value product added in; it keeps each query's
// logsumexp. The backward recomputes each block's probabilities from q, k and that logsumexp and
// forms dq, dk and dv with four products per block pair. The block products read their operands
// in place (gemm.h's direct_gemm), not through a packing GEMM. No more than one block of scores
// exists per thread. bf16 operands are widened block by block and computed in f32, or, on
// AVX512_BF16, multiplied as bf16 pairs (attention_pairs.cpp).
//
// Work splits over batch entries × query blocks (forward) and batch entries (backward), each
// part computed by one thread in a fixed order, so results do not depend on the thread count.
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "axle/backends/cpu/attention_blocks.h"
#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/vector_math.h"

namespace axle::cpu {
namespace {

using namespace attention_detail;

std::string describe(const KernelArgs& args) {
  std::string operands;
  for (const ConstView& in : args.inputs) {
    if (!operands.empty()) operands += ", ";
    operands += fmt::format("{}{}", dtype_name(in.desc->dtype), in.desc->shape.to_string());
  }
  return fmt::format("{}({}) -> {}{}", kernel_name(args.call.kernel), operands,
                     dtype_name(args.output.desc->dtype), args.output.desc->shape.to_string());
}

[[noreturn]] void reject(const KernelArgs& args, const std::string& why) {
  throw std::invalid_argument(fmt::format("{}: {}", describe(args), why));
}

Shape with_dims(Shape shape, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) shape.push_back(d);
  return shape;
}

// The mask (the last operand): its dtype, broadcast and strides.
void read_mask(const KernelArgs& args, Problem& p) {
  const ConstView& mask = args.inputs.back();
  p.bool_mask = args.call.ints[1] == 1;
  if (mask.desc->dtype != (p.bool_mask ? DType::kBool : args.inputs[0].desc->dtype)) {
    reject(args, p.bool_mask ? "a bool mask must be pred" : "an added mask needs q's dtype");
  }
  const Shape scores = with_dims(p.batch, {p.L, p.S});
  if (!broadcasts_to(mask.desc->shape, scores)) {
    reject(args, fmt::format("the mask does not broadcast to {}", scores.to_string()));
  }
  p.mask_strides = broadcast_strides(mask.desc->shape, scores);
  p.mask_row = p.mask_strides[static_cast<std::size_t>(p.batch.rank())];
  p.mask_col = p.mask_strides[static_cast<std::size_t>(p.batch.rank()) + 1];
  p.mask = mask.data;
}

// The operands a call reads through views and, for the backward, its gradients' placement
// (executable.h's kAttentionView bits), each view's ints.
struct Views {
  std::array<std::span<const int64_t>, 4> operand;  // q, k, v, grad: [rows, cols, offset,
                                                    // stride0, stride1, row stride]
  std::span<const int64_t> output;  // dq, dk, dv: [offset, stride0, stride1, row stride] each
};

Views read_views(const KernelArgs& args, bool backward) {
  const std::vector<int64_t>& ints = args.call.ints;
  Views views;
  if (ints.size() < 3) return views;  // plan() checks the rest
  const int64_t bits = ints[2];
  const int64_t allowed = backward ? kAttentionViewQ | kAttentionViewK | kAttentionViewV |
                                         kAttentionViewGrad | kAttentionViewOutput
                                   : kAttentionViewQ | kAttentionViewK | kAttentionViewV;
  if (bits < 0 || (bits & ~allowed) != 0) {
    reject(args, fmt::format("view bits {} name no view this kernel takes", bits));
  }
  std::size_t at = 3;
  auto take = [&](std::size_t count) {
    if (at + count > ints.size()) reject(args, "the views' ints end early");
    const std::span<const int64_t> view(ints.data() + at, count);
    at += count;
    return view;
  };
  for (std::size_t i = 0; i < 4; ++i) {
    if ((bits & (int64_t{1} << i)) != 0) views.operand[i] = take(6);
  }
  if ((bits & kAttentionViewOutput) != 0) views.output = take(12);
  if (at != ints.size()) reject(args, fmt::format("{} ints after the views", ints.size() - at));
  return views;
}

// Whether the elements a view of `rows` x `cols` at `offset` with batch strides s0, s1 and row
// stride `row` reads or writes lie in a buffer of `numel` elements.
bool view_fits(const Shape& batch, int64_t rows, int64_t cols, int64_t offset, int64_t s0,
               int64_t s1, int64_t row, int64_t numel) {
  if (offset < 0 || s0 < 0 || s1 < 0 || row < cols || rows < 0 || cols < 0) return false;
  if (batch.numel() == 0 || rows == 0 || cols == 0) return true;
  return offset + (batch[0] - 1) * s0 + (batch[1] - 1) * s1 + (rows - 1) * row + cols <= numel;
}

// Operand i's shape as the kernel reads it (a viewed operand's: batch + [rows, cols]), its
// strides over the batch dims, row stride and first element.
struct Operand {
  Shape shape;
  Problem::Strides strides{};
  int64_t row = 0, base = 0;
  bool viewed = false;
};

Operand read_operand(const KernelArgs& args, const Views& views, std::size_t i,
                     const Shape& batch) {
  const BufferDesc& desc = *args.inputs[i].desc;
  const std::size_t slot = i == 4 ? 3 : i;
  const std::span<const int64_t> view = views.operand[slot];
  Operand o;
  if (view.empty()) {
    if (desc.shape.rank() < 2) reject(args, "q, k, v and the grad need rank >= 2");
    o.shape = desc.shape;
    o.row = desc.shape[desc.shape.rank() - 1];
    return o;
  }
  if (batch.rank() != 2) reject(args, "a viewed operand needs two batch dims");
  if (!view_fits(batch, view[0], view[1], view[2], view[3], view[4], view[5], desc.shape.numel())) {
    reject(args, fmt::format("the view of operand {} reads outside its {} elements", i,
                             desc.shape.numel()));
  }
  o.shape = with_dims(batch, {view[0], view[1]});
  o.strides[0] = view[3];
  o.strides[1] = view[4];
  o.row = view[5];
  o.base = view[2];
  o.viewed = true;
  return o;
}

// The operand's strides over the batch dims of `full` (its view's, or its own broadcast),
// row stride and first element into the problem's fields.
void place(const Operand& o, const Shape& full, Problem::Strides& strides, int64_t& row,
           int64_t& base) {
  strides = o.viewed ? o.strides : broadcast_strides(o.shape, full);
  row = o.row;
  base = o.base;
}

// Checks the operands (q, k, v, then `extra` more, then the mask if ints say so) and works out
// the geometry; `result` (the forward's output, the backward's forward operand) gives the batch.
Problem plan(const KernelArgs& args, std::size_t extra, const Views& views, const Shape& result) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.size() < 2 || args.call.reals.size() != 1) {
    reject(args, "ints must be [is_causal, mask kind (, views...)] and reals [scale]");
  }
  if (ints[1] < 0 || ints[1] > 2)
    reject(args, fmt::format("mask kind {} is not 0, 1 or 2", ints[1]));
  const std::size_t want = 3 + extra + (ints[1] != 0 ? 1 : 0);
  if (args.inputs.size() != want) {
    reject(args, fmt::format("takes {} operands with mask kind {}", want, ints[1]));
  }
  const DType dtype = args.inputs[0].desc->dtype;
  if (args.inputs[1].desc->dtype != dtype || args.inputs[2].desc->dtype != dtype ||
      (dtype != DType::kFloat32 && dtype != DType::kFloat64 && dtype != DType::kBFloat16)) {
    reject(args, "q, k and v must share one dtype: f32, f64 or bf16");
  }
  const DType out = args.output.desc->dtype;
  if (out != dtype && !(dtype == DType::kBFloat16 && out == DType::kFloat32)) {
    reject(args, "the output must have the operands' dtype (or f32 for bf16 operands)");
  }
  if (result.rank() < 2) reject(args, "the output needs rank >= 2");
  Problem p;
  for (int d = 0; d + 2 < result.rank(); ++d) p.batch.push_back(result[d]);
  const Operand q = read_operand(args, views, 0, p.batch);
  const Operand k = read_operand(args, views, 1, p.batch);
  const Operand v = read_operand(args, views, 2, p.batch);
  p.L = q.shape[q.shape.rank() - 2];
  p.E = q.shape[q.shape.rank() - 1];
  p.S = k.shape[k.shape.rank() - 2];
  p.Ev = v.shape[v.shape.rank() - 1];
  if (k.shape[k.shape.rank() - 1] != p.E || v.shape[v.shape.rank() - 2] != p.S) {
    reject(args, "expects q [..., L, E], k [..., S, E] and v [..., S, Ev]");
  }
  const Shape q_full = with_dims(p.batch, {p.L, p.E});
  const Shape k_full = with_dims(p.batch, {p.S, p.E});
  const Shape v_full = with_dims(p.batch, {p.S, p.Ev});
  if (!broadcasts_to(q.shape, q_full) || !broadcasts_to(k.shape, k_full) ||
      !broadcasts_to(v.shape, v_full)) {
    reject(args, "the batch dims of q, k and v do not broadcast to the output's");
  }
  place(q, q_full, p.q_strides, p.q_row, p.q_base);
  place(k, k_full, p.k_strides, p.k_row, p.k_base);
  place(v, v_full, p.v_strides, p.v_row, p.v_base);
  p.causal = ints[0] != 0;
  if (ints[1] != 0) read_mask(args, p);
  p.scale = args.call.reals[0];
  return p;
}

// ---- block products ----------------------------------------------------------------------------
// The blocks are small (64 x 64 scores against a head width of 32 or so): the products read their
// operands where they are (gemm.h's direct_gemm, on the instruction set's registers), keep a tile
// of the output in registers, and add into it directly.

/// c[i, 0:n] (+)= sum over p < depth of a(i, p) * b[p, 0:n] for i < m, with a(i, p) at
/// a[i * a_row + p * a_col] (so a transposed operand is a stride swap) and b, c row-major with
/// row strides ldb, ldc. Every element is one chain of fused multiply-adds over p in order,
/// starting from c's value with `accumulate` and from 0 without, whichever path computes it.
template <class A>
void block_product(int64_t m, int64_t n, int64_t depth, const A* a, int64_t a_row, int64_t a_col,
                   const A* b, int64_t ldb, A* c, int64_t ldc, bool accumulate) {
  if constexpr (std::is_same_v<A, float>) {
    direct_gemm({m, n, depth, a, a_row, a_col, b, ldb, c, ldc, accumulate});
  } else {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        A sum = accumulate ? c[i * ldc + j] : A(0);
        for (int64_t p = 0; p < depth; ++p) {
          sum = std::fma(a[i * a_row + p * a_col], b[p * ldb + j], sum);
        }
        c[i * ldc + j] = sum;
      }
    }
  }
}

// The block products of a block pair on the diagonal (diagonal_halves), each skipping the quarter
// whose probabilities are all 0; with `halves` false, the whole product.
template <class A>
void scores_by_halves(int64_t m, int64_t n, int64_t depth, const A* a, int64_t a_row, int64_t a_col,
                      const A* b, int64_t ldb, A* c, int64_t ldc, bool halves) {
  if (!halves) return block_product<A>(m, n, depth, a, a_row, a_col, b, ldb, c, ldc, false);
  block_product<A>(kHalf, kHalf, depth, a, a_row, a_col, b, ldb, c, ldc, false);
  block_product<A>(kHalf, n, depth, a + kHalf * a_row, a_row, a_col, b, ldb, c + kHalf * ldc, ldc,
                   false);
}

// Rows of queries summing over the keys: the first half of the rows over the first half only.
template <class A>
void queries_by_halves(int64_t m, int64_t n, int64_t depth, const A* a, int64_t a_row,
                       int64_t a_col, const A* b, int64_t ldb, A* c, int64_t ldc, bool halves) {
  if (!halves) return block_product<A>(m, n, depth, a, a_row, a_col, b, ldb, c, ldc, true);
  block_product<A>(kHalf, n, kHalf, a, a_row, a_col, b, ldb, c, ldc, true);
  block_product<A>(kHalf, n, depth, a + kHalf * a_row, a_row, a_col, b, ldb, c + kHalf * ldc, ldc,
                   true);
}

// Rows of keys summing over the queries: the second half of the rows over the second half only.
template <class A>
void keys_by_halves(int64_t m, int64_t n, int64_t depth, const A* a, int64_t a_row, int64_t a_col,
                    const A* b, int64_t ldb, A* c, int64_t ldc, bool halves) {
  if (!halves) return block_product<A>(m, n, depth, a, a_row, a_col, b, ldb, c, ldc, true);
  block_product<A>(kHalf, n, depth, a, a_row, a_col, b, ldb, c, ldc, true);
  block_product<A>(kHalf, n, kHalf, a + kHalf * (a_row + a_col), a_row, a_col, b + kHalf * ldb, ldb,
                   c + kHalf * ldc, ldc, true);
}

// ---- forward -----------------------------------------------------------------------------------

template <class T, class U>
void attention_forward(const KernelArgs& args, const Problem& p) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* q = args.inputs[0].as<T>();
  const T* k = args.inputs[1].as<T>();
  const T* v = args.inputs[2].as<T>();
  U* out = args.output.as<U>();
  const int64_t L = p.L, S = p.S, E = p.E, Ev = p.Ev;
  const int64_t query_blocks = (L + kQueryBlock - 1) / kQueryBlock;
  const int64_t entries = p.batch.numel();
  // Per thread: the widened q, k and v blocks, the scores, the output accumulator, the k block
  // transposed, the running maximum and sum.
  const std::size_t floats = static_cast<std::size_t>(
      kQueryBlock * E + kKeyBlock * E + kKeyBlock * Ev + kQueryBlock * kKeyBlock +
      kQueryBlock * Ev + kKeyBlock * E + 2 * kQueryBlock);
  const bool parallel = entries * L * S * (E + Ev) >= (int64_t{1} << 16);
  ComputePool& pool = args.pool;
  auto part = [&](int64_t index, int thread) {
    const int64_t entry = index / query_blocks;
    const int64_t i0 = (index % query_blocks) * kQueryBlock;
    const int64_t nq = std::min(kQueryBlock, L - i0);
    const Problem::Offsets at = p.offsets(entry);
    A* scratch = static_cast<A*>(pool.scratch(thread, floats * sizeof(A)));
    A* q_block = scratch;
    A* k_block = q_block + kQueryBlock * E;
    A* v_block = k_block + kKeyBlock * E;
    A* s = v_block + kKeyBlock * Ev;
    A* acc = s + kQueryBlock * kKeyBlock;
    A* k_t = acc + kQueryBlock * Ev;
    A* top = k_t + kKeyBlock * E;
    A* total = top + kQueryBlock;
    constexpr A kMinusInf = -std::numeric_limits<A>::infinity();
    std::fill(acc, acc + nq * Ev, A(0));
    std::fill(top, top + nq, kMinusInf);
    std::fill(total, total + nq, A(0));
    const A* qs = scaled_copy<T, A>(q + at.q + i0 * p.q_row, nq, E, p.q_row,
                                    static_cast<A>(p.scale), q_block);
    for (int64_t j0 = 0; j0 < S && !causally_hidden(p, j0, i0 + nq); j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, S - j0);
      const A* ks = as_compute<T, A>(k + at.k + j0 * p.k_row, nk, E, p.k_row, k_block);
      const A* vs = as_compute<T, A>(v + at.v + j0 * p.v_row, nk, Ev, p.v_row, v_block);
      const bool halves = diagonal_halves(p, i0, j0, nq, nk);
      transpose_into(ks, nk, E, E, k_t);
      scores_by_halves<A>(nq, nk, E, qs, E, 1, k_t, nk, s, kKeyBlock, halves);
      mask_scores<T, A>(p, at.mask, i0, nq, j0, nk, s);
      softmax_step(p, i0, j0, s, nq, nk, Ev, top, total, acc);
      queries_by_halves<A>(nq, Ev, nk, s, kKeyBlock, 1, vs, Ev, acc, Ev, halves);
    }
    store_forward_rows(acc, top, total, nq, Ev, out + (entry * L + i0) * (Ev + 1));
  };
  const int64_t parts = entries * query_blocks;
  if (parallel) {
    pool.run(parts, part);
  } else {
    for (int64_t i = 0; i < parts; ++i) part(i, 0);
  }
}

// ---- backward ----------------------------------------------------------------------------------

// Operands [q, k, v, forward output [batch..., L, Ev + 1] of F, grad [batch..., L, Ev] (, mask)];
// the gradients are stored as U.
template <class T, class F, class U>
void attention_backward(const KernelArgs& args, const Problem& p) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* q = args.inputs[0].as<T>();
  const T* k = args.inputs[1].as<T>();
  const T* v = args.inputs[2].as<T>();
  const F* forward = args.inputs[3].as<F>();
  const T* grad = args.inputs[4].as<T>();
  U* out = args.output.as<U>();
  const int64_t L = p.L, S = p.S, E = p.E, Ev = p.Ev;
  const int64_t entries = p.batch.numel();
  // Per thread: q and dO of the entry widened, its D (rowsum dO * O) and logsumexp, the dq
  // accumulator; per key block: k and v widened and transposed, dk and dv accumulators; per
  // block pair: P and dS.
  const std::size_t floats = static_cast<std::size_t>(
      L * E + L * Ev + 2 * L + L * E + 2 * (kKeyBlock * E + kKeyBlock * Ev) + kKeyBlock * E +
      kKeyBlock * Ev + 2 * kQueryBlock * kKeyBlock);
  const bool parallel = entries * L * S * (E + Ev) >= (int64_t{1} << 15);
  ComputePool& pool = args.pool;
  auto part = [&](int64_t entry, int thread) {
    const Problem::Offsets at = p.offsets(entry);
    A* scratch = static_cast<A*>(pool.scratch(thread, floats * sizeof(A)));
    A* q_wide = scratch;
    A* g_wide = q_wide + L * E;
    A* d = g_wide + L * Ev;
    A* lse = d + L;
    A* dq = lse + L;
    A* k_block = dq + L * E;
    A* v_block = k_block + kKeyBlock * E;
    A* dk = v_block + kKeyBlock * Ev;
    A* dv = dk + kKeyBlock * E;
    A* prob = dv + kKeyBlock * Ev;
    A* ds = prob + kQueryBlock * kKeyBlock;
    A* k_t = ds + kQueryBlock * kKeyBlock;
    A* v_t = k_t + kKeyBlock * E;
    const A scale = static_cast<A>(p.scale);
    // With q scaled, the scores are q k^T and dk is dS^T q without a further factor.
    const A* qs = scaled_copy<T, A>(q + at.q, L, E, p.q_row, scale, q_wide);
    const A* gs = as_compute<T, A>(grad + at.g, L, Ev, p.g_row, g_wide);
    read_row_terms<F, A>(forward + entry * L * (Ev + 1), gs, L, Ev, d, lse);
    std::fill(dq, dq + L * E, A(0));
    for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, S - j0);
      const A* ks = as_compute<T, A>(k + at.k + j0 * p.k_row, nk, E, p.k_row, k_block);
      const A* vs = as_compute<T, A>(v + at.v + j0 * p.v_row, nk, Ev, p.v_row, v_block);
      transpose_into(ks, nk, E, E, k_t);
      transpose_into(vs, nk, Ev, Ev, v_t);
      std::fill(dk, dk + nk * E, A(0));
      std::fill(dv, dv + nk * Ev, A(0));
      for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
        const int64_t nq = std::min(kQueryBlock, L - i0);
        if (causally_hidden(p, j0, i0 + nq)) continue;
        const A* qi = qs + i0 * E;
        const A* gi = gs + i0 * Ev;
        const bool halves = backward_halves(p, i0, j0, nq, nk, lse);
        // P = exp(scores - logsumexp): 0 where dropped, NaN in a row that keeps no key.
        scores_by_halves<A>(nq, nk, E, qi, E, 1, k_t, nk, prob, kKeyBlock, halves);
        mask_scores<T, A>(p, at.mask, i0, nq, j0, nk, prob);
        exp_block<A>(p, i0, j0, prob, nq, nk, lse + i0, nullptr);
        // dv += P^T dO.
        keys_by_halves<A>(nk, Ev, nq, prob, 1, kKeyBlock, gi, Ev, dv, Ev, halves);
        // dS = P * (dO v^T - D). On the diagonal the quarter the products skip is never read.
        scores_by_halves<A>(nq, nk, Ev, gi, Ev, 1, v_t, nk, ds, kKeyBlock, halves);
        scores_gradient<A>(prob, d + i0, nq, nk, ds);
        // dq += dS k (scaled once at the end), dk += dS^T (scale q).
        queries_by_halves<A>(nq, E, nk, ds, kKeyBlock, 1, ks, E, dq + i0 * E, E, halves);
        keys_by_halves<A>(nk, E, nq, ds, 1, kKeyBlock, qi, E, dk, E, halves);
      }
      store_rows<U, A>(dk, nk, E, A(1), p.grads[1], out + at.grads[1] + j0 * p.grads[1].row);
      store_rows<U, A>(dv, nk, Ev, A(1), p.grads[2], out + at.grads[2] + j0 * p.grads[2].row);
    }
    store_rows<U, A>(dq, L, E, scale, p.grads[0], out + at.grads[0]);
  };
  if (parallel) {
    pool.run(entries, part);
  } else {
    for (int64_t i = 0; i < entries; ++i) part(i, 0);
  }
}

// Calls f<T, U>() for the operands' storage type T and the output's U.
template <template <class, class> class F>
void dispatch(const KernelArgs& args, const Problem& p) {
  const DType in = args.inputs[0].desc->dtype, out = args.output.desc->dtype;
  if (in == DType::kFloat32) return F<float, float>::run(args, p);
  if (in == DType::kFloat64) return F<double, double>::run(args, p);
  if (out == DType::kFloat32) return F<Bf16, float>::run(args, p);
  return F<Bf16, Bf16>::run(args, p);
}

// bf16 operands take their products as bf16 pairs where the processor has vdpbf16ps.
template <class T, class U>
struct Forward {
  static void run(const KernelArgs& args, const Problem& p) {
    if constexpr (std::is_same_v<T, Bf16>) {
      if (takes_bf16_pairs(p)) return pair_attention_forward<U>(args, p);
    }
    attention_forward<T, U>(args, p);
  }
};
// The backward's forward operand is of F; with bf16 operands it may be f32 (the logsumexp kept
// in f32) while the gradients are bf16, each rounded once from its f32 sum.
template <class T, class F, class U>
void backward(const KernelArgs& args, const Problem& p) {
  if constexpr (std::is_same_v<T, Bf16>) {
    if (takes_bf16_pairs(p)) return pair_attention_backward<F, U>(args, p);
  }
  attention_backward<T, F, U>(args, p);
}

void dispatch_backward(const KernelArgs& args, const Problem& p) {
  const DType in = args.inputs[0].desc->dtype, forward = args.inputs[3].desc->dtype;
  const DType out = args.output.desc->dtype;
  if (in == DType::kFloat32) return backward<float, float, float>(args, p);
  if (in == DType::kFloat64) return backward<double, double, double>(args, p);
  if (forward == DType::kBFloat16) return backward<Bf16, Bf16, Bf16>(args, p);
  if (out == DType::kFloat32) return backward<Bf16, float, float>(args, p);
  return backward<Bf16, float, Bf16>(args, p);
}

void attention_kernel(const KernelArgs& args) {
  const Views views = read_views(args, false);
  const Problem p = plan(args, 0, views, args.output.desc->shape);
  if (!(args.output.desc->shape == with_dims(p.batch, {p.L, p.Ev + 1}))) {
    reject(args, "the output must be [batch..., L, Ev + 1]");
  }
  dispatch<Forward>(args, p);
}

// Where the backward writes dq, dk and dv: rows of the output [batch..., L + 2 S, W] padded to
// W, or where the output view places them.
void place_gradients(const KernelArgs& args, const Views& views, Problem& p) {
  const int64_t W = std::max(p.E, p.Ev);
  if (views.output.empty()) {
    const Shape full = with_dims(p.batch, {p.L + 2 * p.S, W});
    if (!(args.output.desc->shape == full)) {
      reject(args, "the output must be [batch..., L + 2 S, max(E, Ev)]");
    }
    const Problem::Strides strides = broadcast_strides(full, full);
    const int64_t bases[3] = {0, p.L * W, (p.L + p.S) * W};
    for (std::size_t b = 0; b < 3; ++b) p.grads[b] = {bases[b], W, W, strides};
    return;
  }
  const int64_t rows[3] = {p.L, p.S, p.S}, cols[3] = {p.E, p.E, p.Ev};
  for (std::size_t b = 0; b < 3; ++b) {
    const std::span<const int64_t> at = views.output.subspan(4 * b, 4);
    if (p.batch.rank() != 2 || !view_fits(p.batch, rows[b], cols[b], at[0], at[1], at[2], at[3],
                                          args.output.desc->shape.numel())) {
      reject(args, fmt::format("the output view of gradient {} writes outside its {} elements", b,
                               args.output.desc->shape.numel()));
    }
    p.grads[b] = {at[0], at[3], cols[b], {at[1], at[2]}};
  }
}

void attention_backward_kernel(const KernelArgs& args) {
  const Views views = read_views(args, true);
  if (args.inputs.size() < 5) reject(args, "takes q, k, v, the forward output and the grad");
  const BufferDesc& forward = *args.inputs[3].desc;
  Problem p = plan(args, 2, views, forward.shape);
  place_gradients(args, views, p);
  const bool f32_forward_bf16_out = args.inputs[0].desc->dtype == DType::kBFloat16 &&
                                    forward.dtype == DType::kFloat32 &&
                                    args.output.desc->dtype == DType::kBFloat16;
  if ((forward.dtype != args.output.desc->dtype && !f32_forward_bf16_out) ||
      !(forward.shape == with_dims(p.batch, {p.L, p.Ev + 1}))) {
    reject(args,
           "the forward output must be [batch..., L, Ev + 1] of the output's dtype (or f32 with "
           "bf16 operands)");
  }
  const Operand grad = read_operand(args, views, 4, p.batch);
  if (args.inputs[4].desc->dtype != args.inputs[0].desc->dtype ||
      !(grad.shape == with_dims(p.batch, {p.L, p.Ev}))) {
    reject(args, "the grad must be [batch..., L, Ev] of q's dtype");
  }
  place(grad, grad.shape, p.g_strides, p.g_row, p.g_base);
  dispatch_backward(args, p);
}

}  // namespace

void register_attention_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kScaledDotProductAttention, attention_kernel);
  set_kernel(table, Kernel::kScaledDotProductAttentionBackward, attention_backward_kernel);
}

}  // namespace axle::cpu
