// backends/cpu: kScaledDotProductAttention and its backward, flash-attention style. The forward
// takes one block of queries at a time against one block of keys at a time: the block's scores
// (a product), their softmax kept online (running maximum and sum per query, the output rescaled
// when the maximum grows), and the value product added in; it keeps each query's
// logsumexp. The backward recomputes each block's probabilities from q, k and that logsumexp and
// forms dq, dk and dv with four products per block pair. The block products read their operands
// in place (gemm.h's direct_gemm), not through a packing GEMM. No more than one block of scores
// exists per thread. bf16 operands are widened block by block and computed in f32.
//
// Work splits over batch entries × query blocks (forward) and batch entries (backward), each
// part computed by one thread in a fixed order, so results do not depend on the thread count.
#include <fmt/format.h>

#include <Eigen/Core>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/gemm.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/vector_math.h"

namespace axle::cpu {
namespace {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 64;

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

// One call's geometry: sizes, the batch, and each operand's element strides over the batch
// dims (0 where it broadcasts).
struct Problem {
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  Shape batch;
  std::array<int64_t, Shape::kMaxRank> q_strides{}, k_strides{}, v_strides{}, mask_strides{};
  int64_t mask_row = 0, mask_col = 0;  // the mask's strides along L and S
  const void* mask = nullptr;
  bool bool_mask = false, causal = false;
  double scale = 1;

