// backends/cpu: what attention's kernels share (attention.cpp computes in the operands' precision
// or f32, attention_pairs.cpp bf16 operands on vdpbf16ps): the blocks, a call's geometry, and the
// steps on a block of scores. Private to backends/cpu.
#pragma once

#include <Eigen/Core>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "axle/backends/cpu/element.h"
#include "axle/backends/cpu/kernel.h"
#include "axle/backends/cpu/vector_math.h"
#include "axle/engine/shape.h"

namespace axle::cpu::attention_detail {

constexpr int64_t kQueryBlock = 64;
constexpr int64_t kKeyBlock = 64;

// One call's geometry: sizes, the batch, and each operand's element strides over the batch
// dims (0 where it broadcasts), row stride and first element (a view, executable.h, reads the
// rows of a larger buffer), and where the backward writes each gradient.
struct Problem {
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  Shape batch;
  using Strides = std::array<int64_t, Shape::kMaxRank>;
  Strides q_strides{}, k_strides{}, v_strides{}, g_strides{}, mask_strides{};
  int64_t q_row = 0, k_row = 0, v_row = 0, g_row = 0;  // row strides (g: the backward's grad)
  int64_t q_base = 0, k_base = 0, v_base = 0, g_base = 0;
  int64_t mask_row = 0, mask_col = 0;  // the mask's strides along L and S
  const void* mask = nullptr;
  bool bool_mask = false, causal = false;
  double scale = 1;

  // Where the backward stores dq, dk and dv: each one's first element, strides over the batch
  // dims and row stride, and the width its rows are padded to with zeros.
  struct Placement {
    int64_t base = 0, row = 0, width = 0;
    Strides strides{};
  };
  std::array<Placement, 3> grads;

  // Element offsets of batch entry `entry` (row-major over `batch`) in q, k, v, the grad, the
  // mask, and the backward's dq, dk and dv.
  struct Offsets {
    int64_t q = 0, k = 0, v = 0, g = 0, mask = 0;
    std::array<int64_t, 3> grads{};
  };
  [[nodiscard]] Offsets offsets(int64_t entry) const noexcept {
    Offsets o{q_base, k_base, v_base, g_base, 0, {grads[0].base, grads[1].base, grads[2].base}};
    for (int d = batch.rank() - 1; d >= 0; --d) {
      const int64_t i = entry % batch[d];
      entry /= batch[d];
      const auto at = static_cast<std::size_t>(d);
      o.q += i * q_strides[at];
      o.k += i * k_strides[at];
      o.v += i * v_strides[at];
      o.g += i * g_strides[at];
      o.mask += i * mask_strides[at];
      for (std::size_t b = 0; b < 3; ++b) o.grads[b] += i * grads[b].strides[at];
    }
    return o;
  }
};

// rows x cols of `src` (row stride ld) as contiguous T in `dst`: `src` itself when its rows are
// contiguous already, else copied row by row.
template <class T>
const T* contiguous_rows(const T* src, int64_t rows, int64_t cols, int64_t ld, T* dst) {
  if (ld == cols) return src;
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * ld, src + r * ld + cols, dst + r * cols);
  return dst;
}

// rows x cols elements of T at `src` (row stride ld) as contiguous A: the buffer itself when it
// already is, else copied (and widened) into `scratch`.
template <class T, class A>
const A* as_compute(const T* src, int64_t rows, int64_t cols, int64_t ld, A* scratch) {
  if constexpr (std::is_same_v<T, A>) {
    return contiguous_rows(src, rows, cols, ld, scratch);
  } else {
    if (ld == cols) {
      widen_block(src, scratch, rows * cols);
    } else {
      for (int64_t r = 0; r < rows; ++r) widen_block(src + r * ld, scratch + r * cols, cols);
    }
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

// rows x cols elements of T at `src` (row stride ld) widened and multiplied by `scale` into
// `dst`: the softmax scale is folded into q once, instead of into every score.
template <class T, class A>
const A* scaled_copy(const T* src, int64_t rows, int64_t cols, int64_t ld, A scale, A* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<T, A>) {
      scale_into(src + r * ld, cols, scale, dst + r * cols);
    } else {
      widen_block(src + r * ld, dst + r * cols, cols);
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] *= scale;
    }
  }
  return dst;
}

