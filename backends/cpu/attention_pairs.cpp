// backends/cpu: attention with bf16 operands on vdpbf16ps (bf16_pairs.h), as attention.cpp's
// kernels are otherwise: the same blocks, online softmax and recomputed probabilities, with every
// block product taking bf16 pairs summed in f32. The products' operands are laid out as pairs
// along their sums: q, k and v rows are pairs already (even head widths); the probabilities and
// their gradients are rounded to bf16, as torch's bf16 attention rounds them before its value
// and gradient products; transposed operands are transposed a word (a pair) at a time. The
// softmax scale multiplies the scores rather than q (q stays exact). Sums run in a fixed order
// within each part, so results do not depend on the thread count; they differ from the f32
// path's by the roundings to bf16.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "axle/backends/cpu/attention_blocks.h"
#include "axle/backends/cpu/bf16_pairs.h"
#include "axle/backends/cpu/compute_pool.h"
#include "axle/backends/cpu/isa.h"

namespace axle::cpu::attention_detail {

#if defined(AXLE_HAVE_AVX512_KERNELS) && defined(__AVX2__)

bool takes_bf16_pairs(const Problem& p) {
  // Every row of q, k, v and the grad starts on a word (a pair): even widths, row strides,
  // first elements and batch strides.
  const int64_t rows[] = {p.E,     p.Ev,     p.q_row,  p.k_row,  p.v_row,
                          p.g_row, p.q_base, p.k_base, p.v_base, p.g_base};
  bool even = std::all_of(std::begin(rows), std::end(rows), [](int64_t n) { return n % 2 == 0; });
  for (const Problem::Strides* strides : {&p.q_strides, &p.k_strides, &p.v_strides, &p.g_strides}) {
    even = even && std::all_of(strides->begin(), strides->begin() + p.batch.rank(),
                               [](int64_t n) { return n % 2 == 0; });
  }
  return cpu_isa() >= CpuIsa::kAvx512Bf16 && even;
}

namespace {

// bf16 values as their words of pairs (rows of even width start on a word).
const uint32_t* words(const Bf16* at) { return reinterpret_cast<const uint32_t*>(at); }
const uint32_t* words(const uint16_t* at) { return reinterpret_cast<const uint32_t*>(at); }
const uint16_t* bits(const Bf16* at) { return &at->bits; }

// rows x cols words at `src` (row stride ld) transposed into `dst` [cols, rows]: whole 8 x 8
// blocks on vectors (moves only: the bits stay), the edges one word at a time.
void transpose_words(const void* src, int64_t rows, int64_t cols, int64_t ld, uint32_t* dst) {
  const auto* from = static_cast<const char*>(src);
  auto word = [&](int64_t r, int64_t c) {
    uint32_t w;
    std::memcpy(&w, from + 4 * (r * ld + c), sizeof w);
    return w;
  };
  int64_t r0 = 0;
  for (; r0 + 8 <= rows; r0 += 8) {
    int64_t c0 = 0;
    for (; c0 + 8 <= cols; c0 += 8) {
      transpose_eight(reinterpret_cast<const float*>(from + 4 * (r0 * ld + c0)), ld,
                      reinterpret_cast<float*>(dst + c0 * rows + r0), rows);
    }
    for (int64_t r = r0; r < r0 + 8; ++r) {
      for (int64_t c = c0; c < cols; ++c) dst[c * rows + r] = word(r, c);
    }
  }
  for (int64_t r = r0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) dst[c * rows + r] = word(r, c);
  }
}

// x[r, 0:n] *= factor for r < rows. Fixed-count chunks: the form GCC vectorises at -O2 (the
// plain loop stayed scalar, 6% of a call).
void scale_rows(float* x, int64_t rows, int64_t n, int64_t ld, float factor) {
  constexpr int64_t kChunk = 16;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x + r * ld;
    int64_t j = 0;
    for (; j + kChunk <= n; j += kChunk) {
      for (int64_t t = 0; t < kChunk; ++t) row[j + t] *= factor;
    }
    for (; j < n; ++j) row[j] *= factor;
  }
}