  // Element offsets of batch entry `entry` (row-major over `batch`) in q, k, v and the mask.
  struct Offsets {
    int64_t q = 0, k = 0, v = 0, mask = 0;
  };
  [[nodiscard]] Offsets offsets(int64_t entry) const noexcept {
    Offsets o;
    for (int d = batch.rank() - 1; d >= 0; --d) {
      const int64_t i = entry % batch[d];
      entry /= batch[d];
      o.q += i * q_strides[d];
      o.k += i * k_strides[d];
      o.v += i * v_strides[d];
      o.mask += i * mask_strides[d];
    }
    return o;
  }
};

Shape with_dims(Shape shape, std::initializer_list<int64_t> dims) {
  for (int64_t d : dims) shape.push_back(d);
  return shape;
}

// Checks the operands (q, k, v, then `extra` more, then the mask if ints say so) and works out
// the geometry; the output shape gives the batch.
Problem plan(const KernelArgs& args, std::size_t extra) {
  const std::vector<int64_t>& ints = args.call.ints;
  if (ints.size() != 2 || args.call.reals.size() != 1) {
    reject(args, "ints must be [is_causal, mask kind] and reals [scale]");
  }
  if (ints[1] < 0 || ints[1] > 2)
    reject(args, fmt::format("mask kind {} is not 0, 1 or 2", ints[1]));
  const std::size_t want = 3 + extra + (ints[1] != 0 ? 1 : 0);
  if (args.inputs.size() != want) {
    reject(args, fmt::format("takes {} operands with mask kind {}", want, ints[1]));
  }
  const BufferDesc& q = *args.inputs[0].desc;
  const BufferDesc& k = *args.inputs[1].desc;
  const BufferDesc& v = *args.inputs[2].desc;
  if (q.dtype != k.dtype || q.dtype != v.dtype ||
      (q.dtype != DType::kFloat32 && q.dtype != DType::kFloat64 && q.dtype != DType::kBFloat16)) {
    reject(args, "q, k and v must share one dtype: f32, f64 or bf16");
  }
  const DType out = args.output.desc->dtype;
  if (out != q.dtype && !(q.dtype == DType::kBFloat16 && out == DType::kFloat32)) {
    reject(args, "the output must have the operands' dtype (or f32 for bf16 operands)");
  }
  if (q.shape.rank() < 2 || k.shape.rank() < 2 || v.shape.rank() < 2 ||
      args.output.desc->shape.rank() < 1) {
    reject(args, "q, k and v need rank >= 2");
  }
  Problem p;
  p.L = q.shape[q.shape.rank() - 2];
  p.E = q.shape[q.shape.rank() - 1];
  p.S = k.shape[k.shape.rank() - 2];
  p.Ev = v.shape[v.shape.rank() - 1];
  if (k.shape[k.shape.rank() - 1] != p.E || v.shape[v.shape.rank() - 2] != p.S) {
    reject(args, "expects q [..., L, E], k [..., S, E] and v [..., S, Ev]");
  }
  const Shape& result = args.output.desc->shape;
  for (int d = 0; d + 2 < result.rank(); ++d) p.batch.push_back(result[d]);
  const Shape q_full = with_dims(p.batch, {p.L, p.E});
  const Shape k_full = with_dims(p.batch, {p.S, p.E});
  const Shape v_full = with_dims(p.batch, {p.S, p.Ev});
  if (!broadcasts_to(q.shape, q_full) || !broadcasts_to(k.shape, k_full) ||
      !broadcasts_to(v.shape, v_full)) {
    reject(args, "the batch dims of q, k and v do not broadcast to the output's");
  }
  p.q_strides = broadcast_strides(q.shape, q_full);
  p.k_strides = broadcast_strides(k.shape, k_full);
  p.v_strides = broadcast_strides(v.shape, v_full);
  p.causal = ints[0] != 0;
  if (ints[1] != 0) {
    const ConstView& mask = args.inputs.back();
    p.bool_mask = ints[1] == 1;
    if (mask.desc->dtype != (p.bool_mask ? DType::kBool : q.dtype)) {
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
  p.scale = args.call.reals[0];
  return p;
}

// rows x cols elements of T at `src` (row stride `stride`) as contiguous A: the buffer itself
// when it already is, else widened into `scratch`.
template <class T, class A>
const A* as_compute(const T* src, int64_t rows, int64_t cols, A* scratch) {
  if constexpr (std::is_same_v<T, A>) {
    (void)rows, (void)cols, (void)scratch;
    return src;
  } else {
    widen_block(src, scratch, rows * cols);
    return scratch;
  }
}

// dst[i] = src[i] * factor for i < n, stored as U. Fixed-count chunks with unaliased operands:
// the form GCC vectorises at -O2.
template <class U, class A>
void scale_into(const A* __restrict__ src, int64_t n, A factor, U* __restrict__ dst) {
  constexpr int64_t kChunk = 16;
  int64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (int64_t j = 0; j < kChunk; ++j) dst[i + j] = store<U>(src[i + j] * factor);
  }
  for (; i < n; ++i) dst[i] = store<U>(src[i] * factor);
}

// rows x cols elements of T at `src` widened and multiplied by `scale` into `dst`: the softmax
// scale is folded into q once, instead of into every score.
template <class T, class A>
const A* scaled_copy(const T* src, int64_t rows, int64_t cols, A scale, A* dst) {
  const int64_t n = rows * cols;
  if constexpr (std::is_same_v<T, A>) {
    scale_into(src, n, scale, dst);
  } else {
    widen_block(src, dst, n);
    for (int64_t i = 0; i < n; ++i) dst[i] *= scale;
  }
  return dst;
}

// rows x cols of `src` times `factor` into rows of `width` at `dst`, the rest of each row 0.
template <class U, class A>
void store_rows(const A* src, int64_t rows, int64_t cols, A factor, int64_t width, U* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    scale_into(src + r * cols, cols, factor, dst + r * width);
    for (int64_t c = cols; c < width; ++c) dst[r * width + c] = store<U>(A(0));
  }
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

#if defined(__AVX2__)
// An 8 x 8 block of floats (row stride ld) transposed into dst (row stride ldd).
void transpose_eight(const float* src, int64_t ld, float* dst, int64_t ldd) {
  __m256 r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ld);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
}
#endif

/// rows x cols of row-major `src` (row stride ld) transposed into `dst` [cols, rows].
template <class A>
void transpose_into(const A* src, int64_t rows, int64_t cols, int64_t ld, A* dst) {
  int64_t r0 = 0, c0 = 0;
#if defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {  // whole 8 x 8 blocks on vectors, the edges below
    for (r0 = 0; r0 + 8 <= rows; r0 += 8) {
      for (c0 = 0; c0 + 8 <= cols; c0 += 8) {
        transpose_eight(src + r0 * ld + c0, ld, dst + c0 * rows + r0, rows);
      }
      for (int64_t r = r0; r < r0 + 8; ++r) {
        for (int64_t c = c0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
      }
    }
  }
#endif
  for (int64_t r = r0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * ld + c];
  }
}

template <class A>
using ArrayMap = Eigen::Map<Eigen::Array<A, Eigen::Dynamic, 1>>;
template <class A>
using ConstArrayMap = Eigen::Map<const Eigen::Array<A, Eigen::Dynamic, 1>>;

/// Row r of `rows` rows of n values (row stride ld): x = exp(x - shifts[r]), its sum into sums[r]
/// when sums is not null (vector_math.h for float).
template <class A>
void exp_rows(A* x, int64_t rows, int64_t n, int64_t ld, const A* shifts, A* sums) {
  if constexpr (std::is_same_v<A, float>) {
    exp_shifted_rows(x, rows, n, ld, shifts, sums);
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      ArrayMap<A> row(x + r * ld, n);
      row = (row - shifts[r]).exp();
      if (sums) sums[r] = row.sum();
    }
  }
}