// rows x cols of `src` times `factor` into rows of `at` (row stride and padded width from
// `at`), the rest of each row up to the width 0.
template <class U, class A>
void store_rows(const A* src, int64_t rows, int64_t cols, A factor, const Problem::Placement& at,
                U* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    scale_into(src + r * cols, cols, factor, dst + r * at.row);
    for (int64_t c = cols; c < at.width; ++c) dst[r * at.row + c] = store<U>(A(0));
  }
}

#if defined(__AVX2__)
// An 8 x 8 block of floats (row stride ld) transposed into dst (row stride ldd).
inline void transpose_eight(const float* src, int64_t ld, float* dst, int64_t ldd) {
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
// stride kKeyBlock) under the explicit mask, if any: -inf where dropped, an added mask added.
// Causal masking is exp_block's.
template <class T, class A>
void mask_scores(const Problem& p, int64_t mask_base, int64_t i0, int64_t nq, int64_t j0,
                 int64_t nk, A* s) {
  constexpr A kMinusInf = -std::numeric_limits<A>::infinity();
  if (!p.mask) return;
  for (int64_t i = 0; i < nq; ++i) {
    A* row = s + i * kKeyBlock;
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

// A causal block pair on the diagonal, whole blocks: queries [i0, i0 + kHalf) keep none of the
// keys [j0 + kHalf, j0 + kKeyBlock), so each of its products skips that quarter: the rows of
// the first half of the queries take (or sum over) the first half of the keys only. Every value
// the products still compute keeps its bits (it skips only terms with a zero probability), and
// the softmax and its gradient set the skipped scores and probabilities themselves.
static_assert(kQueryBlock == kKeyBlock && kQueryBlock % 4 == 0);
constexpr int64_t kHalf = kQueryBlock / 2;
inline bool diagonal_halves(const Problem& p, int64_t i0, int64_t j0, int64_t nq, int64_t nk) {
  return p.causal && i0 == j0 && nq == kQueryBlock && nk == kKeyBlock;
}

// diagonal_halves for the backward, unless a query of the first half keeps no key (logsumexp
// -inf): its NaN probabilities make every key's gradient NaN, so the products take it whole.
template <class A>
bool backward_halves(const Problem& p, int64_t i0, int64_t j0, int64_t nq, int64_t nk,
                     const A* lse) {
  return diagonal_halves(p, i0, j0, nq, nk) &&
         std::none_of(lse + i0, lse + i0 + kHalf, [](A v) { return std::isinf(v); });
}

// The keys [j0, j0 + kept) of a block of nk that query i0 + i keeps under causal masking (all nk
// without it).
inline int64_t causal_kept(const Problem& p, int64_t i0, int64_t i, int64_t j0, int64_t nk) {
  return p.causal ? std::clamp<int64_t>(i0 + i + 1 - j0, 0, nk) : nk;
}

/// A block pair's scores s (queries [i0, i0 + nq) against keys [j0, j0 + nk), row stride
/// kKeyBlock) replaced by exp(score - shifts[row]), each row's sum into sums when not null, with
/// causal masking: a dropped key's value is exp(-inf) = 0. Rows go in groups of four (exp_rows
/// interleaves them); on a block the diagonal crosses, a group's exponentials stop at the keys
/// its last row keeps and the rest of its rows are set to 0, so such a block takes about half of
/// them. Each value and sum has the bits the whole rows give (a sum adds no more zeros). A
/// group with a row whose shift is -inf (it keeps no key) takes whole rows, so that row is NaN
/// throughout, as exp(-inf - -inf) makes it.
template <class A>
void exp_block(const Problem& p, int64_t i0, int64_t j0, A* s, int64_t nq, int64_t nk,
               const A* shifts, A* sums) {
  constexpr A kMinusInf = -std::numeric_limits<A>::infinity();
  if (!p.causal || j0 + nk <= i0 + 1) return exp_rows(s, nq, nk, kKeyBlock, shifts, sums);
  constexpr int64_t kGroup = 4;
  for (int64_t r = 0; r < nq; r += kGroup) {
    const int64_t rows = std::min(kGroup, nq - r);
    const bool none_empty =
        std::all_of(shifts + r, shifts + r + rows, [](A shift) { return shift != kMinusInf; });
    const int64_t end = none_empty ? causal_kept(p, i0, r + rows - 1, j0, nk) : nk;
    for (int64_t i = r; i < r + rows; ++i) {
      A* row = s + i * kKeyBlock;
      std::fill(row + causal_kept(p, i0, i, j0, nk), row + end, kMinusInf);
      std::fill(row + end, row + nk, A(0));
    }
    exp_rows(s + r * kKeyBlock, rows, end, kKeyBlock, shifts + r, sums ? sums + r : nullptr);
  }
}

/// The largest of n > 0 values (vector maxima: the order of a maximum does not matter).
template <class A>
A row_max(const A* x, int64_t n) {
#if defined(__AVX2__)
  if constexpr (std::is_same_v<A, float>) {
    __m256 top = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) top = _mm256_max_ps(top, _mm256_loadu_ps(x + j));
    __m128 half = _mm_max_ps(_mm256_castps256_ps128(top), _mm256_extractf128_ps(top, 1));
    half = _mm_max_ps(half, _mm_movehl_ps(half, half));
    half = _mm_max_ss(half, _mm_movehdup_ps(half));
    float result = _mm_cvtss_f32(half);
    for (; j < n; ++j) result = std::max(result, x[j]);
    return result;
  }
#endif
  return ConstArrayMap<A>(x, n).maxCoeff();
}

// One key block's scores `s` (queries [i0, i0 + nq) against keys [j0, j0 + nk), row stride
// kKeyBlock) into the online softmax of their queries: each row's running maximum `top` and
// sum `total` updated, the output accumulator `acc` (rows of Ev) rescaled where the maximum
// grew, and s replaced by the block's exp(score - top) (exp_block: causal masking applied), or
// zeros in a row whose keys are all dropped so far.
template <class A>
void softmax_step(const Problem& p, int64_t i0, int64_t j0, A* s, int64_t nq, int64_t nk,
                  int64_t Ev, A* top, A* total, A* acc) {
  constexpr A kMinusInf = -std::numeric_limits<A>::infinity();
  A new_top[kQueryBlock] = {}, sum[kQueryBlock];  // initialised: GCC cannot see nq <= kQueryBlock
  for (int64_t i = 0; i < nq; ++i) {
    const int64_t kept = causal_kept(p, i0, i, j0, nk);
    new_top[i] = std::max(top[i], kept > 0 ? row_max(s + i * kKeyBlock, kept) : kMinusInf);
  }
  exp_block(p, i0, j0, s, nq, nk, new_top, sum);
  for (int64_t i = 0; i < nq; ++i) {
    if (new_top[i] == kMinusInf) {  // every key so far dropped: nothing to add yet
      ArrayMap<A>(s + i * kKeyBlock, nk).setZero();
      continue;
    }
    // exp(top - new_top), without the call where its value is exact: 1 where the maximum held
    // (most rows of a block after the first), 0 where it was -inf and is now a number.
    const bool was_empty = top[i] == kMinusInf && !std::isnan(new_top[i]);
    const A rescale = top[i] == new_top[i] ? A(1)
                      : was_empty          ? A(0)
                                           : std::exp(top[i] - new_top[i]);
    total[i] = total[i] * rescale + sum[i];
    top[i] = new_top[i];
    if (rescale != A(1)) ArrayMap<A>(acc + i * Ev, Ev) *= rescale;
  }
}

// The forward's rows [O (Ev), logsumexp] of nq queries at `o` from their accumulated outputs and
// softmax sums.
template <class U, class A>
void store_forward_rows(const A* acc, const A* top, const A* total, int64_t nq, int64_t Ev, U* o) {
  constexpr A kMinusInf = -std::numeric_limits<A>::infinity();
  constexpr A kNan = std::numeric_limits<A>::quiet_NaN();
  for (int64_t i = 0; i < nq; ++i) {
    // A query that keeps no key: NaN, as softmax over only -inf gives in torch's math path.
    const bool none = total[i] == A(0);
    const A inverse = none ? kNan : A(1) / total[i];
    scale_into(acc + i * Ev, Ev, inverse, o + i * (Ev + 1));
    o[i * (Ev + 1) + Ev] = store<U>(none ? kMinusInf : top[i] + std::log(total[i]));
  }
}

// Whether causal masking drops every key of [j0, ...) for queries before i_end.
inline bool causally_hidden(const Problem& p, int64_t j0, int64_t i_end) {
  return p.causal && j0 >= i_end;
}

// ---- prefetching -------------------------------------------------------------------------------
// The forward's parts (entry, query block) and the backward's entries are claimed in order, one
// per thread in turn, so a thread's next one is likely `threads` on: these fetch its operands'
// rows while this one computes. A head's rows are short pieces far apart (64 bytes every 768 in
// a GPT's [B, T, 3 H D] projection), which the hardware prefetchers do not follow. The bf16 path
// (attention_pairs.cpp) takes them; the f32 path's longer arithmetic hides the wait already.

// Fetches `rows` rows of `bytes` bytes from `at`, `stride` elements apart.
template <class T>
void prefetch_rows(const T* at, int64_t rows, int64_t stride, int64_t bytes) {
  for (int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(at + r * stride);
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
  }
}

// The q rows and the keys' k and v rows the forward's part `part` reads (if there is one).
template <class T>
void prefetch_forward_part(const Problem& p, const T* q, const T* k, const T* v, int64_t part,
                           int64_t query_blocks) {
  if (part >= p.batch.numel() * query_blocks) return;
  const Problem::Offsets at = p.offsets(part / query_blocks);
  const int64_t i0 = part % query_blocks * kQueryBlock;
  const int64_t keys = p.causal ? std::min(p.S, i0 + kQueryBlock) : p.S;
  const auto size = static_cast<int64_t>(sizeof(T));
  prefetch_rows(q + at.q + i0 * p.q_row, std::min(kQueryBlock, p.L - i0), p.q_row, size * p.E);
  prefetch_rows(k + at.k, keys, p.k_row, size * p.E);
  prefetch_rows(v + at.v, keys, p.v_row, size * p.Ev);
}

// The q, k, v and gradient rows of the backward's entry `entry` (if there is one).
template <class T>
void prefetch_backward_entry(const Problem& p, const T* q, const T* k, const T* v, const T* grad,
                             int64_t entry) {
  if (entry >= p.batch.numel()) return;
  const Problem::Offsets at = p.offsets(entry);
  const auto size = static_cast<int64_t>(sizeof(T));
  prefetch_rows(q + at.q, p.L, p.q_row, size * p.E);
  prefetch_rows(k + at.k, p.S, p.k_row, size * p.E);
  prefetch_rows(v + at.v, p.S, p.v_row, size * p.Ev);
  prefetch_rows(grad + at.g, p.L, p.g_row, size * p.Ev);
}

// Per query row of one entry: D = rowsum(dO * O) and the logsumexp the forward kept, read from
// the forward's output rows [O (Ev), logsumexp]. Each row's dot runs in column order; rows go
// eight at a time, so their chains overlap instead of waiting on one add after another.
template <class U, class A>
void read_row_terms(const U* forward, const A* grad, int64_t L, int64_t Ev, A* d, A* lse) {
  constexpr int64_t kGroup = 8;
  auto dots = [&](int64_t i, auto rows) {
    constexpr int64_t kRows = decltype(rows)::value;
    A dot[kRows] = {};
    for (int64_t c = 0; c < Ev; ++c) {
      for (int64_t r = 0; r < kRows; ++r) {
        dot[r] += grad[(i + r) * Ev + c] * static_cast<A>(load(forward[(i + r) * (Ev + 1) + c]));
      }
    }
    for (int64_t r = 0; r < kRows; ++r) {
      d[i + r] = dot[r];
      lse[i + r] = static_cast<A>(load(forward[(i + r) * (Ev + 1) + Ev]));
    }
  };
  int64_t i = 0;
  for (; i + kGroup <= L; i += kGroup) dots(i, std::integral_constant<int64_t, kGroup>{});
  for (; i < L; ++i) dots(i, std::integral_constant<int64_t, 1>{});
}

// dS = P * (dO v^T - D), row by row over a block pair: `ds` holds dO v^T on entry.
template <class A>
void scores_gradient(const A* prob, const A* d, int64_t nq, int64_t nk, A* ds) {
  for (int64_t i = 0; i < nq; ++i) {
    ArrayMap<A> row(ds + i * kKeyBlock, nk);
    row = ConstArrayMap<A>(prob + i * kKeyBlock, nk) * (row - d[i]);
  }
}

// ---- bf16 operands on vdpbf16ps (attention_pairs.cpp) ---------------------------------------

/// Whether bf16 operands of `p` take their block products on vdpbf16ps: the kernels run on
/// AVX512_BF16 and the head widths are even (a row's values are whole pairs).
[[nodiscard]] bool takes_bf16_pairs(const Problem& p);
/// The forward and the backward with bf16 operands and outputs of U (float or Bf16); the
/// backward reads a forward output of F.
template <class U>
void pair_attention_forward(const KernelArgs& args, const Problem& p);
template <class F, class U>
void pair_attention_backward(const KernelArgs& args, const Problem& p);

}  // namespace axle::cpu::attention_detail