// Scratch carved into consecutive regions of 4-byte elements.
class Carve {
 public:
  explicit Carve(void* base) : at_(static_cast<uint32_t*>(base)) {}
  template <class T>
  T* take(int64_t count) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 2);
    T* region = reinterpret_cast<T*>(at_);
    at_ += (count * static_cast<int64_t>(sizeof(T)) + 3) / 4;
    return region;
  }

 private:
  uint32_t* at_;
};

// A block pair's product on the diagonal (diagonal_halves): the scores' first half of rows
// against the first half of the keys only.
void scores_by_halves(PairProduct q, bool halves) {
  if (!halves) return avx512_pair_gemm(q);
  avx512_pair_gemm({kHalf, kHalf, q.pairs, q.a, q.lda, q.b, q.ldb, q.c, q.ldc, q.accumulate});
  avx512_pair_gemm({kHalf, q.n, q.pairs, q.a + kHalf * q.lda, q.lda, q.b, q.ldb,
                    q.c + kHalf * q.ldc, q.ldc, q.accumulate});
}

// A product summing over the keys (the depth, in pairs) for rows of queries: the first half of
// the rows sums over the first half of the keys only.
void queries_by_halves(PairProduct q, bool halves) {
  if (!halves) return avx512_pair_gemm(q);
  avx512_pair_gemm({kHalf, q.n, kHalf / 2, q.a, q.lda, q.b, q.ldb, q.c, q.ldc, q.accumulate});
  avx512_pair_gemm({kHalf, q.n, q.pairs, q.a + kHalf * q.lda, q.lda, q.b, q.ldb,
                    q.c + kHalf * q.ldc, q.ldc, q.accumulate});
}

}  // namespace