// Scores (already scaled) of queries [i0, i0 + nq) against keys [j0, j0 + nk) in s (row
// stride kKeyBlock) masked: -inf where dropped, an added mask added.
template <class T, class A>
void mask_scores(const Problem& p, int64_t mask_base, int64_t i0, int64_t nq, int64_t j0,
                 int64_t nk, A* s) {
  constexpr A kMinusInf = -std::numeric_limits<A>::infinity();
  if (!p.mask && (!p.causal || j0 + nk <= i0 + 1)) return;  // nothing dropped in this block
  for (int64_t i = 0; i < nq; ++i) {
    A* row = s + i * kKeyBlock;
    if (p.causal) {
      for (int64_t j = std::max<int64_t>(0, i0 + i + 1 - j0); j < nk; ++j) row[j] = kMinusInf;
    }
    if (p.mask) {
      const int64_t at = mask_base + (i0 + i) * p.mask_row + j0 * p.mask_col;
      if (p.bool_mask) {
        const bool* keep = static_cast<const bool*>(p.mask) + at;
        for (int64_t j = 0; j < nk; ++j) {
          if (!keep[j * p.mask_col]) row[j] = kMinusInf;
        }
      } else {
        const T* added = static_cast<const T*>(p.mask) + at;
        for (int64_t j = 0; j < nk; ++j) row[j] += static_cast<A>(load(added[j * p.mask_col]));
      }
    }
  }
}

// Whether causal masking drops every key of [j0, ...) for queries before i_end.
bool causally_hidden(const Problem& p, int64_t j0, int64_t i_end) {
  return p.causal && j0 >= i_end;
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
    const A* qs = scaled_copy<T, A>(q + at.q + i0 * E, nq, E, static_cast<A>(p.scale), q_block);
    for (int64_t j0 = 0; j0 < S && !causally_hidden(p, j0, i0 + nq); j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, S - j0);
      const A* ks = as_compute<T, A>(k + at.k + j0 * E, nk, E, k_block);
      const A* vs = as_compute<T, A>(v + at.v + j0 * Ev, nk, Ev, v_block);
      transpose_into(ks, nk, E, E, k_t);
      block_product<A>(nq, nk, E, qs, E, 1, k_t, nk, s, kKeyBlock, false);
      mask_scores<T, A>(p, at.mask, i0, nq, j0, nk, s);
      A new_top[kQueryBlock], sum[kQueryBlock];
      for (int64_t i = 0; i < nq; ++i) {
        new_top[i] = std::max(top[i], ArrayMap<A>(s + i * kKeyBlock, nk).maxCoeff());
      }
      exp_rows(s, nq, nk, kKeyBlock, new_top, sum);
      for (int64_t i = 0; i < nq; ++i) {
        if (new_top[i] == kMinusInf) {  // every key so far dropped: nothing to add yet
          ArrayMap<A>(s + i * kKeyBlock, nk).setZero();
          continue;
        }
        const A rescale = std::exp(top[i] - new_top[i]);  // 0 when top was -inf
        total[i] = total[i] * rescale + sum[i];
        top[i] = new_top[i];
        if (rescale != A(1)) ArrayMap<A>(acc + i * Ev, Ev) *= rescale;
      }
      block_product<A>(nq, Ev, nk, s, kKeyBlock, 1, vs, Ev, acc, Ev, true);
    }
    U* o = out + (entry * L + i0) * (Ev + 1);
    constexpr A kNan = std::numeric_limits<A>::quiet_NaN();
    for (int64_t i = 0; i < nq; ++i) {
      // A query that keeps no key: NaN, as softmax over only -inf gives in torch's math path.
      const bool none = total[i] == A(0);
      const A inverse = none ? kNan : A(1) / total[i];
      for (int64_t c = 0; c < Ev; ++c) o[i * (Ev + 1) + c] = store<U>(acc[i * Ev + c] * inverse);
      o[i * (Ev + 1) + Ev] = store<U>(none ? kMinusInf : top[i] + std::log(total[i]));
    }
  };
  const int64_t parts = entries * query_blocks;
  if (parallel) {
    pool.run(parts, part);
  } else {
    for (int64_t i = 0; i < parts; ++i) part(i, 0);
  }
}

// ---- backward ----------------------------------------------------------------------------------

// Per query row of one entry: D = rowsum(dO * O) and the logsumexp the forward kept, read from
// the forward's output rows [O (Ev), logsumexp].
template <class U, class A>
void read_row_terms(const U* forward, const A* grad, int64_t L, int64_t Ev, A* d, A* lse) {
  for (int64_t i = 0; i < L; ++i) {
    A dot = 0;
    for (int64_t c = 0; c < Ev; ++c) {
      dot += grad[i * Ev + c] * static_cast<A>(load(forward[i * (Ev + 1) + c]));
    }
    d[i] = dot;
    lse[i] = static_cast<A>(load(forward[i * (Ev + 1) + Ev]));
  }
}

// dS = P * (dO v^T - D), row by row over a block pair: `ds` holds dO v^T on entry.
template <class A>
void scores_gradient(const A* prob, const A* d, int64_t nq, int64_t nk, A* ds) {
  for (int64_t i = 0; i < nq; ++i) {
    ArrayMap<A> row(ds + i * kKeyBlock, nk);
    row = ConstArrayMap<A>(prob + i * kKeyBlock, nk) * (row - d[i]);
  }
}