template <class U>
void pair_attention_forward(const KernelArgs& args, const Problem& p) {
  const Bf16* q = args.inputs[0].as<Bf16>();
  const Bf16* k = args.inputs[1].as<Bf16>();
  const Bf16* v = args.inputs[2].as<Bf16>();
  U* out = args.output.as<U>();
  const int64_t L = p.L, S = p.S, E = p.E, Ev = p.Ev, Eh = E / 2;
  const int64_t query_blocks = (L + kQueryBlock - 1) / kQueryBlock;
  const int64_t entries = p.batch.numel();
  // Per thread, in 4-byte words: k's block transposed, v's block paired, the scores and their
  // bf16, the output accumulator, the running maximum and sum.
  const int64_t scratch_words = Eh * kKeyBlock + kKeyBlock / 2 * Ev + kQueryBlock * kKeyBlock +
                                kQueryBlock * kKeyBlock / 2 + kQueryBlock * Ev + 2 * kQueryBlock;
  const bool parallel = entries * L * S * (E + Ev) >= (int64_t{1} << 16);
  ComputePool& pool = args.pool;
  auto part = [&](int64_t index, int thread) {
    const int64_t entry = index / query_blocks;
    const int64_t i0 = (index % query_blocks) * kQueryBlock;
    const int64_t nq = std::min(kQueryBlock, L - i0);
    const Problem::Offsets at = p.offsets(entry);
    prefetch_forward_part(p, q, k, v, index + pool.threads(), query_blocks);
    Carve carve(pool.scratch(thread, static_cast<std::size_t>(scratch_words) * 4));
    uint32_t* k_pairs = carve.take<uint32_t>(Eh * kKeyBlock);
    uint32_t* v_pairs = carve.take<uint32_t>(kKeyBlock / 2 * Ev);
    float* s = carve.take<float>(kQueryBlock * kKeyBlock);
    uint16_t* p16 = carve.take<uint16_t>(kQueryBlock * kKeyBlock);
    float* acc = carve.take<float>(kQueryBlock * Ev);
    float* top = carve.take<float>(kQueryBlock);
    float* total = carve.take<float>(kQueryBlock);
    std::fill(acc, acc + nq * Ev, 0.0f);
    std::fill(top, top + nq, -std::numeric_limits<float>::infinity());
    std::fill(total, total + nq, 0.0f);
    const uint32_t* q_words = words(q + at.q + i0 * p.q_row);
    const auto scale = static_cast<float>(p.scale);
    for (int64_t j0 = 0; j0 < S && !causally_hidden(p, j0, i0 + nq); j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, S - j0), nk_pairs = (nk + 1) / 2;
      const bool halves = diagonal_halves(p, i0, j0, nq, nk);
      transpose_words(k + at.k + j0 * p.k_row, nk, Eh, p.k_row / 2, k_pairs);
      scores_by_halves({nq, nk, Eh, q_words, p.q_row / 2, k_pairs, nk, s, kKeyBlock, false},
                       halves);
      scale_rows(s, nq, nk, kKeyBlock, scale);
      mask_scores<Bf16, float>(p, at.mask, i0, nq, j0, nk, s);
      softmax_step(p, i0, j0, s, nq, nk, Ev, top, total, acc);
      avx512_narrow_rows(s, nq, nk, kKeyBlock, p16, 2 * nk_pairs);
      avx512_pair_rows(bits(v + at.v + j0 * p.v_row), nk, Ev, p.v_row, v_pairs, Ev);
      queries_by_halves({nq, Ev, nk_pairs, words(p16), nk_pairs, v_pairs, Ev, acc, Ev, true},
                        halves);
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

namespace {

// The backward's per-thread scratch: per entry q and dO paired along the queries, dO widened, D
// and the logsumexp, the dq accumulator; per key block k^T, v^T, k's rows paired, the dk and dv
// accumulators; per block pair P, dS, their pairs and dS's bf16.
struct BackwardScratch {
  static constexpr int64_t kBlockPairs = kQueryBlock / 2 * kKeyBlock;
  uint32_t *q_pairs, *g_pairs;
  float *g_wide, *d, *lse, *dq;
  uint32_t *k_pairs, *v_t, *k_rows;
  float *dk, *dv, *prob, *ds;
  uint32_t *prob_pairs, *ds_pairs;
  uint16_t* ds16;

  static int64_t words(const Problem& p) {
    const int64_t Lh = (p.L + 1) / 2;
    return Lh * (p.E + p.Ev) + p.L * p.Ev + 2 * p.L + p.L * p.E +
           (p.E / 2 + p.Ev / 2 + p.E + p.Ev) * kKeyBlock + kKeyBlock / 2 * p.E +
           2 * kQueryBlock * kKeyBlock + 2 * kBlockPairs + kQueryBlock * kKeyBlock / 2;
  }
  BackwardScratch(void* base, const Problem& p) {
    const int64_t Lh = (p.L + 1) / 2;
    Carve carve(base);
    q_pairs = carve.take<uint32_t>(Lh * p.E);
    g_pairs = carve.take<uint32_t>(Lh * p.Ev);
    g_wide = carve.take<float>(p.L * p.Ev);
    d = carve.take<float>(p.L);
    lse = carve.take<float>(p.L);
    dq = carve.take<float>(p.L * p.E);
    k_pairs = carve.take<uint32_t>(p.E / 2 * kKeyBlock);
    v_t = carve.take<uint32_t>(p.Ev / 2 * kKeyBlock);
    k_rows = carve.take<uint32_t>(kKeyBlock / 2 * p.E);
    dk = carve.take<float>(kKeyBlock * p.E);
    dv = carve.take<float>(kKeyBlock * p.Ev);
    prob = carve.take<float>(kQueryBlock * kKeyBlock);
    ds = carve.take<float>(kQueryBlock * kKeyBlock);
    prob_pairs = carve.take<uint32_t>(kBlockPairs);
    ds_pairs = carve.take<uint32_t>(kBlockPairs);
    ds16 = carve.take<uint16_t>(kQueryBlock * kKeyBlock);
  }
};

// A product with the keys as its rows, summing over the queries (the depth, in pairs) from a
// transposed block of [query pairs, keys]: the second half of the rows sums over the second
// half of the queries only.
void keys_by_halves(PairProduct q, bool halves) {
  q.a_transposed = true;
  if (!halves) return avx512_pair_gemm(q);
  PairProduct first = q, second = q;
  first.m = second.m = kHalf;
  second.pairs = kHalf / 2;
  second.a = q.a + kHalf / 2 * q.lda + kHalf;
  second.b = q.b + kHalf / 2 * q.ldb;
  second.c = q.c + kHalf * q.ldc;
  avx512_pair_gemm(first);
  avx512_pair_gemm(second);
}

// One block pair of the backward: queries [i0, i0 + nq) against keys [j0, j0 + nk) of the entry
// whose q and dO rows start at q_entry and g_entry, into dq, dk and dv.
void backward_block_pair(const Problem& p, const Problem::Offsets& at, const Bf16* q_entry,
                         const Bf16* g_entry, int64_t i0, int64_t j0, int64_t nk,
                         BackwardScratch& x) {
  const int64_t E = p.E, Ev = p.Ev;
  const int64_t nq = std::min(kQueryBlock, p.L - i0), nq_pairs = (nq + 1) / 2;
  const int64_t nk_pairs = (nk + 1) / 2;
  const bool halves = backward_halves(p, i0, j0, nq, nk, x.lse);
  // P = exp(scale q k^T - logsumexp): 0 where dropped, NaN in a row that keeps no key.
  scores_by_halves({nq, nk, E / 2, words(q_entry + i0 * p.q_row), p.q_row / 2, x.k_pairs, nk,
                    x.prob, kKeyBlock, false},
                   halves);
  scale_rows(x.prob, nq, nk, kKeyBlock, static_cast<float>(p.scale));
  mask_scores<Bf16, float>(p, at.mask, i0, nq, j0, nk, x.prob);
  exp_block<float>(p, i0, j0, x.prob, nq, nk, x.lse + i0, nullptr);
  // dv += P^T dO.
  avx512_pair_rows(x.prob, nq, nk, kKeyBlock, x.prob_pairs, nk);
  keys_by_halves({nk, Ev, nq_pairs, x.prob_pairs, nk, x.g_pairs + i0 / 2 * Ev, Ev, x.dv, Ev, true},
                 halves);
  // dS = P * (dO v^T - D). On the diagonal the quarter the products skip is never read.
  scores_by_halves({nq, nk, Ev / 2, words(g_entry + i0 * p.g_row), p.g_row / 2, x.v_t, nk, x.ds,
                    kKeyBlock, false},
                   halves);
  scores_gradient<float>(x.prob, x.d + i0, nq, nk, x.ds);
  // dq += dS k and dk += dS^T q (both scaled once at the end).
  avx512_narrow_rows(x.ds, nq, nk, kKeyBlock, x.ds16, 2 * nk_pairs);
  queries_by_halves({nq, E, nk_pairs, words(x.ds16), nk_pairs, x.k_rows, E, x.dq + i0 * E, E, true},
                    halves);
  avx512_pair_rows(x.ds, nq, nk, kKeyBlock, x.ds_pairs, nk);
  keys_by_halves({nk, E, nq_pairs, x.ds_pairs, nk, x.q_pairs + i0 / 2 * E, E, x.dk, E, true},
                 halves);
}

// rows x cols of `src` times `factor` into rows of `at`, as store_rows, with a bf16 output's
// rounding on vectors.
template <class U>
void store_gradient_rows(const float* src, int64_t rows, int64_t cols, float factor,
                         const Problem::Placement& at, U* dst) {
  if constexpr (std::is_same_v<U, Bf16>) {
    if (at.width == cols) {
      return avx512_narrow_scaled_rows(src, rows, cols, cols, factor, &dst->bits, at.row);
    }
  }
  store_rows<U, float>(src, rows, cols, factor, at, dst);
}

}  // namespace

// Operands [q, k, v, forward output [batch..., L, Ev + 1] of F, grad [batch..., L, Ev] (, mask)],
// as attention.cpp's backward; the gradients are stored as U. dk and dv sum over the queries in
// pairs of rows: their products read P and dS paired along the queries as transposed operands.
template <class F, class U>
void pair_attention_backward(const KernelArgs& args, const Problem& p) {
  const Bf16* q = args.inputs[0].as<Bf16>();
  const Bf16* k = args.inputs[1].as<Bf16>();
  const Bf16* v = args.inputs[2].as<Bf16>();
  const F* forward = args.inputs[3].as<F>();
  const Bf16* grad = args.inputs[4].as<Bf16>();
  U* out = args.output.as<U>();
  const int64_t L = p.L, S = p.S, E = p.E, Ev = p.Ev;
  const int64_t entries = p.batch.numel();
  const bool parallel = entries * L * S * (E + Ev) >= (int64_t{1} << 15);
  const auto scratch_bytes = static_cast<std::size_t>(BackwardScratch::words(p)) * 4;
  ComputePool& pool = args.pool;
  auto part = [&](int64_t entry, int thread) {
    const Problem::Offsets at = p.offsets(entry);
    prefetch_backward_entry(p, q, k, v, grad, entry + pool.threads());
    BackwardScratch x(pool.scratch(thread, scratch_bytes), p);
    const Bf16* q_entry = q + at.q;
    const Bf16* g_entry = grad + at.g;
    avx512_pair_rows(bits(q_entry), L, E, p.q_row, x.q_pairs, E);
    avx512_pair_rows(bits(g_entry), L, Ev, p.g_row, x.g_pairs, Ev);
    if constexpr (std::is_same_v<F, float>) {
      avx512_row_terms(forward + entry * L * (Ev + 1), bits(g_entry), p.g_row, L, Ev, x.d, x.lse);
    } else {
      as_compute<Bf16, float>(g_entry, L, Ev, p.g_row, x.g_wide);
      read_row_terms<F, float>(forward + entry * L * (Ev + 1), x.g_wide, L, Ev, x.d, x.lse);
    }
    std::fill(x.dq, x.dq + L * E, 0.0f);
    const auto scale = static_cast<float>(p.scale);
    for (int64_t j0 = 0; j0 < S; j0 += kKeyBlock) {
      const int64_t nk = std::min(kKeyBlock, S - j0);
      transpose_words(k + at.k + j0 * p.k_row, nk, E / 2, p.k_row / 2, x.k_pairs);
      transpose_words(v + at.v + j0 * p.v_row, nk, Ev / 2, p.v_row / 2, x.v_t);
      avx512_pair_rows(bits(k + at.k + j0 * p.k_row), nk, E, p.k_row, x.k_rows, E);
      std::fill(x.dk, x.dk + nk * E, 0.0f);
      std::fill(x.dv, x.dv + nk * Ev, 0.0f);
      for (int64_t i0 = 0; i0 < L; i0 += kQueryBlock) {
        if (causally_hidden(p, j0, std::min(L, i0 + kQueryBlock))) continue;
        backward_block_pair(p, at, q_entry, g_entry, i0, j0, nk, x);
      }
      store_gradient_rows<U>(x.dk, nk, E, scale, p.grads[1],
                             out + at.grads[1] + j0 * p.grads[1].row);
      store_gradient_rows<U>(x.dv, nk, Ev, 1.0f, p.grads[2],
                             out + at.grads[2] + j0 * p.grads[2].row);
    }
    store_gradient_rows<U>(x.dq, L, E, scale, p.grads[0], out + at.grads[0]);
  };
  if (parallel) {
    pool.run(entries, part);
  } else {
    for (int64_t i = 0; i < entries; ++i) part(i, 0);
  }
}

#else

bool takes_bf16_pairs(const Problem&) { return false; }
template <class U>
void pair_attention_forward(const KernelArgs&, const Problem&) {}
template <class F, class U>
void pair_attention_backward(const KernelArgs&, const Problem&) {}

#endif

template void pair_attention_forward<float>(const KernelArgs&, const Problem&);
template void pair_attention_forward<Bf16>(const KernelArgs&, const Problem&);
template void pair_attention_backward<float, float>(const KernelArgs&, const Problem&);
template void pair_attention_backward<float, Bf16>(const KernelArgs&, const Problem&);
template void pair_attention_backward<Bf16, Bf16>(const KernelArgs&, const Problem&);

}  // namespace axle::cpu::attention_detail