// Operands [q, k, v, forward output [batch..., L, Ev + 1], grad [batch..., L, Ev] (, mask)].
template <class T, class U>
void attention_backward(const KernelArgs& args, const Problem& p) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const T* q = args.inputs[0].as<T>();
  const T* k = args.inputs[1].as<T>();
  const T* v = args.inputs[2].as<T>();
  const U* forward = args.inputs[3].as<U>();
  const T* grad = args.inputs[4].as<T>();
  U* out = args.output.as<U>();
  const int64_t L = p.L, S = p.S, E = p.E, Ev = p.Ev;
  const int64_t entries = p.batch.numel();
  // Per entry [L + 2S, W]: dq's rows, dk's, then dv's, each row padded with zeros to W.
  const int64_t W = std::max(E, Ev);
  const int64_t per_entry = (L + 2 * S) * W;
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
    const A* qs = scaled_copy<T, A>(q + at.q, L, E, scale, q_wide);
    const A* gs = as_compute<T, A>(grad + entry * L * Ev, L, Ev, g_wide);
    read_row_terms<U, A>(forward + entry * L * (Ev + 1), gs, L, Ev, d, lse);
    std::fill(dq, dq + L * E, A(0));
    U* grads = out + entry * per_entry;
    for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, S - j0);
      const A* ks = as_compute<T, A>(k + at.k + j0 * E, nk, E, k_block);
      const A* vs = as_compute<T, A>(v + at.v + j0 * Ev, nk, Ev, v_block);
      transpose_into(ks, nk, E, E, k_t);
      transpose_into(vs, nk, Ev, Ev, v_t);
      std::fill(dk, dk + nk * E, A(0));
      std::fill(dv, dv + nk * Ev, A(0));
      for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
        const int64_t nq = std::min(kQueryBlock, L - i0);
        if (causally_hidden(p, j0, i0 + nq)) continue;
        const A* qi = qs + i0 * E;
        const A* gi = gs + i0 * Ev;
        // P = exp(scores - logsumexp): 0 where dropped, NaN in a row that keeps no key.
        block_product<A>(nq, nk, E, qi, E, 1, k_t, nk, prob, kKeyBlock, false);
        mask_scores<T, A>(p, at.mask, i0, nq, j0, nk, prob);
        exp_rows<A>(prob, nq, nk, kKeyBlock, lse + i0, nullptr);
        // dv += P^T dO.
        block_product<A>(nk, Ev, nq, prob, 1, kKeyBlock, gi, Ev, dv, Ev, true);
        // dS = P * (dO v^T - D).
        block_product<A>(nq, nk, Ev, gi, Ev, 1, v_t, nk, ds, kKeyBlock, false);
        scores_gradient<A>(prob, d + i0, nq, nk, ds);
        // dq += dS k (scaled once at the end), dk += dS^T (scale q).
        block_product<A>(nq, E, nk, ds, kKeyBlock, 1, ks, E, dq + i0 * E, E, true);
        block_product<A>(nk, E, nq, ds, 1, kKeyBlock, qi, E, dk, E, true);
      }
      store_rows<U, A>(dk, nk, E, A(1), W, grads + (L + j0) * W);
      store_rows<U, A>(dv, nk, Ev, A(1), W, grads + (L + S + j0) * W);
    }
    store_rows<U, A>(dq, L, E, scale, W, grads);
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

template <class T, class U>
struct Forward {
  static void run(const KernelArgs& args, const Problem& p) { attention_forward<T, U>(args, p); }
};
template <class T, class U>
struct Backward {
  static void run(const KernelArgs& args, const Problem& p) { attention_backward<T, U>(args, p); }
};

void attention_kernel(const KernelArgs& args) {
  const Problem p = plan(args, 0);
  if (!(args.output.desc->shape == with_dims(p.batch, {p.L, p.Ev + 1}))) {
    reject(args, "the output must be [batch..., L, Ev + 1]");
  }
  dispatch<Forward>(args, p);
}

void attention_backward_kernel(const KernelArgs& args) {
  const Problem p = plan(args, 2);
  if (!(args.output.desc->shape == with_dims(p.batch, {p.L + 2 * p.S, std::max(p.E, p.Ev)}))) {
    reject(args, "the output must be [batch..., L + 2 S, max(E, Ev)]");
  }
  const BufferDesc& forward = *args.inputs[3].desc;
  const BufferDesc& grad = *args.inputs[4].desc;
  if (forward.dtype != args.output.desc->dtype ||
      !(forward.shape == with_dims(p.batch, {p.L, p.Ev + 1}))) {
    reject(args, "the forward output must be [batch..., L, Ev + 1] of the output's dtype");
  }
  if (grad.dtype != args.inputs[0].desc->dtype ||
      !(grad.shape == with_dims(p.batch, {p.L, p.Ev}))) {
    reject(args, "the grad must be [batch..., L, Ev] of q's dtype");
  }
  dispatch<Backward>(args, p);
}

}  // namespace

void register_attention_kernels(KernelTable& table) {
  set_kernel(table, Kernel::kScaledDotProductAttention, attention_kernel);
  set_kernel(table, Kernel::kScaledDotProductAttentionBackward, attention_backward_kernel);
}

}  // namespace axle::cpu
